"""The LoRA adapter settings: one torch-free type for the policy (``algos.policies.lm``) and the runners' config.

Each field carries its check as metadata (``range``: ``(low, high, low excluded)``), which the runners' config
validates.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class LoRAConfig:
    """The LoRA adapter that RL (and LoRA-mode SFT) trains (defaults: the case study's rank 32)."""

    rank: int = field(default=32, metadata={"range": (1, 4096, False)})
    """Adapter rank r."""
    alpha: int = field(default=64, metadata={"range": (0, None, True)})
    """Scaling numerator: the update is alpha / rank * B @ A."""
    dropout: float = field(default=0.0, metadata={"range": (0.0, 0.999, False)})
    """Dropout on the adapter input."""
    target_modules: list[str] = field(default_factory=list, metadata={"any": True})
    """Module name suffixes to wrap (e.g. q_proj,v_proj); empty = every linear layer of the language model."""
    exclude_vision: bool = field(default=True, metadata={"any": True})
    """Never put LoRA on the vision tower (vLLM ignores it there). False lets ``target_modules`` name vision modules
    too, e.g. MazeVLM's recurrent convolutions (conv_in, conv_out, conv_gate) with the HF engine."""
    modules_to_save: list[str] = field(default_factory=list, metadata={"any": True})
    """Modules trained in full and saved inside the adapter (PEFT modules_to_save), e.g. vision_tower for a tiny VLM
    whose encoder must learn too. The vLLM engine serves such adapters for MazeVLM only (its encoder runs beside
    the engine).
    """
