"""Ray runner benchmark: step-time breakdown, throughput and adapter-sync latency, 1 vs N workers.

Runs the same small job (a preset's recipe on a few mazes per step, zero-variance filter off so
every step really updates) with the local runner and with the Ray runner on 1..N CPU workers,
then prints per-phase seconds per step (generate / update / sync / checkpoint), sync publish and
load latency, episodes per second, and the FSDP lockstep padding passes per step (all ranks)::

    .venv/bin/python benchmarks/bench_ray.py --workers 1 2 --steps 4              # the default preset
    .venv/bin/python benchmarks/bench_ray.py --sft RUN/sft/model --algo ppo      # from an SFT start, PPO
    .venv/bin/python benchmarks/bench_ray.py --preset cpu-tiny --json bench_ray.json

The first step of every run (engine warm-up) is excluded from the averages.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path


def job_overrides(run_dir: Path, args: argparse.Namespace) -> list[str]:
    """The benchmark job: the preset's model from ``--sft`` (else from scratch), every step updates, a
    checkpoint every step; ``--algo ppo`` on the default preset plays whole episodes (what its validation asks)."""
    steps, mazes, group = args.steps, args.mazes, args.group
    start = [f"sft.checkpoint={args.sft}"] if args.sft else ["sft.enabled=never"]
    algo = [f"algo.name={args.algo}"]
    if args.algo == "ppo" and args.preset == "cpu-maze-vlm":
        algo += ["rollout.collector.name=plays", "loop.overlap_generation=false", "algo.skip_zero_advantage=false"]
    return [
        f"run_dir={run_dir}",
        *start,
        *algo,
        "logging.progress=false",
        f"loop.steps={steps}",
        f"loop.mazes_per_step={mazes}",
        f"rollout.group_size={group}",
        "eval.every=0",
        "eval.before_rl=false",
        "checkpoint.every=1",
        "algo.filter_zero_variance=false",
        "runner.num_threads=1",
        "runner.update_threads=1",  # the Ray runner parallelises over workers: compare one thread per process
        "maze.heldout_sets=[]",
    ]


def summarize_run(run_dir: Path, wall: float) -> dict[str, float]:
    """Mean per-step phase seconds (step 1 and the final eval excluded), sync latencies and throughput of one run."""
    from runners.train.metrics import read_jsonl

    recs = [r for r in read_jsonl(run_dir / "metrics.jsonl", phase="rl") if r["step"] > 1]
    if not recs:
        raise RuntimeError(f"{run_dir}: need at least 2 steps to benchmark")

    def mean(key: str) -> float:
        values = [r[key] for r in recs if key in r]
        return statistics.fmean(values) if values else float("nan")

    # The step time of training proper: the final evaluation is reported on its own.
    step_s = statistics.fmean(sum(v for k, v in r.items() if k.startswith("time/") and k != "time/eval") for r in recs)
    episodes = statistics.fmean(r["rollout/episodes"] for r in recs)
    return {
        "step_s": step_s,
        "generate_s": mean("time/generate"),
        "update_s": mean("time/update"),
        "sync_s": mean("time/sync"),
        "checkpoint_s": mean("time/checkpoint"),
        "final_eval_s": recs[-1].get("time/eval", float("nan")),
        "sync_publish_s": mean("sync/publish_s"),
        "sync_load_s": mean("sync/load_s"),
        "padding_passes": mean("ray/padding_passes"),
        "episodes_per_s": episodes / step_s,
        "gen_episodes_per_s": episodes / mean("time/generate"),
        "wall_s_total": wall,
    }


def run_local(base: Path, args: argparse.Namespace) -> dict[str, float]:
    """The local runner on the benchmark job."""
    from runners import local
    from runners.config import apply_overrides
    from runners.config.presets import get_preset

    run_dir = base / "local"
    cfg = apply_overrides(get_preset(args.preset), job_overrides(run_dir, args))
    t0 = time.perf_counter()
    local.train(cfg, log=lambda m: None)
    return summarize_run(run_dir, time.perf_counter() - t0)


def run_ray(base: Path, workers: int, args: argparse.Namespace) -> dict[str, float]:
    """The Ray runner on the benchmark job with ``workers`` worker bundles."""
    from runners.distributed import ray_runner
    from runners.config import apply_overrides
    from runners.config.presets import get_preset

    run_dir = base / f"ray{workers}"
    cfg = apply_overrides(
        get_preset(args.preset),
        job_overrides(run_dir, args) + ["runner.kind=ray", f"runner.num_workers={workers}"],
    )
    t0 = time.perf_counter()
    ray_runner.train(cfg, log=lambda m: None)
    return summarize_run(run_dir, time.perf_counter() - t0)


def format_table(rows: dict[str, dict[str, float]]) -> str:
    """A readable table, one row per runner configuration."""
    cols = [
        "step_s",
        "generate_s",
        "update_s",
        "sync_s",
        "checkpoint_s",
        "sync_publish_s",
        "sync_load_s",
        "episodes_per_s",
        "final_eval_s",
        "padding_passes",
    ]
    out = [f"{'runner':<10}" + "".join(f"{c:>16}" for c in cols)]
    for name, row in rows.items():
        out.append(f"{name:<10}" + "".join(f"{row[c]:>16.3f}" for c in cols))
    return "\n".join(out)


def main() -> None:
    """Parse arguments, run every configuration, print the table (and write JSON)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="cpu-maze-vlm", help="training preset (default: the default one)")
    parser.add_argument(
        "--sft", default=None, help="SFT model dir to start from (default: the preset's model untrained)"
    )
    parser.add_argument("--algo", default="grpo", help="algorithm (default grpo)")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2], help="Ray worker counts to run")
    parser.add_argument("--steps", type=int, default=4, help="RL steps per run (the first is warm-up)")
    parser.add_argument("--mazes", type=int, default=4, help="maze groups per step (split over workers)")
    parser.add_argument("--group", type=int, default=8, help="episodes per maze group")
    parser.add_argument("--cpus", type=int, default=2, help="CPUs of the local Ray instance")
    parser.add_argument("--no-local", action="store_true", help="skip the local-runner baseline")
    parser.add_argument("--json", default=None, help="also write the results to this JSON file")
    args = parser.parse_args()

    import ray

    ray.init(
        address="local",
        num_cpus=args.cpus,
        include_dashboard=False,
        log_to_driver=False,
        runtime_env={"env_vars": {"OMP_NUM_THREADS": "1"}},
    )
    rows: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="bench_ray_") as tmp:
        base = Path(tmp)
        if not args.no_local:
            rows["local"] = run_local(base, args)
        for workers in args.workers:
            rows[f"ray x{workers}"] = run_ray(base, workers, args)
    ray.shutdown()
    print(
        f"{args.preset}, {args.algo}: {args.mazes} mazes per step (group {args.group}), {args.steps} steps "
        f"(step 1 excluded), {args.cpus} CPUs for Ray"
    )
    print(format_table(rows))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
