"""A stand-in for the `ollama` command, for CPU tests of the ollama target.

``fake_ollama.py serve`` listens on ``$OLLAMA_HOST`` and answers ``GET /api/version``,
``POST /api/create`` (the served model takes the created name), ``POST /api/generate`` without a
prompt (the preload: 404 for a model never created) and :mod:`fake_openai_server`'s OpenAI API;
it writes its ``OLLAMA_*`` environment to ``$FAKE_OLLAMA_RECORD`` (JSON) if set.
``fake_ollama.py create NAME -f Modelfile [--quantize Q]`` reads the Modelfile, checks that its
``FROM`` exists and posts it to the server, as the real client does through ``/api/create``;
with ``$FAKE_OLLAMA_CREATE_ERROR`` set it fails printing it the way cobra reports an error.
``$FAKE_SERVER_CRASH`` makes ``serve`` fail at start-up (see fake_openai_server).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import ClassVar

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
import fake_openai_server as fake

VERSION = "0.0.0-fake-ollama"


class Handler(fake.Handler):
    created: ClassVar[dict[str, dict[str, object]]] = {}

    def _json(self, code: int, body: object) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        if self.path == "/api/version":
            self._json(200, {"version": VERSION})
            return
        super().do_GET()

    def do_POST(self) -> None:
        if self.path not in ("/api/create", "/api/generate"):
            super().do_POST()
            return
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.path == "/api/create":
            Handler.created[body["model"]] = body
            type(self).served_model = body["model"]
            self._json(200, {"status": "success"})
        elif body.get("model") not in Handler.created:
            self._json(404, {"error": f"model '{body.get('model')}' not found"})
        else:
            self._json(200, {"model": body["model"], "done": True, "done_reason": "load"})


def serve() -> None:
    record = os.environ.get("FAKE_OLLAMA_RECORD")
    if record:
        Path(record).write_text(json.dumps(
            {k: v for k, v in os.environ.items() if k.startswith("OLLAMA_")}))
    host, _, port = os.environ.get("OLLAMA_HOST", "127.0.0.1:11434").rpartition(":")
    fake.Handler = Handler
    sys.argv = [sys.argv[0], "ollama", "--port", port, "--host", host or "127.0.0.1",
                "--served-model-name", "(none created)"]
    fake.main()


def create(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="ollama create")
    parser.add_argument("model")
    parser.add_argument("-f", "--file", required=True)
    parser.add_argument("-q", "--quantize")
    args = parser.parse_args(argv)
    if os.environ.get("FAKE_OLLAMA_CREATE_ERROR"):
        print(f"Error: {os.environ['FAKE_OLLAMA_CREATE_ERROR']}", file=sys.stderr)
        sys.exit(1)
    modelfile = Path(args.file).read_text()
    source = next(line.split(" ", 1)[1] for line in modelfile.splitlines()
                  if line.startswith("FROM "))
    if not Path(source).exists():
        print(f"Error: open {source}: no such file or directory", file=sys.stderr)
        sys.exit(1)
    print("gathering model components\nwriting manifest")
    host = os.environ.get("OLLAMA_HOST", "127.0.0.1:11434")
    response = httpx.post(f"http://{host}/api/create", trust_env=False, json={
        "model": args.model, "modelfile": modelfile, "quantize": args.quantize})
    response.raise_for_status()
    print("success")


def main() -> None:
    if sys.argv[1:2] == ["serve"]:
        serve()
    elif sys.argv[1:2] == ["create"]:
        create(sys.argv[2:])
    else:
        print(f"Error: unknown command {sys.argv[1:2]!r} for \"ollama\"", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
