"""Prompt building and the action parser (including hypothesis fuzzing)."""

from __future__ import annotations

import time

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import mazegym  # noqa: F401
from mazegym.llm import (
    MAX_SCAN_CHARS,
    ParsedAction,
    build_messages,
    format_action,
    invalid_action_feedback,
    parse_action,
    system_prompt,
    user_message,
)


@pytest.mark.parametrize(
    "reply, expected",
    [
        ("up", 1),
        ("Action: left", 2),
        ("**Action:** Left", 2),
        ("<action>left</action>", 2),
        ("<ACTION> Down </ACTION>", 3),
        ("<answer>right</answer>", 0),
        ("<answer>('move', 3)</answer>", 3),
        ("('move', 1)", 1),
        ('("move", 0)', 0),
        ("( 'move' , 2 )", 2),
        ("```\nRIGHT\n```", 0),
        ("`down`", 3),
        ("I think left... no, Down.", 3),  # last bare word wins
        ("<action>up</action> because left is a wall", 1),  # tags beat bare words
        ("<think>go left or right?</think><action>right</action>", 0),
        ("<action>up</action><action>down</action>", 3),  # last tag wins
        ("('move', 1) then ('move', 2)", 2),
        ("Action: up\nAction: left", 2),
        ("go north", 1),
    ],
)
def test_parse_accepts_common_formats(reply, expected):
    parsed = parse_action(reply)
    assert parsed == ParsedAction(expected, mazegym.ACTION_NAMES[expected], None)


def test_stop_only_with_require_stop():
    assert parse_action("('stop','stop')", require_stop=True).action == 4
    assert parse_action("<action>stop</action>", require_stop=True).name == "stop"
    blocked = parse_action("<action>stop</action>")
    assert blocked.action is None and "stop" in blocked.error
    assert parse_action("<action>up</action> <action>stop</action>").action == 1  # last *valid* action


@pytest.mark.parametrize(
    "reply", ["", "   ", "I am not sure.", "('move', 7)", "('move', 12)", "<action>jump</action>", None, 42, b"up"]
)
def test_unparseable_replies_are_invalid_not_errors(reply):
    parsed = parse_action(reply)
    assert parsed.action is None and parsed.name is None and parsed.error
    feedback = invalid_action_feedback(parsed)
    assert "Invalid action" in feedback and "<action>up</action>" in feedback


def test_only_the_tail_is_scanned():
    assert parse_action("up " + "x" * (MAX_SCAN_CHARS + 10)).action is None
    assert parse_action("x" * 1_000_000 + "<action>left</action>").action == 2


@given(st.text())
@settings(max_examples=400, deadline=None)
def test_parser_never_raises_on_arbitrary_unicode(text):
    parsed = parse_action(text)
    assert isinstance(parsed, ParsedAction)
    assert (parsed.action is None) == (parsed.error is not None)
    assert parsed.action in (None, 0, 1, 2, 3)


@given(st.text(min_size=1, max_size=30), st.integers(min_value=1_000, max_value=300_000))
@settings(max_examples=60, deadline=None)
def test_parser_never_raises_on_huge_repeated_unicode(chunk, repeats):
    huge = chunk * repeats
    start = time.perf_counter()
    parsed = parse_action(huge, require_stop=True)
    assert parsed.action in (None, 0, 1, 2, 3, 4)
    assert time.perf_counter() - start < 0.5  # ~1 ms when idle; generous for loaded CI


@given(
    st.lists(
        st.sampled_from(
            [
                "up",
                "left",
                "(",
                "'",
                "move",
                ",",
                " ",
                "<action>",
                "</action>",
                "Action:",
                "*",
                "\n",
                "stop",
                "3",
                "é",
                "\x00",
            ]
        ),
        max_size=300,
    )
)
@settings(max_examples=300, deadline=None)
def test_parser_never_raises_on_adversarial_token_soup(tokens):
    parsed = parse_action("".join(tokens), require_stop=True)
    assert parsed.action in (None, 0, 1, 2, 3, 4)


@pytest.mark.parametrize(
    "unit", ["(" + " " * 50, "action:" + " " * 50, "<action>", "('move', ", "up ", "(" + "'" * 30, "\u00e9" * 10]
)
def test_parse_time_is_bounded_on_huge_inputs(unit):
    huge = unit * (2_000_000 // len(unit))
    start = time.perf_counter()
    parse_action(huge, require_stop=True)
    assert time.perf_counter() - start < 0.5  # ~1 ms when idle; generous for loaded CI


@pytest.mark.parametrize("action", range(5))
def test_format_action_round_trips(action):
    for style in ("tag", "plain", "visgym"):
        assert parse_action(format_action(action, style), require_stop=True).action == action
    assert format_action(1) == "<action>up</action>" and format_action("Left", "plain") == "left"
    assert format_action(4, "visgym") == "('stop', 'stop')" and format_action(0, "visgym") == "('move', 0)"


def test_format_action_rejects_unknown():
    with pytest.raises(ValueError):
        format_action("jump")
    with pytest.raises(ValueError):
        format_action(1, style="xml")


def test_system_prompt_describes_the_task():
    both = system_prompt(9, 20, "both")
    assert (
        "9x9" in both
        and "20 moves" in both
        and "blue circle" in both
        and "'#'" in both
        and "<action>up</action>" in both
    )
    text = system_prompt(11, 30, "text", require_stop=True)
    assert "blue circle" not in text and "stop" in text and "30 moves" in text
    assert "'#'" not in system_prompt(9, 20, "image")


def test_size_free_system_prompt_reads_the_same_at_every_size():
    nine = system_prompt(9, 20, "image", size_free=True)
    assert nine == system_prompt(13, 50, "image", size_free=True) == system_prompt(33, 250, "image", size_free=True)
    assert "9x9" not in nine and "20" not in nine and "blue circle" in nine and "<action>up</action>" in nine


def test_user_message_parts_follow_obs_mode():
    env = gym.make("VisMaze-v0")
    obs, info = env.reset(seed=0)
    msg = user_message(obs, info)
    assert msg["role"] == "user" and [p["type"] for p in msg["content"]] == ["image", "text"]
    assert msg["content"][0]["image"] is obs["image"]
    text = msg["content"][1]["text"]
    assert obs["text"] in text and "20 moves left" in text and "feedback" not in text
    obs, _, _, _, info = env.step(int(np.flatnonzero(info["action_mask"] == 0)[0]))
    text = user_message(obs, info, obs_mode="image")["content"]
    assert [p["type"] for p in text] == ["image", "text"]
    assert (
        "Cannot move into a wall." in text[1]["text"]
        and "19 moves left" in text[1]["text"]
        and "#" not in text[1]["text"]
    )
    only_text = user_message({"text": obs["text"]}, info, obs_mode="text", feedback="Invalid action.")
    assert [p["type"] for p in only_text["content"]] == ["text"]
    assert "Invalid action." in only_text["content"][0]["text"] and "Cannot move" not in only_text["content"][0]["text"]


def test_build_messages_history_modes():
    system = system_prompt()
    history = [
        ({"role": "user", "content": [{"type": "text", "text": f"turn {i}"}]}, f"<action>up</action> {i}")
        for i in range(4)
    ]
    current = {"role": "user", "content": [{"type": "text", "text": "now"}]}
    full = build_messages(system, history, current, "full")
    assert [m["role"] for m in full] == ["system"] + ["user", "assistant"] * 4 + ["user"]
    assert full[-1] is current and full[2]["content"][0]["text"] == "<action>up</action> 0"
    last2 = build_messages(system, history, current, "last_k", k=2)
    assert len(last2) == 1 + 2 * 2 + 1 and last2[1]["content"][0]["text"] == "turn 2"
    assert build_messages(system, history, current, "none") == [full[0], current]
    assert build_messages(system, history, current, "last_k", k=0) == [full[0], current]
    with pytest.raises(ValueError):
        build_messages(system, history, current, "some")


def test_state_only_user_message_drops_the_counter_and_move_feedback_but_not_invalid_feedback():
    import gymnasium as gym

    import mazegym  # noqa: F401
    from mazegym.llm import user_message

    env = gym.make("VisMaze-v0", obs_mode="text")
    obs, info = env.reset(seed=0)
    first = user_message(obs, info, obs_mode="text", state_only=True)
    assert "This is move" not in first["content"][-1]["text"] and "Map:" in first["content"][-1]["text"]
    obs, _, _, _, info = env.step(0)
    moved = user_message(obs, info, obs_mode="text", state_only=True)["content"][-1]["text"]
    assert info["feedback"] and "Environment feedback" not in moved and "This is move" not in moved
    assert "Environment feedback" in user_message(obs, info, obs_mode="text")["content"][-1]["text"]
    bad = user_message(obs, info, obs_mode="text", state_only=True, feedback="Invalid action: no <action> tag.")
    assert "Environment feedback: Invalid action" in bad["content"][-1]["text"]
    image_only = user_message({"image": obs.get("image")}, info, obs_mode="image", state_only=True)
    assert [part["type"] for part in image_only["content"]] == ["image"]
