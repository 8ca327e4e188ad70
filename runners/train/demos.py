"""Demonstrations: oracle plays of training mazes as turns built exactly like rollout turns, and their stream.

A demonstration is one play of a training maze by :func:`mazegym.solver.oracle_actions` (the shortest path,
optionally with ``detours`` exploratory back-and-forth pairs, as VisGym's solver pads its routes). Every move becomes
one training row, built the way the rollout builds a turn: system prompt, kept history, the current observation
(text map and/or image), chat-templated by the same encoder; the target is the canonical reply
``<action>up</action>`` followed by the end-of-turn token. :mod:`runners.train.sft` trains on them.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from algos.data import Turn
from mazegym.evalsets import MazeStream
from mazegym.llm import build_messages, format_action, system_prompt, user_message
from mazegym.maze import MazeSpec
from mazegym.solver import oracle_actions, shortest_path_cells
from runners.rollout.env import make_env


def demo_turns(
    spec: MazeSpec,
    encoder: Any,
    *,
    max_moves: int,
    obs_mode: str,
    history: str = "none",
    history_k: int = 2,
    detours: int = 0,
    rng: np.random.Generator | None = None,
    eos_id: int,
    env_kwargs: dict[str, Any] | None = None,
    random_start: bool = False,
    state_prompt: bool = False,
    size_free_prompt: bool = False,
    max_turns: int | None = None,
) -> list[Turn]:
    """One oracle play of ``spec`` as training turns, built exactly like a rollout turn.

    Detours that would not fit the move limit are dropped (the demo must succeed).
    ``random_start`` starts the play from a uniformly random open cell instead of ``spec.start``
    (never producing an evaluation maze), so demonstrations also cover cells off the shortest path.
    ``state_prompt`` builds the user turns as the rollout's ``state_prompt`` does (no counter, no move feedback);
    ``size_free_prompt`` writes the system prompt as the rollout's ``size_free_prompt`` does; ``max_turns`` keeps
    only the play's first turns.
    """
    if random_start:
        spec = random_start_maze(spec, rng or np.random.default_rng())
    actions = oracle_actions(spec, rng=rng, detours=detours)
    optimal = oracle_actions(spec)
    if len(actions) > max_moves:
        actions = optimal
    env = make_env(spec.size, max_moves, obs_mode, env_kwargs=env_kwargs)
    obs, info = env.reset(options={"maze": spec})
    system = system_prompt(spec.size, max_moves, obs_mode, size_free=size_free_prompt)
    past: list[tuple[dict, str]] = []
    turns = []
    for action in actions[:max_turns]:
        current = user_message(obs, info, obs_mode=obs_mode, state_only=state_prompt)
        ids, images = encoder.encode(build_messages(system, past, current, history, history_k))
        reply = format_action(int(action))
        turns.append(
            Turn(
                prompt_ids=ids,
                response_ids=encoder.tokenize_text(reply) + [eos_id],
                images=list(images),
                action=int(action),
                text=reply,
                state="{},{}".format(*env.unwrapped.agent_pos),
                path_cells=tuple(shortest_path_cells(spec.grid, tuple(env.unwrapped.agent_pos), spec.goal).tolist()),
            )
        )
        past.append((current, reply))
        obs, _, terminated, truncated, info = env.step(int(action))
        if "image" in obs:
            obs = {**obs, "image": np.array(obs["image"], copy=True)}
        if terminated or truncated:
            break
    env.close()
    return turns


def random_start_maze(spec: MazeSpec, rng: np.random.Generator) -> MazeSpec:
    """``spec`` with its start moved to a random open cell other than the goal (evaluation mazes excluded)."""
    from mazegym.evalsets import is_eval_maze

    cells = [(int(r), int(c)) for r, c in np.argwhere(~spec.grid) if (int(r), int(c)) != spec.goal]
    for _ in range(10):
        moved = MazeSpec(spec.grid, cells[int(rng.integers(len(cells)))], spec.goal)
        if not is_eval_maze(moved.maze_id):
            return moved
    return spec


class DemoStream:
    """Endless stream of demonstration turns from a resumable :class:`MazeStream` (shuffled per maze)."""

    def __init__(
        self, mazes: MazeStream, make_turns: Callable[[MazeSpec, np.random.Generator], list[Turn]], seed: int = 0
    ):
        self.mazes = mazes
        self.make_turns = make_turns
        self.rng = np.random.default_rng(seed)
        self.buffer: list[Turn] = []

    def batch(self, size: int) -> list[Turn]:
        """The next ``size`` turns (mixing moves of several mazes)."""
        while len(self.buffer) < 4 * size:
            self.buffer += self.make_turns(next(self.mazes), self.rng)
        order = self.rng.permutation(len(self.buffer))
        picked = [self.buffer[i] for i in order[:size]]
        self.buffer = [self.buffer[i] for i in order[size:]]
        return picked
