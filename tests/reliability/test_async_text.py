"""Async vector envs (default shared memory) return the same text and image observations as sync and single envs."""

from __future__ import annotations

import copy

import gymnasium as gym
import numpy as np
import pytest

import mazegym  # noqa: F401  (registers the envs)
from mazegym.spaces import SharedTextRows

STEPS = 30
N = 3


def _single_run(seed: int, actions: np.ndarray) -> list[dict]:
    """Observations of one env driven like a NEXT_STEP-autoreset vector env."""
    env = gym.make("VisMaze-v0", obs_mode="both")
    obs, _ = env.reset(seed=seed)
    out, done = [obs], False
    for action in actions:
        if done:
            obs, _ = env.reset()
            done = False
        else:
            obs, _, terminated, truncated, _ = env.step(int(action))
            done = terminated or truncated
        out.append(obs)
    return out


@pytest.mark.parametrize("obs_mode", ["text", "both"])
def test_async_default_sync_and_single_envs_agree(obs_mode):
    actions = np.random.default_rng(0).integers(0, 4, (STEPS, N))
    runs = {}
    for mode in ("sync", "async"):
        envs = gym.make_vec("VisMaze-v0", num_envs=N, vectorization_mode=mode, obs_mode=obs_mode)
        try:
            obs, _ = envs.reset(seed=list(range(N)))
            seen = [obs]
            for row in actions:
                seen.append(envs.step(row)[0])
        finally:
            envs.close()
        runs[mode] = seen
    singles = [_single_run(i, actions[:, i]) for i in range(N)]
    for t in range(STEPS + 1):
        sync, async_ = runs["sync"][t], runs["async"][t]
        assert isinstance(async_["text"], tuple)
        assert tuple(async_["text"]) == tuple(sync["text"])
        for i in range(N):
            assert async_["text"][i] == singles[i][t]["text"], f"step {t}, env {i}"
            if obs_mode == "both":
                assert np.array_equal(async_["image"][i], singles[i][t]["image"])


def test_without_copy_the_live_rows_copy_to_plain_strings():
    envs = gym.make_vec(
        "VisMaze-v0", num_envs=2, vectorization_mode="async", obs_mode="text", vector_kwargs={"copy": False}
    )
    try:
        obs, _ = envs.reset(seed=[0, 1])
        assert isinstance(obs["text"], SharedTextRows)
        snapshot = copy.deepcopy(obs["text"])
        assert (
            isinstance(snapshot, tuple)
            and snapshot[1] == gym.make("VisMaze-v0", obs_mode="text").reset(seed=1)[0]["text"]
        )
        assert obs["text"][0:2] == snapshot and len(obs["text"]) == 2
    finally:
        envs.close()
