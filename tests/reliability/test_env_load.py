"""Vector envs under load: 100,000 env steps and 10,000 resets keep memory flat.

Each run drives ``gym.make_vec("VisMaze-v0", num_envs=4, max_moves=8)`` in ``obs_mode="both"``
(the default and the expensive case: a 225x225 RGB image plus the text map every step) with
random valid actions. ``max_moves=8`` (the preset allows 20) makes episodes short, so about
10,000 of them end and autoreset within the 100,000 steps; on top of that all four envs are
reset explicitly with fresh seeds every 50 vector steps (2,000 resets): over 10,000 resets and
as many new mazes in all.

Resident memory (``VmRSS`` from ``/proc``) of this process, and for ``async`` of every worker,
is sampled after a warm-up and at the end. The bound, 20 MB per process, is far below what any
per-step leak would cost: one kept observation is about 150 KB (15 GB over 100,000 steps), and
even 200 bytes kept per env step, or 2 KB per reset, would cross it.
"""

from __future__ import annotations

import gc
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

import mazegym  # noqa: F401  (registers the envs)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads VmRSS from /proc"),
]

NUM_ENVS = 4
ENV_STEPS = 100_000
MAX_MOVES = 8
RESETS = 10_000  # explicit resets + autoresets after an episode ended
RESET_EVERY = 50  # vector steps between explicit resets of all envs
WARMUP_VECTOR_STEPS = 2_000
MAX_GROWTH_MB = 20.0


def rss_mb(pid: int | str = "self") -> float:
    """Resident set size of process ``pid`` in MB, from ``/proc/<pid>/status``."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS in /proc/{pid}/status")


def _processes(envs) -> dict[str, int | str]:
    """This process plus the async workers (gymnasium keeps them in ``envs.processes``)."""
    procs: dict[str, int | str] = {"main": "self"}
    for i, proc in enumerate(getattr(envs.unwrapped, "processes", [])):
        procs[f"worker{i}"] = proc.pid
    return procs


def _sample(procs) -> dict[str, float]:
    gc.collect()
    return {name: rss_mb(pid) for name, pid in procs.items()}


def _drive(envs, vector_steps: int, rng: np.random.Generator, seed: int) -> tuple[int, int]:
    """Step with random actions, resetting every RESET_EVERY steps; returns (resets, episodes ended)."""
    resets = ended = 0
    for step in range(vector_steps):
        if step % RESET_EVERY == 0:
            envs.reset(seed=seed + step)  # seed, seed+1, ...: a new maze per env each time
            resets += NUM_ENVS
        _, _, terminated, truncated, _ = envs.step(rng.integers(0, 4, NUM_ENVS))
        ended += int(np.count_nonzero(terminated | truncated))
    return resets, ended


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_vector_env_memory_stays_flat_over_100k_steps(mode):
    """100,000 env steps and over 10,000 resets of a 4-env vector env (sync or async, image and
    text observations) grow the resident memory of this process and of each async worker by less
    than 20 MB after warm-up."""
    envs = gym.make_vec("VisMaze-v0", num_envs=NUM_ENVS, vectorization_mode=mode, obs_mode="both", max_moves=MAX_MOVES)
    try:
        rng = np.random.default_rng(0)
        procs = _processes(envs)
        assert len(procs) == (1 if mode == "sync" else 1 + NUM_ENVS)
        _drive(envs, WARMUP_VECTOR_STEPS, rng, seed=10**6)
        before = _sample(procs)
        t0 = time.perf_counter()
        resets, ended = _drive(envs, ENV_STEPS // NUM_ENVS, rng, seed=0)
        seconds = time.perf_counter() - t0
        after = _sample(procs)
    finally:
        envs.close()

    assert resets + ended >= RESETS, f"only {resets} resets and {ended} episode ends"
    growth = {name: after[name] - before[name] for name in procs}
    print(
        f"\n{mode}: {ENV_STEPS} env steps, {resets} explicit resets + {ended} episode ends in {seconds:.1f} s "
        f"({ENV_STEPS / seconds:,.0f} env steps/s)"
    )
    for name in procs:
        print(f"  {name}: RSS {before[name]:.1f} -> {after[name]:.1f} MB ({growth[name]:+.2f} MB)")
    leaking = {name: round(g, 2) for name, g in growth.items() if g >= MAX_GROWTH_MB}
    assert not leaking, f"RSS grew by >= {MAX_GROWTH_MB} MB over {ENV_STEPS} steps: {leaking}"
