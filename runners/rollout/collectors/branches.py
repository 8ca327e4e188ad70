"""The ``branches`` collector: exploring-start branches, a group of 4 one-move episodes at every open cell of each
maze, each valued by what the policy earns after the move.

Its settings are :class:`BranchSettings` (the ``rollout.collector`` section with ``name: branches``). Only the
environment's moves and goal are used; no solver.
"""

from __future__ import annotations

import dataclasses
import time
import zlib
from typing import Any, Sequence

import numpy as np

from algos.data import Episode, Turn
from mazegym.llm import build_messages, format_action, parse_action, user_message
from mazegym.maze import MazeSpec
from mazegym import ACTION_NAMES
from mazegym.solver import MOVES, next_cell
from runners.rollout.env import make_env
from runners.rollout.collect import RolloutConfig
from runners.rollout.collectors import Collector, CollectorConfig, register
from runners.rollout.generation.base import Generator, Prompt, SamplingConfig
from runners.rollout.generation.prompts import ChatEncoder, compact_frame

BRANCHES = "branches"
"""This collector's name (``rollout.collector.name``)."""
CONTINUATIONS = ("greedy", "sampled", "expected")
"""How a move's continuation is valued (``rollout.collector.continuation``)."""
REWARDS = ("best", "value")
"""What a branch earns (``rollout.collector.reward``)."""
PROMPTS = ("first", "play")
"""Which prompt an anchor cell is asked with (``rollout.collector.prompts``)."""

GROUP_CELLS = 1 << 16
"""Group ids per maze: one per cell of a maze up to 256x256, so that mazes of different sizes never share an id."""


@dataclasses.dataclass
class BranchSettings(CollectorConfig):
    """The branches collector's settings: every open cell of each training maze is an anchor state (exploring
    starts), each of the 4 moves is tried there once and followed by the policy; the 4 branches form one group. Needs
    history "none" and the trainer's own old log-probs (algo.old_logprobs=recompute)."""

    gamma: float = dataclasses.field(default=0.9, metadata={"range": (0.0, 1.0, True)})
    """A branch that reaches the goal in n moves is worth gamma ** (n - 1) (shorter is better); one that does not,
    0."""
    worlds: int = dataclasses.field(default=0, metadata={"range": (0, 100_000, False)})
    """With continuation "greedy": besides the greedy continuation, this many continuation policies sampled from the
    policy (one move drawn per cell at the sampling temperature, kept for the whole walk); a branch's worth is its
    mean over them. 0 = greedy only. Sampled continuations reach the goal from cells where the greedy one loops, so
    more cells get a signal.
    """
    continuation: str = dataclasses.field(default="greedy", metadata={"choices": CONTINUATIONS})
    """How each move's continuation is valued. "greedy": the current greedy policy walks on from the move's cell
    (plus `worlds` generated continuations). "sampled": the greedy walk plus `samples` continuation policies drawn
    from the policy's move distribution at the sampling temperature (one move per cell, kept for the walk; all 4
    moves judged in the same draws), the distribution at every cell read once from one batched scoring of the 4
    canonical replies (exact when the prompt is a function of the cell, rollout.state_prompt=true; else the first
    move's prompt stands for every move). "expected": the exact expectation with a fresh move sampled at every step
    -- a diagnostic, not RL: in a perfect maze its best move is the shortest-path move wherever the policy has any
    chance, whatever the policy (see runners.rollout.collectors.branches.continuation_values).
    """
    samples: int = dataclasses.field(default=32, metadata={"range": (1, 100_000, False)})
    """With continuation "sampled": continuation policies drawn per step, besides the greedy one."""
    settled: float = dataclasses.field(default=1.0, metadata={"range": (0.0, 1.0, True)})
    """With continuation "sampled" or "expected": a cell whose best moves hold at least this share of the
    probability the policy puts on the four moves (and more than its malformed replies hold) is left out of the
    update (a positive advantage on a reply of probability p moves its logit by about 1 - p, so such rows cost a full
    forward and backward pass for little signal); it comes back as soon as its share falls. 1.0 keeps every cell.
    """
    prompts: str = dataclasses.field(default="first", metadata={"choices": PROMPTS})
    """The prompt each anchor cell is asked with. "first": a play's first move there (move 1, no feedback). "play":
    what a play shows on that cell later too: a move counter drawn uniformly from the moves a play can have made
    (0 .. max_moves - 1) and, past the first move, the feedback of arriving there from a random open neighbour;
    drawn per step from the step seed and the maze, so RL trains the prompts evaluation plays show.
    """
    reward: str = dataclasses.field(default="best", metadata={"choices": REWARDS})
    """A branch's reward is "best" (1 for the most valuable branches of its group when any reaches the goal, else 0)
    or "value" (its worth, gamma ** (n - 1) or 0).
    """
    anchors_per_maze: int = dataclasses.field(default=0, metadata={"range": (0, 100_000, False)})
    """At most this many anchors of each maze give the update their branches, drawn at random (from the step's seed
    and the maze) among those whose four moves differ in value; 0 = every one. The rollouts still ask every cell, so
    every move keeps its value: a cap makes a large maze cost the update about what a small one does."""
    moves_only: bool = dataclasses.field(default=False, metadata={"any": True})
    """With continuation "sampled" or "expected": the continuations play the policy's move replies alone, each cell's
    move probabilities renormalised over the four moves (as decoding constrained to the env's actions would), instead
    of the rest of the mass being an unparseable reply that spends a move in place. For a policy that has not learnt
    the reply format yet (no SFT), whose walks would otherwise stand still."""


def check_settings(rollout: RolloutConfig) -> list[str]:
    """What is wrong with the branch settings beside the other rollout settings (empty when nothing is)."""
    settings: BranchSettings = rollout.collector
    problems = []
    if rollout.history != "none" or rollout.require_stop:
        problems.append(
            "rollout.collector.name=branches needs rollout.history=none and rollout.require_stop=false: a branch's "
            f"state is the agent's cell alone (got history={rollout.history!r}, require_stop={rollout.require_stop})"
        )
    if settings.continuation != "greedy" and settings.worlds:
        problems.append("rollout.collector.worlds adds greedy-style continuations; it needs continuation=greedy")
    if settings.settled < 1.0 and settings.continuation == "greedy":
        problems.append(
            "rollout.collector.settled needs the scored move distribution: set rollout.collector.continuation to "
            "sampled or expected"
        )
    if settings.moves_only and settings.continuation == "greedy":
        problems.append(
            "rollout.collector.moves_only renormalises the scored move distribution: set "
            "rollout.collector.continuation to sampled or expected"
        )
    return problems


def greedy_moves_to_goal(
    maze: MazeSpec, greedy: dict[tuple[int, int], int | None], limit: int
) -> dict[tuple[int, int], int | None]:
    """Moves the greedy policy needs from every cell to the goal (None: it loops or exceeds ``limit``).

    ``greedy`` maps each open cell to the policy's greedy action there (None: an unparseable reply,
    which spends a move in place). The policy is a function of the cell alone (history "none"), so
    following it from every cell at once is one walk over the functional graph it defines.
    """
    togo: dict[tuple[int, int], int | None] = {maze.goal: 0}
    for cell in greedy:
        path: list[tuple[int, int]] = []
        here: tuple[int, int] | None = cell
        while here not in togo and here not in path and len(path) <= limit:
            path.append(here)
            action = greedy.get(here)
            here = here if action is None else next_cell(maze.grid, here, action)
        arrived = togo.get(here) if here in togo else None
        for back, visited in enumerate(reversed(path), 1):
            togo[visited] = None if arrived is None or arrived + back > limit else arrived + back
    return togo


def continuation_values(
    maze: MazeSpec,
    move_probs: dict[tuple[int, int], np.ndarray],
    limit: int,
    gamma: float,
    samples: int | None,
    rng: np.random.Generator | None = None,
    moves_only: bool = False,
) -> dict[tuple[int, int], np.ndarray]:
    """Worth of each of the 4 moves from every cell when the policy plays on afterwards.

    ``move_probs[cell]`` holds the probabilities of the 4 moves there; the rest of the mass is an
    unparseable reply, which spends a move in place (as a wall bump does); with ``moves_only`` the policy plays its
    move replies alone, their probabilities renormalised over the four (as decoding constrained to the env's actions
    would). A move from ``cell`` that
    reaches the goal after n moves in all (n <= ``limit``) is worth ``gamma ** (n - 1)``, else 0.

    With ``samples`` the worth is the mean over 1 + ``samples`` *worlds*: the greedy policy (the
    most likely outcome at every cell) and ``samples`` policies drawn from the distribution, one
    outcome per cell kept for the whole walk; all 4 moves of a cell are judged in the same worlds
    (common random numbers). In a perfect maze a deterministic walk that reaches the goal never
    revisits a cell, so in every world the move towards the goal is worth strictly more than any
    other whenever anything is worth more than 0: these labels are never wrong, and more worlds
    only label more cells. With ``samples=None`` the worth is the exact expectation when a fresh
    move is sampled at every step; its best move is then the shortest-path move wherever the
    policy has any chance at all, whatever its probabilities (a teacher in disguise, kept as a
    diagnostic).
    """
    cells = list(move_probs)
    index = {c: j for j, c in enumerate(cells)}
    goal = len(cells)  # an extra absorbing state
    nxt = np.full((goal + 1, 5), goal, dtype=np.int64)
    for c, j in index.items():
        for a in range(4):
            n = next_cell(maze.grid, c, a)
            nxt[j, a] = goal if n == maze.goal else index.get(n, j)
        nxt[j, 4] = j
    probs = np.zeros((goal + 1, 5))
    for c, j in index.items():
        p = np.clip(np.asarray(move_probs[c], dtype=np.float64), 0.0, 1.0)
        probs[j, :4] = p
        probs[j, 4] = 0.0 if moves_only and p.sum() > 0 else max(0.0, 1.0 - p.sum())
    probs[:goal] /= probs[:goal].sum(axis=1, keepdims=True)
    probs[goal, 4] = 1.0
    firsts = nxt[:goal, :4]  # where each first move lands
    if samples is None:
        worth = np.zeros(goal + 1)  # E[gamma ** T; T <= h] for T moves from each state to the goal
        worth[goal] = 1.0
        for _ in range(limit - 1):
            worth = np.where(np.arange(goal + 1) == goal, 1.0, gamma * (probs * worth[nxt]).sum(axis=1))
        values = worth[firsts]
    else:
        rng = rng if rng is not None else np.random.default_rng(0)
        draws = rng.random((samples, goal + 1))
        outcomes = (draws[..., None] > np.cumsum(probs, axis=1)[None]).sum(axis=2).clip(max=4)
        outcomes = np.concatenate([np.argmax(probs, axis=1)[None], outcomes])  # world 0: the greedy policy
        worlds = np.arange(samples + 1)[:, None]
        here = np.broadcast_to(np.arange(goal + 1), outcomes.shape).copy()
        steps = np.where(here == goal, 0, -1)
        for t in range(1, limit):
            here = nxt[here, outcomes[worlds, here]]
            steps[(steps < 0) & (here == goal)] = t
        worth = np.where(steps >= 0, gamma ** np.maximum(steps, 0), 0.0)  # [world, state]
        values = worth[:, firsts].mean(axis=0)
    return {c: values[j] for c, j in index.items()}


def move_probabilities(
    generator: Generator, prompts: Sequence[Prompt], replies: Sequence[list[int]], temperature: float
) -> np.ndarray:
    """``[len(prompts), 4]``: the probability that the policy, sampling at ``temperature``, writes each canonical move
    reply.
    """
    if not prompts:
        return np.zeros((0, 4))
    logps = np.asarray(
        generator.score_replies(list(prompts), [list(r) for r in replies], temperature), dtype=np.float64
    )
    return np.exp(logps)


def play_like_info(maze: MazeSpec, cell: tuple[int, int], info: dict, max_moves: int, rng: np.random.Generator) -> dict:
    """``info`` of the agent on ``cell`` as a later turn of a play shows it: a move count drawn uniformly from
    0 .. max_moves - 1 and, past the first move, the feedback of the move into ``cell`` from a random open neighbour."""
    moves = int(rng.integers(max_moves))
    feedback = ""
    if moves:
        arrivals = [
            action
            for action, (dr, dc) in enumerate(MOVES)
            if 0 <= cell[0] - dr < maze.size
            and 0 <= cell[1] - dc < maze.size
            and not maze.grid[cell[0] - dr, cell[1] - dc]
        ]
        feedback = f"Moved {ACTION_NAMES[arrivals[int(rng.integers(len(arrivals)))]]}." if arrivals else ""
    return {**info, "moves": moves, "feedback": feedback}


def cell_prompts(
    mazes: Sequence[MazeSpec], config: RolloutConfig, encoder: ChatEncoder, seed: int = 0, prompt_kind: str = "first"
) -> tuple[list[tuple[int, tuple[int, int]]], list[Prompt]]:
    """The prompt with the agent on every open non-goal cell of each maze.

    Returns ``(anchors, prompts)``; ``anchors[j] = (maze index, (row, col))`` names the cell of
    ``prompts[j]``. With ``config.state_prompt`` each prompt is the one
    the policy sees on that cell at any move of a play; without it, the one of a play's first move, or with
    ``prompt_kind="play"`` (the branches collector's ``prompts`` setting) one a play shows there later
    (:func:`play_like_info`).
    """
    anchors: list[tuple[int, tuple[int, int]]] = []
    prompts: list[Prompt] = []
    for i, maze in enumerate(mazes):
        system = config.system_prompt(maze.size)
        env = make_env(maze.size, config.max_moves, config.obs_mode, env_kwargs=config.env_kwargs)
        for r, c in np.argwhere(~maze.grid):
            cell = (int(r), int(c))
            if cell == maze.goal:
                continue
            obs, info = env.reset(seed=seed, options={"maze": MazeSpec(maze.grid, cell, maze.goal)})
            if prompt_kind == "play":
                rng = np.random.default_rng([seed % 2**63, int(maze.maze_id, 16), int(r), int(c)])
                info = play_like_info(maze, cell, info, config.max_moves, rng)
            ids, images = encoder.encode(
                build_messages(
                    system,
                    [],
                    user_message(obs, info, obs_mode=config.obs_mode, state_only=config.state_prompt),
                    "none",
                )
            )
            anchors.append((i, cell))
            prompts.append(Prompt(prompt_ids=ids, images=[compact_frame(im) for im in images]))
        env.close()
    return anchors, prompts


def moves_at_cells(
    generator: Generator,
    anchors: Sequence[tuple[int, tuple[int, int]]],
    prompts: Sequence[Prompt],
    sampling: SamplingConfig,
    num_mazes: int,
) -> list[dict[tuple[int, int], int | None]]:
    """The policy's move at every anchor cell (see :func:`cell_prompts`), from one batched generation call.

    Returns one dict per maze mapping each cell to its move (0-3), or to None where the reply
    could not be parsed or named no move.
    """
    results = generator.generate(list(prompts), sampling) if prompts else []
    if len(results) != len(prompts):
        raise RuntimeError(f"generator returned {len(results)} replies for {len(prompts)} prompts")
    moves_at: list[dict[tuple[int, int], int | None]] = [{} for _ in range(num_mazes)]
    for (i, cell), result in zip(anchors, results):
        parsed = parse_action(result.text if isinstance(result.text, str) else None)
        moves_at[i][cell] = parsed.action if parsed.valid and parsed.action < 4 else None
    return moves_at


def collect_branches(
    generator: Generator,
    mazes: Sequence[MazeSpec],
    config: RolloutConfig,
    encoder: ChatEncoder | None = None,
    weights_version: int | None = None,
    seed: int = 0,
    group_offset: int = 0,
) -> list[Episode]:
    """Exploring-start branches: a group of 4 one-turn episodes per open cell of each maze.

    One batched greedy call asks the policy for its move at every open cell (exploring starts:
    the cells its own plays would never reach are asked too); following those moves from every
    cell gives the greedy policy's moves to the goal from anywhere. Then, at each anchor cell,
    each of the 4 moves is a branch: its turn is the cell's prompt and the canonical reply for
    the move, and its reward is ``gamma ** (n - 1)`` when the move followed by the greedy
    policy reaches the goal in n <= ``max_moves`` moves, else 0. A group-normalised advantage
    over the 4 branches is the step-level credit of GiGPO's anchor states without waiting for
    plays to meet at a state, and VinePPO's Monte-Carlo branching with a greedy continuation.
    With ``reward="best"`` the reward is 1 for the group's most valuable branches instead
    (when any reaches the goal): the four branches are enumerated, not sampled from the policy, so
    an advantage proportional to the values would push up second-best moves (a wall bump that
    wastes one move) nearly as hard as the best one.
    With ``continuation="sampled"`` a move's worth is instead its mean over the greedy
    world and ``samples`` worlds drawn from the policy's move distribution
    (:func:`continuation_values`), read by one :meth:`Generator.score_replies` call, and cells the
    policy has settled (``settled``) are left out. With ``anchors_per_maze`` at most that many anchors of each maze
    give the update their branches (:func:`_capped`). The settings are ``config.collector`` (:class:`BranchSettings`).
    Only the environment's moves and goal are used; no solver. Group ids are
    ``(group_offset + i) * GROUP_CELLS + row * size + col`` (unique per run, like :func:`collect_groups`'s, whatever
    the mazes' sizes).
    Branch turns carry no sampling log-probs (none was sampled): the trainer recomputes them.
    """
    settings: BranchSettings = config.collector
    encoder = encoder if encoder is not None else generator.encoder  # type: ignore[attr-defined]
    version = generator.adapter_version if weights_version is None else int(weights_version)
    eos = encoder.tokenizer.eos_token_id
    replies = [encoder.tokenize_text(format_action(k)) + ([] if eos is None else [int(eos)]) for k in range(4)]
    t0 = time.perf_counter()
    anchors, prompts = cell_prompts(mazes, config, encoder, seed, settings.prompts)
    greedy_config = SamplingConfig(max_new_tokens=config.max_new_tokens, temperature=0.0, top_p=1.0, seed=None)
    continuations = [greedy_config] + [config.sampling(seed * 7919 + w + 1) for w in range(settings.worlds)]
    worths: list[dict[tuple[int, int], np.ndarray]] = []  # [maze] -> cell -> worth of each move
    probs, move_mass = None, None
    if settings.continuation == "greedy":
        # [continuation][maze] -> moves to the goal per cell
        togo = [_walks_to_goal(generator, mazes, anchors, prompts, sampling, config) for sampling in continuations]
    else:
        probs, worths = _sampled_worths(generator, mazes, anchors, prompts, replies, config, settings, group_offset)
        # What greedy decoding writes at each cell, asked of the policy: the moves evaluation plays, so the step's
        # success metrics mean what eval's solve rate means (a move's probability at the sampling temperature does
        # not say what greedy decoding writes). A measurement, not experience: not counted in the turns.
        togo = [_walks_to_goal(generator, mazes, anchors, prompts, greedy_config, config)]
        move_mass = float(np.mean(probs.sum(axis=1))) if len(probs) else 0.0
    info = {"seed": seed, "rollout_seconds": time.perf_counter() - t0}
    episodes, settled = _anchor_branches(
        mazes, anchors, prompts, togo, worths, probs, replies, config, version, info, group_offset
    )
    # Every anchor was asked once per continuation (greedy) or scored once; the branches are the environment's moves
    # from there.
    queries = len(anchors) * (len(continuations) if settings.continuation == "greedy" else 1)
    _record_queries(episodes, queries, settled / max(1, len(anchors)), move_mass)
    return episodes


def _anchor_branches(
    mazes: Sequence[MazeSpec],
    anchors: Sequence[tuple[int, tuple[int, int]]],
    prompts: Sequence[Prompt],
    togo: list[list[dict[tuple[int, int], int | None]]],
    worths: list[dict[tuple[int, int], np.ndarray]],
    probs: np.ndarray | None,
    replies: list[list[int]],
    config: RolloutConfig,
    version: int,
    step_info: dict,
    group_offset: int,
) -> tuple[list[Episode], int]:
    """``(episodes, settled)``: the 4 branches of every anchor cell kept (the worths' values when given, else the
    continuations' walks ``togo``), and how many anchors were left out as settled. ``step_info`` holds the step's
    seed and rollout seconds."""
    settings: BranchSettings = config.collector
    valued, settled = [], 0
    for j, ((i, cell), prompt) in enumerate(zip(anchors, prompts)):
        maze = mazes[i]
        cell_walks = [per_maze[i] for per_maze in togo]
        values, moves = _move_values(
            maze, cell, cell_walks, worths[i][cell] if worths else None, config.max_moves, settings.gamma
        )
        best = max(values)
        is_best = [values[k] == best for k in range(4)]
        if (
            probs is not None
            and best > 0
            and settings.settled < 1.0
            and is_settled(probs[j], is_best, settings.settled)
        ):
            settled += 1
            continue
        valued.append((i, cell, prompt, values, moves))
    episodes = []
    for i, cell, prompt, values, moves in _capped(valued, settings.anchors_per_maze, step_info["seed"]):
        maze = mazes[i]
        info = {
            "seed": step_info["seed"],
            "size": maze.size,
            "finish_reasons": ["branch"],
            "greedy_solves_start": togo[0][i].get(maze.start) is not None,
            "rollout_seconds": step_info["rollout_seconds"],
        }
        group_id = (group_offset + i) * GROUP_CELLS + cell[0] * maze.size + cell[1]
        episodes += _branches(maze, cell, prompt, values, moves, replies, settings.reward, group_id, version, info)
    return episodes, settled


def _capped(valued: list[tuple], cap: int, seed: int) -> list[tuple]:
    """The valued anchors ``(maze index, cell, prompt, values, moves)`` that give the update their branches: all of
    them, or with a ``cap`` at most that many of each maze's anchors whose branches differ in value, drawn at random
    from ``seed`` and the maze index. Anchors whose branches are all worth the same are kept (their groups carry no
    advantage and are filtered downstream), so every maze keeps its metrics."""
    if not cap:
        return valued
    differing: dict[int, list[int]] = {}
    for n, (i, _, _, values, _) in enumerate(valued):
        if len(set(values)) > 1:
            differing.setdefault(i, []).append(n)
    dropped: set[int] = set()
    for i, ns in differing.items():
        if len(ns) > cap:
            rng = np.random.default_rng([seed % 2**63, i])
            dropped.update(int(n) for n in rng.choice(ns, size=len(ns) - cap, replace=False))
    return [v for n, v in enumerate(valued) if n not in dropped]


def _record_queries(episodes: list[Episode], queries: int, settled_frac: float, move_mass: float | None) -> None:
    """Share the step's ``queries`` out over its episodes (so that any slice of them sums to its own turns) and
    record the share of settled cells and, for sampled worths, the probability mass on the four moves."""
    for e in episodes:
        e.info["branch_settled_frac"] = settled_frac
        e.info["env_turns"] = queries / len(episodes)
        if move_mass is not None:
            e.info["move_mass"] = move_mass


def _walks_to_goal(
    generator: Generator,
    mazes: Sequence[MazeSpec],
    anchors: Sequence[tuple[int, tuple[int, int]]],
    prompts: Sequence[Prompt],
    sampling: SamplingConfig,
    config: RolloutConfig,
) -> list[dict[tuple[int, int], int | None]]:
    """Per maze, the moves to the goal from each cell when the policy's replies under ``sampling`` are followed."""
    moves_at = moves_at_cells(generator, anchors, prompts, sampling, len(mazes))
    return [greedy_moves_to_goal(maze, moves_at[i], config.max_moves) for i, maze in enumerate(mazes)]


def _sampled_worths(
    generator: Generator,
    mazes: Sequence[MazeSpec],
    anchors: Sequence[tuple[int, tuple[int, int]]],
    prompts: Sequence[Prompt],
    replies: list[list[int]],
    config: RolloutConfig,
    settings: BranchSettings,
    group_offset: int,
) -> tuple[np.ndarray, list[dict[tuple[int, int], np.ndarray]]]:
    """``(probs, worths)``: the policy's probability of each move's reply at every anchor, and per maze the worth of
    each move at each cell over the greedy world and the sampled ones (:func:`continuation_values`)."""
    probs = move_probabilities(generator, prompts, replies, config.temperature)
    per_maze: list[dict[tuple[int, int], np.ndarray]] = [{} for _ in mazes]
    for (i, cell), p in zip(anchors, probs):
        per_maze[i][cell] = p
    samples = settings.samples if settings.continuation == "sampled" else None
    # One stream per maze, from its group id and layout: a worker given a slice of a step's
    # mazes draws the same worlds for them as one process given all.
    worths = [
        continuation_values(
            maze,
            per_maze[i],
            config.max_moves,
            settings.gamma,
            samples,
            np.random.default_rng([group_offset + i, zlib.crc32(maze.maze_id.encode())]),
            settings.moves_only,
        )
        for i, maze in enumerate(mazes)
    ]
    return probs, worths


def _move_values(
    maze: MazeSpec,
    cell: tuple[int, int],
    walks: list[dict[tuple[int, int], int | None]],
    worth: np.ndarray | None,
    max_moves: int,
    gamma: float,
) -> tuple[list[float], list[int | None]]:
    """``(values, moves)`` of the 4 moves at ``cell``: each move's value (its ``worth``, else the mean over the
    continuations' ``walks`` of ``gamma ** (n - 1)`` for a move that reaches the goal in n <= ``max_moves`` moves), and
    the moves to the goal after it under the greedy continuation (None: never)."""
    values, moves = [], []
    for k in range(4):
        rests = [walk.get(next_cell(maze.grid, cell, k)) for walk in walks]
        ns = [None if rest is None or rest + 1 > max_moves else rest + 1 for rest in rests]
        if worth is not None:
            values.append(float(worth[k]))
        else:
            values.append(float(np.mean([0.0 if n is None else gamma ** (n - 1) for n in ns])))
        moves.append(ns[0])  # the greedy continuation's
    return values, moves


def _branches(
    maze: MazeSpec,
    cell: tuple[int, int],
    prompt: Prompt,
    values: list[float],
    moves: list[int | None],
    replies: list[list[int]],
    reward_kind: str,
    group_id: int,
    version: int,
    info: dict[str, Any],
) -> list[Episode]:
    """The group of 4 one-turn episodes at ``cell``, one per move: the cell's prompt and the move's canonical reply,
    rewarded with the move's value (``reward_kind="value"``) or 1 for the most valuable moves (``"best"``)."""
    best = max(values)
    episodes = []
    for k in range(4):
        turn = Turn(
            prompt_ids=prompt.prompt_ids,
            response_ids=list(replies[k]),
            reward=values[k] if reward_kind == "value" else float(best > 0 and values[k] == best),
            action=k,
            images=list(prompt.images),
            text=format_action(k),
            state=f"{cell[0]},{cell[1]}",
        )
        episodes.append(
            Episode(
                turns=[turn],
                group_id=group_id,
                maze_id=maze.maze_id,
                success=moves[k] is not None,
                weights_version=version,
                optimal_moves=0,
                info=dict(info),
            )
        )
    return episodes


def is_settled(move_probs: np.ndarray, is_best: list[bool], threshold: float) -> bool:
    """Whether a cell needs no more push: its best moves hold at least ``threshold`` of the probability the policy puts
    on the four moves, and that share is more than the rest of its replies hold (so its greedy reply is a best move).

    The share is taken among the four moves, not of all replies, because a small decoder sampled at T=1 keeps some of
    its mass on malformed replies at every cell: on the raw probability, a cell would hardly ever count as settled.
    """
    total = float(move_probs.sum())
    best = float(sum(p for p, b in zip(move_probs, is_best) if b))
    return total > 0.0 and best >= threshold * total and best >= 1.0 - total


def draws_no_torch_randomness(config: RolloutConfig) -> bool:
    """Whether :func:`collect_branches` leaves torch's global random generator alone: branch scoring does (its
    continuation worlds come from numpy generators of their own); greedy continuations with sampled worlds seed it."""
    settings: BranchSettings = config.collector
    return settings.continuation != "greedy" or settings.worlds == 0


def plan(rollout: RolloutConfig, mazes_per_step: int, maze_size: int) -> str:
    """What one step collects, for ``--dry-run``."""
    settings: BranchSettings = rollout.collector
    cells = mazes_per_step * ((maze_size - 1) ** 2 // 2 - 2)
    walks = {
        "greedy": "the policy's greedy walk"
        + (f" and {settings.worlds} sampled policies' walks" if settings.worlds else ""),
        "sampled": f"the policy's greedy walk and {settings.samples} sampled walks",
        "expected": "the expected worth of the policy's sampled walks",
    }[settings.continuation]
    return (
        f"{mazes_per_step} mazes, every open cell of each a group of 4 one-move branches "
        f"(~{cells} cells in {maze_size}x{maze_size} perfect mazes), each move valued by {walks} after it"
    )


register(
    Collector(
        name=BRANCHES,
        description="the 4 one-move branches at every open cell of every maze, valued by the policy's walks after them",
        collect=collect_branches,
        scheme="branching",
        settings=BranchSettings,
        check=check_settings,
        sampled=False,
        draws_no_torch_randomness=draws_no_torch_randomness,
        plan=plan,
    )
)
