"""Reference agents a learner has to beat, played through the env itself."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from mazegym.envs.vismaze import VisMazeEnv
from mazegym.maze import MazeSpec


def random_solve_rate(mazes: Sequence[MazeSpec], max_moves: int, seed: int = 0) -> float:
    """Fraction of ``mazes`` a uniformly random legal mover solves within ``max_moves``: the bar a learner has to
    clear (one play per maze, moves drawn from ``numpy.random.default_rng(seed)``)."""
    rng, solved = np.random.default_rng(seed), 0
    for maze in mazes:
        env = VisMazeEnv(size=maze.size, max_moves=max_moves, obs_mode="text")
        _, info = env.reset(options={"maze": maze})
        done = False
        while not done:
            _, _, terminated, truncated, info = env.step(int(rng.choice(np.flatnonzero(info["action_mask"]))))
            done = terminated or truncated
        solved += info["is_success"]
    return solved / len(mazes)
