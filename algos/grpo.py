"""GRPO (DeepSeekMath, arXiv:2402.03300), the project's default algorithm.

Each maze is played G times (one *group*); an episode's advantage is its return compared with
its group: ``A_i = (R_i - mean_g) / (std_g + eps)`` (unbiased std), broadcast to every token the
policy produced in every turn of the episode. The loss is PPO-clip, averaged per turn and then
over turns (``seq-mean-token-mean``), with an optional k3 KL to the reference (for a LoRA
policy: the base model with the adapter disabled, at no memory cost).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from algos.base import Algorithm, AlgorithmConfig
from algos.data import Episode
from algos.registry import register


@dataclass
class GRPOConfig(AlgorithmConfig):
    """GRPO hyperparameters (the shared fields are documented on AlgorithmConfig)."""

    norm_by_std: bool = True
    """Divide by the group's std (GRPO); False gives Dr.GRPO's mean-only baseline."""
    kl_coef: float = 0.0
    """Weight of the k3 KL to the reference (DeepSeekMath used 0.04; recent practice: 0)."""
    loss_agg: str = "seq-mean-token-mean"
    """GRPO averages tokens within a turn, then turns."""


@register("grpo")
class GRPO(Algorithm):
    """Group-relative policy optimisation: critic-free, group-normalised returns."""

    Config = GRPOConfig

    def compute_advantages(self, episodes: Sequence[Episode], values: torch.Tensor | None):
        """Group-normalised episode returns (or turn-level returns-to-go) per turn."""
        return self.group_relative_advantages(episodes, "grpo", norm_by_std=self.config.norm_by_std), None
