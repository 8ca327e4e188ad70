"""The RL step loop, written once for every runner.

One step is ``generate -> score -> update -> sync -> [eval] -> [checkpoint] -> log``; at the end
the run evaluates the final policy, saves the final adapter, evaluates the held-out sets and
writes ``eval_results.json`` plus the case-study table. :func:`run_rl_loop` owns all of that
bookkeeping (step counter, eval history, progress bar, deadline, interruption, metrics
records); *where* each phase runs is a :class:`StepExecutor`'s business:

* :class:`runners.local.LocalExecutor` runs every phase in this process;
* :class:`runners.distributed.ray_runner.RayExecutor` fans phases out to the worker group (placement and
  transport only) and adds its own metrics through :meth:`StepExecutor.step_extras`.

So the local and Ray runners log the same keys, checkpoint at the same steps and evaluate
on the same schedule by construction, not by keeping two loops in step.
"""

from __future__ import annotations

import contextlib
import shutil
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Protocol, Sequence

from algos.data import Episode
from mazegym.stats import format_interval
from runners import atomic
from runners.rollout.evaluate import (
    case_study_table,
    discard_eval_records,
    format_table,
    strip_records,
    write_eval_records,
    write_json,
)
from runners.train.metrics import PhaseTimer, Progress, read_jsonl, rl_timing
from runners.train.run_info import peak_rss_gb, release_freed_memory
from runners.train.steps import draw_step_mazes
from runners.rollout.collect import rollout_metrics


@dataclass
class RunResult:
    """What a run produced."""

    run_dir: Path
    """The run directory."""
    before: dict[str, Any] | None
    """Eval summary of the RL start (None when not evaluated)."""
    after: dict[str, Any] | None
    """Eval summary after the last RL step."""
    steps: int
    """RL steps completed."""
    seconds: float
    """Wall-clock seconds of this invocation."""
    artifacts: dict[str, str] = field(default_factory=dict)
    """Paths of the things a user wants (SFT model, final adapter, metrics, eval JSON)."""
    table: str = ""
    """The case-study table."""


@dataclass
class LoopState:
    """Where a run stands: what a checkpoint restores and the Ray driver carries across worker rebuilds."""

    step: int = 0
    """RL steps completed."""
    before: dict[str, Any] | None = None
    """Eval summary of the RL start."""
    history: list[dict[str, float]] = field(default_factory=list)
    """``{"step", "solve_rate"}`` of every evaluation so far."""
    stream: dict[str, Any] | None = None
    """The training maze stream's state after the last completed step."""
    restarts: int = 0
    """Worker-group rebuilds so far (Ray runner)."""
    record: dict[str, Any] | None = None
    """The metrics record of step ``step`` as its checkpoint saved it (without the checkpoint's own timing)."""
    capped: dict[str, Any] | None = None
    """Set when ``loop.max_minutes`` stopped the run before ``loop.steps``: the step reached, the plan, the cap."""
    env_turns: int = 0
    """Environment turns of the RL steps so far (``rollout/env_turns`` summed): what ``loop.max_env_turns`` caps."""
    turn_budget: dict[str, Any] | None = None
    """Set when ``loop.max_env_turns`` ended the run before ``loop.steps``: the step reached, the plan, the budget."""


def loop_state_from(saved: dict[str, Any]) -> LoopState:
    """The loop state a checkpoint's ``state.json`` content restores (the stream state stays with the stream)."""
    return LoopState(
        step=int(saved["step"]),
        before=saved.get("before"),
        history=saved.get("eval_history", []),
        record=saved.get("record"),
        stream=saved.get("stream"),
        env_turns=int(saved.get("env_turns", 0)),
    )


class StepExecutor(Protocol):
    """Where the phases of one RL step run (see the module docstring)."""

    description: str
    """Label of the progress bar, e.g. ``"RL (grpo)"``."""

    def generate(self, mazes: Sequence[Any], step: int) -> list[Episode]:
        """Play ``group_size`` rollouts of each maze with the current weights (group ids unique per run)."""

    def update(self, episodes: list[Episode]) -> dict[str, float]:
        """One algorithm update on the step's episodes; returns the (merged) training metrics."""

    def sync(self, step: int, check_parity: bool) -> dict[str, float]:
        """Publish the trained adapter as version ``step`` and load it into every engine."""

    def evaluate(self, set_name: str) -> dict[str, Any]:
        """Summary of the current policy on a fixed eval set (runners.rollout.evaluate.summarize keys)."""

    def checkpoint(self, step: int, stream_state: dict[str, Any], extra: dict[str, Any]) -> None:
        """Write checkpoint ``step`` (adapter, optimizer, RNGs, stream state, ``extra``)."""

    def save_adapter(self, directory: Path) -> None:
        """Write the final adapter (PEFT format) to ``directory``."""

    def step_extras(
        self, step: int, record: dict[str, float], timings: dict[str, float], episodes: int
    ) -> dict[str, float]:
        """Extra metrics for this step's record (after the timings are known); may export them elsewhere too."""

    def results_extras(self) -> tuple[dict[str, Any], dict[str, str]]:
        """Extra entries for ``eval_results.json`` and for the artifact list."""


def eval_fields(summary: dict[str, Any]) -> dict[str, float]:
    """The eval summary keys every runner logs."""
    return {
        "eval/solve_rate": summary["solve_rate"],
        "eval/spl": summary["spl"],
        "eval/invalid_action_rate": summary["invalid_action_rate"],
    }


def evaluate_and_record(
    executor: StepExecutor, set_name: str, run_dir: Path, step: int, label: str, metrics: Any = None, grid: bool = False
) -> dict[str, Any]:
    """Evaluate ``set_name``, write its per-maze records under ``run_dir/eval`` and return the bare summary.

    With ``grid``, the solved/failed thumbnail grid goes to TensorBoard too (``eval/mazes``).
    """
    summary = executor.evaluate(set_name)
    write_eval_records(run_dir, step, summary, label)
    if grid and summary.get("mazes") and hasattr(metrics, "log_image"):
        from mazegym.evalsets import load_eval_set
        from mazegym.recording import labelled_grid

        specs = load_eval_set(set_name)
        solved: list[bool | None] = [None] * len(specs)
        for rec in summary["mazes"]:
            if rec.get("index") is not None:
                solved[rec["index"]] = rec["success"]
        title = f"{set_name} at step {step}: {sum(o is True for o in solved)}/{len(specs)} solved"
        metrics.log_image("eval/mazes", labelled_grid(specs, solved, title), step)
    return strip_records(summary)


def discard_replayed_records(metrics: Any, state: LoopState, log: Callable[[str], None] = print) -> int:
    """Drop metric records this run is about to write again, so every step has one record.

    After resuming at step k, records of steps past k (from the attempt that was interrupted)
    are dropped; on a fresh start every RL record and the before-RL evaluation are.
    """
    fresh = state.step == 0 and state.before is None

    def replayed(record: dict) -> bool:
        phase, step = record.get("phase"), record.get("step", 0)
        return (phase == "rl" and step > state.step) or (fresh and phase == "eval")

    dropped = metrics.discard(replayed) if hasattr(metrics, "discard") else 0
    if dropped:
        log(
            f"[metrics] dropped {dropped} record(s) past RL step {state.step} from {metrics.jsonl_path} "
            f"(written by an interrupted attempt; they are about to be redone)"
        )
    return dropped


def restore_unlogged_record(metrics: Any, state: LoopState, log: Callable[[str], None] = print) -> bool:
    """Log the resumed step's record from its checkpoint when the interrupted attempt died before logging it.

    A step's checkpoint is committed before its record is logged (the record carries the
    checkpoint's timing), so a kill in between would leave that step without a record: resume
    starts after it. The checkpoint holds the record, and it is logged here instead.
    """
    path = getattr(metrics, "jsonl_path", None)
    if state.record is None or state.step == 0 or path is None:
        return False
    logged = Path(path).is_file() and any(
        r.get("phase") == "rl" and r.get("step") == state.step for r in read_jsonl(path)
    )
    if not logged:
        metrics.log(state.step, state.record, phase="rl")
        log(f"[metrics] logged RL step {state.step}'s record from its checkpoint (the interrupted attempt had not)")
    state.record = None
    return not logged


def run_rl_loop(
    config: Any,
    executor: StepExecutor,
    stream: Any,
    state: LoopState,
    run_dir: Path,
    manager: Any,
    metrics: Any,
    log: Callable[[str], None],
    stop_after: int | None,
    t_start: float,
) -> RunResult:
    """Run RL steps ``state.step + 1 .. config.loop.steps`` on ``executor``; returns the run's result.

    ``stream`` yields the training mazes (already restored to ``state``); ``state`` is updated
    after every step. ``stop_after`` ends this invocation after that many steps *as if
    interrupted* (no final checkpoint or eval), which is how tests check resume equivalence.
    Records an interrupted attempt wrote past ``state.step`` are dropped first, and the record of
    ``state.step`` is logged from the checkpoint when that attempt died before logging it.
    """
    discard_replayed_records(metrics, state, log)
    discard_eval_records(run_dir, -1 if state.step == 0 and state.before is None else state.step)
    restore_unlogged_record(metrics, state, log)
    if state.step == 0 and state.before is None and config.eval.before_rl:
        timer = PhaseTimer()
        with timer.phase("eval"):
            state.before = evaluate_and_record(
                executor, config.maze.eval_set, run_dir, 0, "before_rl", metrics, grid=True
            )
        b = state.before
        metrics.log(0, {**eval_fields(b), **timer.pop()}, phase="eval")
        state.history.append({"step": 0, "solve_rate": b["solve_rate"]})
        log(
            f"[eval] RL start (step 0): solve rate {b['solve_rate']:.4f} ({b['solved']}/{b['episodes']}, 95% interval "
            f"{format_interval(b['solved'], b['episodes'])})"
        )

    progress = Progress(
        config.loop.steps, initial=state.step, desc=executor.description, enabled=config.logging.progress
    )
    try:  # the bar is closed however the loop ends (finished, interrupted, or failed)
        stopped, after, final_step = _run_steps(config, executor, stream, state, metrics, progress, stop_after, run_dir)
    finally:
        progress.close()
    if stopped:
        return RunResult(run_dir, state.before, None, state.step, time.perf_counter() - t_start)
    if after is None:  # resumed a finished run: evaluate what the checkpoint holds
        after = evaluate_and_record(executor, config.maze.eval_set, run_dir, final_step, "final", metrics)
    return finish_run(config, executor, state, after, final_step, run_dir, manager, metrics, t_start)


class CollectAhead:
    """Step ``step``'s rollouts, collected while the previous step's update runs (``loop.overlap_generation``).

    With ``concurrent`` the collection runs on a background thread (torch releases the GIL inside its
    kernels, so the update and the collection share two cores); otherwise it runs at once, before
    the update, which gives the same data (the engine's weights change only at sync).
    """

    def __init__(self, executor: StepExecutor, mazes: list[Any], step: int, concurrent: bool):
        self.step, self.concurrent = step, concurrent
        self._started = time.perf_counter()
        self._seconds = 0.0
        self._episodes: list[Episode] | None = None
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None
        if concurrent:
            self._thread = threading.Thread(target=self._run, args=(executor, mazes), name="collect-ahead", daemon=True)
            self._thread.start()
        else:
            self._run(executor, mazes)

    def _run(self, executor: StepExecutor, mazes: list[Any]) -> None:
        try:
            self._episodes = executor.generate(mazes, self.step)
        except BaseException as exc:  # re-raised in the loop's thread by result()
            self._error = exc
        self._seconds = time.perf_counter() - self._started

    def wait(self) -> None:
        """Block until the collection has finished (its result, or its error, is kept)."""
        if self._thread is not None:
            self._thread.join()

    def result(self) -> tuple[list[Episode], float]:
        """(the episodes, seconds the collection took); re-raises the collection's error."""
        self.wait()
        if self._error is not None:
            raise self._error
        assert self._episodes is not None
        return self._episodes, self._seconds


def checkpoint_due(config: Any, step: int) -> bool:
    """Whether step ``step`` ends with a checkpoint by schedule (the last step always does)."""
    return step >= config.loop.steps or bool(config.checkpoint.every and step % config.checkpoint.every == 0)


def turn_budget_spent(config: Any, env_turns: int) -> bool:
    """Whether ``env_turns`` environment turns use up the run's ``loop.max_env_turns`` (never when it is 0)."""
    return 0 < config.loop.max_env_turns <= env_turns


def _run_steps(
    config: Any,
    executor: StepExecutor,
    stream: Any,
    state: LoopState,
    metrics: Any,
    progress: Any,
    stop_after: int | None,
    run_dir: Path,
) -> tuple[bool, dict[str, Any] | None, int]:
    """The step loop of :func:`run_rl_loop`; returns (stopped early, final eval summary, final step)."""
    last_eval = state.history[-1]["solve_rate"] if state.history else float("nan")
    deadline = time.perf_counter() + 60 * config.loop.max_minutes if config.loop.max_minutes > 0 else None
    ran, after, final_step = 0, None, config.loop.steps
    if turn_budget_spent(config, state.env_turns) and state.step < config.loop.steps:  # resumed a run it ended
        final_step = state.step
        state.turn_budget = {"step": state.step, "planned": config.loop.steps, "turns": config.loop.max_env_turns}
    ahead: CollectAhead | None = None
    try:
        while state.step < final_step:
            step = state.step + 1
            timer = PhaseTimer()
            episodes, extra = _generate(config, executor, stream, step, ahead, timer)
            ahead = None
            # The stream right after this step's mazes is what a checkpoint of this step holds; read it before
            # the next step's mazes are drawn for the collection ahead.
            stream_state = stream.state_dict() if config.loop.overlap_generation else None
            ahead = _collect_ahead(config, executor, stream, step, timer)
            roll, record = _learn(config, executor, step, episodes, ahead, timer)
            record.update(extra)
            env_turns = state.env_turns + int(roll.get("env_turns", 0))
            record["rollout/env_turns_total"] = float(env_turns)
            capped = deadline is not None and time.perf_counter() > deadline and step < config.loop.steps
            spent = turn_budget_spent(config, env_turns) and step < config.loop.steps
            done = step >= config.loop.steps or capped or spent
            if capped:
                record["loop/time_capped"] = 1.0
            if done or (config.eval.every and step % config.eval.every == 0):
                res = _evaluate(config, executor, run_dir, step, metrics, state, record, timer)
                last_eval = res["solve_rate"]
                if done:
                    after = res
            stream_state = stream.state_dict() if stream_state is None else stream_state
            if done or checkpoint_due(config, step):
                _checkpoint(executor, step, stream_state, state, record, env_turns, timer)
            timings = timer.pop()
            record.update(timings)
            record.update(executor.step_extras(step, record, timings, len(episodes)))
            del episodes  # a step collected on-policy must not find this step's rollouts still alive
            metrics.log(step, record, phase="rl")
            state.step, state.stream, state.env_turns = step, stream_state, env_turns
            progress.update(1, train_solve=roll.get("success_rate", 0.0), eval_solve=last_eval)
            ran += 1
            if done:
                final_step = step
                _note_early_end(config, state, step, capped, spent)
                break
            if stop_after is not None and ran >= stop_after:
                return True, None, step
    finally:
        if ahead is not None:  # a run that stops (done by the cap, interrupted, failed) drops the collection
            ahead.wait()
    return False, after, final_step


def _generate(
    config: Any, executor: StepExecutor, stream: Any, step: int, ahead: CollectAhead | None, timer: PhaseTimer
) -> tuple[list[Any], dict[str, float]]:
    """Step ``step``'s episodes (collected ahead during the previous step, else now) and the records that
    collection adds (time spent ahead, the rollouts' staleness)."""
    extra: dict[str, float] = {}
    with timer.phase("generate"):
        if ahead is not None and ahead.step == step:
            episodes, seconds = ahead.result()
            if ahead.concurrent:  # it ran beside the previous update: not part of any step's wall time
                extra = {"time/generate_ahead": seconds}
        else:
            episodes = executor.generate(draw_step_mazes(stream, config), step)
    versions = [e.weights_version for e in episodes if e.weights_version is not None]
    if versions:  # updates the rollouts' weights are behind the policy about to train on them
        extra["rollout/staleness"] = float(step - 1 - min(versions))
    return episodes, extra


def _collect_ahead(
    config: Any, executor: StepExecutor, stream: Any, step: int, timer: PhaseTimer
) -> CollectAhead | None:
    """With ``loop.overlap_generation``, the next step's collection started now (None when off, or when this step
    checkpoints: a checkpoint holds no collection in flight)."""
    if not config.loop.overlap_generation or checkpoint_due(config, step):
        return None
    mazes = draw_step_mazes(stream, config)
    concurrent = bool(getattr(executor, "concurrent_generation", False))
    with contextlib.nullcontext() if concurrent else timer.phase("generate"):  # one after the other: timed
        return CollectAhead(executor, mazes, step + 1, concurrent)


def _learn(
    config: Any, executor: StepExecutor, step: int, episodes: list[Any], ahead: CollectAhead | None, timer: PhaseTimer
) -> tuple[dict[str, float], dict[str, Any]]:
    """Score, update and sync on ``episodes``; returns (rollout metrics, the step's record so far)."""
    with timer.phase("score"):
        roll = rollout_metrics(episodes)
    with timer.phase("update"):
        upd = executor.update(episodes)
        release_freed_memory()
    if ahead is not None:
        with timer.phase("wait_ahead"):  # the engine's weights must not change under the collection
            ahead.wait()
        release_freed_memory()
    with timer.phase("sync"):
        syn = executor.sync(step, config.loop.parity_every > 0 and step % config.loop.parity_every == 0)
    record = {**{f"rollout/{k}": v for k, v in roll.items()}, **{f"train/{k}": v for k, v in upd.items()}, **syn}
    return roll, record


def _evaluate(
    config: Any,
    executor: StepExecutor,
    run_dir: Path,
    step: int,
    metrics: Any,
    state: LoopState,
    record: dict[str, Any],
    timer: PhaseTimer,
) -> dict[str, Any]:
    """Evaluate on the fixed set after step ``step``: its summary, added to the history and to ``record``."""
    with timer.phase("eval"):
        res = evaluate_and_record(executor, config.maze.eval_set, run_dir, step, "rl", metrics, grid=True)
    state.history.append({"step": step, "solve_rate": res["solve_rate"]})
    record.update(eval_fields(res))
    return res


def _checkpoint(
    executor: StepExecutor,
    step: int,
    stream_state: dict[str, Any],
    state: LoopState,
    record: dict[str, Any],
    env_turns: int,
    timer: PhaseTimer,
) -> None:
    """Checkpoint step ``step`` with its record (saved with the checkpoint: a kill before metrics.log loses nothing)."""
    unlogged = {**record, **timer.peek()}
    with timer.phase("checkpoint"):
        executor.checkpoint(
            step,
            stream_state,
            {"before": state.before, "eval_history": state.history, "record": unlogged, "env_turns": env_turns},
        )


def _note_early_end(config: Any, state: LoopState, step: int, capped: bool, spent: bool) -> None:
    """Record in ``state`` why a run ended before ``loop.steps``: the time cap or the environment-turn budget."""
    if capped:
        state.capped = {"step": step, "planned": config.loop.steps, "minutes": config.loop.max_minutes}
    elif spent:
        state.turn_budget = {"step": step, "planned": config.loop.steps, "turns": config.loop.max_env_turns}


def finish_run(
    config: Any,
    executor: StepExecutor,
    state: LoopState,
    after: dict[str, Any],
    final_step: int,
    run_dir: Path,
    manager: Any,
    metrics: Any,
    t_start: float,
) -> RunResult:
    """Final adapter, held-out evaluations, ``eval_results.json``, the case-study table and artifact paths."""
    final_adapter = _save_final_adapter(executor, run_dir)
    heldout = {
        name: evaluate_and_record(executor, name, run_dir, final_step, "heldout") for name in config.maze.heldout_sets
    }
    seconds = time.perf_counter() - t_start
    path = getattr(metrics, "jsonl_path", None)
    records = read_jsonl(path, "rl") if path is not None and Path(path).is_file() else []
    timing = rl_timing([r for r in records if r.get("step", 0) <= final_step])
    extra_results, extra_artifacts = executor.results_extras()
    results = {
        "eval_set": config.maze.eval_set,
        "before_rl": state.before,
        "after_rl": after,
        "heldout": heldout,
        "rl_steps": final_step,
        "planned_rl_steps": config.loop.steps,
        "stopped_by_time_cap": state.capped,
        "env_turns": state.env_turns,
        "stopped_by_turn_budget": state.turn_budget,
        "seconds": seconds,
        "timing": timing,
        "peak_rss_gb": peak_rss_gb(),
        "eval_history": state.history,
        **extra_results,
    }
    write_json(run_dir / "eval_results.json", results)
    if hasattr(metrics, "log_hparams"):
        final = {"eval_solve_rate_after": after["solve_rate"], "eval_spl_after": after["spl"], "rl_steps": final_step}
        if state.before is not None:
            final["eval_solve_rate_before"] = state.before["solve_rate"]
        metrics.log_hparams(_hparams(config), final)
    table = _final_table(config, state, after, final_step, heldout, timing, results["peak_rss_gb"])
    artifacts = {
        "run_dir": str(run_dir),
        **extra_artifacts,
        "final_adapter": str(final_adapter),
        "checkpoints": str(manager.root),
        "metrics_jsonl": str(metrics.jsonl_path),
        "tensorboard": str(run_dir / "tensorboard"),
        "eval_results": str(run_dir / "eval_results.json"),
        "eval_records": str(run_dir / "eval"),
    }
    return RunResult(run_dir, state.before, after, final_step, seconds, artifacts, table)


def _save_final_adapter(executor: StepExecutor, run_dir: Path) -> Path:
    """Write the trained adapter to ``<run_dir>/final_adapter``; a crash leaves the previous one, never an empty one."""
    final_adapter = run_dir / "final_adapter"
    staging = atomic.temp_dir_beside(final_adapter)
    try:
        executor.save_adapter(staging)
        atomic.replace_dir(staging, final_adapter)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return final_adapter


def _final_table(
    config: Any,
    state: LoopState,
    after: dict[str, Any],
    final_step: int,
    heldout: dict[str, Any],
    timing: dict[str, Any],
    peak_rss: float | None,
) -> str:
    """The case-study table of a finished run, headed by why it ended early (if it did), followed by the held-out
    sets, the RL speed and the peak memory."""
    table = case_study_table(state.before, after, config.maze.eval_set)
    if state.capped:
        table = (
            f"STOPPED BY THE TIME CAP (loop.max_minutes={state.capped['minutes']:g}) at RL step {final_step} of "
            f"{state.capped['planned']} planned: this machine ran slower than the recipe assumes, and the result "
            "below is of fewer steps than the recipe's\n\n" + table
        )
    if state.turn_budget:
        table = (
            f"Ended by the budget of environment turns (loop.max_env_turns={state.turn_budget['turns']}) after RL step "
            f"{final_step} of {state.turn_budget['planned']} planned ({state.env_turns} turns)\n\n" + table
        )
    if heldout:
        table += "\n\nHeld-out sets (after RL):\n" + format_table(heldout)
    if timing.get("rl_steps_per_s"):
        phases = ", ".join(f"{k} {v:.2f}" for k, v in timing["phase_mean_seconds"].items() if v >= 0.005)
        table += (
            f"\n\nRL: {timing['rl_steps']} steps in {timing['rl_seconds'] / 60:.1f} min = "
            f"{timing['rl_steps_per_s']:.3f} steps/s; mean seconds per step by phase: {phases}"
        )
    if peak_rss is not None:
        table += f"\nPeak memory (RSS) of this process: {peak_rss:.2f} GiB"
    return table


def _hparams(config: Any) -> dict[str, Any]:
    """The hyperparameters worth comparing runs by (algorithm, rollout, loop, LoRA), for TensorBoard."""
    from runners.config import to_dict

    data = to_dict(config)
    return {"preset": data.get("preset"), **{k: data[k] for k in ("algo", "rollout", "loop", "lora") if k in data}}
