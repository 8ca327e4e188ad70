"""VisMazeRace: several agents race to the goal of the same maze (PettingZoo ``ParallelEnv``).

``VisMazeRace(n_agents=2, size=9, max_moves=20, ...)``: all agents start on the start cell of one
maze and move simultaneously (``Discrete(4)``: right, up, left, down; agents do not block each
other). The race ends for everyone on the step where at least one agent reaches the goal: those
agents get 1.0, the others 0.0, and all are ``terminated``. Without a winner, every agent is
``truncated`` after ``max_moves``. Each agent sees itself as the blue disc (``A`` in text) and its
rivals as green discs (``B`` in text). It passes ``pettingzoo.test.parallel_api_test``
(``tests/test_multiagent.py``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces
from pettingzoo import ParallelEnv

from mazegym.envs.vismaze import VisMazeEnv, _choice, _integer, _maze_option
from mazegym.maze import DEFAULT_GENERATOR, MazeSpec, check_size, sample_maze
from mazegym.spaces import MapText
from mazegym.render import (
    AGENT_RGB,
    GOAL_RGB,
    OTHER_AGENT_RGB,
    TEXT_CHARSET,
    ascii_bytes,
    draw_agent,
    render_background,
    text_length,
)
from mazegym.solver import bfs_distances, next_cell


class VisMazeRace(ParallelEnv):
    """Parallel multi-agent maze race; see the module docstring."""

    metadata = {
        "name": "vismaze_race_v0",
        "render_modes": ["rgb_array", "ansi"],
        "render_fps": 4,
        "is_parallelizable": True,
    }

    def __init__(
        self,
        n_agents: int = 2,
        size: int = 9,
        max_moves: int = 20,
        generator: str = DEFAULT_GENERATOR,
        extra_openings: float = 0.0,
        obs_mode: str = "both",
        cell_px: int = 25,
        render_mode: str | None = None,
    ):
        _integer("n_agents", n_agents, 1, 64)
        if render_mode is not None:
            _choice("render_mode", render_mode, self.metadata["render_modes"])
        # The single env's argument checks, word for word (sizes, frame size, generator, obs_mode, ...).
        VisMazeEnv(
            size=size,
            max_moves=max_moves,
            generator=generator,
            extra_openings=extra_openings,
            obs_mode=obs_mode,
            cell_px=cell_px,
        )
        self.size = check_size(size)
        self.max_moves = int(max_moves)
        self.generator = generator
        self.extra_openings = extra_openings
        self.obs_mode = obs_mode
        self.cell_px = cell_px
        self.render_mode = render_mode
        self.possible_agents = [f"agent_{i}" for i in range(n_agents)]
        self.agents: list[str] = []
        px = self.size * cell_px
        parts: dict[str, spaces.Space] = {}
        if obs_mode in ("both", "image"):
            parts["image"] = spaces.Box(0, 255, (px, px, 3), dtype=np.uint8)
        if obs_mode in ("both", "text"):
            n = text_length(self.size)
            parts["text"] = MapText(max_length=n, min_length=n, charset=TEXT_CHARSET)
        self._obs_spaces = {a: spaces.Dict(dict(parts)) for a in self.possible_agents}
        self._act_spaces = {a: spaces.Discrete(4) for a in self.possible_agents}
        self._rng = np.random.default_rng()
        self.maze: MazeSpec | None = None

    def observation_space(self, agent: str) -> spaces.Space:
        """The (fixed) observation space of ``agent``."""
        return self._obs_spaces[agent]

    def action_space(self, agent: str) -> spaces.Space:
        """The (fixed) action space of ``agent``."""
        return self._act_spaces[agent]

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None):
        """New race on a fresh maze (or ``options["maze"]``); returns ``(observations, infos)``."""
        if seed is not None:
            self._rng = np.random.default_rng(seed)
            for i, agent in enumerate(self.possible_agents):
                self._act_spaces[agent].seed(seed + i)
        if options is not None and not isinstance(options, dict):
            raise ValueError(f"options must be a dict (e.g. {{'maze': spec}}) or None, got {type(options).__name__}")
        maze = (options or {}).get("maze")
        if maze is not None:
            self.maze = _maze_option(maze)
            if self.maze.size != self.size:
                raise ValueError(f"options['maze'] has size {self.maze.size}, this env has size {self.size}")
            if bfs_distances(self.maze.grid, self.maze.goal)[self.maze.start] < 0:
                raise ValueError(f"options['maze']: the goal {self.maze.goal} cannot be reached from the start")
        else:
            self.maze = sample_maze(self._rng, self.size, self.generator, self.extra_openings)
        self.agents = list(self.possible_agents)
        self.positions = {a: self.maze.start for a in self.agents}
        self.moves = 0
        self._dist = bfs_distances(self.maze.grid, self.maze.goal)
        self._background = render_background(self.maze.grid, self.maze.goal, self.cell_px)
        self._text_bg = ascii_bytes(self.maze.grid, self.maze.goal)
        infos = {a: self._info(a, False, False) for a in self.agents}
        return {a: self._observe(a) for a in self.agents}, infos

    def step(self, actions: dict[str, int]):
        """Move every live agent; returns ``(obs, rewards, terminations, truncations, infos)``."""
        if not self.agents:
            raise RuntimeError("the race is over (or never started): call reset() before step()")
        checked = {}
        for agent in self.agents:
            if agent not in actions:
                raise ValueError(f"no action for {agent}: step() takes one action per live agent")
            action = actions[agent]
            if isinstance(action, (bool, np.bool_)) or not isinstance(action, (int, np.integer)) or not 0 <= action < 4:
                raise ValueError(f"action of {agent} must be an integer in 0..3 (right, up, left, down): {action!r}")
            checked[agent] = int(action)
        self.moves += 1
        bumped = {}
        for agent in self.agents:
            here = self.positions[agent]
            self.positions[agent] = next_cell(self.maze.grid, here, checked[agent])
            bumped[agent] = self.positions[agent] == here
        winners = {a for a in self.agents if self.positions[a] == self.maze.goal}
        over = bool(winners)
        out_of_moves = not over and self.moves >= self.max_moves
        rewards = {a: 1.0 if a in winners else 0.0 for a in self.agents}
        terminations = {a: over for a in self.agents}
        truncations = {a: out_of_moves for a in self.agents}
        observations = {a: self._observe(a) for a in self.agents}
        infos = {a: self._info(a, bumped[a], a in winners) for a in self.agents}
        if over or out_of_moves:
            self.agents = []
        return observations, rewards, terminations, truncations, infos

    def render(self):
        """``rgb_array``: the maze with all agents (agent_0 blue); ``ansi``: the text map."""
        if self.maze is None or self.render_mode is None:
            return None
        first = self.possible_agents[0]
        if self.render_mode == "rgb_array":
            return self._image(first)
        return self._text(first)

    def state(self) -> np.ndarray:
        """Global state: the full frame with agent_0 highlighted."""
        return self._image(self.possible_agents[0])

    def legend(self, viewer: str | None = None, names: dict[str, str] | None = None) -> list[tuple[tuple, str]]:
        """``(colour, label)`` of each agent as ``viewer`` sees the race (default agent_0, whose view ``render()``
        shows): the viewer's blue disc, every rival's green one, and the red goal; ``names`` adds a word to an agent's
        label (``{"agent_0": "oracle"}``). :func:`mazegym.recording.with_legend` draws it under a frame."""
        viewer = viewer or self.possible_agents[0]
        entries = []
        for agent in self.possible_agents:
            label = f"{agent} ({names[agent]})" if names and agent in names else agent
            entries.append((AGENT_RGB if agent == viewer else OTHER_AGENT_RGB, label))
        return [*entries, (GOAL_RGB, "goal")]

    def close(self) -> None:
        """Nothing to release."""

    def _others(self, agent: str) -> list[tuple[int, int]]:
        return [self.positions[a] for a in self.possible_agents if a != agent and a in self.positions]

    def _image(self, agent: str) -> np.ndarray:
        frame = self._background.copy()
        for pos in self._others(agent):
            draw_agent(frame, self._background, None, pos, self.cell_px, OTHER_AGENT_RGB)
        draw_agent(frame, self._background, None, self.positions[agent], self.cell_px)
        return frame

    def _text(self, agent: str) -> str:
        buf = bytearray(self._text_bg)
        width = self.size + 1
        for r, c in self._others(agent):
            buf[r * width + c] = ord("B")
        r, c = self.positions[agent]
        buf[r * width + c] = ord("A")
        return buf.decode("ascii")

    def _observe(self, agent: str) -> dict[str, Any]:
        obs: dict[str, Any] = {}
        if self.obs_mode in ("both", "image"):
            obs["image"] = self._image(agent)
        if self.obs_mode in ("both", "text"):
            obs["text"] = self._text(agent)
        return obs

    def _info(self, agent: str, bumped: bool, success: bool) -> dict[str, Any]:
        r, c = self.positions[agent]
        return {
            "agent": (r, c),
            "goal": self.maze.goal,
            "moves": self.moves,
            "invalid_move": bumped,
            "is_success": success,
            "shortest_remaining": int(self._dist[r, c]),
            "maze_id": self.maze.maze_id,
        }
