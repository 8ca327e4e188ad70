"""mazegym: VisGym-style visual mazes as fast, seeded Gymnasium environments.

Importing the package registers the environments (string entry points, so registration is
cheap and ``gym.make("mazegym:VisMaze-v0")`` also works)::

    import gymnasium as gym
    import mazegym

    env = gym.make("VisMaze-v0")            # 9x9, 20 moves: VisGym maze_2d easy
    obs, info = env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step(0)  # 0=right 1=up 2=left 3=down

This package never imports torch.
"""

from __future__ import annotations

from gymnasium.envs.registration import register, registry

from mazegym.envs.vismaze import ACTION_NAMES, VisMazeEnv
from mazegym.evalsets import EVAL_SETS, MazeStream, is_eval_maze, load_eval_set
from mazegym.maze import GENERATORS, MazeSpec, generate_maze, sample_maze

__version__ = "0.1.0"

_ENTRY_POINT = "mazegym.envs.vismaze:VisMazeEnv"

REGISTERED_ENVS: dict[str, dict] = {
    "VisMaze-v0": {"size": 9, "max_moves": 20},
    "VisMaze-Hard-v0": {"size": 11, "max_moves": 30},
    "VisMaze-5x5-v0": {"size": 5, "max_moves": 8},
    "VisMaze-7x7-v0": {"size": 7, "max_moves": 16},
    "VisMaze-13x13-v0": {"size": 13, "max_moves": 50},
    "VisMaze-15x15-v0": {"size": 15, "max_moves": 70},
    "VisMaze-17x17-v0": {"size": 17, "max_moves": 80},
    "VisMaze-19x19-v0": {"size": 19, "max_moves": 100},
    "VisMaze-21x21-v0": {"size": 21, "max_moves": 150},
    "VisMaze-33x33-v0": {"size": 33, "max_moves": 250},
    "VisMaze-Loops-v0": {"size": 9, "max_moves": 20, "extra_openings": 0.2},
    "VisMaze-Loops-13x13-v0": {"size": 13, "max_moves": 50, "extra_openings": 0.2},
    "VisMaze-Loops-21x21-v0": {"size": 21, "max_moves": 150, "extra_openings": 0.2},
}
"""Registered ids and their kwargs (``docs/envs.md`` lists them from ``gymnasium.registry``).

9x9/20 and 11x11/30 are VisGym maze_2d easy/hard: at these limits a few Wilson mazes are longer than
the limit, as in VisGym; evaluation sets contain only solvable mazes. The larger sizes
(generalisation studies) get about 1.5-2x their median optimal path (Wilson: 24, 28 and 48 moves
at 13, 15 and 21; 32, 40, 88 at 17, 19 and 33). A 5x5 grid holds only 16 distinct mazes, each 4 moves long.
The ``Loops`` ids knock out a fifth of the walls a perfect maze keeps (``extra_openings=0.2``), so most mazes hold
several routes between start and goal: the shapes a policy taught on perfect mazes never saw."""


def _register_all() -> None:
    for env_id, kwargs in REGISTERED_ENVS.items():
        if env_id not in registry:
            register(id=env_id, entry_point=_ENTRY_POINT, kwargs=dict(kwargs))


_register_all()

__all__ = [
    "ACTION_NAMES",
    "EVAL_SETS",
    "GENERATORS",
    "MazeSpec",
    "MazeStream",
    "is_eval_maze",
    "load_eval_set",
    "REGISTERED_ENVS",
    "VisMazeEnv",
    "generate_maze",
    "sample_maze",
]
