"""Environment benchmarks (pytest-benchmark): steps/s, reset ms by size x generator, render ms.

Run (the project's pytest config disables benchmarks by default, so re-enable them)::

    OMP_NUM_THREADS=1 .venv/bin/pytest benchmarks/bench_env.py --benchmark-enable -q \
        --benchmark-columns=min,median,mean,ops --benchmark-sort=name

Each step benchmark times a block of 1,000 ``env.step`` calls through ``gym.make`` (wrappers
included) with a fixed action list that walks into walls and along corridors; the episode is
reset outside the timed block whenever it ends, so the figures are pure step cost. Steps/s =
1000 / (median seconds per round). ``test_step_with_autoreset`` includes the resets instead.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import mazegym
from mazegym.render import render_frame

BLOCK = 1000


def _stepper(env, actions):
    """A closure running BLOCK steps; resets happen lazily (and are cheap relative to a block)."""
    state = {"done": True}

    def run():
        if state["done"]:
            env.reset()
        step = env.step
        for a in actions:
            _, _, terminated, truncated, _ = step(a)
            if terminated or truncated:
                env.reset()  # rare with max_moves=10**9; keeps the block valid
        state["done"] = False

    return run


@pytest.mark.parametrize("obs_mode", ["image", "text", "both"])
def test_steps_per_second(benchmark, obs_mode):
    env = gym.make("VisMaze-v0", obs_mode=obs_mode, max_moves=10**9)
    env.reset(seed=0)
    actions = np.random.default_rng(0).integers(0, 4, BLOCK).tolist()
    benchmark.extra_info["steps_per_round"] = BLOCK
    benchmark.pedantic(_stepper(env, actions), rounds=30, warmup_rounds=2)
    benchmark.extra_info["steps_per_second"] = BLOCK / benchmark.stats.stats.median


def test_step_with_autoreset(benchmark):
    """VisMaze-v0 as an agent sees it: 20-move episodes, reset cost included."""
    env = gym.make("VisMaze-v0")
    env.reset(seed=0)
    actions = np.random.default_rng(0).integers(0, 4, BLOCK).tolist()

    def run():
        for a in actions:
            _, _, terminated, truncated, _ = env.step(a)
            if terminated or truncated:
                env.reset()

    benchmark.pedantic(run, rounds=20, warmup_rounds=1)
    benchmark.extra_info["steps_per_second"] = BLOCK / benchmark.stats.stats.median


@pytest.mark.parametrize("generator", sorted(mazegym.GENERATORS))
@pytest.mark.parametrize("size", [9, 11, 15, 21])
def test_reset_ms(benchmark, size, generator):
    """Maze generation + BFS + first frame + first observation, through gym.make."""
    env = gym.make("VisMaze-v0", size=size, generator=generator)
    env.reset(seed=0)
    benchmark(env.reset)
    benchmark.extra_info["reset_ms"] = benchmark.stats.stats.median * 1e3


@pytest.mark.parametrize("size", [9, 11, 21])
def test_render_ms(benchmark, size):
    """render() in rgb_array mode (a copy of the maintained frame)."""
    env = gym.make("VisMaze-v0", size=size, render_mode="rgb_array")
    env.reset(seed=0)
    benchmark(env.render)


@pytest.mark.parametrize("size", [9, 21])
def test_render_frame_from_scratch_ms(benchmark, size):
    """The standalone frame function (background + agent), as replay/recording use it."""
    env = gym.make("VisMaze-v0", size=size)
    _, info = env.reset(seed=0)
    spec = env.unwrapped.spec_maze
    benchmark(render_frame, spec.grid, info["agent"], info["goal"])
