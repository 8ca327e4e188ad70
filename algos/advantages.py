"""Advantage estimators: GRPO, Dr.GRPO, RLOO, GAE, turn-level credit and GiGPO's anchor states.

Conventions (documented because every framework differs):

- A *group* is all rollouts of the same maze (same start state); ``group_ids`` is an integer
  tensor, samples with equal ids share a group.
- GRPO's std is the **unbiased** (Bessel-corrected, ``n - 1``) sample std, as in SkyRL and
  ``torch.std``'s default; DeepSeekMath does not say, TRL uses the same ``torch.std``.
- A group of one sample has no baseline to compare against: its advantage is **0** for every
  group-relative estimator (GRPO, Dr.GRPO, RLOO), never NaN.
- An all-equal group (every rollout solved, or every one failed) also gets advantage 0; DAPO
  drops such groups entirely (:func:`algos.losses.zero_variance_mask`).
"""

from __future__ import annotations

from typing import Sequence

import torch

from algos.data import Episode


def _group_index(group_ids: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Map arbitrary group ids to 0..G-1; returns (index per sample, G)."""
    _, index = torch.unique(torch.as_tensor(group_ids), return_inverse=True)
    return index, int(index.max().item()) + 1 if index.numel() else 0


def group_stats(values: torch.Tensor, group_ids: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Per-sample (group mean, unbiased group std, group size) of ``values``.

    The std of a single-sample group is reported as 0.
    """
    values = torch.as_tensor(values, dtype=torch.float64)
    index, num_groups = _group_index(group_ids)
    count = torch.zeros(num_groups, dtype=torch.float64).index_add_(0, index, torch.ones_like(values))
    total = torch.zeros(num_groups, dtype=torch.float64).index_add_(0, index, values)
    mean = total / count
    sq_dev = torch.zeros(num_groups, dtype=torch.float64).index_add_(0, index, (values - mean[index]) ** 2)
    std = torch.sqrt(sq_dev / (count - 1).clamp(min=1))
    return mean[index], std[index], count[index]


def grpo_advantages(
    returns: torch.Tensor, group_ids: torch.Tensor, norm_by_std: bool = True, eps: float = 1e-6
) -> torch.Tensor:
    """GRPO: ``A_i = (r_i - mean_g) / (std_g + eps)`` with the unbiased group std.

    ``norm_by_std=False`` gives Dr.GRPO's ``A_i = r_i - mean_g`` (no difficulty bias).
    Single-sample groups get 0.
    """
    returns = torch.as_tensor(returns, dtype=torch.float64)
    mean, std, count = group_stats(returns, group_ids)
    adv = returns - mean
    if norm_by_std:
        adv = adv / (std + eps)
    return torch.where(count > 1, adv, torch.zeros_like(adv)).float()


def dr_grpo_advantages(returns: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    """Dr.GRPO (arXiv:2503.20783): group-mean baseline, no std normalisation."""
    return grpo_advantages(returns, group_ids, norm_by_std=False)


def rloo_advantages(returns: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    """RLOO: ``A_i = r_i - mean_{j != i} r_j`` (leave-one-out baseline, unbiased).

    Equals ``n / (n - 1) * (r_i - mean_g)``; single-sample groups get 0.
    """
    returns = torch.as_tensor(returns, dtype=torch.float64)
    mean, _, count = group_stats(returns, group_ids)
    scale = count / (count - 1).clamp(min=1)
    adv = scale * (returns - mean)
    return torch.where(count > 1, adv, torch.zeros_like(adv)).float()


def gae(
    rewards: torch.Tensor,
    values: torch.Tensor,
    dones: torch.Tensor,
    gamma: float = 1.0,
    lam: float = 0.95,
    last_value: float = 0.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation over a flat sequence of transitions.

    ``rewards[t]``, ``values[t]`` (the critic's V(s_t)) and ``dones[t]`` (1 when step t ends
    its episode) are 1-D, several episodes may be concatenated. Nothing is bootstrapped across
    an episode end; ``last_value`` bootstraps the final step only when it is not done.
    Returns ``(advantages, returns)`` with ``returns = advantages + values`` (the value target).

    ``delta_t = r_t + gamma * V(s_{t+1}) * (1 - done_t) - V(s_t)``,
    ``A_t = delta_t + gamma * lam * (1 - done_t) * A_{t+1}``.
    """
    rewards = torch.as_tensor(rewards, dtype=torch.float64)
    values = torch.as_tensor(values, dtype=torch.float64)
    dones = torch.as_tensor(dones, dtype=torch.float64)
    advantages = torch.zeros_like(rewards)
    next_value, next_adv = float(last_value), 0.0
    for t in reversed(range(rewards.numel())):
        not_done = 1.0 - dones[t]
        delta = rewards[t] + gamma * next_value * not_done - values[t]
        next_adv = delta + gamma * lam * not_done * next_adv
        advantages[t] = next_adv
        next_value = values[t]
    return advantages.float(), (advantages + values).float()


def discounted_returns_to_go(rewards: Sequence[float], gamma: float = 1.0) -> torch.Tensor:
    """``G_t = sum_{k>=t} gamma^(k-t) r_k`` for one episode's per-turn rewards."""
    out = torch.zeros(len(rewards), dtype=torch.float64)
    running = 0.0
    for t in reversed(range(len(rewards))):
        running = float(rewards[t]) + gamma * running
        out[t] = running
    return out


def turn_level_advantages(
    turn_rewards: Sequence[Sequence[float]],
    group_ids: Sequence[int],
    gamma: float = 1.0,
    norm_by_std: bool = True,
    baseline: str = "episode",
    eps: float = 1e-6,
) -> list[torch.Tensor]:
    """Turn-level credit: per-turn discounted returns-to-go, group-normalised.

    Each episode's turn ``t`` is credited with ``G_t`` (:func:`discounted_returns_to_go`), so a
    move is judged only by what follows it and later penalties are discounted.

    ``baseline="episode"`` (default): every turn of a group is compared with the statistics of
    the group's *whole-episode* returns ``G_0``: ``A_t = (G_t - mean_g(G_0)) / std_g(G_0)``.
    The baseline depends only on the start state, so it stays action-independent; with
    ``gamma=1`` and a reward only at the end it reduces exactly to episode-level GRPO. When
    every episode of a group has the same ``G_0`` (std 0) the scale falls back to the std of
    the group's pooled per-turn ``G_t`` (found necessary: dividing by ``eps`` blew advantages
    up to ~1e5 and wrecked a training run once the policy solved whole groups).

    ``baseline="turn_index"``: compare ``G_t`` with the mean/std of ``G_t`` over the group's
    episodes that are still running at turn t. Kept for comparison only: when the policy
    controls episode length (it does: reaching the goal ends the episode), which episodes
    survive to turn t depends on the earlier actions, so this baseline is biased
    (verl-project/verl#7244).
    """
    if baseline not in ("episode", "turn_index"):
        raise ValueError(f"baseline must be 'episode' or 'turn_index', got {baseline!r}")
    rtg = [discounted_returns_to_go(r, gamma) for r in turn_rewards]
    gids = torch.as_tensor(list(group_ids))
    if baseline == "episode":
        starts = torch.tensor([float(g[0]) if g.numel() else 0.0 for g in rtg], dtype=torch.float64)
        mean, std, count = group_stats(starts, gids)
        pooled = _pooled_turn_std(rtg, gids)
        out = []
        for i, g in enumerate(rtg):
            adv = g - mean[i]
            if norm_by_std:
                # All episodes of the group returned the same: G_0 has no spread to scale by,
                # but the turns' G_t still differ (gamma < 1, per-turn rewards). Scale by their
                # pooled std instead, so advantages stay O(1) rather than exploding by 1/eps.
                scale = std[i] if std[i] > 1e-8 else pooled[int(gids[i])]
                adv = adv / (scale + eps)
            out.append(adv.float() if count[i] > 1 else torch.zeros(g.numel()))
        return out
    flat = torch.cat(rtg) if rtg else torch.zeros(0, dtype=torch.float64)
    turn_idx = torch.cat([torch.arange(g.numel()) for g in rtg]) if rtg else torch.zeros(0, dtype=torch.long)
    ep_group = torch.cat([torch.full((g.numel(),), int(gids[i])) for i, g in enumerate(rtg)])
    key = ep_group * (int(turn_idx.max()) + 1 if turn_idx.numel() else 1) + turn_idx
    flat_adv = grpo_advantages(flat, key, norm_by_std=norm_by_std, eps=eps)
    return list(torch.split(flat_adv, [g.numel() for g in rtg]))


def anchor_state_advantages(
    turn_rewards: Sequence[Sequence[float]],
    turn_states: Sequence[Sequence[str]],
    group_ids: Sequence[int],
    gamma: float = 0.95,
    norm_by_std: bool = True,
    eps: float = 1e-6,
) -> list[torch.Tensor]:
    """GiGPO's step-level advantages (Feng et al. 2025, arXiv:2505.10978).

    Within a group (all plays of one maze), every turn taken from the same environment state
    -- in any episode, at any turn index -- forms an *anchor-state group*. Each turn's
    discounted return-to-go ``G_t`` is compared with its anchor group:
    ``A_t = (G_t - mean_s) / (std_s + eps)`` (unbiased std; ``norm_by_std=False`` keeps the
    mean only). The baseline depends only on the state, so it is action-independent; with
    ``gamma < 1`` the move that reaches the goal sooner from the same cell scores higher even
    when every episode of the group succeeded. Turns with an empty state key, and anchor groups
    of one turn, get 0.
    """
    rtg = [discounted_returns_to_go(r, gamma) for r in turn_rewards]
    keys, flat = [], []
    for g, states, returns in zip(group_ids, turn_states, rtg):
        if len(states) != returns.numel():
            raise ValueError(f"{len(states)} state keys for an episode of {returns.numel()} turns")
        keys += [(int(g), s) if s else None for s in states]
        flat.append(returns)
    values = torch.cat(flat) if flat else torch.zeros(0, dtype=torch.float64)
    known = [i for i, k in enumerate(keys) if k is not None]
    adv = torch.zeros(values.numel(), dtype=torch.float64)
    if known:
        ids = {k: n for n, k in enumerate(dict.fromkeys(keys[i] for i in known))}
        anchor = torch.tensor([ids[keys[i]] for i in known])
        adv[known] = grpo_advantages(values[known], anchor, norm_by_std=norm_by_std, eps=eps).double()
    return [a.float() for a in torch.split(adv, [r.numel() for r in rtg])]


def _pooled_turn_std(rtg: list[torch.Tensor], gids: torch.Tensor) -> dict[int, torch.Tensor]:
    """Unbiased std of all per-turn returns-to-go of each group (0 for fewer than 2 turns)."""
    pooled: dict[int, list[torch.Tensor]] = {}
    for g, gid in zip(rtg, gids.tolist()):
        pooled.setdefault(int(gid), []).append(g)
    out = {}
    for gid, parts in pooled.items():
        flat = torch.cat(parts)
        out[gid] = flat.std() if flat.numel() > 1 else torch.tensor(0.0, dtype=torch.float64)
    return out


def whiten(x: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """Batch-normalise advantages to zero mean, unit (biased) std, as PPO implementations do."""
    if x.numel() < 2:
        return x - x.mean() if x.numel() else x
    return (x - x.mean()) / (x.std(unbiased=False) + eps)


def episode_weights(episodes: Sequence[Episode]) -> torch.Tensor:
    """Per-turn factor ``mean_turns / turns_of_its_episode``, turns in episode order: every episode then carries the
    same total weight.
    """
    counts = torch.tensor([len(ep.turns) for ep in episodes if ep.turns], dtype=torch.float32)
    if counts.numel() == 0:
        return torch.zeros(0)
    return torch.cat([torch.full((int(n),), float(counts.mean() / n)) for n in counts])
