"""A Hugging Face causal LM or vision-language model with a PEFT LoRA adapter, as a Policy.

- Only the adapter trains. By default LoRA wraps every ``nn.Linear`` of the *language model*
  (attention and MLP projections) and never the vision tower, which vLLM ignores (a LoRA there
  would make trainer and sampler run different models) nor ``lm_head``.
- The KL reference is the same model with the adapter disabled (``peft``'s
  ``disable_adapter()`` context): no second copy of the weights.
- ``score_turns`` builds each row as ``turn.prompt_ids + turn.response_ids``, right-pads, runs
  micro-batches, and scores only the response positions (column j = response token j).
- Vision turns (``turn.images`` non-empty): ``prompt_ids`` must already contain the model's
  image placeholder tokens, expanded to the right count (:meth:`LoRALMPolicy.image_token_count`
  gives it); :meth:`LoRALMPolicy.prepare_multimodal` re-runs the same image processor on the
  raw images stored in ``turn.images``. It depends on nothing but the turns themselves, so the
  rollout side only has to store raw images and the expanded token ids it generated from.
- Critic (``value_head=True``, for PPO): a :class:`ValueHead` on the last hidden state, read at
  each turn's last prompt token (:meth:`LoRALMPolicy.score_turns`), trained with the adapter and
  saved next to it as ``value_head.safetensors``. Generation engines never load it: they only
  sample, and a value is needed only inside the update.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any, Iterable, Sequence

import torch
from torch import nn

import algos.models  # the one model loader (it registers mazegym's own models with the transformers Auto classes)
from algos.data import Turn
from algos.lora import LoRAConfig
from algos.policy import PolicyOutput

SCORE_CHUNK = 256
"""Default most turns :meth:`LoRALMPolicy.score_turns` runs in one forward pass: an algorithm's micro-batch
(``micro_batch_size``, the gradient-accumulation unit) larger than this is scored in several passes, bounding the
activation memory of callers that hand over a whole batch."""

VALUE_HEAD_FILE = "value_head.safetensors"
"""The critic's weights, written next to the adapter files by :meth:`LoRALMPolicy.save_adapter`."""
VALUE_HEAD_MODULE = "value_head"
"""Name of the :class:`ValueHead` submodule on the PEFT model (so FSDP shards it with the root unit)."""

VISION_MODULE_PATTERN = r".*(visual|vision_tower|vision_model|vision_encoder|image_encoder|multi_modal_projector).*"
"""Module names matching this regex belong to the vision side and never get LoRA."""


class ValueHead(nn.Module):
    """The critic: one linear map from the LM's last hidden state to a scalar V(s) (TRL's ``ValueHead``).

    Zero-initialised, so every value starts at 0 and the first advantages are plain discounted returns.
    """

    def __init__(self, hidden_size: int, dtype: torch.dtype = torch.float32):
        super().__init__()
        self.summary = nn.Linear(hidden_size, 1, dtype=dtype)
        nn.init.zeros_(self.summary.weight)
        nn.init.zeros_(self.summary.bias)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        """[..., H] hidden states -> [...] float32 values."""
        return self.summary(hidden.to(self.summary.weight.dtype)).squeeze(-1).float()


def value_read_positions(prompt_lengths: torch.Tensor) -> torch.Tensor:
    """Position whose hidden state the critic reads for each row: the last prompt token, ``P_i - 1``.

    A turn is one RL step and its value must be V(s), a function of the state (the prompt) only.
    Under causal attention the hidden state at ``P_i - 1`` has seen the whole prompt and none of
    the sampled reply; any later position would leak the action into the value (that would be
    Q(s, a), and the advantage ``r + gamma V(s') - V(s)`` would no longer be a baseline-corrected return).
    """
    return (torch.as_tensor(prompt_lengths) - 1).clamp(min=0)


def save_value_head(state: dict[str, torch.Tensor], directory: str | os.PathLike) -> Path:
    """Write the critic's weights ``state`` to ``directory/value_head.safetensors`` atomically (temp file + rename)."""
    from safetensors.torch import save_file

    path = Path(directory) / VALUE_HEAD_FILE
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        save_file({k: v.detach().cpu().contiguous() for k, v in state.items()}, str(tmp))
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def load_value_head(directory: str | os.PathLike, expected: dict[str, torch.Size]) -> dict[str, torch.Tensor] | None:
    """The critic's weights saved in ``directory`` (None when it has no ``value_head.safetensors``).

    Raises ``ValueError`` naming the file when it is unreadable or its tensors do not match
    ``expected`` (name -> shape): a critic that does not fit must not start a run silently.
    """
    from safetensors.torch import load_file

    path = Path(directory) / VALUE_HEAD_FILE
    if not path.is_file():
        return None
    try:
        state = load_file(str(path))
    except Exception as exc:  # safetensors raises its own error types for a torn or garbled header
        raise ValueError(
            f"critic weights {path} are unreadable ({type(exc).__name__}: {exc}); the checkpoint is corrupt"
        ) from None
    shapes = {k: tuple(v.shape) for k, v in state.items()}
    want = {k: tuple(v) for k, v in expected.items()}
    if shapes != want:
        raise ValueError(f"critic weights {path} do not fit this model: found {shapes}, expected {want}")
    return state


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
        r=lora.rank,
        lora_alpha=lora.alpha,
        lora_dropout=lora.dropout,
        target_modules=targets,
        exclude_modules=VISION_MODULE_PATTERN if (lora.exclude_vision and has_vision) else None,
        task_type="CAUSAL_LM",
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
        score_chunk: int = SCORE_CHUNK,
        pad_token_id: int | None = None,
        compute_entropy: bool = True,
        temperature: float = 1.0,
        value_head: bool = False,
    ):
        """Wrap an already-built ``transformers`` model (tests build tiny ones from configs).

        If ``model`` is already a ``peft.PeftModel`` it is used as is and ``lora`` is ignored.
        ``value_head=True`` adds the critic PPO trains (:class:`ValueHead`).
        """
        import peft

        self.model = model if isinstance(model, peft.PeftModel) else add_lora(model, lora or LoRAConfig())
        self.tokenizer = tokenizer
        self.image_processor = image_processor
        self.score_chunk = score_chunk
        """The most turns one forward pass of :meth:`score_turns` holds; larger calls are split."""
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
        self.has_value_head = bool(value_head)
        if self.has_value_head and not hasattr(self.model, VALUE_HEAD_MODULE):
            # A submodule of the PEFT model: it trains, moves and (under FSDP) shards with the adapter.
            out_proj = self.model.get_output_embeddings().weight
            self.model.add_module(VALUE_HEAD_MODULE, ValueHead(out_proj.shape[1], out_proj.dtype).to(out_proj.device))

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

        The Auto class is :func:`algos.models.model_class`'s (image-text-to-text for a config with a
        ``vision_config``, causal LM otherwise); loads the tokenizer and (for VLMs) the image processor from
        the same directory. ``adapter`` optionally loads saved adapter weights.
        """
        import transformers

        path = Path(path)
        if not (path / "config.json").is_file():
            raise FileNotFoundError(f"{path} is not a model directory (no config.json); pass a local path")
        config = algos.models.load_config(path)
        is_vlm = hasattr(config, "vision_config")
        model = algos.models.model_class(config).from_pretrained(path, dtype=dtype, trust_remote_code=False).to(device)
        if gradient_checkpointing:
            model.gradient_checkpointing_enable()
            model.enable_input_require_grads()
        tokenizer = transformers.AutoTokenizer.from_pretrained(path, trust_remote_code=False)
        image_processor = (
            transformers.AutoImageProcessor.from_pretrained(path, trust_remote_code=False) if is_vlm else None
        )
        policy = cls(model, lora, tokenizer=tokenizer, image_processor=image_processor, **kwargs)
        if adapter is not None:  # a starting adapter (e.g. from LoRA SFT) may predate the critic
            policy.load_adapter(adapter, critic_optional=True)
        return policy

    # ------------------------------------------------------------------------ Policy API
    def trainable_parameters(self) -> list[nn.Parameter]:
        """The LoRA adapter's parameters and the critic's, if any (everything else is frozen)."""
        return [p for p in self.model.parameters() if p.requires_grad]

    def saved_module_parameters(self) -> list[nn.Parameter]:
        """The trainable parameters of the whole modules kept in the adapter (``lora.modules_to_save``)."""
        return [p for name, p in self.model.named_parameters() if p.requires_grad and ".modules_to_save." in name]

    @property
    def device(self) -> torch.device:
        """Device of the model's parameters."""
        return next(self.model.parameters()).device

    def score_turns(self, turns: Sequence[Turn], *, reference: bool = False) -> PolicyOutput:
        """Log-probs (and entropy) of each turn's response tokens, in micro-batches.

        With a value head, also each turn's value, read at its last prompt token
        (:func:`value_read_positions`: the state, not the sampled reply). ``reference=True``
        runs the base model (adapter disabled) under ``no_grad`` and returns no values.
        """
        if not turns:
            values = torch.zeros(0) if self.has_value_head else None
            return PolicyOutput(torch.zeros(0, 0), torch.zeros(0, 0), values=values)
        length = max(len(t.response_ids) for t in turns)
        parts = []
        for start in range(0, len(turns), self.score_chunk):
            chunk = turns[start : start + self.score_chunk]
            if reference:
                with torch.no_grad(), self.model.disable_adapter():
                    parts.append(self._forward(chunk, length, with_values=False))
            else:
                parts.append(self._forward(chunk, length))
        logprobs, mask, entropy, values = (
            torch.cat([p[i] for p in parts]) if parts[0][i] is not None else None for i in range(4)
        )
        return PolicyOutput(logprobs=logprobs, mask=mask, entropy=entropy, values=values)

    def _forward(
        self, turns: Sequence[Turn], length: int, with_values: bool = True
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        """One padded forward pass; returns [b, length] logprobs, mask and entropy, and [b] values (or None)."""
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
        with_values = with_values and self.has_value_head
        out = self.model(
            input_ids=input_ids.to(device),
            attention_mask=attention.to(device),
            use_cache=False,
            logits_to_keep=keep.to(device),
            output_hidden_states=with_values,
            **{k: v.to(device) for k, v in extra.items()},
        )
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
        values = None
        if with_values:
            read = value_read_positions(prompt_len).to(device)
            last_hidden = out.hidden_states[-1][torch.arange(len(rows), device=device), read]
            values = getattr(self.model, VALUE_HEAD_MODULE)(last_hidden)
        return token_lp * mask_f, mask_f, entropy, values

    # ---------------------------------------------------------------------- vision inputs
    def prepare_multimodal(self, turns: Sequence[Turn]) -> dict[str, torch.Tensor]:
        """Pixel inputs for a micro-batch of vision turns (Qwen2-VL / Qwen2.5-VL / Qwen3-VL style).

        All images of all turns, in row order then image order, go through ``image_processor``
        in one call; the model scatters their embeddings into the image placeholder tokens of
        ``input_ids`` in that same order. Returns e.g. ``pixel_values`` and ``image_grid_thw``.
        """
        if self.image_processor is None:
            raise ValueError("turns carry images but this policy has no image_processor (load a VLM directory)")
        if getattr(self.image_processor, "accepts_arrays", False):  # frames as they are (no PIL round trip)
            images = [img if is_rgb_frame(img) else to_pil(img) for t in turns for img in t.images]
        else:
            images = [to_pil(img) for t in turns for img in t.images]
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
        width, height = to_pil(image).size
        merge = getattr(self.image_processor, "merge_size", 2)
        return int(self.image_processor.get_number_of_image_patches(height, width, {})) // (merge * merge)

    # -------------------------------------------------------------------- adapter on disk
    def save_adapter(self, directory: str | os.PathLike) -> Path:
        """Write the adapter in PEFT format (adapter_config.json + adapter_model.safetensors), plus the critic
        (``value_head.safetensors``) when the policy has one."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        self.model.save_pretrained(str(directory), safe_serialization=True)
        if self.has_value_head:
            save_value_head(self.value_head_state_dict(), directory)
        return directory

    def value_parameters(self) -> list[nn.Parameter]:
        """The critic's parameters (empty without a value head); PPO may give them their own learning rate."""
        return list(getattr(self.model, VALUE_HEAD_MODULE).parameters()) if self.has_value_head else []

    def value_head_state_dict(self) -> dict[str, torch.Tensor]:
        """The critic's weights (keys relative to the head, e.g. ``summary.weight``)."""
        return getattr(self.model, VALUE_HEAD_MODULE).state_dict()

    def load_adapter(self, directory: str | os.PathLike, *, critic_optional: bool = False) -> None:
        """Load adapter weights saved by :meth:`save_adapter` into the current adapter.

        A policy with a value head also loads ``value_head.safetensors``; when that file is
        missing it refuses (``ValueError``) unless ``critic_optional`` (a starting adapter from
        SFT has no critic: the head keeps its fresh init). A policy without a value head
        ignores the file.
        """
        import peft
        from safetensors.torch import load_file

        directory = Path(directory)
        weights = directory / "adapter_model.safetensors"
        if not weights.is_file():
            raise FileNotFoundError(f"no adapter_model.safetensors in {directory}")
        saved = json.loads((directory / "adapter_config.json").read_text())
        if int(saved.get("r", -1)) != int(self.model.peft_config["default"].r):
            raise ValueError(
                f"adapter in {directory} has rank {saved.get('r')}, this policy rank "
                f"{self.model.peft_config['default'].r}"
            )
        try:
            state = load_file(str(weights), device=str(self.device))
        except Exception as exc:  # safetensors raises its own error types for a torn or garbled header
            raise ValueError(
                f"{weights} is not a readable safetensors file ({type(exc).__name__}: {exc}); the adapter is corrupt"
            ) from None
        check_adapter_keys(peft.get_peft_model_state_dict(self.model).keys(), state.keys(), directory)
        critic = None
        if self.has_value_head:
            head = getattr(self.model, VALUE_HEAD_MODULE)
            critic = load_value_head(directory, {k: v.shape for k, v in head.state_dict().items()})
            if critic is None and not critic_optional:
                raise ValueError(
                    f"no {VALUE_HEAD_FILE} in {directory}: this policy trains a critic (ppo) and the "
                    "adapter was saved without one, so resuming would restart the critic from scratch"
                )
        peft.set_peft_model_state_dict(self.model, state)
        if critic is not None:
            head.load_state_dict({k: v.to(device=self.device) for k, v in critic.items()})

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
        parts.append(
            f"{len(unexpected)} unexpected ({', '.join(unexpected[:5])}{', ...' if len(unexpected) > 5 else ''})"
        )
    raise ValueError(f"adapter at {source} does not fit this model: LoRA tensors " + "; ".join(parts))


def is_rgb_frame(image: Any) -> bool:
    """An HxWx3 uint8 array: what the env renders, and what :func:`to_pil` would pass on unchanged."""
    import numpy as np

    return isinstance(image, np.ndarray) and image.dtype == np.uint8 and image.ndim == 3 and image.shape[2] == 3


def to_pil(image: Any):
    """HxWx3 uint8 array (or a PIL image) -> PIL image."""
    from PIL import Image

    if isinstance(image, Image.Image):
        return image.convert("RGB")
    import numpy as np

    return Image.fromarray(np.asarray(image, dtype=np.uint8)).convert("RGB")
