"""Fixed evaluation sets and the training maze stream that never overlaps them.

Evaluation sets are stored as data (``mazegym/data/eval_<name>.json``: every grid, start and
goal) so they never change, even if a generator changes. They were generated once with::

    python -m mazegym.evalsets --regenerate

which plays the *reserved seeds* 0, 1, 2, ... of each set's env (``env.reset(seed=i)``, as
the case study's SkyRL eval set used ``seed=i`` for i < 64) and keeps the first 64 distinct mazes
whose optimal path fits the move limit (an unsolvable maze measures nothing; 7x7 has only
768 distinct corner-to-corner mazes, so repeats do occur there).
``tests/test_evalsets.py`` pins each set by hash.

Training mazes come from :class:`MazeStream`, which seeds maze ``i`` of stream ``seed`` with
``SeedSequence([seed, i, STREAM_SALT])`` (a seed domain that env seeds never produce) and
additionally skips any maze whose id is in an evaluation set.
"""

from __future__ import annotations

import argparse
import hashlib
import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from mazegym.maze import DEFAULT_GENERATOR, MazeSpec, sample_maze

DATA_DIR = Path(__file__).parent / "data"
EVAL_SET_SIZE = 64
STREAM_SALT = 0x4D415A45  # "MAZE": keeps stream seeds apart from env.reset(seed=...) seeds


@dataclass(frozen=True)
class EvalSetInfo:
    """How an evaluation set was generated."""

    env_id: str
    """Registered env whose reserved seeds produced the set."""
    size: int
    """Grid side (outer walls included)."""
    max_moves: int
    """Move limit of that env; every stored maze is solvable within it."""


EVAL_SETS: dict[str, EvalSetInfo] = {
    "VisMaze-v0": EvalSetInfo("VisMaze-v0", 9, 20),
    "VisMaze-Hard-v0": EvalSetInfo("VisMaze-Hard-v0", 11, 30),
    "heldout-7x7": EvalSetInfo("VisMaze-7x7-v0", 7, 16),
    "heldout-13x13": EvalSetInfo("VisMaze-13x13-v0", 13, 50),
    "heldout-15x15": EvalSetInfo("VisMaze-15x15-v0", 15, 70),
    "heldout-21x21": EvalSetInfo("VisMaze-21x21-v0", 21, 150),
}
"""Evaluation set names: one per preset (the case study's 64 fixed mazes) plus held-out sizes."""


def _path(name: str) -> Path:
    return DATA_DIR / f"eval_{name}.json"


def set_hash(mazes: list[MazeSpec]) -> str:
    """Order-sensitive hash of a list of mazes (their ids), used to pin evaluation sets."""
    return hashlib.sha256(",".join(m.maze_id for m in mazes).encode()).hexdigest()[:16]


@lru_cache(maxsize=None)
def _load(name: str) -> tuple[MazeSpec, ...]:
    if name not in EVAL_SETS:
        raise KeyError(f"unknown eval set {name!r}; choose one of {sorted(EVAL_SETS)}")
    path = _path(name)
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing; run `python -m mazegym.evalsets --regenerate`")
    data = json.loads(path.read_text())
    mazes = tuple(MazeSpec.from_dict(d) for d in data["mazes"])  # from_dict re-checks every maze_id
    if set_hash(list(mazes)) != data["set_hash"]:
        raise ValueError(f"{path}: set hash mismatch; the file was edited")
    return mazes


def load_eval_set(name: str = "VisMaze-v0") -> list[MazeSpec]:
    """The stored mazes of evaluation set ``name`` (see :data:`EVAL_SETS`), in a fixed order."""
    return list(_load(name))


@lru_cache(maxsize=1)
def eval_maze_ids() -> frozenset[str]:
    """Ids of every maze in every evaluation set."""
    return frozenset(m.maze_id for name in EVAL_SETS for m in _load(name))


def is_eval_maze(maze_id: str) -> bool:
    """True when ``maze_id`` belongs to any evaluation set (training must skip it)."""
    return maze_id in eval_maze_ids()


class MazeStream:
    """Endless, resumable iterator of training mazes, disjoint from the evaluation sets.

    Maze ``i`` depends only on ``(seed, i)``, so the state is just the index: save
    :meth:`state_dict` with a checkpoint and :meth:`load_state_dict` to continue exactly.
    """

    MAX_CONSECUTIVE_SKIPS = 10_000

    def __init__(
        self,
        size: int = 9,
        seed: int = 0,
        generator: str = DEFAULT_GENERATOR,
        extra_openings: float = 0.0,
        start_goal: str = "corners",
        max_optimal_moves: int | None = None,
        exclude_eval: bool = True,
    ):
        self.size = size
        self.seed = int(seed)
        self.generator = generator
        self.extra_openings = extra_openings
        self.start_goal = start_goal
        self.max_optimal_moves = max_optimal_moves
        self.exclude_eval = exclude_eval
        self.index = 0
        self.skipped = 0
        sample_maze(np.random.default_rng(0), size, generator, extra_openings, start_goal)  # fail fast on bad config

    def __iter__(self) -> Iterator[MazeSpec]:
        return self

    def __next__(self) -> MazeSpec:
        from mazegym.solver import optimal_moves  # local: keeps module import light

        for _ in range(self.MAX_CONSECUTIVE_SKIPS):
            rng = np.random.default_rng([self.seed, self.index, STREAM_SALT])
            self.index += 1
            spec = sample_maze(rng, self.size, self.generator, self.extra_openings, self.start_goal)
            if self.exclude_eval and is_eval_maze(spec.maze_id):
                self.skipped += 1
                continue
            if self.max_optimal_moves is not None and optimal_moves(spec.grid, spec.start, spec.goal) > self.max_optimal_moves:
                self.skipped += 1
                continue
            return spec
        raise RuntimeError(
            f"MazeStream skipped {self.MAX_CONSECUTIVE_SKIPS} mazes in a row; max_optimal_moves="
            f"{self.max_optimal_moves} is probably below the shortest possible path for size {self.size}"
        )

    def _config(self) -> dict[str, Any]:
        return {
            "size": self.size,
            "seed": self.seed,
            "generator": self.generator,
            "extra_openings": self.extra_openings,
            "start_goal": self.start_goal,
            "max_optimal_moves": self.max_optimal_moves,
            "exclude_eval": self.exclude_eval,
        }

    def state_dict(self) -> dict[str, Any]:
        """JSON-ready state: the configuration plus the next index."""
        return {**self._config(), "index": self.index, "skipped": self.skipped}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume from :meth:`state_dict`; refuses a state saved with another configuration."""
        mismatched = {k: (v, state.get(k)) for k, v in self._config().items() if state.get(k) != v}
        if mismatched:
            raise ValueError(f"MazeStream state was saved with a different configuration: {mismatched}")
        self.index = int(state["index"])
        self.skipped = int(state.get("skipped", 0))


def generate_eval_set(name: str, count: int = EVAL_SET_SIZE) -> tuple[list[MazeSpec], list[int]]:
    """Rebuild a set from its reserved seeds (only used by ``--regenerate`` and ``--check``)."""
    import gymnasium as gym

    import mazegym  # noqa: F401  (registers the env ids)
    from mazegym.solver import optimal_moves

    info = EVAL_SETS[name]
    env = gym.make(info.env_id).unwrapped
    mazes, seeds = [], []
    seed = 0
    while len(mazes) < count:
        env.reset(seed=seed)
        spec = env.spec_maze
        if spec not in mazes and optimal_moves(spec.grid, spec.start, spec.goal) <= info.max_moves:
            mazes.append(spec)
            seeds.append(seed)
        seed += 1
    return mazes, seeds


def _write(name: str) -> str:
    from mazegym.solver import optimal_moves

    mazes, seeds = generate_eval_set(name)
    info = EVAL_SETS[name]
    payload = {
        "name": name,
        "env_id": info.env_id,
        "max_moves": info.max_moves,
        "reserved_seeds": seeds,
        "set_hash": set_hash(mazes),
        "mazes": [{**m.to_dict(), "optimal_moves": optimal_moves(m.grid, m.start, m.goal)} for m in mazes],
    }
    DATA_DIR.mkdir(parents=True, exist_ok=True)
    _path(name).write_text(json.dumps(payload, indent=1) + "\n")
    return payload["set_hash"]


def main(argv: list[str] | None = None) -> None:
    """CLI: ``--regenerate`` rewrites the data files; ``--check`` compares them with a fresh generation."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--regenerate", action="store_true", help="rewrite mazegym/data/eval_*.json (changes the pinned sets!)")
    parser.add_argument("--check", action="store_true", help="report whether today's generators still reproduce the stored sets")
    args = parser.parse_args(argv)
    for name in EVAL_SETS:
        if args.regenerate:
            print(f"{name}: wrote {_path(name).name} (set hash {_write(name)})")
        else:
            stored = load_eval_set(name)
            fresh, _ = generate_eval_set(name)
            same = set_hash(fresh) == set_hash(stored)
            print(f"{name}: {len(stored)} mazes, hash {set_hash(stored)}, reproducible={same}")


if __name__ == "__main__":
    main()
