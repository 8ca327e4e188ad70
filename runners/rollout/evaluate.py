"""Evaluation on the fixed maze sets: solve rate, SPL, invalid-action rate, mean moves, per size.

* **Solve rate** counts an episode as solved only from the task outcome (the env's sparse
  task reward: the goal reached within the move limit); no format bonus or shaping enters it.
  Each comes with its 95% Wilson interval (``solve_rate_ci95``, :func:`mazegym.stats.wilson_interval`):
  on 64 mazes one maze is 1.6 points, and 61/64 means anything from about 87% to 98%.
* **SPL** (Anderson et al. 2018): ``mean(success * optimal / max(actual, optimal))``.
* **Invalid-action rate**: turns whose reply could not be parsed into a move, over all turns.
* **Mean moves**: moves used per episode (invalid replies use up a move too).

Decoding is greedy by default (one episode per maze). Results are a JSON-ready dict and a
readable table (:func:`format_table`).

Every evaluation also keeps a **per-maze record** (:func:`maze_records`): maze index and id,
success, moves, optimal moves, the executed actions (``None`` for an invalid reply) and a few
invalid reply texts. The summary carries them under ``"mazes"``; the training loop moves them
into one file per evaluation (:func:`write_eval_records`), from which any episode replays to a
GIF without the model (:func:`mazegym.recording.replay`).
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from algos.data import Episode
from mazegym.evalsets import EVAL_SETS, load_eval_set
from mazegym.stats import format_interval, wilson_interval
from runners.rollout.collect import RolloutConfig, evaluate_mazes, play_episodes
from runners.rollout.threads import map_slices

RECORDS_FORMAT = 1
"""Version of the per-maze eval record files (bumped when a field changes meaning)."""

INVALID_SAMPLES = 3
"""Invalid reply texts kept per maze (the first ones, each cut to :data:`SAMPLE_CHARS`)."""

SAMPLE_CHARS = 300

SUMMARY_KEYS = ("solve_rate", "solve_rate_ci95", "solved", "episodes", "spl", "invalid_action_rate", "mean_moves")
"""Keys of every summary (overall and per size)."""


def task_success(episode: Episode) -> bool:
    """Solved by the task outcome alone: the env reported success (sparse task reward, no format term)."""
    return bool(episode.success)


def summarize(episodes: Sequence[Episode]) -> dict[str, Any]:
    """Solve rate (with its 95% Wilson interval ``[low, high]``), SPL, invalid-action rate and mean moves, overall
    and per maze size."""

    def block(eps: Sequence[Episode]) -> dict[str, float]:
        turns = sum(e.num_moves for e in eps)
        solved = sum(task_success(e) for e in eps)
        return {
            "solve_rate": solved / len(eps) if eps else 0.0,
            "solve_rate_ci95": list(wilson_interval(int(solved), len(eps))),
            "solved": int(solved),
            "episodes": len(eps),
            "spl": float(np.mean([e.spl if task_success(e) else 0.0 for e in eps])) if eps else 0.0,
            "invalid_action_rate": sum(e.num_invalid for e in eps) / turns if turns else 0.0,
            "mean_moves": turns / len(eps) if eps else 0.0,
        }

    by_size: dict[int, list[Episode]] = defaultdict(list)
    for e in episodes:
        by_size[int(e.info.get("size", 0))].append(e)
    out = block(episodes)
    out["by_size"] = {str(size): block(eps) for size, eps in sorted(by_size.items())}
    return out


def oracle_progress(episodes: Sequence[Episode], mazes: Sequence[Any]) -> list[bool]:
    """Per turn, in episode order: did the move bring the agent closer to the goal (BFS)?

    ``mazes`` must include every maze played (matched by ``maze_id``); turns need
    ``Turn.state`` (the agent's cell, as the rollouts record it). Unparseable replies, walls
    and detours are ``False``. A diagnostic judged from outside: no trainer sees it.
    """
    from mazegym.solver import progress_labels

    by_id = {m.maze_id: m for m in mazes}
    labels: list[bool] = []
    for ep in episodes:
        cells = [tuple(map(int, t.state.split(","))) for t in ep.turns]
        labels += progress_labels(by_id[ep.maze_id], cells, [t.action for t in ep.turns])
    return labels


def maze_records(episodes: Sequence[Episode], mazes: Sequence[Any] | None = None) -> list[dict[str, Any]]:
    """One JSON-ready record per episode: index in the eval set, maze id, outcome, actions, invalid replies.

    ``mazes`` (the eval set) gives each record its index in the set (``None`` when the maze is
    not in it); ``actions`` holds the executed env action of every turn, ``None`` for a reply
    that could not be parsed (it still used a move), so the episode replays exactly.
    """
    index = {m.maze_id: i for i, m in enumerate(mazes or [])}
    records = []
    for ep in episodes:
        invalid = [t.text for t in ep.turns if not t.valid]
        records.append(
            {
                "index": index.get(ep.maze_id),
                "maze_id": ep.maze_id,
                "size": int(ep.info.get("size", 0)),
                "success": task_success(ep),
                "moves": ep.num_moves,
                "optimal_moves": int(ep.optimal_moves),
                "actions": [None if t.action is None or not t.valid else int(t.action) for t in ep.turns],
                "invalid": len(invalid),
                "invalid_samples": [text[:SAMPLE_CHARS] for text in invalid[:INVALID_SAMPLES]],
            }
        )
    return records


def eval_summary(
    set_name: str, episodes: Sequence[Episode], rollout: RolloutConfig, temperature: float = 0.0
) -> dict[str, Any]:
    """The summary of one evaluation of ``set_name``, with its per-maze records under ``"mazes"``.

    ``"env"`` holds the settings an episode replays with (move limit, stop rule, env kwargs).
    """
    return {
        "set": set_name,
        "decoding": "greedy" if temperature <= 0 else f"T={temperature}",
        **summarize(episodes),
        "env": {
            "max_moves": EVAL_SETS[set_name].max_moves,
            "require_stop": rollout.require_stop,
            "env_kwargs": dict(rollout.env_kwargs),
        },
        "mazes": maze_records(episodes, load_eval_set(set_name)),
    }


RECORD_KEYS = ("env", "mazes")
"""Summary keys that hold the per-maze records and their replay settings (not summary numbers)."""


def strip_records(summary: dict[str, Any] | None) -> dict[str, Any] | None:
    """The summary without its per-maze records and replay settings (what results files and checkpoints keep)."""
    return None if summary is None else {k: v for k, v in summary.items() if k not in RECORD_KEYS}


def records_path(run_dir: str | Path, step: int, set_name: str) -> Path:
    """Where the loop keeps the per-maze records of the evaluation of ``set_name`` at RL step ``step``."""
    return Path(run_dir) / "eval" / f"step_{int(step)}_{set_name}.json"


def write_eval_records(run_dir: str | Path, step: int, summary: dict[str, Any], label: str = "") -> Path:
    """Write one evaluation's summary and per-maze records to :func:`records_path`, atomically.

    The file: ``{"format", "step", "set", "label", "summary", "env", "mazes": [...]}``;
    ``label`` says which evaluation it was (``"before_rl"``, ``"rl"``, ``"final"``, ``"heldout"``).
    """
    from runners import atomic

    data = {
        "format": RECORDS_FORMAT,
        "step": int(step),
        "set": summary.get("set"),
        "label": label,
        "summary": strip_records(summary),
        "env": summary.get("env", {}),
        "mazes": list(summary.get("mazes", [])),
    }
    return atomic.write_json(records_path(run_dir, step, summary.get("set", "unknown")), data)


def _is_maze_record(record: Any) -> bool:
    """Whether ``record`` has the shape :func:`maze_records` writes, in the fields readers use."""

    def integer(value: Any) -> bool:
        return isinstance(value, int) and not isinstance(value, bool)

    return (
        isinstance(record, dict)
        and isinstance(record.get("success"), bool)
        and (record.get("index") is None or integer(record["index"]))
        and isinstance(record.get("actions", []), list)
        and all(a is None or integer(a) for a in record.get("actions", []))
        and isinstance(record.get("invalid_samples", []), list)
        and all(isinstance(t, str) for t in record.get("invalid_samples", []))
    )


def read_eval_records(path: str | Path) -> dict[str, Any]:
    """Read a file :func:`write_eval_records` wrote; raises ValueError when it is not one."""
    import json

    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path}: not a readable eval records file ({exc})") from exc
    if not isinstance(data, dict) or not isinstance(data.get("mazes"), list) or "step" not in data:
        raise ValueError(f"{path}: not an eval records file (needs 'step' and a 'mazes' list)")
    if not isinstance(data["step"], int) or isinstance(data["step"], bool) or data["step"] < 0:
        raise ValueError(f"{path}: not an eval records file (its step {data['step']!r:.40} is not an RL step number)")
    if not isinstance(data.get("summary", {}), dict) or not all(_is_maze_record(r) for r in data["mazes"]):
        raise ValueError(f"{path}: not an eval records file (a summary or per-maze record is not of its shape)")
    version = data.get("format", RECORDS_FORMAT)
    if not isinstance(version, int) or version > RECORDS_FORMAT:
        raise ValueError(f"{path}: records format {version!r:.40} is not one this mazegym reads ({RECORDS_FORMAT})")
    return data


def list_eval_records(run_dir: str | Path, set_name: str | None = None) -> list[dict[str, Any]]:
    """Every readable eval records file of a run (optionally one set), in step order; unreadable ones are skipped."""
    out = []
    for path in sorted((Path(run_dir) / "eval").glob("step_*.json")):
        try:
            data = read_eval_records(path)
        except ValueError:
            continue
        if set_name is None or data.get("set") == set_name:
            out.append({**data, "path": str(path)})
    return sorted(out, key=lambda d: (int(d["step"]), str(d.get("set"))))


def discard_eval_records(run_dir: str | Path, after_step: int) -> int:
    """Remove record files of RL steps past ``after_step`` (``-1``: all), which a resumed run redoes.

    Returns how many were removed.
    """
    removed = 0
    for data in list_eval_records(run_dir):
        if int(data["step"]) > after_step:
            Path(data["path"]).unlink(missing_ok=True)
            removed += 1
    return removed


def replay_record(record: dict[str, Any], env: dict[str, Any], spec: Any):
    """Replay one per-maze record on its maze (:class:`~mazegym.maze.MazeSpec`) with the eval's env settings.

    Returns :class:`mazegym.recording.Replay`; no model is needed.
    """
    from mazegym.recording import replay

    kwargs = {
        "max_moves": env.get("max_moves", max(1, len(record["actions"]))),
        "require_stop": env.get("require_stop", False),
        **env.get("env_kwargs", {}),
    }
    return replay(spec, record["actions"], **kwargs)


def eval_rollout_config(base: RolloutConfig, set_name: str) -> RolloutConfig:
    """The rollout settings for evaluating set ``set_name``: the run's, with the set's move limit."""
    return dataclasses.replace(base, max_moves=EVAL_SETS[set_name].max_moves)


EVAL_BATCH = 128
"""Mazes an evaluation plays at once: bounds its memory (a large set played at once holds every maze's frames)."""


def play_eval_mazes(
    generator: Any,
    set_name: str,
    rollout: RolloutConfig,
    temperature: float = 0.0,
    start: int = 0,
    stop: int | None = None,
    threads: int = 1,
) -> list[Episode]:
    """Play mazes ``[start, stop)`` of eval set ``set_name`` once each (greedy unless ``temperature`` > 0).

    Maze ``i`` is played with seed ``i`` whichever slice it is in, so a set split over workers (or,
    greedy, over ``threads`` threads sharing ``generator``) gives the episodes one whole-set
    evaluation gives.
    """
    mazes = load_eval_set(set_name)[start:stop]
    if threads > 1 and temperature <= 0:

        def play(part: Sequence[Any], lo: int) -> list[Episode]:
            played = play_eval_mazes(generator, set_name, rollout, temperature, start + lo, start + lo + len(part))
            for ep in played:
                ep.group_id += lo
            return played

        return map_slices(play, mazes, threads)
    config = eval_rollout_config(rollout, set_name)
    episodes: list[Episode] = []
    for lo in range(0, len(mazes), EVAL_BATCH):
        part, seed = mazes[lo : lo + EVAL_BATCH], start + lo
        if temperature <= 0:
            played = evaluate_mazes(generator, part, config, seed=seed)
        else:
            played = play_episodes(generator, part, config, 1, seed=seed, keep_images=False, temperature=temperature)
        for ep in played:
            ep.group_id += lo
        episodes += played
    return episodes


def evaluate_set(
    generator: Any,
    set_name: str,
    rollout: RolloutConfig,
    temperature: float = 0.0,
    return_episodes: bool = False,
    threads: int = 1,
    stop: int | None = None,
) -> dict[str, Any] | tuple[dict[str, Any], list[Episode]]:
    """Play every maze of ``set_name`` (or its first ``stop``) once (greedy unless ``temperature`` > 0; greedy on
    ``threads`` threads) and summarise.

    The summary includes the per-maze records (``"mazes"``) and replay settings (``"env"``), see
    :func:`eval_summary`.
    """
    config = eval_rollout_config(rollout, set_name)
    episodes = play_eval_mazes(generator, set_name, rollout, temperature, stop=stop, threads=threads)
    summary = eval_summary(set_name, episodes, config, temperature)
    return (summary, episodes) if return_episodes else summary


def format_table(results: dict[str, dict[str, Any]]) -> str:
    """A readable table: one row per (label, size) with the summary metrics, each solve rate with its 95% Wilson
    interval (computed from the counts, so summaries written before the interval existed print it too)."""
    header = (
        f"{'':<22}{'size':>6}{'solved':>10}{'solve rate':>12}{'95% interval':>14}{'SPL':>8}{'invalid':>9}{'moves':>8}"
    )
    lines = [header, "-" * len(header)]
    for label, res in results.items():
        sizes = res.get("by_size", {})
        rows = [("all", res)] if len(sizes) != 1 else [(next(iter(sizes)), res)]
        if len(sizes) > 1:
            rows += list(sizes.items())
        for size, r in rows:
            lines.append(
                f"{label:<22}{size:>6}{r['solved']:>5}/{r['episodes']:<4}{100 * r['solve_rate']:>11.2f}%"
                f"{format_interval(r['solved'], r['episodes']):>14}"
                f"{r['spl']:>8.3f}{100 * r['invalid_action_rate']:>8.1f}%{r['mean_moves']:>8.2f}"
            )
    return "\n".join(lines)


def case_study_table(before: dict[str, Any] | None, after: dict[str, Any], set_name: str, extra: str = "") -> str:
    """The case-study table: solve rate on the fixed 64 mazes before and after RL."""
    rows = {}
    if before is not None:
        rows["SFT (before RL)"] = before
    rows["after RL"] = after
    title = (
        f"Solve rate on the fixed {after['episodes']}-maze set {set_name!r} (greedy, task reward only; "
        f"95% Wilson interval){extra}"
    )
    return title + "\n" + format_table(rows)


def write_json(path: str | Path, data: Any) -> Path:
    """Write ``data`` as indented JSON, atomically (creating parent directories)."""
    from runners import atomic

    return atomic.write_json(path, data)
