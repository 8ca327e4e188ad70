"""The language-model interface: prompts in, actions out.

* ``system_prompt(...)`` describes the task (VisGym maze_2d wording, adapted to our actions).
* ``user_message(obs, info, obs_mode=..., feedback=...)`` turns one observation into an
  OpenAI-style user message whose content is a list of parts:
  ``{"type": "image", "image": <HxWx3 uint8 array>}`` (when the image is observed) and
  ``{"type": "text", "text": ...}`` (ASCII map when observed, moves left, environment feedback).
* ``build_messages(system, history, current, history_mode="full" | "last_k" | "none", k=...)``
  assembles system prompt, history and the current turn, keeping the full history, only the
  last ``k`` turns, or none.
* ``parse_action(text, require_stop=False) -> ParsedAction(action, name, error)`` reads a
  model reply. It never raises and never evaluates code.
* ``format_action(action, style="tag" | "plain" | "visgym")`` writes the canonical reply used by
  SFT demonstrations.

Parsing rules (see :func:`parse_action`): the parser accepts ``up``, ``Action: left``,
``<action>left</action>``, ``<answer>down</answer>``, ``('move', 1)``, ``('stop', 'stop')``,
code fences and any case. Tags are looked for in the last :data:`MAX_TAG_SCAN_CHARS` (65,536)
characters and the other formats in the last :data:`MAX_SCAN_CHARS` (4,096), which bounds the
time on huge inputs (the answer is at the end of a reply) and keeps a tagged answer followed by
long prose from resolving to a word of the prose. The most explicit format present wins, and
inside it the *last* valid action: ``<action>..</action>`` / ``<answer>..</answer>`` tags, then VisGym tuples
(``('move', 1)``, ``('stop', 'stop')``), then ``Action: <name>`` labels, then bare direction
words. Matching ignores case, backticks and code fences.

``mazegym.wrappers.TextActionWrapper`` steps an env with model text and turns unparseable replies
into invalid turns (a move is used, the feedback explains the expected format).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Sequence

ACTION_NAMES = ("right", "up", "left", "down", "stop")
MAX_SCAN_CHARS = 4096
"""Only this many trailing characters of a reply are parsed for tuples, labels and words (bounds parse time)."""
MAX_TAG_SCAN_CHARS = 1 << 16
"""This many trailing characters are searched for ``<action>`` / ``<answer>`` tags."""

_NAME_TO_ACTION = {name: i for i, name in enumerate(ACTION_NAMES)}
_SYNONYMS = {"east": 0, "north": 1, "west": 2, "south": 3}

_TAG_RE = re.compile(r"<\s*(action|answer)\s*>([^<]{0,256})<\s*/\s*(?:action|answer)\s*>", re.IGNORECASE)
# No two unbounded repeats may be adjacent in these patterns (that would backtrack
# quadratically on long runs of spaces); tests/test_llm_interface.py times adversarial input.
_TUPLE_RE = re.compile(
    r"\(\s*['\"]?(move|stop)['\"]?\s*,\s*['\"]?([0-9]{1,3}|stop|right|up|left|down)['\"]?\s*\)",
    re.IGNORECASE,
)
_LABEL_RE = re.compile(r"action[ \t]*[:=][\s*'\"]*(right|up|left|down|stop|east|north|west|south)\b", re.IGNORECASE)
_WORD_RE = re.compile(r"\b(right|up|left|down|stop|east|north|west|south)\b", re.IGNORECASE)


@dataclass(frozen=True)
class ParsedAction:
    """Result of parsing a reply: ``action`` is the env action or ``None`` when invalid."""

    action: int | None
    """Env action index (0=right 1=up 2=left 3=down 4=stop), or None when no valid action was found."""
    name: str | None
    """Action name, or None."""
    error: str | None
    """Why parsing failed (None on success)."""

    @property
    def valid(self) -> bool:
        """True when an action was found."""
        return self.action is not None


def _word_to_action(word: str) -> int | None:
    word = word.lower()
    if word in _NAME_TO_ACTION:
        return _NAME_TO_ACTION[word]
    return _SYNONYMS.get(word)


def _tuple_to_action(kind: str, arg: str) -> int | None:
    kind, arg = kind.lower(), arg.lower()
    if kind == "stop":
        return 4 if arg == "stop" else None
    if arg.isdigit():
        return int(arg) if len(arg) == 1 and int(arg) < 4 else None
    return _word_to_action(arg) if arg != "stop" else None


def _tag_actions(text: str) -> list[int]:
    """The action of each ``<action>`` / ``<answer>`` tag in ``text`` that names one, in order of appearance."""
    found = []
    for m in _TAG_RE.finditer(text):
        inner = _actions_in_plain(m.group(2))
        if inner:
            found.append(inner[-1])
    return found


def _actions_in_plain(text: str) -> list[int]:
    tuples = [_tuple_to_action(m.group(1), m.group(2)) for m in _TUPLE_RE.finditer(text)]
    tuples = [a for a in tuples if a is not None]
    if tuples:
        return tuples
    labels = [_word_to_action(m.group(1)) for m in _LABEL_RE.finditer(text)]
    if labels:
        return [a for a in labels if a is not None]
    return [a for a in (_word_to_action(m.group(1)) for m in _WORD_RE.finditer(text)) if a is not None]


def parse_action(text: Any, require_stop: bool = False) -> ParsedAction:
    """Parse a model reply into an action; never raises.

    Accepts ``"up"``, ``"Action: left"``, ``"<action>left</action>"``, ``"<answer>down</answer>"``,
    VisGym's ``"('move', 1)"`` / ``"('stop', 'stop')"``, code fences and any case, and takes
    the last valid action of the most explicit format present (module docstring). ``stop``
    is valid only with ``require_stop=True``; otherwise it is skipped.
    """
    try:
        if not isinstance(text, str):
            return ParsedAction(None, None, f"expected text, got {type(text).__name__}")
        candidates = _tag_actions(text[-MAX_TAG_SCAN_CHARS:].replace("`", " "))
        window = text[-MAX_SCAN_CHARS:].replace("`", " ")
        candidates = candidates or _actions_in_plain(window)
        allowed = [a for a in candidates if a != 4 or require_stop]
        if allowed:
            return ParsedAction(allowed[-1], ACTION_NAMES[allowed[-1]], None)
        if candidates:
            return ParsedAction(None, None, "'stop' is not an available action here; move right, up, left or down")
        if not window.strip():
            return ParsedAction(None, None, "empty reply")
        return ParsedAction(None, None, "no action found")
    except Exception as exc:  # defensive: parsing must never crash a rollout
        return ParsedAction(None, None, f"parser error: {type(exc).__name__}")


def format_action(action: int | str, style: str = "tag") -> str:
    """Canonical reply: ``"<action>up</action>"`` (tag), ``"up"`` (plain) or ``"('move', 1)"`` (visgym)."""
    name = ACTION_NAMES[action] if isinstance(action, int) else str(action).lower()
    if name not in _NAME_TO_ACTION:
        raise ValueError(f"unknown action {action!r}")
    if style == "tag":
        return f"<action>{name}</action>"
    if style == "plain":
        return name
    if style == "visgym":
        return "('stop', 'stop')" if name == "stop" else f"('move', {_NAME_TO_ACTION[name]})"
    raise ValueError(f"style must be 'tag', 'plain' or 'visgym', got {style!r}")


def invalid_action_feedback(parsed: ParsedAction, require_stop: bool = False) -> str:
    """Feedback text for an unparseable reply (shown to the model on the next turn)."""
    choices = "right, up, left, down" + (" or stop" if require_stop else "")
    reason = parsed.error or "no action found"
    return f"Invalid action ({reason}). Reply with one action ({choices}) inside tags, e.g. <action>up</action>."


def system_prompt(
    size: int = 9, max_moves: int = 20, obs_mode: str = "both", require_stop: bool = False, size_free: bool = False
) -> str:
    """The system prompt describing the maze task, the observation and the reply format.

    ``size_free`` leaves out the maze's size and move limit, so the text is the same for every maze size
    (a model trained on one size then reads a larger maze's prompt as one it has seen).
    """
    parts = ["You are navigating a maze." if size_free else f"You are navigating a {size}x{size} maze."]
    if obs_mode in ("both", "image"):
        parts.append(
            "In the image, walls are gray and paths are white. You are the blue circle, and your goal is "
            "to reach the red square."
        )
    if obs_mode in ("both", "text"):
        parts.append(
            "In the text map, '#' is a wall, '.' is a path, 'A' is you and 'G' is the goal. "
            "Row 0 is the top row; 'up' decreases the row, 'right' increases the column."
        )
    moves = "right, up, left, down"
    if require_stop:
        parts.append(
            f"Each turn choose one action: {moves}, or stop. Stop when you are on the goal; stopping elsewhere fails."
        )
        done = "You succeed only by stopping on the goal"
    else:
        parts.append(f"Each turn choose one move: {moves}. Moving into a wall wastes the move.")
        done = "You succeed as soon as you reach the goal"
    parts.append(f"{done}." if size_free else f"{done} within {max_moves} moves.")
    parts.append(
        "You may think briefly, then end your reply with exactly one action in tags, e.g. <action>up</action>."
    )
    return " ".join(parts)


def user_message(
    obs: dict[str, Any],
    info: dict[str, Any],
    *,
    obs_mode: str = "both",
    feedback: str | None = None,
    state_only: bool = False,
) -> dict[str, Any]:
    """One user turn: image part (when observed) then a text part (map, moves left, feedback).

    ``feedback`` overrides ``info["feedback"]`` (e.g. for an invalid reply); reset infos carry
    an empty feedback, so the first turn has none. ``state_only`` leaves out the move counter
    and the feedback on moves, so the message depends on the maze state alone (the feedback on
    an unparseable reply is still shown); a text part is added only when there is text.
    """
    content: list[dict[str, Any]] = []
    if obs_mode in ("both", "image") and "image" in obs:
        content.append({"type": "image", "image": obs["image"]})
    lines = []
    fb = feedback if feedback is not None else info.get("feedback", "")
    if fb and (not state_only or feedback is not None or info.get("invalid_action")):
        lines.append(f"Environment feedback: {fb}")
    if obs_mode in ("both", "text") and "text" in obs:
        lines.append("Map:\n" + obs["text"])
    if not state_only:
        moves_left = int(info.get("max_moves", 0)) - int(info.get("moves", 0))
        lines.append(f"This is move {int(info.get('moves', 0)) + 1}. You have {moves_left} moves left.")
    if lines or not content:
        content.append({"type": "text", "text": "\n".join(lines)})
    return {"role": "user", "content": content}


def build_messages(
    system: str,
    history: Sequence[tuple[dict[str, Any], str]],
    current_user: dict[str, Any],
    history_mode: str = "full",
    k: int = 2,
) -> list[dict[str, Any]]:
    """System prompt + past ``(user_message, assistant_text)`` turns + the current user message.

    ``history_mode``: ``"full"`` keeps every past turn, ``"last_k"`` the last ``k``, ``"none"``
    none (each turn then stands alone, which VisGym found works better than full history).
    """
    if history_mode == "full":
        kept = list(history)
    elif history_mode == "last_k":
        kept = list(history)[-k:] if k > 0 else []
    elif history_mode == "none":
        kept = []
    else:
        raise ValueError(f"history_mode must be 'full', 'last_k' or 'none', got {history_mode!r}")
    messages: list[dict[str, Any]] = [{"role": "system", "content": [{"type": "text", "text": system}]}]
    for user, assistant in kept:
        messages.append(user)
        messages.append({"role": "assistant", "content": [{"type": "text", "text": assistant}]})
    messages.append(current_user)
    return messages
