"""vLLM for a VLM whose vision encoder vLLM cannot run (MazeVLM): the encoder runs here, vLLM runs the decoder.

vLLM serves only the language model, exported as a plain ``Qwen2ForCausalLM`` directory
(:func:`write_decoder_model`). Every prompt goes to the engine as a *mixed* embeddings prompt
(vLLM's ``enable_prompt_embeds``): its token ids, a mask that is False at the image
placeholders, and one embedding row per position, where the image rows come from the vision
encoder and projector computed by :class:`PromptEmbedder` and the text rows from the decoder's
own token embeddings. Because the token ids travel with the embeddings, vLLM can also return
``prompt_logprobs`` (teacher-forced scoring). A PEFT adapter that trains the encoder or the projector in full
inside it (``modules_to_save``, the model spec's ``beside_engine`` modules) is split: the decoder's LoRA tensors go
to vLLM as a LoRA request, those modules' weights into :class:`PromptEmbedder` (:meth:`PromptEmbedder.load_vision`).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import torch

from algos.models import load_model
from runners import atomic, models
from runners.rollout.generation.base import Prompt
from runners.rollout.generation.prompts import pixel_inputs

DECODER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "chat_template.jinja",
    "generation_config.json",
)
"""Files of the model directory the decoder export copies as they are (those that exist)."""


def needs_prompt_embeds(model_path: str | Path) -> bool:
    """True when the model at ``model_path`` is served through prompt embeddings (see the module docstring): its
    spec names modules vLLM cannot run (:attr:`runners.models.ModelSpec.beside_engine`)."""
    return models.spec_for_dir(model_path).prompt_embeds


def write_decoder_model(model: torch.nn.Module, model_path: str | Path, out_dir: str | Path) -> Path:
    """Write the language model of ``model`` (loaded from ``model_path``, whose tokenizer files are copied) as a
    ``Qwen2ForCausalLM`` directory vLLM can load; returns it."""
    from safetensors.torch import save_file

    model_path, out_dir = Path(model_path), Path(out_dir)
    config = model.config.to_dict()
    for key in ("vision_config", "image_token_id", "auto_map", "_name_or_path", "transformers_version"):
        config.pop(key, None)
    config.update(model_type="qwen2", architectures=["Qwen2ForCausalLM"], tie_word_embeddings=False)
    state = {
        k: v.detach().cpu().contiguous() for k, v in model.state_dict().items() if k.startswith(("model.", "lm_head."))
    }

    def write(tmp: Path) -> None:
        save_file(state, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        (tmp / "config.json").write_text(json.dumps(config, indent=2))
        for name in DECODER_FILES:
            if (model_path / name).is_file():
                shutil.copy2(model_path / name, tmp / name)

    staging = atomic.temp_dir_beside(out_dir)
    try:
        write(staging)
        atomic.replace_dir(staging, out_dir)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return out_dir


def split_adapter(adapter_dir: str | Path, out_dir: str | Path) -> dict[str, torch.Tensor]:
    """Write the decoder part of a PEFT adapter to ``out_dir`` (what vLLM loads); return the rest.

    The rest is the weights of the modules trained in full inside the adapter
    (``modules_to_save``), keyed by their names in the model (``vision_tower.conv_in.weight``).
    """
    from safetensors.torch import load_file, save_file

    adapter_dir, out_dir = Path(adapter_dir), Path(out_dir)
    config = json.loads((adapter_dir / "adapter_config.json").read_text())
    saved = list(config.get("modules_to_save") or [])
    tensors = load_file(str(adapter_dir / "adapter_model.safetensors"))
    prefix = "base_model.model."
    full: dict[str, torch.Tensor] = {}
    lora: dict[str, torch.Tensor] = {}
    for key, value in tensors.items():
        name = key[len(prefix) :] if key.startswith(prefix) else key
        if any(name == m or name.startswith(m + ".") for m in saved):
            full[name] = value
        else:
            lora[key] = value
    config["modules_to_save"] = None
    out_dir.mkdir(parents=True, exist_ok=True)
    save_file(lora, str(out_dir / "adapter_model.safetensors"), metadata={"format": "pt"})
    (out_dir / "adapter_config.json").write_text(json.dumps(config, indent=2))
    return full


class PromptEmbedder:
    """The vision encoder, projector and token embeddings of a MazeVLM, turning prompts into vLLM embeddings prompts."""

    def __init__(self, model_path: str | Path, image_processor: Any, image_token_id: int, device: str = "cpu"):
        self.model = load_model(model_path, dtype=torch.float32).to(device).eval()
        self.image_processor = image_processor
        self.image_token_id = int(image_token_id)
        self.device = device
        self.modules = models.spec_for_dir(model_path).beside_engine
        self.base_vision = {
            f"{name}.{k}": v.clone()
            for name in self.modules
            for k, v in self.model.get_submodule(name).state_dict().items()
        }

    def vision_weights(self, full_weights: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The state of the modules run here (the spec's ``beside_engine``: encoder, projector) an adapter's fully
        trained weights (``split_adapter``'s rest) give, the base model's for the modules it does not train;
        ``ValueError`` when they hold other modules or do not fit."""
        other = sorted(k for k in full_weights if not k.startswith(tuple(f"{m}." for m in self.modules)))
        if other:
            raise ValueError(f"the adapter trains modules in full that the vLLM engine cannot serve: {other[:5]}")
        trained = {k.split(".", 1)[0] for k in full_weights}
        vision = {k: v for k, v in self.base_vision.items() if k.split(".", 1)[0] not in trained}
        vision.update(full_weights)
        missing, unexpected = sorted(set(self.base_vision) - set(vision)), sorted(set(vision) - set(self.base_vision))
        if missing or unexpected:
            raise ValueError(
                f"the adapter's {', '.join(sorted(trained))} weights do not fit this model: missing {missing[:5]}, "
                f"unexpected {unexpected[:5]}"
            )
        wrong = sorted(k for k, v in vision.items() if tuple(v.shape) != tuple(self.base_vision[k].shape))
        if wrong:
            raise ValueError(f"the adapter's weights trained in full have the wrong shape for this model: {wrong[:5]}")
        return vision

    def load_vision(self, vision: dict[str, torch.Tensor]) -> None:
        """Put checked weights (:meth:`vision_weights`) into the modules run here."""
        for name in self.modules:
            prefix = f"{name}."
            part = {k[len(prefix) :]: v for k, v in vision.items() if k.startswith(prefix)}
            self.model.get_submodule(name).load_state_dict(part, strict=True)

    @torch.no_grad()
    def embeddings(self, token_ids: list[list[int]], images: list[list[Any]]) -> list[torch.Tensor]:
        """One ``[len(ids), hidden]`` float32 tensor per prompt: image rows from the encoder, text rows from the
        embeddings.
        """
        rows = []
        flat = [im for ims in images for im in ims]
        vision = None
        if flat:
            pixels = pixel_inputs(self.image_processor, flat)
            vision, _ = self.model.image_features(
                pixels["pixel_values"].to(self.device), pixels["image_grid_thw"].to(self.device)
            )
        used = 0
        embed = self.model.get_input_embeddings()
        for ids in token_ids:
            tokens = torch.tensor(ids, device=self.device)
            out = embed(tokens).float()
            is_image = tokens == self.image_token_id
            count = int(is_image.sum())
            if count:
                if vision is None or used + count > vision.shape[0]:
                    raise ValueError("a prompt has more image placeholder tokens than its images give vision tokens")
                out[is_image] = vision[used : used + count].float()
                used += count
            rows.append(out.cpu())
        if vision is not None and used != vision.shape[0]:
            raise ValueError(
                f"the images gave {vision.shape[0]} vision tokens but the prompts hold {used} placeholders"
            )
        return rows

    def engine_prompts(self, prompts: list[Prompt], extra_ids: list[list[int]] | None = None) -> list[dict[str, Any]]:
        """vLLM mixed embeddings prompts (ids, mask, rows) for ``prompts``, each followed by ``extra_ids[i]`` when
        given.
        """
        ids = [list(p.prompt_ids) + (list(extra_ids[i]) if extra_ids else []) for i, p in enumerate(prompts)]
        rows = self.embeddings(ids, [list(p.images) for p in prompts])
        return [self._item(r, i) for r, i in zip(rows, ids)]

    @torch.no_grad()
    def engine_prompts_with_replies(self, prompts: list[Prompt], replies: list[list[int]]) -> list[dict[str, Any]]:
        """One engine prompt per (prompt, reply) pair, prompt-major; each prompt's images are encoded once."""
        rows = self.embeddings([list(p.prompt_ids) for p in prompts], [list(p.images) for p in prompts])
        embed = self.model.get_input_embeddings()
        reply_rows = [embed(torch.tensor(r, dtype=torch.long, device=self.device)).float().cpu() for r in replies]
        return [
            self._item(torch.cat([row, extra]), list(p.prompt_ids) + list(r))
            for p, row in zip(prompts, rows)
            for r, extra in zip(replies, reply_rows)
        ]

    def _item(self, rows: torch.Tensor, ids: list[int]) -> dict[str, Any]:
        """A mixed embeddings prompt: token ids, the mask of real-token positions, one row per position."""
        return {
            "prompt_embeds": rows,
            "prompt_token_ids": ids,
            "prompt_is_token_ids": [t != self.image_token_id for t in ids],
        }
