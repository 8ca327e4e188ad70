"""A Hugging Face causal LM or vision-language model with a PEFT LoRA adapter, as a Policy.

- Only the adapter trains. By default LoRA wraps every ``nn.Linear`` of the *language model*
  (attention and MLP projections) and never the vision tower, which vLLM ignores (a LoRA there
  would make trainer and sampler run different models) nor ``lm_head``.
- The KL reference is the same model with the adapter disabled (``peft``'s
  ``disable_adapter()`` context): no second copy of the weights.
- ``evaluate`` builds each row as ``turn.prompt_ids + turn.response_ids``, right-pads, runs
  micro-batches, and scores only the response positions (column j = response token j).
- Vision turns (``turn.images`` non-empty): ``prompt_ids`` must already contain the model's
  image placeholder tokens, expanded to the right count (:meth:`LoRALMPolicy.image_token_count`
  gives it); :meth:`LoRALMPolicy.prepare_multimodal` re-runs the same image processor on the
  raw images stored in ``turn.images``. It depends on nothing but the turns themselves, so the
  rollout side only has to store raw images and the expanded token ids it generated from.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

import torch
from torch import nn

import algos.models  # noqa: F401  (registers mazegym's own models with the transformers Auto classes)
from algos.data import Turn
from algos.policy import PolicyOutput

VISION_MODULE_PATTERN = r".*(visual|vision_tower|vision_model|vision_encoder|image_encoder|multi_modal_projector).*"
"""Module names matching this regex belong to the vision side and never get LoRA."""


@dataclass
class LoRAConfig:
    """LoRA adapter settings."""

    rank: int = 32
    """Adapter rank r."""
    alpha: int = 64
    """Scaling numerator: the update is ``alpha / rank * B @ A``."""
    dropout: float = 0.0
    """Dropout on the adapter input."""
    target_modules: list[str] | None = None
    """Module name suffixes to wrap (e.g. ["q_proj", "v_proj"]); None = every linear layer of the language model."""
    exclude_vision: bool = True
    """Never put LoRA on the vision tower (vLLM ignores it there)."""
    modules_to_save: list[str] | None = None
    """Modules trained in full and stored in the adapter (PEFT ``modules_to_save``), e.g. ["vision_tower"]."""


def language_linear_suffixes(model: nn.Module) -> list[str]:
    """Suffixes of all ``nn.Linear`` layers outside the vision tower and the output head."""
    vision = re.compile(VISION_MODULE_PATTERN)
    suffixes = set()
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear) and not vision.fullmatch(name) and not name.endswith("lm_head"):
            suffixes.add(name.rsplit(".", 1)[-1])
    return sorted(suffixes)


def add_lora(model: nn.Module, lora: LoRAConfig) -> nn.Module:
    """Wrap ``model`` in a PEFT model with a fresh LoRA adapter (base weights frozen)."""
    import peft

    targets = lora.target_modules or language_linear_suffixes(model)
    vision = re.compile(VISION_MODULE_PATTERN)
    has_vision = any(vision.fullmatch(name) for name, _ in model.named_modules())
    config = peft.LoraConfig(
        r=lora.rank, lora_alpha=lora.alpha, lora_dropout=lora.dropout, target_modules=targets,
        exclude_modules=VISION_MODULE_PATTERN if (lora.exclude_vision and has_vision) else None, task_type="CAUSAL_LM",
        modules_to_save=list(lora.modules_to_save) if lora.modules_to_save else None,
    )
    return peft.get_peft_model(model, config)


class LoRALMPolicy:
    """Policy over a (V)LM with a LoRA adapter; see the module docstring."""

    has_value_head = False

    def __init__(
        self,
        model: nn.Module,
        lora: LoRAConfig | None = None,
        *,
        tokenizer: Any = None,
        image_processor: Any = None,
        micro_batch_size: int = 8,
        pad_token_id: int | None = None,
        compute_entropy: bool = True,
        temperature: float = 1.0,
    ):
        """Wrap an already-built ``transformers`` model (tests build tiny ones from configs).

        If ``model`` is already a ``peft.PeftModel`` it is used as is and ``lora`` is ignored.
        """
        import peft

        self.model = model if isinstance(model, peft.PeftModel) else add_lora(model, lora or LoRAConfig())
        self.tokenizer = tokenizer
        self.image_processor = image_processor
        self.micro_batch_size = micro_batch_size
        self.compute_entropy = compute_entropy
        if temperature <= 0:
            raise ValueError(f"temperature must be > 0 (the sampling temperature of the rollouts), got {temperature}")
        self.temperature = float(temperature)
        """Logits are divided by this before the softmax, so log-probs match rollouts sampled at T."""
        if pad_token_id is None:
            pad_token_id = getattr(tokenizer, "pad_token_id", None)
            if pad_token_id is None:
                pad_token_id = getattr(self.model.config, "pad_token_id", None) or 0
        self.pad_token_id = int(pad_token_id)

    @classmethod
    def from_pretrained(
        cls,
        path: str | os.PathLike,
        lora: LoRAConfig | None = None,
        *,
        dtype: torch.dtype = torch.bfloat16,
        device: str | torch.device = "cpu",
        adapter: str | os.PathLike | None = None,
        gradient_checkpointing: bool = False,
        **kwargs: Any,
    ) -> "LoRALMPolicy":
        """Load a local model directory (no hub downloads) and add a LoRA adapter.

        Picks ``AutoModelForImageTextToText`` when the config has a ``vision_config``, else
        ``AutoModelForCausalLM``; loads the tokenizer and (for VLMs) the image processor from
        the same directory. ``adapter`` optionally loads saved adapter weights.
        """
        import transformers

        path = Path(path)
        if not (path / "config.json").is_file():
            raise FileNotFoundError(f"{path} is not a model directory (no config.json); pass a local path")
        config = transformers.AutoConfig.from_pretrained(path)
        is_vlm = hasattr(config, "vision_config")
        auto = transformers.AutoModelForImageTextToText if is_vlm else transformers.AutoModelForCausalLM
        model = auto.from_pretrained(path, dtype=dtype).to(device)
        if gradient_checkpointing:
            model.gradient_checkpointing_enable()
            model.enable_input_require_grads()
        tokenizer = transformers.AutoTokenizer.from_pretrained(path)
        image_processor = transformers.AutoImageProcessor.from_pretrained(path) if is_vlm else None
        policy = cls(model, lora, tokenizer=tokenizer, image_processor=image_processor, **kwargs)
        if adapter is not None:
            policy.load_adapter(adapter)
        return policy

    # ------------------------------------------------------------------------ Policy API
    def trainable_parameters(self) -> list[nn.Parameter]:
        """The LoRA adapter's parameters (everything else is frozen)."""
        return [p for p in self.model.parameters() if p.requires_grad]

    @property
    def device(self) -> torch.device:
        """Device of the model's parameters."""
        return next(self.model.parameters()).device

    def evaluate(self, turns: Sequence[Turn], *, reference: bool = False) -> PolicyOutput:
        """Log-probs (and entropy) of each turn's response tokens, in micro-batches.

        ``reference=True`` runs the base model (adapter disabled) under ``no_grad``.
        """
        if not turns:
            return PolicyOutput(torch.zeros(0, 0), torch.zeros(0, 0))
        length = max(len(t.response_ids) for t in turns)
        parts = []
        for start in range(0, len(turns), self.micro_batch_size):
            chunk = turns[start : start + self.micro_batch_size]
            if reference:
                with torch.no_grad(), self.model.disable_adapter():
                    parts.append(self._forward(chunk, length))
            else:
                parts.append(self._forward(chunk, length))
        logprobs, mask, entropy = (torch.cat([p[i] for p in parts]) if parts[0][i] is not None else None for i in range(3))
        return PolicyOutput(logprobs=logprobs, mask=mask, entropy=entropy)

    def _forward(self, turns: Sequence[Turn], length: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """One padded forward pass; returns [b, length] logprobs, mask and entropy."""
        device = self.device
        rows = [t.input_ids for t in turns]
        width = max(len(r) for r in rows)
        input_ids = torch.full((len(rows), width), self.pad_token_id, dtype=torch.long)
        attention = torch.zeros((len(rows), width), dtype=torch.long)
        for i, row in enumerate(rows):
            input_ids[i, : len(row)] = torch.tensor(row, dtype=torch.long)
            attention[i, : len(row)] = 1
        # Response token j of row i sits at position P_i + j and is predicted at P_i + j - 1.
        prompt_len = torch.tensor([len(t.prompt_ids) for t in turns])
        resp_len = torch.tensor([len(t.response_ids) for t in turns])
        cols = torch.arange(length)
        mask = (cols[None, :] < resp_len[:, None]) & ((prompt_len[:, None] + cols[None, :]) >= 1)
        pred_pos = (prompt_len[:, None] + cols[None, :] - 1).clamp(min=0, max=width - 1)
        target_pos = (prompt_len[:, None] + cols[None, :]).clamp(max=width - 1)
        extra = self.prepare_multimodal(turns) if any(t.images for t in turns) else {}
        if extra:
            extra["mm_token_type_ids"] = self.mm_token_type_ids(input_ids)
        # Project onto the vocabulary only at the positions that predict response tokens (for a
        # 150k vocabulary the full [b, width, V] logits dwarf the activations). A 1-D
        # ``logits_to_keep`` (the same positions for every row) is what every transformers 5.x
        # accepts; ``keep_index`` maps each row's positions into it.
        keep = torch.unique(pred_pos)
        keep_index = torch.searchsorted(keep, pred_pos)
        out = self.model(input_ids=input_ids.to(device), attention_mask=attention.to(device), use_cache=False,
                         logits_to_keep=keep.to(device), **{k: v.to(device) for k, v in extra.items()})
        rows_idx = torch.arange(len(rows))[:, None].expand(-1, length).to(device)
        picked = out.logits[rows_idx, keep_index.to(device)]  # [b, length, V]
        # Generators record log-probs of the temperature-scaled distribution; score the same one.
        log_probs = torch.log_softmax(picked.float() / self.temperature, dim=-1)
        targets = input_ids[torch.arange(len(rows))[:, None], target_pos].to(device)
        token_lp = log_probs.gather(-1, targets[..., None]).squeeze(-1)
        mask_f = mask.to(device=device, dtype=token_lp.dtype)
        entropy = None
        if self.compute_entropy:
            entropy = -(log_probs.exp() * log_probs).sum(-1) * mask_f
        return token_lp * mask_f, mask_f, entropy

    # ---------------------------------------------------------------------- vision inputs
    def prepare_multimodal(self, turns: Sequence[Turn]) -> dict[str, torch.Tensor]:
        """Pixel inputs for a micro-batch of vision turns (Qwen2-VL / Qwen2.5-VL / Qwen3-VL style).

        All images of all turns, in row order then image order, go through ``image_processor``
        in one call; the model scatters their embeddings into the image placeholder tokens of
        ``input_ids`` in that same order. Returns e.g. ``pixel_values`` and ``image_grid_thw``.
        """
        if self.image_processor is None:
            raise ValueError("turns carry images but this policy has no image_processor (load a VLM directory)")
        images = [_to_pil(img) for t in turns for img in t.images]
        processed = self.image_processor(images=images, return_tensors="pt")
        return {k: v for k, v in processed.items() if isinstance(v, torch.Tensor)}

    def mm_token_type_ids(self, input_ids: torch.Tensor) -> torch.Tensor:
        """Per-token modality ids (0 text, 1 image, 2 video) that M-RoPE models need."""
        config = getattr(self.model, "config", None)
        image_id = getattr(config, "image_token_id", None)
        video_id = getattr(config, "video_token_id", None)
        out = torch.zeros_like(input_ids)
        if image_id is not None:
            out[input_ids == image_id] = 1
        if video_id is not None:
            out[input_ids == video_id] = 2
        return out

    def image_token_count(self, image: Any) -> int:
        """How many image placeholder tokens the prompt needs for ``image`` (the processor's count / merge^2)."""
        width, height = _to_pil(image).size
        merge = getattr(self.image_processor, "merge_size", 2)
        return int(self.image_processor.get_number_of_image_patches(height, width, {})) // (merge * merge)

    # -------------------------------------------------------------------- adapter on disk
    def save_adapter(self, directory: str | os.PathLike) -> Path:
        """Write the adapter in PEFT format (adapter_config.json + adapter_model.safetensors)."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        self.model.save_pretrained(str(directory), safe_serialization=True)
        return directory

    def load_adapter(self, directory: str | os.PathLike) -> None:
        """Load adapter weights saved by :meth:`save_adapter` into the current adapter."""
        import peft
        from safetensors.torch import load_file

        directory = Path(directory)
        weights = directory / "adapter_model.safetensors"
        if not weights.is_file():
            raise FileNotFoundError(f"no adapter_model.safetensors in {directory}")
        saved = json.loads((directory / "adapter_config.json").read_text())
        if int(saved.get("r", -1)) != int(self.model.peft_config["default"].r):
            raise ValueError(f"adapter in {directory} has rank {saved.get('r')}, this policy rank "
                             f"{self.model.peft_config['default'].r}")
        state = load_file(str(weights), device=str(self.device))
        check_adapter_keys(peft.get_peft_model_state_dict(self.model).keys(), state.keys(), directory)
        peft.set_peft_model_state_dict(self.model, state)

    def adapter_state_dict(self) -> dict[str, torch.Tensor]:
        """The adapter weights only (PEFT key names), e.g. for in-memory engine sync."""
        import peft

        return peft.get_peft_model_state_dict(self.model)


def check_adapter_keys(expected: Iterable[str], found: Iterable[str], source: Any) -> None:
    """Raise ``ValueError`` naming the LoRA tensors missing from, or unexpected in, the adapter at ``source``.

    A partial adapter would otherwise load silently and leave the missing layers at their
    previous (or initial) weights: the model served would not be the one trained.
    """
    expected, found = set(expected), set(found)
    missing, unexpected = sorted(expected - found), sorted(found - expected)
    if not missing and not unexpected:
        return
    parts = []
    if missing:
        parts.append(f"{len(missing)} missing ({', '.join(missing[:5])}{', ...' if len(missing) > 5 else ''})")
    if unexpected:
        parts.append(f"{len(unexpected)} unexpected ({', '.join(unexpected[:5])}{', ...' if len(unexpected) > 5 else ''})")
    raise ValueError(f"adapter at {source} does not fit this model: LoRA tensors " + "; ".join(parts))


def _to_pil(image: Any):
    """HxWx3 uint8 array (or a PIL image) -> PIL image."""
    from PIL import Image

    if isinstance(image, Image.Image):
        return image.convert("RGB")
    import numpy as np

    return Image.fromarray(np.asarray(image, dtype=np.uint8)).convert("RGB")
