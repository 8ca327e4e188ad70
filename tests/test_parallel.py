"""ThreadReplicas: the update's micro-batches on copies of the policy in threads give the one-thread update."""

import copy

import pytest
import torch

import algos
from algos.parallel import ThreadReplicas
from algos.policies.net import MazeNetPolicy
from tests.test_algos import GRID, make_episodes

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _trained(threads: int, name: str, updates: int = 3) -> tuple[dict, list[dict]]:
    torch.manual_seed(0)
    policy = MazeNetPolicy(GRID)
    algo = algos.make(name, policy, lr=1e-2, epochs=2, minibatch_size=12, micro_batch_size=6, seed=0)
    if threads > 1:
        algo.strategy = ThreadReplicas(policy, threads)
    log = [algo.update(make_episodes(copy.deepcopy(policy), seed=u)) for u in range(updates)]
    return {k: v.detach().clone() for k, v in policy.state_dict().items()}, log


@pytest.mark.parametrize("name", ["grpo", "ppo"])
@pytest.mark.parametrize("threads", [2, 3])
def test_replicas_match_one_thread(name, threads):
    one, log_one = _trained(1, name)
    many, log_many = _trained(threads, name)
    assert one.keys() == many.keys()
    for key in one:  # the same gradients, summed in another order: equal up to float rounding
        torch.testing.assert_close(many[key], one[key], rtol=1e-4, atol=1e-5, msg=key)
    for a, b in zip(log_one, log_many):
        assert a["optimizer_steps"] == b["optimizer_steps"] > 0
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-4, abs=1e-6)


def test_replicas_are_deterministic_and_follow_loaded_weights():
    first, _ = _trained(2, "grpo")
    again, _ = _trained(2, "grpo")
    for key in first:
        assert torch.equal(first[key], again[key]), key
    torch.manual_seed(0)
    policy = MazeNetPolicy(GRID)
    algo = algos.make("grpo", policy, lr=1e-2, minibatch_size=12, micro_batch_size=6)
    algo.strategy = ThreadReplicas(policy, 2)
    with torch.no_grad():  # a checkpoint load changes the weights behind the strategy's back
        for p in policy.trainable_parameters():
            p.add_(1.0)
    algo.update(make_episodes(copy.deepcopy(policy)))
    for p, q in zip(policy.trainable_parameters(), algo.strategy.replicas[0].trainable_parameters()):
        assert torch.equal(p, q)


def test_replicas_refuse_one_thread():
    with pytest.raises(ValueError, match="threads >= 2"):
        ThreadReplicas(MazeNetPolicy(GRID), 1)
