"""Hugging Face transformers engine: batched generation on CPU or GPU, text LMs and VLMs, PEFT LoRA.

Log-probs are recomputed from the raw logits ``generate`` returns: ``log_softmax(logits / T)``
at the sampled token (T = 1 when greedy), i.e. the temperature-scaled distribution before
top-p/top-k truncation -- the convention of :mod:`runners.rollout.generation.base`.
"""

from __future__ import annotations

import json

from pathlib import Path
from typing import Any

import torch

from algos.models import load_model
from runners.rollout.generation.adapters import check_adapter
from runners.rollout.generation.base import GenerationResult, Prompt, SamplingConfig, check_sampling
from runners.rollout.generation.prompts import (
    ChatEncoder,
    image_token_id_of,
    load_image_processor,
    load_tokenizer,
    pixel_inputs,
)


def _load_model(model_path: str, dtype: torch.dtype, device: str):
    """The model at ``model_path`` (:func:`algos.models.load_model`) on ``device``, in eval mode."""
    return load_model(model_path, dtype=dtype).to(device).eval()


def mm_token_type_ids(input_ids: torch.Tensor, image_token_id: int | None) -> torch.Tensor:
    """Per-token modality ids (0 text, 1 image) that transformers' Qwen-VL models need with pixel inputs."""
    if image_token_id is None:
        return torch.zeros_like(input_ids, dtype=torch.int)
    return (input_ids == image_token_id).to(torch.int)


def _eos_ids(model, tokenizer) -> list[int]:
    """End-of-turn ids: the generation config's eos ids plus the tokenizer's eos."""
    eos = model.generation_config.eos_token_id
    ids = set(eos if isinstance(eos, list) else [eos] if eos is not None else [])
    if tokenizer.eos_token_id is not None:
        ids.add(tokenizer.eos_token_id)
    return sorted(ids)


class HFGenerator:
    """Batched sampler over a transformers model, with a hot-swappable PEFT LoRA adapter."""

    def __init__(self, model_path: str | Path, device: str = "cpu", dtype: str | torch.dtype = "float32"):
        self.model_path = str(model_path)
        self.device = device
        self.dtype = getattr(torch, dtype) if isinstance(dtype, str) else dtype
        self.tokenizer = load_tokenizer(self.model_path)
        self.image_processor = load_image_processor(self.model_path)
        self.image_token_id = image_token_id_of(self.model_path)
        self.encoder = ChatEncoder(self.tokenizer, self.image_processor, self.image_token_id)
        self.model = _load_model(self.model_path, self.dtype, device)
        self.eos_ids = _eos_ids(self.model, self.tokenizer)
        text_config = getattr(self.model.config, "text_config", self.model.config)
        self.max_model_len: int | None = getattr(text_config, "max_position_embeddings", None)
        self.pad_id = self.tokenizer.pad_token_id
        self.adapter_version = 0
        self.adapter_path: str | None = None

    # ------------------------------------------------------------------ adapters
    def load_adapter(self, path: str | Path, version: int) -> None:
        """Load the PEFT adapter at ``path`` (in place when the LoRA layout is unchanged).

        An adapter missing LoRA tensors, or holding tensors this model has no place for, is
        refused with a ``ValueError`` naming them (:func:`runners.rollout.generation.adapters.check_adapter`).
        """
        from peft import PeftModel, set_peft_model_state_dict
        from safetensors.torch import load_file

        path = Path(path)
        weights = path / "adapter_model.safetensors"
        if not weights.is_file():
            raise FileNotFoundError(f"no PEFT adapter at {path} (adapter_model.safetensors missing)")
        check_adapter(self.model_path, path)
        saved = set(json.loads((path / "adapter_config.json").read_text()).get("modules_to_save") or [])
        loaded = (
            set(self.model.peft_config["default"].modules_to_save or []) if isinstance(self.model, PeftModel) else set()
        )
        if isinstance(self.model, PeftModel) and saved != loaded:
            # Other modules trained in full cannot be swapped in place, and unloading would keep the previous
            # adapter's copies of them: start again from the base model on disk.
            self.model = PeftModel.from_pretrained(self._base_model(), str(path)).to(self.device).eval()
        elif isinstance(self.model, PeftModel):
            state = load_file(str(weights), device=self.device)
            result = set_peft_model_state_dict(self.model, state)
            if result.unexpected_keys:
                # The adapter layout changed (other rank or targets): rebuild from the base model.
                self.model = PeftModel.from_pretrained(self._base_model(), str(path)).to(self.device).eval()
        else:
            self.model = PeftModel.from_pretrained(self.model, str(path)).to(self.device).eval()
        self.adapter_version = int(version)
        self.adapter_path = str(path)

    def _base_model(self) -> torch.nn.Module:
        """The base model as on disk (``unload()`` would keep an adapter's copies of the modules it trained in full)."""
        return _load_model(self.model_path, self.dtype, self.device)

    # ------------------------------------------------------------------ generation
    @torch.no_grad()
    def generate(self, prompts: list[Prompt], sampling: SamplingConfig) -> list[GenerationResult]:
        """Sample one reply per prompt; all prompts run as one left-padded batch."""
        check_sampling(sampling)
        if not prompts:
            return []
        inputs = self._batch_inputs(prompts)
        if sampling.seed is not None:
            torch.manual_seed(sampling.seed)
        kwargs: dict[str, Any] = dict(
            max_new_tokens=sampling.max_new_tokens,
            do_sample=not sampling.greedy,
            eos_token_id=self.eos_ids,
            pad_token_id=self.pad_id,
            output_logits=True,
            return_dict_in_generate=True,
        )
        if not sampling.greedy:
            # top_k=0 explicitly: transformers' global default would otherwise truncate to the top 50.
            kwargs.update(temperature=sampling.temperature, top_p=sampling.top_p, top_k=sampling.top_k)
        else:
            kwargs.update(temperature=None, top_p=None, top_k=None)
        out = self.model.generate(**inputs, **kwargs)
        prompt_len = inputs["input_ids"].shape[1]
        new_tokens = out.sequences[:, prompt_len:]
        logits = torch.stack(out.logits, dim=1).float()  # [B, T, V] raw logits
        logps = torch.log_softmax(logits / sampling.logprob_temperature, dim=-1)
        token_logps = logps.gather(-1, new_tokens.unsqueeze(-1)).squeeze(-1)
        return [self._result(new_tokens[i].tolist(), token_logps[i].tolist()) for i in range(len(prompts))]

    def _result(self, tokens: list[int], logps: list[float]) -> GenerationResult:
        """Cut a padded row at the first end-of-turn token (kept) and decode it."""
        end = next((i for i, t in enumerate(tokens) if t in self.eos_ids), None)
        finish = "length" if end is None else "stop"
        n = len(tokens) if end is None else end + 1
        ids = tokens[:n]
        text = self.tokenizer.decode(ids, skip_special_tokens=True)
        return GenerationResult(response_ids=ids, logprobs=logps[:n], text=text, finish_reason=finish)

    def _batch_inputs(self, prompts: list[Prompt]) -> dict[str, torch.Tensor]:
        """Left-pad the prompts; add pixel inputs for the images, in prompt order."""
        width = max(len(p.prompt_ids) for p in prompts)
        ids = torch.full((len(prompts), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(prompts), width), dtype=torch.long)
        for i, p in enumerate(prompts):
            if not p.prompt_ids:
                raise ValueError("empty prompt: every prompt needs at least one token")
            ids[i, width - len(p.prompt_ids) :] = torch.tensor(p.prompt_ids)
            mask[i, width - len(p.prompt_ids) :] = 1
        batch: dict[str, torch.Tensor] = {"input_ids": ids.to(self.device), "attention_mask": mask.to(self.device)}
        images = [im for p in prompts for im in p.images]
        if images:
            batch.update(self._pixels(images, ids))
        return batch

    def _pixels(self, images: list[Any], input_ids: torch.Tensor) -> dict[str, torch.Tensor]:
        """Pixel inputs plus ``mm_token_type_ids`` (1 on image tokens), which Qwen-VL M-RoPE needs."""
        if self.image_processor is None:
            raise ValueError(f"prompts carry images but {self.model_path} has no image processor (text-only model)")
        pix = pixel_inputs(self.image_processor, images)
        out = {k: (v.to(self.device, self.dtype) if k == "pixel_values" else v.to(self.device)) for k, v in pix.items()}
        out["mm_token_type_ids"] = mm_token_type_ids(input_ids, self.image_token_id).to(self.device)
        return out

    # ------------------------------------------------------------------ scoring
    @torch.no_grad()
    def score(self, prompt_ids: list[int], response_ids: list[int], images: list[Any] | None = None) -> list[float]:
        """Teacher-forced log-probs (T = 1) of ``response_ids`` after ``prompt_ids`` (no padding)."""
        seq = torch.tensor([list(prompt_ids) + list(response_ids)], device=self.device)
        inputs: dict[str, torch.Tensor] = {"input_ids": seq, "attention_mask": torch.ones_like(seq)}
        if images:
            inputs.update(self._pixels(list(images), seq))
        logits = self.model(**inputs).logits[0].float()
        start = len(prompt_ids)
        logps = torch.log_softmax(logits[start - 1 : -1], dim=-1)
        return logps.gather(-1, seq[0, start:].unsqueeze(-1)).squeeze(-1).tolist()

    @torch.no_grad()
    def score_replies(
        self, prompts: list[Prompt], replies: list[list[int]], temperature: float = 1.0, max_prompts: int = 128
    ) -> list[list[float]]:
        """Log-prob of each whole candidate reply after each prompt at ``temperature``.

        Each prompt runs once (left-padded, as in :meth:`generate`); its KV cache is then repeated
        for the candidates, so scoring k replies costs one prompt pass plus k short reply passes.
        Models with multimodal RoPE (Qwen-VL), whose cached positions are per batch row, score
        every prompt + reply in full instead.
        """
        if temperature <= 0:
            raise ValueError(f"temperature must be > 0 to score replies, got {temperature}")
        if not prompts or not replies:
            return [[] for _ in prompts]
        if any(not r for r in replies):
            raise ValueError("every candidate reply needs at least one token")
        if self._multimodal_rope():
            return self._score_replies_unshared(prompts, replies, temperature, max_prompts)
        k = len(replies)
        width = max(map(len, replies))
        reply_ids = torch.full((k, width), self.pad_id, dtype=torch.long)
        reply_mask = torch.zeros((k, width), dtype=torch.long)
        for j, r in enumerate(replies):
            reply_ids[j, : len(r)] = torch.tensor(r)
            reply_mask[j, : len(r)] = 1
        out: list[list[float]] = []
        for start in range(0, len(prompts), max_prompts):
            chunk = prompts[start : start + max_prompts]
            inputs = self._batch_inputs(chunk)
            first = self.model(**inputs, use_cache=True, logits_to_keep=1)  # only the last position is read
            cache = first.past_key_values
            cache.batch_repeat_interleave(k)
            ids = reply_ids.repeat(len(chunk), 1).to(self.device)
            mask = torch.cat(
                [
                    inputs["attention_mask"].repeat_interleave(k, dim=0),
                    reply_mask.repeat(len(chunk), 1).to(self.device),
                ],
                dim=1,
            )
            rest = self.model(input_ids=ids, attention_mask=mask, past_key_values=cache, use_cache=False)
            logits = torch.cat(
                [first.logits[:, -1:].float().repeat_interleave(k, dim=0), rest.logits[:, :-1].float()], dim=1
            )
            logps = torch.log_softmax(logits / temperature, dim=-1).gather(-1, ids[..., None]).squeeze(-1)
            totals = (logps * reply_mask.repeat(len(chunk), 1).to(logps.device)).sum(dim=1).view(len(chunk), k)
            out.extend(totals.tolist())
        return out

    def _multimodal_rope(self) -> bool:
        """True for Qwen-VL style models whose RoPE positions depend on the image layout (M-RoPE)."""
        text_config = getattr(self.model.config, "text_config", self.model.config)
        rope = getattr(text_config, "rope_parameters", None) or getattr(text_config, "rope_scaling", None) or {}
        return "mrope_section" in rope

    def _score_replies_unshared(
        self, prompts: list[Prompt], replies: list[list[int]], temperature: float, max_prompts: int
    ) -> list[list[float]]:
        """:meth:`score_replies` with every prompt + reply as its own right-padded row (no shared cache)."""
        out = [[0.0] * len(replies) for _ in prompts]
        rows = [(i, k) for i in range(len(prompts)) for k in range(len(replies))]
        for start in range(0, len(rows), max_prompts):
            chunk = rows[start : start + max_prompts]
            seqs = [list(prompts[i].prompt_ids) + list(replies[k]) for i, k in chunk]
            ids = torch.full((len(seqs), max(map(len, seqs))), self.pad_id, dtype=torch.long)
            mask = torch.zeros_like(ids)
            for r, seq in enumerate(seqs):
                ids[r, : len(seq)] = torch.tensor(seq)
                mask[r, : len(seq)] = 1
            inputs: dict[str, torch.Tensor] = {"input_ids": ids.to(self.device), "attention_mask": mask.to(self.device)}
            images = [im for i, _ in chunk for im in prompts[i].images]
            if images:
                inputs.update(self._pixels(images, ids))
            logps = torch.log_softmax(self.model(**inputs).logits.float() / temperature, dim=-1)
            for r, (i, k) in enumerate(chunk):
                first, n = len(prompts[i].prompt_ids), len(replies[k])
                target = ids[r, first : first + n].to(logps.device)
                out[i][k] = float(logps[r, first - 1 : first - 1 + n].gather(-1, target[:, None]).sum())
        return out
