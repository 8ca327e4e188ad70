"""The phases of one RL step as functions, called by every step executor (local runner, Ray workers).

One RL step::

    generate    play loop.mazes_per_step mazes x rollout.group_size episodes (runners.rollout.collect)
    update      algorithm.update(episodes): old log-probs, advantages, clipped policy loss, optimizer step
    sync        publish the adapter (runners.train.sync.AdapterSync) and load it into the generator;
                every loop.parity_every syncs, the parity probe checks sampler == trainer
    eval        every eval.every steps: greedy solve rate on the fixed 64-maze set
    checkpoint  every checkpoint.every steps and at the end (runners.train.checkpoint)

Every random choice is derived from ``(loop.seed, step)`` or lives in state that checkpoints save,
so with the ``hf`` engine on CPU a run stopped after step k and resumed gives the same metrics at
step n as an uninterrupted run, bit for bit.
"""

from __future__ import annotations

import contextlib
from itertools import groupby
from dataclasses import replace
from pathlib import Path
from typing import Any, Sequence

import torch

from algos.data import Episode
from mazegym.evalsets import MazeStream, move_limit
from runners import models
from runners.config import TrainConfig
from runners.config.derived import eval_maze_count, eval_vision_iterations, rollout_config, step_seed
from runners.config.runner import torch_threads
from runners.rollout import collectors
from runners.rollout.collect import RolloutConfig, collect_groups
from runners.rollout.evaluate import evaluate_set, play_eval_mazes
from runners.rollout.generation.engines import rollout_threads
from runners.rollout.threads import map_slices


def set_threads(config: TrainConfig) -> None:
    """Apply the runner's torch threads (the local runner's ``runner.num_threads``) to torch on CPU."""
    threads = torch_threads(config.runner)
    if threads > 0 and config.model.device == "cpu":
        torch.set_num_threads(threads)


def draw_step_mazes(stream: MazeStream, config: TrainConfig) -> list[Any]:
    """The next ``loop.mazes_per_step`` mazes of ``stream``, smaller mazes first (a stable sort: a stream of one size
    keeps its order), so that each size is one run of the step's mazes, played with its own move limit."""
    return sorted((next(stream) for _ in range(config.loop.mazes_per_step)), key=lambda maze: maze.size)


def generate_step(
    generator: Any, stream: MazeStream, config: TrainConfig, step: int, rollout: RolloutConfig | None = None
) -> list[Episode]:
    """Draw the step's mazes from ``stream`` and play them (:func:`play_step_mazes`)."""
    return play_step_mazes(generator, draw_step_mazes(stream, config), config, step, rollout)


def play_step_mazes(
    generator: Any,
    mazes: Sequence[Any],
    config: TrainConfig,
    step: int,
    rollout: RolloutConfig | None = None,
    offset: int = 0,
) -> list[Episode]:
    """Play step ``step``'s maze groups; ``offset`` = index of ``mazes[0]`` among the step's mazes.

    Group ids and env seeds depend only on (step, index of the maze in the step), so a worker
    playing a slice of the step's mazes produces exactly what one process playing all would; the
    same holds for the ``engine.rollout_threads`` slices a step is split into when its collector leaves torch's
    random generator alone (branch scoring).
    """
    rollout = rollout or rollout_config(config)
    episodes: list[Episode] = []
    for first, run in _runs_of_one_size(mazes):
        sized = rollout if run[0].size == config.maze.size else replace(rollout, max_moves=move_limit(run[0].size))

        def play(part: Sequence[Any], start: int, sized: RolloutConfig = sized, first: int = first) -> list[Episode]:
            return collect_groups(
                generator,
                part,
                sized,
                seed=step_seed(config, step) + (offset + first + start) * sized.group_size,
                group_offset=step * config.loop.mazes_per_step + offset + first + start,
            )

        threads = rollout_threads(config.engine) if collectors.draws_no_torch_randomness(sized) else 1
        episodes += map_slices(play, run, threads)
    return episodes


def _runs_of_one_size(mazes: Sequence[Any]) -> list[tuple[int, list[Any]]]:
    """``mazes`` cut into runs of consecutive mazes of one size: ``(index of the run's first maze, run)``."""
    runs = groupby(enumerate(mazes), key=lambda item: item[1].size)
    return [(group[0][0], [maze for _, maze in group]) for group in (list(g) for _, g in runs)]


def vision_placeholder_ids(model_dir: Path) -> set[int]:
    """Token ids a VLM reserves for image/video inputs (empty for text models)."""
    from algos.models import load_config

    config = load_config(model_dir)
    return {
        int(i)
        for i in (getattr(config, "image_token_id", None), getattr(config, "video_token_id", None))
        if i is not None
    }


def drop_placeholder_turns(episodes: list[Episode], forbidden: set[int]) -> int:
    """Remove turns whose *sampled reply* contains an image/video placeholder token; returns how many.

    A VLM may sample ``<|image_pad|>`` as ordinary text. The trainer's forward would then see a
    placeholder with no image behind it and fail, so such turns (always invalid replies) are
    left out of the update. The episode's outcome is unchanged.
    """
    if not forbidden:
        return 0
    dropped = 0
    for ep in episodes:
        keep = [t for t in ep.turns if not forbidden.intersection(t.response_ids)]
        dropped += len(ep.turns) - len(keep)
        if dropped and len(keep) != len(ep.turns):
            ep.info["turns_dropped"] = len(ep.turns) - len(keep)
            ep.info["return_before_drop"] = ep.episode_return
            ep.turns = keep
    return dropped


def update_step(algorithm: Any, episodes: list[Episode], forbidden_ids: set[int] | None = None) -> dict[str, float]:
    """One algorithm update on the step's episodes (returns its metrics, collapse diagnostics included)."""
    dropped = drop_placeholder_turns(episodes, forbidden_ids or set())
    metrics = algorithm.update(episodes)
    metrics["dropped_placeholder_turns"] = float(dropped)
    return metrics


def sync_step(policy: Any, generator: Any, sync: Any, version: int, probe: Any = None) -> dict[str, float]:
    """Publish the adapter as ``version`` and load it into the generator; optionally check parity."""
    sync.publish(policy, version)
    sync.pull(generator)
    out = {"sync/version": float(generator.adapter_version)}
    if probe is not None:
        out.update(parity_metrics(probe.check(generator, policy, version)))
    return out


def parity_metrics(result: dict) -> dict[str, float]:
    """The metrics of one parity check (:meth:`runners.train.parity.ParityProbe.check`'s result)."""
    return {f"sync/parity_{key}": float(result[key]) for key in ("mean_abs", "excess", "drift")}


def eval_step(generator: Any, config: TrainConfig, set_name: str | None = None) -> dict[str, Any]:
    """Greedy (or eval.temperature) evaluation on a fixed set (default: maze.eval_set)."""
    name = set_name or config.maze.eval_set
    with vision_iterations_for(generator, config, name) as iterations:
        result = evaluate_set(
            generator,
            name,
            rollout_config(config),
            temperature=config.eval.temperature,
            threads=rollout_threads(config.engine),
            stop=eval_maze_count(config, name),
        )
    if iterations:
        result["vision_iterations"] = iterations
    return result


def eval_episodes(generator: Any, config: TrainConfig, set_name: str, start: int, stop: int) -> list[Episode]:
    """Play mazes ``[start, stop)`` of ``set_name`` as :func:`eval_step` plays them (a worker's share of a set)."""
    with vision_iterations_for(generator, config, set_name):
        return play_eval_mazes(
            generator,
            set_name,
            rollout_config(config),
            config.eval.temperature,
            start,
            stop,
            threads=rollout_threads(config.engine),
        )


@contextlib.contextmanager
def vision_iterations_for(generator: Any, config: TrainConfig, set_name: str):
    """Within the block, a recurrent vision encoder runs the iterations :func:`eval_vision_iterations` gives the set
    (more on larger mazes, or ``model.eval_vision_iterations``).

    Yields the iteration count used (None when it leaves the model's own); restores the count afterwards.
    """
    from mazegym.evalsets import EVAL_SETS

    model = getattr(generator, "model", None)
    spec = models.spec_of(model)
    base = spec.vision_iterations(model) if spec is not None and spec.vision_iterations is not None else None
    iterations = eval_vision_iterations(config, base, EVAL_SETS[set_name].size)
    if iterations is None:
        yield None
        return
    with spec.run_vision_iterations(model, iterations):
        yield iterations
