"""Supervised fine-tuning on oracle demonstrations (:mod:`runners.train.demos`), in exactly the RL stage's
conversation format; only the reply tokens carry loss. The SFT stage of a run (:func:`run_sft`) runs the vision
encoder's own pretraining first when asked (:mod:`runners.models.vision_pretraining`) and writes its result into the
run directory (:mod:`runners.train.sft_result` finds it again).

Two modes:

* ``full`` trains every weight. A tiny model built from a random init cannot learn the task
  from a few LoRA steps, so the CPU preset trains the whole model here and RL then trains a
  LoRA adapter on top of the SFT weights (the case study's shape: SFT checkpoint, then LoRA GRPO).
* ``lora`` trains a LoRA adapter on a pretrained model (the 8B recipe); RL continues that adapter.

The data budget (``SFTConfig.steps`` x ``batch_size`` demonstration moves) is the knob that sets
how good the SFT start is; the CPU preset picks it so the start is clearly imperfect.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import torch

from algos.data import Turn
from algos.models import load_model
from mazegym.evalsets import MazeStream
from runners import atomic, models
from runners.config import ConfigError, TrainConfig
from runners.config.derived import rollout_config, vision_batch_size
from runners.models.vision_pretraining import pretrain_vision
from runners.config.runner import update_threads
from runners.rollout.evaluate import write_json
from runners.train.demos import DemoStream, demo_turns
from runners.train.fingerprints import result_fingerprint
from runners.train.freezing import freeze_vision_tower
from runners.train.metrics import MetricsLogger, Progress
from runners.train.seeding import seed_everything
from runners.train.sft_result import sft_dir


# --------------------------------------------------------------------------- the loss
def response_nll(
    model: torch.nn.Module,
    turns: Sequence[Turn],
    pad_id: int,
    image_processor: Any = None,
    localization_weight: float = 0.0,
) -> tuple[torch.Tensor, int]:
    """Mean negative log-likelihood of the reply tokens of ``turns`` (prompt tokens masked out).

    With ``localization_weight > 0`` and a model whose spec has an agent-localisation loss
    (:attr:`runners.models.ModelSpec.localization_inputs`), adds that weight times that loss (each
    turn's one image, its ``state`` cell).
    Returns the loss and the number of reply tokens it averages over.
    """
    rows = [t.input_ids for t in turns]
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    attention = torch.zeros_like(ids)
    labels = torch.full_like(ids, -100)
    for i, t in enumerate(turns):
        n, p = len(rows[i]), len(t.prompt_ids)
        ids[i, :n] = torch.tensor(rows[i])
        attention[i, :n] = 1
        labels[i, p:n] = ids[i, p:n]
    extra: dict[str, torch.Tensor] = {}
    images = [im for t in turns for im in t.images]
    if images:
        from runners.rollout.generation.prompts import to_pil

        processed = image_processor(images=[to_pil(im) for im in images], return_tensors="pt")
        extra = {k: v for k, v in processed.items() if isinstance(v, torch.Tensor)}
        image_token_id = getattr(model.config, "image_token_id", None)
        if image_token_id is not None:  # Qwen-VL M-RoPE needs the modality of every token
            extra["mm_token_type_ids"] = (ids == image_token_id).to(torch.int)
        if localization_weight > 0 and all(len(t.images) == 1 and t.state for t in turns):
            localize = models.spec_of(model).localization_inputs
            if localize is not None:
                extra.update(localize(extra, list(turns)))
    device = next(model.parameters()).device
    out = model(
        input_ids=ids.to(device),
        attention_mask=attention.to(device),
        use_cache=False,
        **{k: v.to(device) for k, v in extra.items()},
    )
    logits = out.logits.float()
    targets = labels[:, 1:].to(device)
    loss = torch.nn.functional.cross_entropy(
        logits[:, :-1].reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=-100
    )
    if getattr(out, "aux_loss", None) is not None:
        loss = loss + localization_weight * out.aux_loss
    return loss, int((targets != -100).sum())


def train_sft(
    model: torch.nn.Module,
    params: list[torch.nn.Parameter],
    demos: DemoStream,
    *,
    steps: int,
    batch_size: int,
    lr: float,
    pad_id: int,
    image_processor: Any = None,
    localization_weight: float = 0.0,
    warmup: int = 10,
    log: Callable[[int, dict[str, float]], None] | None = None,
    threads: int = 1,
) -> dict[str, float]:
    """AdamW on the reply NLL for ``steps`` batches of ``batch_size`` demonstration moves.

    The learning rate warms up linearly over ``warmup`` steps, then decays with a cosine to 10%.
    ``threads > 1`` computes each batch's gradient in parts on copies of the model, one thread
    each (as :func:`runners.models.vision_pretraining.pretrain_vision`), each part weighted by its share of the
    reply tokens.
    Returns the final metrics.
    """
    from algos.parallel import Replicas, contiguous_parts

    model.train()
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
    replicas = (
        Replicas(model, threads, lambda m: [p for p in m.parameters() if p.requires_grad]) if threads > 1 else None
    )

    def part_loss(m: torch.nn.Module, part: Sequence[Turn], total: int) -> tuple[float, int]:
        loss, ntok = response_nll(m, part, pad_id, image_processor, localization_weight)
        (loss * (ntok / total)).backward()
        return loss.item() * ntok / total, ntok

    def schedule(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        progress = (step - warmup) / max(steps - warmup, 1)
        return 0.1 + 0.9 * 0.5 * (1 + np.cos(np.pi * min(progress, 1.0)))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, schedule)
    metrics: dict[str, float] = {}
    for step in range(1, steps + 1):
        t0 = time.perf_counter()
        turns = demos.batch(batch_size)
        opt.zero_grad(set_to_none=True)
        total = sum(len(t.input_ids) - len(t.prompt_ids) for t in turns)
        if replicas is None:
            loss, ntok = part_loss(model, turns, total)
        else:
            parts = contiguous_parts(turns, replicas.threads)
            results = replicas.map(lambda m, part: part_loss(m, part, total), parts)
            loss, ntok = sum(r[0] for r in results), sum(r[1] for r in results)
            replicas.gather_gradients()
        grad_norm = torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        sched.step()
        if replicas is not None:
            replicas.copy_weights()
        metrics = {
            "loss": loss,
            "grad_norm": float(grad_norm),
            "tokens": float(ntok),
            "lr": sched.get_last_lr()[0],
            "step_seconds": time.perf_counter() - t0,
        }
        if log is not None:
            log(step, metrics)
    model.eval()
    return metrics


def sft_threads(config: TrainConfig) -> int:
    """Threads the SFT stage computes each batch's gradient on (``runner.update_threads``, on CPU only)."""
    return update_threads(config.runner) if config.model.device == "cpu" else 1


def vision_steps(config: TrainConfig) -> int:
    """Vision pretraining batches before SFT: ``model.vision_pretraining.steps`` of a kind that has them, else 0."""
    pretraining = getattr(config.model, "vision_pretraining", None)
    return pretraining.steps if pretraining else 0


# --------------------------------------------------------------------------- the SFT stage of a run
def run_sft(
    config: TrainConfig,
    base: Path,
    mazes: MazeStream,
    log: Callable[[str], None] = print,
    metrics: MetricsLogger | None = None,
) -> Path:
    """The SFT stage of a run: demonstrations from ``mazes`` on base model ``base``, written to
    ``<run_dir>/sft``; returns the SFT model dir (full mode) or adapter dir (lora mode)."""
    final_dir = sft_dir(config)
    final_dir.parent.mkdir(parents=True, exist_ok=True)
    # Written beside its place and swapped in when complete: a killed SFT stage leaves the previous result whole.
    out = atomic.temp_dir_beside(final_dir)
    try:
        return _run_sft_into(config, base, mazes, out, final_dir, log, metrics)
    finally:
        if out.exists():
            shutil.rmtree(out, ignore_errors=True)


def pretrain_vision_as_configured(
    config: TrainConfig,
    model: torch.nn.Module,
    cells: DemoStream,
    image_processor: Any,
    steps: int,
    log: Callable[[int, dict[str, float]], None] | None = None,
) -> dict[str, float]:
    """:func:`pretrain_vision` for ``steps`` steps with the model kind's ``model.vision_pretraining`` settings; its
    final metrics."""
    settings = config.model.vision_pretraining
    return pretrain_vision(
        model,
        cells,
        steps=steps,
        batch_size=vision_batch_size(config),
        lr=settings.lr,
        image_processor=image_processor,
        log=log,
        threads=sft_threads(config),
        iterations=settings.iterations,
        seed=config.sft.seed,
        path_weight=settings.path_weight,
    )


def demo_maker(config: TrainConfig, base: Path) -> tuple[Any, Any, Callable[..., list[Turn]]]:
    """``(tokenizer, image_processor, make_turns)`` for base model ``base``: ``make_turns(spec, rng, vision=False)``
    gives the oracle's demonstration turns of one maze as RL prompts them (``vision=True``: one turn from a random
    open cell, what vision pretraining reads)."""
    from runners.rollout.generation.prompts import ChatEncoder, image_token_id_of, load_image_processor, load_tokenizer

    tokenizer = load_tokenizer(base)
    image_processor = load_image_processor(base)
    encoder = ChatEncoder(tokenizer, image_processor, image_token_id_of(base))
    rc = rollout_config(config)

    def make_turns(spec, rng, vision: bool = False):
        return demo_turns(
            spec,
            encoder,
            max_moves=rc.max_moves,
            obs_mode=rc.obs_mode,
            history=rc.history,
            history_k=rc.history_k,
            detours=0 if vision else config.sft.detours,
            max_turns=1 if vision else None,
            rng=rng,
            eos_id=tokenizer.eos_token_id,
            env_kwargs=rc.env_kwargs,
            state_prompt=rc.state_prompt,
            size_free_prompt=rc.size_free_prompt,
            random_start=vision or (config.sft.random_starts > 0 and bool(rng.random() < config.sft.random_starts)),
        )

    return tokenizer, image_processor, make_turns


def _run_sft_into(
    config: TrainConfig,
    base: Path,
    mazes: MazeStream,
    out: Path,
    final_dir: Path,
    log: Callable[[str], None],
    metrics: MetricsLogger | None,
) -> Path:
    """:func:`run_sft`'s work, written into the temporary dir ``out`` and swapped into ``final_dir`` at the end."""
    if metrics is not None:  # SFT restarts from scratch: an unfinished attempt's records would repeat steps
        discard_sft_records(metrics)
    seed_everything(config.sft.seed)
    tokenizer, image_processor, make_turns = demo_maker(config, base)
    demos = DemoStream(mazes, make_turns, seed=config.sft.seed)
    model = load_model(base, dtype=getattr(torch, config.model.dtype)).to(config.model.device)
    if config.sft.mode == "lora":
        from algos.policies.lm import add_lora

        model = add_lora(model, config.lora)
    t0 = time.perf_counter()
    vision_final = _vision_stage(config, model, mazes, make_turns, image_processor, log, metrics)
    if config.sft.mode == "full" and getattr(config.model, "freeze_vision", False):
        freeze_vision_tower(model)
    final = _sft_stage(config, model, demos, tokenizer.pad_token_id, image_processor, metrics)
    target = _save_result(config, model, tokenizer, base, out)
    info = {
        "steps": config.sft.steps,
        "vision_steps": vision_steps(config),
        "batch_size": config.sft.batch_size,
        "vision_batch_size": vision_batch_size(config),
        "demo_moves": vision_steps(config) * vision_batch_size(config) + config.sft.steps * config.sft.batch_size,
        "mazes_seen": mazes.index,
        "seconds": time.perf_counter() - t0,
        "final": final,
        "vision_final": vision_final,
        "mode": config.sft.mode,
        "fingerprint": result_fingerprint(target),
    }
    write_json(out / "sft_info.json", info)
    atomic.write_text(out / "DONE", "ok\n")
    atomic.replace_dir(out, final_dir)
    target = final_dir / target.name
    log(
        f"[sft] {config.sft.steps} steps ({info['demo_moves']} demonstration moves from {mazes.index} mazes) "
        f"in {info['seconds']:.0f}s -> {target}"
    )
    return target


def _vision_stage(
    config: TrainConfig,
    model: torch.nn.Module,
    mazes: MazeStream,
    make_turns: Callable[..., list[Turn]],
    image_processor: Any,
    log: Callable[[str], None],
    metrics: MetricsLogger | None,
) -> dict[str, float]:
    """Vision pretraining before SFT when ``model.vision_pretraining.steps > 0``; its final metrics (empty when it does
    not run)."""
    steps = vision_steps(config)
    if steps <= 0:
        return {}
    if models.spec_of(model).vision_pretraining_loss is None:
        raise ConfigError(
            f"model.vision_pretraining.steps={steps}: this model has no vision pretraining objective (the model "
            f"kinds with one: {', '.join(models.having('vision_pretraining_loss'))})"
        )
    progress, on_step = _step_logger(config, metrics, steps, "vision pretraining", "vision", "vision_loss")
    # The encoder learns from one random open cell of each fresh maze: far more mazes for the same number of
    # moves than whole demonstrations give, which is what lets its routing hold on larger mazes.
    cells = DemoStream(mazes, lambda spec, rng: make_turns(spec, rng, vision=True), seed=config.sft.seed)
    try:
        final = pretrain_vision_as_configured(config, model, cells, image_processor, steps, on_step)
    finally:
        progress.close()
    log(f"[sft] vision pretraining: {steps} steps, move accuracy {final['vision_move_accuracy']:.2f} on its last batch")
    return final


def _sft_stage(
    config: TrainConfig,
    model: torch.nn.Module,
    demos: DemoStream,
    pad_id: int,
    image_processor: Any,
    metrics: MetricsLogger | None,
) -> dict[str, float]:
    """:func:`train_sft` on the model's trainable parameters with the run's ``sft.*`` settings; its final metrics."""
    params = [p for p in model.parameters() if p.requires_grad]
    progress, on_step = _step_logger(config, metrics, config.sft.steps, "SFT", "sft", "loss")
    try:
        return train_sft(
            model,
            params,
            demos,
            steps=config.sft.steps,
            batch_size=config.sft.batch_size,
            lr=config.sft.lr,
            pad_id=pad_id,
            image_processor=image_processor,
            localization_weight=getattr(config.model, "localization_weight", 0.0),
            log=on_step,
            threads=sft_threads(config),
        )
    finally:
        progress.close()


def _save_result(config: TrainConfig, model: torch.nn.Module, tokenizer: Any, base: Path, out: Path) -> Path:
    """Write the trained model (full mode, with the base model's tokenizer and processor) or adapter (lora mode)
    into ``out``; returns where."""
    if config.sft.mode != "full":
        target = out / "adapter"
        model.save_pretrained(str(target), safe_serialization=True)
        return target
    target = out / "model"
    model.save_pretrained(str(target), safe_serialization=True)
    tokenizer.save_pretrained(str(target))
    for extra in ("preprocessor_config.json", "generation_config.json"):
        if (base / extra).is_file():
            shutil.copy(base / extra, target / extra)
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
