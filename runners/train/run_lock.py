"""One writer per run directory: an exclusive lock every command that writes a run dir takes first.

Two ``mazegym train`` on one run dir would interleave records, prune each other's in-flight
checkpoint saves and delete each other's SFT result. :func:`run_dir_lock` takes an OS-level lock
(``filelock``: ``flock`` on POSIX, released by the kernel when the process dies, so a killed run
leaves no stale lock) on ``RUN/.mazegym.lock`` and records the holder's pid, host and command in
``RUN/.mazegym.lock.holder``, which a refused second writer reads to say who holds it.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Iterator

from runners import atomic

LOCK_FILE = ".mazegym.lock"
"""The lock file inside a run dir."""
HOLDER_FILE = ".mazegym.lock.holder"
"""Who holds the lock (pid, host, command, since): informative only, the OS lock decides."""


class RunDirBusy(RuntimeError):
    """Another process holds the run directory's lock."""


_held: dict[str, list] = {}  # run dir -> [its lock, depth], while this process holds it


@contextlib.contextmanager
def run_dir_lock(run_dir: str | Path, command: str | None = None, create: bool = True) -> Iterator[Path]:
    """Hold the exclusive lock on ``run_dir`` inside the block (re-entrant within a process); yields the dir.

    Raises :class:`RunDirBusy` naming the holder (pid, host, command) when another process has it.
    With ``create=False`` a missing run dir is not created (and there is nothing to lock).
    """
    from filelock import FileLock, Timeout

    root = Path(run_dir).resolve()
    key = str(root)
    if not create and not root.is_dir():
        yield root
        return
    if key in _held:
        _held[key][1] += 1
        try:
            yield root
        finally:
            _held[key][1] -= 1
        return
    created = not root.exists()
    lock = FileLock(str(root / LOCK_FILE), timeout=0, thread_local=False)
    try:
        root.mkdir(parents=True, exist_ok=True)
        lock.acquire()
    except Timeout:
        raise RunDirBusy(
            f"run dir {root} is in use by {describe_holder(root)}; wait for it to finish, stop it, or choose "
            "another run_dir"
        ) from None
    except OSError as exc:  # a read-only run dir, or one this user may not write
        raise atomic.NotWritable(
            f"cannot write the run dir {root} ({exc.strerror or exc}); fix its permissions or mount, or choose "
            "another run_dir"
        ) from None
    _held[key] = [lock, 1]
    try:
        holder = {
            "pid": os.getpid(),
            "host": platform.node(),
            "command": command or " ".join(sys.argv),
            "since": time.strftime("%Y-%m-%d %H:%M:%S %z"),
        }
        atomic.write_json(root / HOLDER_FILE, holder)
        yield root
    finally:
        del _held[key]
        (root / HOLDER_FILE).unlink(missing_ok=True)
        lock.release()
        # A command refused before it wrote anything leaves no run dir behind it that it created.
        if created and {p.name for p in root.iterdir()} <= {LOCK_FILE}:
            (root / LOCK_FILE).unlink(missing_ok=True)
            with contextlib.suppress(OSError):
                root.rmdir()


def describe_holder(run_dir: str | Path) -> str:
    """``pid N on HOST (COMMAND, since TIME)`` from the holder file, or a plain phrase when it is unreadable."""
    try:
        info = json.loads((Path(run_dir) / HOLDER_FILE).read_text())
        return f"pid {info['pid']} on {info['host']} ({str(info.get('command'))[:120]}, since {info.get('since')})"
    except (OSError, ValueError, KeyError, TypeError, RecursionError):
        return "another process (its pid was not recorded yet)"
