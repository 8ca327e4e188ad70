"""Configuration of a training run: the typed schema, its resolution from presets, files and overrides, validation.

``from runners.config import TrainConfig, build_config, apply_overrides, validate`` is the public surface;
:mod:`~runners.config.schema` holds the settings every run has, each chosen part owns its section
(:mod:`~runners.config.parts`), :mod:`~runners.config.resolve` turns the layers of a command line into one typed
config, :mod:`~runners.config.overrides` reads files and saved configs through it, :mod:`~runners.config.migrate`
reads configs saved in the earlier layout, :mod:`~runners.config.fields` and :mod:`~runners.config.validation`
check it, :mod:`~runners.config.presets` names ready-made ones and :mod:`~runners.config.help` lists the keys.
"""

from runners.config.overrides import (
    apply_config_file,
    apply_overrides,
    build_config,
    describe_fields,
    field_docs,
    from_dict,
    load_config_file,
    run_config,
    set_value,
    to_dict,
)
from runners.config.resolve import read_config_file
from runners.config.runner import LocalRunnerConfig, RayRunnerConfig, RunnerConfig
from runners.config.schema import (
    CONFIG_VERSION,
    AlgoConfig,
    CheckpointConfig,
    ConfigError,
    EvalConfig,
    LoggingConfig,
    LoopConfig,
    MazeConfig,
    SFTConfig,
    TrainConfig,
)
from runners.config.validation import validate
from runners.models import ModelConfig

__all__ = [
    "CONFIG_VERSION",
    "AlgoConfig",
    "CheckpointConfig",
    "ConfigError",
    "EvalConfig",
    "LocalRunnerConfig",
    "LoggingConfig",
    "LoopConfig",
    "MazeConfig",
    "ModelConfig",
    "RayRunnerConfig",
    "RunnerConfig",
    "SFTConfig",
    "TrainConfig",
    "apply_config_file",
    "apply_overrides",
    "build_config",
    "describe_fields",
    "field_docs",
    "from_dict",
    "load_config_file",
    "read_config_file",
    "run_config",
    "set_value",
    "to_dict",
    "validate",
]
