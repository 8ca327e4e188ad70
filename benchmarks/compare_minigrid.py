"""VisMaze vs MiniGrid, side by side in one process: steps/s with RGB image observations.

    .venv/bin/pip install minigrid        # optional benchmark dependency (tested with 3.2.0)
    .venv/bin/python benchmarks/compare_minigrid.py [--steps 20000]

MiniGrid runs ``MiniGrid-Empty-8x8-v0`` with ``RGBImgObsWrapper(tile_size=8)`` (64x64 px
frames); VisMaze runs ``VisMaze-v0`` with its 225x225 px frames. Both are stepped with the
same random actions through ``gym.make`` and reset whenever an episode ends (resets are
included). Each env is timed ``--repeats`` times and the best run is reported, which damps
noise from other processes on a shared machine.
"""

from __future__ import annotations

import argparse
import time

import gymnasium as gym
import numpy as np

import mazegym  # noqa: F401


def steps_per_second(env: gym.Env, actions: list[int]) -> float:
    """Wall-clock steps/s over ``actions`` (resets included)."""
    env.reset(seed=0)
    start = time.perf_counter()
    for a in actions:
        _, _, terminated, truncated, _ = env.step(a)
        if terminated or truncated:
            env.reset()
    return len(actions) / (time.perf_counter() - start)


def main() -> None:
    """Print steps/s of both suites and their ratio."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=20_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    actions = np.random.default_rng(0).integers(0, 3, args.steps).tolist()  # MiniGrid: left/right/forward

    vismaze = gym.make("VisMaze-v0", obs_mode="image")
    ours = max(steps_per_second(vismaze, actions) for _ in range(args.repeats))
    print(f"VisMaze-v0 (225x225 RGB): {ours:,.0f} steps/s")
    try:
        import minigrid
        from minigrid.wrappers import RGBImgObsWrapper
    except ImportError:
        print("minigrid is not installed; `.venv/bin/pip install minigrid` to compare.")
        return
    grid = RGBImgObsWrapper(gym.make("MiniGrid-Empty-8x8-v0"), tile_size=8)
    theirs = max(steps_per_second(grid, actions) for _ in range(args.repeats))
    print(f"MiniGrid-Empty-8x8-v0 {minigrid.__version__} (64x64 RGB): {theirs:,.0f} steps/s")
    print(f"ratio VisMaze / MiniGrid: {ours / theirs:.1f}x")


if __name__ == "__main__":
    main()
