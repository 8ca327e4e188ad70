"""The one interface every generation engine implements, and the prompt encoding they share.

An engine takes a *batch* of prompts (token ids, plus images for vision-language models) and
returns one :class:`GenerationResult` per prompt with the sampled tokens and their sampling
log-probs. The rollout engine always sends every active episode in one call.

Log-prob convention (the trainer must use the same): ``logprobs[i]`` is
``log softmax(logits / T)[response_ids[i]]`` -- the log-probability under the
*temperature-scaled* distribution the token was sampled from, before top-p/top-k truncation.
This is also what vLLM returns by default (``logprobs_mode="processed_logprobs"`` scales by T
and ignores top-p). With ``temperature == 0`` (greedy) the scale is 1: the plain model
log-probs are returned. So a trainer computing ``log_softmax(logits / T)`` (T=1 when greedy)
reproduces them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable


@dataclass
class SamplingConfig:
    """How to sample replies."""

    max_new_tokens: int = 64
    """Upper bound on generated tokens per reply (an endless reply stops here, finish_reason="length")."""
    temperature: float = 1.0
    """Softmax temperature; 0 means greedy decoding."""
    top_p: float = 1.0
    """Nucleus sampling mass (1.0 = off). Log-probs ignore it (see module docstring)."""
    top_k: int = 0
    """Keep only the k most likely tokens (0 = off)."""
    seed: int | None = None
    """Seed for the engine's sampler; ``None`` leaves the generator's RNG as it is."""

    @property
    def greedy(self) -> bool:
        """True when decoding is deterministic argmax."""
        return self.temperature <= 0.0

    @property
    def logprob_temperature(self) -> float:
        """Temperature the recorded log-probs are scaled by (1.0 when greedy)."""
        return 1.0 if self.greedy else float(self.temperature)


@dataclass
class Prompt:
    """One request: the full context as token ids, plus the images its placeholders refer to."""

    prompt_ids: list[int]
    """Chat-templated context; image placeholders already expanded to one token per vision token."""
    images: list[Any] = field(default_factory=list)
    """HxWx3 uint8 arrays (or PIL images), in the order their placeholders appear."""


@dataclass
class GenerationResult:
    """One generated reply."""

    response_ids: list[int]
    """Sampled tokens, including the end-of-turn token when the model emitted one."""
    logprobs: list[float]
    """Sampling log-prob of each response token (temperature-scaled; see module docstring)."""
    text: str
    """Decoded reply with special tokens removed."""
    finish_reason: str
    """"stop" when an end-of-turn token ended the reply, "length" when max_new_tokens did."""


@runtime_checkable
class Generator(Protocol):
    """A batched sampler with hot-swappable LoRA adapters."""

    adapter_version: int
    """Version of the adapter currently used for sampling (0 = base weights / initial adapter)."""
    encoder: Any
    """The :class:`~runners.rollout.generation.prompts.ChatEncoder` matching this model's tokenizer/images."""
    max_model_len: int | None
    """Longest prompt + reply the model accepts (None = unknown); rollouts end episodes that outgrow it."""

    def generate(self, prompts: list[Prompt], sampling: SamplingConfig) -> list[GenerationResult]:
        """Sample one reply per prompt, all prompts in one batch."""
        ...

    def load_adapter(self, path: str, version: int) -> None:
        """Use the PEFT adapter at ``path`` for all following calls and stamp them ``version``."""
        ...

    def score(self, prompt_ids: list[int], response_ids: list[int], images: list[Any] | None = None) -> list[float]:
        """Teacher-forced log-probs (temperature 1) of ``response_ids`` given ``prompt_ids``."""
        ...

    def score_replies(
        self, prompts: list[Prompt], replies: list[list[int]], temperature: float = 1.0
    ) -> list[list[float]]:
        """Log-prob of each whole candidate reply after each prompt at ``temperature``: ``out[i][k] = log p(replies[k]
        | prompts[i])``.
        """
        ...


def check_sampling(sampling: SamplingConfig) -> None:
    """Fail fast with a readable message on nonsensical sampling settings."""
    if sampling.max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {sampling.max_new_tokens}")
    if sampling.temperature < 0:
        raise ValueError(f"temperature must be >= 0 (0 = greedy), got {sampling.temperature}")
    if not 0.0 < sampling.top_p <= 1.0:
        raise ValueError(f"top_p must be in (0, 1], got {sampling.top_p}")
    if sampling.top_k < 0:
        raise ValueError(f"top_k must be >= 0 (0 = off), got {sampling.top_k}")
