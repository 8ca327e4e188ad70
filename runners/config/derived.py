"""Settings a run derives from its config: the rollout settings actually used, the maze streams' arguments, and
per-step seeds."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from runners import models
from runners.config.schema import TrainConfig
from runners.rollout.collect import RolloutConfig


def env_kwargs(config: TrainConfig) -> dict[str, Any]:
    """VisMazeEnv keyword arguments: ``rollout.env_kwargs`` over the ones the tiny model implies (its spec's
    ``env_kwargs``, e.g. the tiny VLM's cell size)."""
    kwargs = dict(config.rollout.env_kwargs)
    if not config.model.path:
        for key, value in models.get(config.model.kind).env_kwargs(config.model).items():
            kwargs.setdefault(key, value)
    return kwargs


def rollout_config(config: TrainConfig) -> RolloutConfig:
    """The rollout settings actually used (config.rollout plus implied env kwargs)."""
    return dataclasses.replace(config.rollout, env_kwargs=env_kwargs(config))


def rl_stream_args(config: TrainConfig) -> dict[str, Any]:
    """``MazeStream`` arguments of the RL training stream: ``maze.rl_shapes`` at ``maze.stream_seed``, no maze longer
    than the move limit."""
    maze = config.maze
    return dict(
        size=maze.size,
        seed=maze.stream_seed,
        generator=maze.generator,
        max_optimal_moves=config.rollout.max_moves,
        shapes=maze.rl_shapes,
    )


def sft_stream_args(config: TrainConfig) -> dict[str, Any]:
    """``MazeStream`` arguments of the SFT demonstration stream: ``maze.stream_seed + 1`` (other mazes than RL's),
    mazes of ``maze.size`` only."""
    maze = config.maze
    return dict(
        size=maze.size,
        seed=maze.stream_seed + 1,
        generator=maze.generator,
        max_optimal_moves=config.rollout.max_moves,
    )


def eval_vision_iterations(config: TrainConfig, base: int | None, size: int) -> int | None:
    """Recurrent vision iterations for evaluating mazes of ``size`` cells a side, given the model's own ``base``:
    ``model.eval_vision_iterations`` when set, else ``ceil(base x (size / maze.size)^2)`` on larger mazes than
    ``maze.size`` (``model.scale_eval_vision_iterations``: the routing has to cross the maze's area, and a gated
    encoder holds its answer when run longer than it needs); ``None`` = leave the model's own (or it has no recurrent
    encoder, or the model kind has no such settings)."""
    if base is None:
        return None
    fixed = getattr(config.model, "eval_vision_iterations", 0)
    if fixed:
        return fixed
    if not getattr(config.model, "scale_eval_vision_iterations", False) or size <= config.maze.size:
        return None
    return math.ceil(base * (size / config.maze.size) ** 2)


def eval_maze_count(config: TrainConfig, set_name: str) -> int:
    """How many mazes of eval set ``set_name`` an evaluation plays (its first ones): ``eval.set_mazes`` or all."""
    from mazegym.evalsets import EVAL_SETS

    count = EVAL_SETS[set_name].count
    return min(count, config.eval.set_mazes.get(set_name, count))


def max_images_per_prompt(config: TrainConfig) -> int:
    """The most images one prompt of the run shows: one frame per move of its longest play (the training rollouts'
    or an evaluated set's move limit) plus the current one with ``history=full``, the last ``history_k`` and the
    current one with ``last_k``, the current one alone otherwise (at least 1)."""
    from mazegym.evalsets import EVAL_SETS

    sets = [config.maze.eval_set, *config.maze.heldout_sets]
    moves = max([config.rollout.max_moves, *(EVAL_SETS[name].max_moves for name in sets if name in EVAL_SETS)])
    if config.rollout.history == "full":
        return moves + 1
    if config.rollout.history == "last_k":
        return min(moves, config.rollout.history_k) + 1
    return 1


def vision_batch_size(config: TrainConfig) -> int:
    """Cells per vision pretraining batch: ``model.vision_pretraining.batch_size``, or ``sft.batch_size`` when that
    is 0 (or the model kind has no vision pretraining)."""
    pretraining = getattr(config.model, "vision_pretraining", None)
    return (pretraining.batch_size if pretraining else 0) or config.sft.batch_size


def step_seed(config: TrainConfig, step: int) -> int:
    """The sampling seed of RL step ``step`` (a pure function: resuming replays it exactly)."""
    return config.loop.seed * 1_000_003 + step
