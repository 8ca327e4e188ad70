"""The one data model for multi-turn experience, shared by every algorithm and runner.

An :class:`Episode` is one play of one maze; it is made of :class:`Turn` s, one per policy
decision. A turn records what the policy saw (``prompt_ids`` and ``images`` for language
models, ``observation`` for network policies), what it produced (``response_ids``, or a
discrete ``action``), the log-probabilities recorded *at sampling time*, and the reward the
environment paid for it. All rollouts of the same maze share a ``group_id``; GRPO-style
estimators normalise within a group.

Only what the policy produced is ever trained on: ``Turn.loss_mask`` is 0 over the prompt
(system prompt, observations, environment feedback, earlier turns) and 1 over the response.

This module is torch-free on purpose: runners build episodes in worker processes and ship
them around (pickling, Ray object store) before any tensor exists.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Turn:
    """One decision of the policy inside an episode.

    For language-model policies ``prompt_ids`` is the full context fed to the model for this
    turn and ``response_ids`` the tokens it generated; ``logprobs[i]`` is the sampling
    log-probability of ``response_ids[i]``. For discrete (network) policies ``response_ids``
    is ``[action]`` and ``logprobs`` holds one value.
    """

    prompt_ids: list[int] = field(default_factory=list)
    """Context tokens fed to the policy for this turn (never trained on)."""
    response_ids: list[int] = field(default_factory=list)
    """Tokens (or the single discrete action) the policy produced: the trained part."""
    logprobs: list[float] = field(default_factory=list)
    """Sampling-time log-prob of each entry of ``response_ids``."""
    reward: float = 0.0
    """Reward the environment paid for this turn's action."""
    action: int | None = None
    """Environment action that was executed; ``None`` when the output was unparseable."""
    valid: bool = True
    """False when the model output could not be parsed into an action (an invalid turn)."""
    observation: Any = None
    """Network policies: the observation the action was chosen from (numpy array or dict)."""
    images: list[Any] = field(default_factory=list)
    """Vision-language policies: the images (HxWx3 uint8 arrays, or PIL images) referenced by the prompt."""
    value: float | None = None
    """Critic estimate recorded at rollout time (PPO), if the policy has a value head."""
    text: str = ""
    """Decoded response text, kept for logging and debugging."""
    state: str = ""
    """The environment state the decision was taken in (VisMaze: the agent's cell, ``"row,col"``).
    Turns of one group with equal ``state`` are the *anchor states* of step-level credit (GiGPO);
    empty when unknown."""
    path_cells: tuple[int, ...] = ()
    """Demonstrations: the row-major indices of the squares on the shortest path from ``state`` to the goal, the
    per-square target of a vision encoder's path loss; empty in rollouts."""

    @property
    def loss_mask(self) -> list[int]:
        """Mask over ``prompt_ids + response_ids``: 1 exactly on the policy's own tokens."""
        return [0] * len(self.prompt_ids) + [1] * len(self.response_ids)

    @property
    def input_ids(self) -> list[int]:
        """The full sequence a forward pass needs: context followed by response."""
        return list(self.prompt_ids) + list(self.response_ids)


@dataclass
class Episode:
    """One rollout of one maze, as a list of turns plus its outcome."""

    turns: list[Turn] = field(default_factory=list)
    group_id: int = 0
    """All rollouts of the same maze share this id (GRPO groups)."""
    maze_id: str = ""
    """Stable hash of the maze that was played."""
    success: bool = False
    """True when the goal was reached within the move limit (task reward only)."""
    weights_version: int = 0
    """Version of the policy weights (adapter sync version) that sampled this episode."""
    optimal_moves: int = 0
    """BFS-optimal number of moves from the start (for SPL)."""
    truncated: bool = False
    """True when the episode ended by hitting the move limit."""
    info: dict[str, Any] = field(default_factory=dict)
    """Free-form extras (seed, size, timings)."""

    @property
    def episode_return(self) -> float:
        """Sum of per-turn rewards."""
        return float(sum(t.reward for t in self.turns))

    @property
    def num_moves(self) -> int:
        """Number of turns played (valid or not)."""
        return len(self.turns)

    @property
    def num_invalid(self) -> int:
        """Turns whose output could not be parsed into an action."""
        return sum(1 for t in self.turns if not t.valid)

    @property
    def spl(self) -> float:
        """Success weighted by optimal / actual path length (Anderson et al. 2018)."""
        if not self.success:
            return 0.0
        return self.optimal_moves / max(self.num_moves, self.optimal_moves, 1)
