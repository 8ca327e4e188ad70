"""Losses and aggregation modes against hand-computed values."""

import math

import pytest
import torch

from algos.losses import (
    aggregate,
    entropy_bonus,
    group_diagnostics,
    k3_kl,
    ppo_clip_loss,
    value_loss,
    zero_variance_mask,
)

# Two rows of uneven length: row 0 has 3 tokens, row 1 has 1 token (then padding).
LOSS = torch.tensor([[1.0, 2.0, 3.0], [4.0, 99.0, 99.0]])
MASK = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])


def test_token_mean():
    assert aggregate(LOSS, MASK, "token-mean").item() == pytest.approx((1 + 2 + 3 + 4) / 4)


def test_seq_mean_token_mean():
    assert aggregate(LOSS, MASK, "seq-mean-token-mean").item() == pytest.approx((2.0 + 4.0) / 2)


def test_seq_mean_token_sum_norm():
    assert aggregate(LOSS, MASK, "seq-mean-token-sum-norm").item() == pytest.approx(10 / (2 * 3))
    assert aggregate(LOSS, MASK, "seq-mean-token-sum-norm", max_len=5).item() == pytest.approx(10 / (2 * 5))


def test_empty_rows_do_not_count_as_sequences():
    mask = torch.tensor([[1.0, 1.0, 1.0], [0.0, 0.0, 0.0]])
    assert aggregate(LOSS, mask, "seq-mean-token-mean").item() == pytest.approx(2.0)


def test_micro_batches_add_up_to_the_minibatch_loss():
    for agg in ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"):
        whole = aggregate(LOSS, MASK, agg, max_len=3)
        seqs = 2.0
        parts = sum(
            aggregate(LOSS[i : i + 1], MASK[i : i + 1], agg, max_len=3, total_tokens=4.0, total_seqs=seqs)
            for i in range(2)
        )
        assert parts.item() == pytest.approx(whole.item()), agg


def test_unknown_agg_raises():
    with pytest.raises(ValueError, match="token-mean"):
        aggregate(LOSS, MASK, "mean")


def test_ppo_clip_by_hand_asymmetric():
    # ratios e^{lp - old}: 1.5 (A>0 -> clipped at 1.28), 0.5 (A>0 -> unclipped 0.5), 0.5 (A<0 -> clipped 0.8)
    old = torch.zeros(1, 3)
    lp = torch.log(torch.tensor([[1.5, 0.5, 0.5]]))
    adv = torch.tensor([[1.0, 1.0, -2.0]])
    mask = torch.ones(1, 3)
    loss, m = ppo_clip_loss(lp, old, adv, mask, eps_low=0.2, eps_high=0.28, agg="token-mean")
    per_token = [-1.28, -0.5, 2.0 * 0.8]
    assert loss.item() == pytest.approx(sum(per_token) / 3, rel=1e-6)
    assert m["clip_frac"] == pytest.approx(2 / 3)
    k3 = [(r - 1) - math.log(r) for r in (1.5, 0.5, 0.5)]
    assert m["approx_kl"] == pytest.approx(sum(k3) / 3, rel=1e-5)


def test_ppo_clip_gradient_is_zero_where_clipped():
    lp = torch.log(torch.tensor([[1.5, 1.1]])).requires_grad_()
    loss, _ = ppo_clip_loss(lp, torch.zeros(1, 2), torch.tensor([1.0]), torch.ones(1, 2), 0.2, 0.2)
    loss.backward()
    assert lp.grad[0, 0].item() == 0.0
    assert lp.grad[0, 1].item() == pytest.approx(-1.1 / 2)


def test_on_policy_ratio_is_one_and_clipped_equals_unclipped():
    torch.manual_seed(0)
    lp = torch.randn(4, 5)
    adv = torch.randn(4)
    mask = (torch.rand(4, 5) > 0.3).float()
    loss, m = ppo_clip_loss(lp, lp.clone(), adv, mask, 0.2, 0.28, agg="seq-mean-token-mean")
    unclipped = aggregate(-adv[:, None].expand(4, 5), mask, "seq-mean-token-mean")
    assert loss.item() == pytest.approx(unclipped.item(), abs=1e-7)
    assert m["clip_frac"] == 0.0 and m["approx_kl"] == 0.0 and m["ratio_mean"] == 1.0


def test_masked_positions_never_matter():
    lp = torch.tensor([[0.0, 50.0]])
    loss, m = ppo_clip_loss(lp, torch.zeros(1, 2), torch.tensor([1.0]), torch.tensor([[1.0, 0.0]]))
    assert loss.item() == pytest.approx(-1.0) and m["clip_frac"] == 0.0


def test_k3_kl_by_hand():
    lp, ref = torch.tensor([math.log(0.5)]), torch.tensor([math.log(0.25)])
    assert k3_kl(lp, ref).item() == pytest.approx(0.5 - math.log(0.5) - 1.0)
    assert k3_kl(lp, lp).item() == 0.0
    assert (k3_kl(torch.randn(100), torch.randn(100)) >= 0).all()


def test_entropy_bonus_aggregates():
    assert entropy_bonus(LOSS, MASK, "token-mean").item() == pytest.approx(2.5)


def test_value_loss_clipped_by_hand():
    v, old, ret = torch.tensor([1.0, 0.0]), torch.tensor([0.5, 0.0]), torch.tensor([0.0, 1.0])
    # row 0: unclipped (1-0)^2 = 1, clipped v=0.7 -> 0.49, max 1.  row 1: 1 both ways
    assert value_loss(v, old, ret, clip_eps=0.2).item() == pytest.approx(0.5 * (1 + 1) / 2)
    # row 0: unclipped 0.2^2, clipped to 0.3 -> 0.09 wins; row 1: unclipped 0, clipped to 0.2 -> 0.64
    v2 = torch.tensor([0.2, 1.0])
    assert value_loss(v2, old, ret, clip_eps=0.2).item() == pytest.approx(0.5 * (0.09 + 0.64) / 2)
    assert value_loss(v2, old, ret, clip_eps=None).item() == pytest.approx(0.5 * 0.04 / 2)


def test_zero_variance_mask_drops_constant_and_single_groups():
    returns = torch.tensor([1.0, 1.0, 0.0, 1.0, 5.0])
    groups = torch.tensor([0, 0, 1, 1, 2])
    assert zero_variance_mask(returns, groups).tolist() == [False, False, True, True, False]


def test_group_diagnostics_by_hand():
    d = group_diagnostics(torch.tensor([1.0, 1.0, 0.0, 1.0]), torch.tensor([0, 0, 1, 1]))
    assert d["reward_var_mean"] == pytest.approx((0.0 + 0.25) / 2)
    assert d["zero_var_group_frac"] == pytest.approx(0.5)


def test_dual_clip_caps_negative_advantage_losses():
    # ratio 10 with A = -1: standard clip gives loss 10 (max(10, 1.2)); dual clip caps it at 3
    lp, old = torch.log(torch.tensor([[10.0, 10.0]])), torch.zeros(1, 2)
    adv, mask = torch.tensor([[-1.0, 1.0]]), torch.ones(1, 2)
    plain, _ = ppo_clip_loss(lp, old, adv, mask, 0.2, 0.2, agg="token-mean")
    dual, _ = ppo_clip_loss(lp, old, adv, mask, 0.2, 0.2, agg="token-mean", dual_clip=3.0)
    assert plain.item() == pytest.approx((10.0 - 1.2) / 2)
    assert dual.item() == pytest.approx((3.0 - 1.2) / 2)
