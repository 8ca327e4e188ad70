"""Model definitions that ship with mazegym, registered with the transformers Auto classes on import.

Also the one check every model directory passes before mazegym loads it
(:func:`refuse_remote_code`): mazegym never runs Python code that ships inside a model directory.
"""

import json
from pathlib import Path

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


register()
