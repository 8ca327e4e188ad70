"""One registry of the kinds of model a run trains: ``model.tiny`` names a spec, a model directory finds its own.

A :class:`ModelSpec` brings everything the runners need to know about one kind of model: how to build its tiny
variant from code (``model.path`` empty), which settings it refuses, the env settings it implies, and optional
hooks on a loaded model (vision pretraining and the localisation loss of SFT, recurrent vision iterations scaled
to a maze size, a truncated vision backward pass, modules an engine runs beside vLLM). The runners call the hooks;
no other module under ``runners/`` names a concrete model (the layering test checks it). Loading goes through
:func:`algos.models.load_model` for every kind (the Auto class follows the saved config).

Built-in specs are imported lazily, so that ``import runners.models`` (and the config that names them) stays
torch-free. Adding a model takes one file that calls :func:`register`::

    register(ModelSpec(name="my-lm", description="...", build=build_my_lm, model_types=("my_lm",)))
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, Callable

from runners.registry import Registry

BUILTIN_MODULES = ("runners.models.hf", "runners.models.maze_vlm")
"""Modules that register the built-in specs when imported."""
GENERIC_LM = "text"
"""The spec of a model directory that no spec claims by its model type and that has no vision tower."""
GENERIC_VLM = "vlm"
"""The spec of a model directory that no spec claims by its model type and that has a vision tower."""


def _no_problems(config: Any) -> list[str]:
    return []


def _no_env_kwargs(config: Any) -> dict[str, Any]:
    return {}


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    """One kind of model: its tiny builder, its settings checks and its hooks (``None``: the model has no such part).

    ``config`` arguments are a :class:`runners.config.TrainConfig`; ``model`` arguments a loaded transformers model,
    optionally inside a PEFT wrapper.
    """

    name: str
    """The ``model.tiny`` value that builds this kind."""
    description: str
    """One line for listings and plans."""
    build: Callable[[Any, Path], None]
    """``build(config, out)``: build the tiny model of ``config.model`` into the empty directory ``out``."""
    model_types: tuple[str, ...] = ()
    """transformers ``model_type`` values of saved models that are this kind (beyond the generic LM and VLM)."""
    validate: Callable[[Any], list[str]] = _no_problems
    """``validate(config)``: what is wrong with ``config`` for the tiny model (empty when nothing is)."""
    env_kwargs: Callable[[Any], dict[str, Any]] = _no_env_kwargs
    """``env_kwargs(config)``: env settings the tiny model implies (defaults under ``rollout.env_kwargs``)."""
    beside_engine: tuple[str, ...] = ()
    """Modules vLLM cannot run: the generator runs them in its own process and sends vLLM prompt embeddings, and an
    adapter may train these (or some of them) in full (``lora.modules_to_save``)."""
    localization_inputs: Callable[[dict[str, Any], list[Any]], dict[str, Any]] | None = None
    """``localization_inputs(processed, turns)``: extra forward inputs that make the model add its agent-localisation
    loss (``processed``: the image processor's tensors for the turns' images, one image per turn)."""
    vision_parameters: Callable[[Any], list[Any]] | None = None
    """``vision_parameters(model)``: the trainable parameters vision pretraining updates."""
    vision_pretraining_loss: Callable[..., tuple[Any, float]] | None = None
    """``vision_pretraining_loss(model, processed, turns, path_weight=0.0)``: (loss, move accuracy) of the vision
    encoder's own objective on one-image turns that record the agent's cell and the move (``path_weight > 0``: plus
    a per-cell loss against the turns' ``path_cells``; a kind without one raises)."""
    vision_iterations: Callable[[Any], int | None] | None = None
    """``vision_iterations(model)``: how many iterations the recurrent vision encoder runs now."""
    run_vision_iterations: Callable[[Any, int], Any] | None = None
    """``run_vision_iterations(model, n)``: a context manager within which the vision encoder runs ``n`` iterations."""
    truncate_vision_backward: Callable[[Any, int], None] | None = None
    """``truncate_vision_backward(model, n)``: backpropagate through only the last ``n`` vision iterations."""
    vary_vision_iterations: Callable[[Any, int, int], None] | None = None
    """``vary_vision_iterations(model, low, high)``: passes with gradients run a vision iteration count drawn from
    ``[low, high]``."""

    @property
    def prompt_embeds(self) -> bool:
        """Whether vLLM serves this kind through prompt embeddings (it runs :attr:`beside_engine` elsewhere)."""
        return bool(self.beside_engine)


_REGISTRY: Registry[ModelSpec] = Registry("model kind", BUILTIN_MODULES)


def register(spec: ModelSpec) -> ModelSpec:
    """Register ``spec`` under its name; registering another spec under a taken name is an error."""
    return _REGISTRY.add(spec.name, spec)


def available() -> list[str]:
    """Names of the registered model kinds, sorted."""
    return _REGISTRY.names()


def get(name: str) -> ModelSpec:
    """The spec registered as ``name`` (``KeyError`` listing the names otherwise)."""
    return _REGISTRY.get(name)


def having(hook: str) -> list[str]:
    """Names of the registered model kinds whose spec has ``hook`` (e.g. ``"vision_pretraining_loss"``), sorted."""
    return [name for name in available() if getattr(get(name), hook) is not None]


def spec_for_hf_config(config: dict[str, Any]) -> ModelSpec:
    """The spec of a saved model with transformers config ``config`` (a dict): the one claiming its ``model_type``,
    else the generic VLM or LM."""
    for spec in _REGISTRY:
        if config.get("model_type") in spec.model_types:
            return spec
    return get(GENERIC_VLM if "vision_config" in config else GENERIC_LM)


def spec_for_dir(path: str | Path) -> ModelSpec:
    """The spec of the model saved at ``path`` (read from its ``config.json``; the generic LM when there is none)."""
    file = Path(path) / "config.json"
    config = json.loads(file.read_text()) if file.is_file() else {}
    return spec_for_hf_config(config if isinstance(config, dict) else {})


def spec_for(config: Any) -> ModelSpec:
    """The spec of the model run config ``config`` trains: ``model.tiny``'s, or ``model.path``'s own."""
    if config.model.path:
        return spec_for_dir(Path(config.model.path).expanduser())
    return get(config.model.tiny)


def spec_of(model: Any) -> ModelSpec | None:
    """The spec of a loaded model (a PEFT wrapper passes its base model's config through); ``None`` for anything
    without a transformers config (e.g. a vLLM engine)."""
    config = getattr(model, "config", None)
    to_dict = getattr(config, "to_dict", None)
    return spec_for_hf_config(to_dict()) if callable(to_dict) else None


def decoder_shape(model: Any) -> dict[str, int]:
    """The tiny decoder's transformers fields from ``config.model`` (head_dim 64)."""
    return dict(
        num_hidden_layers=model.tiny_layers,
        hidden_size=model.tiny_hidden,
        intermediate_size=2 * model.tiny_hidden,
        num_attention_heads=model.tiny_hidden // 64,
        num_key_value_heads=model.tiny_hidden // 64,
    )
