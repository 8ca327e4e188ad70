"""Rollout threads: a step's branch scoring and a greedy evaluation split over threads give one thread's episodes."""

import threading
import zlib

import numpy as np

from runners.config import apply_overrides
from runners.config.presets import get_preset
from runners.rollout import collectors
from runners.rollout.collect import RolloutConfig
from runners.rollout.threads import map_slices, slice_bounds
from runners.train.steps import play_step_mazes
from tests.test_rollout import ScriptedGenerator, _mazes


def test_slice_bounds_cover_the_items_in_near_equal_contiguous_slices():
    assert slice_bounds(5, 2) == [(0, 3), (3, 5)]
    assert slice_bounds(64, 3) == [(0, 22), (22, 43), (43, 64)]
    assert slice_bounds(1, 4) == [(0, 1)]
    assert slice_bounds(0, 2) == [(0, 0)]


def test_map_slices_keeps_the_order_and_uses_the_threads():
    names = set()
    together = threading.Barrier(3, timeout=30)  # passes only when the three slices run at the same time

    def play(part, start):
        names.add(threading.current_thread().name)
        together.wait()
        return [(start + i, x) for i, x in enumerate(part)]

    items = list("abcdefg")
    assert map_slices(play, items, 3) == list(enumerate(items))
    assert len(names) == 3
    names.clear()
    together = threading.Barrier(1)
    assert map_slices(play, items, 1) == list(enumerate(items))
    assert names == {threading.current_thread().name}


class HashedDistribution(ScriptedGenerator):
    """Move probabilities that are a fixed function of the prompt (safe to call from any thread)."""

    def score_replies(self, prompts, replies, temperature=1.0):
        out = []
        for p in prompts:
            rng = np.random.default_rng(zlib.crc32(bytes(str(p.prompt_ids), "ascii")))
            out.append(list(np.log(rng.dirichlet(np.ones(5))[:4])))
        return out


def test_a_branching_step_on_three_threads_equals_one_thread():
    mazes = _mazes(7, size=7, seed=3)
    rollout = RolloutConfig(
        state_prompt=True,
        history="none",
        max_moves=20,
        collector=collectors.settings_for("branches", continuation="sampled", samples=8, reward="value"),
    )
    gen = HashedDistribution(lambda i, call, p: ("no move", "stop"))
    runs = {}
    for threads in (1, 3):
        config = apply_overrides(get_preset("cpu-maze-vlm"), ["maze.size=7", f"engine.rollout_threads={threads}"])
        episodes = play_step_mazes(gen, mazes, config, step=4, rollout=rollout)
        runs[threads] = [(e.group_id, e.maze_id, e.turns[0].prompt_ids, e.turns[0].reward) for e in episodes]
    assert runs[1] == runs[3] and len(runs[1]) > 0


def test_a_step_of_mixed_sizes_plays_each_size_with_its_own_move_limit_and_unique_groups(monkeypatch):
    """The step's mazes are drawn smaller first; each size is played with its registered move limit (50 moves at
    13x13) beside the run's own rollout.max_moves for maze.size, as three threads or one, and no two mazes share a
    group id."""
    from mazegym.evalsets import MazeStream
    from runners.train import steps

    config = apply_overrides(
        get_preset("cpu-maze-vlm"),
        ["maze.size=7", "loop.mazes_per_step=6", "maze.rl_shapes=[{}, {size: 13}]", "engine.rollout_threads=3"],
    )
    mazes = steps.draw_step_mazes(MazeStream(7, seed=1, shapes=config.maze.rl_shapes), config)
    assert [m.size for m in mazes] == sorted(m.size for m in mazes) and {m.size for m in mazes} == {7, 13}
    rollout = RolloutConfig(
        state_prompt=True,
        history="none",
        max_moves=12,
        collector=collectors.settings_for("branches", continuation="sampled", samples=4, reward="value"),
    )
    limits = []
    real = steps.collect_groups

    def recording(generator, part, sized, **kwargs):
        limits.append((part[0].size, sized.max_moves))
        return real(generator, part, sized, **kwargs)

    monkeypatch.setattr(steps, "collect_groups", recording)
    gen = HashedDistribution(lambda i, call, p: ("no move", "stop"))
    episodes = play_step_mazes(gen, mazes, config, step=2, rollout=rollout)
    assert set(limits) == {(7, 12), (13, 50)}
    one = play_step_mazes(gen, mazes, apply_overrides(config, ["engine.rollout_threads=1"]), step=2, rollout=rollout)
    assert [(e.group_id, e.turns[0].reward) for e in one] == [(e.group_id, e.turns[0].reward) for e in episodes]
    owner = {}
    for e in episodes:
        assert owner.setdefault(e.group_id, e.maze_id) == e.maze_id
    assert len({e.maze_id for e in episodes}) == len(mazes)
