"""VisGym's maze_2d protocol on VisMaze: its splits, its action strings and its success rule.

VisGym (``maze_2d``) and VisMaze play the same mazes the same way; three things differ, and this
module maps each one:

* **Splits.** VisGym's ``maze_2d/easy`` is 9x9 with 20 steps and ``maze_2d/hard`` 11x11 with
  30 steps: the ids ``VisMaze-v0`` and ``VisMaze-Hard-v0``, whose fixed 64-maze evaluation sets
  carry the same names (:data:`VISGYM_SPLITS`). The mazes are mazegym's own (seeds 0, 1, ... of
  the env), not VisGym's downloaded test set, so a score is comparable in protocol, not maze by maze.
* **Actions.** VisGym's model writes a Python tuple, ``('move', d)`` with ``d`` in 0..3 or
  ``('stop', 'stop')``; VisMaze's action is the same index (:data:`VISGYM_ACTIONS`):

  | VisGym | VisMaze action | name |
  |---|---|---|
  | ``('move', 0)`` | 0 | right |
  | ``('move', 1)`` | 1 | up |
  | ``('move', 2)`` | 2 | left |
  | ``('move', 3)`` | 3 | down |
  | ``('stop', 'stop')`` | 4 | stop (only with ``require_stop=True``) |

  :func:`mazegym.llm.parse_action` reads these strings (and tags, labels and bare words);
  ``format_action(a, style="visgym")`` writes them.
* **Success.** VisGym pays 1 only for a ``stop`` on the goal: walking onto the goal ends nothing,
  any ``stop`` ends the episode, and every reply (a wall bump, an unparseable one, the stop itself)
  uses one of the split's steps. ``require_stop=True`` is that rule, and :func:`make_env` sets it.
  VisMaze's default (success on reaching the goal) scores a policy at least as high.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym

import mazegym  # noqa: F401  (registers the env ids)
from mazegym.solver import STOP

VISGYM_SPLITS: dict[str, str] = {"maze_2d/easy": "VisMaze-v0", "maze_2d/hard": "VisMaze-Hard-v0"}
"""VisGym split -> the VisMaze env id and evaluation-set name with its size and step limit."""

VISGYM_ACTIONS: dict[str, int] = {
    "('move', 0)": 0,
    "('move', 1)": 1,
    "('move', 2)": 2,
    "('move', 3)": 3,
    "('stop', 'stop')": STOP,
}
"""VisGym's action strings -> VisMaze action indices."""


def env_id_for(name: str) -> str:
    """The VisMaze env id for a VisGym split (``"maze_2d/easy"``) or a VisMaze id (returned as is)."""
    if name in VISGYM_SPLITS:
        return VISGYM_SPLITS[name]
    if name in mazegym.REGISTERED_ENVS:
        return name
    raise ValueError(f"unknown maze {name!r}: use one of {sorted(VISGYM_SPLITS)} or {sorted(mazegym.REGISTERED_ENVS)}")


def make_env(split: str = "maze_2d/easy", **kwargs: Any) -> gym.Env:
    """A VisMaze env scored by VisGym's rule (``require_stop=True``) for a VisGym split or VisMaze id."""
    kwargs.setdefault("require_stop", True)
    return gym.make(env_id_for(split), **kwargs)
