"""Multi-turn rollouts: G plays of the same maze per group, many groups at once, batched generation.

The play machinery every collector (:mod:`runners.rollout.collectors`) and the evaluation share, and
:class:`RolloutConfig`, the rollout settings.

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
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from algos.data import Episode, Turn
from mazegym.llm import (
    build_messages,
    system_prompt,
    user_message,
)
from mazegym.maze import MazeSpec
from mazegym.wrappers import TextActionWrapper
from runners.rollout.env import make_env
from runners.rollout import collectors
from runners.rollout.generation.base import Generator, Prompt, SamplingConfig
from runners.rollout.generation.prompts import ChatEncoder

HISTORY_MODES = ("full", "last_k", "none")
OBS_MODES = ("text", "image", "both")


@dataclass
class RolloutConfig:
    """How episodes are played and sampled, and the collector that gathers a step's training episodes."""

    group_size: int = field(default=8, metadata={"range": (1, 100_000, False)})
    """G: rollouts of the same maze per group (GRPO group); a step's env seeds advance by G per maze."""
    history: str = field(default="full", metadata={"choices": HISTORY_MODES})
    """Conversation history kept in the prompt: "full", "last_k" or "none"."""
    state_prompt: bool = field(default=False, metadata={"any": True})
    """The user turn shows the observation alone: no move counter and no feedback on moves (an unparseable reply's
    feedback is still shown), so with history "none" the prompt, and so the policy, is a function of the maze state.
    Branching then scores exactly the policy that plays; without it branching asks each cell the prompt of a play's
    first move, an approximation (docs/research.md measures both).
    """
    size_free_prompt: bool = field(default=False, metadata={"any": True})
    """The system prompt leaves out the maze's size and move limit, so its text is the same at every maze size and a
    model trained on 9x9 mazes reads a larger maze's prompt as one it was trained on."""
    history_k: int = field(default=2, metadata={"range": (0, 100_000, False)})
    """Past turns kept when history is "last_k"."""
    obs_mode: str = field(default="text", metadata={"choices": OBS_MODES})
    """What the model observes: "text" (ASCII map), "image" or "both" (image needs a VLM)."""
    max_new_tokens: int = field(default=32, metadata={"range": (1, 1_000_000, False)})
    """Token budget per reply; longer replies are cut (and usually become invalid turns)."""
    temperature: float = field(default=1.0, metadata={"range": (0.0, None, False)})
    """Sampling temperature of the training rollouts (0 = greedy); the trainer scores log-probs at it too."""
    top_p: float = field(default=1.0, metadata={"range": (0.0, 1.0, True)})
    """Nucleus sampling mass; keep 1.0 so recorded log-probs equal log_softmax(logits / T)."""
    max_moves: int = field(default=20, metadata={"range": (1, 1_000_000, False)})
    """Move limit per episode (invalid replies use up a move too)."""
    require_stop: bool = field(default=False, metadata={"any": True})
    """Episodes end only with an explicit stop action (VisGym's rule)."""
    env_kwargs: dict[str, Any] = field(default_factory=dict, metadata={"any": True})
    """Extra VisMazeEnv keyword arguments (e.g. cell_px, shaping); the env checks them."""
    collector: collectors.CollectorConfig = field(default_factory=collectors.CollectorConfig)
    """The collector of the training episodes (runners.rollout.collectors): its name and its own settings."""

    def sampling(self, seed: int | None, temperature: float | None = None) -> SamplingConfig:
        """The generator sampling settings for one turn (at ``temperature``, default :attr:`temperature`)."""
        return SamplingConfig(
            max_new_tokens=self.max_new_tokens,
            temperature=self.temperature if temperature is None else temperature,
            top_p=self.top_p,
            seed=seed,
        )

    def system_prompt(self, size: int) -> str:
        """The system prompt of a ``size`` x ``size`` maze as these settings write it."""
        return system_prompt(size, self.max_moves, self.obs_mode, self.require_stop, self.size_free_prompt)


@dataclass
class _Play:
    """One running episode: its env, last observation, history and the episode being built."""

    env: TextActionWrapper
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
    env = TextActionWrapper(
        make_env(maze.size, config.max_moves, config.obs_mode, config.require_stop, config.env_kwargs)
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
    # The env's own reply-to-action wrapper parses and steps (or spends an invalid move). An engine that hands back
    # something other than text gave no reply: it parses the original, not str() of it.
    obs, reward, terminated, truncated, info = play.env.step(text if isinstance(result.text, str) else result.text)
    parsed = info.pop("parsed")
    action, valid = parsed.action, parsed.valid
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
    temperature: float | None = None,
) -> list[Episode]:
    """Play ``group_size`` episodes of every maze in lock step; one generate call per turn.

    Episodes of maze ``i`` get ``group_id = group_offset + i``. Returned in group order. Replies are sampled at
    ``temperature`` (default: ``config.temperature``, the training rollouts'; 0 = greedy). Without
    ``keep_images`` the turns hold no frames (evaluation: nothing trains on them, and 64 plays of
    50 moves on 13x13 frames would hold ~1 GB).
    """
    encoder = encoder if encoder is not None else generator.encoder  # type: ignore[attr-defined]
    version = generator.adapter_version if weights_version is None else int(weights_version)
    temperature = config.temperature if temperature is None else temperature
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
            messages = build_messages(
                systems[play.env.unwrapped.size], play.history, current, config.history, config.history_k
            )
            ids, images = encoder.encode(messages)
            if prompt_limit is not None and len(ids) > prompt_limit:
                _end_on_overflow(play)
                continue
            active.append(play)
            users.append(current)
            prompts.append(Prompt(prompt_ids=ids, images=images))
        if not active:
            break
        turn_seed = None if temperature <= 0 else seed * 1_000_003 + turn
        results = generator.generate(prompts, config.sampling(turn_seed, temperature))
        if len(results) != len(prompts):
            raise RuntimeError(f"generator returned {len(results)} replies for {len(prompts)} prompts")
        for play, current, prompt, result in zip(active, users, prompts, results):
            _step(play, config, current, prompt, result, keep_images)
        turn += 1
    elapsed = time.perf_counter() - t0
    for play in plays:
        play.episode.info["rollout_seconds"] = elapsed
    return [p.episode for p in plays]


def collect_groups(
    generator: Generator,
    mazes: Sequence[MazeSpec],
    config: RolloutConfig,
    encoder: ChatEncoder | None = None,
    weights_version: int | None = None,
    seed: int = 0,
    group_offset: int = 0,
) -> list[Episode]:
    """A step's training episodes of ``mazes``, collected by the collector ``config`` selects
    (:func:`runners.rollout.collectors.of`: G sampled plays of each maze by default, group ``group_offset + i`` = maze
    ``i``). ``weights_version`` defaults to the generator's current adapter version."""
    return collectors.of(config).collect(generator, mazes, config, encoder, weights_version, seed, group_offset)


def evaluate_mazes(
    generator: Generator,
    mazes: Sequence[MazeSpec],
    config: RolloutConfig,
    encoder: ChatEncoder | None = None,
    seed: int = 0,
) -> list[Episode]:
    """One greedy (temperature 0) episode per maze, for evaluation; group_id = maze index; the turns keep no frames."""
    return play_episodes(generator, mazes, config, 1, encoder, None, seed, 0, keep_images=False, temperature=0.0)


def rollout_metrics(episodes: Sequence[Episode]) -> dict[str, float]:
    """Summary numbers for logging: success rate, SPL, moves, invalid-turn rate, reply lengths, and environment
    turns (the states at which the policy was asked for a move: an episode's turns, or what a collector records in
    ``info["env_turns"]``)."""
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
        "env_turns": float(sum(e.info.get("env_turns", len(e.turns)) for e in episodes)),
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
        **(
            {"move_mass": float(np.mean([e.info["move_mass"] for e in episodes]))}
            if all("move_mass" in e.info for e in episodes)
            else {}
        ),
    }
