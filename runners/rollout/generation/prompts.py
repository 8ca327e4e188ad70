"""Turn chat messages into prompt token ids (and image inputs), without re-tokenising history.

The chat template renders the conversation to text; that text is cut at every special token
(``<|im_start|>``, ...) and each piece is tokenised once and memoised. Tokenisers split on
special tokens before anything else, so concatenating the pieces' ids equals tokenising the
whole text -- :class:`ChatEncoder` checks that once on its first call and falls back to full
tokenisation if a tokenizer ever breaks the rule. Each turn, only the new user message and
the last reply are tokenised; the system prompt and history come from the memo.

Image placeholders (one ``<|image_pad|>`` per image in the rendered text) are expanded to the
number of vision tokens each image needs, as Qwen2-VL style processors do: the trainer scores
those ids. vLLM expands a token prompt's placeholders itself, so what goes to it is
:func:`one_placeholder_per_image` of them.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from pathlib import Path
from typing import Any

import numpy as np


def load_tokenizer(model_path: str | Path):
    """Load a model's tokenizer (left padding, pad token set) from a local path."""
    from transformers import AutoTokenizer

    path = Path(model_path)
    if not (path / "config.json").is_file():
        raise FileNotFoundError(
            f"no model at {path} (config.json missing); build one with runners.models.tiny or pass a local model dir"
        )
    from algos.models import refuse_remote_code

    refuse_remote_code(path)
    tokenizer = AutoTokenizer.from_pretrained(str(path), trust_remote_code=False)
    tokenizer.padding_side = "left"
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_image_processor(model_path: str | Path):
    """Load the model's image processor, or ``None`` for text-only models."""
    path = Path(model_path)
    if not (path / "preprocessor_config.json").is_file():
        return None
    from transformers import AutoImageProcessor

    from algos.models import refuse_remote_code  # also registers mazegym's own image processors

    refuse_remote_code(path)
    return AutoImageProcessor.from_pretrained(str(path), trust_remote_code=False)


def image_token_id_of(model_path: str | Path) -> int | None:
    """The id of the image placeholder token from the model config (``None`` for text models)."""
    from algos.models import load_config

    return getattr(load_config(model_path), "image_token_id", None)


def to_pil(image: Any):
    """Accept an HxWx3 uint8 array or a PIL image; return a PIL RGB image."""
    from PIL import Image

    if isinstance(image, Image.Image):
        return image.convert("RGB")
    return Image.fromarray(np.asarray(image, dtype=np.uint8)).convert("RGB")


def compact_frame(frame: np.ndarray) -> Any:
    """A lossless copy of an HxWx3 uint8 frame in a third of its bytes: a palette image where the frame has at most
    256 colours (a maze frame has four), else a plain copy. :func:`to_pil` and :func:`pixel_inputs` read both."""
    from PIL import Image

    frame = np.asarray(frame, dtype=np.uint8)
    rgb = Image.fromarray(frame)
    colours = rgb.getcolors(256)
    if colours is not None:
        palette = Image.new("P", (1, 1))
        palette.putpalette([channel for _, colour in colours for channel in colour])
        compact = rgb.quantize(palette=palette, dither=Image.Dither.NONE)
        if np.array_equal(np.asarray(compact.convert("RGB")), frame):  # PIL matches colours through a coarse cache
            return compact
    return np.array(frame, copy=True)


def pixel_inputs(image_processor, images: list[Any]) -> dict:
    """Run the image processor on ``images``: ``{"pixel_values", "image_grid_thw"}`` torch tensors."""
    if getattr(image_processor, "accepts_arrays", False):
        from algos.policies.lm import is_rgb_frame

        images = [im if is_rgb_frame(im) else to_pil(im) for im in images]
    else:
        images = [to_pil(im) for im in images]
    return dict(image_processor(images=images, return_tensors="pt"))


def images_in(messages: list[dict]) -> list[Any]:
    """All images referenced by ``messages``, in the order the chat template renders them."""
    found = []
    for message in messages:
        content = message.get("content")
        if isinstance(content, list):
            found += [part["image"] for part in content if isinstance(part, dict) and part.get("type") == "image"]
    return found


def one_placeholder_per_image(ids: list[int], image_token_id: int, image_count: int) -> list[int]:
    """``ids`` with each run of image placeholder tokens cut to one token: the prompt an engine that expands
    placeholders itself (vLLM) expects."""
    out: list[int] = []
    runs = 0
    for i, token in enumerate(ids):
        if token == image_token_id and i > 0 and ids[i - 1] == image_token_id:
            continue
        runs += token == image_token_id
        out.append(token)
    if runs != image_count:
        raise ValueError(f"prompt has {runs} runs of image placeholders but {image_count} images")
    return out


class ChatEncoder:
    """Chat messages -> prompt token ids, with memoised segments and image placeholder expansion."""

    def __init__(self, tokenizer, image_processor=None, image_token_id: int | None = None, memo_size: int = 65536):
        self.tokenizer = tokenizer
        self.image_processor = image_processor
        self.image_token_id = image_token_id
        self.memo: OrderedDict[str, list[int]] = OrderedDict()
        self.memo_size = memo_size
        self.segment_checked = False
        self.segment_ok = True
        specials = sorted(tokenizer.all_special_tokens + _added_special_tokens(tokenizer), key=len, reverse=True)
        self._split = (
            re.compile("(?=" + "|".join(re.escape(t) for t in dict.fromkeys(specials)) + ")") if specials else None
        )

    def render(self, messages: list[dict], add_generation_prompt: bool = True) -> str:
        """The chat template's text for ``messages``."""
        return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=add_generation_prompt)

    def tokenize_text(self, text: str) -> list[int]:
        """Token ids of rendered ``text``: memoised per special-token-delimited segment."""
        if self._split is None or not self.segment_ok:
            return self._encode(text)
        ids: list[int] = []
        for segment in self._split.split(text):
            if segment:
                ids += self._segment_ids(segment)
        if not self.segment_checked:  # one-time proof that segment tokenisation is exact here
            self.segment_checked = True
            if ids != self._encode(text):
                self.segment_ok = False
                return self._encode(text)
        return ids

    def encode(self, messages: list[dict], add_generation_prompt: bool = True) -> tuple[list[int], list[Any]]:
        """Prompt ids (placeholders expanded) and the images they refer to."""
        ids = self.tokenize_text(self.render(messages, add_generation_prompt))
        images = images_in(messages)
        return self.expand_images(ids, images), images

    def image_token_count(self, image: Any) -> int:
        """How many placeholder tokens one image occupies after vision-token merging."""
        proc = self.image_processor
        if isinstance(image, np.ndarray):
            h, w = image.shape[:2]
        else:
            w, h = image.size
        merge = getattr(proc, "merge_size", 1)
        return int(proc.get_number_of_image_patches(int(h), int(w), {})) // (merge * merge)

    def expand_images(self, ids: list[int], images: list[Any]) -> list[int]:
        """Replace the i-th image placeholder token by as many copies as image i needs."""
        if not images:
            return ids
        if self.image_processor is None or self.image_token_id is None:
            raise ValueError(
                "the prompt has images but the model has no image processor / image_token_id (is it a text-only model?)"
            )
        positions = [i for i, t in enumerate(ids) if t == self.image_token_id]
        if len(positions) != len(images):
            raise ValueError(f"prompt has {len(positions)} image placeholders but {len(images)} images")
        out: list[int] = []
        last = 0
        for pos, image in zip(positions, images):
            out += ids[last:pos] + [self.image_token_id] * self.image_token_count(image)
            last = pos + 1
        return out + ids[last:]

    def _segment_ids(self, segment: str) -> list[int]:
        ids = self.memo.get(segment)
        if ids is None:
            ids = self._encode(segment)
            self.memo[segment] = ids
            if len(self.memo) > self.memo_size:
                self.memo.popitem(last=False)
        else:
            self.memo.move_to_end(segment)
        return ids

    def _encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))


def _added_special_tokens(tokenizer) -> list[str]:
    """Special added tokens (e.g. ``<|im_start|>``) that ``all_special_tokens`` may not list."""
    decoder = getattr(tokenizer, "added_tokens_decoder", {}) or {}
    return [tok.content for tok in decoder.values() if getattr(tok, "special", False)]
