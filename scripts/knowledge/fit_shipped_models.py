"""Fit the models of the shipped knowledge and write them beside it (knowledge/data/
fitted-models.pkl.xz and its key, fitted-models.json), so a fresh store answers without fitting.

Run from the repository root after changing knowledge/data or the fitting code (the test
tests/knowledge/test_shipped_models.py says when):

    python scripts/knowledge/fit_shipped_models.py
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # this checkout's packages first

from knowledge.cache import CACHE_FORMAT, KnowledgeModels, content_key, shipped_models_key
from knowledge.shipped_models import SHIPPED_MODELS, write_shipped
from knowledge.store import TrialStore
from knowledge.surrogates import DEFAULT_FAMILY
from knowledge.transfer import import_shipped_knowledge


def main() -> int:
    key = shipped_models_key(DEFAULT_FAMILY)
    with tempfile.TemporaryDirectory(prefix="advisor-shipped-fit-") as tmp:
        store = TrialStore(f"sqlite:///{Path(tmp) / 'shipped.db'}")
        import_shipped_knowledge(store)
        if content_key(store) != key.content:
            print("error: a fresh store of the shipped files has another content key than "
                  "the files themselves", file=sys.stderr)
            return 1
        started = time.perf_counter()
        models = KnowledgeModels.fit(store, family=DEFAULT_FAMILY)
        store.close()
    write_shipped(models, key, CACHE_FORMAT)
    print(f"{SHIPPED_MODELS.name}: {len(models.contexts)} contexts from {models.data.trials} "
          f"trials, fitted in {time.perf_counter() - started:.0f} s, "
          f"{SHIPPED_MODELS.stat().st_size / 1e6:.2f} MB (content {key.content}, code {key.code})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
