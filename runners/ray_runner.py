"""The distributed runner: the local runner's step loop, spread over a Ray cluster.

It takes the same :class:`~runners.config.TrainConfig` as the local runner and calls the same
rollout, update, sync, eval and checkpoint code; it only adds placement and transport.

Placement. One placement group with one bundle per worker (``{"CPU": c, "GPU": g}``); each
bundle hosts one :class:`RolloutTrainWorker` actor that holds *both* a generation engine (HF or
vLLM) and one FSDP2 training rank (its shard of the policy and of the optimizer state),
colocated on the same device.

One step (driver: :func:`train`)::

    generate   every worker plays its share of the step's maze groups  -> episodes (object store)
    update     every rank updates on its own share; the policy is sharded with FSDP2 (gloo on CPU,
               nccl on GPU) and the ranks run the same passes in lockstep (padding where a rank
               has fewer forwards, micro-batches or optimizer steps; runners.fsdp.Lockstep)
    sync       every rank joins the all-gather of the adapter; rank 0 publishes it to the shared
               sync dir as version v (AdapterSync: write, then flip the LATEST marker); every
               engine loads version v; barrier; the parity probe checks sampler and trainer agree
               (the trainer side is a collective forward, run on every rank)
    eval       the fixed eval mazes are split across workers, results merged on the driver
    checkpoint adapter and optimizer state are gathered in full (collective), rank 0 writes them in
               the local runner's format, so a run resumes on any number of workers (or locally)

Data parallelism is FSDP2 (:mod:`runners.fsdp`): one ``fully_shard`` per decoder layer, then the
root; frozen base weights, LoRA weights, gradients and AdamW state are sharded across ranks.
FSDP2 all-gathers in every forward and reduce-scatters in every backward, so every rank must
run the same passes, while ranks hold episodes with different numbers of turns (and
zero-variance filtering can leave a rank with nothing): :class:`runners.fsdp.Lockstep` runs
synchronisation rounds before every forward and optimizer step and has the short ranks run
padding passes (loss x 0, exact zero gradients). The gradient of each optimizer step is the
mean over the ranks that had data for it, then clipped by its global norm; with one worker the
update is the local runner's, bit for bit.

Before RL, the SFT stage (when enabled and no SFT checkpoint exists) runs on the driver with
the local runner's code; on GPUs with vLLM each engine sleeps during the update and wakes for
the sync. Entry points: ``mazegym train runner.kind=ray ...`` or ``python -m runners.ray_runner``.

Fault tolerance. If a worker actor dies (its process is killed, its node lost), the driver
tears the worker group down, builds a new one and resumes from the latest checkpoint, up to
``RayConfig.max_restarts`` times; at most the steps since that checkpoint are repeated.

Observability. The JSONL/TensorBoard logs of the local runner, plus every metric exported
through ``ray.util.metrics`` (Prometheus names in :data:`PROMETHEUS_METRICS`) for the Grafana
dashboard in ``deploy/grafana``.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass
from typing import Any, Iterator

# ----------------------------------------------------------------------------- config


@dataclass
class RayConfig:
    """Placement and fault-tolerance settings of the Ray runner (the training config is shared).

    Built by :func:`ray_config_from`: ``num_workers`` from ``runner.num_workers``, ``gpus_per_worker``
    from ``runner.num_gpus`` (split evenly, CUDA only), every other field from
    ``runner.options={"max_restarts": 3, ...}``.
    """

    address: str | None = None
    """Ray cluster to join ("auto": the cluster this process runs in, e.g. inside a Ray job); None: ray.init() defaults
    ($RAY_ADDRESS, else a new local instance).
    """
    num_workers: int = 2
    """Worker actors = placement-group bundles = training ranks = generation engines."""
    cpus_per_worker: float = 1.0
    """CPUs reserved by each bundle."""
    gpus_per_worker: float = 0.0
    """GPUs reserved by each bundle (1 for the colocated vLLM + trainer layout; 0 on CPU)."""
    placement_strategy: str = "PACK"
    """Placement-group strategy: PACK (fill nodes first), SPREAD, STRICT_PACK or STRICT_SPREAD."""
    backend: str = "auto"
    """torch.distributed backend: auto (nccl with GPUs, gloo otherwise), gloo or nccl."""
    max_restarts: int = 3
    """Rebuild the worker group after a worker dies at most this many times (0 = fail at once)."""
    collective_timeout_s: float = 600.0
    """A collective waiting longer than this fails (a hung peer becomes an error and a restart)."""
    worker_threads: int = 1
    """torch intra-op threads per worker (OMP_NUM_THREADS inside the actor)."""
    export_metrics: bool = True
    """Also export training metrics through ray.util.metrics (Prometheus / Grafana)."""
    sleep_engine_during_update: bool = True
    """GPU + vLLM: put the engine to sleep while the trainer updates, wake it for the sync."""


# ------------------------------------------------------------------------ process group


def init_process_group(
    rank: int, world_size: int, master_addr: str, master_port: int, backend: str, timeout_s: float
) -> str:
    """Join the training process group over TCP; returns the backend actually used."""
    import datetime

    import torch
    import torch.distributed as dist

    if backend == "auto":
        backend = "nccl" if torch.cuda.is_available() else "gloo"
    dist.init_process_group(
        backend=backend,
        init_method=f"tcp://{master_addr}:{master_port}",
        rank=rank,
        world_size=world_size,
        timeout=datetime.timedelta(seconds=timeout_s),
    )
    return backend


def split_evenly(items: list[Any], parts: int) -> list[list[Any]]:
    """Split ``items`` into ``parts`` contiguous chunks whose sizes differ by at most one."""
    if parts < 1:
        raise ValueError(f"parts must be >= 1, got {parts}")
    base, extra = divmod(len(items), parts)
    out, start = [], 0
    for i in range(parts):
        size = base + (1 if i < extra else 0)
        out.append(items[start : start + size])
        start += size
    return out


# ------------------------------------------------------------------------ Prometheus export

PROMETHEUS_METRICS = {
    "ray_mazegym_train": "gauge: every scalar training/eval metric, tag key=<metric name>",
    "ray_mazegym_phase_seconds": "gauge: seconds spent in each phase of the last step, tag phase",
    "ray_mazegym_step": "gauge: the last completed step",
    "ray_mazegym_adapter_version": "gauge: adapter version the engines sample with",
    "ray_mazegym_steps_total": "counter: steps completed (repeated steps after a restart count again)",
    "ray_mazegym_episodes_total": "counter: training episodes generated",
    "ray_mazegym_worker_restarts_total": "counter: worker-group rebuilds after a worker died",
}
"""Prometheus names (Ray adds the ``ray_`` prefix and ``_total`` to counters); every series has a
``run`` tag. The Grafana dashboard in ``deploy/grafana`` queries exactly these."""


class PrometheusExporter:
    """Mirrors the driver's metrics into ``ray.util.metrics`` so Prometheus can scrape them.

    Ray exports them on every node's metrics port (``ray start --metrics-export-port``;
    KubeRay: 8080), where Prometheus, and the Grafana dashboard, pick them up.
    """

    def __init__(self, run_name: str):
        from ray.util.metrics import Counter, Gauge

        self.tags = {"run": run_name}
        self.train = Gauge("mazegym_train", "Training and eval metrics of the Ray runner", tag_keys=("run", "key"))
        self.phase = Gauge("mazegym_phase_seconds", "Seconds per phase of the last step", tag_keys=("run", "phase"))
        self.step = Gauge("mazegym_step", "Last completed step", tag_keys=("run",))
        self.version = Gauge("mazegym_adapter_version", "Adapter version used by the engines", tag_keys=("run",))
        self.steps = Counter("mazegym_steps", "Steps completed", tag_keys=("run",))
        self.episodes = Counter("mazegym_episodes", "Training episodes generated", tag_keys=("run",))
        self.restarts = Counter("mazegym_worker_restarts", "Worker-group rebuilds", tag_keys=("run",))

    def record_step(
        self, step: int, metrics: dict[str, float], timings: dict[str, float], episodes: int, version: int
    ) -> None:
        """Export one step's metrics (non-finite values are skipped: Prometheus gauges hate NaN)."""
        for key, value in metrics.items():
            if isinstance(value, (int, float)) and math.isfinite(value):
                self.train.set(float(value), tags={**self.tags, "key": key})
        for phase, seconds in timings.items():
            self.phase.set(float(seconds), tags={**self.tags, "phase": phase})
        self.step.set(step, tags=self.tags)
        self.version.set(version, tags=self.tags)
        self.steps.inc(1.0, tags=self.tags)
        if episodes:
            self.episodes.inc(float(episodes), tags=self.tags)

    def record_restart(self) -> None:
        """Count one rebuild of the worker group."""
        self.restarts.inc(1.0, tags=self.tags)


# ------------------------------------------------------------------------ worker group (driver)


class WorkerFailure(RuntimeError):
    """A worker actor died (or a collective with a dead peer failed): rebuild and resume."""


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def worker_address() -> tuple[str, int]:
    """This process's node IP and a free TCP port (rank 0 hosts the process-group rendezvous)."""
    import ray

    return ray.util.get_node_ip_address(), _free_port()


class WorkerGroup:
    """One placement group with one bundle per worker, and one worker actor per bundle."""

    def __init__(self, ray_cfg: RayConfig, worker_cls: type, init_args: tuple):
        import ray
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        self.ray_cfg = ray_cfg
        bundle = {"CPU": ray_cfg.cpus_per_worker}
        if ray_cfg.gpus_per_worker > 0:
            bundle["GPU"] = ray_cfg.gpus_per_worker
        self.pg = placement_group(
            [dict(bundle) for _ in range(ray_cfg.num_workers)], strategy=ray_cfg.placement_strategy
        )
        try:
            ray.get(self.pg.ready(), timeout=300)
        except Exception as exc:
            ray.util.remove_placement_group(self.pg)
            raise RuntimeError(
                f"could not reserve {ray_cfg.num_workers} bundles of {bundle} ({ray_cfg.placement_strategy}); "
                f"cluster resources: {ray.cluster_resources()}. Lower ray num_workers / cpus_per_worker / "
                "gpus_per_worker."
            ) from exc
        remote_cls = ray.remote(worker_cls)
        env = {
            "OMP_NUM_THREADS": str(ray_cfg.worker_threads),
            "MKL_NUM_THREADS": str(ray_cfg.worker_threads),
            "TOKENIZERS_PARALLELISM": "false",
        }
        self.actors = [
            remote_cls.options(
                num_cpus=ray_cfg.cpus_per_worker,
                num_gpus=ray_cfg.gpus_per_worker,
                max_restarts=0,
                runtime_env={"env_vars": env},
                scheduling_strategy=PlacementGroupSchedulingStrategy(
                    placement_group=self.pg, placement_group_bundle_index=i
                ),
            ).remote(i, ray_cfg.num_workers, *init_args)
            for i in range(ray_cfg.num_workers)
        ]
        try:
            master_addr, master_port = self.call_rank0("address")
            self.setup_info = self.call("setup", master_addr, master_port)
        except BaseException:
            self.shutdown()  # do not leak actors or the placement group when setup fails
            raise

    def call(
        self, method: str, *args: Any, per_rank: list[tuple] | None = None, timeout: float | None = None
    ) -> list[Any]:
        """Call ``method`` on every worker (same args, or ``per_rank[i]`` for rank i); their results in rank order.

        A dead actor, or an error in any worker while some actor is dead, raises :class:`WorkerFailure`.
        """
        import ray

        refs = [
            getattr(a, method).remote(*(per_rank[i] if per_rank is not None else args))
            for i, a in enumerate(self.actors)
        ]
        with _worker_failures(self, method):
            return ray.get(refs, timeout=timeout)

    def call_rank0(self, method: str, *args: Any) -> Any:
        """Call ``method`` on rank 0 only."""
        import ray

        with _worker_failures(self, method):
            return ray.get(getattr(self.actors[0], method).remote(*args))

    def any_dead(self, timeout: float = 10.0) -> bool:
        """True when some worker does not answer a ping."""
        import ray

        for actor in self.actors:
            try:
                ray.get(actor.ping.remote(), timeout=timeout)
            except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):
                return True
        return False

    def shutdown(self) -> None:
        """Kill every actor and free the placement group (safe to call twice)."""
        import ray

        for actor in self.actors:
            try:
                ray.kill(actor, no_restart=True)
            except Exception:
                pass
        try:
            ray.util.remove_placement_group(self.pg)
        except Exception:
            pass
        self.actors = []


# ------------------------------------------------------------------------------ the worker


class RolloutTrainWorker:
    """One bundle: a generation engine and one FSDP2 training rank, colocated on the same device.

    Every phase calls the local runner's functions (:mod:`runners.local`); this class only adds
    the process group, the sharding and lockstep of :mod:`runners.fsdp`, the split of work, and
    adapter transport through the shared sync dir. ``update``, ``publish``, ``load_published``,
    ``save_checkpoint`` and ``save_adapter`` run collectives: the driver calls them on every rank.
    """

    def __init__(
        self,
        rank: int,
        world_size: int,
        config_data: dict,
        ray_cfg: RayConfig,
        model_dir: str,
        start_adapter: str | None,
        resume_from: str | None,
    ):
        self.rank = rank
        self.world_size = world_size
        self.config_data = config_data
        self.ray_cfg = ray_cfg
        self.model_dir = model_dir
        self.start_adapter = start_adapter
        self.resume_from = resume_from

    def address(self) -> tuple[str, int]:
        """(node IP, free port): rank 0's answer is the process-group rendezvous."""
        return worker_address()

    def ping(self) -> int:
        """Liveness check; returns this worker's process id."""
        import os

        return os.getpid()

    def setup(self, master_addr: str, master_port: int) -> dict[str, Any]:
        """Join the process group, build engine + policy + algorithm exactly like the local runner, resume."""
        import datetime
        import os
        from pathlib import Path

        import torch.distributed as dist

        from mazegym.evalsets import MazeStream
        from runners import config as cfgmod
        from runners import fsdp, local

        self.config = cfgmod.from_dict(self.config_data)
        c = self.config
        local.set_threads(c)
        self.backend = init_process_group(
            self.rank,
            self.world_size,
            master_addr,
            master_port,
            self.ray_cfg.backend,
            self.ray_cfg.collective_timeout_s,
        )
        adapter = Path(self.start_adapter) if self.start_adapter else None
        # The same construction as runners.local._train (identical LoRA init on every rank), with
        # the policy sharded by FSDP2 before the optimizer is built over its (DTensor) parameters.
        self.generator, self.policy, self.algorithm, self.probe = local.build_training(
            c,
            Path(self.model_dir),
            adapter,
            generator=self._build_generator(Path(self.model_dir), adapter),
            prepare_policy=fsdp.shard_policy,
        )
        # Rounds are tiny CPU all-reduces: on nccl they get a gloo group of their own.
        rounds = (
            dist.new_group(backend="gloo", timeout=datetime.timedelta(seconds=self.ray_cfg.collective_timeout_s))
            if self.backend == "nccl"
            else None
        )
        self.lockstep = fsdp.Lockstep(self.policy, self.algorithm, group=rounds)
        self.rollout = local.rollout_config(c)
        # As on the local runner: sampled image placeholders never reach the trainer (a failing
        # forward on one rank would leave the others waiting in a collective).
        self.forbidden = local.vision_placeholder_ids(Path(self.model_dir))
        state: dict[str, Any] = {}
        if self.resume_from:
            stream = MazeStream(
                size=c.maze.size,
                seed=c.maze.stream_seed,
                generator=c.maze.generator,
                max_optimal_moves=c.rollout.max_moves,
            )
            # A full (gathered) checkpoint, whatever the worker count that wrote it: every rank keeps its shards.
            state = local.load_checkpoint(Path(self.resume_from), self.policy, self.algorithm, stream)
            fsdp.shard_optimizer_state(self.algorithm.optimizer)
            self.generator.load_adapter(str(Path(self.resume_from) / "adapter"), int(state["step"]))
        return {
            "rank": self.rank,
            "pid": os.getpid(),
            "backend": self.backend,
            "node": worker_address()[0],
            "resumed_step": int(state.get("step", 0)),
        }

    def _build_generator(self, model_dir: Any, adapter: Any) -> Any:
        from runners import local

        c = self.config
        if c.loop.backend == "vllm" and c.model.device.startswith("cuda") and self.ray_cfg.sleep_engine_during_update:
            from runners.generation.vllm import VLLMGenerator

            generator = VLLMGenerator(
                str(model_dir),
                max_lora_rank=c.lora.rank,
                enable_sleep_mode=True,
                gpu_memory_utilization=c.runner.vllm_gpu_memory_utilization,
            )
            if adapter is not None:
                generator.load_adapter(str(adapter), 0)
            return generator
        return local.build_generator(c, model_dir, adapter, version=0)

    # ------------------------------------------------------------------ phases
    def generate(self, mazes: list, step: int, offset: int) -> list:
        """Play this rank's maze groups; ids and env seeds match what the local runner gives them."""
        from runners import local

        return local.play_step_mazes(self.generator, mazes, self.config, step, self.rollout, offset)

    def update(self, episodes: list) -> dict[str, float]:
        """The algorithm's update on this rank's episodes, in lockstep with every other rank (FSDP2)."""
        from runners import local

        self._engine_sleep()
        try:
            with self.lockstep.update():
                metrics = local.update_step(self.algorithm, episodes, self.forbidden)
        finally:
            self._engine_wake()
        metrics[PADDING_KEY] = float(sum(self.lockstep.padding.values()))
        return metrics

    def publish(self, sync_dir: str, version: int) -> dict[str, float]:
        """Every rank: gather the full adapter; rank 0 writes it as ``version`` to the sync dir."""
        import time

        from runners import fsdp
        from runners.sync import AdapterSync

        t0 = time.perf_counter()
        adapter = fsdp.gather_adapter(self.policy)
        if self.rank == 0:
            AdapterSync(sync_dir, keep=2).publish(fsdp.GatheredAdapter(self.policy, adapter), version)
        return {"sync/publish_s": time.perf_counter() - t0}

    def load_published(self, sync_dir: str, version: int, check_parity: bool) -> dict[str, float]:
        """Every rank: load the published adapter into the engine, barrier, optional parity probe."""
        import time

        import torch.distributed as dist

        from runners.parity import trainer_logprobs
        from runners.sync import AdapterSync

        t0 = time.perf_counter()
        sync = AdapterSync(sync_dir, keep=2)
        latest = sync.committed()  # a broken adapter is refused with the reason, never loaded
        if latest is None or latest[0] != version:
            raise RuntimeError(
                f"rank {self.rank}: sync dir {sync_dir} holds version {latest and latest[0]}, expected {version}; "
                "is it on a filesystem every worker shares (e.g. /shared)?"
            )
        self.generator.load_adapter(str(latest[1]), version)
        out = {"sync/load_s": time.perf_counter() - t0}
        dist.barrier()
        if check_parity and self.probe is not None:
            # The trainer's forwards are collectives: every rank computes both sides (adapter and
            # base model) up front, so a failing check never runs an unmatched forward.
            p = self.probe
            trained = trainer_logprobs(self.policy, p.prompt_ids, p.response_ids, p.images)
            base = trainer_logprobs(self.policy, p.prompt_ids, p.response_ids, p.images, reference=True)
            out["sync/parity_mean_abs"] = p.check(
                self.generator, version=version, trainer_fn=lambda *_: trained, reference_fn=lambda *_: base
            )["mean_abs"]
        out["sync/version"] = float(self.generator.adapter_version)
        return out

    def evaluate(self, set_name: str, start: int, stop: int) -> list:
        """Play mazes ``[start, stop)`` of eval set ``set_name`` (seeds as in the whole-set evaluation)."""
        from mazegym.evalsets import load_eval_set
        from runners import local
        from runners.evaluate import eval_rollout_config
        from runners.rollout import evaluate_mazes, play_episodes

        c = self.config
        mazes = load_eval_set(set_name)[start:stop]
        if not mazes:
            return []
        rollout = eval_rollout_config(local.rollout_config(c), set_name, c.eval.temperature)
        with local.vision_iterations_for(self.generator, c, set_name):
            if c.eval.temperature <= 0:
                return evaluate_mazes(self.generator, mazes, rollout, seed=start)
            return play_episodes(self.generator, mazes, rollout, 1, seed=start, keep_images=False)

    def save_checkpoint(
        self, root: str, keep: int, step: int, stream_state: dict, extra: dict, run_id: str | None = None
    ) -> str | None:
        """Every rank: gather adapter and optimizer state; rank 0 checkpoints them with its RNGs (valid
        for any worker count, and for the local runner) as part of run ``run_id``. Returns the
        checkpoint path on rank 0."""
        from pathlib import Path

        from runners import fsdp, local
        from runners.checkpoint import CheckpointManager

        adapter = fsdp.gather_adapter(self.policy)
        trainer_state = fsdp.gather_algorithm_state(self.algorithm)
        if self.rank != 0:
            return None
        manager = CheckpointManager(Path(root), keep=keep, log=lambda m: None, run_id=run_id)
        return str(
            local.save_checkpoint(
                manager,
                step,
                fsdp.GatheredAdapter(self.policy, adapter),
                fsdp.GatheredAlgorithmState(trainer_state),
                stream_state,
                self.config,
                extra,
            )
        )

    def save_adapter(self, directory: str) -> str | None:
        """Every rank: gather the adapter; rank 0 writes it (PEFT format) and returns the path."""
        from runners import fsdp

        adapter = fsdp.gather_adapter(self.policy)
        if self.rank != 0:
            return None
        return str(fsdp.save_full_adapter(self.policy, adapter, directory))

    def close(self) -> None:
        """Leave the process group."""
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()

    # ------------------------------------------------------------------ GPU engine memory
    def _engine_sleep(self) -> None:
        llm = getattr(self.generator, "llm", None)
        if llm is not None and self.config.model.device.startswith("cuda") and self.ray_cfg.sleep_engine_during_update:
            llm.sleep(level=1)

    def _engine_wake(self) -> None:
        llm = getattr(self.generator, "llm", None)
        if llm is not None and self.config.model.device.startswith("cuda") and self.ray_cfg.sleep_engine_during_update:
            llm.wake_up()


# ------------------------------------------------------------------------------ the driver


def ray_config_from(config: Any) -> RayConfig:
    """RayConfig from ``config.runner``: num_workers, GPUs split evenly, then ``runner.options``."""
    import dataclasses
    import typing

    from runners.config import ConfigError, coerce

    rc = RayConfig(num_workers=int(config.runner.num_workers))
    if config.model.device.startswith("cuda") and config.runner.num_gpus > 0:
        rc.gpus_per_worker = config.runner.num_gpus / max(rc.num_workers, 1)
    valid = [f.name for f in dataclasses.fields(RayConfig)]
    hints = typing.get_type_hints(RayConfig)
    for key, value in dict(config.runner.options).items():
        if key not in valid:
            raise ConfigError(f"unknown runner.options key {key!r}; valid keys: {', '.join(valid)}")
        setattr(rc, key, coerce(value, hints[key], f"runner.options.{key}"))
    if rc.num_workers < 1:
        raise ConfigError(f"runner.num_workers must be >= 1, got {rc.num_workers}")
    if rc.placement_strategy not in ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"):
        raise ConfigError(
            f"runner.options placement_strategy={rc.placement_strategy!r}; use PACK, SPREAD, STRICT_PACK or "
            "STRICT_SPREAD"
        )
    if config.loop.mazes_per_step < rc.num_workers:
        raise ConfigError(
            f"loop.mazes_per_step={config.loop.mazes_per_step} < runner.num_workers={rc.num_workers}: "
            "every worker needs at least one maze group per step"
        )
    return rc


PADDING_KEY = "fsdp_padding_passes"
"""Per-rank update metric: padding passes the rank ran (:class:`runners.fsdp.Lockstep`); the
driver logs the sum as ``ray/padding_passes``, not as a training metric."""


def merge_update_metrics(per_rank: list[dict[str, float]]) -> dict[str, float]:
    """Combine per-rank update metrics: counts are summed, optimizer steps maxed (every rank takes
    the max: lockstep), the rest averaged (``skipped``: fraction of ranks that had nothing to train
    on). The padding count (:data:`PADDING_KEY`) is left out: :func:`padding_passes` reports it."""
    summed = {"num_turns", "num_tokens"}
    maxed = {"optimizer_steps"}
    keys = [k for k in per_rank[0] if k != PADDING_KEY]
    out = {}
    for key in keys:
        values = [m[key] for m in per_rank if key in m]
        if key in summed:
            out[key] = float(sum(values))
        elif key in maxed:
            out[key] = float(max(values))
        else:
            out[key] = float(sum(values) / len(values))
    return out


def padding_passes(per_rank: list[dict[str, float]]) -> float:
    """Padding passes run by all ranks in one update (the cost of lockstep)."""
    return float(sum(m.get(PADDING_KEY, 0.0) for m in per_rank))


def _evaluate(group: WorkerGroup, set_name: str, temperature: float, rollout: Any) -> dict[str, Any]:
    """Evaluate ``set_name`` with the mazes split over the workers; same summary and records as evaluate_set."""
    from mazegym.evalsets import load_eval_set
    from runners.evaluate import eval_summary

    n = len(load_eval_set(set_name))
    bounds = split_evenly(list(range(n)), len(group.actors))
    per_rank = [(set_name, b[0] if b else 0, b[-1] + 1 if b else 0) for b in bounds]
    episodes = [ep for part in group.call("evaluate", per_rank=per_rank) for ep in part]
    return eval_summary(set_name, episodes, rollout, temperature)


def train(
    config: Any,
    log: Any = print,
    stop_after: int | None = None,
    ray_cfg: RayConfig | None = None,
    command: str | None = None,
) -> Any:
    """Run SFT (when needed, on the driver) then RL on a Ray cluster; returns a local.RunResult.

    Same config, same phases, same logs as :func:`runners.local.train`; ``stop_after`` ends
    the loop after that many steps as if interrupted (for resume tests); ``command`` is recorded
    in ``run_info.json``.
    """
    import shutil
    import time
    from pathlib import Path

    import ray

    from runners import atomic
    from runners import config as cfgmod
    from runners import local
    from runners.checkpoint import CheckpointManager
    from runners.metrics import MetricsLogger
    from runners.report import record_invocation

    t_start = time.perf_counter()
    cfgmod.validate(config)
    ray_cfg = ray_cfg or ray_config_from(config)
    if not ray.is_initialized():
        ray.init(address=ray_cfg.address, log_to_driver=True)
    run_dir = Path(config.run_dir).resolve()
    config.run_dir = str(run_dir)
    manager = CheckpointManager(
        run_dir / "checkpoints", keep=config.checkpoint.keep, log=log, required=local.checkpoint_files(config)
    )
    resume_from = manager.start_run(config.checkpoint.resume)  # may refuse: before anything in run_dir changes
    run_dir.mkdir(parents=True, exist_ok=True)
    atomic.write_json(run_dir / "config.json", cfgmod.to_dict(config))
    record_invocation(run_dir, command)
    metrics = MetricsLogger(
        run_dir,
        wandb=config.logging.wandb,
        mlflow=config.logging.mlflow,
        project=config.logging.project,
        config=cfgmod.to_dict(config),
    )
    exporter = PrometheusExporter(run_dir.name) if ray_cfg.export_metrics else None
    try:
        model_dir, start_adapter = local.rl_start(config, log=log, metrics=metrics)
        from runners.loop import LoopState

        state = LoopState()
        while True:
            group = None
            try:
                group = _start_group(config, ray_cfg, model_dir, start_adapter, resume_from, state, run_dir, log)
                result = _loop(group, config, run_dir, manager, metrics, exporter, state, log, stop_after, t_start)
                group.call("close")
                return result
            except WorkerFailure as exc:
                state.restarts += 1
                if exporter is not None:
                    exporter.record_restart()
                if state.restarts > ray_cfg.max_restarts:
                    raise RuntimeError(
                        f"a worker died and runner max_restarts={ray_cfg.max_restarts} is used up: {exc}"
                    ) from exc
                resume_from = manager.latest_valid()
                log(
                    f"[ray] worker failure ({exc}); restart {state.restarts}/{ray_cfg.max_restarts} "
                    f"from {resume_from or 'the start'}"
                )
                metrics.log(state.step, {"ray/restarts": float(state.restarts)}, phase="ray")
            finally:
                if group is not None:
                    group.shutdown()
    finally:
        metrics.close()
        shutil.rmtree(run_dir / "adapter_sync", ignore_errors=True)


def _start_group(
    config: Any,
    ray_cfg: RayConfig,
    model_dir: Any,
    start_adapter: Any,
    resume_from: Any,
    state: Any,
    run_dir: Any,
    log: Any,
) -> WorkerGroup:
    """Build the worker group; resume every rank from ``resume_from`` (or start fresh)."""
    import json
    import shutil

    from runners import atomic
    from runners import config as cfgmod

    # Adapter versions restart from the checkpoint's step: clear versions a dead group left behind.
    shutil.rmtree(run_dir / "adapter_sync", ignore_errors=True)
    init_args = (
        cfgmod.to_dict(config),
        ray_cfg,
        str(model_dir),
        str(start_adapter) if start_adapter else None,
        str(resume_from) if resume_from else None,
    )
    group = WorkerGroup(ray_cfg, RolloutTrainWorker, init_args)
    info = group.setup_info
    atomic.write_json(run_dir / "ray_workers.json", info)
    if resume_from is not None:
        saved = json.loads((resume_from / "state.json").read_text())
        state.step = int(saved["step"])
        state.before = saved.get("before")
        state.history = saved.get("eval_history", [])
        state.record = saved.get("record")
        state.stream = saved["stream"]
        log(f"[resume] from {resume_from} at RL step {state.step} on {ray_cfg.num_workers} workers")
    else:
        state.step = 0
        state.stream = None
        state.record = None
    log(f"[ray] {ray_cfg.num_workers} workers ({info[0]['backend']}), pids {[i['pid'] for i in info]}")
    return group


def _loop(
    group: WorkerGroup,
    config: Any,
    run_dir: Any,
    manager: Any,
    metrics: Any,
    exporter: Any,
    state: Any,
    log: Any,
    stop_after: int | None,
    t_start: float,
) -> Any:
    """The shared step loop (:func:`runners.loop.run_rl_loop`) with each phase spread over the worker group."""
    from mazegym.evalsets import MazeStream
    from runners.loop import run_rl_loop

    stream = MazeStream(
        size=config.maze.size,
        seed=config.maze.stream_seed,
        generator=config.maze.generator,
        max_optimal_moves=config.rollout.max_moves,
    )
    if state.stream is not None:
        stream.load_state_dict(state.stream)
    backend = RayBackend(group, config, run_dir, manager, exporter, state)
    return run_rl_loop(config, backend, stream, state, run_dir, manager, metrics, log, stop_after, t_start)


class RayBackend:
    """The phases of one RL step fanned out to the worker group (the Ray runner's :class:`runners.loop.StepBackend`).

    Generation: the step's mazes are split evenly and each rank plays its slice (group ids and
    seeds as if one process played them all). Update: each rank trains on the episodes it
    generated (the object refs resolve locally, nothing is copied back), in FSDP2 lockstep.
    Sync: rank 0 publishes the gathered adapter, every engine loads it, barrier, optional parity.
    """

    def __init__(self, group: WorkerGroup, config: Any, run_dir: Any, manager: Any, exporter: Any, state: Any):
        self.group, self.config, self.manager, self.exporter, self.state = group, config, manager, exporter, state
        self.sync_dir = str(run_dir / "adapter_sync")
        self.workers = len(group.actors)
        self.description = f"RL ({config.algo.name}, ray x{self.workers})"
        self._refs: list = []
        self._per_rank_update: list[dict[str, float]] = []

    def generate(self, mazes: Any, step: int) -> list:
        """Each rank plays its slice of the step's mazes."""
        chunks = split_evenly(list(mazes), self.workers)
        offsets = [sum(len(c) for c in chunks[:r]) for r in range(self.workers)]
        self._refs = [a.generate.remote(chunks[r], step, offsets[r]) for r, a in enumerate(self.group.actors)]
        return [ep for part in _get_all(self.group, self._refs, "generate") for ep in part]

    def update(self, episodes: list) -> dict[str, float]:
        """Every rank updates on the episodes it generated; metrics merged over ranks."""
        refs = [a.update.remote(self._refs[r]) for r, a in enumerate(self.group.actors)]
        self._per_rank_update = _get_all(self.group, refs, "update")
        return merge_update_metrics(self._per_rank_update)

    def sync(self, step: int, check_parity: bool) -> dict[str, float]:
        """Rank 0 publishes version ``step``; every engine loads it; slowest load and worst parity reported."""
        pub = self.group.call("publish", self.sync_dir, step)[0]
        loads = self.group.call("load_published", self.sync_dir, step, check_parity)
        out = {"sync/version": loads[0]["sync/version"], **pub, "sync/load_s": max(x["sync/load_s"] for x in loads)}
        if check_parity:
            out["sync/parity_mean_abs"] = max(x["sync/parity_mean_abs"] for x in loads)
        return out

    def evaluate(self, set_name: str) -> dict[str, Any]:
        """The eval set split over the workers (:func:`_evaluate`)."""
        from runners.local import rollout_config

        return _evaluate(self.group, set_name, self.config.eval.temperature, rollout_config(self.config))

    def checkpoint(self, step: int, stream_state: dict[str, Any], extra: dict[str, Any]) -> None:
        """Rank 0 writes the gathered adapter + optimizer state (every rank joins the gather)."""
        self.group.call(
            "save_checkpoint",
            str(self.manager.root),
            self.manager.keep,
            step,
            stream_state,
            {**extra, "ray_workers": self.workers},
            self.manager.run_id,
        )

    def save_adapter(self, directory: Any) -> None:
        """The final gathered adapter."""
        self.group.call("save_adapter", str(directory))

    def step_extras(
        self, step: int, record: dict[str, float], timings: dict[str, float], episodes: int
    ) -> dict[str, float]:
        """Worker count and FSDP padding passes; the step is also exported to Prometheus."""
        extras = {"ray/num_workers": float(self.workers), "ray/padding_passes": padding_passes(self._per_rank_update)}
        if self.exporter is not None:
            self.exporter.record_step(
                step, {**record, **extras}, {k.split("/", 1)[1]: v for k, v in timings.items()}, episodes, step
            )
        return extras

    def results_extras(self) -> tuple[dict[str, Any], dict[str, str]]:
        """Worker count and restarts in the results; the worker list among the artifacts."""
        run_dir = self.manager.root.parent
        return (
            {"ray": {"num_workers": self.workers, "restarts": self.state.restarts}},
            {"ray_workers": str(run_dir / "ray_workers.json")},
        )


def _get_all(group: WorkerGroup, refs: list, what: str) -> list:
    """Results of ``refs`` in order, failing fast on the first error (a dead peer must not leave us waiting)."""
    import ray

    pending = list(refs)
    while pending:
        ready, pending = ray.wait(pending, num_returns=1)
        with _worker_failures(group, what):
            ray.get(ready[0])
    return ray.get(refs)


@contextlib.contextmanager
def _worker_failures(group: WorkerGroup, what: str) -> Iterator[None]:
    """Turn a dead actor (or an error while one is dead) into :class:`WorkerFailure`; other errors pass."""
    import ray

    try:
        yield
    except ray.exceptions.RayActorError as exc:
        raise WorkerFailure(f"a worker died during {what}: {exc}") from exc
    except ray.exceptions.RayTaskError as exc:
        if group.any_dead():
            raise WorkerFailure(f"{what} failed while a worker was dead: {exc}") from exc
        raise


# ---------------------------------------------------------------------------------- CLI


def main(argv: list[str] | None = None) -> int:
    """``python -m runners.ray_runner [mazegym train args]``: ``mazegym train`` with runner.kind=ray.

    This is the entrypoint of Ray jobs (``mazegym submit``, the KubeRay RayJob).
    """
    import sys

    from runners import cli

    argv = list(sys.argv[1:] if argv is None else argv)
    if "-h" in argv or "--help" in argv:
        return cli.main(["train", *argv])
    return cli.main(["train", *argv, "runner.kind=ray"])


def cli_help() -> str:
    """The help text of :func:`main` (flags and config keys), for tests and docs."""
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        try:
            main(["--help"])
        except SystemExit:
            pass
    return buf.getvalue()


if __name__ == "__main__":
    raise SystemExit(main())
