"""The shared update loop: advantages -> epochs x minibatches -> one optimizer step each.

An algorithm subclass (one file each: ``grpo.py``, ``ppo.py``, ...) supplies a ``Config``
dataclass and :meth:`Algorithm.compute_advantages`; PPO also extends the loss with a value
term. Everything else (old/reference log-probs, zero-variance filtering, gradient
accumulation, clipping, diagnostics, checkpoint state) lives here, once.
"""

from __future__ import annotations

import dataclasses
import math
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch

from algos import advantages as adv_lib
from algos import losses
from algos.data import Episode, Turn
from algos.policy import Policy, PolicyOutput, response_mask, rollout_logprobs
from algos.registry import ROLLOUT_SCHEMES


@dataclass
class AlgorithmConfig:
    """Hyperparameters shared by every algorithm (defaults suit a LoRA LM policy)."""

    lr: float = 1e-5
    """AdamW learning rate (LoRA LMs: 1e-5..5e-5; the small MazeNetPolicy: ~1e-3)."""
    saved_modules_lr: float | None = None
    """Learning rate of the whole modules a LoRA policy trains inside its adapter (``lora.modules_to_save``, e.g. a
    vision encoder), whose weights start from a trained module rather than from zero like LoRA's; None = ``lr``.
    """
    weight_decay: float = 0.0
    """AdamW weight decay."""
    warmup_updates: int = 0
    """Linear learning-rate warmup over this many calls to ``update`` (then constant, or decaying with
    ``decay_updates``).
    """
    decay_updates: int = 0
    """After warmup, decay the learning rate linearly to ``final_lr_ratio`` x ``lr`` over this many calls to
    ``update``, then hold it there (0 = no decay).
    """
    final_lr_ratio: float = 0.1
    """Where ``decay_updates`` ends, as a fraction of ``lr``."""
    epochs: int = 1
    """Passes over each batch of experience (>1 reuses samples; the clip keeps it safe)."""
    minibatch_size: int = 0
    """Turns (rows) per optimizer step; 0 = the whole batch in one step."""
    negative_weight: float = 1.0
    """Scale of negative advantages (1 = the algorithm's own estimator; 0 = learn only from better-than-average
    replies, like rejection-sampling fine-tuning; between, W-REINFORCE's weighting of negative samples, Zhu et al.
    2025).
    """
    minibatch_groups: bool = False
    """Cut minibatches from whole groups in shuffled group order (each holds at least minibatch_size turns, the last
    may hold fewer), so the turns of a group share an optimizer step: where they share tokens (the enumerated
    replies of branching rollouts share all but the move), their opposite advantages cancel on those tokens instead
    of pushing them up and down in different steps.
    """
    skip_zero_advantage: bool = False
    """Train only on turns whose advantage (after ``episode_mean`` and ``negative_weight``) is non-zero: the others
    carry no policy gradient, so skipping them before scoring saves their forward and backward passes (with
    ``negative_weight=0``, most of a branching batch). Minibatches then hold ``minibatch_size`` contributing turns.
    Needs a loss with no KL, entropy or value term.
    """
    micro_batch_size: int = 0
    """Turns per forward/backward inside a minibatch (gradient accumulation); 0 = minibatch."""
    micro_batch_tokens: int = 0
    """Cut micro-batches by padded tokens instead of rows: each holds as many consecutive turns as fit in this many
    tokens (turns x the longest prompt + response among them; a longer turn goes alone), and at most
    ``micro_batch_size`` turns when that is set; 0 = by rows. Bounds a micro-batch's activation memory when turn
    lengths vary, as multi-image histories do.
    """
    clip_eps_low: float = 0.2
    """PPO clip: the ratio is clipped below at ``1 - clip_eps_low``."""
    clip_eps_high: float = 0.2
    """PPO clip: the ratio is clipped above at ``1 + clip_eps_high`` (DAPO's clip-higher: 0.28)."""
    dual_clip: float | None = 3.0
    """Dual-clip constant c > 1: caps the loss of negative-advantage tokens at -c*A (None disables)."""
    kl_coef: float = 0.0
    """Weight of the k3 KL penalty to the reference policy (0 disables it and its forward pass)."""
    entropy_coef: float = 0.0
    """Weight of the entropy bonus (subtracted from the loss)."""
    max_grad_norm: float = 1.0
    """Clip the global gradient norm to this value (0 disables clipping)."""
    loss_agg: str = "seq-mean-token-mean"
    """Loss aggregation: token-mean | seq-mean-token-mean | seq-mean-token-sum-norm (a row = one turn)."""
    max_len: int | None = None
    """Constant normaliser for seq-mean-token-sum-norm (your generation budget); None = longest response in the batch.
    """
    old_logprobs: str = "recompute"
    """Where the ratio's denominator comes from: "recompute" (trainer forward before the update; robust to
    sampler/trainer numeric mismatch) or "rollout" (``Turn.logprobs``).
    """
    turn_credit: bool = False
    """Credit each turn with its discounted return-to-go instead of the whole episode return."""
    gamma: float = 1.0
    """Discount for turn-level credit (and GAE)."""
    turn_baseline: str = "episode"
    """Turn-level credit baseline: "episode" (group stats of whole-episode returns; unbiased) or "turn_index" (group
    stats at the same turn index; lower variance, biased when the policy controls episode length, verl#7244).
    """
    filter_zero_variance: bool = False
    """Drop groups whose returns are all equal before the update (DAPO dynamic sampling)."""
    episode_mean: bool = False
    """Weight episodes, not turns, equally: scale each turn's advantage by ``mean_turns / its episode's turns``
    (:func:`algos.advantages.episode_weights`), the multi-turn analogue of seq-mean. Without it a long failed
    episode outweighs a short solved one and the update pushes down the moves all episodes share, mostly the correct
    ones.
    """
    seed: int = 0
    """Seed of the minibatch shuffling generator."""


RANGES: dict[str, tuple[float, float, bool]] = {
    "lr": (0.0, 1.0, True),
    "saved_modules_lr": (0.0, 1.0, True),
    "vf_lr": (0.0, 1.0, True),
    "weight_decay": (0.0, 1.0, False),
    "warmup_updates": (0, 10**9, False),
    "decay_updates": (0, 10**9, False),
    "final_lr_ratio": (0.0, 1.0, False),
    "epochs": (1, 1000, False),
    "minibatch_size": (0, 10**9, False),
    "micro_batch_size": (0, 10**9, False),
    "micro_batch_tokens": (0, 10**9, False),
    "negative_weight": (0.0, 1.0, False),
    "clip_eps_low": (0.0, 1.0, False),
    "clip_eps_high": (0.0, 10.0, False),
    "dual_clip": (1.0, 1000.0, True),
    "kl_coef": (0.0, 1000.0, False),
    "entropy_coef": (0.0, 10.0, False),
    "max_grad_norm": (0.0, 1e6, False),
    "max_len": (1, 10**9, False),
    "gamma": (0.0, 1.0, False),
    "seed": (0, 2**31 - 1, False),
    "step_weight": (0.0, 100.0, False),
    "gae_lambda": (0.0, 1.0, False),
    "vf_coef": (0.0, 1000.0, False),
    "vf_clip": (0.0, 1e6, True),
}
"""(low, high, low excluded) of every numeric field of every algorithm's config (None, where a field allows it,
is not checked); a test fails on a numeric field added without one."""


def check_ranges(c: AlgorithmConfig) -> None:
    """``ValueError`` naming the first numeric field of ``c`` that is not a number of its type inside its range."""
    for f in dataclasses.fields(c):
        value, bounds = getattr(c, f.name), RANGES.get(f.name)
        if bounds is None or value is None:
            continue
        low, high, open_low = bounds
        integer = isinstance(low, int) and isinstance(high, int)
        kinds = (int,) if integer else (int, float)
        if (
            isinstance(value, bool)
            or not isinstance(value, kinds)
            or (isinstance(value, float) and not math.isfinite(value))
        ):
            raise ValueError(f"{f.name} must be {'an integer' if integer else 'a finite number'}, got {value!r}")
        if value < low or value > high or (open_low and value == low):
            raise ValueError(f"{f.name} must be in {'(' if open_low else '['}{low:g}, {high:g}], got {value:g}")


ADDITIVE_METRICS = frozenset({"pg_loss", "kl", "entropy", "value_loss"})
"""Metrics computed with the minibatch normaliser: micro-batch values add up to the minibatch's."""


def episode_turns(episodes: Sequence[Episode]) -> tuple[list[Turn], torch.Tensor]:
    """Flatten episodes into their trainable turns, plus the episode index of each turn."""
    turns, owner = [], []
    for i, ep in enumerate(episodes):
        for turn in ep.turns:
            turns.append(turn)
            owner.append(i)
    return turns, torch.tensor(owner, dtype=torch.long)


class Strategy:
    """How an update's collective steps run: the single-process default (a data-parallel runner subclasses it).

    :class:`Algorithm` calls it once per optimizer step (:meth:`clip_gradients`, between the
    last backward and ``optimizer.step()``); a sharded runner synchronises its ranks and
    reduces their gradients there (``runners.distributed.fsdp.Lockstep``).
    """

    def clip_gradients(self, algorithm: "Algorithm") -> float:
        """Clip the global gradient norm to ``max_grad_norm`` (<= 0: no clipping); returns the norm before clipping."""
        params = [p for g in algorithm.optimizer.param_groups for p in g["params"]]
        clip = algorithm.config.max_grad_norm if algorithm.config.max_grad_norm > 0 else math.inf
        return float(torch.nn.utils.clip_grad_norm_(params, clip))

    def parts(self, rows: torch.Tensor, micro: int) -> list[torch.Tensor]:
        """How a minibatch's ``rows`` are cut into micro-batches (default: ``micro`` rows each)."""
        return [rows[start : start + micro] for start in range(0, len(rows), micro)]

    def map_parts(self, algorithm: "Algorithm", fn: Callable[[Any, Any], Any], parts: Sequence[Any]) -> list[Any]:
        """``[fn(policy, part) for part in parts]``, in order: where each part's forward (and backward) runs."""
        return [fn(algorithm.policy, part) for part in parts]

    def begin_update(self, algorithm: "Algorithm") -> None:
        """Called at the start of every :meth:`Algorithm.update` (default: nothing)."""

    def after_step(self, algorithm: "Algorithm") -> None:
        """Called after every ``optimizer.step()`` (default: nothing)."""


def token_budget_parts(rows: torch.Tensor, lengths: Sequence[int], budget: int, max_rows: int) -> list[torch.Tensor]:
    """``rows`` cut in order into micro-batches of at most ``budget`` padded tokens (rows x the longest of
    ``lengths`` among them) and ``max_rows`` rows; a row longer than ``budget`` is a micro-batch of its own."""
    parts, start, longest = [], 0, 0
    for i, length in enumerate(lengths):
        longest_with = max(longest, length)
        count = i - start + 1
        if count > 1 and (count * longest_with > budget or count > max_rows):
            parts.append(rows[start:i])
            start, longest_with = i, length
        longest = longest_with
    return parts + ([rows[start:]] if len(rows) > start else [])


class Algorithm:
    """Base class: subclasses set ``Config`` and implement :meth:`compute_advantages`."""

    Config = AlgorithmConfig
    name = "base"
    needs_value_head = False
    """True when the algorithm trains a critic (the policy must have a value head)."""
    rollout_schemes: tuple[str, ...] = ROLLOUT_SCHEMES
    """The rollout schemes it trains on (:data:`algos.registry.ROLLOUT_SCHEMES`), the one it prefers first."""

    def __init__(self, policy: Policy, config: AlgorithmConfig | None = None, strategy: Strategy | None = None):
        self.policy = policy
        self.strategy = strategy if strategy is not None else Strategy()
        """Runs the collective steps of :meth:`update` (a runner may set its own before the first update)."""
        self.config = config if config is not None else self.Config()
        self.validate_config()
        params = list(policy.trainable_parameters())
        if not params:
            raise ValueError("the policy has no trainable parameters")
        self.optimizer = torch.optim.AdamW(
            self.param_groups(params), lr=self.config.lr, weight_decay=self.config.weight_decay
        )
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, self.lr_factor)
        self.num_updates = 0
        self.generator = torch.Generator().manual_seed(self.config.seed)

    def lr_factor(self, updates: int) -> float:
        """The learning-rate multiplier after ``updates`` calls to :meth:`update`: linear warmup, then optional linear
        decay.
        """
        c = self.config
        if c.warmup_updates > 0 and updates < c.warmup_updates:
            return (updates + 1) / c.warmup_updates
        if c.decay_updates <= 0:
            return 1.0
        progress = min(1.0, (updates - max(c.warmup_updates, 0)) / c.decay_updates)
        return 1.0 - progress * (1.0 - c.final_lr_ratio)

    # ----------------------------------------------------------------- hooks for subclasses
    def validate_config(self) -> None:
        """Fail fast on settings that cannot work with this policy (config checks included)."""
        self.check_config(self.config)

    @classmethod
    def check_config(cls, c: AlgorithmConfig) -> None:
        """Fail fast on settings that cannot work, with a message saying what to fix.

        Needs no policy, so ``mazegym train --dry-run`` runs it too; checks that need the policy
        (PPO's value head) belong in :meth:`validate_config`.
        """
        check_ranges(c)
        if c.loss_agg not in losses.AGG_MODES:
            raise ValueError(f"loss_agg={c.loss_agg!r}; choose one of {losses.AGG_MODES}")
        if not 0.0 <= c.negative_weight <= 1.0:
            raise ValueError(f"negative_weight={c.negative_weight}; choose a value in [0, 1]")
        if c.old_logprobs not in ("recompute", "rollout"):
            raise ValueError(f"old_logprobs={c.old_logprobs!r}; choose 'recompute' or 'rollout'")
        if c.epochs < 1 or c.minibatch_size < 0 or c.micro_batch_size < 0 or c.micro_batch_tokens < 0:
            raise ValueError("epochs must be >= 1, minibatch_size, micro_batch_size and micro_batch_tokens >= 0")
        if c.dual_clip is not None and c.dual_clip <= 1.0:
            raise ValueError(f"dual_clip must be > 1 (or None), got {c.dual_clip}")
        if c.turn_baseline not in ("episode", "turn_index"):
            raise ValueError(f"turn_baseline={c.turn_baseline!r}; choose 'episode' or 'turn_index'")
        if c.lr <= 0:
            raise ValueError(f"lr must be positive, got {c.lr}")
        if c.decay_updates < 0 or not 0.0 <= c.final_lr_ratio <= 1.0:
            raise ValueError(
                f"decay_updates must be >= 0 and final_lr_ratio in [0, 1], got {c.decay_updates} and {c.final_lr_ratio}"
            )
        if c.saved_modules_lr is not None and c.saved_modules_lr <= 0:
            raise ValueError(f"saved_modules_lr must be positive (or None for lr), got {c.saved_modules_lr}")
        if c.skip_zero_advantage and (cls.needs_value_head or c.kl_coef > 0 or c.entropy_coef != 0):
            raise ValueError(
                "skip_zero_advantage drops turns that a KL, entropy or value term would still train on; "
                "set skip_zero_advantage=false or kl_coef=0, entropy_coef=0 and a critic-free algorithm"
            )

    def param_groups(self, params: list[torch.nn.Parameter]) -> list[dict[str, Any]]:
        """The optimizer's parameter groups: one at ``lr``, plus the saved modules' at ``saved_modules_lr`` when set."""
        if self.config.saved_modules_lr is None:
            return [{"params": params}]
        if not hasattr(self.policy, "saved_module_parameters"):
            raise ValueError(
                f"saved_modules_lr needs a policy that names the modules trained in full "
                f"(saved_module_parameters()); {type(self.policy).__name__} does not: leave it unset"
            )
        saved = {id(p) for p in self.policy.saved_module_parameters()}
        groups = [
            {"params": [p for p in params if id(p) not in saved]},
            {"params": [p for p in params if id(p) in saved], "lr": self.config.saved_modules_lr},
        ]
        return [g for g in groups if g["params"]]

    def compute_advantages(
        self, episodes: Sequence[Episode], values: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Per-turn advantages [N] (turns in episode order) and optional value targets [N]."""
        raise NotImplementedError

    def filter_returns(self, episodes: Sequence[Episode]) -> torch.Tensor:
        """The per-episode values zero-variance filtering compares within a group (default: returns)."""
        return torch.tensor([ep.episode_return for ep in episodes], dtype=torch.float64)

    def group_relative_advantages(
        self, episodes: Sequence[Episode], estimator: str, norm_by_std: bool = True
    ) -> torch.Tensor:
        """Shared by GRPO/Dr.GRPO/DAPO/RLOO: episode-level advantages broadcast to turns, or
        turn-level credit (:func:`algos.advantages.turn_level_advantages`) when enabled."""
        group_ids = torch.tensor([ep.group_id for ep in episodes])
        if self.config.turn_credit:
            if estimator == "rloo":
                raise ValueError("turn_credit is implemented for the grpo-style estimators, not rloo")
            per_ep = adv_lib.turn_level_advantages(
                [[t.reward for t in ep.turns] for ep in episodes],
                group_ids.tolist(),
                gamma=self.config.gamma,
                norm_by_std=norm_by_std,
                baseline=self.config.turn_baseline,
            )
            return torch.cat(per_ep) if per_ep else torch.zeros(0)
        returns = torch.tensor([ep.episode_return for ep in episodes])
        if estimator == "rloo":
            ep_adv = adv_lib.rloo_advantages(returns, group_ids)
        else:
            ep_adv = adv_lib.grpo_advantages(returns, group_ids, norm_by_std=norm_by_std)
        return (
            torch.cat([ep_adv[i].repeat(len(ep.turns)) for i, ep in enumerate(episodes)])
            if episodes
            else torch.zeros(0)
        )

    def compute_loss(
        self, out: PolicyOutput, batch: dict[str, torch.Tensor], totals: dict[str, float]
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """Policy loss (+ KL, - entropy) on one micro-batch; PPO adds its value loss."""
        c = self.config
        length = out.logprobs.shape[1]
        mask = out.mask
        agg_kw = dict(
            agg=c.loss_agg, max_len=totals["max_len"], total_tokens=totals["tokens"], total_seqs=totals["seqs"]
        )
        loss, metrics = losses.ppo_clip_loss(
            out.logprobs,
            batch["old_logprobs"][:, :length],
            batch["advantages"],
            mask,
            eps_low=c.clip_eps_low,
            eps_high=c.clip_eps_high,
            dual_clip=c.dual_clip,
            **agg_kw,
        )
        # Keys in ADDITIVE_METRICS are this micro-batch's share of the minibatch value.
        metrics["pg_loss"] = loss.item()
        if c.kl_coef > 0:
            kl = losses.aggregate(losses.k3_kl(out.logprobs, batch["ref_logprobs"][:, :length]), mask, **agg_kw)
            loss = loss + c.kl_coef * kl
            metrics["kl"] = kl.item()
        if out.entropy is not None:
            ent = losses.aggregate(out.entropy, mask, **agg_kw)
            if c.entropy_coef:
                loss = loss - c.entropy_coef * ent
            metrics["entropy"] = ent.item()
        return loss, metrics

    # ----------------------------------------------------------------------- the update
    @torch.no_grad()
    def score_batch(self, turns: list[Turn]) -> dict[str, torch.Tensor]:
        """Old log-probs, reference log-probs and old values for all turns, before any step."""
        c = self.config
        length = max((len(t.response_ids) for t in turns), default=0)
        batch: dict[str, torch.Tensor] = {"mask": response_mask(turns, length)}
        rollout = rollout_logprobs(turns, length)
        need_forward = c.old_logprobs == "recompute" or self.policy.has_value_head
        # The batch stays on the CPU (the policy may run on a GPU); each micro-batch moves its rows to the
        # policy's device.
        if need_forward:
            outs = self.strategy.map_parts(self, lambda policy, chunk: policy.score_turns(chunk), self._chunks(turns))
            recomputed = _cat_padded([o.logprobs.detach().cpu() for o in outs], length)
            if self.policy.has_value_head:
                batch["old_values"] = torch.cat([o.values.detach().cpu() for o in outs]).float()
        batch["old_logprobs"] = recomputed if c.old_logprobs == "recompute" else rollout
        has_rollout = torch.tensor([len(t.logprobs) > 0 for t in turns])[:, None] * batch["mask"]
        if need_forward and has_rollout.sum() > 0:
            diff = (recomputed - rollout).abs()
            batch["rollout_logprob_diff"] = losses.masked_mean(diff, has_rollout)
        if c.kl_coef > 0:
            refs = [self.policy.score_turns(chunk, reference=True).logprobs.cpu() for chunk in self._chunks(turns)]
            batch["ref_logprobs"] = _cat_padded(refs, length)
        return batch

    def _chunks(self, turns: list[Turn]) -> list[list[Turn]]:
        rows = torch.arange(len(turns))
        if self.config.micro_batch_tokens:
            parts = self._micro_batches(turns, rows)
        else:
            parts = self.strategy.parts(rows, self.config.micro_batch_size or self.config.minibatch_size or len(turns))
        return [turns[int(r[0]) : int(r[-1]) + 1] for r in parts]

    def _micro_batches(self, turns: list[Turn], rows: torch.Tensor) -> list[torch.Tensor]:
        """How ``rows`` of ``turns`` are cut for gradient accumulation: by padded tokens or by rows."""
        c = self.config
        if not c.micro_batch_tokens:
            return self.strategy.parts(rows, c.micro_batch_size or len(rows))
        lengths = [len(turns[i].prompt_ids) + len(turns[i].response_ids) for i in rows.tolist()]
        return token_budget_parts(rows, lengths, c.micro_batch_tokens, c.micro_batch_size or len(rows))

    def update(self, episodes: list[Episode]) -> dict[str, float]:
        """One training step on a batch of episodes; returns metrics (see module docstring)."""
        c = self.config
        self.strategy.begin_update(self)
        episodes = [ep for ep in episodes if ep.turns]
        returns = torch.tensor([ep.episode_return for ep in episodes], dtype=torch.float64)
        group_ids = torch.tensor([ep.group_id for ep in episodes])
        metrics: dict[str, float] = dict(losses.group_diagnostics(returns, group_ids))
        metrics["return_mean"] = returns.mean().item() if len(episodes) else 0.0
        metrics["success_rate"] = sum(ep.success for ep in episodes) / max(len(episodes), 1)
        if c.filter_zero_variance and episodes:
            keep = losses.zero_variance_mask(self.filter_returns(episodes), group_ids)
            episodes = [ep for ep, k in zip(episodes, keep.tolist()) if k]
        metrics["kept_episode_frac"] = len(episodes) / max(len(returns), 1)
        scored = self._scored_turns(episodes, metrics)
        if scored is None:
            return self._skipped(metrics)
        turns, owner, turns_idx, batch = scored
        max_len = c.max_len or batch["mask"].shape[1]
        sums, steps = self._epochs(
            turns, batch, turns_idx, [episodes[int(owner[i])].group_id for i in turns_idx], max_len
        )
        self.scheduler.step()
        self.num_updates += 1
        metrics.update({k: v / steps for k, v in sums.items()})
        metrics["loss"] = metrics.pop("total_loss")
        metrics.setdefault("entropy", float("nan"))
        metrics.update(
            num_turns=float(len(turns_idx)),
            num_tokens=float(batch["mask"].sum().item()),
            optimizer_steps=float(steps),
            lr=self.scheduler.get_last_lr()[0],
            skipped=0.0,
        )
        return metrics

    def _scored_turns(
        self, episodes: list[Episode], metrics: dict[str, float]
    ) -> tuple[list[Turn], torch.Tensor, list[int], dict[str, torch.Tensor]] | None:
        """``(turns, owner, trained rows, batch)``: the episodes' turns with each one's episode index, the rows the
        update trains on, and their scored batch (old log-probs, advantages, value targets); None when no turn is
        left to train. Writes the batch's diagnostics into ``metrics``."""
        c = self.config
        turns, owner = episode_turns(episodes)
        turns_idx = [i for i, t in enumerate(turns) if t.response_ids]
        if not turns_idx:
            return None
        if c.skip_zero_advantage:
            # The advantages need no critic here (check_config), so they come before the scoring pass.
            advantages, value_targets = self._weighted_advantages(episodes, None)
            turns_idx = [i for i in turns_idx if advantages[i] != 0]
            metrics["trained_turn_frac"] = len(turns_idx) / len(turns)
            if not turns_idx:
                return None
            turns, owner, advantages = [turns[i] for i in turns_idx], owner[turns_idx], advantages[turns_idx]
            turns_idx = list(range(len(turns)))
            batch = self.score_batch(turns)
        else:
            batch = self.score_batch(turns)
            advantages, value_targets = self._weighted_advantages(episodes, batch.get("old_values"))
        batch["advantages"] = advantages.float()
        if value_targets is not None:
            batch["returns"] = value_targets.float()
        if value_targets is not None and "old_values" in batch:
            # how well the critic, before this update, predicted this fresh batch's targets
            metrics["explained_variance"] = losses.explained_variance(batch["old_values"], value_targets)
        metrics["adv_abs_mean"] = advantages.abs().mean().item()
        if "rollout_logprob_diff" in batch:
            metrics["rollout_logprob_diff"] = batch.pop("rollout_logprob_diff").item()
        return turns, owner, turns_idx, batch

    def _epochs(
        self, turns: list[Turn], batch: dict[str, torch.Tensor], turns_idx: list[int], groups: list[int], max_len: int
    ) -> tuple[dict[str, float], int]:
        """``epochs`` passes of optimizer steps over the rows ``turns_idx`` (each in group ``groups[j]``): the summed
        step metrics and the number of steps."""
        c = self.config
        sums: dict[str, float] = defaultdict(float)
        steps = 0
        index = torch.tensor(turns_idx)
        mb_size = c.minibatch_size or len(index)
        for _ in range(c.epochs):
            if c.minibatch_groups:
                minibatches = self._group_minibatches(index, groups, mb_size)
            else:
                order = index[torch.randperm(len(index), generator=self.generator)]
                minibatches = [order[start : start + mb_size] for start in range(0, len(order), mb_size)]
            for rows in minibatches:
                for k, v in self._optimizer_step(turns, batch, rows, max_len).items():
                    sums[k] += v
                steps += 1
        return sums, steps

    def _weighted_advantages(
        self, episodes: list[Episode], values: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The algorithm's per-turn advantages with ``episode_mean`` and ``negative_weight`` applied, and its value
        targets.
        """
        c = self.config
        advantages, value_targets = self.compute_advantages(episodes, values)
        if c.episode_mean:
            advantages = advantages * adv_lib.episode_weights(episodes).to(advantages.dtype)
        if c.negative_weight != 1.0:
            advantages = torch.where(advantages < 0, advantages * c.negative_weight, advantages)
        return advantages, value_targets

    def _group_minibatches(self, index: torch.Tensor, group_of_row: list[int], size: int) -> list[torch.Tensor]:
        """Rows of ``index`` in shuffled group order, cut at group boundaries once a minibatch holds ``size`` rows."""
        groups: dict[int, list[int]] = defaultdict(list)
        for row, gid in zip(index.tolist(), group_of_row):
            groups[gid].append(row)
        members = list(groups.values())
        minibatches, current = [], []
        for rows in (members[j] for j in torch.randperm(len(members), generator=self.generator).tolist()):
            current += rows
            if len(current) >= size:
                minibatches.append(torch.tensor(current))
                current = []
        return minibatches + ([torch.tensor(current)] if current else [])

    def _optimizer_step(
        self, turns: list[Turn], batch: dict[str, torch.Tensor], rows: torch.Tensor, max_len: int
    ) -> dict[str, float]:
        """Gradient accumulation over micro-batches of ``rows``, then one clipped step."""
        c = self.config
        mask = batch["mask"][rows]
        tokens = mask.sum().item()
        seqs = float((mask.sum(1) > 0).sum().item()) if c.loss_agg == "seq-mean-token-mean" else float(len(rows))
        self.optimizer.zero_grad(set_to_none=True)
        sums: dict[str, float] = defaultdict(float)
        totals = {"tokens": tokens, "seqs": seqs, "max_len": max_len}

        def backward(policy: Any, sub: torch.Tensor) -> tuple[float, dict[str, float]]:
            out = policy.score_turns([turns[i] for i in sub.tolist()])
            sub_batch = {k: v[sub].to(out.logprobs.device) for k, v in batch.items() if k != "mask"}
            loss, m = self.compute_loss(out, sub_batch, totals)
            loss.backward()
            return loss.item(), m

        parts = self._micro_batches(turns, rows)
        total_loss = 0.0
        for sub, (loss, m) in zip(parts, self.strategy.map_parts(self, backward, parts)):
            total_loss += loss
            weight = len(sub) / len(rows)
            for k, v in m.items():
                sums[k] += v if k in ADDITIVE_METRICS else v * weight
        grad_norm = self.clip_gradients()
        self.optimizer.step()
        self.strategy.after_step(self)
        sums["grad_norm"] = grad_norm
        sums["total_loss"] = total_loss
        return sums

    def clip_gradients(self) -> float:
        """Clip the gradients before an optimizer step (:meth:`Strategy.clip_gradients`); returns the norm before
        clipping.
        """
        return self.strategy.clip_gradients(self)

    def _skipped(self, metrics: dict[str, float]) -> dict[str, float]:
        """Metrics for an update with nothing to train on (e.g. every group filtered out)."""
        metrics.update(
            loss=0.0,
            pg_loss=0.0,
            clip_frac=0.0,
            approx_kl=0.0,
            grad_norm=0.0,
            entropy=float("nan"),
            num_turns=0.0,
            num_tokens=0.0,
            optimizer_steps=0.0,
            skipped=1.0,
        )
        if self.config.kl_coef > 0:
            metrics["kl"] = 0.0
        return metrics

    # ------------------------------------------------------------------- checkpoint state
    def state_dict(self) -> dict[str, Any]:
        """Optimizer, scheduler and RNG state (the policy saves its own weights)."""
        return {
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "num_updates": self.num_updates,
            "generator": self.generator.get_state(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` saved (call after restoring the policy's weights)."""
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.num_updates = int(state["num_updates"])
        self.generator.set_state(state["generator"])


def _cat_padded(chunks: list[torch.Tensor], length: int) -> torch.Tensor:
    """Concatenate [b_i, L_i] tensors along rows, right-padding each to ``length`` with zeros."""
    padded = [torch.nn.functional.pad(x.float(), (0, length - x.shape[1])) for x in chunks]
    return torch.cat(padded) if padded else torch.zeros(0, length)
