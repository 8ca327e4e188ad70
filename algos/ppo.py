"""PPO with a critic and GAE (Schulman et al. 2017), the classic-RL baseline.

Needs a policy with a value head (``policy.has_value_head``): ``MazeNetPolicy``, or
``LoRALMPolicy(value_head=True)`` (a linear head on the LM's last hidden state at the turn's last
prompt token, trained through the same loss as the adapter; the runners build it for ``ppo``).
Each turn is one transition: reward = the turn's reward, V(s_t) = the critic's value of the
state the turn was played in (recomputed before the update). GAE runs within each episode; the episode's
last turn is treated as terminal (a maze episode that hits its move limit is not bootstrapped:
the observation carries no clock, so the limit is part of the task). Advantages are whitened
over the batch, and the loss adds ``vf_coef *`` a clipped value loss. Groups are not needed; it trains on whole
plays only (``rollout_schemes``), never on branching rollouts' one-move episodes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from algos import advantages as adv_lib
from algos import losses
from algos.base import Algorithm, AlgorithmConfig
from algos.data import Episode
from algos.policy import PolicyOutput
from algos.registry import register


@dataclass
class PPOConfig(AlgorithmConfig):
    """PPO hyperparameters (the shared fields are documented on AlgorithmConfig)."""

    lr: float = 3e-4
    """AdamW learning rate."""
    epochs: int = 4
    """Passes over each batch."""
    minibatch_size: int = 256
    """Turns per optimizer step."""
    gamma: float = 0.99
    """Discount factor per turn."""
    gae_lambda: float = 0.95
    """GAE lambda (1 = Monte-Carlo returns, 0 = one-step TD)."""
    vf_coef: float = 0.5
    """Weight of the value loss."""
    vf_clip: float | None = None
    """Clip the value update to +- this around the old value (None = unclipped)."""
    vf_lr: float | None = None
    """Learning rate of the value head (None = lr); a fresh head may need more than a LoRA adapter's rate."""
    norm_adv: bool = True
    """Whiten advantages over the batch."""
    loss_agg: str = "token-mean"
    """Every token (for network policies: every action) weighs the same."""
    entropy_coef: float = 0.01
    """Entropy bonus weight."""
    max_grad_norm: float = 0.5
    """Gradient norm clip."""


@register("ppo")
class PPO(Algorithm):
    """Proximal policy optimisation with a learned value baseline."""

    Config = PPOConfig
    needs_value_head = True
    # GAE runs along a play's turns and the critic learns the value of every state a play visits; a branch is a
    # one-turn episode whose reward comes from a walk the critic never sees.
    rollout_schemes = ("episodes",)

    def validate_config(self) -> None:
        """PPO additionally needs a value head."""
        super().validate_config()
        if not getattr(self.policy, "has_value_head", False):
            raise ValueError(
                f"ppo needs a policy with a value head; {type(self.policy).__name__} has none "
                "(use a critic-free algorithm such as 'grpo')"
            )

    @classmethod
    def check_config(cls, c: PPOConfig) -> None:
        """The shared checks, plus a positive critic learning rate."""
        super().check_config(c)
        if c.vf_lr is not None and c.vf_lr <= 0:
            raise ValueError(f"vf_lr must be positive (or None for lr), got {c.vf_lr}")

    def param_groups(self, params):
        """With ``vf_lr`` set, the value head's parameters (``policy.value_parameters()``) train at that rate."""
        if self.config.vf_lr is None:
            return super().param_groups(params)
        if not hasattr(self.policy, "value_parameters"):
            raise ValueError(
                f"vf_lr needs a policy that names its value head's parameters (value_parameters()); "
                f"{type(self.policy).__name__} does not: leave vf_lr unset"
            )
        critic = {id(p) for p in self.policy.value_parameters()}
        return super().param_groups([p for p in params if id(p) not in critic]) + [
            {"params": [p for p in params if id(p) in critic], "lr": self.config.vf_lr}
        ]

    def compute_advantages(self, episodes: Sequence[Episode], values: torch.Tensor | None):
        """GAE per episode over turns; value targets are ``advantages + values``."""
        c = self.config
        rewards = torch.tensor([t.reward for ep in episodes for t in ep.turns])
        dones = torch.tensor([float(i == len(ep.turns) - 1) for ep in episodes for i in range(len(ep.turns))])
        advantages, targets = adv_lib.gae(rewards, values, dones, gamma=c.gamma, lam=c.gae_lambda)
        if c.norm_adv:
            advantages = adv_lib.whiten(advantages)
        return advantages, targets

    def compute_loss(self, out: PolicyOutput, batch: dict[str, torch.Tensor], totals: dict[str, float]):
        """Policy loss plus ``vf_coef *`` value loss (value loss scaled by this micro-batch's share)."""
        loss, metrics = super().compute_loss(out, batch, totals)
        share = out.values.shape[0] / max(totals["seqs"], 1.0)
        v_loss = losses.value_loss(out.values, batch["old_values"], batch["returns"], self.config.vf_clip) * share
        metrics["value_loss"] = v_loss.item()
        return loss + self.config.vf_coef * v_loss, metrics
