"""Dr.GRPO ("GRPO done right", arXiv:2503.20783).

Removes GRPO's two biases: no division by the group std (which over-weights nearly-solved or
nearly-failed mazes) and a constant loss normaliser ``B * max_len`` instead of per-turn length
averaging (which favours long wrong answers). Set ``max_len`` to the generation budget.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from algos.base import Algorithm, AlgorithmConfig
from algos.data import Episode
from algos.registry import register


@dataclass
class DrGRPOConfig(AlgorithmConfig):
    """Dr.GRPO hyperparameters (the shared fields are documented on AlgorithmConfig)."""

    loss_agg: str = "seq-mean-token-sum-norm"
    """Constant normaliser: sum of token losses / (turns * max_len)."""
    max_len: int | None = None
    """The generation budget (tokens per turn) used as the constant normaliser; None = longest response in the batch."""


@register("dr_grpo")
class DrGRPO(Algorithm):
    """GRPO with a mean-only group baseline and a length-unbiased loss."""

    Config = DrGRPOConfig

    def compute_advantages(self, episodes: Sequence[Episode], values: torch.Tensor | None):
        """``A_i = R_i - mean_g`` per episode, broadcast to its turns."""
        return self.group_relative_advantages(episodes, "grpo", norm_by_std=False), None
