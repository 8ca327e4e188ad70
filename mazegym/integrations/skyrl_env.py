"""VisMaze as a SkyRL-Gym environment (``pip install "mazegym[skyrl]"``), registered as ``"vismaze"``.

Importing this module registers the env class with ``skyrl_gym``, so a SkyRL training config names
it with ``environment.env_class=vismaze`` (import the module in the entrypoint, where SkyRL's own
VisGym example calls ``register``). As in that example, the dataset rows are tickets: the prompt is
a placeholder, and the env builds the multimodal prompt itself; :func:`dataset_rows` writes them.
A row's fields reach the env as ``extras``:

* ``env_id``: a VisMaze id (default ``"VisMaze-v0"``) or a VisGym split, ``"maze_2d/easy"`` or
  ``"maze_2d/hard"`` (``visgym_env_id``, the field SkyRL's VisGym rows use, is read as well);
* ``seed`` for a generated maze, or ``eval_set`` and ``index`` for maze ``index`` of a fixed
  evaluation set (``VisMaze-v0``: the 64 mazes of the published case study);
* ``require_stop`` (VisGym's scoring, :mod:`mazegym.integrations.visgym`; default: true for a
  VisGym split, false for a VisMaze id) and ``obs_mode`` (``"image"`` by default, as in VisGym;
  ``"text"`` or ``"both"``).

Each ``step`` takes the model's reply (parsed by :func:`mazegym.llm.parse_action`; an unparseable
one spends a move and the feedback says why) and returns the next user turn (image as a PNG data
URL, map, moves left, feedback), a reward of 1.0 on the step that solves the maze and 0.0 otherwise,
and ``done`` when the episode ends or the env's move limit is used up.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
from skyrl_gym.envs import register
from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput, ConversationType
from skyrl_gym.envs.registration import registry

from mazegym.evalsets import EVAL_SETS, load_eval_set
from mazegym.integrations.messages import openai_message
from mazegym.integrations.visgym import VISGYM_SPLITS, env_id_for
from mazegym.llm import system_prompt, user_message
from mazegym.wrappers import TextActionWrapper

ENV_CLASS = "vismaze"
"""The name SkyRL's ``environment.env_class`` (and a dataset row's ``env_class``) uses."""


class VisMazeSkyRLEnv(BaseTextEnv):
    """One VisMaze episode per instance, in SkyRL-Gym's text-env interface (``init``, ``step``, ``close``)."""

    def __init__(self, env_config: Any = None, extras: dict[str, Any] | None = None):
        super().__init__()
        extras = dict(extras or {})
        name = extras.get("env_id") or extras.get("visgym_env_id") or "VisMaze-v0"
        self.env_id = env_id_for(name)
        self.require_stop = bool(extras.get("require_stop", name in VISGYM_SPLITS))
        self.obs_mode = extras.get("obs_mode", "image")
        self.seed = extras.get("seed")
        self.maze = None
        if extras.get("eval_set") is not None:
            name, index = extras["eval_set"], int(extras.get("index", 0))
            if name not in EVAL_SETS:
                raise ValueError(f"unknown eval_set {name!r}; known: {sorted(EVAL_SETS)}")
            self.maze = load_eval_set(name)[index]
            self.env_id = EVAL_SETS[name].env_id
        self.env = TextActionWrapper(gym.make(self.env_id, obs_mode=self.obs_mode, require_stop=self.require_stop))
        self.max_turns = self.env.unwrapped.max_moves
        self.solved = False
        self.invalid_replies = 0
        self.info: dict[str, Any] = {}

    def init(self, prompt: ConversationType) -> tuple[ConversationType, dict[str, Any]]:
        """Reset the maze; the dataset's placeholder prompt is replaced by the task prompt and the first view."""
        options = {"maze": self.maze} if self.maze is not None else None
        obs, self.info = self.env.reset(seed=self.seed, options=options)
        env = self.env.unwrapped
        system = system_prompt(env.size, env.max_moves, self.obs_mode, self.require_stop)
        first = openai_message(user_message(obs, self.info, obs_mode=self.obs_mode))
        return [{"role": "system", "content": system}, first], {"maze_id": self.info["maze_id"]}

    def step(self, action: str) -> BaseTextEnvStepOutput:
        """Play the model's reply; the next user turn comes back unless the episode is over."""
        self.turns += 1
        obs, reward, terminated, truncated, self.info = self.env.step(action)
        self.solved = self.solved or bool(self.info["is_success"])
        self.invalid_replies += bool(self.info["invalid_action"])
        done = terminated or truncated
        turn = [] if done else [openai_message(user_message(obs, self.info, obs_mode=self.obs_mode))]
        metadata = {k: self.info[k] for k in ("feedback", "moves", "is_success", "invalid_action", "maze_id")}
        return BaseTextEnvStepOutput(
            observations=turn, reward=float(reward), done=done, metadata={**metadata, "terminated": terminated}
        )

    def get_metrics(self) -> dict[str, Any]:
        """Per-episode figures SkyRL averages: solved (the solve rate), moves, invalid replies, optimal moves."""
        return {
            "solved": float(self.solved),
            "moves": self.info.get("moves", 0),
            "invalid_replies": self.invalid_replies,
            "optimal_moves": self.info.get("optimal_moves", 0),
        }

    def close(self) -> None:
        """Close the maze env."""
        self.env.close()


def register_env(name: str = ENV_CLASS) -> None:
    """Register :class:`VisMazeSkyRLEnv` with ``skyrl_gym`` under ``name`` (once; importing this module does it)."""
    if name not in registry:
        register(id=name, entry_point=f"{__name__}:VisMazeSkyRLEnv")


def dataset_rows(
    eval_set: str | None = None, env_id: str = "VisMaze-v0", count: int = 64, **extras: Any
) -> list[dict[str, Any]]:
    """SkyRL dataset rows (tickets): every maze of ``eval_set``, or ``count`` seeded mazes of ``env_id``.

    Write them with ``datasets.Dataset.from_list(rows).to_parquet(path)`` and point ``data.train_data`` /
    ``data.val_data`` at the file; ``extras`` (e.g. ``require_stop=True``) go into every row.
    """
    ticket = {"prompt": [{"role": "user", "content": "placeholder"}], "env_class": ENV_CLASS, **extras}
    if eval_set is not None:
        return [{**ticket, "eval_set": eval_set, "index": i} for i in range(EVAL_SETS[eval_set].count)]
    return [{**ticket, "env_id": env_id, "seed": i} for i in range(count)]


register_env()
