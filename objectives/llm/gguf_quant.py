"""Quantized GGUF files of the named shapes, made with llama.cpp's own quantizer and cached.

The ``quant`` knob of the llamacpp target names a llama.cpp file type (``Q8_0``, ``Q4_K_M``,
...). The F16 file from :mod:`objectives.llm.gguf_model` is the source; every other type is made
once per shape and type with ``llama_model_quantize`` (the function ``llama-quantize`` runs,
through the llama-cpp-python bindings, in a child process) and cached next to it, named by the
source's fingerprint, the type and the quantizer's version. The quantizer writes to a temporary
name that is renamed when it is done, so parallel trials at worst quantize twice and never read
half a file.

Where a tensor's rows do not divide into the type's blocks (K-quants need multiples of 256; the
``tiny-llama`` shape's rows are 64 or 128 wide), llama.cpp falls back to a type that fits for
that tensor, as it does for real models: :func:`tensor_types` reads what the file holds, and
each trial records it (``gguf_tensor_types``).
"""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from advisor.errors import ConfigRejectedError, EngineStartError, EngineUnavailableError
from objectives.llm.gguf_model import fingerprint, source_gguf_path, write_source_gguf

__all__ = ["SOURCE_TYPE", "QuantizedFile", "ftype_of", "quantized_gguf", "quantized_path",
           "tensor_types"]

#: The type :func:`objectives.llm.gguf_model.write_source_gguf` writes: needs no quantizing.
SOURCE_TYPE = "F16"
_FTYPE_PREFIX = "LLAMA_FTYPE_MOSTLY_"
_REASON_CHARS = 2000


@dataclass(frozen=True)
class QuantizedFile:
    """A GGUF of one shape and type: where it is, whether it was already cached, and how long
    quantizing it took when it was not (0 for the source type or a cached file)."""

    path: Path
    quant: str
    cached: bool
    quantize_s: float


def _quantizer_version() -> str:
    try:
        return importlib.metadata.version("llama_cpp_python")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def ftype_of(quant: str) -> int:
    """llama.cpp's ``llama_ftype`` value for ``quant`` (e.g. ``Q4_K_M`` -> 15), read from the
    installed bindings. Raises :class:`ConfigRejectedError` for a type this release lacks."""
    try:
        import llama_cpp
    except ImportError:
        raise EngineUnavailableError(
            "quantizing a GGUF model needs llama-cpp-python: pip install 'slo-advisor[llamacpp]'"
        ) from None
    value = getattr(llama_cpp, f"{_FTYPE_PREFIX}{quant}", None)
    if not isinstance(value, int):
        known = sorted(n[len(_FTYPE_PREFIX):] for n in dir(llama_cpp)
                       if n.startswith(_FTYPE_PREFIX))
        raise ConfigRejectedError(f"llama.cpp has no file type {quant!r}; it knows: "
                                  f"{', '.join(known)}")
    return value


def quantized_path(model_dir: Path, shape: str, quant: str) -> Path:
    """Where the ``quant`` file of ``shape`` is cached (the source itself for F16)."""
    if quant == SOURCE_TYPE:
        return source_gguf_path(model_dir, shape)
    return Path(model_dir) / f"{shape}-{fingerprint(shape)}-{quant}-q{_quantizer_version()}.gguf"


#: Run in a child process (``python -c``): the quantizer's log goes to a pipe that becomes the
#: reason of a failure, and the trial process never loads llama.cpp's libraries.
_QUANTIZE = """
import ctypes, sys
import llama_cpp
# llama.cpp's log as raw bytes (the bindings' own logger decodes each chunk and fails on split
# UTF-8); kept in a name so the C callback outlives the call.
raw_log = llama_cpp.llama_log_callback(lambda level, text, data: sys.stderr.buffer.write(text))
llama_cpp.llama_log_set(raw_log, None)
llama_cpp.llama_backend_init()
params = llama_cpp.llama_model_quantize_default_params()
params.ftype = int(sys.argv[3])
params.nthread = int(sys.argv[4])
sys.exit(llama_cpp.llama_model_quantize(sys.argv[1].encode(), sys.argv[2].encode(),
                                        ctypes.byref(params)))
"""


def quantized_gguf(model_dir: Path, shape: str, quant: str, *, threads: int = 0,
                   timeout_s: float = 1800.0) -> QuantizedFile:
    """The GGUF of ``shape`` in type ``quant``, written (source) and quantized when missing.

    ``threads`` <= 0 lets llama.cpp use every core. Raises :class:`ConfigRejectedError` for a
    type llama.cpp does not know and :class:`EngineStartError` when quantizing fails.
    """
    source = write_source_gguf(model_dir, shape)
    path = quantized_path(model_dir, shape, quant)
    if path.is_file():
        return QuantizedFile(path, quant, cached=True, quantize_s=0.0)
    ftype = ftype_of(quant)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}-", dir=path.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    began = time.perf_counter()
    try:
        done = subprocess.run(
            [sys.executable, "-c", _QUANTIZE, str(source), str(tmp), str(ftype), str(threads)],
            capture_output=True, text=True, errors="replace", timeout=timeout_s,
            stdin=subprocess.DEVNULL)
        if done.returncode != 0:
            tail = (done.stdout + done.stderr).strip()[-_REASON_CHARS:]
            raise EngineStartError(f"llama.cpp could not quantize {source.name} to {quant} "
                                   f"(exit code {done.returncode})\n{tail}".rstrip())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return QuantizedFile(path, quant, cached=False, quantize_s=time.perf_counter() - began)


def tensor_types(path: Path) -> dict[str, int]:
    """How many tensors of each ggml type ``path`` holds (e.g. ``{"f32": 5, "q5_0": 12}``):
    what a file type really is where llama.cpp fell back for tensors its blocks do not fit."""
    import gguf

    counts: dict[str, int] = {}
    try:
        tensors = gguf.GGUFReader(path).tensors
    except (OSError, ValueError) as exc:  # a damaged file: the server will say what it thinks
        raise EngineStartError(f"cannot read {path.name}: {exc}") from None
    for tensor in tensors:
        name = tensor.tensor_type.name.lower()
        counts[name] = counts.get(name, 0) + 1
    return dict(sorted(counts.items()))
