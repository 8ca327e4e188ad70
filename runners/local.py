"""The local runner: SFT (if needed), then the RL step loop, every phase in this process.

:func:`train` claims the run dir and builds everything through :mod:`runners.build`; the loop is
:func:`runners.train.loop.run_rl_loop`, shared with the Ray runner; :class:`LocalExecutor` runs
each phase here by calling :mod:`runners.train.steps`.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any, Callable, Sequence

from algos.data import Episode
from runners import build
from runners.config import TrainConfig, to_dict, validate
from runners.config.derived import rollout_config
from runners.train.checkpoint import CheckpointManager, load_checkpoint, save_checkpoint
from runners.train.loop import LoopState, RunResult, loop_state_from, run_rl_loop
from runners.train.metrics import MetricsLogger
from runners.train.run_lock import run_dir_lock
from runners.train.steps import eval_step, play_step_mazes, sync_step, update_step, vision_placeholder_ids
from runners.train.sft_result import start_fingerprint
from runners.train.sync import AdapterSync


def train(
    config: TrainConfig, log: Callable[[str], None] = print, stop_after: int | None = None, command: str | None = None
) -> RunResult:
    """Run SFT (when needed) then RL with the local runner; returns before/after results.

    ``command`` (the command line, when there is one) is recorded in ``run_info.json``.

    ``stop_after`` ends the process's loop after that many RL steps *as if interrupted*
    (the final-checkpoint and final-eval of a finished run are skipped); tests use it to
    check that resuming reproduces an uninterrupted run.
    """
    t_start = time.perf_counter()
    validate(config)
    with run_dir_lock(config.run_dir, command):  # one writer per run dir
        run_dir, manager, resume_from, metrics = build.open_run(config, log, command)
        try:
            return _train(config, run_dir, metrics, log, stop_after, t_start, manager, resume_from)
        finally:
            metrics.close()


def _train(
    config: TrainConfig,
    run_dir: Path,
    metrics: MetricsLogger,
    log: Callable[[str], None],
    stop_after: int | None,
    t_start: float,
    manager: CheckpointManager,
    resume_from: Path | None,
) -> RunResult:
    model_dir, start_adapter = build.rl_start(config, log=log, metrics=metrics)
    generator, policy, algorithm, probe = build.build_training(config, model_dir, start_adapter)
    stream = build.build_stream(config)
    sync_dir = run_dir / "adapter_sync"
    shutil.rmtree(sync_dir, ignore_errors=True)
    state = LoopState()
    if resume_from is not None:
        state = loop_state_from(load_checkpoint(resume_from, policy, algorithm, stream))
        generator.load_adapter(str(resume_from / "adapter"), state.step)
        log(f"[resume] from {resume_from} at RL step {state.step}")
    else:
        log(
            f"[resume] nothing resumed (checkpoint.resume={config.checkpoint.resume}): RL starts at step 0, "
            f"checkpoints go to {manager.root}"
        )
    if probe is not None:  # both sides hold the same weights now: their gap is the engine's, not staleness
        log(f"[parity] calibrated sampler/trainer gap {probe.calibrate(generator, policy)['baseline']:.3g}")
    executor = LocalExecutor(
        config, model_dir, generator, policy, algorithm, probe, AdapterSync(sync_dir, keep=2), manager
    )
    return run_rl_loop(config, executor, stream, state, run_dir, manager, metrics, log, stop_after, t_start)


class LocalExecutor:
    """Every phase of the RL step in this process (the local runner's :class:`runners.train.loop.StepExecutor`)."""

    def __init__(
        self,
        config: TrainConfig,
        model_dir: Path,
        generator: Any,
        policy: Any,
        algorithm: Any,
        probe: Any,
        sync: Any,
        manager: CheckpointManager,
    ):
        self.config, self.model_dir = config, model_dir
        self.generator, self.policy, self.algorithm, self.probe = generator, policy, algorithm, probe
        self.adapter_sync, self.manager = sync, manager
        self.rollout = rollout_config(config)
        self.forbidden = vision_placeholder_ids(model_dir)
        self.description = f"RL ({config.algo.name})"
        self.concurrent_generation = True  # the generator and the policy are separate models (CollectAhead)

    def generate(self, mazes: Sequence[Any], step: int) -> list[Episode]:
        """G rollouts of each maze, seeded by the step (a pure function of the step: resume replays it)."""
        return play_step_mazes(self.generator, mazes, self.config, step, self.rollout)

    def update(self, episodes: list[Episode]) -> dict[str, float]:
        """The algorithm's update (see :func:`update_step`)."""
        return update_step(self.algorithm, episodes, self.forbidden)

    def sync(self, step: int, check_parity: bool) -> dict[str, float]:
        """Publish the adapter as version ``step``, load it into the generator, optionally probe parity."""
        return sync_step(self.policy, self.generator, self.adapter_sync, step, self.probe if check_parity else None)

    def evaluate(self, set_name: str) -> dict[str, Any]:
        """Greedy (or eval.temperature) evaluation of ``set_name``."""
        return eval_step(self.generator, self.config, set_name)

    def checkpoint(self, step: int, stream_state: dict[str, Any], extra: dict[str, Any]) -> None:
        """Checkpoint ``step`` through :func:`save_checkpoint`."""
        save_checkpoint(
            self.manager,
            step,
            self.policy,
            self.algorithm,
            stream_state,
            to_dict(self.config),
            start_fingerprint(self.config),
            extra,
        )

    def save_adapter(self, directory: Path) -> None:
        """The final adapter, PEFT format."""
        self.policy.save_adapter(directory)

    def step_extras(
        self, step: int, record: dict[str, float], timings: dict[str, float], episodes: int
    ) -> dict[str, float]:
        """Nothing beyond the shared record."""
        return {}

    def results_extras(self) -> tuple[dict[str, Any], dict[str, str]]:
        """The model RL started from, among the artifacts."""
        return {}, {"rl_start_model": str(self.model_dir)}


def report(result: RunResult) -> str:
    """The text printed at the end of ``mazegym train``: the table and where artifacts are."""
    lines = [
        "",
        result.table,
        "",
        f"RL steps: {result.steps}   wall time (this invocation): {result.seconds / 60:.1f} min",
        "Artifacts:",
    ]
    lines += [f"  {k:<16} {v}" for k, v in result.artifacts.items()]
    return "\n".join(lines)
