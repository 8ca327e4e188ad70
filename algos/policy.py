"""The policy protocol every algorithm trains through.

An algorithm never looks inside a model. It hands the policy a list of :class:`~algos.data.Turn`
and gets back, per turn (one row each), the log-probability the *current* weights give to
what the policy produced in that turn, plus optional entropy and value estimates.

Column layout: row ``i`` of every ``[B, L]`` tensor holds turn ``i``'s *response* positions
only, left-aligned: column ``j`` is ``turn.response_ids[j]``, and ``L`` is the longest
response in the batch. Prompt tokens never appear, so ``turn.logprobs`` (recorded at sampling
time) lines up column for column with :attr:`PolicyOutput.logprobs`; see
:func:`rollout_logprobs`. A network policy has one "token" per turn (the discrete action),
so ``L == 1``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence, runtime_checkable

import torch

from algos.data import Turn


@dataclass
class PolicyOutput:
    """What :meth:`Policy.score_turns` returns for a batch of B turns."""

    logprobs: torch.Tensor
    """[B, L] float: log-prob of each response token under the current weights; 0 where masked."""
    mask: torch.Tensor
    """[B, L] float: 1 on response tokens that are scored, 0 on padding."""
    entropy: torch.Tensor | None = None
    """[B, L] float: entropy of the policy's distribution at each response position, or None."""
    values: torch.Tensor | None = None
    """[B] float: critic estimate of the state the turn was taken in, or None (no value head)."""


@runtime_checkable
class Policy(Protocol):
    """Anything an :class:`~algos.base.Algorithm` can train.

    Implementations: :class:`algos.policies.lm.LoRALMPolicy` (a Hugging Face LM/VLM with a
    LoRA adapter) and :class:`algos.policies.net.MazeNetPolicy` (a small torch network).
    """

    has_value_head: bool
    """True when :meth:`score_turns` fills :attr:`PolicyOutput.values` (needed by PPO)."""

    def score_turns(self, turns: Sequence[Turn], *, reference: bool = False) -> PolicyOutput:
        """Score each turn's response under the current weights (one row per turn).

        ``reference=True`` scores under the KL reference policy instead (for LoRA policies:
        the base model with the adapter disabled), without building a graph.
        """
        ...

    def trainable_parameters(self) -> list[torch.nn.Parameter]:
        """The parameters the optimizer updates (LoRA: only the adapter)."""
        ...


def rollout_logprobs(turns: Sequence[Turn], length: int) -> torch.Tensor:
    """Sampling-time log-probs ``turn.logprobs`` as a right-padded [B, length] tensor."""
    out = torch.zeros(len(turns), length)
    for i, turn in enumerate(turns):
        lp = list(turn.logprobs)[:length]
        if lp:
            out[i, : len(lp)] = torch.tensor(lp, dtype=torch.float32)
    return out


def response_mask(turns: Sequence[Turn], length: int | None = None) -> torch.Tensor:
    """[B, L] float mask with 1 on each turn's response positions (left-aligned)."""
    length = max((len(t.response_ids) for t in turns), default=0) if length is None else length
    lengths = torch.tensor([min(len(t.response_ids), length) for t in turns])
    return (torch.arange(length)[None, :] < lengths[:, None]).float()
