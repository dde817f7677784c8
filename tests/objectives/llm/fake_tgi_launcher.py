"""A stand-in for `text-generation-launcher`, for CPU tests of the tgi target.

Run with the tgi target's argv (``--model-id DIR --hostname H --port N ...``, through
``ADVISOR_TGI_COMMAND``): it checks that the model directory holds safetensors weights, writes
its argv and the TGI variables of its environment to ``$FAKE_TGI_RECORD`` (JSON) if set, and
serves :mod:`fake_openai_server`'s OpenAI API with TGI's Prometheus series on ``/metrics``
(``tgi_request_duration`` with the router's bucket bounds, the queue histogram, the
generated-token histogram, the success counter and the batch / queue gauges) and ``GET /info``.
With ``$FAKE_TGI_ARGUMENT_ERROR`` set it exits 1 printing it the way the launcher reports a
failed check (``Error: ArgumentValidation("...")``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import fake_openai_server as fake

#: router/src/server.rs: 35 bounds, 0.0001 * 1.5^k for k = 1..35 (seconds).
DURATION_BUCKETS = [0.0001 * 1.5 ** (k + 1) for k in range(35)]
#: Variables TGI reads that the target may set.
TGI_VARIABLES = ("ATTENTION", "PREFIX_CACHING", "PREFILL_CHUNKING", "HF_HUB_OFFLINE",
                 "MAX_BATCH_TOTAL_TOKENS", "QUANTIZE", "DTYPE")


def histogram(name: str, bounds: list[float], counts: list[int], total: float) -> list[str]:
    lines = [f"# TYPE {name} histogram"]
    cumulative = 0
    for bound, n in zip([*map(str, bounds), "+Inf"], counts, strict=True):
        cumulative += n
        lines.append(f'{name}_bucket{{le="{bound}"}} {cumulative}')
    return [*lines, f"{name}_sum {total}", f"{name}_count {cumulative}"]


def render_tgi(cls: type, model: str) -> str:
    """TGI's exposition, from what the fake server observed (no labels, no ``_total``)."""
    with fake.Metrics.lock:
        e2e = fake.Metrics.e2e
        done = sum(e2e.counts)
        queue = [done] + [0] * len(DURATION_BUCKETS)  # the fake never queues a request
        lines = [
            "# TYPE tgi_request_success counter", f"tgi_request_success {done}",
            "# TYPE tgi_batch_current_size gauge",
            f"tgi_batch_current_size {fake.Metrics.running}",
            "# TYPE tgi_queue_size gauge", "tgi_queue_size 0",
            *histogram("tgi_request_duration", e2e.bounds, e2e.counts, e2e.total),
            *histogram("tgi_request_queue_duration", DURATION_BUCKETS, queue, 0.0),
            *histogram("tgi_request_generated_tokens", [], [done], float(fake.Metrics.tokens)),
        ]
    return "\n".join(lines) + "\n"


class Handler(fake.Handler):
    model_id = ""

    def do_GET(self) -> None:
        if self.path == "/info":
            body = json.dumps({"model_id": self.model_id, "version": "0.0.0-fake-tgi",
                               "router": "text-generation-router"}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        super().do_GET()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model-id", required=True)
    parser.add_argument("--hostname", default="0.0.0.0")
    parser.add_argument("--port", type=int, default=3000)
    args, _ = parser.parse_known_args()
    record = os.environ.get("FAKE_TGI_RECORD")
    if record:
        Path(record).write_text(json.dumps({
            "argv": sys.argv[1:],
            "env": {k: os.environ[k] for k in TGI_VARIABLES if k in os.environ}}))
    print(f"INFO text_generation_launcher: Args {{ model_id: {args.model_id!r} }}", flush=True)
    if os.environ.get("FAKE_TGI_ARGUMENT_ERROR"):
        message = os.environ["FAKE_TGI_ARGUMENT_ERROR"].replace('"', '\\"')
        print(f'Error: ArgumentValidation("{message}")', flush=True)
        sys.exit(1)
    if not list(Path(args.model_id).glob("*.safetensors")):
        print(f"FileNotFoundError: No local weights found in {args.model_id} with extension "
              ".safetensors", flush=True)
        sys.exit(1)
    print("INFO text_generation_launcher: Using attention flashinfer - Prefix caching true",
          flush=True)
    print("INFO text_generation_router_v3: Setting max batch total tokens to 12345", flush=True)
    fake.Metrics.e2e = fake.Hist("tgi_request_duration", DURATION_BUCKETS)
    fake.Metrics.render = classmethod(render_tgi)
    Handler.model_id = args.model_id
    fake.Handler = Handler
    # TGI ignores the request's model name; the target sends "tgi".
    sys.argv = [sys.argv[0], args.model_id, "--port", str(args.port), "--host", args.hostname,
                "--served-model-name", "tgi"]
    fake.main()


if __name__ == "__main__":
    main()
