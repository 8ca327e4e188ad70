"""One registry of the kinds of model a run trains: ``model.kind`` names a spec, a model directory finds its own.

A :class:`ModelSpec` brings everything the runners need to know about one kind of model: its settings (a dataclass
extending :class:`ModelConfig`: the ``model`` section of a run that chose the kind), how to build its tiny variant
from code (``model.path`` empty), which combinations with the rollout settings it refuses, the env settings it
implies, and optional hooks on a loaded model (vision pretraining and the localisation loss of SFT, recurrent vision
iterations scaled to a maze size, a truncated vision backward pass, modules an engine runs beside vLLM). The runners
call the hooks; no other module under ``runners/`` names a concrete model (the layering test checks it). Loading goes
through :func:`algos.models.load_model` for every kind (the Auto class follows the saved config).

Built-in specs are imported lazily, so that ``import runners.models`` (and the config that names them) stays
torch-free. Adding a model takes one file that calls :func:`register`::

    register(ModelSpec(name="my-lm", description="...", build=build_my_lm, model_types=("my_lm",)))

Settings carry their checks as field metadata (``{"range": (low, high, low_excluded)}``, ``{"choices": (...)}``,
``{"check": fn}`` returning a problem or None, or ``{"any": True}``), which the config validates, once per key.
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any, Callable

from runners.registry import Registry

BUILTIN_MODULES = ("runners.models.hf", "runners.models.maze_vlm")
"""Modules that register the built-in specs when imported."""
GENERIC_LM = "text"
"""The spec of a model directory that no spec claims by its model type and that has no vision tower."""
GENERIC_VLM = "vlm"
"""The spec of a model directory that no spec claims by its model type and that has a vision tower."""


DEVICES = re.compile(r"^(cpu|mps|cuda(:\d+)?)$")
"""What ``model.device`` may name."""


def _registered_kind(name: str) -> str | None:
    if name in available():
        return None
    return (
        f"is not a registered model kind; choose one of {', '.join(available())} "
        "(one of your own: load the file that registers it with --plugin FILE.py)"
    )


def _device(name: str) -> str | None:
    return None if DEVICES.match(name) else "is not a device; choose cpu, cuda, cuda:N or mps"


@dataclasses.dataclass
class ModelConfig:
    """The settings every model kind has; a kind's own settings extend this class (:attr:`ModelSpec.settings`)."""

    kind: str = dataclasses.field(default="text", metadata={"check": _registered_kind})
    """The registered model kind: "maze-vlm" (recurrent-conv vision encoder -> projector -> Qwen2 decoder, image
    observations), "text" (Qwen2 LM, ASCII observations), "vlm" (Qwen2-VL, image observations; a saved VLM such as
    Qwen3-VL) or one a plugin adds; its own settings follow it in this section (``--help-all`` lists every kind's).
    With `path` empty its tiny variant is built into <run_dir>/base_model; with `path`, the model there must be of this
    kind.
    """
    path: str = dataclasses.field(default="", metadata={"any": True})
    """Local directory of a Hugging Face model (config.json, weights, tokenizer). Empty: build the tiny model of
    `kind` into <run_dir>/base_model.
    """
    dtype: str = dataclasses.field(default="float32", metadata={"choices": ("float32", "bfloat16", "float16")})
    """Weights dtype for training and HF generation: float32, bfloat16 or float16."""
    device: str = dataclasses.field(default="cpu", metadata={"check": _device})
    """Torch device of the local runner ("cpu" or "cuda")."""
    gradient_checkpointing: bool = dataclasses.field(default=False, metadata={"any": True})
    """Recompute each decoder layer's activations in the backward pass instead of keeping them (the trainer's
    policy, set before FSDP shards it): far less activation memory for a slower update. Long multi-image histories
    on an 8B model need it; pair it with algo.micro_batch_tokens to bound each micro-batch's size.
    """


def _hidden_size(value: int) -> str | None:
    if 64 <= value <= 8192 and value % 64 == 0:
        return None
    return "must be a multiple of 64 (head_dim 64) between 64 and 8192"


@dataclasses.dataclass
class TinyModelConfig(ModelConfig):
    """The settings of a kind whose tiny variant is a decoder built from code (used when ``model.path`` is empty)."""

    tiny_layers: int = dataclasses.field(default=2, metadata={"range": (1, 64, False)})
    """Decoder layers of the tiny model."""
    tiny_hidden: int = dataclasses.field(default=128, metadata={"check": _hidden_size})
    """Hidden size of the tiny model (a multiple of 64: head_dim is 64)."""
    task_tokens: bool = dataclasses.field(default=True, metadata={"any": True})
    """Tiny models only: give the fixed prompt phrases (system prompt, per-turn phrases) one token each, so a turn is
    ~100 tokens instead of ~530 bytes.
    """


@dataclasses.dataclass
class VisionModelConfig(TinyModelConfig):
    """The settings of a kind that reads images through a vision encoder."""

    freeze_vision: bool = dataclasses.field(default=True, metadata={"any": True, "stage": "sft"})
    """Full-mode SFT keeps the vision encoder frozen (its merger still trains); much cheaper on CPU."""


@dataclasses.dataclass(frozen=True)
class BuildContext:
    """What a tiny builder reads besides its kind's settings: the run's seed and the frames it will be shown."""

    seed: int
    """Seed of the weights' init (``sft.seed``)."""
    maze_size: int
    """Side of the training mazes (``maze.size``)."""
    env_kwargs: dict[str, Any]
    """The env settings the frames are drawn with (``rollout.env_kwargs`` plus those the kind implies)."""


def _no_problems(settings: Any, rollout: Any) -> list[str]:
    return []


def _no_env_kwargs(settings: Any) -> dict[str, Any]:
    return {}


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    """One kind of model: its settings, its tiny builder, its checks and its hooks (``None``: the model has no such
    part).

    ``settings`` arguments are an instance of :attr:`settings` (the run's ``model`` section), ``rollout`` arguments a
    :class:`runners.rollout.collect.RolloutConfig`; ``model`` arguments a loaded transformers model, optionally
    inside a PEFT wrapper. The stages read a few settings a kind may declare: ``freeze_vision``,
    ``localization_weight`` and ``vision_pretraining`` (SFT), ``vision_grad_iterations`` and
    ``vision_update_iterations`` (RL), ``eval_vision_iterations`` and ``scale_eval_vision_iterations`` (evaluation).
    """

    name: str
    """The ``model.kind`` value that chooses this kind."""
    description: str
    """One line for listings and plans."""
    build: Callable[[Any, Path, BuildContext], None]
    """``build(settings, out, context)``: build the tiny model of these settings into the empty directory ``out``."""
    settings: type = TinyModelConfig
    """Its settings: a dataclass extending :class:`ModelConfig` (the ``model`` section when ``model.kind`` names
    it), each field with a docstring and its check as metadata."""
    model_types: tuple[str, ...] = ()
    """transformers ``model_type`` values of saved models that are this kind (beyond the generic LM and VLM)."""
    validate: Callable[[Any, Any], list[str]] = _no_problems
    """``validate(settings, rollout)``: what is wrong with these settings beside the rollout settings (empty when
    nothing is): the rules across keys that the kind owns."""
    env_kwargs: Callable[[Any], dict[str, Any]] = _no_env_kwargs
    """``env_kwargs(settings)``: env settings the tiny model implies (defaults under ``rollout.env_kwargs``)."""
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
    """Register ``spec`` under its name; registering another spec under a taken name, or one whose settings do not
    extend :class:`ModelConfig`, is an error."""
    if not (isinstance(spec.settings, type) and issubclass(spec.settings, ModelConfig)):
        raise ValueError(f"model kind {spec.name!r}: its settings must be a dataclass extending ModelConfig")
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


def settings_for(kind: str, **values: Any) -> ModelConfig:
    """Fresh settings of model kind ``kind`` (its spec's settings class), ``values`` set."""
    return get(kind).settings(kind=kind, **values)


def spec_of(model: Any) -> ModelSpec | None:
    """The spec of a loaded model (a PEFT wrapper passes its base model's config through); ``None`` for anything
    without a transformers config (e.g. a vLLM engine)."""
    config = getattr(model, "config", None)
    to_dict = getattr(config, "to_dict", None)
    return spec_for_hf_config(to_dict()) if callable(to_dict) else None


def decoder_shape(model: Any) -> dict[str, int]:
    """The tiny decoder's transformers fields from a kind's settings (``tiny_layers``, ``tiny_hidden``; head_dim
    64)."""
    return dict(
        num_hidden_layers=model.tiny_layers,
        hidden_size=model.tiny_hidden,
        intermediate_size=2 * model.tiny_hidden,
        num_attention_heads=model.tiny_hidden // 64,
        num_key_value_heads=model.tiny_hidden // 64,
    )
