"""Advantage estimators against numbers computed by hand."""

import math

import pytest
import torch

from algos.advantages import (
    anchor_state_advantages,
    discounted_returns_to_go,
    dr_grpo_advantages,
    gae,
    grpo_advantages,
    rloo_advantages,
    turn_level_advantages,
    whiten,
)


def test_grpo_uses_unbiased_group_std():
    # group 0: [1, 0, 0] -> mean 1/3, unbiased var = (4/9 + 1/9 + 1/9) / 2 = 1/3
    # group 1: [2, 4]    -> mean 3,   unbiased var = (1 + 1) / 1 = 2
    adv = grpo_advantages(torch.tensor([1.0, 0.0, 0.0, 2.0, 4.0]), torch.tensor([0, 0, 0, 1, 1]), eps=0.0)
    s0, s1 = math.sqrt(1 / 3), math.sqrt(2.0)
    expected = [(2 / 3) / s0, (-1 / 3) / s0, (-1 / 3) / s0, -1 / s1, 1 / s1]
    assert adv.tolist() == pytest.approx(expected, rel=1e-6)


def test_grpo_groups_need_not_be_contiguous_and_ids_are_arbitrary():
    a = grpo_advantages(torch.tensor([1.0, 5.0, 0.0, 7.0]), torch.tensor([42, -3, 42, -3]), eps=0.0)
    # group 42: [1, 0] -> mean 0.5, std sqrt(0.5); group -3: [5, 7] -> mean 6, std sqrt(2)
    assert a.tolist() == pytest.approx(
        [0.5 / math.sqrt(0.5), -1 / math.sqrt(2.0), -0.5 / math.sqrt(0.5), 1 / math.sqrt(2.0)]
    )


def test_single_sample_and_all_equal_groups_get_zero():
    returns = torch.tensor([3.0, 1.0, 1.0, 1.0, 0.0, 1.0])
    groups = torch.tensor([0, 1, 1, 1, 2, 2])
    for fn in (grpo_advantages, dr_grpo_advantages, rloo_advantages):
        adv = fn(returns, groups)
        assert torch.isfinite(adv).all()
        assert adv[:4].tolist() == [0.0, 0.0, 0.0, 0.0], fn.__name__
        assert adv[4] < 0 < adv[5]


def test_grpo_eps_keeps_near_constant_groups_finite():
    adv = grpo_advantages(torch.tensor([1.0, 1.0 + 1e-9]), torch.tensor([0, 0]), eps=1e-6)
    assert adv.abs().max() < 1e-2


def test_dr_grpo_is_mean_only():
    adv = dr_grpo_advantages(torch.tensor([1.0, 0.0, 0.0, 2.0, 4.0]), torch.tensor([0, 0, 0, 1, 1]))
    assert adv.tolist() == pytest.approx([2 / 3, -1 / 3, -1 / 3, -1.0, 1.0])


def test_rloo_leave_one_out_baseline():
    # [1, 0, 0]: 1 - 0 = 1; 0 - (1+0)/2 = -0.5 (twice). [2, 4]: 2-4 = -2, 4-2 = 2
    adv = rloo_advantages(torch.tensor([1.0, 0.0, 0.0, 2.0, 4.0]), torch.tensor([0, 0, 0, 1, 1]))
    assert adv.tolist() == pytest.approx([1.0, -0.5, -0.5, -2.0, 2.0])


def test_gae_by_hand_with_episode_boundary():
    # episode A: r=[0, 1], V=[0.5, 0.8], terminal; episode B: r=[2], V=[1.0], terminal.
    gamma, lam = 0.9, 0.8
    adv, ret = gae(
        torch.tensor([0.0, 1.0, 2.0]), torch.tensor([0.5, 0.8, 1.0]), torch.tensor([0.0, 1.0, 1.0]), gamma, lam
    )
    d1 = 1.0 - 0.8  # last step of A: no bootstrap
    d0 = 0.0 + gamma * 0.8 - 0.5
    a0 = d0 + gamma * lam * d1
    d2 = 2.0 - 1.0  # B never sees A's values
    assert adv.tolist() == pytest.approx([a0, d1, d2])
    assert ret.tolist() == pytest.approx([a0 + 0.5, d1 + 0.8, d2 + 1.0])


def test_gae_lambda_one_gives_monte_carlo_returns():
    r = torch.tensor([0.0, 0.0, 1.0])
    adv, ret = gae(r, torch.tensor([0.3, 0.2, 0.1]), torch.tensor([0.0, 0.0, 1.0]), gamma=0.5, lam=1.0)
    assert ret.tolist() == pytest.approx([0.25, 0.5, 1.0])


def test_gae_bootstraps_unfinished_tail():
    adv, _ = gae(torch.tensor([1.0]), torch.tensor([0.0]), torch.tensor([0.0]), gamma=0.5, lam=0.9, last_value=2.0)
    assert adv.item() == pytest.approx(1.0 + 0.5 * 2.0)


def test_discounted_returns_to_go():
    assert discounted_returns_to_go([1.0, 0.0, 2.0], gamma=0.5).tolist() == pytest.approx([1.5, 1.0, 2.0])
    assert discounted_returns_to_go([], 0.9).numel() == 0


def test_turn_level_episode_baseline_by_hand():
    # group 0: episode A rewards [0, 1] (G = [0.9, 1]), episode B rewards [0, 0, 0] (G = [0, 0, 0]).
    adv = turn_level_advantages([[0.0, 1.0], [0.0, 0.0, 0.0]], [0, 0], gamma=0.9, norm_by_std=False)
    mean_g0 = (0.9 + 0.0) / 2
    assert adv[0].tolist() == pytest.approx([0.9 - mean_g0, 1.0 - mean_g0])
    assert adv[1].tolist() == pytest.approx([-mean_g0] * 3)
    std = math.sqrt(((0.9 - mean_g0) ** 2 + mean_g0**2) / 1)
    normed = turn_level_advantages([[0.0, 1.0], [0.0, 0.0, 0.0]], [0, 0], gamma=0.9, eps=0.0)
    assert normed[0].tolist() == pytest.approx([(0.9 - mean_g0) / std, (1.0 - mean_g0) / std])


def test_turn_level_reduces_to_grpo_with_gamma_one_and_final_reward():
    rewards = [[0.0, 0.0, 1.0], [0.0, 0.0], [0.0, 1.0], [0.0]]
    groups = [0, 0, 1, 1]
    per_turn = turn_level_advantages(rewards, groups, gamma=1.0)
    episode = grpo_advantages(torch.tensor([1.0, 0.0, 1.0, 0.0]), torch.tensor(groups))
    for turns, a in zip(per_turn, episode):
        assert torch.allclose(turns, a.expand_as(turns))


def test_turn_level_turn_index_baseline_by_hand():
    # turn 0: G = [1, 0] -> centred [0.5, -0.5]; turn 1 exists only in episode A -> 0.
    adv = turn_level_advantages([[0.0, 1.0], [0.0]], [0, 0], gamma=1.0, norm_by_std=False, baseline="turn_index")
    assert adv[0].tolist() == pytest.approx([0.5, 0.0])
    assert adv[1].tolist() == pytest.approx([-0.5])
    with pytest.raises(ValueError, match="baseline"):
        turn_level_advantages([[1.0]], [0], baseline="nope")


def test_whiten():
    w = whiten(torch.tensor([1.0, 2.0, 3.0]))
    assert w.mean().item() == pytest.approx(0.0, abs=1e-6)
    assert w.std(unbiased=False).item() == pytest.approx(1.0, rel=1e-5)


def test_turn_level_equal_episode_returns_fall_back_to_pooled_turn_std():
    # Both episodes: rewards [0.5, 0.5] with gamma 0.5 -> G = [0.75, 0.5]; G_0 equal -> std 0.
    adv = turn_level_advantages([[0.5, 0.5], [0.5, 0.5]], [0, 0], gamma=0.5, eps=0.0)
    pooled = torch.tensor([0.75, 0.5, 0.75, 0.5], dtype=torch.float64).std().item()
    assert adv[0].tolist() == pytest.approx([0.0, -0.25 / pooled])
    assert max(a.abs().max().item() for a in adv) < 10


def test_anchor_state_advantages_by_hand():
    # gamma 0.5, reward 1 at the goal. Returns-to-go: ep0 [0.25, 0.5, 1], ep1 [0.5, 1], ep2 [0, 0, 0].
    # anchor "a" (ep0 t0, ep1 t0, ep2 t0): [0.25, 0.5, 0] -> mean 0.25, unbiased std 0.25 -> [0, 1, -1]
    # anchor "b" (ep0 t1, ep2 t1, ep2 t2): [0.5, 0, 0] -> mean 1/6, std sqrt(1/12)
    # anchor "c" (ep0 t2, ep1 t1): [1, 1] -> all equal -> 0
    out = anchor_state_advantages(
        [[0, 0, 1], [0, 1], [0, 0, 0]], [["a", "b", "c"], ["a", "c"], ["a", "b", "b"]], [0, 0, 0], gamma=0.5
    )
    sb = math.sqrt(1 / 12)
    assert out[0].tolist() == pytest.approx([0.0, (1 / 3) / sb, 0.0], abs=1e-4)
    assert out[1].tolist() == pytest.approx([1.0, 0.0], abs=1e-4)
    assert out[2].tolist() == pytest.approx([-1.0, (-1 / 6) / sb, (-1 / 6) / sb], abs=1e-4)


def test_anchor_states_never_mix_groups_and_unknown_states_get_zero():
    # Same cell name in two different mazes (groups) is not the same state; "" means unknown.
    out = anchor_state_advantages([[1.0], [0.0], [1.0], [0.0]], [["x"], ["x"], ["x"], [""]], [0, 0, 1, 1], gamma=1.0)
    s = math.sqrt(0.5)
    assert [o.item() for o in out] == pytest.approx([0.5 / s, -0.5 / s, 0.0, 0.0], abs=1e-4)


def test_anchor_states_reward_the_shorter_way_when_every_play_succeeds():
    # Both plays from cell "s" reach the goal; the 1-move one must beat the 3-move detour.
    out = anchor_state_advantages(
        [[1.0], [0.0, 0.0, 1.0]], [["s"], ["s", "t", "u"]], [0, 0], gamma=0.9, norm_by_std=False
    )
    assert out[0].item() == pytest.approx((1 - 0.81) / 2)
    assert out[1][0].item() == pytest.approx(-(1 - 0.81) / 2)
    assert out[1][1:].tolist() == [0.0, 0.0]


def test_anchor_states_length_mismatch_is_an_error():
    with pytest.raises(ValueError, match="state keys"):
        anchor_state_advantages([[0.0, 1.0]], [["a"]], [0])
