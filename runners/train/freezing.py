"""Freezing parts of a model before a stage trains the rest."""

from __future__ import annotations

import re

import torch

from algos.policies.lm import VISION_MODULE_PATTERN


def freeze_vision_tower(model: torch.nn.Module) -> int:
    """Freeze the vision encoder except its projector into the LM (Qwen-VL's merger); returns the frozen tensor count.

    Backpropagating through a from-scratch vision tower dominates tiny-VLM SFT cost on CPU; a
    frozen random patch embedding still separates the maze's few flat colours, and the trained
    merger learns to read them.
    """
    vision = re.compile(VISION_MODULE_PATTERN)
    frozen = 0
    for name, param in model.named_parameters():
        if vision.fullmatch(name) and "merger" not in name and "multi_modal_projector" not in name:
            param.requires_grad_(False)
            frozen += 1
    return frozen
