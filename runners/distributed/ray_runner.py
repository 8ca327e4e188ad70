"""The Ray runner: the local runner's step loop with every phase spread over a Ray cluster.

It takes the same :class:`~runners.config.TrainConfig` as the local runner, builds through the
same :mod:`runners.build` and runs the same :mod:`runners.train.steps`; it adds placement,
transport and restarts.

Placement: one placement group with one bundle per worker (``{"CPU": c, "GPU": g}``); each
bundle hosts one :class:`RolloutTrainWorker` actor holding a generation engine (HF or vLLM) and
one FSDP2 training rank (:mod:`runners.distributed.fsdp`), colocated on the same device.

One step (driver: :func:`train`, phases: :class:`RayExecutor`)::

    generate   every worker plays its share of the step's maze groups -> episodes (object store)
    update     every rank updates on its own share, in FSDP2 lockstep (runners.distributed.fsdp.Lockstep)
    sync       ranks all-gather the adapter; rank 0 publishes it to the shared sync dir as version v;
               every engine loads v; barrier; optional parity probe (a collective forward)
    eval       the fixed eval mazes are split across workers, results merged on the driver
    checkpoint adapter and optimizer state gathered in full, written by rank 0 in the local
               runner's format, so a run resumes on any number of workers (or locally)

SFT (when needed) runs on the driver with the local runner's code. On GPUs with vLLM each engine
sleeps during the update and wakes for the sync. If a worker dies, the driver rebuilds the group
and resumes from the latest checkpoint, up to ``runner.max_restarts`` times. Metrics go to
the local runner's JSONL/TensorBoard logs and to Prometheus (:mod:`runners.distributed.prometheus`).
Entry point: ``mazegym train runner.kind=ray ...``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import os
import shutil
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import ray
import torch
import torch.distributed as dist
from ray.util.placement_group import placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from runners import atomic, build
from runners.config import RayRunnerConfig, TrainConfig, from_dict, to_dict, validate
from runners.config.derived import eval_maze_count, rollout_config
from runners.distributed import fsdp
from runners.distributed.prometheus import PrometheusExporter
from runners.rollout.evaluate import eval_summary
from runners.train.checkpoint import CheckpointManager, load_checkpoint, read_state, save_checkpoint
from runners.train.loop import LoopState, RunResult, loop_state_from, run_rl_loop
from runners.train.run_info import MALLOC_SETTINGS
from runners.train.run_lock import run_dir_lock
from runners.train.parity import StaleWeightsError, trainer_logprobs
from runners.train.steps import (
    eval_episodes,
    parity_metrics,
    play_step_mazes,
    set_threads,
    update_step,
    vision_placeholder_ids,
)
from runners.train.sft_result import start_fingerprint
from runners.train.sync import AdapterSync


@dataclass
class RayConfig(RayRunnerConfig):
    """The Ray runner's settings (the ``runner`` section) plus the placement resolved from them
    (:func:`ray_config_from`)."""

    gpus_per_worker: float = 0.0
    """GPUs reserved by each bundle (1 for the colocated vLLM + trainer layout; 0 on CPU)."""


# ------------------------------------------------------------------------ process group


def init_process_group(
    rank: int, world_size: int, master_addr: str, master_port: int, dist_backend: str, timeout_s: float
) -> str:
    """Join the training process group over TCP; returns the torch.distributed backend actually used."""
    if dist_backend == "auto":
        dist_backend = "nccl" if torch.cuda.is_available() else "gloo"
    dist.init_process_group(
        backend=dist_backend,
        init_method=f"tcp://{master_addr}:{master_port}",
        rank=rank,
        world_size=world_size,
        timeout=datetime.timedelta(seconds=timeout_s),
    )
    return dist_backend


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


# ------------------------------------------------------------------------ worker group (driver)


PASSED_ENV = ("TORCH_DISTRIBUTED_DEBUG", "NCCL_DEBUG", "TORCH_CPP_LOG_LEVEL")
"""Environment variables the driver passes on to every worker actor when they are set."""


class WorkerFailure(RuntimeError):
    """A worker actor died (or a collective with a dead peer failed): rebuild and resume."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def worker_address() -> tuple[str, int]:
    """This process's node IP and a free TCP port (rank 0 hosts the process-group rendezvous)."""
    return ray.util.get_node_ip_address(), _free_port()


def worker_env(ray_cfg: RayConfig) -> dict[str, str]:
    """The environment variables each worker actor starts with: its thread counts, glibc's malloc settings (the
    driver's own values where it sets them) and the debug switches the driver has set."""
    return {
        "OMP_NUM_THREADS": str(ray_cfg.worker_threads),
        "MKL_NUM_THREADS": str(ray_cfg.worker_threads),
        "TOKENIZERS_PARALLELISM": "false",
        **{k: os.environ.get(k, str(v)) for k, v in MALLOC_SETTINGS.items()},
        # Debug switches set on the driver reach every rank (collective checks, NCCL logs).
        **{k: os.environ[k] for k in PASSED_ENV if k in os.environ},
    }


class WorkerGroup:
    """One placement group with one bundle per worker, and one worker actor per bundle."""

    def __init__(self, ray_cfg: RayConfig, worker_cls: type, init_args: tuple):

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
        env = worker_env(ray_cfg)
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
        refs = [
            getattr(a, method).remote(*(per_rank[i] if per_rank is not None else args))
            for i, a in enumerate(self.actors)
        ]
        with _worker_failures(self, method):
            return ray.get(refs, timeout=timeout)

    def call_rank0(self, method: str, *args: Any) -> Any:
        """Call ``method`` on rank 0 only."""
        with _worker_failures(self, method):
            return ray.get(getattr(self.actors[0], method).remote(*args))

    def any_dead(self, timeout: float = 10.0) -> bool:
        """True when some worker does not answer a ping."""
        for actor in self.actors:
            try:
                ray.get(actor.ping.remote(), timeout=timeout)
            except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):
                return True
        return False

    def shutdown(self) -> None:
        """Kill every actor and free the placement group (safe to call twice)."""
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
    the process group, the sharding and lockstep of :mod:`runners.distributed.fsdp`, the split of work, and
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
        return os.getpid()

    def setup(self, master_addr: str, master_port: int) -> dict[str, Any]:
        """Join the process group, build engine + policy + algorithm exactly like the local runner, resume."""
        self.config = c = from_dict(self.config_data)
        set_threads(c)
        self.dist_backend = init_process_group(
            self.rank,
            self.world_size,
            master_addr,
            master_port,
            self.ray_cfg.dist_backend,
            self.ray_cfg.collective_timeout_s,
        )
        model_dir = Path(self.model_dir)
        adapter = Path(self.start_adapter) if self.start_adapter else None
        sleep_mode = c.model.device.startswith("cuda") and self.ray_cfg.sleep_engine_during_update
        # The local runner's construction (identical LoRA init on every rank), with the policy sharded
        # by FSDP2 before the optimizer is built over its (DTensor) parameters.
        self.generator, self.policy, self.algorithm, self.probe = build.build_training(
            c,
            model_dir,
            adapter,
            generator=build.build_generator(c, model_dir, adapter, sleep_mode=sleep_mode),
            prepare_policy=fsdp.shard_policy,
        )
        # Rounds are tiny CPU all-reduces: on nccl they get a gloo group of their own.
        rounds = (
            dist.new_group(backend="gloo", timeout=datetime.timedelta(seconds=self.ray_cfg.collective_timeout_s))
            if self.dist_backend == "nccl"
            else None
        )
        self.lockstep = fsdp.Lockstep(self.policy, self.algorithm, group=rounds)
        self.rollout = rollout_config(c)
        # As on the local runner: sampled image placeholders never reach the trainer (a failing
        # forward on one rank would leave the others waiting in a collective).
        self.forbidden = vision_placeholder_ids(model_dir)
        state: dict[str, Any] = {}
        if self.resume_from:
            # A full (gathered) checkpoint, whatever the worker count that wrote it: every rank keeps its shards.
            state = load_checkpoint(Path(self.resume_from), self.policy, self.algorithm, build.build_stream(c))
            fsdp.shard_optimizer_state(self.algorithm.optimizer)
            self.generator.load_adapter(str(Path(self.resume_from) / "adapter"), int(state["step"]))
        if self.probe is not None:  # a collective forward: every rank calibrates, on the same weights as its engine
            p = self.probe
            trained = trainer_logprobs(self.policy, p.prompt_ids, p.response_ids, p.images)
            p.calibrate(self.generator, trainer_fn=lambda *_: trained)
        return {
            "rank": self.rank,
            "pid": os.getpid(),
            "dist_backend": self.dist_backend,
            "node": worker_address()[0],
            "resumed_step": int(state.get("step", 0)),
        }

    # ------------------------------------------------------------------ phases
    def generate(self, mazes: list, step: int, offset: int) -> list:
        """Play this rank's maze groups; ids and env seeds match what the local runner gives them."""
        return play_step_mazes(self.generator, mazes, self.config, step, self.rollout, offset)

    def update(self, episodes: list) -> dict[str, float]:
        """The algorithm's update on this rank's episodes, in lockstep with every other rank (FSDP2)."""
        self._engine_sleep()
        try:
            with self.lockstep.update():
                metrics = update_step(self.algorithm, episodes, self.forbidden)
        finally:
            self._engine_wake()
        metrics[PADDING_KEY] = float(sum(self.lockstep.padding.values()))
        return metrics

    def publish(self, sync_dir: str, version: int) -> dict[str, float]:
        """Every rank: gather the full adapter; rank 0 writes it as ``version`` to the sync dir."""
        t0 = time.perf_counter()
        adapter = fsdp.gather_adapter(self.policy)
        if self.rank == 0:
            AdapterSync(sync_dir, keep=2).publish(fsdp.GatheredAdapter(self.policy, adapter), version)
        return {"sync/publish_s": time.perf_counter() - t0}

    def load_published(self, sync_dir: str, version: int, check_parity: bool) -> dict[str, float]:
        """Every rank: load the published adapter into the engine, barrier, optional parity probe."""
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
            result = p.check(
                self.generator, version=version, trainer_fn=lambda *_: trained, reference_fn=lambda *_: base
            )
            out.update(parity_metrics(result))
        out["sync/version"] = float(self.generator.adapter_version)
        return out

    def evaluate(self, set_name: str, start: int, stop: int) -> list:
        """Play mazes ``[start, stop)`` of eval set ``set_name`` (seeds as in the whole-set evaluation)."""
        return eval_episodes(self.generator, self.config, set_name, start, stop)

    def save_checkpoint(
        self, root: str, keep: int, step: int, stream_state: dict, extra: dict, run_id: str | None = None
    ) -> str | None:
        """Every rank: gather adapter and optimizer state; rank 0 checkpoints them with its RNGs (valid
        for any worker count, and for the local runner) as part of run ``run_id``. Returns the
        checkpoint path on rank 0."""
        adapter = fsdp.gather_adapter(self.policy)
        trainer_state = fsdp.gather_algorithm_state(self.algorithm)
        if self.rank != 0:
            return None
        manager = CheckpointManager(Path(root), keep=keep, log=lambda m: None, run_id=run_id)
        return str(
            save_checkpoint(
                manager,
                step,
                fsdp.GatheredAdapter(self.policy, adapter),
                fsdp.GatheredAlgorithmState(trainer_state),
                stream_state,
                to_dict(self.config),
                start_fingerprint(self.config),
                extra,
            )
        )

    def save_adapter(self, directory: str) -> str | None:
        """Every rank: gather the adapter; rank 0 writes it (PEFT format) and returns the path."""
        adapter = fsdp.gather_adapter(self.policy)
        if self.rank != 0:
            return None
        return str(fsdp.save_full_adapter(self.policy, adapter, directory))

    def close(self) -> None:
        """Leave the process group."""
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
            release_cached_cuda_memory()
            llm.wake_up()


def release_cached_cuda_memory() -> None:
    """Hand the CUDA blocks torch's caching allocator keeps after an update back to the driver, so a colocated
    engine waking up can allocate its weights and KV cache again."""
    import gc

    gc.collect()  # the update's last tensors may still be held by reference cycles
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


# ------------------------------------------------------------------------------ the driver


def ray_config_from(config: TrainConfig) -> RayConfig:
    """The Ray runner's settings (``config.runner``, validated with the config), the GPUs split evenly over the
    workers."""
    rc = RayConfig(**dataclasses.asdict(config.runner))
    if config.model.device.startswith("cuda") and rc.num_gpus > 0:
        rc.gpus_per_worker = rc.num_gpus / max(rc.num_workers, 1)
    return rc


PADDING_KEY = "fsdp_padding_passes"
"""Per-rank update metric: padding passes the rank ran (:class:`runners.distributed.fsdp.Lockstep`); the
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


def _evaluate(group: WorkerGroup, set_name: str, count: int, temperature: float, rollout: Any) -> dict[str, Any]:
    """Evaluate the first ``count`` mazes of ``set_name`` split over the workers; same summary and records as
    evaluate_set."""
    bounds = split_evenly(list(range(count)), len(group.actors))
    per_rank = [(set_name, b[0] if b else 0, b[-1] + 1 if b else 0) for b in bounds]
    episodes = [ep for part in group.call("evaluate", per_rank=per_rank) for ep in part]
    return eval_summary(set_name, episodes, rollout, temperature)


def cluster_address(address: str | None) -> str:
    """What ``ray.init`` is given: ``runner.address``, else ``$RAY_ADDRESS``, else ``"local"`` (a new
    instance on this machine; never a stale cluster an earlier process left in /tmp/ray)."""
    return address or os.environ.get("RAY_ADDRESS") or "local"


def train(
    config: TrainConfig,
    log: Any = print,
    stop_after: int | None = None,
    ray_cfg: RayConfig | None = None,
    command: str | None = None,
) -> RunResult:
    """Run SFT (when needed, on the driver) then RL on a Ray cluster; returns the run's result.

    Same config, same phases, same logs as :func:`runners.local.train`; ``stop_after`` ends
    the loop after that many steps as if interrupted (for resume tests); ``command`` is recorded
    in ``run_info.json``.
    """
    t_start = time.perf_counter()
    validate(config)
    ray_cfg = ray_cfg or ray_config_from(config)
    if not ray.is_initialized():
        ray.init(address=cluster_address(ray_cfg.address), log_to_driver=True)
    config.run_dir = str(Path(config.run_dir).resolve())
    with run_dir_lock(config.run_dir, command):  # one writer per run dir
        run_dir, manager, resume_from, metrics = build.open_run(config, log, command)
        exporter = PrometheusExporter(run_dir.name) if ray_cfg.export_metrics else None
        try:
            model_dir, start_adapter = build.rl_start(config, log=log, metrics=metrics)
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
                            f"a worker died and runner.max_restarts={ray_cfg.max_restarts} is used up: {exc}"
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
    config: TrainConfig,
    ray_cfg: RayConfig,
    model_dir: Path,
    start_adapter: Path | None,
    resume_from: Path | None,
    state: LoopState,
    run_dir: Path,
    log: Any,
) -> WorkerGroup:
    """Build the worker group; resume every rank from ``resume_from`` (or start fresh)."""
    # Adapter versions restart from the checkpoint's step: clear versions a dead group left behind.
    shutil.rmtree(run_dir / "adapter_sync", ignore_errors=True)
    init_args = (
        to_dict(config),
        ray_cfg,
        str(model_dir),
        str(start_adapter) if start_adapter else None,
        str(resume_from) if resume_from else None,
    )
    group = WorkerGroup(ray_cfg, RolloutTrainWorker, init_args)
    info = group.setup_info
    atomic.write_json(run_dir / "ray_workers.json", info)
    if resume_from is not None:
        resumed = loop_state_from(read_state(resume_from))
        state.step, state.before, state.history = resumed.step, resumed.before, resumed.history
        state.record, state.stream, state.env_turns = resumed.record, resumed.stream, resumed.env_turns
        log(f"[resume] from {resume_from} at RL step {state.step} on {ray_cfg.num_workers} workers")
    else:
        state.step, state.stream, state.record = 0, None, None
    log(f"[ray] {ray_cfg.num_workers} workers ({info[0]['dist_backend']}), pids {[i['pid'] for i in info]}")
    return group


def _loop(
    group: WorkerGroup,
    config: TrainConfig,
    run_dir: Path,
    manager: CheckpointManager,
    metrics: Any,
    exporter: PrometheusExporter | None,
    state: LoopState,
    log: Any,
    stop_after: int | None,
    t_start: float,
) -> RunResult:
    """The shared step loop (:func:`runners.train.loop.run_rl_loop`) with each phase spread over the worker group."""
    stream = build.build_stream(config)
    if state.stream is not None:
        stream.load_state_dict(state.stream)
    executor = RayExecutor(group, config, run_dir, manager, exporter, state)
    return run_rl_loop(config, executor, stream, state, run_dir, manager, metrics, log, stop_after, t_start)


class RayExecutor:
    """The phases of one RL step fanned out to the worker group (the Ray runner's
    :class:`runners.train.loop.StepExecutor`).

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
        # The workers' episode refs of each generated step, by the id of the list handed to the loop (with
        # loop.overlap_generation the next step is generated before this step's update).
        self._refs: dict[int, list] = {}
        self._per_rank_update: list[dict[str, float]] = []
        self.concurrent_generation = False  # the next step's collection runs before the update, not beside it

    def generate(self, mazes: Any, step: int) -> list:
        """Each rank plays its slice of the step's mazes."""
        chunks = split_evenly(list(mazes), self.workers)
        offsets = [sum(len(c) for c in chunks[:r]) for r in range(self.workers)]
        refs = [a.generate.remote(chunks[r], step, offsets[r]) for r, a in enumerate(self.group.actors)]
        episodes = [ep for part in _get_all(self.group, refs, "generate") for ep in part]
        self._refs[id(episodes)] = refs
        return episodes

    def update(self, episodes: list) -> dict[str, float]:
        """Every rank updates on the episodes it generated; metrics merged over ranks."""
        ranks = self._refs.pop(id(episodes))
        refs = [a.update.remote(ranks[r]) for r, a in enumerate(self.group.actors)]
        self._per_rank_update = _get_all(self.group, refs, "update")
        return merge_update_metrics(self._per_rank_update)

    def sync(self, step: int, check_parity: bool) -> dict[str, float]:
        """Rank 0 publishes version ``step``; every engine loads it; slowest load and worst parity reported."""
        pub = self.group.call("publish", self.sync_dir, step)[0]
        with _stale_weights_named("load_published"):
            loads = self.group.call("load_published", self.sync_dir, step, check_parity)
        out = {"sync/version": loads[0]["sync/version"], **pub, "sync/load_s": max(x["sync/load_s"] for x in loads)}
        if check_parity:
            out.update({key: max(x[key] for x in loads) for key in loads[0] if key.startswith("sync/parity_")})
        return out

    def evaluate(self, set_name: str) -> dict[str, Any]:
        """The eval set split over the workers (:func:`_evaluate`)."""
        return _evaluate(
            self.group,
            set_name,
            eval_maze_count(self.config, set_name),
            self.config.eval.temperature,
            rollout_config(self.config),
        )

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
    pending = list(refs)
    while pending:
        ready, pending = ray.wait(pending, num_returns=1)
        with _worker_failures(group, what):
            ray.get(ready[0])
    return ray.get(refs)


@contextlib.contextmanager
def _stale_weights_named(what: str) -> Iterator[None]:
    """A worker's :class:`StaleWeightsError` reaches the driver as itself, with the worker's report, rather than
    wrapped in a ``RayTaskError``: the run stops on it (no restart would help) and says why."""
    try:
        yield
    except ray.exceptions.RayTaskError as exc:
        if isinstance(exc.cause, StaleWeightsError):
            raise StaleWeightsError(f"{what} on a worker: {exc.cause}") from None
        raise


@contextlib.contextmanager
def _worker_failures(group: WorkerGroup, what: str) -> Iterator[None]:
    """Turn a dead actor (or an error while one is dead) into :class:`WorkerFailure`; other errors pass."""
    try:
        yield
    except ray.exceptions.RayActorError as exc:
        raise WorkerFailure(f"a worker died during {what}: {exc}") from exc
    except ray.exceptions.RayTaskError as exc:
        if group.any_dead():
            raise WorkerFailure(f"{what} failed while a worker was dead: {exc}") from exc
        raise
