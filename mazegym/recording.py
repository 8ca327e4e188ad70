"""Replay and GIF recording: logs store ``(maze spec, actions)`` instead of frames.

An episode is fully determined by its maze and its actions, so :func:`replay` rebuilds every
frame (and reward/info) on demand and :func:`save_gif` writes them out::

    result = replay(spec.to_dict(), [0, 3, 3, 0])
    save_gif(result.frames, "episode.gif")
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np
from PIL import Image

from mazegym.envs.vismaze import VisMazeEnv
from mazegym.maze import MazeSpec


@dataclass
class Replay:
    """Everything one replayed episode produced."""

    frames: list[np.ndarray] = field(default_factory=list)
    """RGB frames: the reset frame, then one per executed action."""
    texts: list[str] = field(default_factory=list)
    """ASCII maps matching ``frames``."""
    rewards: list[float] = field(default_factory=list)
    """Reward of each executed action."""
    infos: list[dict[str, Any]] = field(default_factory=list)
    """Info dicts: the reset info, then one per executed action."""
    success: bool = False
    """True when the goal was reached (or stopped on, with ``require_stop``)."""
    terminated: bool = False
    """The episode terminated."""
    truncated: bool = False
    """The move limit ended the episode."""
    actions_used: int = 0
    """Actions executed before the episode ended (later ones are ignored)."""


def replay(spec_or_dict: MazeSpec | dict, actions: Sequence[int | None], **env_kwargs: Any) -> Replay:
    """Replay ``actions`` on the given maze and collect frames, rewards and infos.

    ``None`` in ``actions`` stands for an unparseable model reply (an invalid turn that uses a
    move). ``env_kwargs`` go to :class:`~mazegym.envs.vismaze.VisMazeEnv`; ``size`` comes from
    the spec and ``max_moves`` defaults to the number of actions (at least 1).
    """
    spec = spec_or_dict if isinstance(spec_or_dict, MazeSpec) else MazeSpec.from_dict(spec_or_dict)
    env_kwargs = {"max_moves": max(1, len(actions)), **env_kwargs, "size": spec.size, "obs_mode": "both"}
    env = VisMazeEnv(**env_kwargs)
    obs, info = env.reset(options={"maze": spec})
    out = Replay(frames=[obs["image"]], texts=[obs["text"]], infos=[info])
    for action in actions:
        if action is None:
            obs, reward, terminated, truncated, info = env.step_invalid()
        else:
            obs, reward, terminated, truncated, info = env.step(action)
        out.frames.append(obs["image"])
        out.texts.append(obs["text"])
        out.rewards.append(float(reward))
        out.infos.append(info)
        out.actions_used += 1
        if terminated or truncated:
            out.success, out.terminated, out.truncated = bool(info["is_success"]), terminated, truncated
            break
    return out


def save_gif(frames: Sequence[np.ndarray], path: str | Path, fps: float = 4.0, hold_last: int = 2) -> Path:
    """Write RGB frames to an animated GIF; the final frame is held ``hold_last`` extra steps."""
    if len(frames) == 0:
        raise ValueError("save_gif needs at least one frame")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    images = [Image.fromarray(np.asarray(f, dtype=np.uint8)) for f in frames]
    step_ms = int(1000 / fps)
    durations = [step_ms] * (len(images) - 1) + [step_ms * (1 + hold_last)]
    # Pillow merges identical consecutive frames (e.g. wall bumps) and sums their durations.
    images[0].save(path, save_all=True, append_images=images[1:], duration=durations, loop=0, optimize=False)
    return path


def record_gif(spec_or_dict: MazeSpec | dict, actions: Sequence[int | None], path: str | Path, fps: float = 4.0, **env_kwargs: Any) -> Replay:
    """Replay an episode and save it as a GIF; returns the :class:`Replay`."""
    result = replay(spec_or_dict, actions, **env_kwargs)
    save_gif(result.frames, path, fps=fps)
    return result
