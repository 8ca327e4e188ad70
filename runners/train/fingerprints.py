"""Fingerprints of model directories: one sha256 over every file's name and bytes.

A built base model, an SFT result and each RL checkpoint record the fingerprint of the model they
were made from or trained on, so a later step can tell when those files were replaced or damaged.
"""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path
from typing import Sequence


def result_fingerprint(directory: Path, skip: Sequence[str] = ()) -> str:
    """sha256 over the relative names and bytes of every file of a model or SFT result (weights, configs,
    tokenizer), but the top-level files named in ``skip``."""
    digest = hashlib.sha256()
    files = (p for p in Path(directory).rglob("*") if p.is_file() and not p.is_symlink())
    for path in sorted(p for p in files if p.relative_to(directory).as_posix() not in skip):
        digest.update(path.relative_to(directory).as_posix().encode() + b"\0")
        with open(path, "rb") as fh:
            while block := fh.read(1 << 20):
                digest.update(block)
    return digest.hexdigest()


@functools.lru_cache(maxsize=8)
def _fingerprint_of(directory: str, stamp: tuple) -> str:
    return result_fingerprint(Path(directory))


def current_fingerprint(directory: Path) -> str:
    """:func:`result_fingerprint` of ``directory``, hashed once per process while no file's size or time changes."""
    files = sorted(p for p in Path(directory).rglob("*") if p.is_file() and not p.is_symlink())
    stamp = tuple((p.as_posix(), p.stat().st_size, p.stat().st_mtime_ns) for p in files)
    return _fingerprint_of(str(Path(directory).resolve()), stamp)
