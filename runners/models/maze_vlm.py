"""MazeVLM (:mod:`algos.models.maze_vlm`): recurrent conv vision encoder -> projector -> Qwen2 decoder, from code.

Its hooks: the vision encoder's own pretraining objective and the agent-localisation loss (SFT), recurrent
iterations that scale with the maze (evaluation on larger mazes) and a truncated backward pass through them (RL),
and an encoder vLLM cannot run (the generator runs it beside the engine and sends prompt embeddings).
"""

from __future__ import annotations

import contextlib
import dataclasses
from pathlib import Path
from typing import Any, Iterator

from mazegym.render import AGENT_RGB
from runners.models import BuildContext, ModelSpec, VisionModelConfig, decoder_shape, register

MODEL_TYPE = "mazegym_maze_vlm"
"""MazeVLM's transformers ``model_type`` (:data:`algos.models.maze_vlm.MODEL_TYPE`, written here without importing
torch; a test checks the two agree)."""


def _depth_range(depths: list[int]) -> str | None:
    """A problem with a ``[low, high]`` range of encoder iterations (``[]``: none), or None."""
    if not depths or (len(depths) == 2 and 1 <= depths[0] <= depths[1] <= 10_000):
        return None
    return "must be [] or [low, high] with 1 <= low <= high <= 10000 (a range of encoder iterations)"


@dataclasses.dataclass
class VisionPretrainingConfig:
    """Vision-encoder pretraining before the SFT steps: the encoder alone learns the oracle's move at the agent's
    cell, one random open cell of each fresh maze (docs/research.md)."""

    steps: int = dataclasses.field(default=0, metadata={"range": (0, 10_000_000, False)})
    """Pretraining batches (the demonstration budget is steps x batch_size cells before SFT's moves). 0 = none."""
    batch_size: int = dataclasses.field(default=0, metadata={"range": (0, 10_000_000, False)})
    """Cells per batch (0 = ``sft.batch_size``). For the same number of cells, more and smaller batches teach the
    encoder a routing rule that holds on larger mazes more often (docs/research.md)."""
    lr: float = dataclasses.field(default=2e-3, metadata={"range": (0.0, None, True)})
    """Constant AdamW learning rate."""
    iterations: list[int] = dataclasses.field(default_factory=list, metadata={"check": _depth_range})
    """``[low, high]``: each batch runs the recurrent encoder a random number of iterations in that range
    (inclusive), so the recurrence learns to reach and then hold its answer at any depth, not only at
    ``model.vision_iterations`` (random depths, as in Bansal et al. 2022); ``[]`` = the model's own fixed count.
    """
    path_weight: float = dataclasses.field(default=0.0, metadata={"range": (0.0, None, False)})
    """Weight of the path loss: at every cell, is it on the shortest path from the agent to the goal (a target at
    every cell, not one move per maze; MazeVLM's ``path_head``). 0 = the move and localisation losses only."""


@dataclasses.dataclass
class MazeVLMConfig(VisionModelConfig):
    """The ``maze-vlm`` kind's settings: its recurrent vision encoder, how SFT pretrains it, how RL and evaluation run
    it."""

    vision_width: int = dataclasses.field(default=32, metadata={"range": (1, 4096, False)})
    """Channels of the recurrent conv vision encoder."""
    vision_iterations: int = dataclasses.field(default=20, metadata={"range": (1, 10_000, False)})
    """Iterations of the recurrent conv block when the model is built (evaluation scales it with the maze's size,
    model.scale_eval_vision_iterations, or fixes it, model.eval_vision_iterations).
    """
    vision_tokens: str = dataclasses.field(default="cells", metadata={"choices": ("cells", "agent")})
    """The vision tokens an image gives the decoder: "cells" (one per maze cell, so the prompt grows with the maze)
    or "agent" (one token pooled at the agent's cell, the same on a maze of any size).
    """
    vision_state: str = dataclasses.field(default="residual", metadata={"choices": ("residual", "gated")})
    """How the recurrent block updates its state: "residual" (relu(state + conv(...)), unbounded; it degrades when
    run far past its training depth) or "gated" (a convex mix of the state and a tanh candidate, weighted by a
    learned per-cell gate, as a convolutional GRU: bounded, so more iterations at test time keep improving the
    routing instead of blowing it up).
    """
    vision_grad_iterations: int = dataclasses.field(default=0, metadata={"range": (0, 10_000, False), "stage": "rl"})
    """RL's backward pass runs through the last this-many iterations of the recurrent block; the earlier ones run
    without gradient (as in Bansal et al.'s progressive training), which makes an update's backward pass several
    times cheaper. 0 = all iterations.
    """
    vision_update_iterations: list[int] = dataclasses.field(
        default_factory=list, metadata={"check": _depth_range, "stage": "rl"}
    )
    """For RL that trains the encoder (lora.modules_to_save holds vision_tower): [low, high] makes each update's
    forward pass run the recurrent block a count drawn from that range, as vision pretraining's random depths do
    (rollouts, old log-probs and evaluation keep vision_iterations); [] = vision_iterations always.
    """
    vision_patch_px: int = dataclasses.field(default=5, metadata={"range": (1, 4096, False)})
    """Each maze cell is downsampled to this many pixels per side before the patch embedding."""
    vision_locator: str = dataclasses.field(default="learned", metadata={"choices": ("learned", "colour")})
    """How the encoder finds the agent's cell, where its vision token is pooled: "learned" (a saliency read from each
    cell's pixels, which SFT's localisation loss teaches) or "colour" (a fixed match of each cell's pixels against the
    colour the env draws the agent in: a prior built into the model, no label).
    """
    localization_weight: float = dataclasses.field(default=1.0, metadata={"range": (0.0, None, False), "stage": "sft"})
    """Weight of SFT's agent-localisation loss (cross-entropy of the agent context's scores against the agent's
    cell)."""
    vision_pretraining: VisionPretrainingConfig = dataclasses.field(
        default_factory=VisionPretrainingConfig, metadata={"stage": "sft"}
    )
    """Vision-encoder pretraining before SFT."""
    eval_vision_iterations: int = dataclasses.field(default=0, metadata={"range": (0, 10_000, False), "stage": "eval"})
    """Run this many encoder iterations on every evaluated set (test-time compute: more iterations for larger mazes;
    `benchmarks/extrapolation.py --iterations` sweeps it); 0 = the model's own count, scaled as below.
    """
    vision_iterations_by_area: bool = dataclasses.field(default=False, metadata={"any": True})
    """The model runs its encoder ceil(iterations x cells / maze.size^2) times on an image of a larger maze than
    maze.size, in rollouts, updates and evaluation alike (saved with the model): what a training stream that mixes
    sizes (maze.rl_shapes' size) needs, so that each maze is trained at the depth it is evaluated at.
    """
    scale_eval_vision_iterations: bool = dataclasses.field(default=True, metadata={"any": True, "stage": "eval"})
    """On sets of larger mazes than maze.size, run ceil(iterations x (set size / maze.size)^2) encoder iterations (no
    retraining: 30 on 11x11, 42 on 13x13, 109 on 21x21 for a model trained at 20 on 9x9).
    """


def build(settings: MazeVLMConfig, out: Path, context: BuildContext) -> None:
    """The tiny MazeVLM of these settings, its image processor cut for the env's ``cell_px``."""
    from runners.models import tiny

    tiny.build_maze_vlm(
        out,
        seed=context.seed,
        cell_px=int(context.env_kwargs.get("cell_px", 25)),
        vision={
            "width": settings.vision_width,
            "iterations": settings.vision_iterations,
            "patch_px": settings.vision_patch_px,
            "tokens": settings.vision_tokens,
            "state": settings.vision_state,
            "locator": settings.vision_locator,
            "agent_rgb": list(AGENT_RGB),
            "path_head": True,
            "init": "pytorch",
            "area_cells": context.maze_size**2 if settings.vision_iterations_by_area else 0,
        },
        **decoder_shape(settings),
    )


def validate(settings: MazeVLMConfig, rollout: Any) -> list[str]:
    """MazeVLM reads the image only; an encoder that scales its iterations by area sets its own evaluation depth."""
    if rollout.obs_mode != "image":
        return ["model.kind=maze-vlm reads the maze image only; set rollout.obs_mode=image"]
    if settings.vision_iterations_by_area and settings.eval_vision_iterations:
        return [
            "model.eval_vision_iterations is ignored when model.vision_iterations_by_area=true (the model runs "
            "each image's own count); set one of them"
        ]
    return []


def _base(model: Any) -> Any:
    """The model inside a PEFT wrapper (or the model itself)."""
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def agent_cells(image_grid_thw: Any, turns: list[Any]) -> Any:
    """Each turn's agent cell (``Turn.state``, "row,col") as an index into its image's cell tokens (row-major)."""
    import torch

    cols = image_grid_thw[:, 2].tolist()
    cells = [tuple(int(v) for v in t.state.split(",")) for t in turns]
    return torch.tensor([r * w + c for (r, c), w in zip(cells, cols)])


def localization_inputs(processed: dict[str, Any], turns: list[Any]) -> dict[str, Any]:
    """The forward input that adds the agent-localisation loss: each turn's agent cell."""
    return {"agent_cells": agent_cells(processed["image_grid_thw"], turns)}


def vision_parameters(model: Any) -> list[Any]:
    """The vision encoder's trainable parameters."""
    return [p for p in _base(model).vision_tower.parameters() if p.requires_grad]


def vision_pretraining_loss(
    model: Any, processed: dict[str, Any], turns: list[Any], path_weight: float = 0.0
) -> tuple[Any, float]:
    """(loss, move accuracy) of the encoder's action head at each turn's agent cell against the turn's move, plus
    ``path_weight`` times its path head's loss against each turn's ``path_cells``."""
    import torch

    inner = _base(model)
    device = next(inner.vision_tower.parameters()).device
    on_path = None
    if path_weight > 0:
        on_path = []
        for (_, rows, cols), turn in zip(processed["image_grid_thw"].tolist(), turns):
            mask = torch.zeros(int(rows) * int(cols), device=device)
            mask[list(turn.path_cells)] = 1.0
            on_path.append(mask)
    return inner.vision_pretraining_loss(
        processed["pixel_values"].to(device),
        processed["image_grid_thw"].to(device),
        agent_cells=agent_cells(processed["image_grid_thw"], turns).to(device),
        actions=torch.tensor([int(t.action) for t in turns], device=device),
        on_path=on_path,
        path_weight=path_weight,
    )


def vision_iterations(model: Any) -> int | None:
    """The recurrent encoder's iterations (``None`` when the model holds no recurrent encoder, or its encoder scales
    them by each image's area itself: evaluation leaves it its own count)."""
    from algos.models.maze_vlm import recurrent_encoders

    encoders = recurrent_encoders(model)
    return encoders[0].iterations if encoders and not encoders[0].area_cells else None


@contextlib.contextmanager
def run_vision_iterations(model: Any, iterations: int) -> Iterator[None]:
    """Within the block every recurrent encoder in ``model`` runs ``iterations`` iterations; restored afterwards."""
    from algos.models.maze_vlm import recurrent_encoders

    encoders = recurrent_encoders(model)
    saved = [e.iterations for e in encoders]
    try:
        for e in encoders:
            e.iterations = iterations
        yield
    finally:
        for e, n in zip(encoders, saved):
            e.iterations = n


def truncate_vision_backward(model: Any, iterations: int) -> None:
    """:func:`algos.models.maze_vlm.set_vision_grad_iterations`."""
    from algos.models.maze_vlm import set_vision_grad_iterations

    set_vision_grad_iterations(model, iterations)


def vary_vision_iterations(model: Any, low: int, high: int) -> None:
    """:func:`algos.models.maze_vlm.set_vision_grad_iteration_range`."""
    from algos.models.maze_vlm import set_vision_grad_iteration_range

    set_vision_grad_iteration_range(model, low, high)


register(
    ModelSpec(
        name="maze-vlm",
        description="MazeVLM: recurrent conv vision encoder -> projector -> Qwen2 decoder, built from code",
        build=build,
        settings=MazeVLMConfig,
        model_types=(MODEL_TYPE,),
        validate=validate,
        beside_engine=("vision_tower", "multi_modal_projector"),
        localization_inputs=localization_inputs,
        vision_parameters=vision_parameters,
        vision_pretraining_loss=vision_pretraining_loss,
        vision_iterations=vision_iterations,
        run_vision_iterations=run_vision_iterations,
        truncate_vision_backward=truncate_vision_backward,
        vary_vision_iterations=vary_vision_iterations,
    )
)
