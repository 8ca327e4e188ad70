"""MazeVLM (:mod:`algos.models.maze_vlm`): recurrent conv vision encoder -> projector -> Qwen2 decoder, from code.

Its hooks: the vision encoder's own pretraining objective and the agent-localisation loss (SFT), recurrent
iterations that scale with the maze (evaluation on larger mazes) and a truncated backward pass through them (RL),
and an encoder vLLM cannot run (the generator runs it beside the engine and sends prompt embeddings).
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any, Iterator

from mazegym.render import AGENT_RGB
from runners.models import ModelSpec, decoder_shape, register

MODEL_TYPE = "mazegym_maze_vlm"
"""MazeVLM's transformers ``model_type`` (:data:`algos.models.maze_vlm.MODEL_TYPE`, written here without importing
torch; a test checks the two agree)."""


def build(config: Any, out: Path) -> None:
    """The tiny MazeVLM of ``config.model``, its image processor cut for the env's ``cell_px``."""
    from runners.models import tiny

    m = config.model
    tiny.build_maze_vlm(
        out,
        seed=config.sft.seed,
        cell_px=int(config.rollout.env_kwargs.get("cell_px", 25)),
        vision={
            "width": m.vision_width,
            "iterations": m.vision_iterations,
            "patch_px": m.vision_patch_px,
            "tokens": m.vision_tokens,
            "state": m.vision_state,
            "locator": m.vision_locator,
            "agent_rgb": list(AGENT_RGB),
            "path_head": True,
            "init": "pytorch",
        },
        **decoder_shape(m),
    )


def validate(config: Any) -> list[str]:
    """MazeVLM reads the image only."""
    if config.rollout.obs_mode != "image":
        return ["model.tiny=maze-vlm reads the maze image only; set rollout.obs_mode=image"]
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
    """The recurrent encoder's iterations (``None`` when the model holds no recurrent encoder)."""
    from algos.models.maze_vlm import recurrent_encoders

    encoders = recurrent_encoders(model)
    return encoders[0].iterations if encoders else None


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
