"""VisMaze for TRL's ``GRPOTrainer(environment_factory=...)`` (``pip install "mazegym[trl]"``).

TRL's environment interface (TRL 1.16, experimental there) is a plain class: ``reset(**example)``
starts an episode from a dataset row and returns the text appended to the prompt, each public
method is a tool the model calls (its signature and docstring become the tool schema), and
``get_reward()`` scores the finished rollout. :class:`VisMazeToolEnv` gives the model one tool,
``move(direction)``, and pays 1.0 for a solved maze (with ``require_stop``: for a stop on the goal).
The maze plays in process, or on a VisMaze environment server (``base_url``, see
:mod:`mazegym.integrations.openenv_server`)::

    from trl import GRPOConfig, GRPOTrainer
    from mazegym.integrations.trl_env import VisMazeToolEnv, maze_dataset

    trainer = GRPOTrainer(model, args=GRPOConfig(...), train_dataset=maze_dataset(count=512),
                          environment_factory=VisMazeToolEnv)

A row of :func:`maze_dataset` holds the prompt and the maze (a training maze, or ``eval_set`` and
``index`` for the fixed evaluation sets). The observation is the ASCII map: TRL passes tool results to the
model as text (images from tools only for VLM processors). This module imports neither TRL nor torch.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym

import mazegym  # noqa: F401  (registers the env ids)
from mazegym.evalsets import EVAL_SETS
from mazegym.integrations.visgym import env_id_for
from mazegym.llm import ACTION_NAMES

TASK = (
    "Solve the maze: walk from A to the goal G. '#' is a wall, '.' a free square; row 0 is the top. "
    "Call the move tool once per step with right, up, left or down{stop}. You have {moves} moves."
)


class VisMazeToolEnv:
    """One VisMaze episode per rollout; the model plays it by calling :meth:`move`."""

    def __init__(self, env_id: str = "VisMaze-v0", base_url: str | None = None, require_stop: bool = False):
        self.env_id, self.base_url, self.require_stop = env_id_for(env_id), base_url, require_stop
        self.env: gym.Env | None = None
        self.env_key: str | None = None
        self.done, self.solved = True, False

    def reset(
        self, maze: dict | None = None, eval_set: str | None = None, index: int = 0, seed: int | None = None, **row: Any
    ) -> str:
        """Start the episode a row names (its maze, maze ``index`` of ``eval_set``, or a seed); returns the map."""
        env_id, options = self.env_id, None
        if eval_set is not None:
            env_id, maze = EVAL_SETS[eval_set].env_id, mazegym.load_eval_set(eval_set)[int(index)].to_dict()
        if maze is not None:
            options = {"maze": maze}
        self._make(env_id)
        obs, info = self.env.reset(seed=seed, options=options)
        self.done, self.solved = False, False
        return f"{obs['text']}\nYou have {info['max_moves']} moves."

    def move(self, direction: str) -> str:
        """Move one square in the maze.

        Args:
            direction: The direction to move: "right", "up", "left" or "down" (or "stop" to end the episode when
                the task asks for a stop on the goal).

        Returns:
            What happened, the new map and the moves left.
        """
        if self.done:
            return "The episode is over."
        names = ACTION_NAMES if self.require_stop else ACTION_NAMES[:4]
        direction = str(direction).strip().lower()
        if direction not in names:
            return f"Unknown direction {direction!r}: use one of {', '.join(names)}."
        obs, reward, terminated, truncated, info = self.env.step(names.index(direction))
        self.done, self.solved = terminated or truncated, self.solved or reward >= 1.0
        left = info["max_moves"] - info["moves"]
        return f"{info['feedback']}\n{obs['text']}\nMoves left: {left}." + (
            " The episode is over." if self.done else ""
        )

    def get_reward(self) -> float:
        """1.0 when the maze was solved, else 0.0."""
        return 1.0 if self.solved else 0.0

    def _make(self, env_id: str) -> None:
        """(Re)make the env (in process or on the server) when the env id changes."""
        if self.env is not None and self.env_key == env_id:
            return
        if self.env is not None:
            self.env.close()
        if self.base_url is None:
            self.env = gym.make(env_id, obs_mode="text", require_stop=self.require_stop)
        else:
            from mazegym.integrations.openenv_server import RemoteVisMazeEnv

            self.env = RemoteVisMazeEnv(self.base_url, env_id, obs_mode="text", require_stop=self.require_stop)
        self.env_key = env_id


def maze_dataset(
    eval_set: str | None = None, count: int = 64, env_id: str = "VisMaze-v0", seed: int = 0, require_stop: bool = False
):
    """A ``datasets.Dataset`` for GRPOTrainer: every maze of ``eval_set``, or ``count`` training mazes of ``env_id``.

    Training mazes come from :class:`mazegym.MazeStream` (stream ``seed``): solvable within the move limit and
    never one of an evaluation set's.
    """
    import datasets

    env_id = EVAL_SETS[eval_set].env_id if eval_set else env_id_for(env_id)
    size, moves = mazegym.REGISTERED_ENVS[env_id]["size"], mazegym.REGISTERED_ENVS[env_id]["max_moves"]
    text = TASK.format(stop=", then stop on the goal" if require_stop else "", moves=moves)
    prompt = [{"role": "user", "content": text}]
    if eval_set is not None:
        rows = [{"prompt": prompt, "eval_set": eval_set, "index": i} for i in range(EVAL_SETS[eval_set].count)]
    else:
        stream = mazegym.MazeStream(size, seed, max_optimal_moves=moves)
        rows = [{"prompt": prompt, "maze": next(stream).to_dict()} for _ in range(count)]
    return datasets.Dataset.from_list(rows)
