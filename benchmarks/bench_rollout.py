"""Rollout throughput, hf vs vLLM, same tiny model and settings, plus adapter sync latency.

    OMP_NUM_THREADS=2 .venv/bin/python benchmarks/bench_rollout.py            # both backends
    OMP_NUM_THREADS=2 .venv/bin/python benchmarks/bench_rollout.py --backends hf    # no vllm here

Each backend plays the same batched multi-turn rollouts (``--mazes`` groups of ``--group-size``
episodes, text observations) after one warm-up round; engine start-up is reported apart.
Sync latency: publish (write the PEFT adapter atomically) and load (generator picks it up),
averaged over ``--syncs`` versions. The ``__main__`` guard is required: vLLM spawns workers.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--backends", default="hf,vllm", help="comma-separated: hf, vllm")
    p.add_argument("--mazes", type=int, default=8, help="groups (distinct mazes) per rollout")
    p.add_argument("--group-size", type=int, default=4, help="episodes per maze")
    p.add_argument("--size", type=int, default=7, help="maze side")
    p.add_argument("--max-moves", type=int, default=6, help="moves per episode")
    p.add_argument("--max-new-tokens", type=int, default=24, help="tokens per reply")
    p.add_argument("--history", default="full", choices=["full", "last_k", "none"])
    p.add_argument("--rounds", type=int, default=2, help="timed rollout rounds per backend")
    p.add_argument("--syncs", type=int, default=3, help="adapter versions published/loaded for the latency figure")
    p.add_argument("--lora-rank", type=int, default=8)
    p.add_argument("--model-dir", default=None, help="model path (default: build the tiny text LM in a temp dir)")
    p.add_argument("--json", default=None, help="also write the figures to this file")
    return p.parse_args()


def bench_config(engine: str, lora_rank: int):
    """The run settings the benchmark's objects are built from."""
    from runners.config import TrainConfig, apply_overrides

    overrides = [
        f"engine.name={engine}",
        f"lora.rank={lora_rank}",
        f"lora.alpha={2 * lora_rank}",
        "model.dtype=float32",
    ]
    return apply_overrides(TrainConfig(), overrides)


def make_generator(engine: str, model_path: Path, lora_rank: int):
    """The sampler for ``engine`` (hf or vllm), built as a run builds it (:func:`runners.build.build_generator`)."""
    from runners.build import build_generator

    return build_generator(bench_config(engine, lora_rank), model_path)


def bench_rollouts(gen, mazes, config, rounds: int) -> dict:
    from runners.rollout.collect import collect_groups

    collect_groups(gen, mazes[:2], config, seed=999)  # warm-up (allocations, kernels, caches)
    times, episodes, tokens, turns = [], 0, 0, 0
    for r in range(rounds):
        t0 = time.perf_counter()
        eps = collect_groups(gen, mazes, config, seed=r)
        times.append(time.perf_counter() - t0)
        episodes += len(eps)
        turns += sum(e.num_moves for e in eps)
        tokens += sum(len(t.response_ids) for e in eps for t in e.turns)
    total = sum(times)
    return {
        "episodes_per_s": episodes / total,
        "gen_tokens_per_s": tokens / total,
        "turns_per_s": turns / total,
        "seconds_per_round": total / rounds,
        "episodes": episodes,
        "tokens": tokens,
    }


def bench_sync(gen, model_path: Path, lora_rank: int, syncs: int, sync_dir: Path) -> dict:
    import torch

    from runners.build import build_policy
    from runners.train.sync import AdapterSync

    policy = build_policy(bench_config("hf", lora_rank), model_path)
    sync = AdapterSync(sync_dir)
    write_ms, load_ms = [], []
    for v in range(1, syncs + 1):
        with torch.no_grad():
            for name, p in policy.model.named_parameters():
                if "lora_B" in name:
                    p.normal_(0, 0.01)
        sync.publish(policy, v)
        sync.pull(gen)
        write_ms.append(sync.last_publish_ms)
        load_ms.append(sync.last_load_ms)
    return {"sync_write_ms": statistics.median(write_ms), "sync_load_ms": statistics.median(load_ms)}


def main() -> None:
    args = parse_args()
    import numpy as np
    import torch

    from mazegym.maze import sample_maze
    from runners.rollout.collect import RolloutConfig
    from runners.models.tiny import build_tiny_text_lm

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "2")))
    work = Path(tempfile.mkdtemp(prefix="bench_rollout_"))
    model_path = Path(args.model_dir) if args.model_dir else build_tiny_text_lm(work / "tiny_text")
    mazes = [sample_maze(np.random.default_rng(i), args.size) for i in range(args.mazes)]
    config = RolloutConfig(
        group_size=args.group_size,
        max_moves=args.max_moves,
        max_new_tokens=args.max_new_tokens,
        history=args.history,
        temperature=1.0,
        obs_mode="text",
    )
    results: dict[str, dict] = {}
    for backend in [b.strip() for b in args.backends.split(",") if b.strip()]:
        try:
            t0 = time.perf_counter()
            gen = make_generator(backend, model_path, args.lora_rank)
            startup = time.perf_counter() - t0
        except ImportError as e:
            print(f"[{backend}] skipped: {e}")
            continue
        row = {"startup_s": startup}
        row.update(bench_rollouts(gen, mazes, config, args.rounds))
        row.update(bench_sync(gen, model_path, args.lora_rank, args.syncs, work / f"sync_{backend}"))
        results[backend] = row
        if hasattr(gen, "close"):
            gen.close()
        del gen

    print()
    print(
        f"settings: {args.mazes} mazes x G={args.group_size} = {args.mazes * args.group_size} episodes/round, "
        f"{args.size}x{args.size}, max_moves={args.max_moves}, max_new_tokens={args.max_new_tokens}, "
        f"history={args.history}, T=1.0, rounds={args.rounds}, threads={torch.get_num_threads()}"
    )
    cols = [
        "startup_s",
        "episodes_per_s",
        "gen_tokens_per_s",
        "turns_per_s",
        "seconds_per_round",
        "sync_write_ms",
        "sync_load_ms",
    ]
    print(f"{'backend':8s}" + "".join(f"{c:>18s}" for c in cols))
    for backend, row in results.items():
        print(f"{backend:8s}" + "".join(f"{row[c]:18.2f}" for c in cols))
    if "hf" in results and "vllm" in results:
        ratio = results["vllm"]["gen_tokens_per_s"] / results["hf"]["gen_tokens_per_s"]
        print(
            f"vllm / hf generated tokens/s: {ratio:.2f}x   episodes/s: "
            f"{results['vllm']['episodes_per_s'] / results['hf']['episodes_per_s']:.2f}x"
        )
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "results": results}, indent=2))


if __name__ == "__main__":
    main()
