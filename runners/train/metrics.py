"""Metrics: TensorBoard and JSONL always, W&B / MLflow when installed and asked for, a progress bar, phase timers.

Every call to :meth:`MetricsLogger.log` writes one JSON line (``<run_dir>/metrics.jsonl``:
``{"step": n, "phase": "rl", ...}``) and the same scalars to TensorBoard
(``<run_dir>/tensorboard``). A namespaced key (``eval/solve_rate``, ``time/eval``,
``rollout/success_rate``) is one TensorBoard tag whatever the phase, so the before-RL
evaluation (phase ``eval``, step 0) and the later ones (phase ``rl``) form one curve; a plain
key is filed under its phase (``sft/loss``). :meth:`MetricsLogger.log_image` adds images (the
eval grid of solved and failed mazes) and :meth:`MetricsLogger.log_hparams` the run's
hyperparameters with its final metrics. The collapse diagnostics of the algorithm zoo
(``reward_var_mean``, ``zero_var_group_frac``, ``entropy``, ``clip_frac``, ``approx_kl``,
``grad_norm``) come back from ``Algorithm.update`` and are logged under ``train/``; the step
loop adds ``time/<phase>`` seconds for generate, score, update, sync, eval and checkpoint.
"""

from __future__ import annotations

import json
import math
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

PHASES = ("generate", "generate_ahead", "score", "update", "wait_ahead", "sync", "eval", "checkpoint")
"""The phases of one RL step that are timed."""

COLLAPSE_KEYS = (
    "reward_var_mean",
    "zero_var_group_frac",
    "entropy",
    "clip_frac",
    "approx_kl",
    "grad_norm",
    "kept_episode_frac",
)
"""Diagnostics from the algorithm zoo that warn of collapse (reward variance gone, entropy falling, ratios drifting)."""


class PhaseTimer:
    """Accumulates wall-clock seconds per phase: ``with timer.phase("generate"): ...``."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Time the body and add it to phase ``name``."""
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - start

    def peek(self) -> dict[str, float]:
        """The accumulated seconds as ``time/<phase>`` metrics."""
        return {f"time/{k}": v for k, v in self.seconds.items()}

    def pop(self) -> dict[str, float]:
        """The accumulated seconds as ``time/<phase>`` metrics, then reset."""
        out = self.peek()
        self.seconds = {}
        return out


def tb_tag(phase: str, key: str) -> str:
    """The TensorBoard tag of ``key`` logged in ``phase``: namespaced keys keep their name across phases."""
    return key if "/" in key else f"{phase}/{key}"


def _finite_scalars(metrics: dict[str, Any]) -> dict[str, float]:
    out = {}
    for key, value in metrics.items():
        if isinstance(value, bool):
            value = float(value)
        if isinstance(value, (int, float)) and math.isfinite(float(value)):
            out[key] = float(value)
    return out


class MetricsLogger:
    """Fan-out of scalar metrics to JSONL, TensorBoard and optional W&B / MLflow (``sinks``: sink name -> its
    project or experiment name, ``logging.sinks``)."""

    def __init__(
        self,
        run_dir: str | Path,
        *,
        sinks: dict[str, str] | None = None,
        config: dict | None = None,
        tensorboard: bool = True,
        echo=print,
    ):
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.jsonl_path = self.run_dir / "metrics.jsonl"
        self._jsonl = open(self.jsonl_path, "a", buffering=1)
        self.echo = echo
        self.tb = None
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter

                self.tb = SummaryWriter(str(self.run_dir / "tensorboard"))
            except Exception as exc:  # tensorboard missing or broken: JSONL still works
                echo(f"[metrics] TensorBoard disabled: {exc}")
        sinks = sinks or {}
        self._wandb_phases: set[str] = set()
        self.wandb = self._init_wandb(sinks["wandb"], config) if "wandb" in sinks else None
        self.mlflow = self._init_mlflow(sinks["mlflow"], config) if "mlflow" in sinks else None

    def _init_wandb(self, project: str, config: dict | None):
        try:
            import wandb
        except ImportError:
            self.echo(
                "[metrics] logging.sinks names wandb but wandb is not installed (pip install wandb); skipping W&B"
            )
            return None
        return wandb.init(project=project, dir=str(self.run_dir), config=config or {}, name=self.run_dir.name)

    def _init_mlflow(self, project: str, config: dict | None):
        try:
            import mlflow
        except ImportError:
            self.echo(
                "[metrics] logging.sinks names mlflow but mlflow is not installed (pip install mlflow); skipping MLflow"
            )
            return None
        mlflow.set_experiment(project)
        mlflow.start_run(run_name=self.run_dir.name)
        if config:
            flat = {k: v for k, v in _flatten(config).items() if len(str(v)) < 250}
            mlflow.log_params(flat)
        return mlflow

    def discard(self, drop: Callable[[dict], bool]) -> int:
        """Remove JSONL records for which ``drop(record)`` is true (and torn lines); returns how many.

        The file is rewritten atomically. TensorBoard, W&B and MLflow keep what they were sent.
        """
        from runners import atomic

        self._jsonl.close()
        kept, dropped = [], 0
        for line in self.jsonl_path.read_text().splitlines() if self.jsonl_path.exists() else []:
            try:
                record = json.loads(line)
            except ValueError:  # the last line of a killed run may be torn
                record = None
            if isinstance(record, dict) and not drop(record):
                kept.append(line + "\n")
            elif line.strip():
                dropped += 1
        if dropped:
            atomic.write_text(self.jsonl_path, "".join(kept))
        self._jsonl = open(self.jsonl_path, "a", buffering=1)
        return dropped

    def log(self, step: int, metrics: dict[str, Any], phase: str = "rl") -> None:
        """Record ``metrics`` at ``step`` (non-finite or non-numeric values go to JSONL only)."""
        record = {"step": int(step), "phase": phase, "time": time.time(), **metrics}
        self._jsonl.write(json.dumps(record, default=_json_default) + "\n")
        scalars = _finite_scalars(metrics)
        if self.tb is not None:
            for key, value in scalars.items():
                self.tb.add_scalar(tb_tag(phase, key), value, step)
        if self.wandb is not None:
            self._wandb_log(step, scalars, phase)
        if self.mlflow is not None:
            self.mlflow.log_metrics({f"{phase}/{k}".replace("/", "."): v for k, v in scalars.items()}, step=step)

    def log_image(self, tag: str, image: Any, step: int) -> None:
        """Send an HxWx3 uint8 image to TensorBoard under ``tag`` (JSONL keeps scalars only)."""
        if self.tb is not None:
            self.tb.add_image(tag, image, step, dataformats="HWC")

    def log_hparams(self, hparams: dict[str, Any], final: dict[str, float]) -> None:
        """Record the run's hyperparameters with its final metrics in TensorBoard's HPARAMS tab.

        ``hparams`` may be nested (flattened to dotted keys); values other than numbers,
        strings and booleans are written as text. ``final`` keys are prefixed ``hparam/``.
        """
        if self.tb is None:
            return
        flat = {
            k: v if isinstance(v, (int, float, str, bool)) else json.dumps(v, default=str)
            for k, v in _flatten(hparams).items()
        }
        scalars = {f"hparam/{k}": v for k, v in _finite_scalars(final).items()}
        # run_name "." keeps the hparams beside the scalars instead of in a run of their own.
        self.tb.add_hparams(flat, scalars, run_name=".")

    def _wandb_log(self, step: int, scalars: dict[str, float], phase: str) -> None:
        """Log to W&B against a per-phase x-axis (``<phase>/step``).

        W&B's own step must only grow, but RL steps restart at 0 after the SFT stage's; passing
        ``step=`` would make W&B drop every RL point until step 300. ``define_metric`` gives
        each phase its own step metric instead.
        """
        if phase not in self._wandb_phases:
            self.wandb.define_metric(f"{phase}/step")
            self.wandb.define_metric(f"{phase}/*", step_metric=f"{phase}/step")
            self._wandb_phases.add(phase)
        self.wandb.log({**{f"{phase}/{k}": v for k, v in scalars.items()}, f"{phase}/step": step})

    def close(self) -> None:
        """Flush and close every sink."""
        self._jsonl.close()
        if self.tb is not None:
            self.tb.close()
        if self.wandb is not None:
            self.wandb.finish()
        if self.mlflow is not None:
            self.mlflow.end_run()


def _json_default(value: Any) -> Any:
    if hasattr(value, "item"):
        return value.item()
    return str(value)


def _flatten(data: dict, prefix: str = "") -> dict[str, Any]:
    out = {}
    for key, value in data.items():
        if isinstance(value, dict):
            out.update(_flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def read_jsonl(path: str | Path, phase: str | None = None) -> list[dict]:
    """All records of a metrics.jsonl file (optionally only one phase)."""
    records = []
    for line in Path(path).read_text().splitlines():
        if line.strip():
            rec = json.loads(line)
            if phase is None or rec.get("phase") == phase:
                records.append(rec)
    return records


BACKGROUND_PHASES = frozenset({"time/generate_ahead"})
"""Phase timings that ran beside the others (``loop.overlap_generation``): not part of a step's wall time."""


def rl_timing(records: list[dict]) -> dict[str, Any]:
    """Steps/s and the mean seconds of each phase over RL metric records (``time/*`` keys), for results files."""
    if not records:
        return {"rl_steps": 0}
    phases = sorted({k for r in records for k in r if k.startswith("time/")})
    walls = [sum(v for k, v in r.items() if k.startswith("time/") and k not in BACKGROUND_PHASES) for r in records]
    total = sum(walls)
    return {
        "rl_steps": len(records),
        "rl_seconds": round(total, 2),
        "rl_steps_per_s": round(len(records) / total, 4) if total > 0 else None,
        "phase_mean_seconds": {
            k.removeprefix("time/"): round(sum(r.get(k, 0.0) for r in records) / len(records), 4) for k in phases
        },
    }


class Progress:
    """A progress bar with ETA and the latest solve rate (tqdm; silent when disabled)."""

    def __init__(self, total: int, initial: int = 0, desc: str = "RL", enabled: bool = True):
        self.bar = None
        if enabled and total > 0:
            from tqdm.auto import tqdm

            self.bar = tqdm(total=total, initial=initial, desc=desc, unit="step", dynamic_ncols=True)

    def update(self, n: int = 1, **postfix: Any) -> None:
        """Advance and show ``postfix`` (e.g. train solve rate, eval solve rate)."""
        if self.bar is not None:
            self.bar.set_postfix(
                {k: (f"{v:.3f}" if isinstance(v, float) else v) for k, v in postfix.items()}, refresh=False
            )
            self.bar.update(n)

    def write(self, text: str) -> None:
        """Print a line without breaking the bar."""
        if self.bar is not None:
            self.bar.write(text)
        else:
            print(text, flush=True)

    def close(self) -> None:
        """Close the bar."""
        if self.bar is not None:
            self.bar.close()
