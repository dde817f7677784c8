"""A stand-in for `vllm serve` / any OpenAI-compatible server, for CPU tests of the serving targets.

Run as ``python fake_openai_server.py MODEL_DIR --port N [other vllm flags...]`` (the vLLM
target's argv, through ``ADVISOR_VLLM_COMMAND``). Answers ``GET /health`` and streams
``POST /v1/completions`` with ``max_tokens`` text chunks and a usage report, as vLLM does. It
refuses requests without ``"ignore_eos": true`` (the targets must ask for fixed output lengths)
and appends every request's Authorization header and body to ``$FAKE_SERVER_RECORD`` if set.
With ``$FAKE_SERVER_CRASH`` set it fails at start-up the way vLLM's engine core does.
"""

from __future__ import annotations

import argparse
import http.server
import json
import os
import sys
import time


class Handler(http.server.BaseHTTPRequestHandler):
    served_model = "model"

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        self.send_response(200 if self.path == "/health" else 404)
        self.end_headers()

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        record = os.environ.get("FAKE_SERVER_RECORD")
        if record:
            with open(record, "a") as f:
                f.write(json.dumps({"auth": self.headers.get("Authorization"), "body": body})
                        + "\n")
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
        for i in range(n):
            chunk = {"choices": [{"index": 0, "text": f"t{3 + i} "}]}
            self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
            self.wfile.flush()
            time.sleep(0.001)
        usage = {"choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": n}}
        self.wfile.write(f"data: {json.dumps(usage)}\n\ndata: [DONE]\n\n".encode())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("model")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--served-model-name")
    args, _ = parser.parse_known_args()
    Handler.served_model = args.served_model_name or args.model
    print(f"fake server for {args.model} on port {args.port}; argv: {sys.argv[1:]}", flush=True)
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
