"""One ``llama_cpp.server`` per test run, shared by every process of the run (pytest-xdist workers included).

The first process that asks starts a small supervisor (``python -m ctxrag.testing.shared_server``) under a file
lock; the supervisor runs the server with `run_llama_server` and writes its URL to a state file in the run's folder,
which every later caller reads. The server outlives the process that started it: the run's owner (the pytest
controller) stops it at the end with `stop_shared_servers`, and the supervisor also stops it by itself when the owner
process is gone (a run killed with SIGKILL leaves no server behind).

Example::

    url, started = shared_llama_server(run_dir, gguf_path, owner_pid=os.getpid())   # "http://127.0.0.1:PORT/v1", True
    assert shared_llama_server(run_dir, gguf_path, owner_pid=os.getpid()) == (url, False)   # no second start
    stop_shared_servers(run_dir)
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from ctxrag.testing.llm_server import HANG_GUARD_S, run_llama_server

_PREFIX = "llama-server-"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _key(model_path: Path, n_ctx: int) -> str:
    return hashlib.sha256(f"{Path(model_path).resolve()}|{n_ctx}".encode()).hexdigest()[:12]


def shared_llama_server(run_dir: Path, model_path: str | Path, *, n_ctx: int = 4096,
                        owner_pid: int) -> tuple[str, bool]:
    """(base URL, whether this call started it) of the run's server for (``model_path``, ``n_ctx``), started now if
    no process of the run has.

    ``run_dir`` is a folder every process of the run sees; ``owner_pid`` the process whose end stops the server.
    Raises ``RuntimeError`` with the server's log tail when it does not start.
    """
    from filelock import FileLock

    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    key = _key(Path(model_path), n_ctx)
    state, log = run_dir / f"{_PREFIX}{key}.json", run_dir / f"{_PREFIX}{key}.log"
    with FileLock(str(run_dir / f"{_PREFIX}{key}.lock")):
        if state.is_file():
            info = json.loads(state.read_text(encoding="utf-8"))
            if _alive(int(info["pid"])):
                return str(info["url"]), False
            state.unlink()
        cmd = [sys.executable, "-m", "ctxrag.testing.shared_server", "--model", str(model_path), "--n-ctx", str(n_ctx),
               "--owner", str(owner_pid), "--state", str(state), "--log", str(log)]
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)  # not in the caller's process group: it outlives the caller
        deadline = time.monotonic() + HANG_GUARD_S  # a hang guard: a busy machine makes the start slow, not wrong
        while not state.is_file():
            if proc.poll() is not None:
                tail = log.read_text(encoding="utf-8", errors="replace")[-3000:] if log.is_file() else "(no log)"
                raise RuntimeError(f"the shared llama_cpp.server for {model_path} exited with {proc.returncode}:\n{tail}")
            if time.monotonic() > deadline:
                proc.terminate()
                raise RuntimeError(f"the shared llama_cpp.server for {model_path} did not start in {HANG_GUARD_S:.0f} s")
            time.sleep(0.2)
        return str(json.loads(state.read_text(encoding="utf-8"))["url"]), True


def stop_shared_servers(run_dir: Path) -> list[str]:
    """Stop every server started in ``run_dir`` (the supervisor stops its server, then exits); return their URLs."""
    stopped = []
    for state in sorted(Path(run_dir).glob(f"{_PREFIX}*.json")):
        info = json.loads(state.read_text(encoding="utf-8"))
        pid = int(info["pid"])
        if _alive(pid):
            os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + 30
            while _alive(pid) and time.monotonic() < deadline:
                time.sleep(0.1)
                try:
                    os.waitpid(pid, os.WNOHANG)  # our own child when this process started it (no xdist)
                except ChildProcessError:
                    pass
        state.unlink(missing_ok=True)
        stopped.append(str(info["url"]))
    return stopped


def _supervise(argv: list[str] | None = None) -> int:
    """Run the server until SIGTERM or until the owner process is gone; the state file exists while it answers."""
    ap = argparse.ArgumentParser(description="one llama_cpp.server for a test run")
    ap.add_argument("--model", required=True)
    ap.add_argument("--n-ctx", type=int, required=True)
    ap.add_argument("--owner", type=int, required=True)
    ap.add_argument("--state", type=Path, required=True)
    ap.add_argument("--log", type=Path, required=True)
    args = ap.parse_args(argv)

    def stop(signum: int, frame: object) -> None:
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGHUP, stop)
    try:
        with run_llama_server(args.model, n_ctx=args.n_ctx, log_path=args.log) as url:
            tmp = args.state.with_suffix(".tmp")
            tmp.write_text(json.dumps({"url": url, "pid": os.getpid(), "model": args.model, "n_ctx": args.n_ctx}),
                           encoding="utf-8")
            tmp.replace(args.state)  # atomic: a reader never sees half a file
            while _alive(args.owner):
                time.sleep(1.0)
    finally:
        args.state.unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    sys.exit(_supervise())
