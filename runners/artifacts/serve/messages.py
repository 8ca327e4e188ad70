"""OpenAI chat messages to and from mazegym's: frames as PNG data URLs, every request checked before it is used.

mazegym's messages (:mod:`mazegym.llm`) carry frames as arrays; OpenAI's carry them as ``image_url`` parts. The
server turns a request's messages and sampling settings into mazegym's (:func:`from_openai_messages`,
:func:`sampling_of`), refusing anything out of bounds with a :class:`RequestError`; the client goes the other way
(:func:`to_openai_messages`).
"""

import base64
import io
import math
from typing import Any, Sequence

import numpy as np

MAX_MESSAGES = 256
MAX_IMAGE_SIDE = 8192
"""Largest image side in pixels, the env's own bound on a frame."""
MAX_TOKENS_LIMIT = 1024
"""Largest ``max_tokens`` a request may ask for."""

MAX_IMAGE_PIXELS = 1024 * 1024
"""Largest image in pixels, checked before it is decoded (a 33x33 maze at 25 px a cell is 825x825)."""
MAX_PROMPT_CHARS = 256 * 1024
"""Most characters of text in one request, refused before it is tokenized."""


class RequestError(ValueError):
    """A request the server refuses: answered with an OpenAI-style error object and ``status``."""

    def __init__(self, message: str, status: int = 400, param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.status, self.param, self.code = status, param, code

    def body(self) -> dict[str, Any]:
        kind = "invalid_request_error" if self.status < 500 else "server_error"
        return {"error": {"message": str(self), "type": kind, "param": self.param, "code": self.code}}


def image_data_url(image: Any) -> str:
    """An HxWx3 uint8 frame (or PIL image) as a ``data:image/png;base64,...`` URL (PNG: lossless)."""
    from PIL import Image

    pil = image if isinstance(image, Image.Image) else Image.fromarray(np.asarray(image, dtype=np.uint8))
    buffer = io.BytesIO()
    pil.convert("RGB").save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def decode_image(url: Any, param: str = "image_url", max_side: int = MAX_IMAGE_SIDE) -> np.ndarray:
    """A base64 PNG ``data:image/...`` URL of at most :data:`MAX_IMAGE_PIXELS` and ``max_side`` a side -> HxWx3
    uint8 array; :class:`RequestError` for anything else (sizes are read from the header, before decoding)."""
    from PIL import Image, UnidentifiedImageError

    if not isinstance(url, str) or not url.startswith("data:image/"):
        raise RequestError(
            "images must be base64 data URLs (data:image/png;base64,...); the server fetches no URL", param=param
        )
    header, _, payload = url.partition(",")
    if not header.endswith(";base64"):
        raise RequestError("the image data URL is not base64 (data:image/png;base64,...)", param=param)
    try:
        raw = base64.b64decode(payload, validate=True)
    except ValueError:
        raise RequestError("the image data URL holds invalid base64", param=param) from None
    try:
        # PNG only: PIL's other decoders include EPS, which runs Ghostscript on the request's PostScript
        with Image.open(io.BytesIO(raw), formats=["PNG"]) as image:
            width, height = image.size
            if width * height > MAX_IMAGE_PIXELS or max(width, height) > max_side:
                raise RequestError(
                    f"image of {width}x{height} px: at most {MAX_IMAGE_PIXELS} px and {max_side} px a side",
                    param=param,
                    code="image_too_large",
                )
            return np.asarray(image.convert("RGB"), dtype=np.uint8)
    except RequestError:
        raise
    except (UnidentifiedImageError, OSError, ValueError, Image.DecompressionBombError) as exc:
        raise RequestError(f"the image could not be decoded as PNG ({type(exc).__name__})", param=param) from None


def to_openai_messages(messages: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """mazegym's chat messages (:mod:`mazegym.llm`, frames as arrays) -> OpenAI's (frames as PNG data URLs)."""
    out = []
    for message in messages:
        content = message["content"]
        if isinstance(content, list):
            parts = []
            for part in content:
                if part.get("type") == "image":
                    parts.append({"type": "image_url", "image_url": {"url": image_data_url(part["image"])}})
                else:
                    parts.append({"type": "text", "text": part.get("text", "")})
            content = parts
        out.append({"role": message["role"], "content": content})
    return out


ROLES = ("system", "user", "assistant")


def from_openai_messages(messages: Any, max_images: int, max_side: int = MAX_IMAGE_SIDE) -> list[dict[str, Any]]:
    """OpenAI chat messages -> mazegym's (every content a list of parts, images decoded), checked: at most
    ``max_images`` images (:meth:`ServedPolicy.max_images`), :data:`MAX_PROMPT_CHARS` of text, images as
    :func:`decode_image` takes them (``max_side`` px a side).

    String content becomes one text part, as :func:`mazegym.llm.build_messages` writes every
    message, so a conversation sent either way renders to the same prompt.
    """
    if not isinstance(messages, list) or not messages:
        raise RequestError("messages must be a non-empty list", param="messages")
    if len(messages) > MAX_MESSAGES:
        raise RequestError(f"{len(messages)} messages: at most {MAX_MESSAGES}", param="messages")
    out, images, chars = [], 0, 0
    for i, message in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(message, dict) or message.get("role") not in ROLES:
            raise RequestError(f"{where} needs a role, one of {', '.join(ROLES)}", param=where)
        content = message.get("content")
        if isinstance(content, str):
            parts = [{"type": "text", "text": content}]
        elif isinstance(content, list):
            parts = []
            for j, part in enumerate(content):
                kind = part.get("type") if isinstance(part, dict) else None
                if kind == "text" and isinstance(part.get("text"), str):
                    parts.append({"type": "text", "text": part["text"]})
                elif kind == "image_url":
                    if message["role"] != "user":
                        raise RequestError(f"{where}: only user messages may carry images", param=where)
                    images += 1
                    if images > max_images:
                        raise RequestError(
                            f"more than {max_images} images in one request (the most one of the run's plays shows)",
                            param="messages",
                        )
                    spec = part.get("image_url")
                    url = spec.get("url") if isinstance(spec, dict) else spec
                    parts.append({"type": "image", "image": decode_image(url, f"{where}.content[{j}]", max_side)})
                else:
                    raise RequestError(
                        f"{where}.content[{j}] must be a text part or an image_url part", param=f"{where}.content[{j}]"
                    )
        else:
            raise RequestError(f"{where}.content must be a string or a list of parts", param=where)
        chars += sum(len(p["text"]) for p in parts if p["type"] == "text")
        if chars > MAX_PROMPT_CHARS:
            raise RequestError(
                f"more than {MAX_PROMPT_CHARS} characters of text", param=where, code="context_length_exceeded"
            )
        out.append({"role": message["role"], "content": parts})
    return out


def _number(body: dict, key: str, default: float, low: float, high: float, integer: bool = False) -> Any:
    value = body.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not _finite(value):
        raise RequestError(f"{key} must be a finite number", param=key)
    if integer and int(value) != value:
        raise RequestError(f"{key} must be an integer", param=key)
    if not low <= value <= high:
        raise RequestError(f"{key} must be in [{low:g}, {high:g}], got {value}", param=key)
    return int(value) if integer else float(value)


def _finite(value: int | float) -> bool:
    try:
        return math.isfinite(value)
    except OverflowError:  # an integer too large for a float: JSON allows 10**400
        return False


def sampling_of(body: dict, default_max_tokens: int):
    """The request's :class:`~runners.rollout.generation.base.SamplingConfig` (greedy unless it asks otherwise)."""
    from runners.rollout.generation.base import SamplingConfig

    if body.get("n", 1) != 1:
        raise RequestError("n must be 1 (one reply per request)", param="n")
    if body.get("stream"):
        raise RequestError("streaming is not supported; send stream=false", param="stream")
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    return SamplingConfig(
        max_new_tokens=_number({"max_tokens": max_tokens}, "max_tokens", default_max_tokens, 1, MAX_TOKENS_LIMIT, True),
        temperature=_number(body, "temperature", 0.0, 0.0, 100.0),
        top_p=_number(body, "top_p", 1.0, 1e-6, 1.0),
        seed=_number(body, "seed", None, 0, 2**63 - 1, True),
    )
