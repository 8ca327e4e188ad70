"""Checkpoints that resume exactly, and that are never half-written.

Layout of ``<run_dir>/checkpoints``::

    step_000010/
        adapter/adapter_model.safetensors, adapter_config.json   trainable weights (PEFT format)
        trainer_state.pt     optimizer, scheduler, algorithm RNG (algorithm.state_dict())
        rng_state.pt         python, numpy and torch RNG states
        state.json           step counter, maze stream position, metrics so far, config
        manifest.json        sha256 and size of every file above (written last inside the dir)
    step_000020/...
    latest                   "step_000020": the commit marker, replaced atomically, written last

A checkpoint is first written to a hidden temporary directory, fsynced, and renamed into place
(atomic on POSIX); only then is ``latest`` replaced. A crash at any moment leaves either the old
or the new checkpoint, never a torn one. On load every file is checked against the manifest;
a checkpoint that fails (missing, truncated or edited file, no manifest) is skipped with a
message naming it, and the next newest valid one is used.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Callable

MANIFEST = "manifest.json"
LATEST = "latest"
_STEP_DIR = re.compile(r"^step_(\d{6,})$")


def step_dir_name(step: int) -> str:
    """``step_000042`` for step 42."""
    return f"step_{int(step):06d}"


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    """Hex sha256 of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def fsync_path(path: Path) -> None:
    """Flush a file or directory to disk (best effort: some filesystems refuse directory fsync)."""
    try:
        fd = os.open(str(path), os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_manifest(directory: Path, step: int) -> dict:
    """Hash every file under ``directory`` into ``manifest.json`` (and fsync everything)."""
    files = {}
    for path in sorted(p for p in directory.rglob("*") if p.is_file() and p.name != MANIFEST):
        rel = path.relative_to(directory).as_posix()
        files[rel] = {"sha256": sha256_file(path), "bytes": path.stat().st_size}
        fsync_path(path)
    manifest = {"step": int(step), "files": files}
    (directory / MANIFEST).write_text(json.dumps(manifest, indent=2))
    fsync_path(directory / MANIFEST)
    for sub in [directory, *(p for p in directory.rglob("*") if p.is_dir())]:
        fsync_path(sub)
    return manifest


def verify(directory: str | Path) -> str | None:
    """``None`` when the checkpoint at ``directory`` is complete and intact, else what is wrong."""
    directory = Path(directory)
    manifest_path = directory / MANIFEST
    if not manifest_path.is_file():
        return "no manifest.json (the checkpoint was never finished)"
    try:
        manifest = json.loads(manifest_path.read_text())
        files = manifest["files"]
    except (OSError, ValueError, KeyError, TypeError):
        return "manifest.json is unreadable"
    for rel, meta in files.items():
        path = directory / rel
        if not path.is_file():
            return f"{rel} is missing"
        if path.stat().st_size != meta["bytes"]:
            return f"{rel} has {path.stat().st_size} bytes, the manifest says {meta['bytes']} (truncated?)"
        if sha256_file(path) != meta["sha256"]:
            return f"{rel} does not match its sha256 in the manifest (corrupted)"
    return None


class CheckpointManager:
    """Writes, lists, verifies and prunes the checkpoints of one run directory."""

    def __init__(self, root: str | Path, keep: int = 3, log: Callable[[str], None] = print):
        self.root = Path(root)
        self.keep = max(int(keep), 1)
        self.log = log

    # ------------------------------------------------------------------ writing
    def save(self, step: int, write: Callable[[Path], None]) -> Path:
        """Write checkpoint ``step``: ``write(tmp_dir)`` fills a temp dir, which is then committed.

        Returns the final directory. Re-saving an existing step replaces it.
        """
        self.root.mkdir(parents=True, exist_ok=True)
        final = self.root / step_dir_name(step)
        tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=self.root))
        try:
            write(tmp)
            write_manifest(tmp, step)
            if final.exists():
                shutil.rmtree(final)
            os.replace(tmp, final)
            fsync_path(self.root)
            self._write_latest(final.name)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
        self.prune()
        return final

    def _write_latest(self, name: str) -> None:
        fd, tmp = tempfile.mkstemp(prefix=".latest.", dir=self.root)
        with os.fdopen(fd, "w") as fh:
            fh.write(name + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self.root / LATEST)
        fsync_path(self.root)

    def prune(self) -> None:
        """Delete all but the newest ``keep`` checkpoints (and stale temp dirs)."""
        for stale in self.root.glob(".step_*"):
            shutil.rmtree(stale, ignore_errors=True)
        for step, path in self.list()[: -self.keep]:
            shutil.rmtree(path, ignore_errors=True)

    # ------------------------------------------------------------------ reading
    def list(self) -> list[tuple[int, Path]]:
        """(step, dir) of every committed checkpoint directory, oldest first (not verified)."""
        if not self.root.is_dir():
            return []
        found = []
        for path in self.root.iterdir():
            match = _STEP_DIR.match(path.name)
            if match and path.is_dir():
                found.append((int(match.group(1)), path))
        return sorted(found)

    def latest_valid(self) -> Path | None:
        """The newest checkpoint that verifies; broken ones are skipped with a message naming them.

        The ``latest`` marker is tried first; checkpoints newer than it (a crash after the
        rename, before the marker) are still considered, newest first, once verified.
        """
        candidates = [path for _, path in reversed(self.list())]
        marker = self.root / LATEST
        if marker.is_file():
            named = self.root / marker.read_text().strip()
            if named in candidates:
                candidates.remove(named)
                newer = [p for p in candidates if p.name > named.name]
                older = [p for p in candidates if p.name < named.name]
                candidates = newer + [named] + older
        for path in candidates:
            problem = verify(path)
            if problem is None:
                return path
            self.log(f"[checkpoint] skipping broken checkpoint {path}: {problem}")
        return None

    def resolve(self, resume: str) -> Path | None:
        """Which checkpoint to resume from: ``auto``/``latest`` (newest valid, or None), ``none``, or a path.

        An explicit path that fails verification raises ``ValueError`` with the reason.
        """
        if resume == "none":
            return None
        if resume in ("auto", "latest"):
            return self.latest_valid()
        path = Path(resume)
        if path.is_dir() and (path / LATEST).is_file() and verify(path) is not None:
            return CheckpointManager(path, self.keep, self.log).latest_valid()
        problem = verify(path)
        if problem is not None:
            raise ValueError(f"cannot resume from {path}: {problem}")
        return path
