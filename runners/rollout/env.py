"""The maze env every rollout, demonstration and check plays in, built through gymnasium's registry."""

from __future__ import annotations

from typing import Any

import gymnasium as gym

import mazegym  # noqa: F401  (registers the env ids)

ENV_ID = "VisMaze-v0"
"""The registered id runs build their envs from; the run's maze size and move limit replace its defaults."""


def make_env(
    size: int, max_moves: int, obs_mode: str, require_stop: bool = False, env_kwargs: dict[str, Any] | None = None
) -> gym.Env:
    """``gym.make(ENV_ID)`` with a run's settings: grid ``size``, ``max_moves``, ``obs_mode``, ``require_stop`` and
    any other VisMazeEnv keyword (``rollout.env_kwargs``); a wrong keyword or value raises here."""
    # The passive checker is off: the env's conformance is tested once (tests/test_env.py), and branch scoring
    # builds an env per maze every step.
    return gym.make(
        ENV_ID,
        size=size,
        max_moves=max_moves,
        obs_mode=obs_mode,
        require_stop=require_stop,
        disable_env_checker=True,
        **(env_kwargs or {}),
    )
