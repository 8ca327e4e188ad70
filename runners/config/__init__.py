"""Configuration of a training run: the typed schema, overrides and config files, validation, presets.

``from runners.config import TrainConfig, apply_overrides, validate`` is the public surface;
:mod:`~runners.config.schema` holds the dataclasses, :mod:`~runners.config.overrides` turns files
and ``key=value`` strings into them, :mod:`~runners.config.schemes` puts a run on a rollout scheme
its algorithm trains on, :mod:`~runners.config.validation` checks a whole config and
:mod:`~runners.config.presets` names ready-made ones.
"""

from runners.config.overrides import (
    apply_config_file,
    apply_mapping,
    apply_overrides,
    describe_fields,
    field_docs,
    from_dict,
    load_config_file,
    override_keys,
    read_config_file,
    set_value,
    to_dict,
)
from runners.config.schema import (
    AlgoConfig,
    CheckpointConfig,
    ConfigError,
    EvalConfig,
    LoggingConfig,
    LoopConfig,
    MazeConfig,
    ModelConfig,
    RaySettings,
    RunnerConfig,
    SFTConfig,
    TrainConfig,
)
from runners.config.schemes import resolve_scheme, scheme_of
from runners.config.validation import CHOICES, validate

__all__ = [
    "CHOICES",
    "AlgoConfig",
    "CheckpointConfig",
    "ConfigError",
    "EvalConfig",
    "LoggingConfig",
    "LoopConfig",
    "MazeConfig",
    "ModelConfig",
    "RaySettings",
    "RunnerConfig",
    "SFTConfig",
    "TrainConfig",
    "apply_config_file",
    "apply_mapping",
    "apply_overrides",
    "describe_fields",
    "field_docs",
    "from_dict",
    "load_config_file",
    "override_keys",
    "read_config_file",
    "resolve_scheme",
    "scheme_of",
    "set_value",
    "to_dict",
    "validate",
]
