"""MazeVLM: a tiny vision-language model whose vision encoder is a recurrent conv net.

The usual VLM shape (LLaVA, Qwen-VL): vision encoder -> projector -> language model.

* **Image processor** (:class:`MazeVLMImageProcessor`): cuts the RGB frame into square patches
  of ``cell_px`` pixels (one patch = one maze cell, as a ViT patch), downsamples each to
  ``patch_px`` x ``patch_px`` and flattens it. Like Qwen-VL it returns the patches of all images
  as rows of ``pixel_values`` plus ``image_grid_thw`` = (1, rows, cols) per image, so images of
  different sizes (9x9 and 13x13 mazes) go in one batch.
* **Vision encoder** (:class:`RecurrentConvEncoder`): a linear patch embedding, then one
  block of two 3x3 convs applied ``iterations`` times over the cell grid (a residual update, or a
  gated, bounded one that stays stable past its training depth), with the
  embedded input concatenated at every iteration (the "Deep Thinking" recall architecture of
  Schwarzschild et al. 2021 / Bansal et al. 2022), then an agent context pooled over the cells
  (see :meth:`RecurrentConvEncoder.forward`). Locality plus recurrence is the inductive bias
  that lets a ~30k-parameter net learn maze routing; ``iterations`` can be raised at inference for
  larger mazes (:func:`set_vision_iterations`).
* **Projector**: a two-layer MLP from each cell's features to the LM's embedding size.
* **Language model**: a Qwen2 decoder (inherited from ``Qwen2ForCausalLM``). Every
  ``image_token_id`` placeholder in ``input_ids`` receives one projected cell feature, in
  row-major order, image after image; the decoder then writes the reply as text.

Registered with the transformers Auto classes on import (:func:`register`), so
``AutoConfig`` / ``AutoModelForImageTextToText`` / ``AutoImageProcessor`` load a saved model by
path (config.json, model.safetensors, preprocessor_config.json), with no remote code.
"""

from __future__ import annotations

import hashlib
import math
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from dataclasses import dataclass

from transformers import Qwen2Config, Qwen2ForCausalLM
from transformers.image_processing_utils import BaseImageProcessor, BatchFeature
from transformers.modeling_outputs import CausalLMOutputWithPast

MODEL_TYPE = "mazegym_maze_vlm"

DEFAULT_VISION_CONFIG = {
    "patch_px": 5,
    "width": 32,
    "iterations": 20,
    "num_actions": 4,
    "readout": "conv",
    "tokens": "cells",
    "state": "residual",
    "path_head": False,
    "init": "lm",
    "locator": "learned",
    "agent_rgb": [0, 0, 255],
    "area_cells": 0,
}
"""Vision encoder shape: downsampled pixels per cell side, channels, recurrent iterations, the
classes of its pretraining head (the env's moves), its decision readout ("conv": a 3x3 conv
over the routing state, "cell": the cell's own features), and the vision tokens an image gives
the language model ("cells": one per maze cell; "agent": one token, the features pooled at the
agent's cell, whatever the maze's size), and how the recurrent block updates its state ("residual":
``relu(state + conv(...))``; "gated": a convolutional-GRU-style convex mix of the state and a tanh
candidate, bounded, so it stays stable when run for more iterations than it was trained with), and whether it has a
second pretraining head, ``path_head``: per cell, is the cell on the shortest path from the agent to the goal, and how a
model built from code initialises the encoder's layers ("lm": as the decoder's, normal with the config's
``initializer_range``; "pytorch": PyTorch's default layer init), and how the encoder finds the agent's cell
("learned": a saliency read from each cell's pixels, which SFT's localisation loss teaches; "colour": a fixed match of
each cell's pixels against ``agent_rgb``, the colour the env draws the agent in, an architectural prior that needs no
label), and ``area_cells``: when above 0, an image of more cells than that runs its iterations (the model's own, a
drawn update depth, or a count set for evaluation) times its cells / ``area_cells``, rounded up, so that the routing
crosses a larger maze in rollouts, updates and evaluation alike (0: every image runs the same count)."""

COLOUR_MATCH_SCALE = 40.0
"""Logit per unit of RGB distance (pixels in [-0.5, 0.5]) of the "colour" locator: a floor or wall pixel's distance
from the agent's colour (1 or more) puts the agent's cell ahead by e^40."""

VISION_LOCATORS = ("learned", "colour")
"""Values of ``vision_config["locator"]``."""

VISION_INITS = ("lm", "pytorch")
"""Values of ``vision_config["init"]``."""

VISION_TOKENS = ("cells", "agent")
"""Values of ``vision_config["tokens"]``."""

VISION_STATES = ("residual", "gated")
"""Values of ``vision_config["state"]``."""


class MazeVLMConfig(Qwen2Config):
    """Qwen2 decoder settings plus ``vision_config`` (patch_px, width, iterations) and the image token id."""

    model_type = MODEL_TYPE

    def __init__(
        self,
        vision_config: dict | None = None,
        image_token_id: int | None = None,
        vision_start_token_id: int | None = None,
        vision_end_token_id: int | None = None,
        **kwargs: Any,
    ):
        self.vision_config = {**DEFAULT_VISION_CONFIG, **(vision_config or {})}
        self.image_token_id = image_token_id
        self.vision_start_token_id = vision_start_token_id
        self.vision_end_token_id = vision_end_token_id
        super().__init__(**kwargs)


def conv_weight_and_bias(conv: nn.Module) -> tuple[torch.Tensor, torch.Tensor | None]:
    """A convolution's weight and bias as its forward applies them: where a PEFT LoRA layer wraps it (LoRA on the
    encoder's convolutions, ``lora.target_modules``), the base weight plus its active adapters' update, unless that
    update is merged into the weight already or the adapters are disabled."""
    base = getattr(conv, "base_layer", conv)
    weight = base.weight
    if not getattr(conv, "merged", False) and not getattr(conv, "disable_adapters", False):
        for name in getattr(conv, "active_adapters", ()):
            if name in getattr(conv, "lora_A", {}):
                if conv.training and not isinstance(conv.lora_dropout[name], nn.Identity):
                    raise ValueError("LoRA on the vision encoder's convolutions takes no dropout: set lora.dropout=0")
                weight = weight + conv.get_delta_weight(name)
    return weight, base.bias


class RecurrentConvEncoder(nn.Module):
    """Patch embedding, then a weight-tied residual conv block repeated over the cell grid."""

    def __init__(
        self,
        patch_px: int,
        width: int,
        iterations: int,
        num_actions: int = 4,
        readout: str = "conv",
        tokens: str = "cells",
        state: str = "residual",
        path_head: bool = False,
        locator: str = "learned",
        agent_rgb: tuple[int, int, int] = (0, 0, 255),
        area_cells: int = 0,
    ):
        super().__init__()
        if area_cells < 0:
            raise ValueError(f"area_cells must be >= 0, got {area_cells}")
        self.area_cells = int(area_cells)
        if locator not in VISION_LOCATORS:
            raise ValueError(f"locator must be one of {VISION_LOCATORS}, got {locator!r}")
        self.locator = locator
        # On the processor's pixel scale (uint8 / 255 - 0.5). A plain attribute, not a buffer: a model loaded by path
        # is built on the meta device and only the saved tensors are filled in.
        self.agent_rgb = tuple(channel / 255.0 - 0.5 for channel in agent_rgb)
        if readout not in ("conv", "cell"):
            raise ValueError(f"readout must be 'conv' or 'cell', got {readout!r}")
        if tokens not in VISION_TOKENS:
            raise ValueError(f"tokens must be one of {VISION_TOKENS}, got {tokens!r}")
        if state not in VISION_STATES:
            raise ValueError(f"state must be one of {VISION_STATES}, got {state!r}")
        self.tokens = tokens
        self.state_update = state
        self.iterations = iterations
        self.grad_iterations = 0
        """Iterations that a backward pass runs through: the first ``iterations - grad_iterations`` run without
        gradient (0 = all; see :func:`set_vision_grad_iterations`)."""
        self.grad_iteration_range: tuple[int, int] | None = None
        """``(low, high)``: a forward pass with gradients runs a count drawn from this range instead of ``iterations``
        (see :func:`set_vision_grad_iteration_range`)."""
        self.patch_embed = nn.Linear(3 * patch_px * patch_px, width)
        self.conv_in = nn.Conv2d(2 * width, width, 3, padding=1)
        self.conv_out = nn.Conv2d(width, width, 3, padding=1)
        # The gated update's per-cell mixing weight: how much of the new candidate replaces the state.
        self.conv_gate = nn.Conv2d(2 * width, width, 3, padding=1) if state == "gated" else None
        # A 3x3 readout lets a cell's decision features compare its neighbours' routing state (which way
        # is closer to the goal) instead of the recurrence having to write the direction into every cell.
        self.readout = nn.Conv2d(2 * width, 2 * width, 3, padding=1) if readout == "conv" else None
        self.agent_score = nn.Linear(
            3 * patch_px * patch_px, 1
        )  # reads the raw patch: localising never reshapes the routing features
        # A learned temperature (as CLIP's logit scale) so the saliency sharpens in tens of steps, not hundreds.
        self.score_scale = nn.Parameter(torch.tensor(10.0))
        # Used only by vision pretraining (as BERT keeps its pretraining heads); generation never reads it.
        self.action_head = nn.Linear(2 * width, num_actions)
        # Also pretraining only: a target at every cell instead of one move per maze (Bansal et al. 2022 train on the
        # solution path alone), which teaches the recurrence a rule that holds on mazes of any size.
        self.path_head = nn.Linear(2 * width, 1) if path_head else None

    def step_weights(self, recall: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The weight-tied block split by what it reads: ``(state_weight, recall_part)``.

        ``conv_in`` (and ``conv_gate``) read ``cat([state, recall])``; a conv of a concatenation is the sum of the
        convs of its parts, and the recall part is the same at every iteration, so it is computed once here
        (with the biases) and each iteration convolves only the state, with the two convs' state weights in one.
        """
        width = recall.shape[1]
        convs = [self.conv_in] if self.conv_gate is None else [self.conv_in, self.conv_gate]
        weights, biases = zip(*(conv_weight_and_bias(conv) for conv in convs))
        state_weight = torch.cat([weight[:, :width] for weight in weights])
        recall_weight = torch.cat([weight[:, width:] for weight in weights])
        return state_weight, F.conv2d(recall, recall_weight, torch.cat(biases), padding=1)

    def step(self, state: torch.Tensor, state_weight: torch.Tensor, recall_part: torch.Tensor) -> torch.Tensor:
        """One iteration of the weight-tied block: the routing state, updated from itself and the input
        (``state_weight`` and ``recall_part`` from :meth:`step_weights`; a zero state skips its conv)."""
        both = recall_part if state is None else recall_part + F.conv2d(state, state_weight, padding=1)
        width = both.shape[1] // (1 if self.conv_gate is None else 2)
        update = torch.relu(both[:, :width])
        if state is None:
            state = torch.zeros_like(update)
        if self.conv_gate is None:
            return torch.relu(state + self.conv_out(update))
        gate = torch.sigmoid(both[:, width:])
        return (1 - gate) * state + gate * torch.tanh(self.conv_out(update))

    def cell_features(self, grid: torch.Tensor, iterations: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """``grid``: [B, H, W, 3*p*p] -> ([B, H*W, 2*width] routing state and input, [B, H*W, 2*width] decision
        features).
        """
        batch, rows, cols, _ = grid.shape
        recall = torch.relu(self.patch_embed(grid)).permute(0, 3, 1, 2)  # [B, C, H, W]
        state = None  # all zeros: the first iteration reads the input alone
        total = iterations or self.iterations
        if self.grad_iteration_range is not None and iterations is None and torch.is_grad_enabled():
            total = self.drawn_iterations(grid)
        total = self.area_scaled(total, rows * cols)
        free = total - self.grad_iterations if 0 < self.grad_iterations < total and torch.is_grad_enabled() else 0
        if free:
            with torch.no_grad():
                weights = self.step_weights(recall)
                for _ in range(free):
                    state = self.step(state, *weights)
        weights = self.step_weights(recall)
        for _ in range(total - free):
            state = self.step(state, *weights)
        if state is None:
            state = torch.zeros_like(recall)
        features = torch.cat([state, recall], dim=1)  # the LM reads the routing state and what the cell shows
        decision = torch.relu(self.readout(features)) if self.readout is not None else features
        return (
            features.permute(0, 2, 3, 1).reshape(batch, rows * cols, -1),
            decision.permute(0, 2, 3, 1).reshape(batch, rows * cols, -1),
        )

    def area_scaled(self, iterations: int, cells: int) -> int:
        """The iterations an image of ``cells`` cells runs for a count of ``iterations`` (see ``area_cells``)."""
        if self.area_cells and cells > self.area_cells:
            return math.ceil(iterations * cells / self.area_cells)
        return iterations

    def drawn_iterations(self, grid: torch.Tensor) -> int:
        """An iteration count from ``grad_iteration_range``, drawn from a hash of the batch's pixels: the same batch
        draws the same count again (a resumed run repeats its updates), different batches spread over the range."""
        low, high = self.grad_iteration_range
        digest = hashlib.blake2b(grid.detach().to(torch.float32).cpu().numpy().tobytes(), digest_size=8).digest()
        return low + int.from_bytes(digest, "little") % (high - low + 1)

    def forward(
        self, grid: torch.Tensor, iterations: int | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``grid``: [B, H, W, 3*p*p] flattened patches -> ([B, T, 4*width] tokens, [B, H*W] agent scores,
        [B, H*W, 2*width] decision features).

        The *agent context* is the decision features of all cells pooled with a softmax over
        ``agent_scores`` (a learned saliency read from what each cell shows; CLIP-style attention
        pooling); trained to peak on the agent's cell, it carries the decision features where the
        move is made. With ``tokens="cells"`` there is one token per cell (T = H*W, row-major): the
        cell's own features concatenated with the agent context, so the language model needs no
        sharp attention to read it. With ``tokens="agent"`` there is one token (T = 1): the cell
        features pooled by the same saliency, concatenated with the agent context, so the language
        model reads the same input on a maze of any size (as a resampler gives a fixed number of
        tokens).
        """
        batch, rows, cols, _ = grid.shape
        features, decision = self.cell_features(grid, iterations)
        scores = self.agent_scores(grid.reshape(batch, rows * cols, -1))
        weights = torch.softmax(scores, dim=1)[..., None]
        agent = (weights * decision).sum(1, keepdim=True)
        if self.tokens == "agent":
            tokens = torch.cat([(weights * features).sum(1, keepdim=True), agent], dim=-1)
        else:
            tokens = torch.cat([features, agent.expand_as(features)], dim=-1)
        return tokens, scores, decision

    def agent_scores(self, patches: torch.Tensor) -> torch.Tensor:
        """``patches``: [B, cells, 3*p*p] -> [B, cells] logits of where the agent stands (see ``locator``)."""
        if self.locator == "learned":
            return self.agent_score(patches).squeeze(-1) * self.score_scale
        pixels = patches.reshape(*patches.shape[:2], 3, -1).transpose(-1, -2)  # [B, cells, p*p, 3]
        distance = (pixels - pixels.new_tensor(self.agent_rgb)).norm(dim=-1)
        # A cell's best-matching pixel; a sharp fixed scale, since a colour either matches or it does not.
        return -COLOUR_MATCH_SCALE * distance.min(dim=-1).values


@dataclass
class MazeVLMOutput(CausalLMOutputWithPast):
    """Causal-LM output plus the optional agent-localisation loss."""

    aux_loss: torch.FloatTensor | None = None


class MazeVLMForConditionalGeneration(Qwen2ForCausalLM):
    """Recurrent-conv vision encoder -> MLP projector -> Qwen2 decoder (see the module docstring)."""

    config_class = MazeVLMConfig

    def __init__(self, config: MazeVLMConfig):
        super().__init__(config)
        vision = config.vision_config
        if vision.get("init", "lm") not in VISION_INITS:
            raise ValueError(f"vision_config['init'] must be one of {VISION_INITS}, got {vision['init']!r}")
        self.vision_tower = RecurrentConvEncoder(
            vision["patch_px"],
            vision["width"],
            vision["iterations"],
            vision.get("num_actions", 4),
            vision.get("readout", "conv"),
            vision.get("tokens", "cells"),
            vision.get("state", "residual"),
            vision.get("path_head", False),
            vision.get("locator", "learned"),
            tuple(vision.get("agent_rgb", (0, 0, 255))),
            int(vision.get("area_cells", 0)),
        )
        self.multi_modal_projector = nn.Sequential(
            nn.Linear(4 * vision["width"], config.hidden_size),
            nn.GELU(),
            nn.Linear(config.hidden_size, config.hidden_size),
        )
        self.post_init()

    @torch.no_grad()
    def _init_weights(self, module: nn.Module) -> None:
        """A layer's initial weights: as Qwen2 initialises its layers, except the vision encoder's with PyTorch's
        default layer init when ``vision_config["init"]`` is "pytorch"."""
        # The recurrence learns its size-general routing rule from PyTorch's (Kaiming-uniform) init far more often than
        # from the LM's wider normal init (benchmarks/encoder_extrapolation.py --init-std; docs/research.md).
        vision_tower = getattr(self, "vision_tower", None)
        if (
            self.config.vision_config.get("init", "lm") == "pytorch"
            and vision_tower is not None
            and any(module is part for part in vision_tower.modules())
        ):
            if isinstance(module, (nn.Linear, nn.Conv2d)):
                module.reset_parameters()
            return
        super()._init_weights(module)

    def encode_images(
        self, pixel_values: torch.Tensor, image_grid_thw: torch.Tensor
    ) -> tuple[list[torch.Tensor], list[torch.Tensor], list[torch.Tensor]]:
        """Vision-encoder output per image, before the projector: [cells, 4*width] tokens, [cells] agent scores
        and [cells, 2*width] decision features."""
        patch_dim = pixel_values.shape[-1]
        sizes = [(int(r), int(c)) for _, r, c in image_grid_thw.tolist()]
        pieces = torch.split(pixel_values, [r * c for r, c in sizes])
        tokens: list[torch.Tensor] = [torch.empty(0)] * len(sizes)
        scores: list[torch.Tensor] = [torch.empty(0)] * len(sizes)
        decisions: list[torch.Tensor] = [torch.empty(0)] * len(sizes)
        # Images of the same grid size run as one batch through the recurrence.
        for shape in dict.fromkeys(sizes):
            idx = [i for i, s in enumerate(sizes) if s == shape]
            grid = torch.stack([pieces[i] for i in idx]).reshape(len(idx), shape[0], shape[1], patch_dim)
            feats, agent_scores, decision = self.vision_tower(grid)
            for j, i in enumerate(idx):
                tokens[i], scores[i], decisions[i] = feats[j], agent_scores[j], decision[j]
        return tokens, scores, decisions

    def image_features(
        self, pixel_values: torch.Tensor, image_grid_thw: torch.Tensor
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """Projected vision tokens of all images, in order ([tokens, hidden]), and each image's agent scores."""
        tokens, scores, _ = self.encode_images(pixel_values, image_grid_thw)
        return self.multi_modal_projector(torch.cat(tokens)), scores

    def vision_pretraining_loss(
        self,
        pixel_values: torch.Tensor,
        image_grid_thw: torch.Tensor,
        agent_cells: torch.Tensor,
        actions: torch.Tensor,
        on_path: list[torch.Tensor] | None = None,
        path_weight: float = 0.0,
    ) -> tuple[torch.Tensor, float]:
        """Vision-encoder pretraining objective on one image per example: (loss, move accuracy).

        The cross-entropy of ``vision_tower.action_head`` read from the encoder's decision features
        at the agent's cell against the demonstrated move, plus the agent-localisation cross-entropy,
        plus (``path_weight > 0``) ``path_weight`` times the binary cross-entropy of ``vision_tower.path_head``
        at every cell against ``on_path`` (per image, a 0/1 float per cell, row-major: the cells of the shortest path
        from the agent to the goal). It trains the encoder alone,
        as vision towers are pretrained before a projector connects them to a language model:
        the encoder's routing is learnt from a direct per-move signal, not through a decoder
        that is itself still random.
        """
        _, scores, decisions = self.encode_images(pixel_values, image_grid_thw)
        # The head reads the decision features at the agent's true cell, which is what the agent context pools
        # once localisation is learnt; reading the still-blurred context instead slows the encoder's learning ~2x.
        at_agent = torch.stack([d[int(c)] for d, c in zip(decisions, agent_cells)])
        logits = self.vision_tower.action_head(at_agent)
        move_loss = nn.functional.cross_entropy(logits, actions)
        locate_loss = torch.stack(
            [nn.functional.cross_entropy(s[None].float(), c.view(1)) for s, c in zip(scores, agent_cells)]
        ).mean()
        accuracy = float((logits.argmax(-1) == actions).float().mean())
        loss = move_loss + locate_loss
        if path_weight > 0:
            if self.vision_tower.path_head is None or on_path is None:
                raise ValueError("a path loss needs an encoder built with path_head and each image's on_path cells")
            path_logits = self.vision_tower.path_head(torch.cat(decisions)).squeeze(-1)
            loss = loss + path_weight * nn.functional.binary_cross_entropy_with_logits(path_logits, torch.cat(on_path))
        return loss, accuracy

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        past_key_values: Any = None,
        inputs_embeds: torch.FloatTensor | None = None,
        labels: torch.LongTensor | None = None,
        use_cache: bool | None = None,
        logits_to_keep: int | torch.Tensor = 0,
        pixel_values: torch.Tensor | None = None,
        image_grid_thw: torch.Tensor | None = None,
        mm_token_type_ids: torch.Tensor | None = None,
        agent_cells: torch.Tensor | None = None,
        **kwargs: Any,
    ):
        """Causal-LM forward; vision tokens replace the image placeholder embeddings when ``pixel_values`` is given.

        ``agent_cells`` (optional, one row-major cell index per image) adds ``aux_loss``: the
        cross-entropy of the agent scores against the agent's true cell (a localisation loss for
        supervised training, like a detector's; generation never needs it).
        """
        del mm_token_type_ids  # accepted for Qwen-VL call compatibility; this model uses plain 1-D RoPE
        if inputs_embeds is None:
            inputs_embeds = self.model.embed_tokens(input_ids)
        aux_loss = None
        if pixel_values is not None and input_ids is not None:
            is_image = input_ids == self.config.image_token_id
            # During cached decoding the new tokens hold no placeholders: skip the encoder.
            if bool(is_image.any()):
                feats, scores = self.image_features(pixel_values.to(inputs_embeds.dtype), image_grid_thw)
                if feats.shape[0] != int(is_image.sum()):
                    raise ValueError(
                        f"{int(is_image.sum())} image placeholder tokens but the images need "
                        f"{feats.shape[0]} (one per cell)"
                    )
                inputs_embeds = inputs_embeds.masked_scatter(is_image[..., None], feats)
                if agent_cells is not None:
                    aux_loss = torch.stack(
                        [
                            nn.functional.cross_entropy(s[None].float(), c.view(1).to(s.device))
                            for s, c in zip(scores, agent_cells)
                        ]
                    ).mean()
        out = super().forward(
            input_ids=None,
            attention_mask=attention_mask,
            position_ids=position_ids,
            past_key_values=past_key_values,
            inputs_embeds=inputs_embeds,
            labels=labels,
            use_cache=use_cache,
            logits_to_keep=logits_to_keep,
            **kwargs,
        )
        return MazeVLMOutput(**out, aux_loss=aux_loss)

    def prepare_inputs_for_generation(
        self,
        input_ids,
        past_key_values=None,
        pixel_values=None,
        image_grid_thw=None,
        is_first_iteration=False,
        **kwargs,
    ):
        """Keep ``input_ids`` (not embeddings) so the forward can find the placeholders; images only on the prefill."""
        inputs = super().prepare_inputs_for_generation(
            input_ids, past_key_values=past_key_values, is_first_iteration=is_first_iteration, **kwargs
        )
        if is_first_iteration or past_key_values is None or past_key_values.get_seq_length() == 0:
            inputs["pixel_values"] = pixel_values
            inputs["image_grid_thw"] = image_grid_thw
        return inputs


def set_vision_iterations(model: nn.Module, iterations: int) -> None:
    """Run the recurrent encoder for ``iterations`` steps from now on (e.g. more for larger mazes)."""
    if iterations < 1:
        raise ValueError(f"vision iterations must be >= 1, got {iterations}")
    for module in _required_encoders(model):
        module.iterations = int(iterations)


def set_vision_grad_iterations(model: nn.Module, iterations: int) -> None:
    """Backpropagate through only the last ``iterations`` steps of the recurrent encoder from now on (0 = all).

    The forward pass is unchanged (every iteration runs); the earlier iterations run without
    gradient, as in the progressive training of Bansal et al. 2022, so a backward pass costs
    ``iterations`` steps instead of all of them. The block's weights are shared by every
    iteration, so all of them are still trained.
    """
    if iterations < 0:
        raise ValueError(f"vision grad iterations must be >= 0, got {iterations}")
    for module in _required_encoders(model):
        module.grad_iterations = int(iterations)


def set_vision_grad_iteration_range(model: nn.Module, low: int, high: int) -> None:
    """From now on a forward pass with gradients (an RL update) runs the recurrent encoder a count of iterations drawn
    from ``[low, high]`` per batch, while passes without gradients (rollouts, old log-probs, evaluation) keep its
    ``iterations``: the update trains a rule that holds at every depth, as vision pretraining's random depths do,
    instead of one tuned to a single depth (which loses the extrapolation to larger mazes)."""
    if not 1 <= low <= high:
        raise ValueError(f"vision grad iteration range must satisfy 1 <= low <= high, got [{low}, {high}]")
    for module in _required_encoders(model):
        module.grad_iteration_range = (int(low), int(high))


def recurrent_encoders(model: nn.Module) -> list[RecurrentConvEncoder]:
    """The recurrent conv vision encoders inside ``model`` (a PEFT wrapper holds two: the original and its copy)."""
    return [m for m in model.modules() if isinstance(m, RecurrentConvEncoder)]


def _required_encoders(model: nn.Module) -> list[RecurrentConvEncoder]:
    found = recurrent_encoders(model)
    if not found:
        raise ValueError("this model has no recurrent conv vision encoder")
    return found


class MazeVLMImageProcessor(BaseImageProcessor):
    """RGB frame -> one flattened ``patch_px``-pixel patch per ``cell_px`` cell (see the module docstring)."""

    model_input_names = ["pixel_values", "image_grid_thw"]
    accepts_arrays = True
    """HxWx3 uint8 arrays are read as they are: callers need not convert frames to PIL images (half the cost)."""

    def __init__(self, cell_px: int = 25, patch_px: int = 5, merge_size: int = 1, tokens: str = "cells", **kwargs: Any):
        super().__init__(**kwargs)
        if tokens not in VISION_TOKENS:
            raise ValueError(f"tokens must be one of {VISION_TOKENS}, got {tokens!r}")
        self.cell_px = int(cell_px)
        self.patch_px = int(patch_px)
        self.merge_size = int(merge_size)  # patches per token side (read by prompt builders)
        self.tokens = tokens  # the model's vision_config["tokens"]: how many placeholders an image needs

    def grid_shape(self, height: int, width: int) -> tuple[int, int]:
        """(rows, cols) of cells in an image of this size."""
        if height % self.cell_px or width % self.cell_px:
            raise ValueError(f"image of {height}x{width} px is not a whole number of {self.cell_px}-px maze cells")
        return height // self.cell_px, width // self.cell_px

    def get_number_of_image_patches(self, height: int, width: int, images_kwargs: dict | None = None) -> int:
        """Vision tokens for an image of this size: one per cell, or one in all with ``tokens="agent"``."""
        rows, cols = self.grid_shape(int(height), int(width))
        return 1 if self.tokens == "agent" else rows * cols

    def preprocess(self, images: Any, return_tensors: str | None = "pt", **kwargs: Any) -> BatchFeature:
        """``{"pixel_values": [cells, 3*p*p] float, "image_grid_thw": [images, 3]}`` for a list of images."""
        if not isinstance(images, (list, tuple)):
            images = [images]
        rows_out, grids = [], []
        for image in images:
            array = np.asarray(image.convert("RGB") if hasattr(image, "convert") else image, dtype=np.float32)
            if array.ndim != 3 or array.shape[2] != 3:
                raise ValueError(f"expected an HxWx3 RGB image, got shape {array.shape}")
            rows, cols = self.grid_shape(array.shape[0], array.shape[1])
            cells = array.reshape(rows, self.cell_px, cols, self.cell_px, 3).transpose(0, 2, 4, 1, 3)
            cells = _area_downsample(cells, self.patch_px)  # [rows, cols, 3, p, p]
            rows_out.append(cells.reshape(rows * cols, -1) / 255.0 - 0.5)
            grids.append((1, rows, cols))
        data = {
            "pixel_values": np.concatenate(rows_out).astype(np.float32),
            "image_grid_thw": np.array(grids, dtype=np.int64),
        }
        return BatchFeature(data=data, tensor_type=return_tensors)


def _area_downsample(cells: np.ndarray, out_px: int) -> np.ndarray:
    """Average-pool the last two axes (a cell of ``cell_px`` pixels) down to ``out_px`` pixels."""
    size = cells.shape[-1]
    if size == out_px:
        return cells
    edges = np.linspace(0, size, out_px + 1).round().astype(int)
    rows = np.stack([cells[..., a:b, :].mean(-2) for a, b in zip(edges[:-1], edges[1:])], axis=-2)
    return np.stack([rows[..., a:b].mean(-1) for a, b in zip(edges[:-1], edges[1:])], axis=-1)


def register() -> None:
    """Make the transformers Auto classes know MazeVLM (idempotent)."""
    from transformers import AutoConfig, AutoImageProcessor, AutoModelForCausalLM, AutoModelForImageTextToText

    AutoConfig.register(MODEL_TYPE, MazeVLMConfig, exist_ok=True)
    AutoModelForImageTextToText.register(MazeVLMConfig, MazeVLMForConditionalGeneration, exist_ok=True)
    AutoModelForCausalLM.register(MazeVLMConfig, MazeVLMForConditionalGeneration, exist_ok=True)
    AutoImageProcessor.register(MazeVLMConfig, image_processor_classes={"pil": MazeVLMImageProcessor}, exist_ok=True)


__all__ = [
    "MazeVLMConfig",
    "MazeVLMForConditionalGeneration",
    "MazeVLMImageProcessor",
    "RecurrentConvEncoder",
    "register",
    "recurrent_encoders",
    "set_vision_grad_iterations",
    "set_vision_iterations",
]
