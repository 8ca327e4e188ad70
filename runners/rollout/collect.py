"""Multi-turn rollouts: G plays of the same maze per group, many groups at once, batched generation.

Each turn, for every still-running episode: build the conversation with :mod:`mazegym.llm`
(system prompt, history -- full, last k turns or none --, the current observation as text
and/or image, feedback from the last step), encode it to token ids (memoised segments, see
:class:`~runners.rollout.generation.prompts.ChatEncoder`), then ask the generator for *all* replies in
one batched call. Each reply is parsed into an action; an unparseable reply is an invalid
turn that still uses up a move (VisGym's behaviour: ``env.step_invalid``), and the next user
message carries the parser's feedback. Nothing a model writes can make a rollout raise.

Every episode is stamped with the adapter version that sampled it; every :class:`Turn`
records prompt ids, response ids, sampling log-probs, reward, action, validity, images and
the decoded text. ``success`` counts the task outcome only (no format reward).
"""

from __future__ import annotations

import time
import zlib
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from algos.data import Episode, Turn
from mazegym.envs.vismaze import VisMazeEnv
from mazegym.llm import (
    build_messages,
    format_action,
    invalid_action_feedback,
    parse_action,
    system_prompt,
    user_message,
)
from mazegym.maze import MazeSpec
from mazegym.solver import next_cell
from runners.rollout.generation.base import Generator, Prompt, SamplingConfig
from runners.rollout.generation.prompts import ChatEncoder

HISTORY_MODES = ("full", "last_k", "none")


@dataclass
class RolloutConfig:
    """How episodes are played and sampled."""

    group_size: int = 8
    """G: rollouts of the same maze per group (GRPO group)."""
    history: str = "full"
    """Conversation history kept in the prompt: "full", "last_k" or "none"."""
    state_prompt: bool = False
    """The user turn shows the observation alone: no move counter and no feedback on moves (an unparseable reply's
    feedback is still shown), so with history "none" the prompt, and so the policy, is a function of the maze state.
    Branching then scores exactly the policy that plays; without it branching asks each cell the prompt of a play's
    first move, an approximation (docs/research.md measures both).
    """
    size_free_prompt: bool = False
    """The system prompt leaves out the maze's size and move limit, so its text is the same at every maze size and a
    model trained on 9x9 mazes reads a larger maze's prompt as one it was trained on."""
    history_k: int = 2
    """Past turns kept when history is "last_k"."""
    obs_mode: str = "text"
    """What the model observes: "text" (ASCII map), "image" or "both" (image needs a VLM)."""
    max_new_tokens: int = 32
    """Token budget per reply; longer replies are cut (and usually become invalid turns)."""
    temperature: float = 1.0
    """Sampling temperature (0 = greedy)."""
    top_p: float = 1.0
    """Nucleus sampling mass; keep 1.0 so recorded log-probs equal log_softmax(logits / T)."""
    max_moves: int = 20
    """Move limit per episode (invalid replies use up a move too)."""
    require_stop: bool = False
    """Episodes end only with an explicit stop action (VisGym's rule)."""
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    """Extra VisMazeEnv keyword arguments (e.g. cell_px, shaping)."""
    branching: bool = False
    """Train on branches instead of plays (:func:`collect_branches`): every open cell of each training maze is an
    anchor state (exploring starts), each of the 4 moves is tried there once and followed by the current greedy
    policy; the 4 branches form one group. Needs history "none" and the trainer's own old log-probs
    (algo.old_logprobs=recompute).
    """
    branch_gamma: float = 0.9
    """Branching: a branch that reaches the goal in n moves is worth branch_gamma ** (n - 1) (shorter is better); one
    that does not, 0.
    """
    branch_worlds: int = 0
    """Branching: besides the greedy continuation, this many continuation policies sampled from the policy (one move
    drawn per cell at the sampling temperature, kept for the whole walk); a branch's worth is its mean over them. 0
    = greedy only. Sampled continuations reach the goal from cells where the greedy one loops, so more cells get a
    signal.
    """
    branch_continuation: str = "greedy"
    """Branching: how each move's continuation is valued. "greedy": the current greedy policy walks on from the move's
    cell (plus branch_worlds generated continuations). "sampled": the greedy walk plus branch_samples continuation
    policies drawn from the policy's move distribution at the sampling temperature (one move per cell, kept for the
    walk; all 4 moves judged in the same draws), the distribution at every cell read once from one batched scoring
    of the 4 canonical replies (exact when the prompt is a function of the cell, state_prompt=true; else the first
    move's prompt stands for every move). "expected": the exact expectation with a fresh move sampled at every step
    -- a diagnostic, not RL: in a perfect maze its best move is the shortest-path move wherever the policy has any
    chance, whatever the policy (see :func:`continuation_values`).
    """
    branch_samples: int = 32
    """Branching with branch_continuation "sampled": continuation policies drawn per step, besides the greedy one."""
    branch_settled: float = 1.0
    """Branching with branch_continuation "sampled" or "expected": a cell where the policy already writes its best
    moves with at least this probability is left out of the update (a positive advantage on a reply of probability p
    moves its logit by about 1 - p, so such rows cost a full forward and backward pass for little signal); they come
    back as soon as their probability falls. 1.0 keeps every cell.
    """
    branch_reward: str = "best"
    """Branching: a branch's reward is "best" (1 for the most valuable branches of its group when any reaches the goal,
    else 0) or "value" (its worth, branch_gamma ** (n - 1) or 0).
    """

    def __post_init__(self) -> None:
        if self.group_size < 1:
            raise ValueError(f"group_size must be >= 1, got {self.group_size}")
        if self.history not in HISTORY_MODES:
            raise ValueError(f"history must be one of {HISTORY_MODES}, got {self.history!r}")
        if self.obs_mode not in ("text", "image", "both"):
            raise ValueError(f"obs_mode must be 'text', 'image' or 'both', got {self.obs_mode!r}")
        if self.max_moves < 1:
            raise ValueError(f"max_moves must be >= 1, got {self.max_moves}")
        if self.branching and (self.history != "none" or self.require_stop):
            raise ValueError(
                "branching needs history='none' and require_stop=False: a branch's state is the "
                f"agent's cell alone (got history={self.history!r}, require_stop={self.require_stop})"
            )
        if self.branch_reward not in ("best", "value"):
            raise ValueError(f"branch_reward must be 'best' or 'value', got {self.branch_reward!r}")
        if self.branch_continuation not in ("greedy", "sampled", "expected"):
            raise ValueError(
                f"branch_continuation must be 'greedy', 'sampled' or 'expected', got {self.branch_continuation!r}"
            )
        if self.branch_continuation != "greedy" and self.branch_worlds:
            raise ValueError("branch_worlds adds greedy-style continuations; it needs branch_continuation='greedy'")
        if not 0.0 < self.branch_settled <= 1.0:
            raise ValueError(f"branch_settled must be in (0, 1], got {self.branch_settled}")
        if self.branch_settled < 1.0 and self.branch_continuation == "greedy":
            raise ValueError(
                "branch_settled needs the scored move distribution: set branch_continuation to 'sampled' or 'expected'"
            )
        if self.branch_samples < 1:
            raise ValueError(f"branch_samples must be >= 1, got {self.branch_samples}")
        if self.branch_worlds < 0:
            raise ValueError(f"branch_worlds must be >= 0, got {self.branch_worlds}")
        if not 0.0 < self.branch_gamma <= 1.0:
            raise ValueError(f"branch_gamma must be in (0, 1], got {self.branch_gamma}")

    def sampling(self, seed: int | None) -> SamplingConfig:
        """The generator sampling settings for one turn."""
        return SamplingConfig(
            max_new_tokens=self.max_new_tokens, temperature=self.temperature, top_p=self.top_p, seed=seed
        )

    def system_prompt(self, size: int) -> str:
        """The system prompt of a ``size`` x ``size`` maze as these settings write it."""
        return system_prompt(size, self.max_moves, self.obs_mode, self.require_stop, self.size_free_prompt)


@dataclass
class _Play:
    """One running episode: its env, last observation, history and the episode being built."""

    env: VisMazeEnv
    obs: dict[str, Any]
    info: dict[str, Any]
    episode: Episode
    history: list[tuple[dict[str, Any], str]] = field(default_factory=list)
    done: bool = False


def _own_images(obs: dict[str, Any]) -> dict[str, Any]:
    """Copy the frame: history keeps references to past frames, which the env may reuse."""
    if "image" in obs:
        obs = dict(obs)
        obs["image"] = np.array(obs["image"], copy=True)
    return obs


def _printable(text: Any) -> str:
    """The reply as valid UTF-8 text (lone surrogates and the like replaced), so re-encoding never fails."""
    if not isinstance(text, str):
        text = "" if text is None else str(text)
    return text.encode("utf-8", "replace").decode("utf-8")


def _start(maze: MazeSpec, group_id: int, config: RolloutConfig, version: int, seed: int) -> _Play:
    env = VisMazeEnv(
        size=maze.size,
        max_moves=config.max_moves,
        obs_mode=config.obs_mode,
        require_stop=config.require_stop,
        **config.env_kwargs,
    )
    obs, info = env.reset(seed=seed, options={"maze": maze})
    episode = Episode(
        group_id=group_id,
        maze_id=maze.maze_id,
        weights_version=version,
        optimal_moves=int(info["optimal_moves"]),
        info={"seed": seed, "size": maze.size, "finish_reasons": []},
    )
    return _Play(env=env, obs=_own_images(obs), info=info, episode=episode)


def agent_state(info: dict[str, Any]) -> str:
    """The anchor-state key of a turn: the agent's cell before the move (``"row,col"``)."""
    agent = info.get("agent")
    return "" if agent is None else f"{int(agent[0])},{int(agent[1])}"


def _step(
    play: _Play, config: RolloutConfig, current_user: dict, prompt: Prompt, result: Any, keep_images: bool = True
) -> None:
    """Parse one reply, step the env (or spend an invalid move) and record the turn (its images only with
    ``keep_images``).
    """
    text = _printable(result.text)
    state = agent_state(play.info)
    # An engine that hands back something other than text gave no reply: parse the original, not str() of it.
    parsed = parse_action(text if isinstance(result.text, str) else result.text, require_stop=config.require_stop)
    if parsed.valid and parsed.action < play.env.action_space.n:
        obs, reward, terminated, truncated, info = play.env.step(parsed.action)
        action, valid = parsed.action, True
    else:
        obs, reward, terminated, truncated, info = play.env.step_invalid(
            invalid_action_feedback(parsed, config.require_stop)
        )
        action, valid = None, False
    play.episode.turns.append(
        Turn(
            prompt_ids=prompt.prompt_ids,
            response_ids=list(result.response_ids),
            logprobs=list(result.logprobs),
            reward=float(reward),
            action=action,
            valid=valid,
            images=list(prompt.images) if keep_images else [],
            text=text,
            state=state,
        )
    )
    play.episode.info["finish_reasons"].append(result.finish_reason)
    # Past turns are kept only as far as the prompts will show them: each holds a frame.
    if config.history == "full" or (config.history == "last_k" and config.history_k > 0):
        play.history.append((current_user, text))
        if config.history == "last_k":
            del play.history[: -config.history_k]
    play.obs, play.info = _own_images(obs), info
    if terminated or truncated:
        play.done = True
        play.episode.success = bool(info.get("is_success", False))
        play.episode.truncated = bool(truncated and not play.episode.success)
        play.env.close()


def _end_on_overflow(play: _Play) -> None:
    """End an episode whose next prompt no longer fits the model's context (counts as truncated)."""
    play.done = True
    play.episode.truncated = True
    play.episode.info["context_overflow"] = True
    play.env.close()


def play_episodes(
    generator: Generator,
    mazes: Sequence[MazeSpec],
    config: RolloutConfig,
    group_size: int,
    encoder: ChatEncoder | None = None,
    weights_version: int | None = None,
    seed: int = 0,
    group_offset: int = 0,
    keep_images: bool = True,
) -> list[Episode]:
    """Play ``group_size`` episodes of every maze in lock step; one generate call per turn.

    Episodes of maze ``i`` get ``group_id = group_offset + i``. Returned in group order. Without
    ``keep_images`` the turns hold no frames (evaluation: nothing trains on them, and 64 plays of
    50 moves on 13x13 frames would hold ~1 GB).
    """
    encoder = encoder if encoder is not None else generator.encoder  # type: ignore[attr-defined]
    version = generator.adapter_version if weights_version is None else int(weights_version)
    plays = [
        _start(maze, group_offset + i, config, version, seed + i * group_size + j)
        for i, maze in enumerate(mazes)
        for j in range(group_size)
    ]
    systems = {maze.size: config.system_prompt(maze.size) for maze in mazes}
    context = getattr(generator, "max_model_len", None)
    prompt_limit = None if context is None else int(context) - config.max_new_tokens
    turn = 0
    t0 = time.perf_counter()
    while True:
        active, users, prompts = [], [], []
        for play in (p for p in plays if not p.done):
            current = user_message(play.obs, play.info, obs_mode=config.obs_mode, state_only=config.state_prompt)
            messages = build_messages(systems[play.env.size], play.history, current, config.history, config.history_k)
            ids, images = encoder.encode(messages)
            if prompt_limit is not None and len(ids) > prompt_limit:
                _end_on_overflow(play)
                continue
            active.append(play)
            users.append(current)
            prompts.append(Prompt(prompt_ids=ids, images=images))
        if not active:
            break
        turn_seed = None if config.temperature <= 0 else seed * 1_000_003 + turn
        results = generator.generate(prompts, config.sampling(turn_seed))
        if len(results) != len(prompts):
            raise RuntimeError(f"generator returned {len(results)} replies for {len(prompts)} prompts")
        for play, current, prompt, result in zip(active, users, prompts, results):
            _step(play, config, current, prompt, result, keep_images)
        turn += 1
    elapsed = time.perf_counter() - t0
    for play in plays:
        play.episode.info["rollout_seconds"] = elapsed
    return [p.episode for p in plays]


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
) -> dict[tuple[int, int], np.ndarray]:
    """Worth of each of the 4 moves from every cell when the policy plays on afterwards.

    ``move_probs[cell]`` holds the probabilities of the 4 moves there; the rest of the mass is an
    unparseable reply, which spends a move in place (as a wall bump does). A move from ``cell`` that
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
        probs[j, 4] = max(0.0, 1.0 - p.sum())
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


def cell_prompts(
    mazes: Sequence[MazeSpec], config: RolloutConfig, encoder: ChatEncoder, seed: int = 0
) -> tuple[list[tuple[int, tuple[int, int]]], list[Prompt]]:
    """The first-turn prompt with the agent on every open non-goal cell of each maze.

    Returns ``(anchors, prompts)``; ``anchors[j] = (maze index, (row, col))`` names the cell of
    ``prompts[j]``. With ``config.state_prompt`` each prompt is the one
    the policy sees on that cell at any move of a play; without it, the one of a play's first move.
    """
    anchors: list[tuple[int, tuple[int, int]]] = []
    prompts: list[Prompt] = []
    for i, maze in enumerate(mazes):
        system = config.system_prompt(maze.size)
        env = VisMazeEnv(size=maze.size, max_moves=config.max_moves, obs_mode=config.obs_mode, **config.env_kwargs)
        for r, c in np.argwhere(~maze.grid):
            cell = (int(r), int(c))
            if cell == maze.goal:
                continue
            obs, info = env.reset(seed=seed, options={"maze": MazeSpec(maze.grid, cell, maze.goal)})
            ids, images = encoder.encode(
                build_messages(
                    system,
                    [],
                    user_message(obs, info, obs_mode=config.obs_mode, state_only=config.state_prompt),
                    "none",
                )
            )
            anchors.append((i, cell))
            prompts.append(Prompt(prompt_ids=ids, images=[np.array(im, copy=True) for im in images]))
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
    the move, and its reward is ``branch_gamma ** (n - 1)`` when the move followed by the greedy
    policy reaches the goal in n <= ``max_moves`` moves, else 0. A group-normalised advantage
    over the 4 branches is the step-level credit of GiGPO's anchor states without waiting for
    plays to meet at a state, and VinePPO's Monte-Carlo branching with a greedy continuation.
    With ``branch_reward="best"`` the reward is 1 for the group's most valuable branches instead
    (when any reaches the goal): the four branches are enumerated, not sampled from the policy, so
    an advantage proportional to the values would push up second-best moves (a wall bump that
    wastes one move) nearly as hard as the best one, which measurably lowered the solve rate.
    With ``branch_continuation="sampled"`` a move's worth is instead its mean over the greedy
    world and ``branch_samples`` worlds drawn from the policy's move distribution
    (:func:`continuation_values`), read by one :meth:`Generator.score_replies` call, and cells the
    policy has settled (``branch_settled``) are left out.
    Only the environment's moves and goal are used; no solver. Group ids are
    ``(group_offset + i) * size**2 + row * size + col`` (unique per run, like :func:`collect_groups`'s).
    Branch turns carry no sampling log-probs (none was sampled): the trainer recomputes them.
    """
    encoder = encoder if encoder is not None else generator.encoder  # type: ignore[attr-defined]
    version = generator.adapter_version if weights_version is None else int(weights_version)
    eos = encoder.tokenizer.eos_token_id
    replies = [encoder.tokenize_text(format_action(k)) + ([] if eos is None else [int(eos)]) for k in range(4)]
    t0 = time.perf_counter()
    anchors, prompts = cell_prompts(mazes, config, encoder, seed)
    greedy_config = SamplingConfig(max_new_tokens=config.max_new_tokens, temperature=0.0, top_p=1.0, seed=None)
    continuations = [greedy_config] + [config.sampling(seed * 7919 + w + 1) for w in range(config.branch_worlds)]
    togo: list[list[dict[tuple[int, int], int | None]]] = []  # [continuation][maze] -> moves to the goal per cell
    worths: list[dict[tuple[int, int], np.ndarray]] = []  # [maze] -> cell -> worth of each move
    if config.branch_continuation == "greedy":
        for sampling in continuations:
            moves_at = moves_at_cells(generator, anchors, prompts, sampling, len(mazes))
            togo.append([greedy_moves_to_goal(maze, moves_at[i], config.max_moves) for i, maze in enumerate(mazes)])
    else:
        probs = move_probabilities(generator, prompts, replies, config.temperature)
        per_maze: list[dict[tuple[int, int], np.ndarray]] = [{} for _ in mazes]
        for (i, cell), p in zip(anchors, probs):
            per_maze[i][cell] = p
        samples = config.branch_samples if config.branch_continuation == "sampled" else None
        # One stream per maze, from its group id and layout: a worker given a slice of a step's
        # mazes draws the same worlds for them as one process given all.
        worths = [
            continuation_values(
                maze,
                per_maze[i],
                config.max_moves,
                config.branch_gamma,
                samples,
                np.random.default_rng([group_offset + i, zlib.crc32(maze.maze_id.encode())]),
            )
            for i, maze in enumerate(mazes)
        ]
        # The greedy walk still says whether the policy's own best guess solves each maze (a metric).
        greedy_at = [
            {cell: (int(np.argmax(p)) if p.max() >= 1.0 - p.sum() else None) for cell, p in cells.items()}
            for cells in per_maze
        ]
        togo.append([greedy_moves_to_goal(maze, greedy_at[i], config.max_moves) for i, maze in enumerate(mazes)])
    elapsed = time.perf_counter() - t0
    episodes = []
    settled = 0
    for j, ((i, cell), prompt) in enumerate(zip(anchors, prompts)):
        maze = mazes[i]
        values, moves = [], []
        for k in range(4):
            rests = [walks[i].get(next_cell(maze.grid, cell, k)) for walks in togo]
            ns = [None if rest is None or rest + 1 > config.max_moves else rest + 1 for rest in rests]
            if worths:
                values.append(float(worths[i][cell][k]))
            else:
                values.append(float(np.mean([0.0 if n is None else config.branch_gamma ** (n - 1) for n in ns])))
            moves.append(ns[0])  # the greedy continuation's
        best = max(values)
        if worths and best > 0 and sum(probs[j][k] for k in range(4) if values[k] == best) >= config.branch_settled:
            settled += 1
            continue
        for k in range(4):
            reward = values[k] if config.branch_reward == "value" else float(best > 0 and values[k] == best)
            turn = Turn(
                prompt_ids=prompt.prompt_ids,
                response_ids=list(replies[k]),
                reward=reward,
                action=k,
                images=list(prompt.images),
                text=format_action(k),
                state=f"{cell[0]},{cell[1]}",
            )
            episodes.append(
                Episode(
                    turns=[turn],
                    group_id=(group_offset + i) * maze.size**2 + cell[0] * maze.size + cell[1],
                    maze_id=maze.maze_id,
                    success=moves[k] is not None,
                    weights_version=version,
                    optimal_moves=0,
                    info={
                        "seed": seed,
                        "size": maze.size,
                        "finish_reasons": ["branch"],
                        "greedy_solves_start": togo[0][i].get(maze.start) is not None,
                        "rollout_seconds": elapsed,
                    },
                )
            )
    for e in episodes:
        e.info["branch_settled_frac"] = settled / max(1, len(anchors))
    return episodes


def draws_no_torch_randomness(config: RolloutConfig) -> bool:
    """Whether :func:`collect_groups` under ``config`` leaves torch's global random generator alone: branch
    scoring does (its continuation worlds come from numpy generators of their own), sampled plays and greedy
    branch continuations with sampled worlds seed it for every turn."""
    return config.branching and (config.branch_continuation != "greedy" or config.branch_worlds == 0)


def collect_groups(
    generator: Generator,
    mazes: Sequence[MazeSpec],
    config: RolloutConfig,
    encoder: ChatEncoder | None = None,
    weights_version: int | None = None,
    seed: int = 0,
    group_offset: int = 0,
) -> list[Episode]:
    """G sampled rollouts of each maze (group ``group_offset + i`` = maze ``i``), all batched together.

    ``weights_version`` defaults to the generator's current adapter version. With
    ``config.branching`` the groups are :func:`collect_branches`'s instead.
    """
    if config.branching:
        return collect_branches(generator, mazes, config, encoder, weights_version, seed, group_offset)
    return play_episodes(generator, mazes, config, config.group_size, encoder, weights_version, seed, group_offset)


def evaluate_mazes(
    generator: Generator,
    mazes: Sequence[MazeSpec],
    config: RolloutConfig,
    encoder: ChatEncoder | None = None,
    seed: int = 0,
) -> list[Episode]:
    """One greedy (temperature 0) episode per maze, for evaluation; group_id = maze index; the turns keep no frames."""
    greedy = RolloutConfig(**{**config.__dict__, "temperature": 0.0, "group_size": 1})
    return play_episodes(generator, mazes, greedy, 1, encoder, None, seed, 0, keep_images=False)


def rollout_metrics(episodes: Sequence[Episode]) -> dict[str, float]:
    """Summary numbers for logging: success rate, SPL, moves, invalid-turn rate, reply lengths."""
    if not episodes:
        return {}
    turns = [t for e in episodes for t in e.turns]
    reasons = [r for e in episodes for r in e.info.get("finish_reasons", [])]
    return {
        "success_rate": float(np.mean([e.success for e in episodes])),
        "spl": float(np.mean([e.spl for e in episodes])),
        "moves": float(np.mean([e.num_moves for e in episodes])),
        "invalid_turn_rate": float(np.mean([not t.valid for t in turns])) if turns else 0.0,
        "response_tokens": float(np.mean([len(t.response_ids) for t in turns])) if turns else 0.0,
        "prompt_tokens": float(np.mean([len(t.prompt_ids) for t in turns])) if turns else 0.0,
        "truncated_replies": float(np.mean([r == "length" for r in reasons])) if reasons else 0.0,
        "episodes": float(len(episodes)),
        **(
            {"greedy_start_success": float(np.mean([e.info["greedy_solves_start"] for e in episodes]))}
            if all("greedy_solves_start" in e.info for e in episodes)
            else {}
        ),
        **(
            {"branch_settled_frac": float(np.mean([e.info["branch_settled_frac"] for e in episodes]))}
            if all("branch_settled_frac" in e.info for e in episodes)
            else {}
        ),
    }
