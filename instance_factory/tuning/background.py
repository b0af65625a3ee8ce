"""The ``"background"`` miss policy: serve the cost model's choice now, tune the problem in a child process.

A lookup that misses under this policy (``INSTANCE_FACTORY_MISS_POLICY=background``, or
``policy="background"``) returns what ``"heuristic"`` returns, without waiting, and queues the problem.
One worker thread per process drains the queue: for each problem it runs

    python -m instance_factory tune --problem KEY --db <user tier> --max-instances N --max-minutes M

as a child process at low CPU priority. The child verifies the cost model's first N candidates against
float64, times them and appends the rows to the user tier. Compiling and timing happen outside the caller:
no GIL, CUDA context or allocator state is shared with the training loop. When the rows land, lookup sees
the changed file within ``lookup.RECHECK_S`` and the next call serves the tuned winner. The run-time lookup
still never imports the tuner: the child does.

* Once per problem: a problem that was tuned (or failed) in this process is not queued again, and
  processes sharing a user tier (data-parallel ranks) tune it once. A claim file next to the user tier
  (created with ``O_EXCL``) names the tuning process. A claim whose process is gone, or that is older
  than the child's time limit allows, is taken over.
* Settings: ``$INSTANCE_FACTORY_BACKGROUND_INSTANCES`` (candidates per problem, default 24, the cost
  model's order), ``$INSTANCE_FACTORY_BACKGROUND_MINUTES`` (default 3) and
  ``$INSTANCE_FACTORY_BACKGROUND_ARGS`` (more ``instance-factory tune`` options, e.g.
  ``--compile-workers 8``), read when a child starts, or :func:`configure`.
* The child shares the GPU with the caller: its timings are taken while the caller's kernels run. The
  tuner keeps a disturbed run's 20th percentile. For the cleanest rows, tune offline
  (``instance-factory tune``).
* At interpreter exit the running child is stopped. Its problem is tuned again by the next process that
  misses it. :func:`wait` blocks until the queue is empty (e.g. at the end of a short job).
* A problem with a user-written epilogue (``fused_op="custom"``) cannot be tuned in another process.
  It is not queued.
"""

from __future__ import annotations

import atexit
import hashlib
import os
import queue
import re
import shlex
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

__all__ = ["configure", "status", "submit", "wait"]

INSTANCES_ENV = "INSTANCE_FACTORY_BACKGROUND_INSTANCES"
MINUTES_ENV = "INSTANCE_FACTORY_BACKGROUND_MINUTES"
ARGS_ENV = "INSTANCE_FACTORY_BACKGROUND_ARGS"
DEFAULT_INSTANCES, DEFAULT_MINUTES = 24, 3.0
_SETTINGS: dict[str, Any] = {}  # configure(): overrides the environment

_QUEUE: queue.Queue = queue.Queue()
_LOCK = threading.Lock()
_STATE: dict[str, str] = {}  # problem key -> queued / running / done / failed / claimed elsewhere
_LOGS: dict[str, str] = {}  # problem key -> the child's log file
_IDLE = threading.Condition(_LOCK)
_WORKER: list[threading.Thread] = []
_CHILD: list[subprocess.Popen] = []
_STOP = threading.Event()


def configure(*, max_instances: int | None = None, max_minutes: float | None = None,
              extra_args: list[str] | None = None) -> None:
    """Override the environment's settings for the children started from now on (None: keep)."""
    for name, value in (("max_instances", max_instances), ("max_minutes", max_minutes),
                        ("extra_args", extra_args)):
        if value is not None:
            _SETTINGS[name] = value


def submit(key: str, user_db: Path, device: Any = None) -> bool:
    """Queue problem ``key`` for tuning into the ``user_db`` file on ``device`` (a lookup ``device``
    argument). False when it is not queued: seen before in this process, or a custom epilogue."""
    if key.split("|")[3] == "custom":
        return False
    visible = _visible_device(device)
    with _LOCK:
        if key in _STATE:
            return False
        _STATE[key] = "queued"
        _QUEUE.put((key, Path(user_db), visible))
        if not _WORKER or not _WORKER[0].is_alive():
            _STOP.clear()
            _WORKER[:] = [threading.Thread(target=_drain, name="instance_factory-background-tuner", daemon=True)]
            _WORKER[0].start()
    return True


def status() -> dict[str, list[str]]:
    """Problem keys by state: queued, running, done, failed (with the child's log file) or claimed
    (another process holds the problem's claim)."""
    out: dict[str, list[str]] = {s: [] for s in ("queued", "running", "done", "failed", "claimed")}
    with _LOCK:
        for key, state in _STATE.items():
            out[state].append(f"{key} (log: {_LOGS.get(key, '-')})" if state == "failed" else key)
    return out


def wait(timeout: float | None = None) -> bool:
    """Block until nothing is queued or running; False if ``timeout`` seconds passed first."""
    end = None if timeout is None else time.monotonic() + timeout
    with _IDLE:
        while any(s in ("queued", "running") for s in _STATE.values()):
            left = None if end is None else end - time.monotonic()
            if left is not None and left <= 0:
                return False
            _IDLE.wait(left)
    return True


# ----------------------------------------------------------------------------------------------
# the worker
# ----------------------------------------------------------------------------------------------
def _drain() -> None:
    while not _STOP.is_set():
        try:
            key, user_db, visible = _QUEUE.get(timeout=0.5)
        except queue.Empty:
            continue
        ok = False
        try:
            claim = _claim_path(user_db, key)
            if not _take_claim(claim, key):
                _set(key, "claimed")
                continue
            try:
                _set(key, "running")
                ok = _run_child(key, user_db, visible)
            finally:
                claim.unlink(missing_ok=True)
        except Exception as exc:  # noqa: BLE001 - report it, keep draining the queue
            with _LOCK:
                _LOGS.setdefault(key, f"{type(exc).__name__}: {exc}")
        _set(key, "done" if ok else "failed")


def _set(key: str, state: str) -> None:
    with _IDLE:
        _STATE[key] = state
        _IDLE.notify_all()


def _setting(name: str, env: str, default: Any, kind: type) -> Any:
    if name in _SETTINGS:
        return _SETTINGS[name]
    raw = os.environ.get(env, "").strip()
    try:
        return kind(raw) if raw else default
    except ValueError as exc:
        raise ValueError(f"${env}={raw!r} is not a valid {kind.__name__}") from exc


def _run_child(key: str, user_db: Path, visible: str | None) -> bool:
    """Tune ``key`` in a child process; True when it exited cleanly with a verified instance timed."""
    minutes = float(_setting("max_minutes", MINUTES_ENV, DEFAULT_MINUTES, float))
    extra = _SETTINGS.get("extra_args") or shlex.split(os.environ.get(ARGS_ENV, ""))
    cmd = [sys.executable, "-m", "instance_factory", "tune", "--problem", key, "--db", str(user_db),
           "--max-instances", str(int(_setting("max_instances", INSTANCES_ENV, DEFAULT_INSTANCES, int))),
           "--max-minutes", str(minutes), "--quiet", "--no-summary", *extra]
    env = dict(os.environ, INSTANCE_FACTORY_MISS_POLICY="heuristic")  # the child's own misses never recurse
    root = str(Path(__file__).resolve().parents[2])  # importable from a source checkout too
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    if visible is not None:
        env["CUDA_VISIBLE_DEVICES"] = visible
    log = _claim_path(user_db, key).with_suffix(".log")
    with _LOCK:
        _LOGS[key] = str(log)
    with open(log, "w") as out:
        out.write(f"# {' '.join(shlex.quote(c) for c in cmd)}\n")
        out.flush()
        child = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env,
                                 preexec_fn=_lower_priority if os.name == "posix" else None)
        _CHILD[:] = [child]
        try:
            # the tuner stops starting measurements at --max-minutes; leave it time to finish one
            rc = child.wait(timeout=60 * minutes + 300)
        except subprocess.TimeoutExpired:
            child.kill()
            rc = child.wait()
        finally:
            _CHILD.clear()
    return rc == 0 and _served(log.read_text(errors="replace"))


def _served(log: str) -> bool:
    """The child's summary says a verified instance now has rows (or another process had tuned it)."""
    ok = re.search(r"measured \d+ instances \((\d+) ok,", log)
    return bool(ok and int(ok.group(1)) > 0) or "already tuned (skipped)" in log


def _lower_priority() -> None:
    try:
        os.nice(10)
    except OSError:
        pass


def _visible_device(device: Any) -> str | None:
    """The CUDA_VISIBLE_DEVICES entry of the lookup's device for the child (None: inherit, e.g. CPU)."""
    import torch

    from ..algorithms import interpreting

    if interpreting() or not torch.cuda.is_available():
        return None
    if device is None:
        index = torch.cuda.current_device()
    elif isinstance(device, int):
        index = device
    else:
        dev = torch.device(device)
        if dev.type != "cuda":
            return None
        index = dev.index if dev.index is not None else torch.cuda.current_device()
    visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    return visible[index] if index < len(visible) else str(index)


# ----------------------------------------------------------------------------------------------
# claims: one tuning process per problem among the processes that share a user tier
# ----------------------------------------------------------------------------------------------
def _claim_path(user_db: Path, key: str) -> Path:
    folder = user_db.parent / ".background"
    folder.mkdir(parents=True, exist_ok=True)
    return folder / (hashlib.sha1(f"{user_db.name}|{key}".encode()).hexdigest()[:20] + ".claim")


def _take_claim(path: Path, key: str) -> bool:
    """Create the claim; take over one whose process is gone or that outlived any child's time limit."""
    me = f"{socket.gethostname()} {os.getpid()} {time.time():.0f}\n{key}\n"
    for _ in range(2):
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            if not _stale(path):
                return False
            path.unlink(missing_ok=True)
            continue
        with os.fdopen(fd, "w") as f:
            f.write(me)
        return True
    return False


def _stale(path: Path) -> bool:
    try:
        host, pid, started = path.read_text().split("\n", 1)[0].split()
        pid_i, started_f = int(pid), float(started)
    except (OSError, ValueError):
        return True  # unreadable or half written: its writer died
    limit = 60 * float(_setting("max_minutes", MINUTES_ENV, DEFAULT_MINUTES, float)) + 600
    if time.time() - started_f > limit:
        return True
    if host != socket.gethostname():
        return False  # another machine's process: trust it until the time limit
    try:
        os.kill(pid_i, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


@atexit.register
def _shutdown() -> None:
    """Stop the worker and the running child at interpreter exit (its problem stays untuned)."""
    _STOP.set()
    for child in list(_CHILD):
        if child.poll() is None:
            child.terminate()
            try:
                child.wait(timeout=5)
            except subprocess.TimeoutExpired:
                child.kill()
