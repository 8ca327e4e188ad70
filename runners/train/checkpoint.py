"""Checkpoints that resume exactly, and that are never half-written.

Layout of ``<run_dir>/checkpoints``::

    step_000010/
        adapter/adapter_model.safetensors, adapter_config.json   trainable weights (PEFT format)
        adapter/value_head.safetensors   the critic's weights (runs with a value head, i.e. ppo, only)
        trainer_state.pt     optimizer, scheduler, algorithm RNG (tensors only: loaded with weights_only=True)
        rng_state.json       python, numpy and torch RNG states
        state.json           step counter, maze stream position, metrics so far, config, the SFT result's fingerprint
        manifest.json        run id, sha256 and size of every file above (written last inside the dir)
    step_000020/...
    latest                   "step_000020" and the run id: the commit marker, replaced atomically, written last

A checkpoint is first written to a hidden temporary directory, fsynced, and renamed into place
(atomic on POSIX); only then is ``latest`` replaced. A crash at any moment leaves either the old
or the new checkpoint, never a torn one. On load every file is checked against the manifest,
and the manifest must list every file of :data:`REQUIRED_FILES`; a checkpoint that fails
(missing, truncated or edited file, malformed or incomplete manifest) is skipped with a
"broken, skipped" message naming it, and the next newest valid one of the same run is used.

Every checkpoint belongs to one run (a random run id in its manifest and in ``latest``).
Selection follows ``latest``; pruning deletes only the current run's checkpoints; a fresh
start in a directory that holds another run's checkpoints is refused, and so is resuming a
checkpoint of another run dir (:meth:`CheckpointManager.start_run`). Each manifest names the
checkpoint it continues (``follows``), so a checkpoint newer than ``latest`` is resumed only when
it continues the marked one (a save that crashed before its marker), never when it was left
from before a rewind (resuming an older checkpoint makes ``latest`` name it).
"""

from __future__ import annotations

import hashlib
import json
import pickle
import re
import shutil
import random
import uuid
from pathlib import Path, PurePosixPath
from typing import Any, Callable

import numpy as np
import torch

from mazegym.evalsets import MazeStream
from runners.atomic import replace_dir, temp_dir_beside, write_text

MANIFEST = "manifest.json"
LATEST = "latest"
REQUIRED_FILES = (
    "adapter/adapter_config.json",
    "adapter/adapter_model.safetensors",
    "trainer_state.pt",
    "rng_state.json",
    "state.json",
)
"""Files every RL checkpoint holds; a manifest that does not list all of them is broken."""
VALUE_HEAD_FILE = "adapter/value_head.safetensors"
"""The critic's weights, which checkpoints of runs with a critic (ppo) hold next to the adapter."""


def required_files(value_head: bool = False) -> tuple[str, ...]:
    """:data:`REQUIRED_FILES`, plus the critic's weights when the run trains a value head."""
    return REQUIRED_FILES + ((VALUE_HEAD_FILE,) if value_head else ())


_STEP_DIR = re.compile(r"^step_(\d{6,})$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


def step_dir_name(step: int) -> str:
    """``step_000042`` for step 42."""
    return f"step_{int(step):06d}"


def new_run_id() -> str:
    """A fresh random run id."""
    return uuid.uuid4().hex


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    """Hex sha256 of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def write_manifest(directory: Path, step: int, run_id: str | None = None, follows: dict | None = None) -> dict:
    """Hash every file under ``directory`` into ``manifest.json`` (:func:`commit_dir` fsyncs the tree after it).

    ``follows`` names the checkpoint this one continues (``{"name", "manifest_sha256"}``), so that after a
    rewind the abandoned later checkpoints are told apart from a save that crashed before its marker.
    """
    files = {}
    for path in sorted(p for p in directory.rglob("*") if p.is_file() and p.name != MANIFEST):
        rel = path.relative_to(directory).as_posix()
        files[rel] = {"sha256": sha256_file(path), "bytes": path.stat().st_size}
    manifest = {"step": int(step), "run_id": run_id, "follows": follows, "files": files}
    (directory / MANIFEST).write_text(json.dumps(manifest, indent=2))
    return manifest


def commit_dir(
    final: Path, fill: Callable[[Path], None], number: int, run_id: str | None = None, follows: dict | None = None
) -> None:
    """Write the versioned directory ``final`` (a checkpoint or a published adapter) atomically: ``fill(tmp)`` fills a
    hidden directory beside it, :func:`write_manifest` hashes what it wrote, and the directory replaces ``final``
    (fsynced; a crash leaves ``final`` as it was and the hidden directory is removed). The caller's marker comes after.
    """
    tmp = temp_dir_beside(final)
    try:
        fill(tmp)
        write_manifest(tmp, number, run_id, follows)
        replace_dir(tmp, final)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def _key_problem(directory: Path, rel: Any) -> str | None:
    """Why a manifest key may not be opened (absolute, ``..``, escaping via a link), or None."""
    if not isinstance(rel, str) or not rel:
        return f"manifest key {rel!r} is not a file name"
    parts = PurePosixPath(rel).parts
    if rel.startswith(("/", "\\")) or PurePosixPath(rel).is_absolute() or ".." in parts or "\\" in rel or "\x00" in rel:
        return f"manifest key {rel!r} points outside the checkpoint"
    try:
        inside = (directory / rel).resolve().is_relative_to(directory.resolve())
    except (OSError, RuntimeError) as exc:  # a symlink loop, a name too long for the filesystem
        return f"manifest key {rel!r} cannot be resolved ({type(exc).__name__})"
    if not inside:
        return f"manifest key {rel!r} points outside the checkpoint (through a link)"
    return None


def _entry_problem(rel: str, meta: Any) -> str | None:
    """Why a manifest entry is malformed, or None."""
    if not isinstance(meta, dict):
        return f"manifest entry for {rel} is {type(meta).__name__}, not an object with sha256 and bytes"
    size, digest = meta.get("bytes"), meta.get("sha256")
    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        return f"manifest entry for {rel} has no valid 'bytes' (got {size!r})"
    if not isinstance(digest, str) or not _SHA256.match(digest):
        return f"manifest entry for {rel} has no valid 'sha256'"
    return None


def read_manifest(directory: str | Path) -> tuple[dict | None, str | None]:
    """``(manifest, None)`` when ``directory``'s manifest is well formed, else ``(None, reason)``.

    Only the structure is checked here (object with a ``files`` object of
    ``{"sha256": hex, "bytes": int}`` entries, safe relative keys, a string run id);
    :func:`verify` also checks the files themselves.
    """
    directory = Path(directory)
    path = directory / MANIFEST
    if not path.is_file():
        return None, "no manifest.json (the checkpoint was never finished)"
    try:
        manifest = json.loads(path.read_text())
    except (OSError, ValueError, RecursionError) as exc:  # RecursionError: nesting too deep for json
        return None, f"manifest.json is unreadable ({type(exc).__name__})"
    if not isinstance(manifest, dict):
        return None, f"manifest.json is a {type(manifest).__name__}, not an object"
    files = manifest.get("files")
    if not isinstance(files, dict):
        return None, "manifest.json has no 'files' object"
    run_id = manifest.get("run_id")
    if run_id is not None and not isinstance(run_id, str):
        return None, f"manifest.json has a malformed run_id {run_id!r}"
    for rel, meta in files.items():
        problem = _key_problem(directory, rel) or _entry_problem(rel, meta)
        if problem:
            return None, problem
    return manifest, None


def verify(directory: str | Path, required: tuple[str, ...] = REQUIRED_FILES) -> str | None:
    """``None`` when the checkpoint at ``directory`` is complete and intact, else what is wrong.

    Complete means the manifest lists every file of ``required``; intact means every listed
    file exists inside the checkpoint with the listed size and sha256.
    """
    directory = Path(directory)
    manifest, problem = read_manifest(directory)
    if manifest is None:
        return problem
    files = manifest["files"]
    for rel in required:
        if rel not in files:
            return f"the manifest does not list {rel}, which every checkpoint needs"
    for rel, meta in files.items():
        path = directory / rel
        if path.is_symlink() or not path.is_file():
            return f"{rel} is missing"
        try:
            size = path.stat().st_size
            if size != meta["bytes"]:
                return f"{rel} has {size} bytes, the manifest says {meta['bytes']} (truncated?)"
            if sha256_file(path) != meta["sha256"]:
                return f"{rel} does not match its sha256 in the manifest (corrupted)"
        except OSError as exc:  # unreadable (permissions, I/O error): broken, not a traceback
            return f"{rel} is unreadable ({type(exc).__name__}: {exc.strerror or exc})"
    return None


def run_id_of(directory: str | Path) -> str | None:
    """The run id recorded in a checkpoint's manifest (None when absent or unreadable)."""
    manifest, _ = read_manifest(directory)
    return manifest.get("run_id") if manifest else None


class CheckpointWriteError(RuntimeError):
    """A checkpoint could not be written (a full disk, a read-only or vanished directory); the committed ones stand."""


class CheckpointManager:
    """Writes, lists, verifies and prunes the checkpoints of one run directory."""

    def __init__(
        self,
        root: str | Path,
        keep: int = 3,
        log: Callable[[str], None] = print,
        required: tuple[str, ...] = REQUIRED_FILES,
        run_id: str | None = None,
    ):
        self.root = Path(root)
        self.keep = max(int(keep), 1)
        self.log = log
        self.required = tuple(required)
        self.run_id = run_id
        """The run whose checkpoints this manager writes and prunes (set by :meth:`start_run` or the first save)."""

    # ------------------------------------------------------------------ writing
    def save(self, step: int, write: Callable[[Path], None]) -> Path:
        """Write checkpoint ``step``: ``write(tmp_dir)`` fills a temp dir, which is then committed.

        Returns the final directory. Re-saving an existing step of this run replaces it
        atomically; a directory of that name from another run is never overwritten.
        """
        self.run_id = self.run_id or new_run_id()
        self.root.mkdir(parents=True, exist_ok=True)
        final = self.root / step_dir_name(step)
        if final.exists() and run_id_of(final) not in (None, self.run_id):
            raise FileExistsError(f"{final} belongs to another run ({run_id_of(final)}); not overwriting it")
        try:
            commit_dir(final, write, step, self.run_id, self._marked_checkpoint())
            self._write_latest(final.name)
        except (OSError, RuntimeError) as exc:  # torch.save reports a full disk as a RuntimeError
            marked = self.marker()[0]
            standing = f"the last committed checkpoint, {marked}, is intact" if marked else "none was committed yet"
            raise CheckpointWriteError(
                f"writing checkpoint {final.name} into {self.root} failed ({type(exc).__name__}: {exc}); {standing}: "
                "free space (or fix the directory), then rerun with --resume latest"
            ) from exc
        self.prune()
        return final

    def _marked_checkpoint(self) -> dict | None:
        """``{"name", "manifest_sha256"}`` of the checkpoint ``latest`` names when it is this run's, else None."""
        named, run = self.marker()
        path = self.root / named / MANIFEST if named else None
        if path is None or run != self.run_id or not path.is_file():
            return None
        return {"name": named, "manifest_sha256": sha256_file(path)}

    def _continues(self, path: Path, named: str) -> bool:
        """Whether checkpoint ``path`` (newer than the marker's ``named``) was saved continuing ``named``: a save
        that crashed before its marker. A checkpoint left from before a rewind continues another one."""
        manifest, _ = read_manifest(path)
        if manifest is None:
            return True  # broken: verification says so when it comes to it
        follows = manifest.get("follows")
        if not isinstance(follows, dict):
            return "follows" not in manifest  # written before checkpoints said what they continue
        marked = self.root / named / MANIFEST
        return (
            follows.get("name") == named and marked.is_file() and follows.get("manifest_sha256") == sha256_file(marked)
        )

    def _write_latest(self, name: str) -> None:
        write_text(self.root / LATEST, f"{name}\n{self.run_id or ''}\n")

    def prune(self) -> None:
        """Delete this run's checkpoints but the newest ``keep`` (and stale temp dirs); other runs' stay."""
        for stale in self.root.glob(".step_*"):
            shutil.rmtree(stale, ignore_errors=True)
        if self.run_id is None:
            return
        marked, _ = self.marker()
        own = [path for _, path in self.list() if run_id_of(path) == self.run_id]
        for path in own[: -self.keep]:
            if path.name != marked:
                shutil.rmtree(path, ignore_errors=True)

    # ------------------------------------------------------------------ reading
    def list(self) -> list[tuple[int, Path]]:
        """(step, dir) of every committed checkpoint directory, oldest first (not verified, any run)."""
        if not self.root.is_dir():
            return []
        found = []
        for path in self.root.iterdir():
            match = _STEP_DIR.match(path.name)
            if match and path.is_dir():
                found.append((int(match.group(1)), path))
        return sorted(found)

    def marker(self) -> tuple[str | None, str | None]:
        """``(checkpoint name, run id)`` from the ``latest`` marker (None where absent)."""
        try:
            lines = (self.root / LATEST).read_text().splitlines()
        except (OSError, UnicodeDecodeError):
            return None, None
        name = lines[0].strip() if lines else ""
        run = lines[1].strip() if len(lines) > 1 else ""
        return (name if _STEP_DIR.match(name) else None), (run or None)

    def latest_valid(self) -> Path | None:
        """The checkpoint ``latest`` names, when it verifies; else the newest valid one of the same run.

        Checkpoints of the marker's run newer than it (a crash after the rename, before the
        marker) come first, once verified. Broken ones, and other runs' ones, are skipped
        with a message naming them. Without a marker (a crash before the first one was
        written, or an old run dir) the newest valid checkpoint is used, and said so.
        """
        named, run = self.marker()
        everything = [path for _, path in reversed(self.list())]
        if named is None:
            candidates = everything
            if candidates:
                self.log(f"[checkpoint] {self.root} has no latest marker; using the newest valid checkpoint")
        else:
            run = run or run_id_of(self.root / named)
            newer = [p for p in everything if p.name > named]
            older = [p for p in everything if p.name < named]
            abandoned = [p for p in newer if run_id_of(p) == run and not self._continues(p, named)]
            for path in abandoned:
                self.log(f"[checkpoint] {path}: left from before a rewind to {named}, skipped")
            candidates = [p for p in newer if p not in abandoned] + [self.root / named] + older
        for path in candidates:
            if not path.is_dir():
                self.log(f"[checkpoint] {path}: missing, skipped (named by {self.root / LATEST})")
                continue
            problem = verify(path, self.required)
            if problem is not None:
                self.log(f"[checkpoint] {path}: broken, skipped: {problem}")
            elif run is not None and run_id_of(path) != run:
                self.log(f"[checkpoint] {path}: from another run, skipped")
            else:
                return path
        return None

    def resolve(self, resume: str) -> Path | None:
        """Which checkpoint to resume from: ``auto``/``latest`` (see :meth:`latest_valid`), ``none``, or a path.

        An explicit path that fails verification raises ``ValueError`` with the reason.
        """
        if resume == "none":
            return None
        if resume in ("auto", "latest"):
            return self.latest_valid()
        path = Path(resume)
        if path.is_dir() and (path / LATEST).is_file() and verify(path, self.required) is not None:
            return CheckpointManager(path, self.keep, self.log, self.required).latest_valid()
        problem = verify(path, self.required)
        if problem is not None:
            raise ValueError(f"cannot resume from {path}: {problem}")
        return path

    def start_run(self, resume: str) -> Path | None:
        """Resolve ``resume`` for a training run and take on its run id; returns the checkpoint or None.

        Resuming continues the checkpoint's run. ``latest`` with nothing valid to resume raises
        ``ValueError``. A fresh start (``none``, or ``auto`` with nothing valid) gets a new run id
        and is refused while the directory holds checkpoints of an earlier run: they would
        otherwise be mixed with this run's.
        """
        if resume not in ("auto", "latest", "none"):
            given = Path(resume)
            inside = given.resolve() if (given / LATEST).is_file() else given.resolve().parent
            if inside != self.root.resolve():
                raise ValueError(
                    f"--resume {resume}: not a checkpoint of this run dir ({self.root}); a run resumes only its own "
                    "checkpoints (pass --run-dir of the run that wrote it)"
                )
        path = self.resolve(resume)
        if path is not None:
            self.run_id = run_id_of(path) or new_run_id()
            return path
        if resume == "latest":
            raise ValueError(
                f"--resume latest: nothing to resume, {self.root} holds no valid checkpoint "
                f"(use --resume none to start fresh in another run dir)"
            )
        existing = [path.name for _, path in self.list()]
        if existing:
            raise ValueError(
                f"{self.root} already holds checkpoints of an earlier run ({', '.join(existing)}); "
                f"a fresh start here would mix runs. Resume it (--resume latest), or start the new run "
                f"in another --run-dir, or move those checkpoints aside"
            )
        self.run_id = new_run_id()
        return None

    def continue_from(self, path: Path) -> None:
        """Make ``latest`` name checkpoint ``path``, which a resumed run continues (after its checks passed).

        After a rewind (resuming an older checkpoint than ``latest`` names) the marker then names the
        rewound one, so later saves record it as what they follow and the checkpoints left from before
        the rewind are never resumed by ``--resume latest``.
        """
        if path.parent.resolve() == self.root.resolve() and self.marker()[0] != path.name:
            self._write_latest(path.name)


# --------------------------------------------------------------------------- a run's checkpoint content
def rng_state() -> dict[str, Any]:
    """Python, numpy and torch RNG states as plain JSON data (no pickles: loading runs no code)."""
    version, words, gauss = random.getstate()
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    return {
        "python": {"version": version, "state": list(words), "gauss": gauss},
        "numpy": {
            "kind": kind,
            "keys": keys.tolist(),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached": float(cached),
        },
        "torch": torch.get_rng_state().tolist(),
    }


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore :func:`rng_state`."""
    py, npy = state["python"], state["numpy"]
    random.setstate((int(py["version"]), tuple(int(w) for w in py["state"]), py["gauss"]))
    np.random.set_state(
        (
            str(npy["kind"]),
            np.asarray(npy["keys"], dtype=np.uint32),
            int(npy["pos"]),
            int(npy["has_gauss"]),
            float(npy["cached"]),
        )
    )
    torch.set_rng_state(torch.tensor(state["torch"], dtype=torch.uint8))


def save_checkpoint(
    manager: CheckpointManager,
    step: int,
    policy: Any,
    algorithm: Any,
    stream_state: dict[str, Any],
    config: dict[str, Any],
    sft_fingerprint: str | None,
    extra: dict[str, Any],
) -> Path:
    """Write checkpoint ``step`` (adapter, optimizer/scheduler, RNGs, maze stream state, step, the run's saved
    ``config``, the fingerprint of the SFT result the weights were trained on, ``extra``)."""

    def write(tmp: Path) -> None:
        policy.save_adapter(tmp / "adapter")
        torch.save(algorithm.state_dict(), tmp / "trainer_state.pt")
        (tmp / "rng_state.json").write_text(json.dumps(rng_state()))
        state = {
            "step": step,
            "stream": stream_state,
            "config": config,
            "sft_fingerprint": sft_fingerprint,
            **extra,
        }
        (tmp / "state.json").write_text(json.dumps(state, indent=2, default=str))

    return manager.save(step, write)


def load_checkpoint(path: Path, policy: Any, algorithm: Any, stream: MazeStream) -> dict[str, Any]:
    """Restore what :func:`save_checkpoint` wrote into live objects; returns the state.json content.

    Nothing is unpickled: the trainer state loads with ``weights_only=True`` (tensors and
    plain containers only) and the RNG states are JSON.
    """
    policy.load_adapter(path / "adapter")
    try:
        trainer_state = torch.load(path / "trainer_state.pt", weights_only=True, map_location="cpu")
    except pickle.UnpicklingError:
        # torch's own message suggests retrying without weights_only, which would run the file's code.
        raise ValueError(
            f"{path / 'trainer_state.pt'} holds objects other than tensors and plain containers; mazegym never "
            "unpickles code from a checkpoint, so it is refused (a crafted or foreign file)"
        ) from None
    algorithm.load_state_dict(trainer_state)
    set_rng_state(json.loads((path / "rng_state.json").read_text()))
    state = json.loads((path / "state.json").read_text())
    stream.load_state_dict(state["stream"])
    return state


def read_state(path: Path) -> dict[str, Any]:
    """The ``state.json`` of checkpoint ``path`` (step, maze stream, evaluations so far, config)."""
    return json.loads((Path(path) / "state.json").read_text())
