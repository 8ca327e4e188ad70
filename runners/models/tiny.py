"""Tiny local models for tests and CPU runs: a Qwen2 text LM, Qwen2-VL and Qwen3-VL vision-language models, MazeVLM.

Nothing is downloaded. Both models are randomly initialised from configs written here and saved
in the standard Hugging Face layout (``config.json``, ``model.safetensors``, ``tokenizer.json``,
``tokenizer_config.json`` with a chat template, ``generation_config.json``; the VLM also has
``preprocessor_config.json``), so transformers, PEFT and vLLM load them by path exactly like a
real checkpoint. Downstream code never special-cases them.

The tokenizer is byte-level with no merges (every UTF-8 string encodes, one token per byte),
plus ChatML special tokens and a few dedicated tokens for the action vocabulary
(``<action>``, ``</action>``, ``up``, ``down``, ``left``, ``right``, ``stop``) so that a tiny
model only has to learn a handful of tokens to emit a well-formed action.

Shapes follow what vLLM's CPU backend accepts: attention head_dim 64 (16 fails there).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Any

from runners import atomic

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' }}"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'image' or 'image' in part or 'image_url' in part %}"
    "{{ '<|vision_start|><|image_pad|><|vision_end|>' }}"
    "{% elif part['type'] == 'text' %}{{ part['text'] }}"
    "{% endif %}{% endfor %}{% endif %}"
    "{{ '<|im_end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
"""ChatML template (Qwen style). Image parts render as one ``<|image_pad|>`` placeholder that the
prompt encoder expands to the number of vision tokens the image needs."""

SPECIAL_TOKENS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|image_pad|>",
    "<|video_pad|>",
]
ACTION_TOKENS = ["<action>", "</action>", "up", "down", "left", "right", "stop"]
"""Non-special added tokens: they decode as plain text, so parsing sees ordinary strings."""

TOKENIZER_VERSION = 1
"""Bump when the tokenizer layout changes, so cached tiny models are rebuilt."""

MARKER_FILE = "tiny_model.json"


def _byte_vocab() -> dict[str, int]:
    """The GPT-2 byte-to-unicode alphabet as a vocabulary (ids 0..255)."""
    from tokenizers import pre_tokenizers

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    # Sort by the byte each character stands for, so ids are stable across runs.
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
    printable += list(range(ord("®"), ord("ÿ") + 1))
    byte_to_char, extra = {}, 0
    for b in range(256):
        if b in printable:
            byte_to_char[b] = chr(b)
        else:
            byte_to_char[b] = chr(256 + extra)
            extra += 1
    assert set(byte_to_char.values()) == set(alphabet)
    return {byte_to_char[b]: b for b in range(256)}


def build_tokenizer():
    """Build the byte-level tokenizer with chat special tokens and action tokens.

    Returns a ``transformers.PreTrainedTokenizerFast`` with the ChatML chat template set.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(vocab=_byte_vocab(), merges=[], ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(SPECIAL_TOKENS)
    tok.add_tokens(ACTION_TOKENS)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token=None,
        bos_token=None,
        chat_template=CHAT_TEMPLATE,
        clean_up_tokenization_spaces=False,
        model_max_length=8192,
    )
    fast.padding_side = "left"
    return fast


def _text_config_dict(vocab_size: int, token_ids: dict[str, int], **overrides: Any) -> dict:
    """Qwen2 decoder hyper-parameters for the tiny text LM (head_dim = hidden / heads = 64)."""
    cfg = dict(
        vocab_size=vocab_size,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=8192,
        rms_norm_eps=1e-6,
        tie_word_embeddings=True,
        bos_token_id=token_ids["<|endoftext|>"],
        eos_token_id=token_ids["<|im_end|>"],
        pad_token_id=token_ids["<|endoftext|>"],
        rope_theta=10000.0,
        initializer_range=0.02,
    )
    cfg.update(overrides)
    if cfg["hidden_size"] // cfg["num_attention_heads"] != 64:
        raise ValueError(
            "tiny text LM: hidden_size / num_attention_heads must be 64 "
            "(vLLM's CPU attention rejects smaller head dims); "
            f"got {cfg['hidden_size']} / {cfg['num_attention_heads']}"
        )
    return cfg


def _config_hash(kind: str, config: dict, seed: int) -> str:
    blob = json.dumps({"kind": kind, "config": config, "seed": seed, "tok": TOKENIZER_VERSION}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _is_built(out_dir: Path, digest: str) -> bool:
    marker = out_dir / MARKER_FILE
    if not marker.is_file():
        return False
    try:
        return json.loads(marker.read_text()).get("hash") == digest
    except (OSError, json.JSONDecodeError):
        return False


def _save_atomically(out_dir: Path, write_fn, kind: str, digest: str) -> Path:
    """Write into a temp dir next to ``out_dir`` then swap it into place (safe with concurrent builders)."""
    tmp = atomic.temp_dir_beside(out_dir)
    try:
        write_fn(tmp)
        atomic.write_json(tmp / MARKER_FILE, {"kind": kind, "hash": digest})
        if not _is_built(out_dir, digest):  # else another process won the race
            atomic.replace_dir(tmp, out_dir)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return out_dir


def build_tiny_text_lm(out_dir: str | os.PathLike, seed: int = 0, **overrides: Any) -> Path:
    """Build (or reuse) a tiny random Qwen2ForCausalLM with the local tokenizer at ``out_dir``.

    ``overrides`` replace Qwen2Config fields (e.g. ``num_hidden_layers=4``). An existing
    directory whose recorded config hash matches is reused as is. Returns the model path.
    """
    out_dir = Path(out_dir)
    tokenizer = build_tokenizer()
    token_ids = {t: tokenizer.convert_tokens_to_ids(t) for t in SPECIAL_TOKENS}
    config = _text_config_dict(len(tokenizer), token_ids, **overrides)
    digest = _config_hash("text", config, seed)
    if _is_built(out_dir, digest):
        return out_dir

    def write(tmp: Path) -> None:
        from transformers import Qwen2Config, Qwen2ForCausalLM

        _write_model(tmp, lambda: Qwen2ForCausalLM(Qwen2Config(**config)), seed, tokenizer, token_ids)

    return _save_atomically(out_dir, write, "text", digest)


def _write_model(tmp: Path, make_model, seed: int, tokenizer, token_ids: dict[str, int]) -> None:
    """Seed, build ``make_model()`` in float32 and save it with the tokenizer and generation config into ``tmp``."""
    import torch

    torch.manual_seed(seed)
    make_model().float().save_pretrained(tmp, safe_serialization=True)
    tokenizer.save_pretrained(tmp)
    _generation_config(token_ids).save_pretrained(tmp)


def _generation_config(token_ids: dict[str, int]):
    from transformers import GenerationConfig

    return GenerationConfig(
        eos_token_id=[token_ids["<|im_end|>"], token_ids["<|endoftext|>"]],
        pad_token_id=token_ids["<|endoftext|>"],
        bos_token_id=token_ids["<|endoftext|>"],
    )


IMAGE_MIN_PIXELS = 28 * 28 * 4
IMAGE_MAX_PIXELS = 112 * 112
"""The tiny VLM sees at most 112x112 pixels: 8x8 patches of 14 px, merged 2x2 into 16 vision tokens."""


def build_tiny_vlm(out_dir: str | os.PathLike, seed: int = 0, **overrides: Any) -> Path:
    """Build (or reuse) a tiny random Qwen2VLForConditionalGeneration at ``out_dir``.

    Saves the tokenizer (with the image placeholder tokens) and the Qwen2-VL image-processor
    config, capped at ``IMAGE_MAX_PIXELS`` so a maze frame becomes 16 vision tokens.
    ``overrides`` replace text-config fields. Returns the model path.
    """
    out_dir = Path(out_dir)
    tokenizer = build_tokenizer()
    token_ids = {t: tokenizer.convert_tokens_to_ids(t) for t in SPECIAL_TOKENS}
    text = _text_config_dict(len(tokenizer), token_ids, **overrides)
    text["rope_parameters"] = {
        "rope_type": "default",
        "rope_theta": text.pop("rope_theta"),
        "mrope_section": [8, 12, 12],
    }
    vision = dict(
        depth=1,
        embed_dim=64,
        hidden_size=text["hidden_size"],
        mlp_ratio=2,
        num_heads=2,
        patch_size=14,
        spatial_merge_size=2,
        temporal_patch_size=2,
    )
    config = dict(
        text_config=text,
        vision_config=vision,
        image_token_id=token_ids["<|image_pad|>"],
        video_token_id=token_ids["<|video_pad|>"],
        vision_start_token_id=token_ids["<|vision_start|>"],
        vision_end_token_id=token_ids["<|vision_end|>"],
        tie_word_embeddings=True,
        bos_token_id=text["bos_token_id"],
        eos_token_id=text["eos_token_id"],
        pad_token_id=text["pad_token_id"],
        vocab_size=text["vocab_size"],
    )
    digest = _config_hash("vlm", config, seed)
    if _is_built(out_dir, digest):
        return out_dir

    def write(tmp: Path) -> None:
        from transformers import Qwen2VLConfig, Qwen2VLForConditionalGeneration

        _write_model(tmp, lambda: Qwen2VLForConditionalGeneration(Qwen2VLConfig(**config)), seed, tokenizer, token_ids)
        _write_qwen_image_processor(tmp, IMAGE_MIN_PIXELS, IMAGE_MAX_PIXELS)

    return _save_atomically(out_dir, write, "vlm", digest)


def _write_qwen_image_processor(out_dir: Path, min_pixels: int, max_pixels: int, **kwargs: Any) -> None:
    """Save a Qwen2-VL image processor (``kwargs``: patch/merge sizes, normalisation) in the layout every engine
    reads.
    """
    try:  # transformers >= 5: the PIL backend works without torchvision
        from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil as Processor
    except ImportError:
        from transformers import Qwen2VLImageProcessor as Processor

    Processor(min_pixels=min_pixels, max_pixels=max_pixels, **kwargs).save_pretrained(out_dir)
    # Write the class name every engine knows (the PIL variant is picked at load time
    # when torchvision is missing), and the legacy min/max pixel keys vLLM reads.
    path = out_dir / "preprocessor_config.json"
    cfg = json.loads(path.read_text())
    cfg.update(image_processor_type="Qwen2VLImageProcessor", min_pixels=min_pixels, max_pixels=max_pixels)
    path.write_text(json.dumps(cfg, indent=2))


QWEN3_VL_IMAGE_MAX_PIXELS = 224 * 224
"""The tiny Qwen3-VL sees at most 224x224 pixels: 14x14 patches of 16 px, merged 2x2 into 49 vision tokens."""


def build_tiny_qwen3_vl(out_dir: str | os.PathLike, seed: int = 0, **overrides: Any) -> Path:
    """Build (or reuse) a tiny random Qwen3VLForConditionalGeneration at ``out_dir``: Qwen3-VL-8B's shape in miniature.

    Same layout as the 8B checkpoint (grouped-query attention with one KV head per two query
    heads, interleaved M-RoPE, a vision tower of 16 px patches merged 2x2 with DeepStack
    features fed into the first decoder layers, an untied output head), but a few layers of
    width 128, with the local tokenizer and a Qwen2-VL-style image processor (16 px patches) capped at
    :data:`QWEN3_VL_IMAGE_MAX_PIXELS`. Nothing is downloaded; ``overrides`` replace text-config
    fields. Returns the model path.
    """
    out_dir = Path(out_dir)
    tokenizer = build_tokenizer()
    token_ids = {t: tokenizer.convert_tokens_to_ids(t) for t in SPECIAL_TOKENS}
    text = _text_config_dict(len(tokenizer), token_ids, **{"tie_word_embeddings": False, **overrides})
    heads = text["num_attention_heads"]
    text.update(
        head_dim=64,
        num_key_value_heads=max(1, heads // 2),
        max_position_embeddings=32768,
        rope_parameters={
            "rope_type": "default",
            "rope_theta": text.pop("rope_theta"),
            "mrope_section": [8, 12, 12],
            "mrope_interleaved": True,
        },
    )
    vision = dict(
        depth=2,
        hidden_size=64,
        intermediate_size=128,
        num_heads=2,
        patch_size=16,
        spatial_merge_size=2,
        temporal_patch_size=2,
        out_hidden_size=text["hidden_size"],
        num_position_embeddings=256,
        deepstack_visual_indexes=[0, 1],
    )
    config = dict(
        text_config=text,
        vision_config=vision,
        image_token_id=token_ids["<|image_pad|>"],
        video_token_id=token_ids["<|video_pad|>"],
        vision_start_token_id=token_ids["<|vision_start|>"],
        vision_end_token_id=token_ids["<|vision_end|>"],
        tie_word_embeddings=False,
    )
    digest = _config_hash("qwen3_vl", config, seed)
    if _is_built(out_dir, digest):
        return out_dir

    def write(tmp: Path) -> None:
        from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration

        _write_model(tmp, lambda: Qwen3VLForConditionalGeneration(Qwen3VLConfig(**config)), seed, tokenizer, token_ids)
        _write_qwen_image_processor(
            tmp,
            32 * 32 * 4,
            QWEN3_VL_IMAGE_MAX_PIXELS,
            patch_size=16,
            merge_size=2,
            temporal_patch_size=2,
            image_mean=[0.5, 0.5, 0.5],
            image_std=[0.5, 0.5, 0.5],
        )

    return _save_atomically(out_dir, write, "qwen3_vl", digest)


def build_maze_vlm(
    out_dir: str | os.PathLike, seed: int = 0, cell_px: int = 25, vision: dict | None = None, **overrides: Any
) -> Path:
    """Build (or reuse) a random MazeVLM (recurrent-conv vision encoder -> projector -> Qwen2 decoder) at ``out_dir``.

    ``vision`` overrides the encoder shape (``patch_px``, ``width``, ``iterations``); ``cell_px``
    is the env's pixels per maze cell (one cell = one vision token); ``overrides`` replace
    decoder fields. Saved with its tokenizer and image processor. Returns the model path.
    """
    from algos.models.maze_vlm import DEFAULT_VISION_CONFIG

    out_dir = Path(out_dir)
    tokenizer = build_tokenizer()
    token_ids = {t: tokenizer.convert_tokens_to_ids(t) for t in SPECIAL_TOKENS}
    # Untied output head and a larger init: measured to break the early plateau of reading the
    # vision tokens (reply NLL 0.4-0.5 after 140 steps instead of still at chance).
    text = _text_config_dict(
        len(tokenizer), token_ids, **{"tie_word_embeddings": False, "initializer_range": 0.1, **overrides}
    )
    config = dict(
        text,
        vision_config={**DEFAULT_VISION_CONFIG, **(vision or {})},
        image_token_id=token_ids["<|image_pad|>"],
        vision_start_token_id=token_ids["<|vision_start|>"],
        vision_end_token_id=token_ids["<|vision_end|>"],
    )
    digest = _config_hash("maze_vlm", dict(config, cell_px=cell_px), seed)
    if _is_built(out_dir, digest):
        return out_dir

    def write(tmp: Path) -> None:
        from algos.models.maze_vlm import MazeVLMConfig, MazeVLMForConditionalGeneration, MazeVLMImageProcessor

        _write_model(tmp, lambda: MazeVLMForConditionalGeneration(MazeVLMConfig(**config)), seed, tokenizer, token_ids)
        vision_config = config["vision_config"]
        MazeVLMImageProcessor(
            cell_px=cell_px, patch_px=vision_config["patch_px"], tokens=vision_config["tokens"]
        ).save_pretrained(tmp)

    return _save_atomically(out_dir, write, "maze_vlm", digest)
