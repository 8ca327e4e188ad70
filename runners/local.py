"""The local runner: SFT (if needed), then the RL step loop, in this process.

One RL step::

    generate    play loop.mazes_per_step mazes x rollout.group_size episodes (runners.rollout)
    score       task rewards -> rollout metrics (the algorithm turns returns into advantages)
    update      algorithm.update(episodes): old log-probs, advantages, clipped policy loss, step
    sync        publish the adapter (runners.sync.AdapterSync) and load it into the generator;
                every loop.parity_every syncs, the parity probe checks sampler == trainer
    eval        every eval.every steps: greedy solve rate on the fixed 64-maze set
    checkpoint  every checkpoint.every steps and at the end (runners.checkpoint)

The phases are module-level functions (:func:`generate_step`, :func:`update_step`,
:func:`sync_step`, :func:`eval_step`, :func:`save_checkpoint`, :func:`load_checkpoint`) so a
distributed runner calls the same code and only adds placement and transport. The loop around
them is :func:`runners.loop.run_rl_loop`, shared with the Ray runner; :class:`LocalBackend`
runs its phases here.

Determinism: every random choice is derived from ``(loop.seed, step)`` or lives in state that
checkpoints save (maze stream index, algorithm minibatch generator, optimizer, python / numpy /
torch RNGs). With the ``hf`` backend on CPU a run stopped after step k and resumed gives the
same metrics at step n as an uninterrupted run, bit for bit.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import random
import shutil
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import torch

import algos
from algos.data import Episode
from mazegym.evalsets import MazeStream
from runners import atomic
from runners import config as cfgmod
from runners import sft as sftmod
from runners.checkpoint import CheckpointManager, required_files
from runners.config import TrainConfig
from runners.evaluate import evaluate_set, write_json
from runners.metrics import MetricsLogger, Progress
from runners.report import record_invocation
from runners.loop import LoopState, RunResult, run_rl_loop
from runners.rollout import RolloutConfig, collect_groups


# =========================================================================== models
def _dtype(name: str) -> torch.dtype:
    return getattr(torch, name)


def base_model_dir(config: TrainConfig) -> Path:
    """The model RL/SFT start from: ``model.path``, or the tiny model built into the run dir."""
    if config.model.path:
        return Path(config.model.path).expanduser()
    return Path(config.run_dir) / "base_model"


def prepare_base_model(config: TrainConfig) -> Path:
    """Build the tiny model (with task tokens / image budget) unless ``model.path`` names one."""
    if config.model.path:
        return base_model_dir(config)
    from runners import tiny

    out = base_model_dir(config)
    marker = out / "mazegym_base.json"
    recipe = {
        "model": dataclasses.asdict(config.model),
        "size": config.maze.size,
        "max_moves": config.rollout.max_moves,
        "obs_mode": config.rollout.obs_mode,
        "seed": config.sft.seed,
    }
    if marker.is_file() and json.loads(marker.read_text()) == recipe:
        return out
    m = config.model
    shape = dict(
        num_hidden_layers=m.tiny_layers,
        hidden_size=m.tiny_hidden,
        intermediate_size=2 * m.tiny_hidden,
        num_attention_heads=m.tiny_hidden // 64,
        num_key_value_heads=m.tiny_hidden // 64,
    )
    if m.tiny == "maze-vlm":
        tiny.build_maze_vlm(
            out,
            seed=config.sft.seed,
            cell_px=int(config.rollout.env_kwargs.get("cell_px", 25)),
            vision={"width": m.vision_width, "iterations": m.vision_iterations, "patch_px": m.vision_patch_px},
            **shape,
        )
    elif m.tiny == "vlm":
        tiny.build_tiny_vlm(out, seed=config.sft.seed, **shape)
        side = config.maze.size * m.image_cell_px
        sftmod.set_image_pixels(out, min_pixels=side * side, max_pixels=side * side, resize=side % 28 != 0)
    else:
        tiny.build_tiny_text_lm(out, seed=config.sft.seed, **shape)
    if m.task_tokens:
        sftmod.add_task_tokens(
            out,
            sftmod.task_phrases(
                config.maze.size, config.rollout.max_moves, config.rollout.obs_mode, config.rollout.require_stop
            ),
        )
    atomic.write_json(marker, recipe)
    return out


def env_kwargs(config: TrainConfig) -> dict[str, Any]:
    """VisMazeEnv keyword arguments implied by the model (the tiny VLM's cell size)."""
    kwargs = dict(config.rollout.env_kwargs)
    if not config.model.path and config.model.tiny == "vlm":
        kwargs.setdefault("cell_px", config.model.image_cell_px)
    return kwargs


def rollout_config(config: TrainConfig) -> RolloutConfig:
    """The rollout settings actually used (config.rollout plus implied env kwargs)."""
    return dataclasses.replace(config.rollout, env_kwargs=env_kwargs(config))


def build_generator(config: TrainConfig, model_dir: Path, adapter: Path | None = None, version: int = 0):
    """The sampler: HF transformers (default) or vLLM, optionally with an adapter loaded."""
    if config.loop.backend == "vllm":
        from runners.generation.vllm import VLLMGenerator  # type: ignore[attr-defined]

        generator = VLLMGenerator(
            str(model_dir),
            dtype=config.model.dtype,
            max_lora_rank=config.lora.rank,
            gpu_memory_utilization=config.runner.vllm_gpu_memory_utilization,
        )
    else:
        from runners.generation.hf import HFGenerator

        generator = HFGenerator(model_dir, device=config.model.device, dtype=config.model.dtype)
    if adapter is not None:
        generator.load_adapter(str(adapter), version)
    return generator


def build_policy(config: TrainConfig, model_dir: Path, adapter: Path | None = None):
    """The trainable LoRA policy on ``model_dir`` (optionally starting from ``adapter``), with a value head when
    the algorithm trains a critic (ppo)."""
    from algos.policies.lm import LoRALMPolicy

    # Score log-probs at the rollout temperature: the importance ratio compares like with like.
    temperature = config.rollout.temperature if config.rollout.temperature > 0 else 1.0
    return LoRALMPolicy.from_pretrained(
        model_dir,
        lora=config.lora,
        dtype=_dtype(config.model.dtype),
        device=config.model.device,
        adapter=adapter,
        micro_batch_size=256,
        temperature=temperature,
        value_head=algos.get(config.algo.name).needs_value_head,
    )


def build_training(
    config: TrainConfig,
    model_dir: Path,
    adapter: Path | None = None,
    generator: Any = None,
    prepare_policy: Callable[[Any], Any] | None = None,
):
    """Build ``(generator, policy, algorithm, probe)``, seeded, exactly as every runner must.

    The local runner and each Ray worker call this, so every rank starts from the same LoRA
    init and the same algorithm state. ``generator`` replaces the default one (e.g. a vLLM
    engine with sleep mode on a GPU worker); ``prepare_policy(policy)`` runs after the LoRA init
    and before the optimizer is built (the Ray worker shards the policy there:
    :func:`runners.fsdp.shard_policy`); ``probe`` is None when ``loop.parity_every == 0``.
    """
    if generator is None:
        generator = build_generator(config, model_dir, adapter, version=0)
    sftmod.seed_everything(
        config.loop.seed
    )  # after the generator, whichever built it: the LoRA init is the same everywhere
    policy = build_policy(config, model_dir, adapter)
    if prepare_policy is not None:
        policy = prepare_policy(policy)
    params = dict(config.algo.params)
    params.setdefault("seed", config.loop.seed)
    params["episode_mean"] = config.algo.episode_mean
    algorithm = algos.make(config.algo.name, policy, **params)
    probe = None
    if config.loop.parity_every > 0:
        from runners.parity import ParityProbe

        probe = ParityProbe.for_generator(generator, trainer_dtype=config.model.dtype)
    return generator, policy, algorithm, probe


# =========================================================================== SFT stage
def sft_dir(config: TrainConfig) -> Path:
    """Where the SFT stage writes: ``<run_dir>/sft``."""
    return Path(config.run_dir) / "sft"


def find_sft_checkpoint(config: TrainConfig) -> Path | None:
    """An existing SFT result: ``sft.checkpoint`` or ``<run_dir>/sft/{model,adapter}`` when complete."""
    if config.sft.checkpoint:
        path = Path(config.sft.checkpoint).expanduser()
        if not path.exists():
            raise cfgmod.ConfigError(f"sft.checkpoint={config.sft.checkpoint!r} does not exist")
        return path
    out = sft_dir(config) / ("model" if config.sft.mode == "full" else "adapter")
    return out if (sft_dir(config) / "DONE").is_file() and out.exists() else None


def run_sft(config: TrainConfig, log: Callable[[str], None] = print, metrics: MetricsLogger | None = None) -> Path:
    """Supervised stage on oracle demonstrations; returns the SFT model dir (full) or adapter dir (lora)."""
    from runners.generation.prompts import ChatEncoder, image_token_id_of, load_image_processor, load_tokenizer

    set_threads(config)
    base = prepare_base_model(config)
    out = sft_dir(config)
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    if metrics is not None:  # SFT restarts from scratch: an unfinished attempt's records would repeat steps
        discard_sft_records(metrics)
    sftmod.seed_everything(config.sft.seed)
    tokenizer = load_tokenizer(base)
    image_processor = load_image_processor(base)
    encoder = ChatEncoder(tokenizer, image_processor, image_token_id_of(base))
    rc = rollout_config(config)
    mazes = MazeStream(
        size=config.maze.size,
        seed=config.maze.stream_seed + 1,
        generator=config.maze.generator,
        max_optimal_moves=rc.max_moves,
    )

    def make_turns(spec, rng):
        return sftmod.demo_turns(
            spec,
            encoder,
            max_moves=rc.max_moves,
            obs_mode=rc.obs_mode,
            history=rc.history,
            history_k=rc.history_k,
            detours=config.sft.detours,
            rng=rng,
            eos_id=tokenizer.eos_token_id,
            env_kwargs=rc.env_kwargs,
            state_prompt=rc.state_prompt,
            random_start=config.sft.random_starts > 0 and bool(rng.random() < config.sft.random_starts),
        )

    demos = sftmod.DemoStream(mazes, make_turns, seed=config.sft.seed)
    if config.sft.mode == "full":
        from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForImageTextToText

        auto = (
            AutoModelForImageTextToText
            if hasattr(AutoConfig.from_pretrained(base), "vision_config")
            else AutoModelForCausalLM
        )
        model = auto.from_pretrained(str(base), dtype=_dtype(config.model.dtype)).to(config.model.device)
    else:
        from algos.policies.lm import add_lora

        from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForImageTextToText

        auto = (
            AutoModelForImageTextToText
            if hasattr(AutoConfig.from_pretrained(base), "vision_config")
            else AutoModelForCausalLM
        )
        model = add_lora(
            auto.from_pretrained(str(base), dtype=_dtype(config.model.dtype)).to(config.model.device), config.lora
        )
    t0 = time.perf_counter()
    vision_final: dict[str, float] = {}
    if config.sft.vision_steps > 0:
        if not sftmod.has_vision_pretraining(model):
            raise cfgmod.ConfigError(
                f"sft.vision_steps={config.sft.vision_steps}: this model has no vision pretraining "
                "objective (MazeVLM has one); set sft.vision_steps=0"
            )
        vision_progress, on_vision_step = _step_logger(
            config, metrics, config.sft.vision_steps, "vision pretraining", "vision", "vision_loss"
        )
        try:
            vision_final = sftmod.pretrain_vision(
                model,
                demos,
                steps=config.sft.vision_steps,
                batch_size=config.sft.batch_size,
                lr=config.sft.vision_lr,
                image_processor=image_processor,
                log=on_vision_step,
            )
        finally:
            vision_progress.close()
        log(
            f"[sft] vision pretraining: {config.sft.vision_steps} steps, move accuracy "
            f"{vision_final['vision_move_accuracy']:.2f} on its last batch"
        )
    if config.sft.mode == "full" and config.sft.freeze_vision:
        freeze_vision_tower(model)
    params = [p for p in model.parameters() if p.requires_grad]
    progress, on_step = _step_logger(config, metrics, config.sft.steps, "SFT", "sft", "loss")
    try:
        final = sftmod.train_sft(
            model,
            params,
            demos,
            steps=config.sft.steps,
            batch_size=config.sft.batch_size,
            lr=config.sft.lr,
            pad_id=tokenizer.pad_token_id,
            image_processor=image_processor,
            localization_weight=config.sft.localization_weight,
            log=on_step,
        )
    finally:
        progress.close()
    if config.sft.mode == "full":
        target = out / "model"
        model.save_pretrained(str(target), safe_serialization=True)
        tokenizer.save_pretrained(str(target))
        for extra in ("preprocessor_config.json", "generation_config.json"):
            if (base / extra).is_file():
                shutil.copy(base / extra, target / extra)
    else:
        target = out / "adapter"
        model.save_pretrained(str(target), safe_serialization=True)
    demo_moves = (config.sft.vision_steps + config.sft.steps) * config.sft.batch_size
    info = {
        "steps": config.sft.steps,
        "vision_steps": config.sft.vision_steps,
        "batch_size": config.sft.batch_size,
        "demo_moves": demo_moves,
        "mazes_seen": mazes.index,
        "seconds": time.perf_counter() - t0,
        "final": final,
        "vision_final": vision_final,
        "mode": config.sft.mode,
    }
    write_json(out / "sft_info.json", info)
    atomic.write_text(out / "DONE", "ok\n")
    log(
        f"[sft] {config.sft.steps} steps ({info['demo_moves']} demonstration moves from {mazes.index} mazes) "
        f"in {info['seconds']:.0f}s -> {target}"
    )
    return target


SFT_PHASES = ("vision", "sft")
"""Metric phases the SFT stage logs (vision pretraining, then SFT); a rerun stage writes them all again."""


def discard_sft_records(metrics: MetricsLogger) -> int:
    """Drop the records of an earlier (unfinished) SFT stage, vision pretraining included; returns how many."""
    return metrics.discard(lambda record: record.get("phase") in SFT_PHASES)


def _step_logger(
    config: TrainConfig, metrics: MetricsLogger | None, steps: int, desc: str, phase: str, loss_key: str
) -> tuple[Progress, Callable[[int, dict[str, float]], None]]:
    """A progress bar over ``steps`` and the per-step callback that advances it and logs the step under ``phase``."""
    progress = Progress(steps, desc=desc, enabled=config.logging.progress)

    def on_step(step: int, m: dict[str, float]) -> None:
        progress.update(1, loss=m[loss_key])
        if metrics is not None:
            metrics.log(step, m, phase=phase)

    return progress, on_step


def freeze_vision_tower(model: torch.nn.Module) -> int:
    """Freeze the vision encoder except its projector into the LM (Qwen-VL's merger); returns the frozen tensor count.

    Backpropagating through a from-scratch vision tower dominates tiny-VLM SFT cost on CPU; a
    frozen random patch embedding still separates the maze's few flat colours, and the trained
    merger learns to read them.
    """
    import re

    from algos.policies.lm import VISION_MODULE_PATTERN

    vision = re.compile(VISION_MODULE_PATTERN)
    frozen = 0
    for name, param in model.named_parameters():
        if vision.fullmatch(name) and "merger" not in name and "multi_modal_projector" not in name:
            param.requires_grad_(False)
            frozen += 1
    return frozen


def rl_start(
    config: TrainConfig, log: Callable[[str], None] = print, metrics: MetricsLogger | None = None
) -> tuple[Path, Path | None]:
    """(model dir, starting adapter or None) for RL: run SFT first when enabled and missing."""
    base = prepare_base_model(config)
    if config.sft.enabled == "never":
        return base, None
    found = None if config.sft.enabled == "always" else find_sft_checkpoint(config)
    if found is None:
        found = run_sft(config, log=log, metrics=metrics)
    else:
        log(f"[sft] using existing SFT checkpoint {found}")
    if config.sft.mode == "full" or (found / "config.json").is_file():
        return found, None
    return base, found


# =========================================================================== the step phases
def set_threads(config: TrainConfig) -> None:
    """Apply ``loop.num_threads`` to torch on CPU."""
    if config.loop.num_threads > 0 and config.model.device == "cpu":
        torch.set_num_threads(config.loop.num_threads)


def step_seed(config: TrainConfig, step: int) -> int:
    """The sampling seed of RL step ``step`` (a pure function: resuming replays it exactly)."""
    return config.loop.seed * 1_000_003 + step


def generate_step(
    generator: Any, stream: MazeStream, config: TrainConfig, step: int, rollout: RolloutConfig | None = None
) -> list[Episode]:
    """Draw the step's mazes from ``stream`` and play them (:func:`play_step_mazes`)."""
    return play_step_mazes(generator, [next(stream) for _ in range(config.loop.mazes_per_step)], config, step, rollout)


def play_step_mazes(
    generator: Any,
    mazes: Sequence[Any],
    config: TrainConfig,
    step: int,
    rollout: RolloutConfig | None = None,
    offset: int = 0,
) -> list[Episode]:
    """Play step ``step``'s maze groups; ``offset`` = index of ``mazes[0]`` among the step's mazes.

    Group ids and env seeds depend only on (step, index of the maze in the step), so a worker
    playing a slice of the step's mazes produces exactly what one process playing all would.
    """
    rollout = rollout or rollout_config(config)
    return collect_groups(
        generator,
        mazes,
        rollout,
        seed=step_seed(config, step) + offset * rollout.group_size,
        group_offset=step * config.loop.mazes_per_step + offset,
    )


def vision_placeholder_ids(model_dir: Path) -> set[int]:
    """Token ids a VLM reserves for image/video inputs (empty for text models)."""
    import transformers

    config = transformers.AutoConfig.from_pretrained(str(model_dir))
    return {
        int(i)
        for i in (getattr(config, "image_token_id", None), getattr(config, "video_token_id", None))
        if i is not None
    }


def drop_placeholder_turns(episodes: list[Episode], forbidden: set[int]) -> int:
    """Remove turns whose *sampled reply* contains an image/video placeholder token; returns how many.

    A VLM may sample ``<|image_pad|>`` as ordinary text. The trainer's forward would then see a
    placeholder with no image behind it and fail, so such turns (always invalid replies) are
    left out of the update. The episode's outcome is unchanged.
    """
    if not forbidden:
        return 0
    dropped = 0
    for ep in episodes:
        keep = [t for t in ep.turns if not forbidden.intersection(t.response_ids)]
        dropped += len(ep.turns) - len(keep)
        if dropped and len(keep) != len(ep.turns):
            ep.info["turns_dropped"] = len(ep.turns) - len(keep)
            ep.info["return_before_drop"] = ep.episode_return
            ep.turns = keep
    return dropped


def update_step(algorithm: Any, episodes: list[Episode], forbidden_ids: set[int] | None = None) -> dict[str, float]:
    """One algorithm update on the step's episodes (returns its metrics, collapse diagnostics included)."""
    dropped = drop_placeholder_turns(episodes, forbidden_ids or set())
    metrics = algorithm.update(episodes)
    metrics["dropped_placeholder_turns"] = float(dropped)
    return metrics


def sync_step(policy: Any, generator: Any, sync: Any, version: int, probe: Any = None) -> dict[str, float]:
    """Publish the adapter as ``version`` and load it into the generator; optionally check parity."""
    sync.publish(policy, version)
    sync.pull(generator)
    out = {"sync/version": float(generator.adapter_version)}
    if probe is not None:
        result = probe.check(generator, policy, version)
        out["sync/parity_mean_abs"] = result["mean_abs"]
    return out


def eval_step(generator: Any, config: TrainConfig, set_name: str | None = None) -> dict[str, Any]:
    """Greedy (or eval.temperature) evaluation on a fixed set (default: maze.eval_set)."""
    name = set_name or config.maze.eval_set
    with vision_iterations_for(generator, config, name) as iterations:
        result = evaluate_set(generator, name, rollout_config(config), temperature=config.eval.temperature)
    if iterations:
        result["vision_iterations"] = iterations
    return result


@contextlib.contextmanager
def vision_iterations_for(generator: Any, config: TrainConfig, set_name: str):
    """Within the block, a recurrent vision encoder runs more iterations on sets of larger mazes.

    Yields the iteration count used (None when the model has no recurrent encoder, scaling is
    off, or the set's mazes are not larger than ``maze.size``); restores the count afterwards.
    """
    from algos.models.maze_vlm import RecurrentConvEncoder
    from mazegym.evalsets import EVAL_SETS

    model = getattr(generator, "model", None)
    encoders = (
        [m for m in model.modules() if isinstance(m, RecurrentConvEncoder)]
        if isinstance(model, torch.nn.Module)
        else []
    )
    size = EVAL_SETS[set_name].size
    if not encoders or not config.eval.scale_vision_iterations or size <= config.maze.size:
        yield None
        return
    saved = [e.iterations for e in encoders]
    iterations = int(np.ceil(saved[0] * size / config.maze.size))
    try:
        for e in encoders:
            e.iterations = iterations
        yield iterations
    finally:
        for e, n in zip(encoders, saved):
            e.iterations = n


def rng_state() -> dict[str, Any]:
    """Python, numpy and torch RNG states as plain JSON data (no pickles: loading runs no code)."""
    version, words, gauss = random.getstate()
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    return {
        "python": {"version": version, "state": list(words), "gauss": gauss},
        "numpy": {
            "kind": kind,
            "keys": keys.tolist(),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached": float(cached),
        },
        "torch": torch.get_rng_state().tolist(),
    }


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore :func:`rng_state`."""
    py, npy = state["python"], state["numpy"]
    random.setstate((int(py["version"]), tuple(int(w) for w in py["state"]), py["gauss"]))
    np.random.set_state(
        (
            str(npy["kind"]),
            np.asarray(npy["keys"], dtype=np.uint32),
            int(npy["pos"]),
            int(npy["has_gauss"]),
            float(npy["cached"]),
        )
    )
    torch.set_rng_state(torch.tensor(state["torch"], dtype=torch.uint8))


def save_checkpoint(
    manager: CheckpointManager,
    step: int,
    policy: Any,
    algorithm: Any,
    stream_state: dict[str, Any],
    config: TrainConfig,
    extra: dict[str, Any],
) -> Path:
    """Write checkpoint ``step`` (adapter, optimizer/scheduler, RNGs, maze stream state, step, config, ``extra``)."""

    def write(tmp: Path) -> None:
        policy.save_adapter(tmp / "adapter")
        torch.save(algorithm.state_dict(), tmp / "trainer_state.pt")
        (tmp / "rng_state.json").write_text(json.dumps(rng_state()))
        state = {"step": step, "stream": stream_state, "config": cfgmod.to_dict(config), **extra}
        (tmp / "state.json").write_text(json.dumps(state, indent=2, default=str))

    return manager.save(step, write)


def checkpoint_files(config: TrainConfig) -> tuple[str, ...]:
    """The files every checkpoint of this run must hold (the critic's weights too when the algorithm trains one)."""
    return required_files(value_head=algos.get(config.algo.name).needs_value_head)


def load_checkpoint(path: Path, policy: Any, algorithm: Any, stream: MazeStream) -> dict[str, Any]:
    """Restore what :func:`save_checkpoint` wrote into live objects; returns the state.json content.

    Nothing is unpickled: the trainer state loads with ``weights_only=True`` (tensors and
    plain containers only) and the RNG states are JSON.
    """
    policy.load_adapter(path / "adapter")
    algorithm.load_state_dict(torch.load(path / "trainer_state.pt", weights_only=True, map_location="cpu"))
    set_rng_state(json.loads((path / "rng_state.json").read_text()))
    state = json.loads((path / "state.json").read_text())
    stream.load_state_dict(state["stream"])
    return state


# =========================================================================== the loop
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
    cfgmod.validate(config)
    set_threads(config)
    run_dir = Path(config.run_dir)
    manager = CheckpointManager(
        run_dir / "checkpoints", keep=config.checkpoint.keep, log=log, required=checkpoint_files(config)
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
    from runners.sync import AdapterSync

    model_dir, start_adapter = rl_start(config, log=log, metrics=metrics)
    generator, policy, algorithm, probe = build_training(config, model_dir, start_adapter)
    stream = MazeStream(
        size=config.maze.size,
        seed=config.maze.stream_seed,
        generator=config.maze.generator,
        max_optimal_moves=config.rollout.max_moves,
    )
    sync_dir = run_dir / "adapter_sync"
    shutil.rmtree(sync_dir, ignore_errors=True)
    state = LoopState()
    if resume_from is not None:
        saved = load_checkpoint(resume_from, policy, algorithm, stream)
        state = LoopState(
            step=int(saved["step"]),
            before=saved.get("before"),
            history=saved.get("eval_history", []),
            record=saved.get("record"),
        )
        generator.load_adapter(str(resume_from / "adapter"), state.step)
        log(f"[resume] from {resume_from} at RL step {state.step}")
    else:
        log(
            f"[resume] nothing resumed (checkpoint.resume={config.checkpoint.resume}): RL starts at step 0, "
            f"checkpoints go to {manager.root}"
        )
    backend = LocalBackend(
        config, model_dir, generator, policy, algorithm, probe, AdapterSync(sync_dir, keep=2), manager
    )
    return run_rl_loop(config, backend, stream, state, run_dir, manager, metrics, log, stop_after, t_start)


class LocalBackend:
    """Every phase of the RL step in this process (the :class:`runners.loop.StepBackend` of the local runner)."""

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
        save_checkpoint(self.manager, step, self.policy, self.algorithm, stream_state, self.config, extra)

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
