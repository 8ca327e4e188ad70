"""Task tokens: the fixed phrases of the maze conversation added to a tiny model's tokenizer as single tokens.

A byte-level tokenizer spends ~430 tokens on the system prompt alone, which would dominate CPU compute; adding the
phrases leaves the text the model reads unchanged and only shortens its tokenisation. Any tiny model gets them when
``model.task_tokens`` is on (:func:`runners.build.prepare_base_model`). Importing this module loads no torch.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from mazegym.llm import system_prompt

TURN_PHRASES = [
    "Map:\n",
    "Environment feedback: ",
    "This is move ",
    ". You have ",
    " moves left.",
    "Moved right.",
    "Moved up.",
    "Moved left.",
    "Moved down.",
    "Cannot move into a wall.",
    "Reached the goal!",
    " No moves left.",
    "Invalid action (",
    "). Reply with one action (right, up, left, down) inside tags, e.g. <action>up</action>.",
]
"""Fixed phrases of every user turn (see :func:`mazegym.llm.user_message` and the env feedback)."""


def task_phrases(
    size: int, max_moves: int, obs_mode: str, require_stop: bool = False, size_free: bool = False
) -> list[str]:
    """Phrases the task tokenizer encodes as single tokens: the system prompt and the turn phrases.

    The text the model reads is unchanged; only its tokenisation gets shorter (a byte-level
    tokenizer spends ~430 tokens on the system prompt, which would dominate CPU compute).
    If the env's wording ever changes, unmatched text simply falls back to bytes.
    """
    return [system_prompt(size, max_moves, obs_mode, require_stop, size_free)] + TURN_PHRASES


def add_task_tokens(model_dir: str | Path, phrases: Sequence[str]) -> int:
    """Add ``phrases`` as tokens to the tokenizer and model saved at ``model_dir`` (in place).

    New embedding rows start at the mean of the existing ones. Returns the number of tokens added.
    """
    import torch
    from transformers import AutoTokenizer

    from algos.models import load_model

    model_dir = Path(model_dir)
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir), trust_remote_code=False)
    added = tokenizer.add_tokens([p for p in phrases if p not in tokenizer.get_vocab()])
    if added == 0:
        return 0
    model = load_model(model_dir, dtype=torch.float32)
    model.resize_token_embeddings(len(tokenizer), mean_resizing=False)
    with torch.no_grad():
        emb = model.get_input_embeddings().weight
        emb[-added:] = emb[:-added].mean(0, keepdim=True)
    model.save_pretrained(str(model_dir), safe_serialization=True)
    tokenizer.save_pretrained(str(model_dir))
    return added
