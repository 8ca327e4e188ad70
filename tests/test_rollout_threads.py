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
