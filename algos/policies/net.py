"""A small torch network policy for the maze envs, for classic RL and teaching.

Observation encoding (compact, and honest: it only uses what the env shows):

- image observations are downsampled to **one pixel per grid square** (the centre pixel of
  each ``cell_px`` x ``cell_px`` tile, which the agent disc covers) and each pixel is
  classified by the nearest colour of the env's palette -> a ``[3, n, n]`` one-hot of
  wall / goal / agent (floor = all zeros);
- text observations become the same one-hot from the characters.

Architectures (``arch``):

- ``"vin"`` (default): a Value Iteration Network (Tamar et al., NeurIPS 2016). 1x1 convs
  read a reward map from the encoded grid; one shared 3x3 conv is applied ``iterations``
  times, taking the max over its channels each time (a learned Bellman backup). The
  policy and value heads read the planner's features at the agent's square through a learned
  soft-attention map. The planning prior is what lets a tiny net solve *unseen* mazes after a
  minute of CPU training; nothing maze-specific (walls, goal, BFS) is hard-coded.
- ``"cnn"``: a plain conv encoder + MLP heads, the textbook baseline.

``act()`` samples (or, with ``greedy=True``, takes the argmax of) the masked distribution;
illegal moves from ``info["action_mask"]`` get probability 0 when a mask is given. Rollouts
store ``MazeNetPolicy.turn_observation(obs, mask)`` in ``Turn.observation`` so that
``score_turns`` scores with exactly the distribution that sampled.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import torch
from torch import nn

from algos.data import Turn
from algos.policy import PolicyOutput

NUM_ACTIONS = 4


def _palette() -> np.ndarray:
    """[4, 3] RGB of floor, wall, goal, agent, read from the env's renderer."""
    from mazegym.render import AGENT_RGB, FLOOR_RGB, GOAL_RGB, WALL_RGB

    return np.array([FLOOR_RGB, WALL_RGB, GOAL_RGB, AGENT_RGB], dtype=np.float32)


def encode_image(image: np.ndarray, grid_size: int) -> np.ndarray:
    """HxWx3 (or NxHxWx3) uint8 frame -> [3, n, n] (or [N, 3, n, n]) float32 one-hot.

    One pixel per square (the tile centre, which the agent disc covers), classified by its
    nearest palette colour into wall / goal / agent channels (floor = all zeros), the same
    encoding as :func:`encode_text`.
    """
    image = np.asarray(image)
    cell_px = image.shape[-2] // grid_size
    if cell_px * grid_size != image.shape[-2]:
        raise ValueError(f"image width {image.shape[-2]} is not a multiple of grid_size {grid_size}")
    centres = image[..., cell_px // 2 :: cell_px, cell_px // 2 :: cell_px, :][..., :grid_size, :grid_size, :]
    dist = ((centres[..., None, :].astype(np.float32) - _palette()) ** 2).sum(-1)  # [..., n, n, 4]
    onehot = np.eye(4, dtype=np.float32)[dist.argmin(-1)][..., 1:]  # drop floor
    return np.moveaxis(onehot, -1, -3)


_TEXT_CHANNELS = {"#": 0, "G": 1, "A": 2}


def encode_text(text: str) -> np.ndarray:
    """ASCII map ('#' wall, '.' floor, 'G' goal, 'A' agent) -> [3, n, n] float32 one-hot."""
    rows = text.strip("\n").split("\n")
    out = np.zeros((3, len(rows), len(rows[0])), dtype=np.float32)
    for r, row in enumerate(rows):
        for c, ch in enumerate(row):
            k = _TEXT_CHANNELS.get(ch)
            if k is not None:
                out[k, r, c] = 1.0
    return out


def encode_observation(obs: Any, grid_size: int) -> np.ndarray:
    """Env observation (dict with "image" and/or "text", or an already encoded array) -> [3, n, n]."""
    if isinstance(obs, dict):
        if "x" in obs:
            return np.asarray(obs["x"], dtype=np.float32)
        if "image" in obs:
            return encode_image(obs["image"], grid_size)
        if "text" in obs:
            return encode_text(obs["text"])
        raise ValueError(f"observation dict needs an 'image' or 'text' key, got {sorted(obs)}")
    return np.asarray(obs, dtype=np.float32)


class VINBody(nn.Module):
    """Soft value-iteration planner on the 4-connected grid; returns per-sample features [B, 5].

    Learned from the maze channels (wall, goal) by a per-square linear map: a reward ``rho``
    (where the goal is) and a step cost ``c >= 0`` (walls should learn to cost a lot). Fixed:
    the Bellman backup over the four grid neighbours, with a soft max (temperature ``tau``) so
    that gradient reaches every square::

        u <- logaddexp(rho, tau * logsumexp(u at the 4 neighbours / tau) - c)

    i.e. "value here = reward here, or the best neighbour's value minus the cost of the step".
    As in the VIN paper (Tamar et al. 2016), the plan is read at the agent's square (the agent
    channel of the encoding) by an attention step. The features are the right/up/left/down
    neighbours' ``u`` minus the agent square's (how much closer each move gets) and ``0.1 * u``
    at the agent (for the critic); which action matches which neighbour is left to the heads.
    """

    def __init__(self, channels: int = 3, iterations: int = 44, gain: float = 5.0, temperature: float = 0.1):
        super().__init__()
        self.iterations = iterations
        self.gain = gain
        self.temperature = temperature
        # log-reward and step cost from the maze channels (wall, goal): a 1x1 conv, i.e. a
        # per-square linear read of what is there. The agent channel is not used for planning.
        self.maps = nn.Conv2d(channels - 1, 2, 1)
        with torch.no_grad():  # start knowing nothing: every square alike, small reward, small step cost
            self.maps.weight.zero_()
            self.maps.bias.copy_(torch.tensor([-0.4, -0.4]))
        self.out_features = 5

    @staticmethod
    def neighbours(u: torch.Tensor, fill: float) -> torch.Tensor:
        """[B, n, n] -> [4, B, n, n]: right, up, left and down neighbour of every square."""
        p = nn.functional.pad(u, (1, 1, 1, 1), value=fill)
        return torch.stack([p[:, 1:-1, 2:], p[:, :-2, 1:-1], p[:, 1:-1, :-2], p[:, 2:, 1:-1]])

    def plan(self, maze: torch.Tensor) -> torch.Tensor:
        """Maze channels [M, 2, n, n] -> values u [M, n, n] after ``iterations`` backups."""
        maps = self.gain * self.maps(maze)
        rho = maps[:, 0]
        cost = nn.functional.softplus(maps[:, 1])  # >= 0: what one step through this square costs
        tau = self.temperature
        u = rho
        for _ in range(self.iterations):
            best_next = tau * torch.logsumexp(self.neighbours(u, -30.0) / tau, dim=0)
            u = torch.logaddexp(rho, best_next - cost)
        return u

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # All turns of all rollouts of one maze share the plan: run it once per distinct maze
        # (identical result, ~100x less compute for grouped batches).
        maze = x[:, :-1]
        unique, inverse = torch.unique(maze.flatten(1), dim=0, return_inverse=True)
        u = self.plan(unique.view(-1, *maze.shape[1:]))[inverse]
        agent = x[:, -1].flatten(1)  # VIN's attention: read the plan at the agent's square
        attention = agent / agent.sum(1, keepdim=True).clamp(min=1.0)
        nbrs = self.neighbours(u, -30.0).permute(1, 0, 2, 3).flatten(2)  # [B, 4, n*n]
        centre = u.flatten(1)[:, None]
        stack = torch.cat([nbrs - centre, 0.1 * centre], dim=1)  # [B, 5, n*n], O(1) scale
        return torch.einsum("bkn,bn->bk", stack, attention)


class CNNBody(nn.Module):
    """Plain conv encoder + a dense layer: features [B, 128]."""

    def __init__(self, channels: int = 3, hidden: int = 32, depth: int = 4, grid_size: int = 11):
        super().__init__()
        layers: list[nn.Module] = []
        for i in range(depth):
            layers += [nn.Conv2d(channels if i == 0 else hidden, hidden, 3, padding=1), nn.ReLU()]
        self.net = nn.Sequential(*layers, nn.Flatten(), nn.Linear(hidden * grid_size * grid_size, 128), nn.ReLU())
        self.out_features = 128

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class MazeNetPolicy(nn.Module):
    """Actor-critic network over encoded maze observations; implements :class:`algos.policy.Policy`."""

    has_value_head = True

    def __init__(self, grid_size: int, arch: str = "vin", hidden: int = 16, iterations: int | None = None):
        """``grid_size``: squares per side (e.g. 11 for 5x5-cell mazes); ``iterations``: VIN
        backups (default ``4 * grid_size``, enough for the longest corridor paths)."""
        super().__init__()
        self.grid_size = grid_size
        if arch == "vin":
            self.body: nn.Module = VINBody(iterations=iterations or 4 * grid_size)
        elif arch == "cnn":
            self.body = CNNBody(hidden=hidden, grid_size=grid_size)
        else:
            raise ValueError(f"arch must be 'vin' or 'cnn', got {arch!r}")
        features = self.body.out_features
        self.actor = nn.Sequential(nn.Linear(features, 64), nn.Tanh(), nn.Linear(64, NUM_ACTIONS))
        self.critic = nn.Sequential(nn.Linear(features, 64), nn.Tanh(), nn.Linear(64, 1))
        with torch.no_grad():  # near-uniform initial policy (CleanRL's 0.01-gain actor head)
            self.actor[-1].weight.mul_(0.01)
            self.actor[-1].bias.zero_()

    def forward(self, x: torch.Tensor, action_mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Encoded observations [B, 3, n, n] -> (masked log-probs [B, 4], values [B])."""
        pooled = self.body(x)
        logits = self.actor(pooled)
        if action_mask is not None:
            logits = logits.masked_fill(action_mask <= 0, -1e9)
        return torch.log_softmax(logits, dim=-1), self.critic(pooled).squeeze(-1)

    # ------------------------------------------------------------------------ rollouts
    def encode_batch(self, obs_batch: Any) -> torch.Tensor:
        """A list of env observations, a batched obs dict (vector env) or an array -> [B, 3, n, n]."""
        if isinstance(obs_batch, dict) and "image" in obs_batch and np.asarray(obs_batch["image"]).ndim == 4:
            return torch.from_numpy(encode_image(obs_batch["image"], self.grid_size))
        if isinstance(obs_batch, (list, tuple)):
            return torch.from_numpy(np.stack([encode_observation(o, self.grid_size) for o in obs_batch]))
        return torch.as_tensor(np.asarray(obs_batch, dtype=np.float32))

    @torch.no_grad()
    def act(
        self, obs_batch: Any, action_mask: Any = None, greedy: bool = False, generator: torch.Generator | None = None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Choose actions for a batch: returns (actions int64 [B], log-probs [B], values [B])."""
        x = self.encode_batch(obs_batch)
        mask = None if action_mask is None else torch.as_tensor(np.asarray(action_mask), dtype=torch.float32)
        logp, values = self(x, mask)
        if greedy:
            actions = logp.argmax(-1)
        else:
            actions = torch.multinomial(logp.exp(), 1, generator=generator).squeeze(-1)
        return actions.numpy(), logp.gather(-1, actions[:, None]).squeeze(-1).numpy(), values.numpy()

    def turn_observation(self, obs: Any, action_mask: Any = None) -> dict[str, np.ndarray]:
        """What to store in ``Turn.observation``: the encoded grid plus the action mask used."""
        out = {"x": encode_observation(obs, self.grid_size)}
        if action_mask is not None:
            out["action_mask"] = np.asarray(action_mask, dtype=np.int8)
        return out

    # ------------------------------------------------------------------------ Policy API
    def score_turns(self, turns: Sequence[Turn], *, reference: bool = False) -> PolicyOutput:
        """Log-prob of each turn's action (``response_ids[0]``), entropy and value; L == 1."""
        if reference:
            raise ValueError("MazeNetPolicy has no reference model; use kl_coef=0")
        x = torch.from_numpy(np.stack([encode_observation(t.observation, self.grid_size) for t in turns]))
        masks = [t.observation.get("action_mask") if isinstance(t.observation, dict) else None for t in turns]
        mask = None
        if any(m is not None for m in masks):
            mask = torch.tensor(
                np.stack([m if m is not None else np.ones(NUM_ACTIONS) for m in masks]), dtype=torch.float32
            )
        logp, values = self(x, mask)
        actions = torch.tensor([t.response_ids[0] if t.response_ids else 0 for t in turns])
        token_mask = torch.tensor([[1.0 if t.response_ids else 0.0] for t in turns])
        chosen = logp.gather(-1, actions[:, None]) * token_mask
        probs = logp.exp()
        entropy = -(probs * torch.where(probs > 0, logp, torch.zeros_like(logp))).sum(-1, keepdim=True)
        return PolicyOutput(logprobs=chosen, mask=token_mask, entropy=entropy * token_mask, values=values)

    def trainable_parameters(self) -> list[nn.Parameter]:
        """All network parameters."""
        return list(self.parameters())
