"""Fixed evaluation sets (pinned by hash) and the training stream that avoids them."""

from __future__ import annotations

import gymnasium as gym
import pytest

import mazegym.evalsets as evalsets
from mazegym.evalsets import EVAL_SETS, MazeStream, is_eval_maze, load_eval_set, set_hash
from mazegym.solver import optimal_moves

PINNED = {
    "VisMaze-v0": "f83ac93470e37021",
    "VisMaze-Hard-v0": "05e596fb7661643e",
    "heldout-5x5": "74be1cbf7c038060",
    "heldout-7x7": "28fb15cf93922a51",
    "heldout-13x13": "b4d48e1f6268073b",
    "heldout-15x15": "f748d9b37327cfae",
    "heldout-17x17": "4553dafd4c4e5d1a",
    "heldout-19x19": "30693394cfbd263d",
    "heldout-21x21": "4fe3e0ad9727331c",
    "heldout-33x33": "449ee06b2b22bb73",
    "fresh-9x9": "3de33deb623a391f",
    "loops-9x9": "cd4a35275f10559a",
    "loops-13x13": "71ea731bb2bae70e",
    "loops-21x21": "e472a60c800c9018",
    "fresh-loops-9x9": "a164a84df5107fa1",
}


def test_eval_sets_are_pinned_by_hash():
    assert set(EVAL_SETS) == set(PINNED)
    for name, expected in PINNED.items():
        mazes = load_eval_set(name)
        count = EVAL_SETS[name].count
        assert len(mazes) == count and len({m.maze_id for m in mazes}) == count
        assert set_hash(mazes) == expected, f"eval set {name} changed"
    assert EVAL_SETS["fresh-9x9"].count == 1000


def test_every_odd_size_from_5_to_21_has_a_held_out_set():
    sizes = {info.size for info in EVAL_SETS.values()}
    assert set(range(5, 22, 2)) <= sizes and 33 in sizes
    # 5x5 grids hold 16 distinct mazes, and its set holds all of them.
    assert len({m.maze_id for m in load_eval_set("heldout-5x5")}) == EVAL_SETS["heldout-5x5"].count == 16


@pytest.mark.parametrize("fresh_name", ["fresh-9x9", "fresh-loops-9x9"])
def test_fresh_set_shares_no_maze_with_the_fixed_sets(fresh_name):
    """The 1000 fresh 9x9 mazes come from seeds past the fixed sets' and repeat none of their mazes."""
    fresh = {m.maze_id for m in load_eval_set(fresh_name)}
    assert len(fresh) == 1000
    for name in EVAL_SETS:
        if name != fresh_name:
            assert not fresh & {m.maze_id for m in load_eval_set(name)}, name
    env = gym.make("VisMaze-v0")
    first = load_eval_set("fresh-9x9")[0]
    assert env.reset(seed=EVAL_SETS["fresh-9x9"].first_seed)[1]["maze_id"] == first.maze_id


@pytest.mark.parametrize("name", sorted(EVAL_SETS))
def test_eval_mazes_fit_their_env_and_are_solvable(name):
    info = EVAL_SETS[name]
    env = gym.make(info.env_id)
    for spec in load_eval_set(name)[:16]:
        assert spec.size == info.size
        _, reset_info = env.reset(options={"maze": spec})
        assert 0 < reset_info["optimal_moves"] == optimal_moves(spec.grid, spec.start, spec.goal) <= info.max_moves
    assert env.unwrapped.max_moves == info.max_moves


@pytest.mark.parametrize("name", ["loops-9x9", "loops-13x13", "loops-21x21"])
def test_loop_sets_hold_only_mazes_with_loops_kept(name):
    """Every maze of a loops set keeps a loop through dead-end filling, the rule that isolates the one path of a
    perfect maze; no maze of the perfect-maze set does."""
    from mazegym.solver import dead_end_filling, dead_end_filling_keeps_loops

    for spec in load_eval_set(name):
        assert dead_end_filling_keeps_loops(spec.grid, spec.start, spec.goal)
        assert (
            len(dead_end_filling(spec.grid, spec.start, spec.goal))
            > optimal_moves(spec.grid, spec.start, spec.goal) + 1
        )
    assert not any(dead_end_filling_keeps_loops(m.grid, m.start, m.goal) for m in load_eval_set("VisMaze-v0"))


def test_preset_eval_set_is_the_envs_first_reserved_seeds():
    """The 9x9 set is reset(seed=i) of VisMaze-v0 (as long as generation is unchanged)."""
    env = gym.make("VisMaze-v0")
    first = load_eval_set("VisMaze-v0")[:5]
    assert [env.reset(seed=i)[1]["maze_id"] for i in range(5)] == [m.maze_id for m in first]


def test_training_stream_is_disjoint_and_deterministic():
    ids = [m.maze_id for _, m in zip(range(3000), MazeStream(size=9, seed=0))]
    assert not any(is_eval_maze(i) for i in ids)
    assert len(set(ids)) > 2900
    again = [m.maze_id for _, m in zip(range(50), MazeStream(size=9, seed=0))]
    assert again == ids[:50]
    other = [m.maze_id for _, m in zip(range(50), MazeStream(size=9, seed=1))]
    assert not set(other) & set(again)
    assert all(is_eval_maze(m.maze_id) for m in load_eval_set("heldout-13x13"))


def test_stream_skips_a_maze_that_is_in_an_eval_set(monkeypatch):
    plain = MazeStream(size=9, seed=5)
    first, second = next(plain), next(plain)
    monkeypatch.setattr(evalsets, "eval_maze_ids", lambda: frozenset({first.maze_id}))
    guarded = MazeStream(size=9, seed=5)
    assert next(guarded) == second and guarded.skipped == 1


def test_stream_resumes_exactly_from_state_dict():
    stream = MazeStream(size=11, seed=3, generator="kruskal", max_optimal_moves=30)
    for _ in range(7):
        next(stream)
    state = stream.state_dict()
    expected = [next(stream).maze_id for _ in range(5)]
    resumed = MazeStream(size=11, seed=3, generator="kruskal", max_optimal_moves=30)
    resumed.load_state_dict(state)
    assert [next(resumed).maze_id for _ in range(5)] == expected
    with pytest.raises(ValueError, match="different configuration"):
        MazeStream(size=11, seed=4, generator="kruskal", max_optimal_moves=30).load_state_dict(state)


def test_stream_mixes_maze_shapes_deterministically_and_resumes():
    """Each maze draws one shape from its own seed: perfect mazes and mazes with loops both appear, the same ones
    again from the same seed, and a saved state refuses a stream with other shapes."""
    from mazegym.solver import dead_end_filling_keeps_loops

    shapes = [{}, {"extra_openings": 0.3}, {"start_goal": "random", "generator": "dfs"}]
    stream = MazeStream(size=9, seed=2, shapes=shapes)
    mazes = [next(stream) for _ in range(60)]
    loops = sum(dead_end_filling_keeps_loops(m.grid, m.start, m.goal) for m in mazes)
    corners = {(1, 1), (1, 7), (7, 7), (7, 1)}
    off_corner = sum(m.start not in corners or m.goal not in corners for m in mazes)
    assert 10 <= loops <= 35 and off_corner >= 10
    again = MazeStream(size=9, seed=2, shapes=shapes)
    assert [next(again).maze_id for _ in range(60)] == [m.maze_id for m in mazes]
    state = stream.state_dict()
    resumed = MazeStream(size=9, seed=2, shapes=shapes)
    resumed.load_state_dict(state)
    assert next(resumed).maze_id == next(stream).maze_id
    with pytest.raises(ValueError, match="different configuration"):
        MazeStream(size=9, seed=2).load_state_dict(state)
    with pytest.raises(ValueError, match="shape key"):
        MazeStream(shapes=[{"openings": 0.3}])
    with pytest.raises(ValueError, match="extra_openings"):
        MazeStream(shapes=[{"extra_openings": 2.0}])


def test_a_stream_mixes_maze_sizes_and_bounds_each_by_its_own_move_limit():
    """A shape's ``size`` draws mazes of that size, bounded by that size's registered move limit (50 moves at 13x13),
    while the stream's own size keeps ``max_optimal_moves``; a size with no registered env is refused."""
    from mazegym.evalsets import move_limit
    from mazegym.solver import optimal_moves

    assert (move_limit(9), move_limit(13), move_limit(21)) == (20, 50, 150)
    stream = MazeStream(size=9, seed=5, max_optimal_moves=12, shapes=[{}, {"size": 13, "extra_openings": 0.2}])
    mazes = [next(stream) for _ in range(60)]
    by_size = {size: [m for m in mazes if m.size == size] for size in (9, 13)}
    assert set(m.size for m in mazes) == {9, 13} and min(len(v) for v in by_size.values()) >= 15
    assert max(optimal_moves(m.grid, m.start, m.goal) for m in by_size[9]) <= 12
    assert max(optimal_moves(m.grid, m.start, m.goal) for m in by_size[13]) > 12  # not the 9x9 bound
    with pytest.raises(ValueError, match="no registered env has 12x12"):
        MazeStream(size=9, shapes=[{"size": 12}])


def test_stream_filter_on_optimal_moves():
    lengths = [
        optimal_moves(m.grid, m.start, m.goal)
        for _, m in zip(range(100), MazeStream(size=11, seed=0, max_optimal_moves=20))
    ]
    assert max(lengths) <= 20 and min(lengths) == 16  # 16 = Manhattan distance between opposite corners
    with pytest.raises(ValueError, match="of 200 probe draws, 200 need more than 12 moves"):
        MazeStream(size=11, seed=0, max_optimal_moves=12)  # 16 moves at least, corner to corner


def test_a_shape_the_stream_could_never_yield_is_refused_when_it_is_built():
    """Every perfect 5x5 maze from corner to corner is an evaluation maze: a stream mixing them in would skip each one
    and train on the other shapes alone, so it is refused, naming the shape; the same size with random start and goal
    is accepted and yields 5x5 mazes beside the 9x9 ones."""
    with pytest.raises(ValueError, match=r"maze shape \{'size': 5\} at 5x5 can never be yielded: .* evaluation mazes"):
        MazeStream(size=9, shapes=[{"size": 5}, {}])
    mixed = MazeStream(size=9, seed=0, shapes=[{"size": 5, "start_goal": "random"}, {}])
    sizes = [next(mixed).size for _ in range(40)]
    assert 10 <= sizes.count(5) <= 30 and sizes.count(5) + sizes.count(9) == 40
    assert not any(is_eval_maze(next(mixed).maze_id) for _ in range(40))


def test_unknown_or_bad_config_fails_fast():
    with pytest.raises(KeyError, match="unknown eval set"):
        load_eval_set("VisMaze-v9")
    with pytest.raises(ValueError, match="generator"):
        MazeStream(generator="nope")
