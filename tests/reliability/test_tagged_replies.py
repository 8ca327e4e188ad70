"""A tagged answer followed by long prose is the tagged action, not a direction word of the prose."""

import time

from mazegym.llm import MAX_SCAN_CHARS, MAX_TAG_SCAN_CHARS, parse_action

PROSE = "Going down looked fine, but left and right were walls, so the way up seemed open. "


def test_a_tag_before_more_than_the_scan_window_of_prose_wins():
    wrong = []
    for i in range(1000):
        prose = PROSE * (MAX_SCAN_CHARS // len(PROSE) + 1 + i % 40)
        if parse_action("<action>down</action>" + prose).action != 3:
            wrong.append(i)
    assert not wrong, wrong[:5]


def test_tags_are_searched_in_bounded_time_and_only_in_their_window():
    assert parse_action("<action>down</action>" + "x" * MAX_TAG_SCAN_CHARS).action is None
    started = time.perf_counter()
    assert parse_action("<action>" * 200_000 + "<answer>up</answer>").action == 1
    assert time.perf_counter() - started < 0.25
