"""VisMaze: VisGym's maze_2d as a fast, seeded Gymnasium environment.

## Description

The agent (a blue disc) walks from its start cell to the red goal square of a maze. The maze
is VisGym's ``maze_2d``: a ``size`` x ``size`` grid of squares (odd ``size``, outer wall ring
included), with cells at odd coordinates and the squares between them open or wall. Mazes are
**perfect** by default (exactly one path between any two cells) and come from one of four
generators: ``"wilson"`` (default, VisGym's; uniform spanning trees), ``"dfs"`` (recursive
backtracker: long corridors), ``"kruskal"`` and ``"prim"`` (many short dead ends).
``extra_openings=f`` then removes the fraction ``f`` of the remaining inner walls, which adds
loops. Start and goal are opposite corners by default (one of the four ordered pairs, as in
VisGym) or two random cells with ``start_goal="random"``.

Every random draw comes from ``env.np_random``, so ``reset(seed=s)`` gives the same maze on every
platform (pinned by stored maze ids in ``tests/test_env.py``). ``reset(options={"maze": spec})``
plays a given maze (``MazeSpec`` or its dict); that is how GRPO groups share one maze and how
evaluation sets are played.

Differences from VisGym: moves are ``Discrete`` actions instead of ``"('move', d)"`` strings (the
LLM parser in ``mazegym.llm`` accepts both); reaching the goal ends the episode with reward 1
(VisGym requires an explicit stop: use ``require_stop=True`` for that protocol); the move limit
is enforced by the env (``truncated``), not by an outer interactor.

## Action Space

| Num | Action | Effect |
|---|---|---|
| 0 | right | column + 1 |
| 1 | up | row - 1 |
| 2 | left | column - 1 |
| 3 | down | row + 1 |
| 4 | stop | only with ``require_stop=True``: ends the episode; pays 1 on the goal |

Moving into a wall leaves the agent in place, uses a move and sets ``info["invalid_move"]``.
``info["action_mask"]`` (int8) is 1 for moves that do not hit a wall (stop is always 1).
``mazegym.ACTION_NAMES`` maps indices to names.

## Observation Space

A ``Dict`` restricted by ``obs_mode``:

* ``"image"``: ``Box(0, 255, (size*cell_px, size*cell_px, 3), uint8)``. VisGym's look: white
  floor, gray (169,169,169) walls, red (255,0,0) goal square filling its cell, blue (0,0,255)
  agent disc of radius ``cell_px/4``; ``cell_px=25`` gives 225x225 px at 9x9 and 275x275 px at
  11x11.
* ``"text"``: ``Text`` ASCII map, one row per line: ``#`` wall, ``.`` floor, ``G`` goal, ``A`` agent
  (``A`` hides ``G`` when the agent stands on the goal). Row 0 is the top.
* ``"both"`` (default): both keys.

``mazegym.wrappers.ImageObsWrapper`` / ``TextObsWrapper`` return the bare image / string.

**Stable-Baselines3 and other array-only libraries** need a plain ``Box``; the default ``Dict``
holds a ``Text`` map they cannot batch (SB3 fails in ``DummyVecEnv`` with ``TypeError: 'NoneType'
object is not iterable``, and its ``check_env`` with "Error while checking key=text"). Use the
image alone, one line:

```python
import gymnasium as gym
import stable_baselines3
from mazegym.wrappers import ImageObsWrapper  # importing mazegym registers the env ids

env = ImageObsWrapper(gym.make("VisMaze-v0", obs_mode="image", cell_px=4))  # Box(0, 255, (36, 36, 3), uint8)
model = stable_baselines3.PPO("CnnPolicy", env)
```

``cell_px=4`` is the smallest frame SB3's default CNN accepts at 9x9. Full example with a learning
curve: ``examples/03_sb3_ppo.py`` (``pip install -e ".[train,sb3]"``).

## Rewards

Sparse: **1.0** on the step that reaches the goal within the move limit (with
``require_stop=True``: on a stop action taken on the goal), 0.0 otherwise. The solve rate is the
mean episode return. With ``shaping=True`` each step adds the potential-based term
``shaping_gamma * phi(s') - phi(s)``, ``phi(s) = -(BFS distance to goal) / optimal_moves``. It
leaves optimal policies unchanged (Ng, Harada and Russell, 1999) and, with ``shaping_gamma=1``,
sums to +1 along any path from start to goal. It is off by default.

## Starting State

The agent is on ``spec.start``; ``info["optimal_moves"]`` is the BFS-optimal number of moves to
the goal.

## Episode End

* **Termination**: the agent reaches the goal (``require_stop=True``: any stop action; a stop
  off the goal pays 0).
* **Truncation**: ``max_moves`` moves (invalid ones included) were used without success. A goal
  reached on the last allowed move is a success (``terminated=True, truncated=False``).

The env truncates itself, so the registered ids leave ``gymnasium.spec(id).max_episode_steps``
at ``None`` on purpose: the move limit is the ``max_moves`` argument (``env.unwrapped.max_moves``,
``info["max_moves"]``; the registered ids' limits are in the table below). A ``TimeLimit`` from the
registry would cut ``gymnasium.make("VisMaze-v0", max_moves=50)`` at 20 moves all the same, and it
never sees the moves an unparseable reply spends through ``env.step_invalid``.

## Info

``agent`` and ``goal`` (row, col), ``moves``, ``max_moves``, ``optimal_moves``, ``shortest_remaining``
(BFS distance from the agent), ``invalid_move`` (wall bump), ``invalid_action`` (an unparseable
text action; see ``TextActionWrapper`` / ``env.step_invalid``), ``action_mask``, ``maze_id`` (stable
hash of grid + start + goal), ``is_success``, ``feedback`` (e.g. "Moved up.", "Cannot move into a
wall.", "Reached the goal!", "... No moves left."; empty after reset).

## Arguments

```python
import gymnasium
import mazegym

gymnasium.make("VisMaze-v0", size=9, max_moves=20, generator="wilson", extra_openings=0.0,
               start_goal="corners", require_stop=False, obs_mode="both", cell_px=25,
               shaping=False, shaping_gamma=1.0, render_mode=None)
```

## Rendering

``render_mode="rgb_array"`` returns a copy of the current frame (same function as the image
observation); ``"ansi"`` returns the text map; ``"human"`` prints the text map to stdout (no
display, no pygame needed) by itself at every ``reset``, ``step`` and ``step_invalid``, as
Gymnasium's human mode does (``render()`` prints it once more).
``mazegym.recording.replay(spec, actions)`` rebuilds any episode from its maze and actions, and
``record_gif`` / ``save_gif`` write GIFs (like the ones in ``docs/assets``).
"""

# docs/envs.md is generated from the docstring above (python scripts/gen_envs_doc.py): edit the text here.

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from mazegym.maze import DEFAULT_GENERATOR, FLOOR_CHAR, GENERATORS, WALL_CHAR, MazeSpec, check_size, sample_maze
from mazegym.render import TEXT_CHARSET, ascii_bytes, cell_patches, render_background, text_length
from mazegym.solver import MOVES, STOP, bfs_distances_flat
from mazegym.spaces import MapText

ACTION_NAMES = ("right", "up", "left", "down", "stop")
"""Action names by index; the first four are the moves."""

OBS_MODES = ("both", "image", "text")

MAX_SIZE = 255
"""Largest grid side accepted: bigger mazes take seconds and hundreds of MB per reset."""
MAX_CELL_PX = 256
"""Largest cell side in pixels."""
MAX_FRAME_PX = 8192
"""Largest frame side (size x cell_px) in pixels: 8192^2 RGB is 192 MiB."""

_MOVE_FEEDBACK = tuple(f"Moved {name}." for name in ACTION_NAMES[:4])
_WALL_FEEDBACK = "Cannot move into a wall."
_GOAL_FEEDBACK = "Reached the goal!"
_STOP_GOAL_FEEDBACK = "Stopped on the goal."
_STOP_MISS_FEEDBACK = "Stopped, but not on the goal."
_LIMIT_FEEDBACK = " No moves left."

_MASK_CACHE: dict[tuple[int, ...], np.ndarray] = {}


def _mask(bits: tuple[int, ...]) -> np.ndarray:
    """The int8 action mask for a legal-move pattern (1 = the move does not hit a wall)."""
    m = _MASK_CACHE.get(bits)
    if m is None:
        m = _MASK_CACHE[bits] = np.array(bits, dtype=np.int8)
    return m.copy()  # a fresh array: callers may keep or modify infos


class VisMazeEnv(gym.Env):
    """Grid maze with image and/or text observations; see the module docstring for the spec."""

    metadata = {"render_modes": ["rgb_array", "ansi", "human"], "render_fps": 4}

    def __init__(
        self,
        size: int = 9,
        max_moves: int = 20,
        generator: str = DEFAULT_GENERATOR,
        extra_openings: float = 0.0,
        start_goal: str = "corners",
        require_stop: bool = False,
        obs_mode: str = "both",
        cell_px: int = 25,
        shaping: bool = False,
        shaping_gamma: float = 1.0,
        render_mode: str | None = None,
    ):
        self.size = check_size(_integer("size", size, 5, MAX_SIZE))
        _integer("max_moves", max_moves, 1)
        _integer("cell_px", cell_px, 4, MAX_CELL_PX)
        if self.size * int(cell_px) > MAX_FRAME_PX:  # a 255 x 256 px frame would be 12 GiB of RGB
            raise ValueError(
                f"size x cell_px = {self.size * int(cell_px)} px per frame side is more than {MAX_FRAME_PX}; "
                "choose a smaller cell_px for this size"
            )
        _number("extra_openings", extra_openings, 0.0, 1.0)
        _number("shaping_gamma", shaping_gamma, 0.0, 1.0)
        _flag("require_stop", require_stop)
        _flag("shaping", shaping)
        _choice("generator", generator, sorted(GENERATORS))
        _choice("start_goal", start_goal, ("corners", "random"))
        _choice("obs_mode", obs_mode, OBS_MODES)
        if render_mode is not None:
            _choice("render_mode", render_mode, self.metadata["render_modes"])
        self.max_moves = int(max_moves)
        self.generator = generator
        self.extra_openings = float(extra_openings)
        self.start_goal = start_goal
        self.require_stop = bool(require_stop)
        self.obs_mode = obs_mode
        self.cell_px = int(cell_px)
        self.shaping = bool(shaping)
        self.shaping_gamma = float(shaping_gamma)
        self.render_mode = render_mode

        self.action_space = spaces.Discrete(5 if self.require_stop else 4)
        self._num_actions = int(self.action_space.n)
        px = self.size * self.cell_px
        obs_spaces: dict[str, spaces.Space] = {}
        if obs_mode in ("both", "image"):
            obs_spaces["image"] = spaces.Box(0, 255, (px, px, 3), dtype=np.uint8)
        if obs_mode in ("both", "text"):
            n = text_length(self.size)
            obs_spaces["text"] = MapText(max_length=n, min_length=n, charset=TEXT_CHARSET)
        self.observation_space = spaces.Dict(obs_spaces)
        self._want_image = "image" in obs_spaces
        self._want_text = "text" in obs_spaces
        self.spec_maze: MazeSpec | None = None
        self._done = True  # until the first reset
        self._background: np.ndarray | None = None
        tiles = cell_patches(self.cell_px)
        self._tile_agent_floor, self._tile_agent_goal = tiles["agent_on_floor"], tiles["agent_on_goal"]

    # ------------------------------------------------------------------ gym API
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        """Start an episode on a new maze, or on ``options["maze"]`` (a MazeSpec or its dict)."""
        super().reset(seed=seed)
        if options is not None and not isinstance(options, dict):
            raise ValueError(f"options must be a dict (e.g. {{'maze': spec}}) or None, got {type(options).__name__}")
        maze = (options or {}).get("maze")
        if maze is not None:
            spec = _maze_option(maze)
            if spec.size != self.size:
                raise ValueError(f"options['maze'] has size {spec.size}, this env has size {self.size}")
            dist = bfs_distances_flat((~spec.grid).ravel().tolist(), spec.size, spec.goal[0] * spec.size + spec.goal[1])
            if dist[spec.start[0] * spec.size + spec.start[1]] < 0:
                raise ValueError(f"options['maze']: the goal {spec.goal} cannot be reached from the start {spec.start}")
        else:
            spec = sample_maze(self.np_random, self.size, self.generator, self.extra_openings, self.start_goal)
        self._load(spec)
        obs, info = self._obs(), self._info(False, False, "")
        if self.render_mode == "human":  # Gymnasium's convention: human mode renders inside reset and step
            self.render()
        return obs, info

    def step(self, action: int):
        """Apply one action; see the module docstring for rewards and episode end."""
        if self._done:
            raise RuntimeError(
                "the episode is over (terminated or truncated): call reset() before step()"
                if self.spec_maze is not None
                else "call reset() before step()"
            )
        if type(action) is not int:  # Python and numpy ints take the fast path; anything else is checked
            action = int(action) if isinstance(action, np.integer) else self._integer_action(action)
        if not 0 <= action < self._num_actions:
            raise ValueError(f"action {action} is outside {self.action_space}")
        self._moves += 1
        old = self._agent
        old_dist = self._dist[old[0] * self.size + old[1]]
        invalid = False
        terminated = False
        success = False
        if action == STOP:
            terminated = True
            success = old == self._goal
            feedback = _STOP_GOAL_FEEDBACK if success else _STOP_MISS_FEEDBACK
        else:
            dr, dc = MOVES[action]
            new = (old[0] + dr, old[1] + dc)
            if self._open[new[0] * self.size + new[1]]:
                self._move_agent(old, new)
                feedback = _MOVE_FEEDBACK[action]
                if new == self._goal and not self.require_stop:
                    terminated = success = True
                    feedback = _GOAL_FEEDBACK
            else:
                invalid = True
                feedback = _WALL_FEEDBACK
        truncated = not terminated and self._moves >= self.max_moves
        if truncated:
            feedback += _LIMIT_FEEDBACK
        self._done = terminated or truncated
        self._success = success
        reward = 1.0 if success else 0.0
        if self.shaping:
            reward += self._shaping_term(old_dist)
        obs, info = self._obs(), self._info(success, invalid, feedback)
        if self.render_mode == "human":
            self.render()
        return obs, reward, terminated, truncated, info

    def step_invalid(self, feedback: str = "Invalid action."):
        """Spend one move on an unparseable action: nothing moves, no reward, ``feedback`` is echoed.

        Used by :class:`mazegym.wrappers.TextActionWrapper` and LLM runners so malformed output
        costs a turn instead of raising.
        """
        if self._done:
            raise RuntimeError(
                "the episode is over (terminated or truncated): call reset() before step_invalid()"
                if self.spec_maze is not None
                else "call reset() before step_invalid()"
            )
        self._moves += 1
        truncated = self._moves >= self.max_moves
        if truncated:
            feedback += _LIMIT_FEEDBACK
        self._done = truncated
        info = self._info(False, False, feedback)
        info["invalid_action"] = True
        obs = self._obs()
        if self.render_mode == "human":
            self.render()
        return obs, 0.0, False, truncated, info

    def render(self):
        """``rgb_array``: the frame; ``ansi``: the text map; ``human``: prints the text map.

        Human mode prints to stdout on purpose: it needs no display and no pygame.
        """
        if self.spec_maze is None or self.render_mode is None:
            return None
        if self.render_mode == "rgb_array":
            return self._current_frame()
        text = self._text_map()
        if self.render_mode == "ansi":
            return text
        print(text + "\n")
        return None

    def _integer_action(self, action: Any) -> int:
        """``action`` as an int when it is an integer (numpy scalar or 0-d array included), else a clear error."""
        if isinstance(action, np.integer):  # numpy's bool is not an np.integer
            return int(action)
        if isinstance(action, np.ndarray) and action.shape == ():
            action = action[()]
        if isinstance(action, (int, np.integer)) and not isinstance(action, (bool, np.bool_)):
            return int(action)
        raise TypeError(
            f"action must be an integer in 0..{self._num_actions - 1}, got {action!r} "
            f"({type(action).__name__}); parse model text with mazegym.llm.parse_action first"
        )

    # ------------------------------------------------------------------ state
    def _load(self, spec: MazeSpec) -> None:
        """Precompute everything per maze: open squares, BFS distances, frame and text buffers."""
        self.spec_maze = spec
        size = self.size
        self._open = (~spec.grid).ravel().tolist()
        self._goal = spec.goal
        self._agent = spec.start
        self._moves = 0
        self._success = False
        self._done = False
        self._dist = bfs_distances_flat(self._open, size, spec.goal[0] * size + spec.goal[1])
        self._optimal = self._dist[spec.start[0] * size + spec.start[1]]
        self._maze_id = spec.maze_id
        if self._want_image or self.render_mode == "rgb_array":
            self._background = render_background(spec.grid, spec.goal, self.cell_px)
        self._text = ascii_bytes(spec.grid, spec.goal)
        self._text_bg = bytes(self._text)
        self._text[self._agent[0] * (size + 1) + self._agent[1]] = 65  # "A"

    def _current_frame(self) -> np.ndarray:
        """A fresh frame: the maze background plus the agent tile on the agent's cell."""
        frame = self._background.copy()
        px = self.cell_px
        r, c = self._agent[0] * px, self._agent[1] * px
        frame[r : r + px, c : c + px] = self._tile_agent_goal if self._agent == self._goal else self._tile_agent_floor
        return frame

    def _move_agent(self, old: tuple[int, int], new: tuple[int, int]) -> None:
        self._agent = new
        w = self.size + 1
        text = self._text
        text[old[0] * w + old[1]] = self._text_bg[old[0] * w + old[1]]
        text[new[0] * w + new[1]] = 65  # "A"

    def _text_map(self) -> str:
        return self._text.decode("ascii")

    def _obs(self) -> dict[str, Any]:
        obs: dict[str, Any] = {}
        if self._want_image:
            obs["image"] = self._current_frame()
        if self._want_text:
            obs["text"] = self._text.decode("ascii")
        return obs

    def _action_mask(self) -> np.ndarray:
        r, c = self._agent
        s = self.size
        o = self._open
        i = r * s + c
        bits = (o[i + 1], o[i - s], o[i - 1], o[i + s])
        return _mask(bits + (True,) if self.require_stop else bits)

    def _info(self, success: bool, invalid: bool, feedback: str) -> dict[str, Any]:
        r, c = self._agent
        return {
            "agent": self._agent,
            "goal": self._goal,
            "moves": self._moves,
            "max_moves": self.max_moves,
            "optimal_moves": self._optimal,
            "shortest_remaining": self._dist[r * self.size + c],
            "invalid_move": invalid,
            "invalid_action": False,
            "action_mask": self._action_mask(),
            "maze_id": self._maze_id,
            "is_success": success,
            "feedback": feedback,
        }

    def _shaping_term(self, old_dist: int) -> float:
        """``gamma * phi(s') - phi(s)`` with ``phi = -dist_to_goal / optimal_moves``.

        ``phi`` is 0 on the goal, the only rewarding terminal state; a stop off the goal keeps
        ``phi(s') = -dist`` so stopping early is never paid by the shaping term.
        """
        scale = max(1, self._optimal)
        r, c = self._agent
        phi_new = -self._dist[r * self.size + c] / scale
        return self.shaping_gamma * phi_new + old_dist / scale

    # ------------------------------------------------------------------ helpers for users
    @property
    def agent_pos(self) -> tuple[int, int]:
        """Current agent cell ``(row, col)``."""
        return self._agent

    @property
    def moves(self) -> int:
        """Moves used so far in this episode."""
        return self._moves


# ---------------------------------------------------------------------- argument checks
def _integer(name: str, value: Any, low: int, high: int | None = None) -> int:
    """``value`` as an int when it is an integer in ``[low, high]``, else a ``ValueError`` naming ``name``."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{name} must be an integer, got {value!r} ({type(value).__name__})")
    if value < low or (high is not None and value > high):
        bound = f"between {low} and {high}" if high is not None else f">= {low}"
        raise ValueError(f"{name} must be {bound}, got {value}")
    return int(value)


def _number(name: str, value: Any, low: float, high: float) -> float:
    """``value`` as a float when it is a finite real in ``[low, high]``, else a ``ValueError`` naming ``name``."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ValueError(f"{name} must be a number, got {value!r} ({type(value).__name__})")
    if not (low <= float(value) <= high):  # also false for NaN
        raise ValueError(f"{name} must be a finite number between {low} and {high}, got {value}")
    return float(value)


def _flag(name: str, value: Any) -> bool:
    """``value`` when it is a bool, else a ``ValueError`` naming ``name`` (``bool("false")`` is True)."""
    if not isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{name} must be True or False, got {value!r} ({type(value).__name__})")
    return bool(value)


def _choice(name: str, value: Any, choices: Any) -> Any:
    """``value`` when it is one of ``choices``, else a ``ValueError`` naming ``name``."""
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"{name} must be one of {list(choices)}, got {value!r}")
    return value


def _maze_option(maze: Any) -> MazeSpec:
    """``options["maze"]`` as a checked MazeSpec: map characters, integer start and goal, then the layout."""
    if isinstance(maze, MazeSpec):  # built directly, so never validated: a start at (-1, 1) would wrap around
        try:
            maze.validate()
        except ValueError as exc:
            raise ValueError(f"options['maze'] is not a valid maze: {exc}") from exc
        return maze
    if not isinstance(maze, dict):
        raise ValueError(f"options['maze'] must be a MazeSpec or its dict, got {type(maze).__name__}")
    rows = maze.get("rows")
    if rows is not None:
        if not isinstance(rows, (list, tuple)) or not all(isinstance(row, str) for row in rows):
            raise ValueError("options['maze']['rows'] must be a list of strings")
        unknown = sorted({ch for row in rows for ch in row} - {WALL_CHAR, FLOOR_CHAR})
        if unknown:
            raise ValueError(f"options['maze']['rows'] may hold only {WALL_CHAR!r} and {FLOOR_CHAR!r}, found {unknown}")
        if len({len(row) for row in rows}) > 1:
            raise ValueError("options['maze']['rows'] must all have the same length")
    for key in ("start", "goal"):
        cell = maze.get(key)
        if (
            not isinstance(cell, (list, tuple))
            or len(cell) != 2
            or any(isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)) for v in cell)
        ):
            raise ValueError(f"options['maze']['{key}'] must be a (row, col) pair of integers, got {cell!r}")
    try:
        return MazeSpec.from_dict(maze)
    except (ValueError, TypeError, KeyError) as exc:
        raise ValueError(f"options['maze'] is not a valid maze: {exc}") from exc
