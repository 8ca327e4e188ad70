"""RLOO: REINFORCE with a leave-one-out baseline (Kool et al. 2019; Ahmadian et al. 2024).

Each episode is compared with the mean return of the *other* rollouts of its maze:
``A_i = R_i - mean_{j != i} R_j``, an unbiased baseline without a critic. With one epoch and
on-policy data the PPO ratio is 1 and the loss is plain REINFORCE; the clip only matters when
``epochs > 1``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from algos.base import Algorithm, AlgorithmConfig
from algos.data import Episode
from algos.registry import register


@dataclass
class RLOOConfig(AlgorithmConfig):
    """RLOO hyperparameters (the shared fields are documented on AlgorithmConfig)."""

    loss_agg: str = "seq-mean-token-mean"
    """Average tokens within a turn, then turns."""


@register("rloo")
class RLOO(Algorithm):
    """Leave-one-out REINFORCE, critic-free."""

    Config = RLOOConfig

    def compute_advantages(self, episodes: Sequence[Episode], values: torch.Tensor | None):
        """Leave-one-out advantages per episode, broadcast to its turns."""
        return self.group_relative_advantages(episodes, "rloo"), None
