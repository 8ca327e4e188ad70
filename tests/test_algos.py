"""Registry, update loop, on-policy sanity and checkpoint state (fast, no env needed)."""

import dataclasses
import math

import numpy as np
import pytest
import torch

import algos
from algos.base import AlgorithmConfig
from algos.data import Episode, Turn
from algos.policies.net import MazeNetPolicy

GRID = 7


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def random_obs(rng: np.random.Generator) -> dict:
    x = np.zeros((3, GRID, GRID), dtype=np.float32)
    x[0] = rng.random((GRID, GRID)) < 0.3
    x[1, rng.integers(GRID), rng.integers(GRID)] = 1
    x[2, rng.integers(GRID), rng.integers(GRID)] = 1
    return {"x": x, "action_mask": np.array([1, 1, int(rng.random() < 0.5), 1], dtype=np.int8)}


def make_episodes(policy, num_groups=3, group_size=4, turns=3, seed=0) -> list[Episode]:
    """Synthetic episodes sampled from ``policy`` with varied returns."""
    rng = np.random.default_rng(seed)
    episodes = []
    for g in range(num_groups):
        for k in range(group_size):
            ep = Episode(group_id=g)
            for t in range(turns):
                obs = random_obs(rng)
                a, lp, v = policy.act(np.stack([obs["x"]]), obs["action_mask"][None])
                ep.turns.append(
                    Turn(
                        response_ids=[int(a[0])],
                        logprobs=[float(lp[0])],
                        observation=obs,
                        reward=float(rng.random() < 0.5) if t == turns - 1 else 0.0,
                        value=float(v[0]),
                    )
                )
            ep.success = ep.turns[-1].reward > 0
            episodes.append(ep)
    return episodes


def test_registry_lists_builtins_with_grpo_default():
    names = algos.available()
    assert algos.DEFAULT == "grpo" and names[0] == "grpo"
    assert {"grpo", "ppo", "dr_grpo", "dapo", "rloo", "gigpo"} <= set(names)


def _documented_fields(cls) -> set[str]:
    """Field names followed by a docstring in the class body of ``cls`` or its bases (the help text reads them)."""
    import ast
    import inspect
    import textwrap

    names = set()
    for klass in cls.__mro__:
        if not dataclasses.is_dataclass(klass):
            continue
        body = ast.parse(textwrap.dedent(inspect.getsource(klass))).body[0].body
        for stmt, nxt in zip(body, body[1:]):
            if isinstance(stmt, ast.AnnAssign) and isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant):
                names.add(stmt.target.id)
    return names


def test_every_config_field_has_a_docstring_and_defaults_differ_where_they_should():
    for name in ("grpo", "ppo", "dr_grpo", "dapo", "rloo"):
        cls = algos.config_class(name)
        assert dataclasses.is_dataclass(cls) and issubclass(cls, AlgorithmConfig)
        missing = {f.name for f in dataclasses.fields(cls)} - _documented_fields(cls)
        assert not missing, f"{name}: fields without a docstring: {missing}"
    assert algos.config_class("dapo")().clip_eps_high == 0.28
    assert algos.config_class("dapo")().loss_agg == "token-mean"
    assert algos.config_class("dr_grpo")().loss_agg == "seq-mean-token-sum-norm"
    assert algos.config_class("grpo")().loss_agg == "seq-mean-token-mean"


def test_make_rejects_unknown_keys_and_names_with_the_valid_ones():
    policy = MazeNetPolicy(GRID)
    with pytest.raises(TypeError, match="valid keys: .*lr"):
        algos.make("grpo", policy, learning_rate=1.0)
    with pytest.raises(KeyError, match="available: grpo"):
        algos.make("nope", policy)
    with pytest.raises(ValueError, match="loss_agg"):
        algos.make("grpo", policy, loss_agg="mean")
    algo = algos.make("grpo", policy, lr=0.5, epochs=2)
    assert algo.config.lr == 0.5 and algo.config.epochs == 2 and algo.optimizer.param_groups[0]["lr"] == 0.5


def test_register_a_new_algorithm_in_one_decorator():
    @dataclasses.dataclass
    class Cfg(AlgorithmConfig):
        bonus: float = 1.0
        """an extra knob"""

    @algos.register("test_const_adv")
    class ConstAdv(algos.get("grpo")):
        Config = Cfg

        def compute_advantages(self, episodes, values):
            return torch.full((sum(len(e.turns) for e in episodes),), self.config.bonus), None

    assert "test_const_adv" in algos.available()
    algo = algos.make("test_const_adv", MazeNetPolicy(GRID), bonus=2.0)
    metrics = algo.update(make_episodes(algo.policy))
    assert metrics["adv_abs_mean"] == pytest.approx(2.0)


def test_ppo_refuses_a_policy_without_value_head():
    class NoValue:
        has_value_head = False

        def trainable_parameters(self):
            return [torch.nn.Parameter(torch.zeros(1))]

    with pytest.raises(ValueError, match="value head"):
        algos.make("ppo", NoValue())


def test_on_policy_ratio_is_exactly_one_before_the_first_step():
    torch.manual_seed(0)
    policy = MazeNetPolicy(GRID)
    episodes = make_episodes(policy)
    turns = [t for ep in episodes for t in ep.turns]
    first, second = policy.score_turns(turns), policy.score_turns(turns)
    assert torch.equal(first.logprobs, second.logprobs)
    # one epoch, one minibatch, old = recomputed: the single step sees ratio == 1 exactly
    algo = algos.make("grpo", policy, lr=1e-3, old_logprobs="recompute")
    metrics = algo.update(episodes)
    assert metrics["ratio_mean"] == 1.0 and metrics["clip_frac"] == 0.0 and metrics["approx_kl"] == 0.0
    # rollout log-probs were produced by the same weights: they agree with the recomputation
    assert metrics["rollout_logprob_diff"] < 1e-5


@pytest.mark.parametrize("name", ["grpo", "dr_grpo", "dapo", "rloo", "ppo"])
def test_update_returns_collapse_diagnostics_and_changes_weights(name):
    torch.manual_seed(0)
    policy = MazeNetPolicy(GRID)
    before = [p.detach().clone() for p in policy.parameters()]
    algo = algos.make(name, policy, lr=1e-2, epochs=2, minibatch_size=16)
    metrics = algo.update(make_episodes(policy))
    for key in ("reward_var_mean", "zero_var_group_frac", "entropy", "clip_frac", "approx_kl", "grad_norm", "loss"):
        assert key in metrics and math.isfinite(metrics[key]), key
    assert metrics["optimizer_steps"] == 2 * math.ceil(36 / 16)
    assert any(not torch.equal(b, p) for b, p in zip(before, policy.parameters()))
    if name == "ppo":
        assert metrics["value_loss"] > 0


def test_micro_batching_gives_the_same_gradient():
    for agg in ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"):
        grads = []
        for micro in (0, 5):
            torch.manual_seed(0)
            policy = MazeNetPolicy(GRID)
            episodes = make_episodes(policy, seed=1)
            algo = algos.make("grpo", policy, lr=1e-3, micro_batch_size=micro, loss_agg=agg, max_grad_norm=0.0)
            algo.update(episodes)
            grads.append(torch.cat([p.grad.flatten() for p in policy.parameters() if p.grad is not None]))
        assert torch.allclose(grads[0], grads[1], atol=1e-6), agg


def test_dapo_filters_zero_variance_groups_and_skips_empty_batches():
    policy = MazeNetPolicy(GRID)
    episodes = make_episodes(policy, num_groups=2, group_size=3)
    for ep in episodes[:3]:  # group 0: all returns equal
        ep.turns[-1].reward = 1.0
    for ep, r in zip(episodes[3:], (0.0, 1.0, 0.0)):
        ep.turns[-1].reward = r
    algo = algos.make("dapo", policy, lr=1e-3)
    metrics = algo.update(episodes)
    assert metrics["kept_episode_frac"] == pytest.approx(0.5)
    assert metrics["zero_var_group_frac"] == pytest.approx(0.5)
    assert metrics["num_turns"] == 9
    for ep in episodes:
        ep.turns[-1].reward = 1.0
    skipped = algo.update(episodes)
    assert skipped["skipped"] == 1.0 and skipped["optimizer_steps"] == 0.0


def test_kl_needs_a_reference_and_is_reported():
    class Wrapped:
        """MazeNetPolicy with a frozen copy as reference, to exercise the KL path."""

        has_value_head = False

        def __init__(self):
            self.net, self.ref = MazeNetPolicy(GRID), MazeNetPolicy(GRID)

        def score_turns(self, turns, *, reference=False):
            if reference:
                with torch.no_grad():
                    return self.ref.score_turns(turns)
            return self.net.score_turns(turns)

        def trainable_parameters(self):
            return self.net.trainable_parameters()

    torch.manual_seed(0)
    policy = Wrapped()
    metrics = algos.make("grpo", policy, kl_coef=0.1, lr=1e-3).update(make_episodes(policy.net))
    assert metrics["kl"] > 0


def test_state_dict_round_trip_resumes_identically():
    def run(split: bool):
        torch.manual_seed(0)
        policy = MazeNetPolicy(GRID)
        algo = algos.make("grpo", policy, lr=1e-2, minibatch_size=8, warmup_updates=3)
        batches = [make_episodes(policy, seed=s) for s in range(4)]
        for i, batch in enumerate(batches):
            if split and i == 2:
                state = {k: v for k, v in algo.state_dict().items()}
                weights = {k: v.clone() for k, v in policy.state_dict().items()}
                policy = MazeNetPolicy(GRID)
                policy.load_state_dict(weights)
                algo = algos.make("grpo", policy, lr=1e-2, minibatch_size=8, warmup_updates=3)
                algo.load_state_dict(state)
            algo.update(batch)
        return [p.detach() for p in policy.parameters()], algo.scheduler.get_last_lr()

    (a, lr_a), (b, lr_b) = run(False), run(True)
    assert lr_a == lr_b
    assert all(torch.equal(x, y) for x, y in zip(a, b))


def test_lr_schedule_warms_up_then_decays_linearly_to_its_floor():
    policy = MazeNetPolicy(GRID)
    algo = algos.make("grpo", policy, lr=1e-2, warmup_updates=2, decay_updates=4, final_lr_ratio=0.2)
    # warmup 1/2, 2/2; then 1 - k/4 * 0.8 for k = 0..4; then held at 0.2
    expected = [0.5, 1.0, 1.0, 0.8, 0.6, 0.4, 0.2, 0.2, 0.2]
    assert [algo.lr_factor(n) for n in range(9)] == pytest.approx(expected)
    assert algo.optimizer.param_groups[0]["lr"] == pytest.approx(0.5e-2)
    for _ in range(5):
        algo.update(make_episodes(policy, seed=0))
    assert algo.optimizer.param_groups[0]["lr"] == pytest.approx(0.4e-2)  # after 5 updates: factor at n=5
    with pytest.raises(ValueError, match="final_lr_ratio"):
        algos.make("grpo", policy, final_lr_ratio=1.5)


@pytest.mark.parametrize("episode_mean, expected", [(False, 0.6), (True, 0.0)])
def test_episode_mean_weights_episodes_not_turns(episode_mean, expected):
    """A 1-turn win and a 4-turn loss: per turn, GRPO's loss leans on the loss's 4 turns; per episode it balances."""
    torch.manual_seed(0)
    policy = MazeNetPolicy(GRID)
    obs = random_obs(np.random.default_rng(0))
    a, lp, _ = policy.act(np.stack([obs["x"]]), obs["action_mask"][None])

    def episode(turns, reward):
        ep = Episode(group_id=0)
        ep.turns = [
            Turn(
                response_ids=[int(a[0])],
                logprobs=[float(lp[0])],
                observation=obs,
                reward=reward if t == turns - 1 else 0.0,
            )
            for t in range(turns)
        ]
        ep.success = reward > 0
        return ep

    algo = algos.make("grpo", policy, lr=1e-6, episode_mean=episode_mean, old_logprobs="recompute")
    metrics = algo.update([episode(1, 1.0), episode(4, 0.0)])
    # ratio == 1: pg_loss = -mean(advantage) over the 5 turns; advantages are +-1/sqrt(2) (std of two returns)
    assert metrics["pg_loss"] == pytest.approx(expected / math.sqrt(2), abs=1e-5)


def test_group_minibatches_keep_every_group_in_one_optimizer_step():
    policy = MazeNetPolicy(GRID)
    episodes = make_episodes(policy, num_groups=7, group_size=4, turns=2, seed=2)  # 8 turns per group
    algo = algos.make("grpo", policy, lr=1e-3, minibatch_size=12, minibatch_groups=True)
    turns, owner = algos.base.episode_turns(episodes)
    index = torch.arange(len(turns))
    minibatches = algo._group_minibatches(index, [episodes[int(o)].group_id for o in owner], 12)
    # 7 groups of 8 turns, cut once a minibatch holds >= 12 turns: [16, 16, 16, 8].
    assert [len(mb) for mb in minibatches] == [16, 16, 16, 8]
    assert sorted(torch.cat(minibatches).tolist()) == index.tolist()
    for mb in minibatches:
        gids = {episodes[int(owner[i])].group_id for i in mb.tolist()}
        assert sum(len(e.turns) for e in episodes if e.group_id in gids) == len(mb)
    metrics = algo.update(episodes)
    assert metrics["optimizer_steps"] == 4


def test_negative_weight_scales_only_negative_advantages():
    policy = MazeNetPolicy(GRID)
    episodes = make_episodes(policy, num_groups=2, group_size=4, turns=1, seed=5)
    for i, e in enumerate(episodes):  # returns 1,0,0,0 in each group: advantages +1.5, -0.5 x 3
        e.turns[-1].reward = float(i % 4 == 0)
    seen = {}
    for weight in (1.0, 0.0):
        metrics = algos.make("grpo", policy, lr=1e-6, negative_weight=weight).update(episodes)
        seen[weight] = metrics["adv_abs_mean"]
    # |A| mean: (1.5 + 3 * 0.5) / 4 = 0.75 with weight 1; 1.5 / 4 = 0.375 with weight 0.
    assert seen[1.0] == pytest.approx(0.75, abs=1e-4) and seen[0.0] == pytest.approx(0.375, abs=1e-4)
    with pytest.raises(ValueError, match="negative_weight"):
        algos.make("grpo", policy, negative_weight=2.0)


def test_skip_zero_advantage_trains_only_contributing_turns_with_the_same_first_step():
    # Returns 1,0,0,0 per group and negative_weight=0: only the first turn of each group contributes.
    # The skipped turns add nothing to the gradient but the normaliser, and Adam's first step is
    # invariant to that scale, so both settings must land on the same parameters.
    deltas = {}
    for skip in (False, True):
        policy = MazeNetPolicy(GRID)
        torch.manual_seed(0)
        for p in policy.trainable_parameters():
            torch.nn.init.normal_(p, std=0.1)
        before = torch.cat([p.detach().flatten() for p in policy.trainable_parameters()])
        episodes = make_episodes(policy, num_groups=2, group_size=4, turns=1, seed=5)
        for i, e in enumerate(episodes):
            e.turns[-1].reward = float(i % 4 == 0)
        metrics = algos.make(
            "grpo", policy, lr=1e-2, negative_weight=0.0, max_grad_norm=0.0, skip_zero_advantage=skip
        ).update(episodes)
        assert metrics["num_turns"] == (2 if skip else 8)
        deltas[skip] = torch.cat([p.detach().flatten() for p in policy.trainable_parameters()]) - before
    # Equal up to Adam's epsilon, which matters only for near-zero gradients.
    assert torch.nn.functional.cosine_similarity(deltas[False], deltas[True], dim=0) > 0.999
    assert deltas[True].abs().max() > 1e-3
    with pytest.raises(ValueError, match="skip_zero_advantage"):
        algos.make("grpo", MazeNetPolicy(GRID), skip_zero_advantage=True, kl_coef=0.1)
