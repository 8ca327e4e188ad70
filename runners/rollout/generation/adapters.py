"""Which LoRA tensors an adapter must hold for a given model, checked before a generator loads it.

The expected names come from building the model on the ``meta`` device (no weights, no memory)
and wrapping it with the adapter's own ``adapter_config.json``: exactly what PEFT would save for
that model. Both generation engines call :func:`check_adapter` before loading, so a partial
adapter (missing tensors) or one made for another model (unexpected tensors) is refused with
the names, instead of serving base or stale weights for the missing layers.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

from algos.policies.lm import check_adapter_keys


@lru_cache(maxsize=8)
def _expected_keys(model_path: str, adapter_config: str) -> frozenset[str]:
    import torch
    from peft import LoraConfig, get_peft_model, get_peft_model_state_dict
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForImageTextToText

    config = AutoConfig.from_pretrained(model_path, trust_remote_code=False)
    cls = AutoModelForImageTextToText if hasattr(config, "vision_config") else AutoModelForCausalLM
    with torch.device("meta"):
        model = cls.from_config(config)
    lora = LoraConfig(**{k: v for k, v in json.loads(adapter_config).items() if k in LoraConfig.__dataclass_fields__})
    lora.inference_mode = True
    return frozenset(get_peft_model_state_dict(get_peft_model(model, lora)).keys())


def expected_adapter_keys(model_path: str | Path, adapter_dir: str | Path) -> frozenset[str]:
    """The tensor names a PEFT adapter with ``adapter_dir``'s config holds for the model at ``model_path``."""
    path = Path(adapter_dir) / "adapter_config.json"
    try:
        saved = json.loads(path.read_text())
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise ValueError(f"{path} is unreadable ({type(exc).__name__}): not a PEFT adapter config") from None
    if not isinstance(saved, dict):
        raise ValueError(f"{path} holds a {type(saved).__name__}, not a PEFT adapter config")
    saved.pop("base_model_name_or_path", None)
    return _expected_keys(str(model_path), json.dumps(saved, sort_keys=True))


def adapter_tensor_names(adapter_dir: str | Path) -> set[str]:
    """The tensor names stored in ``adapter_dir/adapter_model.safetensors`` (header only, no data read)."""
    from safetensors import SafetensorError, safe_open

    path = Path(adapter_dir) / "adapter_model.safetensors"
    try:
        with safe_open(str(path), framework="pt") as fh:
            return set(fh.keys())
    except SafetensorError as exc:  # a torn or crafted header
        raise ValueError(f"{path} is not a readable safetensors file ({exc}); the adapter is corrupt") from None


def check_adapter(model_path: str | Path, adapter_dir: str | Path) -> None:
    """Raise ``ValueError`` naming LoRA tensors missing from or unexpected in ``adapter_dir`` for this model."""
    adapter_dir = Path(adapter_dir)
    if not (adapter_dir / "adapter_config.json").is_file():
        raise FileNotFoundError(f"no PEFT adapter at {adapter_dir} (adapter_config.json missing)")
    check_adapter_keys(expected_adapter_keys(model_path, adapter_dir), adapter_tensor_names(adapter_dir), adapter_dir)
