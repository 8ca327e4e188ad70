"""The runners a run may choose (``runner.kind``) and the settings each owns (the ``runner`` section).

The runners themselves (:mod:`runners.local`, :mod:`runners.distributed.ray_runner`) sit above the config in the
layers, so their settings are declared here, beside the rules across keys they own.
"""

from __future__ import annotations

import dataclasses
from typing import Any

LOCAL = "local"
"""This process."""
RAY = "ray"
"""Placement and transport over a Ray cluster (:mod:`runners.distributed.ray_runner`)."""


@dataclasses.dataclass
class RunnerConfig:
    """The settings every runner has (its kind); a runner's own settings extend this class."""

    kind: str = dataclasses.field(default=LOCAL, metadata={"choices": (LOCAL, RAY)})
    """"local" (this process) or "ray" (runners.distributed.ray_runner: placement and transport over a Ray cluster)."""


@dataclasses.dataclass
class LocalRunnerConfig(RunnerConfig):
    """The local runner's settings."""

    num_threads: int = dataclasses.field(default=1, metadata={"range": (0, 1024, False)})
    """torch intra-op threads on CPU (1 is fastest on a shared 2-core machine); 0 = torch's default."""
    update_threads: int = dataclasses.field(default=1, metadata={"range": (1, 64, False)})
    """On CPU: run the update's micro-batches on this many copies of the policy, one thread each
    (:class:`algos.parallel.ThreadReplicas`), and the SFT stage's batches the same way; unlike ``num_threads`` it does
    not slow down when another program holds a core.
    """


@dataclasses.dataclass
class RayRunnerConfig(RunnerConfig):
    """The Ray runner's settings: placement and fault tolerance."""

    num_workers: int = dataclasses.field(default=1, metadata={"range": (1, 100_000, False)})
    """Rollout+train workers; each holds one generation engine and one training rank."""
    num_gpus: int = dataclasses.field(default=0, metadata={"range": (0, 100_000, False)})
    """GPUs the run needs in total (checked by --dry-run against what is visible), split evenly over the workers."""
    address: str | None = dataclasses.field(default=None, metadata={"any": True})
    """Ray cluster to join ("auto": the cluster this process runs in, e.g. inside a Ray job; "ray://host:10001"
    or "host:6379": that cluster); None: $RAY_ADDRESS when set, else a new Ray instance on this machine."""
    cpus_per_worker: float = dataclasses.field(default=1.0, metadata={"range": (0.0, None, True)})
    """CPUs reserved by each worker's placement-group bundle."""
    placement_strategy: str = dataclasses.field(
        default="PACK", metadata={"choices": ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD")}
    )
    """Placement-group strategy: PACK (fill nodes first), SPREAD, STRICT_PACK or STRICT_SPREAD."""
    dist_backend: str = dataclasses.field(default="auto", metadata={"choices": ("auto", "gloo", "nccl")})
    """torch.distributed backend of the training ranks: auto (nccl with GPUs, gloo otherwise), gloo or nccl."""
    max_restarts: int = dataclasses.field(default=3, metadata={"range": (0, 10_000, False)})
    """Rebuild the worker group after a worker dies at most this many times (0 = fail at once)."""
    collective_timeout_s: float = dataclasses.field(default=600.0, metadata={"range": (0.0, None, True)})
    """A collective waiting longer than this fails (a hung peer becomes an error and a restart)."""
    worker_threads: int = dataclasses.field(default=1, metadata={"range": (1, 1024, False)})
    """torch intra-op threads per worker (OMP_NUM_THREADS inside the actor)."""
    export_metrics: bool = dataclasses.field(default=True, metadata={"any": True})
    """Also export training metrics through ray.util.metrics (Prometheus / Grafana)."""
    sleep_engine_during_update: bool = dataclasses.field(default=True, metadata={"any": True})
    """GPU + vLLM: put the engine to sleep while the trainer updates, wake it for the sync."""


def check_ray(config: Any) -> list[str]:
    """The Ray runner's rule across keys: every worker plays at least one maze group per step."""
    if config.loop.mazes_per_step < config.runner.num_workers:
        return [
            f"loop.mazes_per_step={config.loop.mazes_per_step} < runner.num_workers={config.runner.num_workers}: "
            "every worker needs at least one maze group per step"
        ]
    return []


RUNNERS: dict[str, type[RunnerConfig]] = {LOCAL: LocalRunnerConfig, RAY: RayRunnerConfig}
"""Each runner's settings class, by kind."""
RUNNER_RULES = {RAY: check_ray}
"""Each runner's rules across keys (``rule(config) -> problems``), by kind."""


def torch_threads(runner: RunnerConfig) -> int:
    """torch intra-op threads a process of this run uses on CPU (0 = torch's default): the local runner's
    ``num_threads``, a Ray worker's ``worker_threads``."""
    if isinstance(runner, RayRunnerConfig):
        return runner.worker_threads
    return runner.num_threads if isinstance(runner, LocalRunnerConfig) else 0


def update_threads(runner: RunnerConfig) -> int:
    """Policy copies an update (and SFT) runs on, one thread each: the local runner's ``update_threads``, else 1."""
    return runner.update_threads if isinstance(runner, LocalRunnerConfig) else 1
