"""Writing files and directories so that a reader sees the old version or the new one, never a torn one.

Every file a user or a later command reads is written to a temporary name in the same
directory, flushed to disk (fsync), and renamed over the final name (atomic on POSIX). A
directory is built under a temporary name and swapped into place the same way.
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import socket
import tempfile
from pathlib import Path
from typing import Any


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


def _umask() -> int:
    """The process umask (read by setting it and putting it back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_bytes(path: str | Path, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically (temp file, fsync, rename); creates parent directories.

    The file gets the permissions a plain ``open(path, "w")`` would give (mkstemp's are owner-only).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    fsync_path(path.parent)
    return path


def write_text(path: str | Path, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically."""
    return write_bytes(path, text.encode("utf-8"))


def write_json(path: str | Path, data: Any) -> Path:
    """Write ``data`` as indented JSON to ``path`` atomically."""
    return write_text(path, json.dumps(data, indent=2, default=str))


class NotWritable(ValueError):
    """An output a command must write cannot be written there (read-only, no permission, full disk)."""


def check_writable(path: str | Path) -> None:
    """Raise :class:`NotWritable` when a file cannot be created where ``path`` will be written.

    Commands call this before their expensive work, so a read-only run dir is one line up front, not a
    traceback after a whole evaluation. A missing directory is probed at its nearest existing ancestor
    (nothing is created but a probe file, removed at once).
    """
    path = Path(path).expanduser().absolute()
    where = path.parent
    while not where.exists() and where != where.parent:
        where = where.parent
    try:
        fd, probe = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".probe", dir=where)
    except OSError as exc:
        raise NotWritable(
            f"cannot write {path}: {where} is not writable ({exc.strerror or exc}); fix the permissions or the "
            "mount, or write elsewhere"
        ) from None
    os.close(fd)
    os.unlink(probe)


def fsync_tree(directory: Path) -> None:
    """fsync every file under ``directory`` (an error such as a full disk is raised) and every directory (best
    effort, as :func:`fsync_path`)."""
    for path in directory.rglob("*"):
        if path.is_file() and not path.is_symlink():
            with open(path, "rb") as fh:
                os.fsync(fh.fileno())
        else:
            fsync_path(path)
    fsync_path(directory)


def _exchange(a: Path, b: Path) -> bool:
    """Atomically swap two paths (Linux ``renameat2(RENAME_EXCHANGE)``); False where unsupported."""
    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd, rename_exchange = -100, 2
    return renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0


def replace_dir(new: Path, final: Path) -> None:
    """Put the finished directory ``new`` at ``final``, replacing what is there, and remove the old one.

    Where the OS can swap the two atomically it does; elsewhere the old directory is first
    renamed aside (a crash then leaves it under a hidden ``.<name>.old.*`` name, not deleted).
    """
    new, final = Path(new), Path(final)
    fsync_tree(new)
    if final.exists() and _exchange(new, final):
        old = new
    else:
        old = None
        if final.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{final.name}.old.{_owner_tag()}.", dir=final.parent))
            os.replace(final, old / final.name)
        os.replace(new, final)
    fsync_path(final.parent)
    if old is not None and old.exists():
        shutil.rmtree(old, ignore_errors=True)


def _owner_tag() -> str:
    """This process as a temp dir's name records it: ``<host>-<pid>`` (the host's name reduced to safe characters)."""
    host = "".join(ch if ch.isalnum() else "_" for ch in socket.gethostname())[:64] or "host"
    return f"{host}-{os.getpid()}"


def _alive(pid: int) -> bool:
    """True when a process ``pid`` runs on this host (one we may not signal counts as running)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale_temp_dirs(final: Path) -> list[Path]:
    """Remove the hidden ``.<name>.tmp.*`` and ``.<name>.old.*`` directories beside ``final`` that a process of this
    host left when it was killed, and return them.

    A directory is removed only when its name records its owner (:func:`_owner_tag`) and that owner is this host's
    and no longer runs: one made on another host of a shared filesystem, by a live process, or by an older version
    (no owner in its name) is kept.
    """
    final = Path(final)
    host = _owner_tag().rsplit("-", 1)[0]
    removed = []
    for kind in ("tmp", "old"):
        for path in final.parent.glob(f".{final.name}.{kind}.{host}-*.*"):
            pid = path.name.removeprefix(f".{final.name}.{kind}.{host}-").split(".", 1)[0]
            if pid.isdigit() and not _alive(int(pid)) and path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
                removed.append(path)
    return removed


def temp_dir_beside(final: Path) -> Path:
    """A fresh hidden directory next to ``final`` (same filesystem, so the final rename is atomic), with the
    permissions a plain ``mkdir`` would give (mkdtemp's are owner-only). Its name records this process, and the ones
    killed processes left beside ``final`` are removed first (:func:`remove_stale_temp_dirs`)."""
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temp_dirs(final)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp.{_owner_tag()}.", dir=final.parent))
    tmp.chmod(0o777 & ~_umask())
    return tmp


COPY_LIMIT_BYTES = 64 * 2**30
"""The most :func:`copy_regular_tree` copies: a sanity bound, far above any adapter or tiny model."""


def copy_regular_tree(
    src: Path,
    dst: Path,
    skip: tuple[str, ...] = (),
    limit: int = COPY_LIMIT_BYTES,
    only: set[str] | None = None,
) -> int:
    """Copy the directory ``src`` to ``dst`` (new): regular files and directories only, never following a link.

    A symbolic link, device, FIFO or socket anywhere under ``src`` is refused (``ValueError``
    naming it) before anything is copied: a link in a run dir could point at a secret or at
    ``/dev/zero``. Names in ``skip`` are left out; with ``only`` (paths relative to ``src``), so
    is every file it does not list. Returns the bytes copied; more than ``limit`` is refused up front.
    """
    import stat

    src, dst = Path(src), Path(dst)
    if src.is_symlink() or not src.is_dir():
        raise ValueError(f"{src} is {'a symbolic link' if src.is_symlink() else 'not a directory'}: nothing is copied")
    files, total = [], 0
    for root, dirs, names in os.walk(src, followlinks=False):
        for name in sorted(dirs + names):
            path = Path(root) / name
            mode = os.lstat(path).st_mode
            if stat.S_ISLNK(mode) or not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
                kind = "a symbolic link" if stat.S_ISLNK(mode) else "not a regular file"
                raise ValueError(f"{path} is {kind}: only regular files are copied out of a run dir; remove it")
            listed = only is None or path.relative_to(src).as_posix() in only
            if stat.S_ISREG(mode) and name not in skip and listed:
                files.append(path)
                total += os.lstat(path).st_size
        dirs[:] = [d for d in dirs if d not in skip]
    if total > limit:
        raise ValueError(f"{src} holds {total / 2**30:.1f} GiB, more than the {limit / 2**30:.0f} GiB a copy allows")
    dst.mkdir(parents=True)
    for path in files:
        target = dst / path.relative_to(src)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target, follow_symlinks=False)
    return total
