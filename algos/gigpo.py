"""GiGPO: group-in-group policy optimisation (Feng et al. 2025, arXiv:2505.10978).

GRPO gives every turn of an episode the same advantage, so in a long multi-turn episode the
one wrong move at a junction is blamed no more than the ten right ones around it. GiGPO keeps
GRPO's episode-level term and adds a step-level one at no extra rollout cost: rollouts of the
same maze keep revisiting the same cells, and every visit to a cell is an *anchor state*
where different moves can be compared directly. Per turn,

    A = A_episode + step_weight * A_step

with ``A_episode`` GRPO's group-normalised episode return and ``A_step`` the turn's
discounted return-to-go normalised within its anchor-state group
(:func:`algos.advantages.anchor_state_advantages`). Turns need ``Turn.state`` (the runners
and ``algos.net_rollout`` record the agent's cell). With ``gamma < 1`` a group in which
every play succeeded still teaches the shorter way, so zero-variance filtering here drops
only groups whose *discounted* returns are all equal.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from algos import advantages as adv_lib
from algos.base import Algorithm, AlgorithmConfig
from algos.data import Episode
from algos.registry import register


@dataclass
class GiGPOConfig(AlgorithmConfig):
    """GiGPO hyperparameters (the shared fields are documented on AlgorithmConfig)."""

    gamma: float = 0.95
    """Discount of the step-level returns-to-go (the paper's 0.95); < 1 rewards shorter paths."""
    step_weight: float = 1.0
    """omega: weight of the step-level (anchor-state) advantage added to the episode-level one."""
    norm_by_std: bool = True
    """Divide both terms by their group's std (GiGPO's default); False keeps mean baselines only."""


@register("gigpo")
class GiGPO(Algorithm):
    """Episode-level GRPO advantage plus anchor-state (step-level) advantage per turn."""

    Config = GiGPOConfig

    @classmethod
    def check_config(cls, c: AlgorithmConfig) -> None:
        """Also reject settings GiGPO has no meaning for."""
        super().check_config(c)
        if c.turn_credit:
            raise ValueError("gigpo already credits turns through anchor states; leave turn_credit=False")
        if not 0.0 < c.gamma <= 1.0:
            raise ValueError(f"gamma must be in (0, 1], got {c.gamma}")

    def filter_returns(self, episodes: Sequence[Episode]) -> torch.Tensor:
        """Discounted returns from the start: equal only when the group has no signal at either level."""
        return (
            torch.stack(
                [
                    adv_lib.discounted_returns_to_go([t.reward for t in ep.turns], self.config.gamma)[0]
                    if ep.turns
                    else torch.tensor(0.0, dtype=torch.float64)
                    for ep in episodes
                ]
            )
            if episodes
            else torch.zeros(0, dtype=torch.float64)
        )

    def compute_advantages(self, episodes: Sequence[Episode], values: torch.Tensor | None):
        """``A_episode + step_weight * A_step`` per turn, turns in episode order."""
        episode_level = self.group_relative_advantages(episodes, "grpo", norm_by_std=self.config.norm_by_std)
        step_level = adv_lib.anchor_state_advantages(
            [[t.reward for t in ep.turns] for ep in episodes],
            [[t.state for t in ep.turns] for ep in episodes],
            [ep.group_id for ep in episodes],
            gamma=self.config.gamma,
            norm_by_std=self.config.norm_by_std,
        )
        step = torch.cat(step_level) if step_level else torch.zeros(0)
        return episode_level + self.config.step_weight * step, None
