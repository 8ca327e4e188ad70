"""The branches collector (runners.rollout.collectors.branches): greedy walks, rewards, groups."""

import dataclasses

import numpy as np
import pytest

import torch

from algos.advantages import grpo_advantages
from mazegym.maze import MazeSpec
from mazegym.solver import MOVES, bfs_distances, next_cell
from runners.rollout.collect import RolloutConfig, collect_groups, rollout_metrics
from runners.config.fields import problem, settings
from runners.rollout.collectors.branches import (
    GROUP_CELLS,
    BranchSettings,
    check_settings,
    collect_branches,
    continuation_values,
    greedy_moves_to_goal,
)
from tests.test_rollout import ScriptedGenerator, _mazes, _oracle_reply

RIGHT, UP, LEFT, DOWN = 0, 1, 2, 3


def branching(**kwargs) -> RolloutConfig:
    """Rollout settings that choose the branches collector; ``branch_<key>`` arguments are its own settings."""
    own = {k.removeprefix("branch_"): kwargs.pop(k) for k in list(kwargs) if k.startswith("branch_")}
    return RolloutConfig(collector=BranchSettings(name="branches", **own), **kwargs)


def problems(rollout: RolloutConfig) -> str:
    """What validation says of the branch settings: each field's one check, then the collector's rules."""
    found = [f"{key}={value!r} {p}" for key, value, f in settings(rollout.collector) if (p := problem(value, f))]
    return "; ".join(found + check_settings(rollout))


def corridor() -> MazeSpec:
    """A 5x5 maze whose only open cells are the corridor (1,1)-(1,2)-(1,3), goal at (1,3)."""
    grid = np.ones((5, 5), dtype=bool)
    grid[1, 1:4] = False
    return MazeSpec(grid, (1, 1), (1, 3))


def test_next_cell_moves_into_open_cells_and_stays_at_walls():
    grid = corridor().grid
    assert next_cell(grid, (1, 1), RIGHT) == (1, 2) and next_cell(grid, (1, 2), LEFT) == (1, 1)
    assert next_cell(grid, (1, 1), UP) == (1, 1) and next_cell(grid, (1, 1), LEFT) == (1, 1)
    assert next_cell(grid, (1, 3), DOWN) == (1, 3)


def test_greedy_walk_counts_moves_and_finds_loops_and_limits():
    maze = corridor()
    assert greedy_moves_to_goal(maze, {(1, 1): RIGHT, (1, 2): RIGHT}, limit=10) == {(1, 3): 0, (1, 2): 1, (1, 1): 2}
    # A two-cell loop never arrives; an unparseable reply (None) spends its move in place.
    looping = greedy_moves_to_goal(maze, {(1, 1): RIGHT, (1, 2): LEFT}, limit=10)
    assert looping[(1, 1)] is None and looping[(1, 2)] is None
    assert greedy_moves_to_goal(maze, {(1, 1): None, (1, 2): RIGHT}, limit=10)[(1, 1)] is None
    # Bumping into a wall stays in the cell, which is a loop too.
    assert greedy_moves_to_goal(maze, {(1, 1): UP, (1, 2): RIGHT}, limit=10)[(1, 1)] is None
    # Arriving in more moves than the limit counts as not arriving.
    assert greedy_moves_to_goal(maze, {(1, 1): RIGHT, (1, 2): RIGHT}, limit=1) == {(1, 3): 0, (1, 2): 1, (1, 1): None}


def test_branch_rewards_with_an_oracle_continuation_are_discounted_bfs_distances():
    mazes = _mazes(2, size=7)
    gen = ScriptedGenerator(_oracle_reply(ScriptedGenerator(None).tokenizer))
    config = branching(
        state_prompt=True,
        history="none",
        max_moves=20,
        max_new_tokens=32,
        branch_gamma=0.5,
        branch_reward="value",
    )
    episodes = collect_branches(gen, mazes, config, weights_version=3, group_offset=5)
    assert gen.calls == [sum(int((~m.grid).sum()) - 1 for m in mazes)]  # one batched greedy call, every anchor
    assert len(episodes) == 4 * gen.calls[0]
    groups: dict[int, list] = {}
    for e in episodes:
        groups.setdefault(e.group_id, []).append(e)
    assert len(groups) == gen.calls[0] and all(len(g) == 4 for g in groups.values())
    for i, maze in enumerate(mazes):
        dist = bfs_distances(maze.grid, maze.goal)
        for e in (e for e in episodes if e.maze_id == maze.maze_id):
            (turn,) = e.turns
            cell = tuple(int(x) for x in turn.state.split(","))
            assert e.group_id == (5 + i) * GROUP_CELLS + cell[0] * 7 + cell[1]
            r, c = cell[0] + MOVES[turn.action][0], cell[1] + MOVES[turn.action][1]
            after = cell if maze.grid[r, c] else (r, c)
            # The move, then the oracle's dist(after) moves: gamma ** (moves - 1) = gamma ** dist(after).
            assert turn.reward == pytest.approx(0.5 ** dist[after]) and e.success
            assert turn.logprobs == [] and turn.prompt_ids and e.weights_version == 3
            assert gen.tokenizer.decode(turn.response_ids).startswith(
                f"<action>{['right', 'up', 'left', 'down'][turn.action]}</action>"
            )
    # The best branch of every group is a shortest-path move.
    for group in groups.values():
        best = max(group, key=lambda e: e.turns[0].reward)
        maze = next(m for m in mazes if m.maze_id == best.maze_id)
        dist = bfs_distances(maze.grid, maze.goal)
        cell = tuple(int(x) for x in best.turns[0].state.split(","))
        r, c = cell[0] + MOVES[best.turns[0].action][0], cell[1] + MOVES[best.turns[0].action][1]
        assert dist[r, c] == dist[cell] - 1
    assert rollout_metrics(episodes)["greedy_start_success"] == 1.0
    # the environment turns of the step: the states the policy was asked at (one greedy call per anchor)
    assert rollout_metrics(episodes)["env_turns"] == pytest.approx(gen.calls[0])


def test_branches_past_the_move_limit_earn_nothing_and_groups_normalise():
    maze = _mazes(1, size=9, seed=3)[0]
    gen = ScriptedGenerator(_oracle_reply(ScriptedGenerator(None).tokenizer))
    config = branching(state_prompt=True, history="none", max_moves=3, max_new_tokens=32)
    episodes = collect_groups(gen, [maze], config)  # branching=true selects the branches collector
    dist = bfs_distances(maze.grid, maze.goal)
    for e in episodes:
        cell = tuple(int(x) for x in e.turns[0].state.split(","))
        if dist[cell] > 3:
            assert not e.success and e.turns[0].reward == 0.0
    returns = torch.tensor([e.episode_return for e in episodes])
    adv = grpo_advantages(returns, torch.tensor([e.group_id for e in episodes]))
    for gid in {e.group_id for e in episodes}:
        members = [j for j, e in enumerate(episodes) if e.group_id == gid]
        assert abs(adv[members].sum()) < 1e-6


def test_branching_refuses_history_and_stop_actions():
    assert "needs rollout.history=none" in problems(branching(history="full"))
    assert "require_stop=false" in problems(branching(state_prompt=True, history="none", require_stop=True))
    assert "gamma=0.0 is out of range" in problems(branching(state_prompt=True, history="none", branch_gamma=0.0))
    assert problems(branching(state_prompt=True, history="none")) == ""


def test_malformed_greedy_replies_are_loops_not_crashes():
    maze = _mazes(1, size=7)[0]
    gen = ScriptedGenerator(lambda i, call, p: ("\udcff no move here", "stop"))
    episodes = collect_branches(gen, [maze], branching(state_prompt=True, history="none", max_moves=20))
    # Only the moves into the goal succeed: every other branch continues with a policy that never moves.
    assert {e.success for e in episodes} == {True, False}
    assert all(e.turns[0].reward in (0.0, 1.0) for e in episodes)


def test_best_reward_marks_exactly_the_most_valuable_branches():
    mazes = _mazes(2, size=7, seed=4)
    gen = ScriptedGenerator(_oracle_reply(ScriptedGenerator(None).tokenizer))
    config = branching(state_prompt=True, history="none", max_moves=20, max_new_tokens=32)
    assert config.collector.reward == "best"
    episodes = collect_branches(gen, mazes, config)
    for gid in {e.group_id for e in episodes}:
        group = [e for e in episodes if e.group_id == gid]
        maze = next(m for m in mazes if m.maze_id == group[0].maze_id)
        dist = bfs_distances(maze.grid, maze.goal)
        cell = tuple(int(x) for x in group[0].turns[0].state.split(","))
        for e in group:
            r, c = cell[0] + MOVES[e.turns[0].action][0], cell[1] + MOVES[e.turns[0].action][1]
            after = cell if maze.grid[r, c] else (r, c)
            assert e.turns[0].reward == float(dist[after] == dist[cell] - 1)


def test_anchor_cap_keeps_that_many_anchors_of_each_maze_drawn_from_the_step_seed():
    mazes = [*_mazes(1, size=7, seed=4), *_mazes(1, size=11, seed=5)]
    gen = ScriptedGenerator(_oracle_reply(ScriptedGenerator(None).tokenizer))
    config = branching(state_prompt=True, history="none", max_moves=40, max_new_tokens=32, branch_anchors_per_maze=9)

    def anchors_of(episodes):
        cells = {}
        for e in episodes:
            cells.setdefault(e.maze_id, set()).add(e.turns[0].state)
        return cells

    uncapped = anchors_of(
        collect_branches(gen, mazes, dataclasses.replace(config, collector=BranchSettings(name="branches")))
    )
    # Under the oracle's continuation the four moves' values differ at every cell: the cap draws 9 from all of them.
    assert [len(uncapped[m.maze_id]) for m in mazes] == [int((~m.grid).sum()) - 1 for m in mazes]
    capped = anchors_of(episodes := collect_branches(gen, mazes, config, seed=3))
    assert [len(capped[m.maze_id]) for m in mazes] == [9, 9] and len(episodes) == 4 * 18
    assert all(capped[m.maze_id] <= uncapped[m.maze_id] for m in mazes)
    assert anchors_of(collect_branches(gen, mazes, config, seed=3)) == capped  # the step seed decides
    assert anchors_of(collect_branches(gen, mazes, config, seed=4)) != capped
    # A policy that never moves: only the goal's neighbours have moves worth different amounts. Of those one is
    # kept per maze; the cells whose four branches are all worth 0 stay (their groups carry no advantage).
    still = ScriptedGenerator(lambda i, call, p: ("no move", "stop"))
    one = dataclasses.replace(config, collector=dataclasses.replace(config.collector, anchors_per_maze=1))
    kept = anchors_of(collect_branches(still, mazes, one))
    for m in mazes:
        beside_goal = sum(next_cell(m.grid, m.goal, k) != m.goal for k in range(4))
        assert len(kept[m.maze_id]) == int((~m.grid).sum()) - 1 - (beside_goal - 1)
    assert "anchors_per_maze=-1 is out of range" in problems(
        branching(state_prompt=True, history="none", branch_anchors_per_maze=-1)
    )


def test_sampled_continuations_average_into_the_branch_value():
    mazes = _mazes(2, size=7, seed=1)
    oracle = _oracle_reply(ScriptedGenerator(None).tokenizer)
    # The greedy continuation never moves (call 0); the one sampled continuation is the oracle (call 1).

    class RecordingGenerator(ScriptedGenerator):
        def generate(self, prompts, sampling):
            temperatures.append(sampling.temperature)
            return super().generate(prompts, sampling)

    temperatures = []
    gen = RecordingGenerator(lambda i, call, p: ("no move", "stop") if call == 0 else oracle(i, call, p))
    config = branching(
        state_prompt=True,
        history="none",
        max_moves=20,
        max_new_tokens=32,
        branch_gamma=0.5,
        branch_reward="value",
        branch_worlds=1,
        temperature=0.7,
    )
    episodes = collect_branches(gen, mazes, config)
    anchors = sum(int((~m.grid).sum()) - 1 for m in mazes)
    assert gen.calls == [anchors, anchors] and temperatures == [0.0, 0.7]
    for e in episodes:
        maze = next(m for m in mazes if m.maze_id == e.maze_id)
        dist = bfs_distances(maze.grid, maze.goal)
        cell = tuple(int(x) for x in e.turns[0].state.split(","))
        after = next_cell(maze.grid, cell, e.turns[0].action)
        greedy_value = 1.0 if after == maze.goal else 0.0
        assert e.turns[0].reward == pytest.approx((greedy_value + 0.5 ** dist[after]) / 2)
        assert e.success == (after == maze.goal)  # success is the greedy continuation's
    assert "worlds=-1 is out of range" in problems(branching(state_prompt=True, history="none", branch_worlds=-1))


def _per_cell_moves():
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location(
        "per_cell_moves", Path(__file__).parent.parent / "benchmarks" / "per_cell_moves.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_per_cell_judge_counts_optimal_moves_paths_and_branch_labels():
    """benchmarks/per_cell_moves.py's figures on a T-shaped maze, by hand."""
    judge = _per_cell_moves().judge
    # Open: the corridor (1,1)-(1,2)-(1,3) and a dead end (2,2)-(3,2) below its middle; goal (1,3).
    grid = np.ones((5, 5), dtype=bool)
    grid[1, 1:4] = False
    grid[2:4, 2] = False
    maze = MazeSpec(grid, (1, 1), (1, 3))
    perfect = {(1, 1): RIGHT, (1, 2): RIGHT, (2, 2): UP, (3, 2): UP}
    f = judge([maze], [perfect], max_moves=10)
    assert f["cells"] == 4 and f["optimal_frac"] == 1.0 and f["greedy_solved"] == 1
    assert (f["on_path_cells"], f["off_path_cells"]) == (2, 2)
    assert f["labelled_cells"] == 4 and f["labels_optimal_frac"] == 1.0
    # Wrong at the start and at the dead end's bottom (both bump a wall, which loops): nothing is
    # solved, yet every cell still has a move whose greedy continuation arrives, the optimal one.
    wrong = {(1, 1): LEFT, (1, 2): RIGHT, (2, 2): UP, (3, 2): DOWN}
    f = judge([maze], [wrong], max_moves=10)
    assert f["optimal_frac"] == 0.5 and f["on_path_optimal_frac"] == 0.5 and f["off_path_optimal_frac"] == 0.5
    assert f["greedy_solved"] == 0 and f["labelled_cells"] == 4 and f["labels_optimal_frac"] == 1.0
    # A policy that walks (1,2) down into the dead end and back up loops there: no move from
    # (1,1) or (1,2) reaches the goal except (1,2)'s "right", so only those cells carry a label.
    looping = {(1, 1): RIGHT, (1, 2): DOWN, (2, 2): UP, (3, 2): UP}
    f = judge([maze], [looping], max_moves=10)
    assert f["greedy_solved"] == 0 and f["labelled_cells"] == 1 and f["labels_optimal_frac"] == 1.0
    # With the recipe's move worths given: labelled where some move is worth something; a tie
    # with a wrong move counts as a wrong label.
    worths = [
        {
            (1, 1): np.array([0.9, 0.0, 0.0, 0.0]),
            (1, 2): np.array([1.0, 0.0, 0.0, 0.0]),
            (2, 2): np.zeros(4),
            (3, 2): np.array([0.5, 0.5, 0.0, 0.0]),
        }
    ]
    f = judge([maze], [looping], max_moves=10, worths=worths)
    assert f["labelled_cells"] == 3 and f["labels_optimal_frac"] == pytest.approx(2 / 3)


def test_moves_at_cells_asks_every_open_cell_once():
    from runners.rollout.generation.base import SamplingConfig
    from runners.rollout.collectors.branches import cell_prompts, moves_at_cells

    mazes = _mazes(2, size=7)
    gen = ScriptedGenerator(_oracle_reply(ScriptedGenerator(None).tokenizer))
    config = branching(state_prompt=True, history="none", max_moves=20, max_new_tokens=32)
    anchors, prompts = cell_prompts(mazes, config, gen.encoder)
    moves = moves_at_cells(gen, anchors, prompts, SamplingConfig(max_new_tokens=32, temperature=0.0), len(mazes))
    assert gen.calls == [len(anchors)] and len(anchors) == sum(int((~m.grid).sum()) - 1 for m in mazes)
    for maze, at in zip(mazes, moves):
        dist = bfs_distances(maze.grid, maze.goal)
        assert set(at) == {tuple(map(int, c)) for c in np.argwhere(~maze.grid)} - {maze.goal}
        assert all(dist[next_cell(maze.grid, cell, k)] == dist[cell] - 1 for cell, k in at.items())


def test_state_prompts_make_a_plays_prompt_on_a_cell_the_branch_prompt_of_that_cell():
    """With state_prompt, every turn of a greedy play (moves, wall bumps, any move number) is
    asked exactly the prompt that branching asks on that cell, so the greedy walks that score
    the branches are the policy that is evaluated."""
    from runners.rollout.collect import evaluate_mazes
    from runners.rollout.collectors.branches import cell_prompts

    mazes = _mazes(3, size=7, seed=4)
    moves = ["<action>right</action>", "<action>up</action>", "<action>left</action>", "<action>down</action>"]
    gen = ScriptedGenerator(lambda i, call, p: (moves[(len(p.prompt_ids) * 7 + i + call) % 4], "stop"))
    config = branching(state_prompt=True, history="none", obs_mode="text", max_moves=12, max_new_tokens=16)
    anchors, prompts = cell_prompts(mazes, config, gen.encoder)
    asked = {(mazes[i].maze_id, cell): p.prompt_ids for (i, cell), p in zip(anchors, prompts)}
    episodes = evaluate_mazes(gen, mazes, config)
    turns = [(e.maze_id, t) for e in episodes for t in e.turns]
    assert len(turns) > 20 and len({t.state for _, t in turns}) > 5
    for maze_id, turn in turns:
        cell = tuple(int(x) for x in turn.state.split(","))
        assert turn.prompt_ids == asked[(maze_id, cell)]
    # Without it the move counter makes the same cell a different prompt on later moves.
    plain = branching(history="none", obs_mode="text", max_moves=12, max_new_tokens=16)
    anchors, prompts = cell_prompts(mazes, plain, gen.encoder)
    first = {(mazes[i].maze_id, cell): p.prompt_ids for (i, cell), p in zip(anchors, prompts)}
    later = [(m, t) for m, t in ((e.maze_id, t) for e in evaluate_mazes(gen, mazes, plain) for t in e.turns[1:])]
    assert later and all(t.prompt_ids != first[(m, tuple(int(x) for x in t.state.split(",")))] for m, t in later)


def test_expected_continuation_values_match_a_hand_computation():
    maze = corridor()  # (1,1) - (1,2) - goal (1,3)
    # At (1,1) the policy moves right half the time and otherwise writes something unparseable (stays).
    probs = {(1, 1): np.array([0.5, 0.0, 0.0, 0.0]), (1, 2): np.array([1.0, 0.0, 0.0, 0.0])}
    values = continuation_values(maze, probs, limit=4, gamma=0.9, samples=None)
    # Right from (1,1): one more move to the goal, 0.9. A wall bump stays on (1,1), and from there
    # the goal takes 2 moves with probability 1/2 or 3 with 1/4 within the 3 moves left:
    # 0.5 * 0.9**2 + 0.25 * 0.9**3 = 0.58725.
    assert values[(1, 1)] == pytest.approx([0.9, 0.58725, 0.58725, 0.58725])
    # From (1,2): right lands on the goal (worth 1); a wall bump stays, then right: 0.9; left lands
    # on (1,1) with 3 moves left, as above.
    assert values[(1, 2)] == pytest.approx([1.0, 0.9, 0.58725, 0.9])


def test_moves_only_continuations_renormalise_the_move_replies_by_hand():
    """``moves_only``: the mass of unparseable replies no longer stands still; the same probabilities as above,
    renormalised over the four moves, make the policy move right from both cells."""
    maze = corridor()
    probs = {(1, 1): np.array([0.5, 0.0, 0.0, 0.0]), (1, 2): np.array([0.01, 0.0, 0.0, 0.0])}
    values = continuation_values(maze, probs, limit=4, gamma=0.9, samples=None, moves_only=True)
    # Right from (1,1): 0.9; a wall bump stays, then right, right: 0.81. From (1,2): right is the goal; a bump,
    # then right: 0.9; left to (1,1), then right, right: 0.81.
    assert values[(1, 1)] == pytest.approx([0.9, 0.81, 0.81, 0.81])
    assert values[(1, 2)] == pytest.approx([1.0, 0.9, 0.81, 0.9])
    sampled = continuation_values(maze, probs, limit=4, gamma=0.9, samples=8, moves_only=True)
    assert sampled[(1, 1)] == pytest.approx([0.9, 0.81, 0.81, 0.81])  # every world moves right: no stay outcome
    standing = continuation_values(maze, probs, limit=4, gamma=0.9, samples=None)
    assert standing[(1, 1)][0] < 0.05  # without it, (1,2) writes an unparseable reply 99% of the time
    assert "moves_only renormalises the scored move distribution" in problems(
        branching(history="none", branch_moves_only=True)
    )


def _bfs_move(maze, cell):
    dist = bfs_distances(maze.grid, maze.goal)
    return min(
        range(4), key=lambda a: dist[next_cell(maze.grid, cell, a)] if next_cell(maze.grid, cell, a) != cell else 10**6
    )


def _random_policy(maze, rng, concentration):
    cells = [tuple(int(x) for x in c) for c in np.argwhere(~maze.grid) if tuple(int(x) for x in c) != maze.goal]
    return {c: rng.dirichlet(np.full(5, concentration))[:4] for c in cells}  # the 5th outcome: an unparseable reply


def test_sampled_worlds_never_label_a_wrong_move_and_more_worlds_label_more_cells():
    rng = np.random.default_rng(0)
    labelled = {0: 0, 8: 0, 64: 0, 1024: 0}
    for maze in _mazes(6, size=9, seed=2):
        probs = _random_policy(maze, rng, concentration=0.3)
        for samples in labelled:
            values = continuation_values(
                maze, probs, limit=20, gamma=0.9, samples=samples, rng=np.random.default_rng(samples)
            )
            for cell, v in values.items():
                if v.max() > 0:
                    labelled[samples] += 1
                    # In a perfect maze every world's successful walk passes the goal-ward neighbour
                    # without looping, so the goal-ward move is strictly the best one.
                    assert np.argmax(v) == _bfs_move(maze, cell) and (v < v.max()).sum() == 3
    assert labelled[0] < labelled[8] < labelled[64] < labelled[1024]


def test_the_greedy_world_alone_is_the_greedy_walk():
    rng = np.random.default_rng(1)
    maze = _mazes(1, size=9, seed=5)[0]
    probs = _random_policy(maze, rng, concentration=1.0)
    values = continuation_values(maze, probs, limit=20, gamma=0.5, samples=0)
    greedy = {c: (None if 1 - p.sum() > p.max() else int(np.argmax(p))) for c, p in probs.items()}
    togo = greedy_moves_to_goal(maze, greedy, limit=20)
    for cell, v in values.items():
        for k in range(4):
            rest = togo.get(next_cell(maze.grid, cell, k))
            assert v[k] == (0.0 if rest is None or rest + 1 > 20 else 0.5**rest)


def test_expected_values_label_the_shortest_path_move_whatever_the_policy():
    # Why "expected" is a diagnostic and not RL: the policy's probabilities do not change its labels.
    rng = np.random.default_rng(3)
    for maze in _mazes(3, size=9, seed=7):
        values = continuation_values(
            maze, _random_policy(maze, rng, concentration=0.2), limit=40, gamma=0.9, samples=None
        )
        assert all(np.argmax(v) == _bfs_move(maze, cell) for cell, v in values.items())


def test_sampled_branches_score_the_replies_once_and_label_from_their_distribution():
    mazes = _mazes(2, size=7, seed=1)

    class DistributionGenerator(ScriptedGenerator):
        """Greedy replies never move; scored replies: 60% the shortest-path move, the rest spread."""

        def score_replies(self, prompts, replies, temperature=1.0):
            self.scored.append((len(prompts), len(replies), temperature))
            out = []
            for p in prompts:
                best = oracle_action(p)
                out.append([float(np.log(0.6 if k == best else 0.1)) for k in range(4)])
            return out

    oracle = _oracle_reply(ScriptedGenerator(None).tokenizer)
    oracle_action = lambda p: ["right", "up", "left", "down"].index(
        oracle(0, 0, p)[0].split("<action>")[1].split("<")[0]
    )  # noqa: E731
    gen = DistributionGenerator(lambda i, call, p: ("no move", "stop"))
    gen.scored = []
    config = branching(
        state_prompt=True,
        history="none",
        max_moves=20,
        max_new_tokens=32,
        branch_continuation="sampled",
        branch_samples=16,
        temperature=0.7,
    )
    episodes = collect_branches(gen, mazes, config)
    anchors = sum(int((~m.grid).sum()) - 1 for m in mazes)
    # one scoring call labels the branches; one greedy call measures what evaluation would play
    assert gen.calls == [anchors] and gen.scored == [(anchors, 4, 0.7)]
    metrics = rollout_metrics(episodes)
    assert metrics["greedy_start_success"] == 0.0  # greedy replies never move: only moves onto the goal succeed
    by_id = {m.maze_id: m for m in mazes}
    for e in episodes:
        maze, turn = by_id[e.maze_id], e.turns[0]
        cell = tuple(int(x) for x in turn.state.split(","))
        assert e.success == (next_cell(maze.grid, cell, turn.action) == maze.goal)
    assert metrics["move_mass"] == pytest.approx(0.9)  # 0.6 + 3 x 0.1 of a sampled reply is a move
    assert metrics["env_turns"] == pytest.approx(anchors)  # the measurement is not experience
    rewarded = 0
    for e in episodes:
        maze = next(m for m in mazes if m.maze_id == e.maze_id)
        cell = tuple(int(x) for x in e.turns[0].state.split(","))
        if e.turns[0].reward:
            rewarded += 1
            assert e.turns[0].action == _bfs_move(maze, cell)
    assert rewarded > anchors // 2  # with the greedy world right everywhere, every cell is labelled
    oracle = branching(state_prompt=True, history="none", branch_continuation="oracle")
    assert "continuation='oracle' is not allowed" in problems(oracle)
    both = branching(state_prompt=True, history="none", branch_continuation="sampled", branch_worlds=2)
    assert "worlds adds greedy-style continuations" in problems(both)


def test_settled_cells_are_left_out_and_counted():
    mazes = _mazes(2, size=7, seed=1)
    oracle = _oracle_reply(ScriptedGenerator(None).tokenizer)
    names = ["right", "up", "left", "down"]

    class DistributionGenerator(ScriptedGenerator):
        def score_replies(self, prompts, replies, temperature=1.0):
            # The shortest-path move holds 0.9 of 0.96 on the first maze's cells, 0.5 of 0.95 on the second's.
            return [
                [
                    float(
                        np.log(
                            (0.9 if self.first(p) else 0.5)
                            if k == names.index(oracle(0, 0, p)[0].split("<action>")[1].split("<")[0])
                            else (0.02 if self.first(p) else 0.15)
                        )
                    )
                    for k in range(4)
                ]
                for p in prompts
            ]

    anchors = [int((~m.grid).sum()) - 1 for m in mazes]
    gen = DistributionGenerator(lambda i, call, p: ("no move", "stop"))
    first_prompts = set()
    gen.first = lambda p: tuple(p.prompt_ids) in first_prompts
    from runners.rollout.collectors.branches import cell_prompts

    config = branching(
        state_prompt=True,
        history="none",
        max_moves=20,
        max_new_tokens=32,
        branch_continuation="sampled",
        branch_samples=4,
        branch_settled=0.8,
    )
    first_prompts.update(tuple(p.prompt_ids) for p in cell_prompts(mazes[:1], config, gen.encoder)[1])
    episodes = collect_branches(gen, mazes, config)
    assert {e.maze_id for e in episodes} == {mazes[1].maze_id} and len(episodes) == 4 * anchors[1]
    assert rollout_metrics(episodes)["branch_settled_frac"] == pytest.approx(anchors[0] / sum(anchors))
    # Every cell settled: nothing to train, and the algorithm's update says so instead of failing.
    config_all = dataclasses.replace(config, collector=dataclasses.replace(config.collector, settled=0.4))
    assert collect_branches(gen, mazes, config_all) == []
    assert "settled needs the scored move distribution" in problems(
        branching(state_prompt=True, history="none", branch_settled=0.9)
    )


def test_settled_is_the_best_moves_share_of_the_four_and_beats_malformed_replies():
    from runners.rollout.collectors.branches import is_settled

    best_first = [True, False, False, False]
    # 0.81 of 0.87 on the four moves is a 93% share: settled at 0.9, although its raw probability is below 0.9.
    assert is_settled(np.array([0.81, 0.02, 0.02, 0.02]), best_first, 0.9)
    assert not is_settled(np.array([0.60, 0.20, 0.10, 0.05]), best_first, 0.9)  # a 63% share
    # Two equally good moves count together (0.45 + 0.45 of 0.95).
    assert is_settled(np.array([0.45, 0.45, 0.03, 0.02]), [True, True, False, False], 0.9)
    # All of the four moves' mass on the best, but malformed replies hold more (0.7 > 0.3): greedy would not write it.
    assert not is_settled(np.array([0.3, 0.0, 0.0, 0.0]), best_first, 0.9)
    assert not is_settled(np.zeros(4), best_first, 0.9)


def test_sampled_worlds_do_not_depend_on_how_a_step_is_sliced():
    mazes = _mazes(3, size=7, seed=9)
    rng = np.random.default_rng(0)
    table = {}

    class DistributionGenerator(ScriptedGenerator):
        def score_replies(self, prompts, replies, temperature=1.0):
            return [table.setdefault(tuple(p.prompt_ids), list(np.log(rng.dirichlet(np.ones(5))[:4]))) for p in prompts]

    gen = DistributionGenerator(lambda i, call, p: ("no move", "stop"))
    config = branching(
        state_prompt=True,
        history="none",
        max_moves=20,
        branch_continuation="sampled",
        branch_samples=8,
        branch_reward="value",
    )
    whole = collect_branches(gen, mazes, config, seed=5, group_offset=30)
    # A worker holding the last two mazes gets a different env seed and group offset, like play_step_mazes gives it.
    sliced = collect_branches(gen, mazes[:1], config, seed=5, group_offset=30) + collect_branches(
        gen, mazes[1:], config, seed=7, group_offset=31
    )
    assert [(e.group_id, e.turns[0].reward) for e in whole] == [(e.group_id, e.turns[0].reward) for e in sliced]


def test_play_prompts_ask_each_cell_with_a_counter_and_the_feedback_of_arriving_there():
    """branch_prompts="play": an anchor's prompt is one a play shows on that cell after some moves -- a move counter
    drawn over the whole budget and, past move 1, "Moved <dir>." from an open neighbour; drawn from the step seed."""
    import re

    from runners.rollout.collectors.branches import cell_prompts

    mazes = _mazes(3, size=7, seed=4)
    gen = ScriptedGenerator(_oracle_reply(ScriptedGenerator(None).tokenizer))
    config = branching(history="none", obs_mode="text", max_moves=12, max_new_tokens=16, branch_prompts="play")
    anchors, prompts = cell_prompts(mazes, config, gen.encoder, seed=5, prompt_kind=config.collector.prompts)
    texts = [gen.encoder.tokenizer.decode(p.prompt_ids) for p in prompts]
    counters = set()
    for (i, cell), text in zip(anchors, texts):
        move = int(re.search(r"This is move (\d+)\. You have (\d+) moves left", text).group(1))
        assert int(re.search(r"You have (\d+) moves left", text).group(1)) == 12 - (move - 1)
        counters.add(move)
        moved = re.search(r"Environment feedback: Moved (right|up|left|down)\.", text)
        assert (moved is None) == (move == 1)
        if moved:  # the cell it names the agent came from is open
            dr, dc = MOVES[["right", "up", "left", "down"].index(moved.group(1))]
            assert not mazes[i].grid[cell[0] - dr, cell[1] - dc]
    assert len(counters) >= 8 and min(counters) >= 1 and max(counters) <= 12
    again = [p.prompt_ids for p in cell_prompts(mazes, config, gen.encoder, 5, config.collector.prompts)[1]]
    other = [p.prompt_ids for p in cell_prompts(mazes, config, gen.encoder, 6, config.collector.prompts)[1]]
    assert again == [p.prompt_ids for p in prompts] and other != again
    first = branching(history="none", obs_mode="text", max_moves=12, max_new_tokens=16)
    assert all(
        "This is move 1." in gen.encoder.tokenizer.decode(p.prompt_ids)
        for p in cell_prompts(mazes, first, gen.encoder)[1]
    )
    assert "prompts='last' is not allowed; choose one of first, play" in problems(
        branching(history="none", branch_prompts="last")
    )


@pytest.mark.quick
def test_cell_prompts_keep_each_frame_losslessly_in_a_third_of_its_bytes(tmp_path):
    """The anchors' frames live through the update (two steps' worth with the overlap): each is kept as a palette
    image that decodes to exactly the frame the env drew on that cell."""
    from PIL import Image

    from mazegym.maze import MazeSpec
    from model_helpers import tiny_maze_vlm
    from runners.rollout.collectors.branches import cell_prompts
    from runners.rollout.env import make_env
    from runners.rollout.generation.prompts import (
        ChatEncoder,
        image_token_id_of,
        load_image_processor,
        load_tokenizer,
        to_pil,
    )

    model_dir = tiny_maze_vlm(tmp_path / "m")
    encoder = ChatEncoder(load_tokenizer(model_dir), load_image_processor(model_dir), image_token_id_of(model_dir))
    mazes = _mazes(2, size=7, seed=3)
    config = branching(state_prompt=True, history="none", obs_mode="image", max_moves=20, max_new_tokens=32)
    anchors, prompts = cell_prompts(mazes, config, encoder)
    assert len(prompts) == sum(int((~m.grid).sum()) - 1 for m in mazes)
    env = make_env(7, config.max_moves, config.obs_mode, env_kwargs=config.env_kwargs)
    for (i, cell), prompt in zip(anchors, prompts):
        (image,) = prompt.images
        drawn = env.reset(options={"maze": MazeSpec(mazes[i].grid, cell, mazes[i].goal)})[0]["image"]
        assert isinstance(image, Image.Image) and image.mode == "P"
        assert len(image.tobytes()) * 3 == drawn.nbytes
        assert np.array_equal(np.asarray(to_pil(image)), drawn)


@pytest.mark.quick
def test_a_frame_that_no_palette_holds_exactly_is_kept_as_a_plain_copy():
    from runners.rollout.generation.prompts import compact_frame, to_pil

    noise = np.random.default_rng(0).integers(0, 256, size=(30, 30, 3), dtype=np.uint8)
    kept = compact_frame(noise)
    assert isinstance(kept, np.ndarray) and np.array_equal(kept, noise) and kept is not noise
    # Two colours one step apart, which PIL's palette matching maps to one entry: kept exactly all the same.
    close = np.zeros((4, 4, 3), dtype=np.uint8)
    close[:2] = (200, 100, 50)
    close[2:] = (201, 100, 50)
    assert np.array_equal(np.asarray(to_pil(compact_frame(close))), close)
