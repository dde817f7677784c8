"""Fits contexts' models in a child process: ``python -m knowledge.fit_worker JOBS RESULTS``.

:meth:`knowledge.cache.KnowledgeModels.fit` hands each extra core a share of the contexts as a
pickle of :data:`knowledge.cache.FitJob` tuples and reads the fitted
:class:`~knowledge.surrogates.ContextModels` back from ``RESULTS``. A plain child process, not a
``multiprocessing`` pool: a pool's ``spawn`` re-runs the caller's main script, which a user's
script without a ``__main__`` guard cannot survive, and ``fork`` is unsafe in a threaded server.
"""

from __future__ import annotations

import pickle
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    from knowledge.cache import fit_job  # here: the module is imported only by the child

    if len(argv) != 2:
        print("usage: python -m knowledge.fit_worker JOBS RESULTS", file=sys.stderr)
        return 2
    jobs = pickle.loads(Path(argv[0]).read_bytes())  # written by this package's parent process
    results = [fit_job(job) for job in jobs]
    tmp = Path(argv[1] + ".tmp")
    tmp.write_bytes(pickle.dumps(results, protocol=pickle.HIGHEST_PROTOCOL))
    tmp.replace(argv[1])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
