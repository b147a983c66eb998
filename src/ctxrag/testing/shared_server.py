"""One ``llama_cpp.server`` per test run, shared by every process of the run (pytest-xdist workers included), behind
the run's reply cache.

The first process that asks starts a small supervisor (``python -m ctxrag.testing.shared_server``) under a file
lock; the supervisor runs a `CachingProxy` (`ctxrag.testing.reply_cache`) and writes the proxy's URL to a state file
in the run's folder, which every later caller reads. The proxy answers recorded replies from ``cache_dir`` and starts
the server (`run_llama_server`) on the first request it must forward, so a run whose replies are all recorded loads
no model; that load is added to ``loads_file``. The supervisor outlives the process that started it: the run's owner
(the pytest controller) stops it at the end with `stop_shared_servers`, and the supervisor also stops by itself when
the owner process is gone (a run killed with SIGKILL leaves no server behind).

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
import threading
import time
from contextlib import ExitStack
from pathlib import Path

from ctxrag.testing.llm_server import HANG_GUARD_S, run_llama_server
from ctxrag.testing.reply_cache import CacheMode, CachingProxy, model_sha256

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


def shared_llama_server(run_dir: Path, model_path: str | Path, *, n_ctx: int = 4096, owner_pid: int,
                        cache_dir: Path | None = None, cache_mode: CacheMode = CacheMode.ON,
                        used_log: Path | None = None, loads_file: Path | None = None,
                        aliases: dict[str, str] | None = None) -> tuple[str, bool]:
    """(base URL, whether this call started it) of the run's server for (``model_path``, ``n_ctx``), started now if
    no process of the run has.

    ``run_dir`` is a folder every process of the run sees; ``owner_pid`` the process whose end stops the server.
    ``cache_dir`` holds the recorded replies (``None``: nothing is cached, every request reaches the model);
    ``cache_mode``, ``used_log``, ``aliases`` as in `CachingProxy`; ``loads_file`` gets a line when the model is
    loaded.
    Raises ``RuntimeError`` with the supervisor's log tail when it does not start.
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
               "--owner", str(owner_pid), "--state", str(state), "--log", str(log),
               "--cache-mode", (cache_mode if cache_dir is not None else CacheMode.OFF).value]
        for flag, value in (("--cache-dir", cache_dir), ("--used-log", used_log), ("--loads-file", loads_file)):
            if value is not None:
                cmd += [flag, str(value)]
        for folder, placeholder in (aliases or {}).items():
            cmd += ["--alias", f"{folder}={placeholder}"]
        with open(log.with_suffix(".supervisor.log"), "wb") as sup_log:
            proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=sup_log, stderr=subprocess.STDOUT,
                                    start_new_session=True)  # not in the caller's process group: it outlives the caller
        deadline = time.monotonic() + HANG_GUARD_S  # a hang guard: a busy machine makes the start slow, not wrong
        while not state.is_file():
            if proc.poll() is not None:
                sup = log.with_suffix(".supervisor.log")
                tail = sup.read_text(encoding="utf-8", errors="replace")[-3000:] if sup.is_file() else "(no log)"
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


class _LazyServer:
    """The model server, started on the first call (the proxy calls it when a request must reach the model)."""

    def __init__(self, model: str, n_ctx: int, log: Path, loads_file: Path | None, stack: ExitStack) -> None:
        self.model, self.n_ctx, self.log, self.loads_file, self._stack = model, n_ctx, log, loads_file, stack
        self._lock = threading.Lock()
        self.url: str | None = None

    def __call__(self) -> str:
        with self._lock:
            if self.url is None:
                self.url = self._stack.enter_context(run_llama_server(self.model, n_ctx=self.n_ctx, log_path=self.log))
                if self.loads_file is not None:
                    with open(self.loads_file, "a", encoding="utf-8") as out:
                        out.write(f"{Path(self.model).name} in llama_cpp.server at {self.url} (started by the run's "
                                  f"reply cache, pid {os.getpid()}, for the first request it had no reply for)\n")
            return self.url


def _supervise(argv: list[str] | None = None) -> int:
    """Run the proxy (and, once needed, the server) until SIGTERM or until the owner process is gone; the state file
    exists while it answers."""
    ap = argparse.ArgumentParser(description="one llama_cpp.server for a test run")
    ap.add_argument("--model", required=True)
    ap.add_argument("--n-ctx", type=int, required=True)
    ap.add_argument("--owner", type=int, required=True)
    ap.add_argument("--state", type=Path, required=True)
    ap.add_argument("--log", type=Path, required=True)
    ap.add_argument("--cache-dir", type=Path)
    ap.add_argument("--cache-mode", default=CacheMode.ON.value)
    ap.add_argument("--used-log", type=Path)
    ap.add_argument("--loads-file", type=Path)
    ap.add_argument("--alias", action="append", default=[], help="FOLDER=PLACEHOLDER, for the cache keys")
    args = ap.parse_args(argv)
    mode = CacheMode.from_str(args.cache_mode) if args.cache_dir is not None else CacheMode.OFF

    def stop(signum: int, frame: object) -> None:
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGHUP, stop)
    try:
        with ExitStack() as stack:
            server = _LazyServer(args.model, args.n_ctx, args.log, args.loads_file, stack)
            sha = model_sha256(args.model) if mode is not CacheMode.OFF else ""
            proxy = stack.enter_context(CachingProxy(server, cache_dir=args.cache_dir or args.state.parent,
                                                     model_sha256=sha, n_ctx=args.n_ctx, mode=mode,
                                                     used_log=args.used_log,
                                                     aliases=dict(a.rsplit("=", 1) for a in args.alias)))
            tmp = args.state.with_suffix(".tmp")
            tmp.write_text(json.dumps({"url": proxy.url, "pid": os.getpid(), "model": args.model,
                                       "n_ctx": args.n_ctx, "cache": mode.value}), encoding="utf-8")
            tmp.replace(args.state)  # atomic: a reader never sees half a file
            while _alive(args.owner):
                time.sleep(1.0)
    finally:
        args.state.unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    sys.exit(_supervise())
