"""Model definitions that ship with mazegym, registered with the transformers Auto classes on import.

Also the one way mazegym loads a model directory (:func:`load_config`, :func:`model_class`, :func:`load_model`),
which passes the one check every model directory passes first (:func:`refuse_remote_code`): mazegym never runs
Python code that ships inside a model directory. Importing this module registers the models, so whoever loads
through it can load MazeVLM by path like any checkpoint.
"""

import json
from pathlib import Path
from typing import Any

from algos.models.maze_vlm import register

REMOTE_CODE_FILES = ("config.json", "tokenizer_config.json", "preprocessor_config.json", "processor_config.json")
"""The files of a model directory in which transformers looks for ``auto_map`` (code to import from the directory)."""


def refuse_remote_code(path: str | Path) -> None:
    """Raise ``ValueError`` when the model directory at ``path`` asks to run its own code (an ``auto_map`` entry).

    transformers would otherwise import the Python files it names (after asking on stdin, which a
    pipe can answer). Every ``from_pretrained`` in mazegym also passes ``trust_remote_code=False``;
    this check comes first so the refusal names the file and says what to do.
    """
    root = Path(path)
    for name in REMOTE_CODE_FILES:
        file = root / name
        if not file.is_file():
            continue
        try:
            data = json.loads(file.read_text())
        except (OSError, ValueError, RecursionError):
            continue  # a broken file is the loader's to report
        if isinstance(data, dict) and "auto_map" in data:
            raise ValueError(
                f"{file} has an auto_map entry: the model directory asks to run its own Python code "
                f"({', '.join(sorted(map(str, data['auto_map'])))[:200]}), and mazegym never runs code from a model "
                "directory; use a model whose architecture transformers ships (or mazegym registers), or remove "
                "auto_map after reading the code it names"
            )


def load_config(path: str | Path):
    """The transformers config of the model directory at ``path``, after :func:`refuse_remote_code`."""
    from transformers import AutoConfig

    refuse_remote_code(path)
    return AutoConfig.from_pretrained(str(path), trust_remote_code=False)


def model_class(config) -> type:
    """The Auto class for a model with transformers config ``config``: image-text-to-text when it has a vision tower
    (``vision_config``), causal LM otherwise."""
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText

    return AutoModelForImageTextToText if hasattr(config, "vision_config") else AutoModelForCausalLM


def load_model(path: str | Path, **kwargs: Any):
    """The model saved at ``path``, loaded by its Auto class (:func:`model_class`); ``kwargs`` go to
    ``from_pretrained`` (e.g. ``dtype``)."""
    return model_class(load_config(path)).from_pretrained(str(path), trust_remote_code=False, **kwargs)


register()
