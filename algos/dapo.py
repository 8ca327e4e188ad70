"""DAPO (arXiv:2503.14476): GRPO advantages with four changes.

1. Clip-higher: asymmetric clip ``[1 - 0.2, 1 + 0.28]`` lets unlikely good tokens grow.
2. Token-level loss (``token-mean``): every token weighs the same, whatever its turn's length.
3. Dynamic sampling: groups whose returns are all equal carry no signal and are dropped
   (here: filtered from the batch; a runner that wants a full batch samples more groups).
4. No KL term. (Overlong reward shaping belongs to the environment/runner, not the loss.)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from algos.base import Algorithm, AlgorithmConfig
from algos.data import Episode
from algos.registry import register


@dataclass
class DAPOConfig(AlgorithmConfig):
    """DAPO hyperparameters (the shared fields are documented on AlgorithmConfig)."""

    clip_eps_low: float = 0.2
    """Lower clip: ratio >= 1 - clip_eps_low."""
    clip_eps_high: float = 0.28
    """Upper clip (clip-higher): ratio <= 1 + clip_eps_high."""
    loss_agg: str = "token-mean"
    """Token-level policy-gradient loss."""
    filter_zero_variance: bool = True
    """Dynamic sampling: drop groups whose returns are all equal."""
    kl_coef: float = 0.0
    """DAPO uses no KL penalty."""


@register("dapo")
class DAPO(Algorithm):
    """Decoupled clip and dynamic sampling policy optimisation."""

    Config = DAPOConfig

    def compute_advantages(self, episodes: Sequence[Episode], values: torch.Tensor | None):
        """Group-normalised returns, like GRPO (zero-variance groups were already dropped)."""
        return self.group_relative_advantages(episodes, "grpo", norm_by_std=True), None
