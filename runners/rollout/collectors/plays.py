"""The ``plays`` collector: G sampled plays of every maze from its start, one group per maze (GRPO's groups). It has
no settings of its own: it plays with the shared play settings of ``rollout`` (``group_size``, ``history``,
``max_moves``, ...)."""

from __future__ import annotations

from typing import Any, Sequence

from algos.data import Episode
from mazegym.maze import MazeSpec
from runners.rollout.collect import RolloutConfig, play_episodes
from runners.rollout.collectors import PLAYS, Collector, register


def collect_plays(
    generator: Any,
    mazes: Sequence[MazeSpec],
    config: RolloutConfig,
    encoder: Any = None,
    weights_version: int | None = None,
    seed: int = 0,
    group_offset: int = 0,
) -> list[Episode]:
    """``config.group_size`` sampled plays of each maze (group ``group_offset + i`` = maze ``i``), batched together."""
    return play_episodes(generator, mazes, config, config.group_size, encoder, weights_version, seed, group_offset)


def plan(rollout: RolloutConfig, mazes_per_step: int, maze_size: int) -> str:
    """What one step collects, for ``--dry-run``."""
    episodes = mazes_per_step * rollout.group_size
    return (
        f"{mazes_per_step} mazes x {rollout.group_size} rollouts = {episodes} episodes, "
        f"<= {rollout.max_moves} turns each"
    )


register(
    Collector(
        name=PLAYS,
        description="G sampled plays of every maze from its start, one group per maze",
        collect=collect_plays,
        scheme="episodes",
        plan=plan,
    )
)
