"""A stand-in for `vllm serve` / any OpenAI-compatible server, for CPU tests of the serving targets.

Run as ``python fake_openai_server.py MODEL_DIR --port N [other vllm flags...]`` (the vLLM
target's argv, through ``ADVISOR_VLLM_COMMAND``). Answers ``GET /health`` and streams
``POST /v1/completions`` with ``max_tokens`` text chunks and a usage report, as vLLM does. It
refuses requests without ``"ignore_eos": true`` (the targets must ask for fixed output lengths)
and appends every request's Authorization header and body to ``$FAKE_SERVER_RECORD`` if set.
With ``$FAKE_SERVER_CRASH`` set it fails at start-up the way vLLM's engine core does.

``GET /metrics`` serves vLLM 0.26's Prometheus series with vLLM's own bucket bounds, observed
from the server's side of each request (from its arrival to the write of its first / last chunk),
so the validity gate can be tested against a server's own truth. ``POST /reset_prefix_cache``
answers 200. ``$FAKE_SERVER_TOKEN_DELAY_S`` sets the pause between chunks (default 1 ms),
``$FAKE_SERVER_FIRST_TOKEN_DELAY_S`` one before the first chunk (default none: a slow prefill);
``$FAKE_SERVER_NO_METRICS`` makes ``/metrics`` answer 404, as an endpoint without metrics does.
``$FAKE_SERVER_REFUSE`` answers every completion with HTTP 400 and that message, as vLLM refuses
prompts its tokenizer reads as empty ("The decoder prompt cannot be empty").
``$FAKE_SERVER_ENV_RECORD`` names a file each start appends its environment to (one JSON object
a line), so tests can see what a server was started with; with ``$FAKE_SERVER_COMPILE`` set, a
start writes a file into ``$VLLM_CACHE_ROOT`` as vLLM's torch.compile does.
``$FAKE_SERVER_DIE_AFTER`` = N: the N-th completion request makes the server print an engine
core error and exit (code 1), as vLLM does when its engine dies mid-run (e.g. out of memory).
"""

from __future__ import annotations

import argparse
import bisect
import http.server
import json
import os
import sys
import threading
import time

#: vLLM 0.26's bucket bounds (vllm/v1/metrics/loggers.py), in seconds.
TTFT_BUCKETS = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0,
                7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0]
TPOT_BUCKETS = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0,
                7.5, 10.0, 20.0, 40.0, 80.0]
E2E_BUCKETS = [0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0,
               60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0]
LABELS = 'engine="0",model_name="{model}"'


class Hist:
    def __init__(self, name: str, bounds: list[float]) -> None:
        self.name, self.bounds = name, bounds
        self.counts = [0] * (len(bounds) + 1)
        self.total = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.total += value

    def render(self, labels: str) -> list[str]:
        lines = [f"# TYPE {self.name} histogram"]
        cum = 0
        for bound, n in zip([*map(str, self.bounds), "+Inf"], self.counts, strict=True):
            cum += n
            lines.append(f'{self.name}_bucket{{{labels},le="{bound}"}} {float(cum)}')
        lines += [f"{self.name}_count{{{labels}}} {float(cum)}",
                  f"{self.name}_sum{{{labels}}} {self.total}"]
        return lines


class Metrics:
    lock = threading.Lock()
    ttft = Hist("vllm:time_to_first_token_seconds", TTFT_BUCKETS)
    tpot = Hist("vllm:request_time_per_output_token_seconds", TPOT_BUCKETS)
    itl = Hist("vllm:inter_token_latency_seconds", TPOT_BUCKETS)
    e2e = Hist("vllm:e2e_request_latency_seconds", E2E_BUCKETS)
    tokens = 0
    running = 0

    @classmethod
    def render(cls, model: str) -> str:
        labels = LABELS.format(model=model)
        with cls.lock:
            lines = ["# HELP vllm:num_requests_running Number of requests running.",
                     "# TYPE vllm:num_requests_running gauge",
                     f"vllm:num_requests_running{{{labels}}} {float(cls.running)}",
                     f"vllm:num_requests_waiting{{{labels}}} 0.0",
                     f"vllm:kv_cache_usage_perc{{{labels}}} {min(1.0, cls.running / 100)}",
                     f"vllm:generation_tokens_total{{{labels}}} {float(cls.tokens)}"]
            for hist in (cls.ttft, cls.tpot, cls.itl, cls.e2e):
                lines += hist.render(labels)
        return "\n".join(lines) + "\n"


class Handler(http.server.BaseHTTPRequestHandler):
    served_model = "model"
    completions = 0  # completion requests seen (FAKE_SERVER_DIE_AFTER)

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        if self.path == "/metrics" and not os.environ.get("FAKE_SERVER_NO_METRICS"):
            text = Metrics.render(self.served_model).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(text)))
            self.end_headers()
            self.wfile.write(text)
            return
        self.send_response(200 if self.path == "/health" else 404)
        self.end_headers()

    def do_POST(self) -> None:
        arrival = time.perf_counter()
        if self.path == "/reset_prefix_cache":
            self.send_response(200)
            self.end_headers()
            return
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        record = os.environ.get("FAKE_SERVER_RECORD")
        if record:
            with open(record, "a") as f:
                f.write(json.dumps({"auth": self.headers.get("Authorization"), "body": body})
                        + "\n")
        if refusal := os.environ.get("FAKE_SERVER_REFUSE"):
            self.send_response(400)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(json.dumps({"error": {"message": refusal, "type": "BadRequestError",
                                                   "code": 400}}).encode())
            return
        if (die_after := os.environ.get("FAKE_SERVER_DIE_AFTER")) is not None:
            with Metrics.lock:
                Handler.completions += 1
                if Handler.completions >= int(die_after):
                    print("(EngineCore pid=7) torch.OutOfMemoryError: CUDA out of memory. "
                          "Tried to allocate 2.00 GiB", flush=True)
                    os._exit(1)
        if self.path != "/v1/completions" or body.get("model") != self.served_model \
                or body.get("ignore_eos") is not True:
            self.send_response(400)
            self.end_headers()
            self.wfile.write(b'{"error": "bad request"}')
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        n = int(body["max_tokens"])
        delay = float(os.environ.get("FAKE_SERVER_TOKEN_DELAY_S", "0.001"))
        with Metrics.lock:
            Metrics.running += 1
        times = []
        try:
            time.sleep(float(os.environ.get("FAKE_SERVER_FIRST_TOKEN_DELAY_S", "0")))
            for i in range(n):
                chunk = {"choices": [{"index": 0, "text": f"t{3 + i} "}]}
                self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                self.wfile.flush()
                times.append(time.perf_counter())
                if i == 0:
                    with Metrics.lock:
                        Metrics.ttft.observe(times[0] - arrival)
                with Metrics.lock:
                    Metrics.tokens += 1
                    if i > 0:
                        Metrics.itl.observe(times[-1] - times[-2])
                time.sleep(delay)
            usage = {"choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": n}}
            self.wfile.write(f"data: {json.dumps(usage)}\n\ndata: [DONE]\n\n".encode())
        finally:
            with Metrics.lock:
                Metrics.running -= 1
                if len(times) == n:
                    Metrics.e2e.observe(times[-1] - arrival)
                    if n > 1:
                        Metrics.tpot.observe((times[-1] - times[0]) / (n - 1))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("model")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--served-model-name")
    args, _ = parser.parse_known_args()
    Handler.served_model = args.served_model_name or args.model
    print(f"fake server for {args.model} on port {args.port}; argv: {sys.argv[1:]}", flush=True)
    if env_record := os.environ.get("FAKE_SERVER_ENV_RECORD"):
        with open(env_record, "a") as f:
            f.write(json.dumps(dict(os.environ)) + "\n")
    if os.environ.get("FAKE_SERVER_COMPILE") and (root := os.environ.get("VLLM_CACHE_ROOT")):
        compiled = os.path.join(root, "torch_compile_cache", f"{os.getpid()}.bin")
        os.makedirs(os.path.dirname(compiled), exist_ok=True)
        with open(compiled, "w") as f:
            f.write("compiled")
    if os.environ.get("FAKE_SERVER_CRASH"):  # fail as a multi-process engine does: the cause
        print(f"(EngineCore pid=7) ValueError: {os.environ['FAKE_SERVER_CRASH']}", flush=True)
        for i in range(400):  # ... then a long wrapper traceback that pushes it out of the tail
            print(f"(APIServer pid=6)   File \"frame{i}.py\", line {i}, in wrapper", flush=True)
        print("(APIServer pid=6) RuntimeError: Engine core initialization failed. "
              "See root cause above. Failed core proc(s): {}", flush=True)
        sys.exit(1)
    http.server.ThreadingHTTPServer((args.host, args.port), Handler).serve_forever()


if __name__ == "__main__":
    main()
