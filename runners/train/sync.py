"""LoRA weight sync through a directory: atomic, versioned, monotonic.

Layout of ``sync_dir`` (default ``<run_dir>/adapter_sync``; any shared filesystem path such as
``/shared/run42/adapters`` works the same way)::

    v000001/adapter_config.json, adapter_model.safetensors, manifest.json
    v000002/...
    LATEST            # "2": written last, atomically -- the commit marker

:meth:`AdapterSync.publish` writes the adapter and a manifest (sha256 and size of each file)
into a hidden temp directory next to the final one, fsyncs it, renames it into place (atomic
on POSIX; :func:`runners.train.checkpoint.commit_dir`, which checkpoints use too), and only then
replaces ``LATEST`` (temp file + rename). A reader that follows
``LATEST`` therefore never sees a half-written adapter, and :meth:`AdapterSync.committed`
checks the files against the manifest before anything loads them: a truncated, edited,
missing or extra file is an :class:`AdapterSyncError` naming it, and the generator keeps the
weights it serves. A publish that fails (read-only or full storage) raises the same error
and leaves the previous version committed. Versions must strictly increase; old versions are
pruned (the newest ``keep`` stay, so a generator still loading the previous one is not pulled
from under it).
"""

from __future__ import annotations

import os
import re
import shutil
import time
from pathlib import Path
from typing import Any

from runners.atomic import write_text
from runners.train.checkpoint import MANIFEST, commit_dir, read_manifest, verify

LATEST_FILE = "LATEST"
ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors")
_VERSION_DIR = re.compile(r"^v(\d{6,})$")


class AdapterSyncError(RuntimeError):
    """The sync dir cannot be written, or holds a published adapter that must not be loaded."""


def version_dir_name(version: int) -> str:
    """``v000042`` for version 42."""
    return f"v{int(version):06d}"


def storage_error(exc: BaseException) -> bool:
    """Whether ``exc`` says the storage failed (full, read-only, gone): an ``OSError`` with an errno, or safetensors'
    own error wrapping one (it reports a full disk as ``SafetensorError: ... IoError(Os { code: 28, ... })``)."""
    if isinstance(exc, OSError):
        return exc.errno is not None
    return type(exc).__name__ == "SafetensorError" and "IoError" in str(exc)


def write_adapter(source: Any, directory: Path) -> None:
    """Write ``source`` as a PEFT adapter into ``directory``.

    ``source`` may be a policy with ``save_adapter(dir)`` (``algos.policies.lm.LoRALMPolicy``),
    a ``peft.PeftModel`` (``save_pretrained``), or a path to an existing adapter directory.
    """
    if hasattr(source, "save_adapter"):
        source.save_adapter(directory)
    elif hasattr(source, "save_pretrained") and hasattr(source, "peft_config"):
        source.save_pretrained(str(directory), safe_serialization=True)
    elif isinstance(source, (str, os.PathLike)):
        src = Path(source)
        for name in ("adapter_config.json", "adapter_model.safetensors"):
            if not (src / name).is_file():
                raise FileNotFoundError(f"{src} is not a PEFT adapter directory ({name} missing)")
            shutil.copy2(src / name, directory / name)
    else:
        raise TypeError(
            f"cannot publish {type(source).__name__}: pass a LoRA policy, a PeftModel or an adapter directory"
        )
    for name in ("adapter_config.json", "adapter_model.safetensors"):
        if not (directory / name).is_file():
            raise RuntimeError(f"publishing wrote no {name}; is the model a PEFT LoRA model?")


class AdapterSync:
    """Publish and discover versioned LoRA adapters in ``sync_dir``."""

    def __init__(self, sync_dir: str | os.PathLike, keep: int = 3):
        if keep < 1:
            raise ValueError(f"keep must be >= 1, got {keep}")
        self.sync_dir = Path(sync_dir)
        self.keep = keep
        self.last_publish_ms = 0.0
        self.last_load_ms = 0.0

    def publish(self, source: Any, version: int) -> Path:
        """Write ``source`` as adapter ``version`` atomically; returns its directory.

        Raises ``ValueError`` when ``version`` is not greater than the latest published one.
        """
        t0 = time.perf_counter()
        version = int(version)
        current = self.latest()
        if current is not None and version <= current[0]:
            raise ValueError(
                f"adapter versions must increase: {self.sync_dir} already has version {current[0]}, got {version}"
            )
        if version < 1:
            raise ValueError(f"adapter versions start at 1 (0 means base weights), got {version}")
        final = self.sync_dir / version_dir_name(version)
        try:
            self.sync_dir.mkdir(parents=True, exist_ok=True)
            # A directory already at ``final`` is left over from a crash after its rename but before LATEST: replaced.
            commit_dir(final, lambda tmp: write_adapter(source, tmp), version)
            self._write_latest(version)
        except Exception as exc:
            if not storage_error(exc):  # e.g. a source that is no adapter directory
                raise
            kept = f"version {current[0]} stays published" if current else "nothing is published yet"
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)[:200]
            raise AdapterSyncError(
                f"cannot publish adapter version {version} to {self.sync_dir}: {reason} ({type(exc).__name__}); {kept}"
            ) from exc
        self._prune()
        self.last_publish_ms = (time.perf_counter() - t0) * 1e3
        return final

    def latest(self) -> tuple[int, Path] | None:
        """``(version, directory)`` of the newest committed adapter, or ``None`` if none yet."""
        marker = self.sync_dir / LATEST_FILE
        try:
            text = marker.read_text().strip()
        except FileNotFoundError:
            return None
        if not text.isdigit():
            raise AdapterSyncError(f"corrupt {marker}: {text!r} (expected a version number)")
        version = int(text)
        return version, self.sync_dir / version_dir_name(version)

    def check(self, directory: Path) -> str | None:
        """``None`` when the published adapter in ``directory`` is complete and intact, else what is wrong."""
        if not directory.is_dir():
            return "the directory is missing"
        problem = verify(directory, required=ADAPTER_FILES)
        if problem:
            return problem
        listed = {*read_manifest(directory)[0]["files"], MANIFEST}
        extra = sorted(
            p.relative_to(directory).as_posix()
            for p in directory.rglob("*")
            if not p.is_dir() and p.relative_to(directory).as_posix() not in listed
        )
        return f"unexpected file(s) not in the manifest: {', '.join(extra)}" if extra else None

    def committed(self) -> tuple[int, Path] | None:
        """Like :meth:`latest`, but checked: raises :class:`AdapterSyncError` when that adapter is broken."""
        latest = self.latest()
        if latest is None:
            return None
        problem = self.check(latest[1])
        if problem:
            raise AdapterSyncError(
                f"published adapter version {latest[0]} at {latest[1]} is broken, not loaded: {problem}"
            )
        return latest

    def versions(self) -> list[int]:
        """Committed-or-not version directories present, ascending."""
        if not self.sync_dir.is_dir():
            return []
        found = (_VERSION_DIR.match(p.name) for p in self.sync_dir.iterdir() if p.is_dir())
        return sorted(int(m.group(1)) for m in found if m)

    def pull(self, generator: Any) -> int:
        """Load the latest adapter into ``generator`` if it is newer than what it serves; returns its version."""
        latest = self.latest()
        if latest is None or latest[0] <= generator.adapter_version:
            return generator.adapter_version
        problem = self.check(latest[1])
        if problem:
            raise AdapterSyncError(
                f"published adapter version {latest[0]} at {latest[1]} is broken, not loaded "
                f"(the generator keeps version {generator.adapter_version}): {problem}"
            )
        t0 = time.perf_counter()
        generator.load_adapter(latest[1], latest[0])
        self.last_load_ms = (time.perf_counter() - t0) * 1e3
        return latest[0]

    def _write_latest(self, version: int) -> None:
        write_text(self.sync_dir / LATEST_FILE, f"{version}\n")

    def _prune(self) -> None:
        for version in self.versions()[: -self.keep]:
            shutil.rmtree(self.sync_dir / version_dir_name(version), ignore_errors=True)
