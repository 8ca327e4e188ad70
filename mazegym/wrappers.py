"""Wrappers: text actions, single-modality observations, fixed maze/seed sets.

## Vector Environments

``gymnasium.make_vec("VisMaze-v0", num_envs=N, vectorization_mode="sync" | "async")`` works
(tested). Gymnasium 1.x vector envs auto-reset in ``AutoresetMode.NEXT_STEP`` mode: after an
episode ends, the *next* ``step()`` call resets that sub-env and ignores its action. The project's
runners do not rely on autoreset at all: LLM runners drive one single env per episode and call
``reset(options={"maze": spec})`` explicitly (one maze per GRPO group); vectorised network-policy
runners must skip the transition that follows a ``terminated | truncated``.

``"async"`` (``AsyncVectorEnv``) works with its default shared memory for every ``obs_mode`` and
returns correct text maps: the env's text space is :class:`mazegym.spaces.MapText`, whose
shared-memory reader decodes the buffer at each step (gymnasium 1.4.0's own ``Text`` reader
returned blank maps).
"""

from __future__ import annotations

import itertools
from typing import Any, Iterable, Sequence

import gymnasium as gym
from gymnasium import spaces

from mazegym.llm import invalid_action_feedback, parse_action
from mazegym.maze import MazeSpec


class TextActionWrapper(gym.Wrapper):
    """``step(text)``: parses a model reply with :func:`mazegym.llm.parse_action`.

    An unparseable reply is an invalid turn: it uses a move, pays nothing, and ``info``
    carries ``invalid_action=True``, ``feedback`` with the reason, and ``parsed`` (the
    :class:`~mazegym.llm.ParsedAction`).
    """

    def __init__(self, env: gym.Env, max_length: int = 4096):
        super().__init__(env)
        self.action_space = spaces.Text(max_length=max_length)
        self._require_stop = bool(getattr(env.unwrapped, "require_stop", False))

    def step(self, action: str):
        """Parse ``action`` (model text) and step the env, or spend an invalid turn."""
        parsed = parse_action(action, require_stop=self._require_stop)
        if parsed.action is None:
            out = self.env.unwrapped.step_invalid(invalid_action_feedback(parsed, self._require_stop))
        else:
            out = self.env.step(parsed.action)
        obs, reward, terminated, truncated, info = out
        info["parsed"] = parsed
        return obs, reward, terminated, truncated, info


class ImageObsWrapper(gym.ObservationWrapper):
    """Observation = the RGB frame alone (a ``Box``), e.g. for CNN policies and Stable-Baselines3.

    SB3 cannot batch the default ``Dict`` observation (its ``Text`` map); use
    ``ImageObsWrapper(gym.make("VisMaze-v0", obs_mode="image"))`` with ``"CnnPolicy"``.
    """

    def __init__(self, env: gym.Env):
        super().__init__(env)
        if "image" not in env.observation_space.spaces:
            raise ValueError("ImageObsWrapper needs an env with obs_mode 'image' or 'both'")
        self.observation_space = env.observation_space["image"]

    def observation(self, observation: dict[str, Any]):
        """Return the image part."""
        return observation["image"]


class TextObsWrapper(gym.ObservationWrapper):
    """Observation = the ASCII map alone (a ``Text``)."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        if "text" not in env.observation_space.spaces:
            raise ValueError("TextObsWrapper needs an env with obs_mode 'text' or 'both'")
        self.observation_space = env.observation_space["text"]

    def observation(self, observation: dict[str, Any]):
        """Return the text part."""
        return observation["text"]


class ReseedWrapper(gym.Wrapper):
    """Cycle through a fixed list of seeds on every ``reset()`` (MiniGrid's ReseedWrapper).

    A ``seed`` passed to ``reset`` is ignored: the next seed of the list is used instead, so
    the env only ever shows the same finite set of mazes.
    """

    def __init__(self, env: gym.Env, seeds: Sequence[int] = (0,)):
        super().__init__(env)
        if len(seeds) == 0:
            raise ValueError("ReseedWrapper needs at least one seed")
        self.seeds = list(seeds)
        self._next = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        """Reset with the next seed of the list."""
        seed = self.seeds[self._next]
        self._next = (self._next + 1) % len(self.seeds)
        return self.env.reset(seed=seed, options=options)


class MazeSetWrapper(gym.Wrapper):
    """Cycle through a fixed list of mazes (e.g. an evaluation set) on every ``reset()``."""

    def __init__(self, env: gym.Env, mazes: Iterable[MazeSpec | dict]):
        super().__init__(env)
        self.mazes = [m if isinstance(m, MazeSpec) else MazeSpec.from_dict(m) for m in mazes]
        if not self.mazes:
            raise ValueError("MazeSetWrapper needs at least one maze")
        self._cycle = itertools.cycle(range(len(self.mazes)))

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        """Reset on the next maze of the list (``options["maze"]`` still wins when given)."""
        options = dict(options or {})
        options.setdefault("maze", self.mazes[next(self._cycle)])
        return self.env.reset(seed=seed, options=options)
