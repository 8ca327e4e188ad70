"""The generic Hugging Face kinds: a causal LM (``text``; tiny: a Qwen2 LM) and a VLM (``vlm``; tiny: Qwen2-VL).

Every saved model that no other spec claims is one of these two, by whether its config has a vision tower.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from runners.models import BuildContext, ModelSpec, TinyModelConfig, VisionModelConfig, decoder_shape, register


@dataclasses.dataclass
class TinyVLMConfig(VisionModelConfig):
    """The ``vlm`` kind's settings."""

    image_cell_px: int = dataclasses.field(default=28, metadata={"range": (1, 1024, False)})
    """Tiny VLM only: pixels per maze cell in the image, and the image budget is set so that one cell is exactly one
    merged vision token (28 px = 2x2 patches of 14 px).
    """


def build_text(settings: TinyModelConfig, out: Path, context: BuildContext) -> None:
    """The tiny Qwen2 text LM of these settings."""
    from runners.models import tiny

    tiny.build_tiny_text_lm(out, seed=context.seed, **decoder_shape(settings))


def validate_text(settings: Any, rollout: Any) -> list[str]:
    """The tiny text model reads the ASCII map only."""
    if rollout.obs_mode in ("image", "both"):
        return [
            "rollout.obs_mode uses images but the tiny text model cannot see them; set model.kind=maze-vlm or "
            "rollout.obs_mode=text"
        ]
    return []


def set_image_pixels(model_dir: str | Path, min_pixels: int, max_pixels: int, resize: bool = True) -> None:
    """Rewrite a VLM's image-processor pixel budget (e.g. so one maze cell is one vision token).

    ``resize=False`` skips the processor's resize step, which is the identity when every frame
    already has the budgeted size and a side that is a multiple of patch x merge (28 px).
    """
    path = Path(model_dir) / "preprocessor_config.json"
    cfg = json.loads(path.read_text())
    cfg.update(min_pixels=min_pixels, max_pixels=max_pixels, do_resize=bool(resize))
    if isinstance(cfg.get("size"), dict):
        cfg["size"] = {"shortest_edge": min_pixels, "longest_edge": max_pixels}
    path.write_text(json.dumps(cfg, indent=2))


def build_vlm(settings: TinyVLMConfig, out: Path, context: BuildContext) -> None:
    """The tiny Qwen2-VL of these settings, its image budget set so one maze cell is one merged vision token."""
    from runners.models import tiny

    tiny.build_tiny_vlm(out, seed=context.seed, **decoder_shape(settings))
    side = context.maze_size * settings.image_cell_px
    set_image_pixels(out, min_pixels=side * side, max_pixels=side * side, resize=side % 28 != 0)


def vlm_env_kwargs(settings: TinyVLMConfig) -> dict[str, Any]:
    """The tiny VLM's frames draw ``model.image_cell_px`` pixels per cell."""
    return {"cell_px": settings.image_cell_px}


register(
    ModelSpec(
        name="text",
        description="a Hugging Face causal LM (tiny: Qwen2 on ASCII mazes)",
        build=build_text,
        settings=TinyModelConfig,
        validate=validate_text,
    )
)
register(
    ModelSpec(
        name="vlm",
        description="a Hugging Face VLM (tiny: Qwen2-VL, one maze cell per merged vision token)",
        build=build_vlm,
        settings=TinyVLMConfig,
        env_kwargs=vlm_env_kwargs,
    )
)
