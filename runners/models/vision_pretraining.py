"""Vision pretraining: the vision encoder learns to read mazes on its own objective before SFT.

The objective is a model kind's hook (:attr:`runners.models.ModelSpec.vision_pretraining_loss`; MazeVLM's
recurrent encoder predicts the agent's cell and the oracle's move); this module is the loop around it, run by the
SFT stage (:mod:`runners.train.sft`) when ``model.vision_pretraining.steps > 0``.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any, Callable, Sequence

import numpy as np
import torch

from algos.data import Turn
from runners import models


def pretrain_vision(
    model: torch.nn.Module,
    demos: Any,
    *,
    steps: int,
    batch_size: int,
    lr: float,
    image_processor: Any,
    log: Callable[[int, dict[str, float]], None] | None = None,
    threads: int = 1,
    iterations: Sequence[int] = (),
    seed: int = 0,
    path_weight: float = 0.0,
) -> dict[str, float]:
    """AdamW on the model's vision pretraining objective (its spec's ``vision_pretraining_loss``) over ``steps``
    batches of demonstration moves (``demos.batch(n)``, a :class:`runners.train.demos.DemoStream`).

    Only the vision encoder's parameters (the spec's ``vision_parameters``) are updated (constant learning
    rate, gradients clipped to norm 1). Each turn must show one image and record its agent cell
    (``Turn.state``) and move.
    With ``threads > 1`` each batch is cut into that many parts, each part's gradient computed on
    a copy of the model in a thread of its own (:class:`algos.parallel.Replicas`) and the parts'
    gradients added, weighted by their share of the batch. ``iterations=(low, high)`` runs each batch's recurrent
    encoder a count drawn uniformly from that range (a generator seeded by ``seed``, apart from the demonstrations');
    ``path_weight > 0`` adds the spec's per-cell path loss. Returns the final metrics.
    """
    from algos.parallel import Replicas, contiguous_parts

    spec = models.spec_of(model)
    if spec.vision_pretraining_loss is None:
        raise ValueError(f"the {spec.name} model has no vision pretraining objective")
    params = spec.vision_parameters(model)
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
    model.train()
    replicas = Replicas(model, threads, spec.vision_parameters) if threads > 1 else None
    if iterations and spec.run_vision_iterations is None:
        raise ValueError(f"the {spec.name} model has no recurrent vision encoder to run at random depths")
    depths = np.random.default_rng([seed, 0x5EED]) if iterations else None
    metrics: dict[str, float] = {}
    for step in range(1, steps + 1):
        t0 = time.perf_counter()
        turns = demos.batch(batch_size)
        if not all(len(t.images) == 1 and t.state and t.action is not None for t in turns):
            raise ValueError("vision pretraining needs image turns that record the agent's cell and the move")
        depth = int(depths.integers(iterations[0], iterations[1] + 1)) if depths is not None else None
        part_loss = _part_loss(spec, image_processor, batch_size, depth, path_weight)
        opt.zero_grad(set_to_none=True)
        if replicas is None:
            loss, accuracy = part_loss(model, turns)
        else:
            parts = contiguous_parts(turns, replicas.threads)
            loss, accuracy = (sum(v) for v in zip(*replicas.map(part_loss, parts)))
            replicas.gather_gradients()
        grad_norm = torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        if replicas is not None:
            replicas.copy_weights()
        metrics = {
            "vision_loss": loss,
            "vision_move_accuracy": accuracy,
            "grad_norm": float(grad_norm),
            "step_seconds": time.perf_counter() - t0,
        }
        if log is not None:
            log(step, metrics)
    model.eval()
    return metrics


def _part_loss(
    spec: models.ModelSpec, image_processor: Any, batch_size: int, depth: int | None, path_weight: float
) -> Callable[[torch.nn.Module, list[Turn]], tuple[float, float]]:
    """The backward pass over one part of a batch: ``part_loss(model, turns)`` -> (loss, move accuracy), each
    weighted by the part's share of the batch (the parts' gradients and values add up to the batch's)."""
    from algos.policies.lm import to_pil

    def part_loss(m: torch.nn.Module, part: list[Turn]) -> tuple[float, float]:
        processed = image_processor(images=[to_pil(t.images[0]) for t in part], return_tensors="pt")
        with spec.run_vision_iterations(m, depth) if depth else contextlib.nullcontext():
            extra = {"path_weight": path_weight} if path_weight > 0 else {}
            loss, accuracy = spec.vision_pretraining_loss(m, processed, part, **extra)
        share = len(part) / batch_size
        (loss * share).backward()
        return loss.item() * share, accuracy * share

    return part_loss
