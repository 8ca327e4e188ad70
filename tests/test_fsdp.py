"""runners.distributed.fsdp on 2 gloo ranks (spawned processes, no Ray): a sharded LoRA policy trained in lockstep
on unequal per-rank data gives every rank the same adapter, equal to a single process applying the
documented gradient semantics (mean over the ranks with data, then global-norm clipping, then AdamW),
also for a VLM whose image turns live on one rank only; and the gathered adapter / optimizer state
round-trip through disk into fresh sharded models."""

from __future__ import annotations

import multiprocessing as mp
import socket
import sys
import traceback
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))

LORA = dict(rank=4, alpha=8)
ALGO = dict(
    lr=1e-3,
    micro_batch_size=2,
    minibatch_size=4,
    epochs=2,
    old_logprobs="recompute",
    kl_coef=0.05,
    max_grad_norm=0.5,
    filter_zero_variance=True,
    seed=3,
)
"""Micro-batches, several optimizer steps, epochs, scoring and reference forwards: every unit kind pads."""


def _episodes(seed: int, groups: int, sizes: tuple[int, ...], flat: bool = False) -> list:
    """Synthetic multi-turn episodes (tokens of the tiny vocab); ``flat``: equal returns in every group."""
    from algos.data import Episode, Turn

    g = torch.Generator().manual_seed(seed)
    out = []
    for group in range(groups):
        for k, n_turns in enumerate(sizes):
            turns = []
            for _ in range(n_turns):
                prompt = torch.randint(10, 200, (int(torch.randint(3, 9, (1,), generator=g)),), generator=g).tolist()
                reply = torch.randint(10, 200, (int(torch.randint(1, 5, (1,), generator=g)),), generator=g).tolist()
                reward = 0.0 if flat else float(k) / len(sizes) + float(torch.rand(1, generator=g)) * 0.1
                turns.append(
                    Turn(prompt_ids=prompt, response_ids=reply, logprobs=[-1.0] * len(reply), reward=reward / n_turns)
                )
            out.append(Episode(turns=turns, group_id=group))
    return out


RANK_DATA = {
    # (a) rank 1 has nothing left after zero-variance filtering: rank 0's update alone.
    "idle": (dict(seed=0, groups=2, sizes=(1, 3, 2)), dict(seed=1, groups=2, sizes=(2, 1, 1), flat=True)),
    # both ranks train, with different numbers of turns, micro-batches and optimizer steps.
    "unequal": (dict(seed=2, groups=2, sizes=(3, 1, 2)), dict(seed=4, groups=1, sizes=(1, 2))),
}


PPO_ALGO = dict(
    lr=1e-3, vf_lr=1e-2, vf_clip=0.2, micro_batch_size=2, minibatch_size=4, epochs=2, old_logprobs="recompute", seed=3
)


def _policy(model_dir: str, value_head: bool = False):
    from algos.policies.lm import LoRAConfig, LoRALMPolicy
    from lora_helpers import perturb_lora

    torch.manual_seed(0)
    policy = LoRALMPolicy.from_pretrained(
        model_dir, LoRAConfig(**LORA), dtype=torch.float32, score_chunk=256, value_head=value_head
    )
    perturb_lora(policy, seed=1, scale=0.05)  # LoRA B starts at 0: make both factors get gradients
    return policy


def _algorithm(policy):
    import algos

    return algos.make("grpo", policy, **ALGO)


def _vlm_policy():
    """A tiny Qwen2-VL with LoRA on the language model (vision blocks stay in the root FSDP unit)."""
    from transformers.models.qwen2_vl import Qwen2VLImageProcessorPil

    from algos.policies.lm import LoRAConfig, LoRALMPolicy
    from lora_helpers import perturb_lora
    from test_policies_lm import tiny_qwen2_vl

    processor = Qwen2VLImageProcessorPil(min_pixels=28 * 28, max_pixels=56 * 56 * 4)
    policy = LoRALMPolicy(tiny_qwen2_vl(), LoRAConfig(**LORA), image_processor=processor, pad_token_id=0)
    perturb_lora(policy, seed=1, scale=0.05)
    return policy


def _vlm_episodes(policy) -> list:
    """Image turns (placeholders expanded) in one group with unequal returns."""
    import numpy as np

    from algos.data import Episode, Turn

    rng = np.random.default_rng(0)
    images = [(rng.random((56, 56, 3)) * 255).astype(np.uint8) for _ in range(3)]
    k = policy.image_token_count(images[0])
    prompt = [1, 2, 150] + [151] * k + [153, 5]
    return [
        Episode(
            turns=[
                Turn(
                    prompt_ids=prompt,
                    response_ids=[7, 8 + i],
                    logprobs=[-1.0, -1.0],
                    images=[images[i]],
                    reward=float(i),
                )
            ],
            group_id=0,
        )
        for i in range(3)
    ]


def _rank_main(rank: int, port: int, model_dir: str, out_dir: str, queue) -> None:
    try:
        import torch.distributed as dist

        from runners.distributed import fsdp
        from runners.distributed.ray_runner import init_process_group

        torch.set_num_threads(1)
        init_process_group(rank, 2, "127.0.0.1", port, "gloo", 120)
        result: dict = {"rank": rank}
        for name, data in RANK_DATA.items():
            policy = fsdp.shard_policy(_policy(model_dir))
            algorithm = _algorithm(policy)
            lockstep = fsdp.Lockstep(policy, algorithm)
            with lockstep.update():
                metrics = algorithm.update(_episodes(**data[rank]))
            result[name] = {
                "adapter": fsdp.gather_adapter(policy, rank0_only=False),
                "metrics": metrics,
                "padding": dict(lockstep.padding),
                "num_updates": algorithm.num_updates,
                "lr": algorithm.optimizer.param_groups[0]["lr"],
            }
        # A VLM: rank 0 trains on image turns, rank 1 has nothing and pads with text-only passes.
        vlm = fsdp.shard_policy(_vlm_policy())
        vlm_algo = _algorithm(vlm)
        lockstep = fsdp.Lockstep(vlm, vlm_algo)
        with lockstep.update():
            vlm_algo.update(_vlm_episodes(vlm) if rank == 0 else [])
        result["vlm"] = {"adapter": fsdp.gather_adapter(vlm, rank0_only=False), "padding": dict(lockstep.padding)}
        # (b) round trip of the "unequal" scenario's adapter and optimizer state through disk.
        adapter = fsdp.gather_adapter(policy)
        state = fsdp.gather_algorithm_state(algorithm)
        if rank == 0:
            fsdp.save_full_adapter(policy, adapter, Path(out_dir) / "adapter")
            torch.save(state, Path(out_dir) / "trainer_state.pt")
        dist.barrier()
        fresh = fsdp.shard_policy(_policy(model_dir))
        fresh.load_adapter(Path(out_dir) / "adapter")
        fresh_algo = _algorithm(fresh)
        fresh_algo.load_state_dict(torch.load(Path(out_dir) / "trainer_state.pt", weights_only=True))
        result["converted"] = fsdp.shard_optimizer_state(fresh_algo.optimizer)
        result["reloaded"] = fsdp.gather_adapter(fresh, rank0_only=False)
        result["reloaded_state"] = fsdp.gather_algorithm_state(fresh_algo)["optimizer"]["state"]
        result["saved_state"] = state["optimizer"]["state"]
        # (c) PPO: the critic sits in the root FSDP unit, trains in lockstep and round-trips beside the adapter.
        import algos

        ppo = fsdp.shard_policy(_policy(model_dir, value_head=True))
        ppo_algo = algos.make("ppo", ppo, **PPO_ALGO)
        lockstep = fsdp.Lockstep(ppo, ppo_algo)
        with lockstep.update():
            ppo_algo.update(_episodes(**RANK_DATA["unequal"][rank]))
        ppo_state = fsdp.gather_adapter(ppo, rank0_only=False)
        if rank == 0:
            fsdp.save_full_adapter(ppo, ppo_state, Path(out_dir) / "ppo_adapter")
        dist.barrier()
        fresh_ppo = fsdp.shard_policy(_policy(model_dir, value_head=True))
        fresh_ppo.load_adapter(Path(out_dir) / "ppo_adapter")
        result["ppo"] = {"adapter": ppo_state, "reloaded": fsdp.gather_adapter(fresh_ppo, rank0_only=False)}
        torch.save(result, Path(out_dir) / f"rank{rank}.pt")  # tensors through a queue would need shared memory
        queue.put({"rank": rank})
        dist.destroy_process_group()
    except BaseException:
        queue.put({"rank": rank, "error": traceback.format_exc()})


def _reference(model_dir: str, name: str) -> list[dict]:
    """Both ranks in one process as unsharded replicas on threads, with the documented semantics:
    at every optimizer step the replicas exchange gradients, each applies the mean over the ranks
    that had data for that step, clipped by its global norm; a rank that is done takes the steps
    of the others. Returns each replica's adapter and update metrics."""
    import threading

    replicas = [_algorithm(_policy(model_dir)) for _ in range(2)]
    slots: list = [None, None]
    barrier = threading.Barrier(2, timeout=300)
    out: list = [None, None]

    def params(algorithm) -> list:
        return algorithm.optimizer.param_groups[0]["params"]

    def exchange(rank: int, grads) -> list:
        slots[rank] = grads
        barrier.wait()
        active = [g for g in slots if g is not None]
        barrier.wait()
        return active

    def set_mean(algorithm, active: list) -> None:
        for i, p in enumerate(params(algorithm)):
            total = active[0][i].clone()
            for g in active[1:]:
                total += g[i]
            p.grad = total / len(active) if len(active) > 1 else total

    def run(rank: int) -> None:
        algorithm = replicas[rank]
        plain_clip = algorithm.clip_gradients

        def clip() -> float:
            set_mean(algorithm, exchange(rank, [p.grad.detach().clone() for p in params(algorithm)]))
            return plain_clip()

        algorithm.clip_gradients = clip
        metrics = algorithm.update(_episodes(**RANK_DATA[name][rank]))
        while True:  # done: take the steps of the ranks still training
            active = exchange(rank, None)
            if not active:
                break
            set_mean(algorithm, active)
            plain_clip()
            algorithm.optimizer.step()
        policy = algorithm.policy
        out[rank] = {
            "adapter": {n: p.detach().clone() for n, p in policy.model.named_parameters() if p.requires_grad},
            "metrics": metrics,
        }

    threads = [threading.Thread(target=run, args=(r,)) for r in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(600)
    assert all(o is not None for o in out), "reference replicas failed"
    return out


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    from runners.models.tiny import build_tiny_text_lm

    model_dir = str(build_tiny_text_lm(tmp_path_factory.mktemp("fsdp") / "model", seed=0))
    out_dir = tmp_path_factory.mktemp("fsdp_out")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()
    procs = [ctx.Process(target=_rank_main, args=(r, port, model_dir, str(out_dir), queue)) for r in range(2)]
    for p in procs:
        p.start()
    status = [queue.get() for _ in procs]
    for p in procs:
        p.join(60)
    for r in status:
        assert "error" not in r, r["error"]
    results = [torch.load(out_dir / f"rank{r}.pt", weights_only=True) for r in range(2)]
    return model_dir, out_dir, results


def _max_diff(a: dict, b: dict) -> float:
    assert sorted(a) == sorted(b)
    return max((a[k] - b[k]).abs().max().item() for k in a)


@pytest.mark.parametrize("name", list(RANK_DATA))
def test_ranks_agree_with_one_process_applying_the_averaged_gradients(two_ranks, name):
    model_dir, _, (r0, r1) = two_ranks
    ref = _reference(model_dir, name)
    a0, a1 = r0[name]["adapter"], r1[name]["adapter"]
    assert _max_diff(a0, a1) == 0.0, "ranks gathered different adapters"
    assert _max_diff(ref[0]["adapter"], ref[1]["adapter"]) == 0.0
    assert _max_diff(a0, ref[0]["adapter"]) < 1e-6
    initial = {k: v.detach() for k, v in _policy(model_dir).model.named_parameters() if v.requires_grad}
    assert _max_diff(a0, initial) > 1e-3, "no update happened"
    for got, want in ((r0, ref[0]), (r1, ref[1])):
        m, w = got[name]["metrics"], want["metrics"]
        assert (m["skipped"], m["optimizer_steps"]) == (w["skipped"], w["optimizer_steps"])
        assert m["pg_loss"] == pytest.approx(w["pg_loss"], abs=1e-5)
    m0, m1 = r0[name]["metrics"], r1[name]["metrics"]
    # Every rank took the same optimizer steps and advanced its schedule once.
    assert r0[name]["num_updates"] == r1[name]["num_updates"] == 1
    if name == "idle":
        assert m1["skipped"] == 1.0 and m0["optimizer_steps"] >= 3
        assert r1[name]["padding"]["C"] == m0["optimizer_steps"]
        assert r1[name]["padding"]["M"] > 0 and r1[name]["padding"]["S"] > 0
    else:
        assert m1["skipped"] == 0.0 and m0["optimizer_steps"] > m1["optimizer_steps"] > 0
        assert r1[name]["padding"]["C"] == m0["optimizer_steps"] - m1["optimizer_steps"]
        assert r1[name]["padding"]["M"] > 0 and r1[name]["padding"]["S"] > 0


def test_vlm_with_images_on_one_rank_only(two_ranks):
    _, _, (r0, r1) = two_ranks
    policy = _vlm_policy()
    algorithm = _algorithm(policy)
    algorithm.update(_vlm_episodes(policy))
    want = {n: p.detach() for n, p in policy.model.named_parameters() if p.requires_grad}
    assert _max_diff(r0["vlm"]["adapter"], r1["vlm"]["adapter"]) == 0.0
    assert _max_diff(r0["vlm"]["adapter"], want) < 1e-6
    assert _max_diff(want, {n: p.detach() for n, p in _vlm_policy().model.named_parameters() if p.requires_grad}) > 1e-3
    assert r1["vlm"]["padding"]["M"] > 0 and r1["vlm"]["padding"]["C"] > 0


def test_gathered_adapter_and_optimizer_state_round_trip(two_ranks):
    from algos.policies.lm import LoRALMPolicy

    model_dir, out_dir, results = two_ranks
    trained = results[0]["unequal"]["adapter"]
    for r in results:
        assert _max_diff(r["reloaded"], trained) == 0.0
        assert r["converted"] > 0
        saved, reloaded = r["saved_state"], r["reloaded_state"]
        assert sorted(saved) == sorted(reloaded)
        for idx in saved:
            for key, value in saved[idx].items():
                assert torch.equal(value, reloaded[idx][key]), (idx, key)
    # The file is an ordinary PEFT adapter: an unsharded policy loads it too.
    plain = _policy(model_dir)
    LoRALMPolicy.load_adapter(plain, Path(out_dir) / "adapter")
    assert _max_diff({n: p.detach() for n, p in plain.model.named_parameters() if p.requires_grad}, trained) == 0.0


def test_ppo_critic_trains_in_lockstep_and_round_trips_beside_the_adapter(two_ranks):
    from algos.policies.lm import VALUE_HEAD_FILE, LoRALMPolicy

    model_dir, out_dir, (r0, r1) = two_ranks
    trained = r0["ppo"]["adapter"]
    assert _max_diff(trained, r1["ppo"]["adapter"]) == 0.0, "ranks gathered different adapters or critics"
    head = {k: v for k, v in trained.items() if k.startswith("value_head.")}
    assert head and max(v.abs().max().item() for v in head.values()) > 1e-4, "the critic did not move from zero"
    for r in (r0, r1):
        assert _max_diff(r["ppo"]["reloaded"], trained) == 0.0
    assert (Path(out_dir) / "ppo_adapter" / VALUE_HEAD_FILE).is_file()
    plain = _policy(model_dir, value_head=True)  # an unsharded critic policy loads the same files
    LoRALMPolicy.load_adapter(plain, Path(out_dir) / "ppo_adapter")
    assert _max_diff({n: p.detach() for n, p in plain.model.named_parameters() if p.requires_grad}, trained) == 0.0
