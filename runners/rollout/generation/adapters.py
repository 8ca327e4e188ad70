"""Which LoRA tensors an adapter must hold for a given model, checked before a generator loads it.

The expected names come from building the model on the ``meta`` device (no weights, no memory)
and wrapping it with the adapter's own ``adapter_config.json``: exactly what PEFT would save for
that model. Both generation engines call :func:`check_adapter` before loading, so a partial
adapter (missing tensors) or one made for another model (unexpected tensors) is refused with
the names, instead of serving base or stale weights for the missing layers. An adapter's own config
can be edited to match tensors removed from it, so ``mazegym eval`` checks a run's own adapters
against the LoRA settings the run trains with (``check_adapter(..., lora=config.lora)``).
"""

from __future__ import annotations

import dataclasses
import json
import re
from functools import lru_cache
from pathlib import Path

from algos.lora import LoRAConfig
from algos.models import load_config, model_class
from algos.policies.lm import VISION_MODULE_PATTERN, check_adapter_keys

MODULE_NAME = re.compile(r"[A-Za-z0-9_.\-]{1,200}")
"""A module name (or name suffix) as PEFT matches it literally."""
PATTERN_KEYS = {"target_modules": ("all-linear",), "exclude_modules": (VISION_MODULE_PATTERN,), "modules_to_save": ()}
"""Fields of an adapter config that PEFT runs as regular expressions when they are strings, and the strings mazegym
itself writes there."""


@lru_cache(maxsize=8)
def _expected_keys(model_path: str, adapter_config: str) -> frozenset[str]:
    import torch
    from peft import LoraConfig, get_peft_model, get_peft_model_state_dict

    config = load_config(model_path)
    with torch.device("meta"):
        model = model_class(config).from_config(config)
    lora = LoraConfig(**{k: v for k, v in json.loads(adapter_config).items() if k in LoraConfig.__dataclass_fields__})
    lora.inference_mode = True
    return frozenset(get_peft_model_state_dict(get_peft_model(model, lora)).keys())


def _adapter_config(adapter_dir: str | Path) -> dict:
    """``adapter_dir/adapter_config.json`` as a dict; ``ValueError`` naming it when it is not one."""
    path = Path(adapter_dir) / "adapter_config.json"
    try:
        saved = json.loads(path.read_text())
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise ValueError(f"{path} is unreadable ({type(exc).__name__}): not a PEFT adapter config") from None
    if not isinstance(saved, dict):
        raise ValueError(f"{path} holds a {type(saved).__name__}, not a PEFT adapter config")
    check_module_patterns(saved, path)
    return saved


def check_module_patterns(saved: dict, path: Path) -> None:
    """``ValueError`` when a module field of an adapter config is a pattern mazegym never writes: PEFT matches a string
    there as a regular expression against every module name, and a hostile one can run for hours."""
    for key, own in PATTERN_KEYS.items():
        value = saved.get(key)
        if value is None or (isinstance(value, str) and value in own):
            continue
        names = value if isinstance(value, list) else [value]
        if isinstance(value, str) or not all(isinstance(n, str) and MODULE_NAME.fullmatch(n) for n in names):
            raise ValueError(
                f"{path}: {key}={str(value)[:80]!r} is not a list of module names; mazegym adapters name their "
                "modules, and a pattern here would be run against every module of the model"
            )


def expected_adapter_keys(model_path: str | Path, adapter_dir: str | Path) -> frozenset[str]:
    """The tensor names a PEFT adapter with ``adapter_dir``'s config holds for the model at ``model_path``."""
    saved = _adapter_config(adapter_dir)
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


@lru_cache(maxsize=8)
def _trained_keys(model_path: str, lora_settings: str) -> frozenset[str]:
    import torch
    from peft import get_peft_model_state_dict

    from algos.policies.lm import add_lora

    config = load_config(model_path)
    with torch.device("meta"):
        model = add_lora(model_class(config).from_config(config), LoRAConfig(**json.loads(lora_settings)))
    return frozenset(get_peft_model_state_dict(model).keys())


def trained_adapter_keys(model_path: str | Path, lora: LoRAConfig) -> frozenset[str]:
    """The tensor names the trainer's policy saves for the model at ``model_path`` with the LoRA settings ``lora``."""
    return _trained_keys(str(model_path), json.dumps(dataclasses.asdict(lora), sort_keys=True))


def check_adapter(model_path: str | Path, adapter_dir: str | Path, lora: LoRAConfig | None = None) -> None:
    """Raise ``ValueError`` naming LoRA tensors missing from or unexpected in ``adapter_dir`` for this model.

    Without ``lora`` the expected tensors follow the adapter's own ``adapter_config.json``. With ``lora`` (the
    settings a run trains with, for an adapter of that run) they follow the run's settings, and the adapter's rank
    and alpha must be the run's: an adapter whose config was edited to match tensors removed from it is refused.
    """
    adapter_dir = Path(adapter_dir)
    if not (adapter_dir / "adapter_config.json").is_file():
        raise FileNotFoundError(f"no PEFT adapter at {adapter_dir} (adapter_config.json missing)")
    if lora is None:
        expected = expected_adapter_keys(model_path, adapter_dir)
    else:
        saved = _adapter_config(adapter_dir)
        if saved.get("r") != lora.rank or saved.get("lora_alpha") != lora.alpha:
            raise ValueError(
                f"adapter at {adapter_dir} has rank {saved.get('r')!r} and alpha {saved.get('lora_alpha')!r}, but the "
                f"run trains rank {lora.rank} and alpha {lora.alpha}: it is not an adapter this run wrote"
            )
        expected = trained_adapter_keys(model_path, lora)
    check_adapter_keys(expected, adapter_tensor_names(adapter_dir), adapter_dir)
