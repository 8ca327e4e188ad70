"""Test support: the smallest MazeVLM the tests build, one place for its shape."""

from runners.models.tiny import build_maze_vlm

TINY_DECODER = dict(
    hidden_size=64, intermediate_size=128, num_hidden_layers=1, num_attention_heads=1, num_key_value_heads=1
)
"""A one-layer Qwen2 decoder 64 wide: the decoder of every tiny MazeVLM in the tests."""


def tiny_maze_vlm(out_dir, **vision):
    """Build (or reuse) a tiny MazeVLM at ``out_dir``: an 8-channel encoder run 4 iterations (``vision`` overrides
    its fields) on :data:`TINY_DECODER`. Returns the model path."""
    return build_maze_vlm(out_dir, vision={"width": 8, "iterations": 4, **vision}, **TINY_DECODER)
