"""`advisor serve`, `advisor dashboard` and `advisor worker`: the long-running processes on a
store (the REST API, optuna-dashboard, the job worker).
"""

from __future__ import annotations

import gc
import logging
import threading
import time
from typing import TYPE_CHECKING, Annotated, Any

import typer

from advisor.cli.context import (
    choice,
    cli_settings,
    cli_store,
    err,
    sigterm_interrupts,
    stop_on_signals,
)
from advisor.errors import AdvisorError

if TYPE_CHECKING:
    from knowledge.cache import KnowledgeModels

__all__ = ["dashboard_cmd", "serve_cmd", "worker_cmd"]

log = logging.getLogger(__name__)

_LOG_LEVELS = ("critical", "error", "warning", "info", "debug", "trace")


_LOOPBACK = {"127.0.0.1", "::1", "localhost"}


def serve_cmd(
    host: Annotated[str, typer.Option(help="Address to bind (127.0.0.1: this machine only).")
                    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535, help="Port to listen on.")] = 8000,
    worker: Annotated[bool, typer.Option(
        help="Start the job worker as a supervised child process (runs studies started with "
             "POST /v1/studies). --no-worker when `advisor worker` runs elsewhere.")] = True,
    dev_loopback: Annotated[bool, typer.Option(
        "--dev-loopback", help="Development only: with no API key configured, accept mutating "
                               "requests from this machine (refused unless --host is loopback).")
    ] = False,
    log_level: Annotated[str, typer.Option(help="uvicorn log level.", **choice(_LOG_LEVELS))
                         ] = "info",
) -> None:
    """Serve the REST API (recommendations, cheat-sheet, studies, jobs) on the configured store.

    Mutating endpoints need an API key (ADVISOR_API_KEY or ADVISOR_API_KEY_FILE); without one
    they are refused. See docs/api.md.
    """
    import uvicorn

    from advisor.worker import WorkerSupervisor
    from api import create_app

    # SIGTERM before uvicorn runs (and the one uvicorn raises again after its own graceful
    # shutdown) stops this process as Ctrl-C does, through the `finally` below.
    sigterm_interrupts()
    settings = cli_settings()
    if dev_loopback:
        settings = settings.model_copy(update={"api_dev_loopback": True})
    if settings.api_dev_loopback and host not in _LOOPBACK:
        raise AdvisorError(f"--dev-loopback (ADVISOR_API_DEV_LOOPBACK) is only allowed when bound "
                           f"to 127.0.0.1 or ::1, not {host!r}; configure ADVISOR_API_KEY instead")
    # The app opens the store as every command does (advisor/stores.py): tables created and the
    # shipped knowledge imported before the first request.
    api = create_app(settings, import_shipped=True)
    keys = settings.api_keys()
    mode = (f"{len(keys)} API key(s) configured" if keys else
            "no API key: mutating endpoints accept loopback clients only (--dev-loopback)"
            if settings.api_dev_loopback else
            "no API key configured: mutating endpoints are refused (set ADVISOR_API_KEY)")
    err.print(f"advisor serve on http://{host}:{port} ({mode}); API docs at /docs")
    started = time.perf_counter()

    def ready(models: KnowledgeModels) -> None:
        err.print(f"knowledge models ready: {len(models.contexts)} contexts from "
                  f"{models.data.trials} trials ({time.perf_counter() - started:.1f} s)")
        # The models are a large, long-lived heap: keep them out of the garbage collector's
        # scans so its pauses do not land on request latencies.
        gc.collect()
        gc.freeze()

    # Fit (or load) in the background: /healthz answers at once, /readyz and the answers that
    # need the models say 503 (Retry-After) until they are ready.
    api.state.knowledge.warm_up(ready)
    supervisor = WorkerSupervisor(settings) if worker else None
    if supervisor is not None:
        supervisor.start()
    try:
        uvicorn.run(api, host=host, port=port, log_level=log_level,
                    access_log=False)
    except KeyboardInterrupt:
        pass  # uvicorn shut down gracefully, then raised the SIGTERM / SIGINT it caught again
    finally:
        if supervisor is not None:
            supervisor.stop()
        # Checkpointed and closed: the .db file alone holds every row, no -wal is left.
        api.state.store.close()
    err.print("advisor serve stopped; store closed")


#: How long a stopped dashboard waits for the study its background builder is writing.
_BUILDER_STOP_S = 20.0
#: How often the dashboard's serving loop, idle, looks whether it was asked to stop.
_STOP_POLL_S = 0.5


def dashboard_cmd(
    host: Annotated[str, typer.Option(help="Address to bind (127.0.0.1: this machine only).")
                    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535, help="Port to listen on.")] = 8080,
) -> None:
    """Open optuna-dashboard on the store: each study's SLO and the best trial that met it.

    Every study shows its SLO, objective and workload; every trial its SLO margins. Imported
    studies (shipped knowledge, `knowledge import`) get an Optuna study first, built from their
    stored trials, so they show too. Needs the `dashboard` extra.
    """
    from wsgiref.simple_server import WSGIRequestHandler, make_server

    import optuna

    from advisor.cli.progress import counted
    from advisor.dashboard import backfill_optuna_studies, dashboard_app
    from advisor.optuna_bridge import optuna_storage

    # SIGTERM and Ctrl-C only ask the dashboard to stop (checked before it serves and between
    # requests): raised as KeyboardInterrupt, a stop that landed inside a request (wsgiref's
    # handler catches every exception) or in a garbage-collection callback that the background
    # builder's work set off was swallowed, and the dashboard served on for good.
    stopping = threading.Event()
    building: list[Any] = []  # the background builder, once there is one

    def stop() -> None:
        stopping.set()
        for pending_trials in building:  # a study page's build under way stops too
            pending_trials.stop()

    stop_on_signals(stop)
    settings = cli_settings()
    store = cli_store(settings, sigterm_raises=False)
    if stopping.is_set():
        return
    storage = optuna_storage(store.url)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    # Imported studies get their Optuna studies now (seconds) and their trials later: Optuna
    # writes a trial row by row, minutes for the shipped knowledge on 2 cores. A study opened
    # in the page gets its trials first; a background thread builds the rest.
    with counted(err, "creating the Optuna studies of imported studies (once per store)"
                 ) as tick:
        created = backfill_optuna_studies(store, storage, progress=tick, defer_trials=True)
    if created:
        err.print(f"created the Optuna studies of {created} imported studies (once per store)")
    wsgi_app = dashboard_app(storage, store)
    pending = getattr(wsgi_app, "pending", None)
    if pending is not None:
        building.append(pending)
        if stopping.is_set():
            pending.stop()
    builder: threading.Thread | None = None
    if pending:
        err.print(f"building the trials of {len(pending)} imported studies in the background; "
                  "a study opened in the page gets its own first")
        builder = threading.Thread(target=pending.build_all, name="dashboard-backfill",
                                   daemon=True)
        builder.start()

    class _Quiet(WSGIRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:  # one line per request: noise
            log.debug(format, *args)

    with make_server(host, port, wsgi_app, handler_class=_Quiet) as server:
        err.print(f"optuna-dashboard on http://{host}:{port}/dashboard (Ctrl-C stops it)")
        server.timeout = _STOP_POLL_S  # handle_request returns this often to see a stop
        try:
            while not stopping.is_set():
                server.handle_request()
        finally:
            if builder is not None and pending:  # stop building before the store closes
                pending.stop()
                builder.join(timeout=_BUILDER_STOP_S)


def worker_cmd(
    once: Annotated[bool, typer.Option(
        "--once", help="Run the queued jobs, then exit instead of polling.")] = False,
) -> None:
    """Run studies queued over the REST API (POST /v1/studies), one at a time.

    `advisor serve` starts one for you; run it yourself with `advisor serve --no-worker`, e.g. on
    the machine whose hardware the studies should measure. SIGTERM cancels the running job's
    trial, records it, and exits.
    """

    from advisor.worker import Worker

    # The handlers go in before the store opens: opening a fresh store imports the shipped
    # knowledge, and a Ctrl-C there raised KeyboardInterrupt wherever the interpreter was,
    # once inside a garbage-collection callback, where Python only prints it and the worker
    # went on polling forever. A stop asked for while the store opens is kept for when it is open.
    stopping = threading.Event()
    workers: list[Worker] = []

    def stop(*_: object) -> None:
        stopping.set()
        for w in workers:
            w.stop()

    stop_on_signals(stop)
    settings = cli_settings()
    workers.append(Worker(settings, cli_store(settings, sigterm_raises=False)))
    if stopping.is_set():
        workers[0].stop()
    workers[0].run_forever(stop_when_idle=once)

