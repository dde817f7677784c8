"""ManagedServer against real subprocesses: becomes ready on /health, fails fast with the log tail
when the process exits, times out with the log tail, and never leaves a process behind."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import httpx
import psutil
import pytest

from advisor.errors import EngineStartError
from objectives.llm.server import (
    ManagedServer,
    free_port,
    process_peak_rss_mb,
    process_tree,
    root_cause,
    weight_metrics,
)

# A stdlib HTTP server: answers /health with 200 after DELAY seconds, forks a worker that
# lives as long as it does (like vLLM's engine core), and writes both pids to PIDFILE.
HEALTH_SERVER = textwrap.dedent("""
    import http.server, os, subprocess, sys, time
    port, delay, pidfile = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
    worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    with open(pidfile, "w") as f:
        f.write(f"{os.getpid()} {worker.pid}")
    print("loading weights", flush=True)
    time.sleep(delay)

    class Health(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200 if self.path == "/health" else 404)
            self.end_headers()

        def log_message(self, *args):
            pass

    print("serving", flush=True)
    http.server.HTTPServer(("127.0.0.1", port), Health).serve_forever()
""")


def server_script(tmp_path: Path) -> Path:
    path = tmp_path / "health_server.py"
    path.write_text(HEALTH_SERVER)
    return path


def pids_from(pidfile: Path, timeout_s: float = 10.0) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if pidfile.exists() and pidfile.read_text().strip():
            return [int(p) for p in pidfile.read_text().split()]
        time.sleep(0.05)
    raise AssertionError(f"{pidfile} never written")


def gone(pid: int, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.05)
    return False


def test_free_port_is_bindable() -> None:
    port = free_port()
    assert 0 < port < 65536
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))


def test_becomes_ready_and_stop_leaves_nothing_behind(tmp_path: Path) -> None:
    port, pidfile = free_port(), tmp_path / "pids"
    argv = [sys.executable, str(server_script(tmp_path)), str(port), "0.5", str(pidfile)]
    with ManagedServer(argv, base_url=f"http://127.0.0.1:{port}", log_path=tmp_path / "log",
                       name="fake engine") as server:
        ready_s = server.wait_ready(30, poll_interval_s=0.1)
        assert 0.4 < ready_s < 30
        assert server.running
        assert httpx.get(f"http://127.0.0.1:{port}/health").status_code == 200
        assert "serving" in server.log_tail()
        leader, worker = pids_from(pidfile)
        assert server.pid is not None
        assert {leader, worker} <= process_tree(server.pid)
        assert os.getpgid(leader) == server.pid != os.getpgid(0)  # its own process group
    assert not server.running
    assert gone(leader) and gone(worker)  # the whole process group, worker included
    assert server.stop() is not None  # idempotent


def test_exit_before_ready_raises_with_exit_code_and_log(tmp_path: Path) -> None:
    argv = [sys.executable, "-c",
            "import sys; print('loading'); "
            "print('ValueError: --block-size 7 is not supported', file=sys.stderr); sys.exit(3)"]
    server = ManagedServer(argv, base_url=f"http://127.0.0.1:{free_port()}",
                           log_path=tmp_path / "log", name="fake engine")
    start = time.monotonic()
    with server, pytest.raises(EngineStartError) as info:
        server.wait_ready(60, poll_interval_s=0.1)
    assert time.monotonic() - start < 20  # fails fast, not at the timeout
    message = str(info.value)
    assert "fake engine exited with exit code 3 before it became ready" in message
    assert "ValueError: --block-size 7 is not supported" in message
    assert server.returncode == 3


def test_never_ready_times_out_with_log_tail(tmp_path: Path) -> None:
    argv = [sys.executable, "-c",
            "import time\nwhile True:\n    print('still compiling', flush=True)\n"
            "    time.sleep(0.2)"]
    port = free_port()
    with ManagedServer(argv, base_url=f"http://127.0.0.1:{port}", log_path=tmp_path / "log",
                       name="slow engine") as server:
        pid = server.pid
        assert pid is not None
        with pytest.raises(EngineStartError) as info:
            server.wait_ready(1.0, poll_interval_s=0.1)
    message = str(info.value)
    assert f"did not answer 200 on http://127.0.0.1:{port}/health within 1 s" in message
    assert "still compiling" in message
    assert gone(pid)


def test_health_path_is_configurable_and_non_200_is_not_ready(tmp_path: Path) -> None:
    port, pidfile = free_port(), tmp_path / "pids"
    argv = [sys.executable, str(server_script(tmp_path)), str(port), "0", str(pidfile)]
    with ManagedServer(argv, base_url=f"http://127.0.0.1:{port}/", log_path=tmp_path / "log",
                       health_path="ready") as server, pytest.raises(EngineStartError,
                                                                     match="/ready within"):
        server.wait_ready(1.5, poll_interval_s=0.1)  # the fake answers 404 there


def test_log_tail_is_bounded(tmp_path: Path) -> None:
    argv = [sys.executable, "-c", "print('x' * 10000 + 'END')"]
    server = ManagedServer(argv, base_url="http://127.0.0.1:9", log_path=tmp_path / "log")
    with server:
        with pytest.raises(EngineStartError):
            server.wait_ready(30, poll_interval_s=0.05)
        tail = server.log_tail(100)
    assert len(tail) == 100 and tail.endswith("END")


def test_missing_command_is_an_engine_start_error(tmp_path: Path) -> None:
    with pytest.raises(EngineStartError, match="cannot start server: '/nonexistent/vllm'"):
        ManagedServer(["/nonexistent/vllm"], base_url="http://127.0.0.1:9",
                      log_path=tmp_path / "log").start()


def test_server_killed_by_a_signal_is_reported_as_such(tmp_path: Path) -> None:
    argv = [sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"]
    server = ManagedServer(argv, base_url="http://127.0.0.1:9", log_path=tmp_path / "log")
    with server, pytest.raises(EngineStartError, match=r"exit code 139 \(SIGSEGV\)"):
        server.wait_ready(30, poll_interval_s=0.05)


# A trial-like parent: starts the health server under ManagedServer(stop_on_sigterm=True), then
# waits; the tests kill it the way the isolation layer does.
PARENT = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from objectives.llm.server import ManagedServer, free_port, process_tree
    script, pidfile, log = sys.argv[1], sys.argv[2], sys.argv[3]
    port = free_port()
    with ManagedServer([sys.executable, script, str(port), "0", pidfile],
                       base_url=f"http://127.0.0.1:{port}", log_path=Path(log),
                       stop_on_sigterm=True) as server:
        server.wait_ready(30, poll_interval_s=0.1)
        print("ready", flush=True)
        time.sleep(600)
""")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
def test_killed_parent_takes_the_whole_server_group_with_it(tmp_path: Path,
                                                            sig: signal.Signals) -> None:
    """SIGTERM (the isolation layer's first signal): the parent stops the server group itself.
    SIGKILL: the reaper's PR_SET_PDEATHSIG fires and it takes the group down."""
    parent_script = tmp_path / "parent.py"
    parent_script.write_text(PARENT)
    pidfile = tmp_path / "pids"
    parent = subprocess.Popen(
        [sys.executable, str(parent_script), str(server_script(tmp_path)), str(pidfile),
         str(tmp_path / "log")], stdout=subprocess.PIPE, text=True, env=os.environ.copy())
    pids: list[int] = []
    try:
        assert parent.stdout is not None
        assert parent.stdout.readline().strip() == "ready"
        pids = pids_from(pidfile)
        parent.send_signal(sig)
        parent.wait(timeout=30)
        assert all(gone(pid) for pid in pids)
        if sig == signal.SIGTERM:
            assert parent.returncode == 128 + signal.SIGTERM
    finally:
        if parent.poll() is None:
            parent.kill()
        for pid in pids:  # only the processes this test started
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def test_root_cause_skips_wrappers_and_process_prefixes() -> None:
    log = ("INFO starting\n(EngineCore pid=12) Traceback (most recent call last):\n"
           "(EngineCore pid=12)   File \"x.py\", line 1, in f\n"
           "(EngineCore pid=12) torch.OutOfMemoryError: CUDA out of memory. Tried 2 GiB\n"
           "(APIServer pid=3) RuntimeError: Engine core initialization failed. See root cause "
           "above. Failed core proc(s): {}\n")
    assert root_cause(log) == "torch.OutOfMemoryError: CUDA out of memory. Tried 2 GiB"
    assert root_cause("RuntimeError: Engine core initialization failed.") is None
    assert root_cause("all good\nready") is None


def test_root_cause_takes_a_bare_exception_or_else_an_error_log_line() -> None:
    bare = ("(EngineCore_DP0 pid=7)   File \"x.py\", line 3, in g\n"
            "(EngineCore_DP0 pid=7)     assert block_size % 16 == 0\n"
            "(EngineCore_DP0 pid=7) AssertionError\n"
            "(APIServer pid=3) RuntimeError: Engine core initialization failed.\n")
    assert root_cause(bare) == "AssertionError"
    logged = ("(EngineCore_DP0 pid=7) INFO 11-30 19:10:00 [core.py:90] starting\n"
              "(EngineCore_DP0 pid=7) ERROR 11-30 19:10:01 [core.py:708] EngineCore failed to "
              "start.\n"
              "(EngineCore_DP0 pid=7) ERROR 11-30 19:10:01 [worker.py:12] CUDA error: an illegal "
              "memory access was encountered\n"
              "(APIServer pid=3) RuntimeError: Engine core initialization failed. See root cause "
              "above.\n")
    assert root_cause(logged) == ("ERROR: CUDA error: an illegal memory access was "
                                  "encountered")
    # An exception line wins over an ERROR line, wherever it is.
    assert root_cause(logged + "(EngineCore_DP0 pid=7) ValueError: bad block size\n") == \
        "ValueError: bad block size"


def test_peak_resident_memory_of_a_process_tree() -> None:
    # A child that touches 64 MiB and sleeps: its peak resident memory shows it, summed with
    # this process's; a process that is gone counts for nothing.
    child = subprocess.Popen([sys.executable, "-c", "import time; b = bytearray(64 * 2**20); "
                              "b[::4096] = b'x' * len(b[::4096]); print(1, flush=True); "
                              "time.sleep(30)"], stdout=subprocess.PIPE)
    try:
        assert child.stdout is not None and child.stdout.readline()
        alone = process_peak_rss_mb({child.pid})
        assert alone is not None and alone >= 64
        both = process_peak_rss_mb({child.pid, os.getpid()})
        assert both is not None and both > alone
    finally:
        child.kill()
        child.wait()
    assert process_peak_rss_mb({child.pid}) is None
    assert process_peak_rss_mb(set()) is None


def test_weight_metrics_need_the_bytes_and_count_bits_per_parameter() -> None:
    assert weight_metrics(2 * 2**30, 2**30) == {"weights_mb": 2048.0, "bits_per_weight": 16.0}
    assert weight_metrics(2**20, None) == {"weights_mb": 1.0}
    assert weight_metrics(None, 100) == {} and weight_metrics(0, 100) == {}
