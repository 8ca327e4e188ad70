"""Policy-gradient losses, their aggregation modes, and collapse diagnostics.

All per-token tensors are ``[B, L]`` with a float ``mask`` (1 on scored response tokens).
In this multi-turn project a *sequence* (for the ``seq-mean-*`` modes) is one row, i.e. one
turn, never a whole episode.

Aggregation modes (names as in verl):

- ``token-mean`` (DAPO): ``sum(l * m) / sum(m)``; every token weighs the same.
- ``seq-mean-token-mean`` (GRPO paper): mean over rows of each row's token mean.
- ``seq-mean-token-sum-norm`` (Dr.GRPO): ``sum(l * m) / (B * max_len)``, a constant normaliser
  that removes the length bias; ``max_len`` defaults to ``L``.

For gradient accumulation, pass ``total_tokens`` / ``total_seqs`` of the whole minibatch so
the micro-batch losses add up to the minibatch loss.
"""

from __future__ import annotations

import torch

AGG_MODES = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm")


def aggregate(
    values: torch.Tensor,
    mask: torch.Tensor,
    agg: str = "token-mean",
    max_len: int | None = None,
    total_tokens: float | None = None,
    total_seqs: float | None = None,
) -> torch.Tensor:
    """Reduce a [B, L] per-token loss to a scalar with one of :data:`AGG_MODES`."""
    mask = mask.to(values.dtype)
    masked = values * mask
    if agg == "token-mean":
        denom = mask.sum() if total_tokens is None else torch.as_tensor(float(total_tokens))
        return masked.sum() / denom.clamp(min=1.0)
    if agg == "seq-mean-token-mean":
        lengths = mask.sum(dim=-1)
        per_seq = masked.sum(dim=-1) / lengths.clamp(min=1.0)
        num_seqs = (lengths > 0).sum() if total_seqs is None else torch.as_tensor(float(total_seqs))
        return per_seq.sum() / num_seqs.clamp(min=1.0)
    if agg == "seq-mean-token-sum-norm":
        num_seqs = values.shape[0] if total_seqs is None else total_seqs
        length = values.shape[-1] if max_len is None else max_len
        return masked.sum() / max(float(num_seqs) * float(length), 1.0)
    raise ValueError(f"unknown loss aggregation {agg!r}; choose one of {AGG_MODES}")


def masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of ``values`` over positions where ``mask`` is 1 (0 when the mask is empty)."""
    mask = mask.to(values.dtype)
    return (values * mask).sum() / mask.sum().clamp(min=1.0)


def ppo_clip_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    eps_low: float = 0.2,
    eps_high: float = 0.2,
    agg: str = "token-mean",
    max_len: int | None = None,
    total_tokens: float | None = None,
    total_seqs: float | None = None,
    dual_clip: float | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """PPO-clip with asymmetric clipping: ``-min(rho A, clip(rho, 1-eps_low, 1+eps_high) A)``.

    ``dual_clip=c`` (Ye et al. 2020, verl's ``clip_ratio_c``; needs c > 1) also caps the loss of
    negative-advantage tokens at ``-c A``: without it a token whose probability rose a lot
    since sampling (huge ratio) contributes an unbounded loss and gradient.

    ``advantages`` is [B] (one per row, broadcast over tokens) or [B, L]. Returns the
    aggregated loss and metrics: ``clip_frac`` (fraction of tokens where the clipped term is
    the active one), ``approx_kl`` (k3 estimate of KL(old || new), Schulman 2020) and
    ``ratio_mean``.
    """
    if advantages.dim() == 1:
        advantages = advantages[:, None]
    advantages = advantages.to(logprobs.dtype)
    log_ratio = (logprobs - old_logprobs) * mask
    ratio = torch.exp(log_ratio)
    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1.0 - eps_low, 1.0 + eps_high)
    per_token = torch.maximum(unclipped, clipped)
    if dual_clip is not None:
        capped = torch.minimum(per_token, -advantages * dual_clip)
        per_token = torch.where(advantages < 0, capped, per_token)
    loss = aggregate(per_token, mask, agg, max_len, total_tokens, total_seqs)
    with torch.no_grad():
        metrics = {
            "clip_frac": masked_mean((clipped > unclipped).float(), mask).item(),
            "approx_kl": masked_mean(ratio - 1.0 - log_ratio, mask).item(),
            "ratio_mean": masked_mean(ratio, mask).item(),
        }
    return loss, metrics


def k3_kl(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """Per-token k3 estimator of KL(pi || pi_ref): ``exp(ref - lp) - (ref - lp) - 1`` (>= 0)."""
    diff = ref_logprobs - logprobs
    return torch.exp(diff) - diff - 1.0


def entropy_bonus(entropy: torch.Tensor, mask: torch.Tensor, agg: str = "token-mean", **kw) -> torch.Tensor:
    """Aggregated policy entropy; the loss *subtracts* ``entropy_coef *`` this."""
    return aggregate(entropy, mask, agg, **kw)


def value_loss(
    values: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    clip_eps: float | None = 0.2,
    mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """Clipped value loss ``0.5 * max((V - R)^2, (clip(V, V_old +- eps) - R)^2)``, averaged.

    ``clip_eps=None`` gives the plain ``0.5 * (V - R)^2``.
    """
    err = (values - returns) ** 2
    if clip_eps is not None:
        clipped = old_values + torch.clamp(values - old_values, -clip_eps, clip_eps)
        err = torch.maximum(err, (clipped - returns) ** 2)
    if mask is None:
        return 0.5 * err.mean()
    return 0.5 * masked_mean(err, mask)


def explained_variance(values: torch.Tensor, targets: torch.Tensor) -> float:
    """``1 - Var(targets - values) / Var(targets)``: 1 for a perfect critic, 0 for a constant one, < 0 worse.

    NaN when the targets do not vary (nothing to explain). Population variances, as in CleanRL.
    """
    values, targets = torch.as_tensor(values, dtype=torch.float64), torch.as_tensor(targets, dtype=torch.float64)
    var = targets.var(unbiased=False)
    if targets.numel() == 0 or var.item() == 0:
        return float("nan")
    return float(1.0 - (targets - values).var(unbiased=False) / var)


def group_reward_variance(returns: torch.Tensor, group_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-group population variance of returns (ddof=0) and the sorted unique group ids.

    Population variance makes a single-sample group's variance 0 (no signal), which is what the
    collapse diagnostics and DAPO's filter need.
    """
    returns = torch.as_tensor(returns, dtype=torch.float64)
    uniq, index = torch.unique(torch.as_tensor(group_ids), return_inverse=True)
    g = uniq.numel()
    count = torch.zeros(g, dtype=torch.float64).index_add_(0, index, torch.ones_like(returns))
    mean = torch.zeros(g, dtype=torch.float64).index_add_(0, index, returns) / count
    var = torch.zeros(g, dtype=torch.float64).index_add_(0, index, (returns - mean[index]) ** 2) / count
    return var, uniq


def zero_variance_mask(returns: torch.Tensor, group_ids: torch.Tensor, tol: float = 1e-12) -> torch.Tensor:
    """DAPO dynamic-sampling filter: True for samples whose group's returns are *not* all equal.

    Groups with zero reward variance (all solved, all failed, or a single sample) carry no
    group-relative signal and are dropped.
    """
    var, uniq = group_reward_variance(returns, group_ids)
    _, index = torch.unique(torch.as_tensor(group_ids), return_inverse=True)
    return var[index] > tol


def group_diagnostics(returns: torch.Tensor, group_ids: torch.Tensor) -> dict[str, float]:
    """Collapse diagnostics: ``reward_var_mean`` (mean per-group variance) and ``zero_var_group_frac``."""
    var, _ = group_reward_variance(returns, group_ids)
    if var.numel() == 0:
        return {"reward_var_mean": 0.0, "zero_var_group_frac": 0.0}
    return {
        "reward_var_mean": var.mean().item(),
        "zero_var_group_frac": (var <= 1e-12).double().mean().item(),
    }
