"""Batched rollouts of a :class:`~algos.policies.net.MazeNetPolicy` on VisMaze, for tests,
examples and benchmarks (the full multi-turn LLM rollout machinery lives in ``runners``).

Every episode runs in its own ``VisMazeEnv``; all envs step in lockstep so the network acts on
one batch per move. Groups: each maze is played ``group_size`` times with the same
``group_id``, which is what GRPO-style estimators need.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import torch

from algos.data import Episode, Turn


def sample_mazes(num: int, size: int, seed: int, exclude: set[str] | None = None, **maze_kwargs: Any) -> list:
    """``num`` distinct mazes from ``seed`` (skipping ids in ``exclude``, e.g. an eval set)."""
    from mazegym.maze import sample_maze

    rng = np.random.default_rng(seed)
    mazes, seen = [], set(exclude or ())
    while len(mazes) < num:
        maze = sample_maze(rng, size, **maze_kwargs)
        if maze.maze_id not in seen:
            seen.add(maze.maze_id)
            mazes.append(maze)
    return mazes


def play_mazes(
    policy: Any,
    mazes: Sequence[Any],
    group_size: int = 1,
    greedy: bool = False,
    max_moves: int = 40,
    use_action_mask: bool = True,
    seed: int = 0,
    weights_version: int = 0,
    env_kwargs: dict[str, Any] | None = None,
) -> list[Episode]:
    """Play every maze ``group_size`` times; returns one :class:`Episode` per play.

    ``env_kwargs`` go to ``VisMazeEnv`` (default: image observations, 4-px cells so frames stay
    small). Each turn stores the encoded observation and the legal-move mask used to sample.
    """
    from mazegym import VisMazeEnv

    kwargs = {"obs_mode": "image", "cell_px": 4, **(env_kwargs or {})}
    size = mazes[0].size
    envs, episodes, obs, masks, agent = [], [], [], [], []
    for g, maze in enumerate(mazes):
        for _ in range(group_size):
            env = VisMazeEnv(size=size, max_moves=max_moves, **kwargs)
            o, info = env.reset(options={"maze": maze})
            envs.append(env)
            episodes.append(
                Episode(
                    group_id=g,
                    maze_id=maze.maze_id,
                    optimal_moves=int(info["optimal_moves"]),
                    weights_version=weights_version,
                )
            )
            obs.append(o)
            masks.append(info["action_mask"])
            agent.append(info["agent"])
    generator = torch.Generator().manual_seed(seed)
    active = list(range(len(envs)))
    while active:
        batch_mask = np.stack([masks[i] for i in active]) if use_action_mask else None
        actions, logps, values = policy.act([obs[i] for i in active], batch_mask, greedy=greedy, generator=generator)
        still = []
        for k, i in enumerate(active):
            a = int(actions[k])
            turn = Turn(
                response_ids=[a],
                logprobs=[float(logps[k])],
                action=a,
                value=float(values[k]),
                observation=policy.turn_observation(obs[i], masks[i] if use_action_mask else None),
                state=f"{int(agent[i][0])},{int(agent[i][1])}",
            )
            o, reward, terminated, truncated, info = envs[i].step(a)
            turn.reward = float(reward)
            episodes[i].turns.append(turn)
            obs[i], masks[i], agent[i] = o, info["action_mask"], info["agent"]
            if terminated or truncated:
                episodes[i].success = bool(info["is_success"])
                episodes[i].truncated = bool(truncated)
            else:
                still.append(i)
        active = still
    return episodes


def solve_rate(policy: Any, mazes: Sequence[Any], max_moves: int = 40, **kwargs: Any) -> float:
    """Fraction of ``mazes`` the policy solves greedily (argmax actions) within ``max_moves``."""
    episodes = play_mazes(policy, mazes, group_size=1, greedy=True, max_moves=max_moves, **kwargs)
    return sum(ep.success for ep in episodes) / max(len(episodes), 1)
