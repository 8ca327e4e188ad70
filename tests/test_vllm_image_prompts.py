"""The token prompt sent to vLLM carries one image placeholder per image, for the Qwen-VL families.

vLLM's Qwen2-VL, Qwen2.5-VL and Qwen3-VL processors replace each ``<|image_pad|>`` of a token prompt by
``grid_thw.prod() // merge_size**2`` copies itself (``_get_prompt_updates``); the trainer scores the ids
:class:`ChatEncoder` already expanded. After vLLM's expansion the engine must see exactly the trainer's ids,
or the vision embeddings land on the wrong positions and ``prompt_logprobs`` shift. No engine runs here.
"""

from __future__ import annotations

import numpy as np
import pytest

from runners.models.tiny import build_tokenizer
from runners.rollout.generation.base import Prompt
from runners.rollout.generation.prompts import ChatEncoder, one_placeholder_per_image, pixel_inputs

QWEN_VL_IMAGE_PROCESSORS = {
    # The families' preprocessor_config.json values (patch, merge, temporal patch, pixel budget).
    "qwen2-vl": dict(patch_size=14, merge_size=2, temporal_patch_size=2, min_pixels=56 * 56, max_pixels=28 * 28 * 1280),
    "qwen2.5-vl": dict(patch_size=14, merge_size=2, temporal_patch_size=2, min_pixels=3136, max_pixels=12845056),
    "qwen3-vl": dict(patch_size=16, merge_size=2, temporal_patch_size=2, min_pixels=65536, max_pixels=16777216),
}


def image_processor(family: str):
    """The family's image processor, built from its config values (the PIL backend needs no torchvision)."""
    try:
        from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil as Processor
    except ImportError:
        from transformers import Qwen2VLImageProcessor as Processor
    return Processor(**QWEN_VL_IMAGE_PROCESSORS[family])


def maze_conversation() -> tuple[list[dict], list[np.ndarray]]:
    """A two-turn play with three frames of different sizes, as mazegym.llm builds it."""
    rng = np.random.default_rng(0)
    frames = [rng.integers(0, 256, size=shape, dtype=np.uint8) for shape in ((64, 64, 3), (96, 128, 3), (224, 224, 3))]

    def user(*images):
        parts = [{"type": "image", "image": im} for im in images]
        return {"role": "user", "content": parts + [{"type": "text", "text": "Move."}]}

    messages = [
        {"role": "system", "content": "Reach the goal."},
        user(frames[0]),
        {"role": "assistant", "content": "<action>up</action>"},
        user(frames[1], frames[2]),
    ]
    return messages, frames


def vllm_expansion(ids: list[int], images: list, image_token_id: int, processor) -> list[int]:
    """What vLLM's Qwen-VL processors make of a token prompt: each placeholder -> grid.prod() // merge**2 copies."""
    out, item = [], 0
    for token in ids:
        if token != image_token_id:
            out.append(token)
            continue
        grid = pixel_inputs(processor, [images[item]])["image_grid_thw"][0]
        out += [image_token_id] * (int(grid.prod()) // processor.merge_size**2)
        item += 1
    assert item == len(images), "every image needs its placeholder"
    return out


@pytest.mark.parametrize("family", sorted(QWEN_VL_IMAGE_PROCESSORS))
def test_engine_prompt_has_one_placeholder_per_image_and_vllm_expands_it_to_the_trainer_ids(family):
    tokenizer = build_tokenizer()
    pad = tokenizer.convert_tokens_to_ids("<|image_pad|>")
    processor = image_processor(family)
    encoder = ChatEncoder(tokenizer, processor, pad)
    messages, frames = maze_conversation()
    trainer_ids, images = encoder.encode(messages)
    assert trainer_ids.count(pad) > len(images)  # the trainer's ids are expanded

    sent = one_placeholder_per_image(trainer_ids, pad, len(images))

    assert sent.count(pad) == len(images)
    assert sent == list(tokenizer.encode(encoder.render(messages), add_special_tokens=False))
    assert vllm_expansion(sent, images, pad, processor) == trainer_ids


def test_adjacent_images_without_separators_are_refused():
    with pytest.raises(ValueError, match="1 runs of image placeholders but 2 images"):
        one_placeholder_per_image([1, 7, 7, 7, 7, 2], 7, 2)


@pytest.mark.vllm
@pytest.mark.parametrize("family", sorted(QWEN_VL_IMAGE_PROCESSORS))
def test_vllm_generator_inputs_expand_back_to_the_trainer_ids_with_vllms_own_prompt_update(family):
    import transformers.configuration_utils  # noqa: F401  (vLLM's processing module imports it half-way otherwise)

    processing = pytest.importorskip("vllm.multimodal.processing.processor")
    from runners.rollout.generation.vllm import VLLMGenerator

    tokenizer = build_tokenizer()
    pad = tokenizer.convert_tokens_to_ids("<|image_pad|>")
    processor = image_processor(family)
    encoder = ChatEncoder(tokenizer, processor, pad)
    trainer_ids, images = encoder.encode(maze_conversation()[0])
    generator = VLLMGenerator.__new__(VLLMGenerator)  # no engine: only the prompt it would send
    generator.image_token_id = pad

    item = generator._inputs(Prompt(trainer_ids, images))

    sent = item["prompt_token_ids"]
    assert sent.count(pad) == len(images) == len(item["multi_modal_data"]["image"])

    def replacement(item_idx: int) -> list[int]:  # vLLM's Qwen2-VL / Qwen3-VL get_replacement
        grid = pixel_inputs(processor, [images[item_idx]])["image_grid_thw"][0]
        return [pad] * (int(grid.prod()) // processor.merge_size**2)

    update = processing.PromptReplacement(modality="image", target=[pad], replacement=replacement)
    updates = {"image": [[update.resolve(i)] for i in range(len(images))]}
    expanded, _ = processing.apply_token_matches(sent, updates)
    assert expanded == trainer_ids
