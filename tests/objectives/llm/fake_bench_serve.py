"""A stand-in for `vllm bench serve` (the flags advisor crosscheck passes), for CPU tests of the
crosscheck: replays a ShareGPT file in order on Poisson arrivals against /v1/completions,
streaming, and writes the result JSON `--save-result --save-detailed` writes (the keys the
harness reads). Its own small timing loop, independent of the advisor's client. The real harness
runs on the H200 (docs/benchmarks.md)."""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import random
import time
from pathlib import Path

import httpx
import numpy as np


async def one(client: httpx.AsyncClient, url: str, model: str, prompt: str, n: int,
              delay: float) -> dict:
    await asyncio.sleep(delay)
    start = time.perf_counter()
    chunks: list[float] = []
    body = {"model": model, "prompt": prompt, "max_tokens": n, "stream": True,
            "ignore_eos": True, "temperature": 0.0}
    try:
        async with client.stream("POST", url, json=body) as response:
            async for line in response.aiter_lines():
                if line.startswith("data:") and "[DONE]" not in line:
                    data = json.loads(line[5:])
                    if data.get("choices") and data["choices"][0].get("text"):
                        chunks.append(time.perf_counter())
    except httpx.HTTPError as exc:
        return {"start": start, "ttft": 0.0, "itl": [], "n": 0, "error": str(exc)}
    if not chunks:
        return {"start": start, "ttft": 0.0, "itl": [], "n": 0, "error": "no chunk"}
    return {"start": start, "ttft": chunks[0] - start,
            "itl": [b - a for a, b in itertools.pairwise(chunks)], "n": len(chunks),
            "error": "", "latency": chunks[-1] - start}


async def main(args: argparse.Namespace) -> None:
    entries = json.loads(Path(args.dataset_path).read_text())[: args.num_prompts]
    rng = random.Random(args.seed)
    delays, t = [], 0.0
    for _ in entries:
        delays.append(t)
        t += rng.expovariate(args.request_rate)
    url = args.base_url.rstrip("/") + args.endpoint
    began = time.perf_counter()
    async with httpx.AsyncClient(timeout=600, trust_env=False,
                                 limits=httpx.Limits(max_connections=None)) as client:
        outs = await asyncio.gather(*(
            one(client, url, args.model, e["conversations"][0]["value"],
                len(e["conversations"][1]["value"].split()), d)
            for e, d in zip(entries, delays, strict=True)))
    duration = time.perf_counter() - began
    ok = [o for o in outs if not o["error"]]
    result: dict = {"duration": duration, "completed": len(ok), "failed": len(outs) - len(ok),
                    "output_throughput": sum(o["n"] for o in ok) / duration,
                    "request_throughput": len(ok) / duration}
    series = {"ttft": [o["ttft"] * 1e3 for o in ok],
              "tpot": [(o["latency"] - o["ttft"]) / (o["n"] - 1) * 1e3 for o in ok if o["n"] > 1],
              "itl": [x * 1e3 for o in ok for x in o["itl"]],
              "e2el": [o["latency"] * 1e3 for o in ok]}
    for name, values in series.items():
        if values:
            result[f"mean_{name}_ms"] = float(np.mean(values))
            for q in (50, 90, 95, 99):
                result[f"p{q}_{name}_ms"] = float(np.percentile(values, q))
    result.update({"start_times": [o["start"] for o in outs], "ttfts": [o["ttft"] for o in outs],
                   "itls": [o["itl"] for o in outs], "output_lens": [o["n"] for o in outs],
                   "errors": [o["error"] for o in outs]})
    Path(args.result_dir, args.result_filename).write_text(json.dumps(result))


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    for flag in ("--backend", "--base-url", "--endpoint", "--model", "--tokenizer",
                 "--dataset-name", "--dataset-path", "--percentile-metrics",
                 "--metric-percentiles", "--result-dir", "--result-filename"):
        parser.add_argument(flag)
    parser.add_argument("--num-prompts", type=int)
    parser.add_argument("--request-rate", type=float)
    parser.add_argument("--seed", type=int)
    parser.add_argument("--temperature", type=float)
    for flag in ("--disable-shuffle", "--ignore-eos", "--save-result", "--save-detailed",
                 "--disable-tqdm"):
        parser.add_argument(flag, action="store_true")
    asyncio.run(main(parser.parse_args()))
