"""Dense decoder shapes from a Hugging Face ``config.json``: parse, check, name and measure them.

A shape is what serving speed depends on (random weights, see :mod:`objectives.llm.models`):
hidden size, MLP width, layers, attention and key/value heads, head dimension, vocabulary, context
limit, tied embeddings, biases, dtype. :func:`parse_config` reads a ``config.json`` (a path, or
``key=value`` fields) of a Llama, Mistral or Qwen2 dense decoder and refuses anything else with
the reason. :func:`shape_name` names a shape: the built-in name when the shape is a built-in one
(``llama-3-8b``), else a canonical name that spells out every speed-relevant field
(``qwen2-h3584-i18944-l28-a28-kv4-v152064-ctx131072``). The canonical name *is* the shape:
:func:`config_from_name` rebuilds the config from it, so trials keyed by it carry their shape's
features into the store, and any process (a trial's child, another machine, a model fitted
later) recovers them without the original file.

Fields that change no timing with random weights (rope scaling and theta, norm epsilon, token
ids, initializer range) are not part of the name and take the family's defaults when the config
is rebuilt.

The named shapes (:data:`MODEL_SHAPES`, which also answers canonical names) and
:func:`parameter_count` live here too: naming a shape needs the named ones and the named table
needs the canonical names, so they are one concern (objectives/llm/models.py re-exports them
beside the model directories it writes).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml

from advisor.errors import WorkloadError

__all__ = [
    "ARCHITECTURES",
    "KV_DTYPE_BYTES",
    "MODEL_SHAPES",
    "N_SPECIAL_TOKENS",
    "PUBLISHED_MODELS",
    "ShapeFeatures",
    "checkpoint_id",
    "config_from_name",
    "display_name",
    "features_of",
    "fields_text",
    "is_canonical_name",
    "load_model_config",
    "model_config",
    "model_key",
    "parameter_count",
    "parse_config",
    "shape_features",
    "shape_name",
]

#: The special tokens of the model directories' tokenizer (objectives/llm/models.py): PAD_TOKEN=0,
#: <s>=1, </s>=2; a vocabulary must have room beyond them.
N_SPECIAL_TOKENS = 3
#: Supported architectures -> their ``model_type`` (the name's family prefix).
ARCHITECTURES: dict[str, str] = {"LlamaForCausalLM": "llama", "MistralForCausalLM": "mistral",
                                 "Qwen2ForCausalLM": "qwen2"}
_FAMILIES = {v: k for k, v in ARCHITECTURES.items()}
#: Why well-known architectures that are not dense decoders are refused.
_REFUSED: dict[str, str] = {
    "MixtralForCausalLM": "a mixture of experts", "Qwen2MoeForCausalLM": "a mixture of experts",
    "Qwen3MoeForCausalLM": "a mixture of experts", "DeepseekV2ForCausalLM": "a mixture of experts",
    "DeepseekV3ForCausalLM": "a mixture of experts", "DbrxForCausalLM": "a mixture of experts",
    "GptOssForCausalLM": "a mixture of experts", "JambaForCausalLM": "a hybrid Mamba model",
    "MambaForCausalLM": "a state-space model, not an attention decoder",
    "T5ForConditionalGeneration": "an encoder-decoder", "BartForConditionalGeneration":
    "an encoder-decoder", "BertForMaskedLM": "an encoder, not a decoder",
}
#: Keys whose presence marks a mixture of experts whatever the architecture says.
_MOE_KEYS = ("num_experts", "num_local_experts", "n_routed_experts", "moe_intermediate_size")
#: Bytes per element of a KV-cache dtype (vLLM's ``kv_cache_dtype`` names and torch's).
KV_DTYPE_BYTES: dict[str, int] = {"float32": 4, "float16": 2, "bfloat16": 2, "half": 2,
                                  "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1, "int8": 1}
_DTYPE_TAG = {"float16": "fp16", "float32": "fp32"}  # bfloat16, the usual one, is not spelled
_TAG_DTYPE = {v: k for k, v in _DTYPE_TAG.items()}
_REQUIRED = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
             "vocab_size")
#: What transformers' config classes default to when config.json leaves a field out.
_HF_DEFAULTS: dict[str, dict[str, Any]] = {
    "llama": {"max_position_embeddings": 2048, "rms_norm_eps": 1e-6, "rope_theta": 10000.0},
    "mistral": {"max_position_embeddings": 131072, "num_key_value_heads": 8,
                "rms_norm_eps": 1e-6, "rope_theta": 10000.0},
    "qwen2": {"max_position_embeddings": 32768, "num_key_value_heads": 32, "rms_norm_eps": 1e-6,
              "rope_theta": 10000.0},
}
#: One canonical name: family, then h(idden) i(ntermediate) l(ayers) a(ttention heads) kv(heads)
#: [d(head dim) when not hidden/heads] v(ocab) ctx(max positions), then the optional flags.
_NAME = re.compile(
    r"^(?P<family>llama|mistral|qwen2)-h(?P<h>\d+)-i(?P<i>\d+)-l(?P<l>\d+)-a(?P<a>\d+)"
    r"-kv(?P<kv>\d+)(?:-d(?P<d>\d+))?-v(?P<v>\d+)-ctx(?P<ctx>\d+)(?P<tied>-tied)?"
    r"(?P<attnbias>-attnbias)?(?P<mlpbias>-mlpbias)?(?:-swa(?P<swa>\d+))?"
    r"(?:-(?P<dtype>fp16|fp32))?$")


@dataclass(frozen=True)
class ShapeFeatures:
    """What a model fitted over shapes needs to know of one: sizes, not weights.

    ``kv_bytes_per_token`` counts keys and values of every layer at the config's dtype (see
    :meth:`kv_bytes_at` for another KV-cache dtype); ``parameters`` is
    :func:`parameter_count`.
    """

    name: str
    architecture: str
    parameters: int
    kv_bytes_per_token: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    hidden: int
    intermediate: int
    vocab: int
    max_position_embeddings: int
    tied_embeddings: bool
    dtype: str

    def kv_bytes_at(self, dtype: str) -> int:
        """KV-cache bytes per token with the cache stored as ``dtype`` (``fp8``, ``auto``...)."""
        if dtype == "auto":
            dtype = self.dtype
        if dtype not in KV_DTYPE_BYTES:
            raise WorkloadError(f"unknown KV-cache dtype {dtype!r}; known: "
                                f"{', '.join(sorted(KV_DTYPE_BYTES))}, auto")
        return 2 * self.layers * self.kv_heads * self.head_dim * KV_DTYPE_BYTES[dtype]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def load_model_config(spec: str) -> dict[str, Any]:
    """The config given as ``spec``: a ``config.json`` path (or the directory holding it), or
    ``key=value`` fields separated by commas (values read as YAML scalars, e.g.
    ``model_type=qwen2,hidden_size=3584,...``), checked by :func:`parse_config`."""
    text = spec.strip()
    path = Path(text).expanduser()
    if path.is_dir():
        path = path / "config.json"
    if path.is_file():
        try:
            raw = json.loads(path.read_text())
        except OSError as exc:
            raise WorkloadError(f"cannot read model config {path}: {exc.strerror or exc}"
                                ) from None
        except ValueError as exc:
            raise WorkloadError(f"model config {path} is not valid JSON: {exc}") from None
        if not isinstance(raw, dict):
            raise WorkloadError(f"model config {path} must hold a JSON object, got "
                                f"{type(raw).__name__}")
        return parse_config(raw, where=str(path))
    if "=" not in text:
        raise WorkloadError(f"model config {spec!r}: no such file, and not KEY=VALUE fields "
                            "(e.g. model_type=llama,hidden_size=2048,...)")
    return parse_config(_fields(text), where="--model-config fields")


def _fields(text: str) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    for item in (p.strip() for p in text.split(",")):
        if not item:
            continue
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise WorkloadError(f"model config field {item!r} is not KEY=VALUE")
        try:
            fields[key.strip()] = yaml.safe_load(value.strip())
        except yaml.YAMLError:
            fields[key.strip()] = value.strip()
    return fields


def parse_config(raw: Mapping[str, Any], *, where: str = "model config") -> dict[str, Any]:
    """A checked, normalised copy of the ``config.json`` ``raw`` of a dense decoder: every field
    the shape needs present (transformers' defaults filled in where the file may omit one) and
    consistent. Raises :class:`WorkloadError` naming the unsupported architecture or the broken
    rule."""
    family = _family(raw, where)
    config: dict[str, Any] = {**_HF_DEFAULTS[family], **raw}
    config["model_type"] = family
    config["architectures"] = [_FAMILIES[family]]
    missing = [k for k in _REQUIRED if config.get(k) is None]
    if missing:
        raise WorkloadError(f"{where}: missing {', '.join(missing)} (a {_FAMILIES[family]} "
                            "config.json has them)")
    config.setdefault("num_key_value_heads", config["num_attention_heads"])
    if config.get("num_key_value_heads") is None:
        config["num_key_value_heads"] = config["num_attention_heads"]
    for key in (*_REQUIRED, "num_key_value_heads", "max_position_embeddings"):
        config[key] = _positive_int(config[key], key, where)
    hidden, heads = config["hidden_size"], config["num_attention_heads"]
    kv_heads = config["num_key_value_heads"]
    if config.get("head_dim") is None:
        if hidden % heads:
            raise WorkloadError(f"{where}: num_attention_heads {heads} must divide hidden_size "
                                f"{hidden} (or give head_dim)")
        config.pop("head_dim", None)
    else:
        config["head_dim"] = _positive_int(config["head_dim"], "head_dim", where)
    head_dim = int(config.get("head_dim") or hidden // heads)
    if heads % kv_heads:
        raise WorkloadError(f"{where}: num_key_value_heads {kv_heads} must divide "
                            f"num_attention_heads {heads}")
    if head_dim % 2:
        raise WorkloadError(f"{where}: the head dimension {head_dim} must be even (rotary "
                            "embeddings rotate pairs)")
    if config["vocab_size"] <= N_SPECIAL_TOKENS:
        raise WorkloadError(f"{where}: vocab_size {config['vocab_size']} must exceed "
                            f"{N_SPECIAL_TOKENS} (the special tokens)")
    act = config.get("hidden_act", "silu")
    if act != "silu":
        raise WorkloadError(f"{where}: hidden_act {act!r}: only the SiLU-gated MLP of these "
                            "architectures is modelled")
    if config.get("quantization_config"):
        raise WorkloadError(f"{where}: has a quantization_config; give the unquantized "
                            "checkpoint's config.json (quantization is a knob of the engine)")
    dtype = config.get("torch_dtype") or config.get("dtype") or "bfloat16"
    if dtype not in ("bfloat16", "float16", "float32"):
        raise WorkloadError(f"{where}: torch_dtype {dtype!r}; expected bfloat16, float16 or "
                            "float32")
    config["torch_dtype"] = dtype
    config.pop("dtype", None)
    for flag in ("tie_word_embeddings", "attention_bias", "mlp_bias"):
        if not isinstance(config.get(flag, False), bool):
            raise WorkloadError(f"{where}: {flag} must be true or false, got {config[flag]!r}")
    config["tie_word_embeddings"] = bool(config.get("tie_word_embeddings", False))
    if family == "qwen2" and config.get("use_sliding_window"):
        raise WorkloadError(f"{where}: use_sliding_window is on; Qwen2 sliding-window "
                            "attention is not modelled (turn it off, as the published "
                            "checkpoints do)")
    if family != "mistral":
        config.pop("sliding_window", None)  # off (Qwen2) or no such field (Llama)
    elif config.get("sliding_window") is not None:
        config["sliding_window"] = _positive_int(config["sliding_window"], "sliding_window",
                                                 where)
    if family != "llama" and (config.get("attention_bias") or config.get("mlp_bias")):
        raise WorkloadError(f"{where}: attention_bias / mlp_bias are Llama fields; "
                            f"{_FAMILIES[family]} does not read them")
    return config


def _family(raw: Mapping[str, Any], where: str) -> str:
    if isinstance(raw.get("text_config"), Mapping):
        raise WorkloadError(f"{where}: a multimodal config (text_config); give the language "
                            "model's own config.json")
    archs = raw.get("architectures")
    arch = archs[0] if isinstance(archs, list) and archs else archs
    model_type = raw.get("model_type")
    supported = ", ".join(ARCHITECTURES)
    if arch is not None:
        if not isinstance(arch, str):
            raise WorkloadError(f"{where}: architectures must be a list of names, got {archs!r}")
        if arch in _REFUSED:
            raise WorkloadError(f"{where}: architecture {arch} is {_REFUSED[arch]}; only dense "
                                f"decoders are modelled ({supported})")
        if arch not in ARCHITECTURES:
            raise WorkloadError(f"{where}: architecture {arch} is not supported; only dense "
                                f"decoders are modelled ({supported})")
        family = ARCHITECTURES[arch]
        if model_type is not None and model_type != family:
            raise WorkloadError(f"{where}: architecture {arch} with model_type {model_type!r}; "
                                f"{arch} is model_type {family!r}")
    elif model_type in _FAMILIES:
        family = str(model_type)
    elif model_type is not None:
        raise WorkloadError(f"{where}: model_type {model_type!r} is not supported; only dense "
                            f"decoders are modelled ({supported})")
    else:
        raise WorkloadError(f"{where}: names no architecture (architectures or model_type); "
                            f"supported: {supported}")
    moe = [k for k in _MOE_KEYS if raw.get(k)]
    if moe:
        raise WorkloadError(f"{where}: {', '.join(moe)} mark a mixture of experts; only dense "
                            f"decoders are modelled ({supported})")
    return family


def _positive_int(value: Any, key: str, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise WorkloadError(f"{where}: {key} must be a positive integer, got {value!r}")
    return value


def _head_dim(config: Mapping[str, Any]) -> int:
    return int(config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"])


def _canonical(config: Mapping[str, Any]) -> str:
    c = config
    name = (f"{c['model_type']}-h{c['hidden_size']}-i{c['intermediate_size']}"
            f"-l{c['num_hidden_layers']}-a{c['num_attention_heads']}"
            f"-kv{c['num_key_value_heads']}")
    if _head_dim(c) != c["hidden_size"] // c["num_attention_heads"] or (
            c["hidden_size"] % c["num_attention_heads"]):
        name += f"-d{_head_dim(c)}"
    name += f"-v{c['vocab_size']}-ctx{c['max_position_embeddings']}"
    name += "-tied" if c.get("tie_word_embeddings") else ""
    name += "-attnbias" if c.get("attention_bias") else ""
    name += "-mlpbias" if c.get("mlp_bias") else ""
    name += f"-swa{c['sliding_window']}" if c.get("sliding_window") else ""
    tag = _DTYPE_TAG.get(str(c.get("torch_dtype", "bfloat16")))
    return name + (f"-{tag}" if tag else "")


def shape_name(config: Mapping[str, Any]) -> str:
    """The name trials of this (checked) config are keyed by: the built-in shape's name when
    the config has a built-in shape (:data:`MODEL_SHAPES`), else the canonical name."""
    canonical = _canonical(config)
    for name, builtin in MODEL_SHAPES.items():  # the named shapes only
        if _canonical(parse_config(builtin, where=name)) == canonical:
            return name
    return canonical


#: The fields of a checked config that decide its shape (what :func:`_canonical` spells out).
_SHAPE_KEYS = ("model_type", "hidden_size", "intermediate_size", "num_hidden_layers",
               "num_attention_heads", "num_key_value_heads", "head_dim", "vocab_size",
               "max_position_embeddings", "tie_word_embeddings", "attention_bias", "mlp_bias",
               "sliding_window", "torch_dtype")


def fields_text(config: Mapping[str, Any]) -> str:
    """The shape-deciding fields of a checked config as ``KEY=VALUE,...`` text, which
    :func:`load_model_config` reads back to the same shape (a command line that names a shape
    without its file)."""
    return ",".join(f"{k}={str(config[k]).lower() if isinstance(config[k], bool) else config[k]}"
                    for k in _SHAPE_KEYS if config.get(k) is not None)


def is_canonical_name(name: str) -> bool:
    """Whether ``name`` is a canonical shape name (see :func:`shape_name`)."""
    return _NAME.match(name) is not None


def config_from_name(name: str) -> dict[str, Any]:
    """The ``config.json`` of the canonical shape ``name``: its spelled-out fields on the
    family's template (this project's tokenizer ids, default rope and norms). Raises
    :class:`WorkloadError` when ``name`` is not canonical."""
    m = _NAME.match(name)
    if m is None:
        raise WorkloadError(f"{name!r} is not a canonical shape name (like "
                            "llama-h2048-i8192-l16-a32-kv8-v128256-ctx131072-tied)")
    family = m["family"]
    config: dict[str, Any] = {
        "architectures": [_FAMILIES[family]], "model_type": family, "hidden_act": "silu",
        "hidden_size": int(m["h"]), "intermediate_size": int(m["i"]),
        "num_hidden_layers": int(m["l"]), "num_attention_heads": int(m["a"]),
        "num_key_value_heads": int(m["kv"]), "vocab_size": int(m["v"]),
        "max_position_embeddings": int(m["ctx"]), "tie_word_embeddings": bool(m["tied"]),
        "torch_dtype": _TAG_DTYPE.get(m["dtype"] or "", "bfloat16"),
        "rms_norm_eps": _HF_DEFAULTS[family]["rms_norm_eps"],
        "rope_theta": _HF_DEFAULTS[family]["rope_theta"], "initializer_range": 0.02,
        # The model directory's tokenizer (objectives.llm.models): PAD_TOKEN=0, <s>=1, </s>=2.
        "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2, "use_cache": True,
    }
    if m["d"]:
        config["head_dim"] = int(m["d"])
    if family == "llama":
        config.update(attention_bias=bool(m["attnbias"]), mlp_bias=bool(m["mlpbias"]))
    elif m["attnbias"] or m["mlpbias"]:
        raise WorkloadError(f"{name!r}: -attnbias / -mlpbias belong to llama shapes only")
    if family == "mistral":
        config["sliding_window"] = int(m["swa"]) if m["swa"] else None
    elif m["swa"]:
        raise WorkloadError(f"{name!r}: -swa belongs to mistral shapes only")
    if family == "qwen2":
        config.update(use_sliding_window=False, max_window_layers=int(m["l"]))
    return parse_config(config, where=name)


def features_of(config: Mapping[str, Any], name: str | None = None) -> ShapeFeatures:
    """The :class:`ShapeFeatures` of a checked config (named by :func:`shape_name` unless
    ``name`` is given)."""
    head_dim = _head_dim(config)
    dtype = str(config.get("torch_dtype", "bfloat16"))
    layers, kv_heads = int(config["num_hidden_layers"]), int(config["num_key_value_heads"])
    return ShapeFeatures(
        name=name or shape_name(config), architecture=str(config["architectures"][0]),
        parameters=parameter_count(config),
        kv_bytes_per_token=2 * layers * kv_heads * head_dim * KV_DTYPE_BYTES[dtype],
        layers=layers, heads=int(config["num_attention_heads"]), kv_heads=kv_heads,
        head_dim=head_dim, hidden=int(config["hidden_size"]),
        intermediate=int(config["intermediate_size"]), vocab=int(config["vocab_size"]),
        max_position_embeddings=int(config["max_position_embeddings"]),
        tied_embeddings=bool(config.get("tie_word_embeddings")), dtype=dtype)


def shape_features(model: str) -> ShapeFeatures | None:
    """The features of the model a trial served (its workload's ``model``): a built-in shape, a
    canonical shape name, or a local model directory whose config.json is a supported dense
    decoder. None when none of these applies, so callers can skip such trials."""
    try:
        if model in MODEL_SHAPES:  # named or canonical
            return features_of(parse_config(model_config(model), where=model), name=model)
        path = Path(model).expanduser()
        if (path / "config.json").is_file():
            return features_of(load_model_config(str(path)), name=model)
    except WorkloadError:
        return None
    return None


# -- named shapes ------------------------------------------------------------------------------

_LLAMA_BASE: dict[str, Any] = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
    "attention_bias": False, "mlp_bias": False, "rms_norm_eps": 1e-5, "initializer_range": 0.02,
    "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2, "use_cache": True,
    "torch_dtype": "bfloat16",
}



class _ShapeTable(dict[str, dict[str, Any]]):
    """The named shapes (what iterating, ``keys()`` and ``--help`` list) that also answers, for
    ``in`` and ``[]``, the canonical name of any supported dense decoder
    (:func:`config_from_name`): such a name spells out its shape, so every
    engine that resolves shapes here accepts a custom shape with no registry to share."""

    def __contains__(self, name: object) -> bool:
        if dict.__contains__(self, name):
            return True
        return isinstance(name, str) and is_canonical_name(name)

    def __missing__(self, name: str) -> dict[str, Any]:
        if not is_canonical_name(name):
            raise KeyError(name)
        return config_from_name(name)


MODEL_SHAPES: dict[str, dict[str, Any]] = _ShapeTable({
    # For CPU tests: the same architecture, small enough to run on 2 cores.
    "tiny-llama": {**_LLAMA_BASE, "hidden_size": 64, "intermediate_size": 128,
                   "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
                   "head_dim": 16, "vocab_size": 2048, "max_position_embeddings": 4096,
                   "rope_theta": 10000.0, "tie_word_embeddings": True, "torch_dtype": "float32"},
    # meta-llama/Llama-3.2-1B's published config.json.
    "llama-3.2-1b": {**_LLAMA_BASE, "hidden_size": 2048, "intermediate_size": 8192,
                     "num_hidden_layers": 16, "num_attention_heads": 32,
                     "num_key_value_heads": 8, "head_dim": 64, "vocab_size": 128256,
                     "max_position_embeddings": 131072, "rope_theta": 500000.0,
                     "tie_word_embeddings": True,
                     "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0,
                                      "low_freq_factor": 1.0,
                                      "original_max_position_embeddings": 8192,
                                      "rope_type": "llama3"}},
    # meta-llama/Meta-Llama-3-8B's published config.json.
    "llama-3-8b": {**_LLAMA_BASE, "hidden_size": 4096, "intermediate_size": 14336,
                   "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
                   "head_dim": 128, "vocab_size": 128256, "max_position_embeddings": 8192,
                   "rope_theta": 500000.0, "tie_word_embeddings": False},
})


#: Published models whose shapes are not built in: trials of them are keyed by the canonical
#: shape name, and users call them by these names. Name -> (checkpoint id, canonical name).
PUBLISHED_MODELS: dict[str, tuple[str, str]] = {
    # meta-llama/Llama-3.2-3B's published config.json (docs/examples/model-configs/).
    "llama-3.2-3b": ("meta-llama/Llama-3.2-3B",
                     "llama-h3072-i8192-l28-a24-kv8-v128256-ctx131072-tied"),
}
#: Built-in shapes' checkpoints.
_BUILTIN_CHECKPOINTS = {"llama-3-8b": "meta-llama/Meta-Llama-3-8B",
                        "llama-3.2-1b": "meta-llama/Llama-3.2-1B"}


def model_key(name: str) -> str:
    """The name trials of the model ``name`` are keyed by: a published model's canonical shape
    name, else ``name`` itself (a built-in or canonical shape name, or a path)."""
    return PUBLISHED_MODELS[name][1] if name in PUBLISHED_MODELS else name


def display_name(key: str) -> str:
    """The name a user knows the model keyed ``key`` by (the published name of a canonical
    shape, else ``key``): answers show it, never the internal key."""
    return next((name for name, (_, canonical) in PUBLISHED_MODELS.items() if canonical == key),
                key)


def checkpoint_id(key: str) -> str | None:
    """The published checkpoint of the model keyed ``key`` (None for a shape without one)."""
    if key in _BUILTIN_CHECKPOINTS:
        return _BUILTIN_CHECKPOINTS[key]
    return next((ckpt for name, (ckpt, canonical) in PUBLISHED_MODELS.items()
                 if key in (name, canonical)), None)


def model_config(shape: str) -> dict[str, Any]:
    """The ``config.json`` contents of a named shape or of a canonical shape name."""
    try:
        return dict(MODEL_SHAPES[shape])
    except KeyError:
        raise WorkloadError(f"unknown model shape {shape!r}; known shapes: "
                            f"{', '.join(sorted(MODEL_SHAPES))}, a canonical shape name "
                            "(advisor tune --model-config prints it), or a local model path"
                            ) from None


def parameter_count(config: Mapping[str, Any]) -> int:
    """The number of weights of a dense Llama-style decoder with this ``config.json``: the token
    embedding, per layer the attention projections (q, k, v, o; grouped-query k/v), the gated MLP
    (gate, up, down) and two RMS norms, the final norm, and the output matrix unless it is tied
    to the embedding. Biases are counted where the config turns them on (Llama's
    ``attention_bias``: q, k, v and o; Qwen2 always has q, k and v biases, none on o).

    meta-llama/Llama-3.2-1B: 1,235,814,400; Meta-Llama-3-8B: 8,030,261,248 (as published).
    """
    hidden, inter = int(config["hidden_size"]), int(config["intermediate_size"])
    layers, vocab = int(config["num_hidden_layers"]), int(config["vocab_size"])
    heads = int(config["num_attention_heads"])
    kv_heads = int(config.get("num_key_value_heads") or heads)
    head_dim = int(config.get("head_dim") or hidden // heads)
    q_out, kv_out = heads * head_dim, kv_heads * head_dim
    attention = hidden * q_out + 2 * hidden * kv_out + q_out * hidden
    if config.get("attention_bias"):
        attention += q_out + 2 * kv_out + hidden
    elif config.get("model_type") == "qwen2":
        attention += q_out + 2 * kv_out
    mlp = 3 * hidden * inter + ((2 * inter + hidden) if config.get("mlp_bias") else 0)
    per_layer = attention + mlp + 2 * hidden
    output = 0 if config.get("tie_word_embeddings", False) else vocab * hidden
    return vocab * hidden + layers * per_layer + hidden + output
