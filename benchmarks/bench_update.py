"""Update throughput of the algorithm zoo on CPU: samples/s, tokens/s and peak memory.

Run (pytest-benchmark; the project's addopts disable benchmarks by default)::

    OMP_NUM_THREADS=1 .venv/bin/pytest benchmarks/bench_update.py --benchmark-enable -q -s

The cheap part (network-policy GRPO and PPO updates, seconds) also runs as a script that prints
samples/s (best and median over updates) and writes JSON::

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_update.py [--seconds S] [--json PATH]

Each benchmark times one ``algo.update(episodes)`` (advantages, old-logprob recompute, one
epoch, optimizer step) on a fixed synthetic batch and prints a JSON line with samples/s
(turns per second), tokens/s (scored response tokens per second) and peak memory: the Python
heap peak from ``tracemalloc`` during the update and the process max RSS from ``getrusage``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import time
from pathlib import Path
import tracemalloc

import numpy as np
import pytest
import torch

import algos
from algos.data import Episode, Turn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # bench_env sits next to this file
from bench_env import machine_facts, time_blocks, write_json  # noqa: E402

DEFAULT_JSON = "runs/bench/bench_update.json"


def _report(name: str, episodes: list[Episode], update) -> dict:
    turns = sum(len(ep.turns) for ep in episodes)
    tokens = sum(len(t.response_ids) for ep in episodes for t in ep.turns)
    tracemalloc.start()
    start = time.perf_counter()
    update(episodes)
    seconds = time.perf_counter() - start
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    row = {
        "bench": name,
        "turns": turns,
        "tokens": tokens,
        "seconds": round(seconds, 4),
        "samples_per_s": round(turns / seconds, 1),
        "tokens_per_s": round(tokens / seconds, 1),
        "py_heap_peak_mib": round(peak / 2**20, 2),
        "max_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }
    print(json.dumps(row))
    return row


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def net_episodes(grid: int = 11, groups: int = 16, group_size: int = 8, turns: int = 20) -> list[Episode]:
    """Synthetic network-policy episodes: one maze layout per group, varied agent squares."""
    rng = np.random.default_rng(0)
    episodes = []
    for g in range(groups):
        walls = (rng.random((grid, grid)) < 0.4).astype(np.float32)
        for k in range(group_size):
            ep = Episode(group_id=g)
            for t in range(turns):
                x = np.zeros((3, grid, grid), dtype=np.float32)
                x[0] = walls
                x[1, grid - 2, grid - 2] = 1
                x[2, rng.integers(1, grid - 1), rng.integers(1, grid - 1)] = 1
                ep.turns.append(
                    Turn(
                        response_ids=[int(rng.integers(4))],
                        logprobs=[-1.386],
                        observation={"x": x},
                        reward=float(rng.random() < 0.1),
                    )
                )
            episodes.append(ep)
    return episodes


def net_update_case(name: str):
    """The network-policy algorithm ``name`` (11x11 grid) and its synthetic batch of 2,560 turns."""
    from algos.policies.net import MazeNetPolicy

    torch.manual_seed(0)
    algo = algos.make(name, MazeNetPolicy(11), lr=1e-3, epochs=1, minibatch_size=1024)
    return algo, net_episodes()


def run_net(seconds: float = 2.0, names: tuple[str, ...] = ("grpo", "ppo")) -> dict:
    """Time repeated network-policy updates for about ``seconds`` per algorithm; samples/s = turns per second."""
    result = {"machine": machine_facts(), "loadavg_start": list(os.getloadavg()), "samples_per_s": {}}
    for name in names:
        algo, episodes = net_update_case(name)
        turns = sum(len(ep.turns) for ep in episodes)
        times = time_blocks(lambda: algo.update(episodes), seconds)
        result["samples_per_s"][f"net-{name}"] = {
            "best": turns / min(times),
            "median": turns / statistics.median(times),
            "updates": len(times),
            "turns_per_update": turns,
        }
    result["loadavg_end"] = list(os.getloadavg())
    return result


def main(argv: list[str] | None = None) -> dict:
    """Time the network-policy updates, print samples/s and write the JSON."""
    p = argparse.ArgumentParser(description="network-policy update throughput (samples/s)")
    p.add_argument("--seconds", type=float, default=2.0, help="timing budget per algorithm (default 2.0)")
    p.add_argument("--json", default=DEFAULT_JSON, help=f"where to write the figures (default {DEFAULT_JSON})")
    args = p.parse_args(argv)
    torch.set_num_threads(1)  # tiny ops only gain contention from more threads on shared cores
    result = run_net(args.seconds)
    for name, v in result["samples_per_s"].items():
        print(
            f"{name}: best {v['best']:,.0f} samples/s, median {v['median']:,.0f} samples/s "
            f"({v['updates']} updates of {v['turns_per_update']} turns)"
        )
    print(f"load average {result['loadavg_start'][0]:.2f} at start, {result['loadavg_end'][0]:.2f} at end")
    write_json(result, Path(args.json))
    print(f"wrote {args.json}")
    return result


@pytest.mark.parametrize("name", ["grpo", "ppo"])
def test_bench_network_policy_update(benchmark, name):
    algo, episodes = net_update_case(name)
    _report(f"net-{name}", episodes, algo.update)
    benchmark.pedantic(algo.update, args=(episodes,), rounds=3, iterations=1)


def test_bench_tiny_lora_lm_update(benchmark):
    transformers = pytest.importorskip("transformers")
    from algos.policies.lm import LoRAConfig, LoRALMPolicy

    torch.manual_seed(0)
    config = transformers.Qwen2Config(
        vocab_size=256,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        head_dim=64,
        max_position_embeddings=1024,
    )
    policy = LoRALMPolicy(transformers.Qwen2ForCausalLM(config), LoRAConfig(rank=32, alpha=64), score_chunk=8)
    algo = algos.make("grpo", policy, lr=1e-5, micro_batch_size=8)
    rng = np.random.default_rng(0)
    episodes = []
    for g in range(4):  # 4 mazes x 4 rollouts x 2 turns, 128-token prompts, 32-token responses
        for k in range(4):
            ep = Episode(group_id=g)
            for t in range(2):
                ep.turns.append(
                    Turn(
                        prompt_ids=rng.integers(0, 256, 128).tolist(),
                        response_ids=rng.integers(0, 256, 32).tolist(),
                        logprobs=[-5.5] * 32,
                        reward=float(rng.random() < 0.5),
                    )
                )
            episodes.append(ep)
    _report("lora-lm-grpo", episodes, algo.update)
    benchmark.pedantic(algo.update, args=(episodes,), rounds=2, iterations=1)


if __name__ == "__main__":
    main(sys.argv[1:])
