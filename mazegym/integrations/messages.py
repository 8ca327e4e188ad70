"""Images and chat messages in the wire formats other frameworks expect (base64 PNG, OpenAI ``image_url`` parts)."""

from __future__ import annotations

import base64
import io
from typing import Any

import numpy as np
from PIL import Image


def encode_png(image: np.ndarray) -> str:
    """An RGB array as base64 PNG (lossless: :func:`decode_png` gives back the very same array)."""
    buf = io.BytesIO()
    Image.fromarray(image).save(buf, format="PNG", compress_level=1)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def decode_png(data: str) -> np.ndarray:
    """The RGB array of a base64 PNG."""
    return np.asarray(Image.open(io.BytesIO(base64.b64decode(data))).convert("RGB"))


def openai_message(message: dict[str, Any]) -> dict[str, Any]:
    """A :func:`mazegym.llm.user_message` with its image parts as OpenAI ``image_url`` parts (PNG data URLs)."""
    content = []
    for part in message["content"]:
        if part["type"] == "image":
            url = "data:image/png;base64," + encode_png(part["image"])
            content.append({"type": "image_url", "image_url": {"url": url}})
        else:
            content.append(part)
    return {**message, "content": content}
