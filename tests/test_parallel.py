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


@pytest.mark.parametrize("stage", ["vision", "sft"])
def test_sft_batches_on_two_threads_match_one(tmp_path, stage):
    """The SFT stage's batches cut over two model copies give (up to float sums) the one-thread weights."""
    import numpy as np

    from mazegym.evalsets import load_eval_set
    from runners.rollout.generation.prompts import ChatEncoder, image_token_id_of, load_image_processor, load_tokenizer
    from model_helpers import tiny_maze_vlm
    from runners.train.demos import demo_turns
    from runners.models.vision_pretraining import pretrain_vision
    from runners.train.sft import train_sft
    from transformers import AutoModelForImageTextToText

    model_dir = tiny_maze_vlm(tmp_path / "m")
    tokenizer = load_tokenizer(model_dir)
    processor = load_image_processor(model_dir)
    encoder = ChatEncoder(tokenizer, processor, image_token_id_of(model_dir))
    turns = [
        t
        for spec in load_eval_set("VisMaze-v0")[:6]
        for t in demo_turns(
            spec, encoder, max_moves=20, obs_mode="image", rng=np.random.default_rng(0), eos_id=tokenizer.eos_token_id
        )
    ]

    class Demos:
        def batch(self, size):
            return turns[:size]

    def trained(threads):
        torch.manual_seed(0)
        model = AutoModelForImageTextToText.from_pretrained(model_dir)
        if stage == "vision":
            pretrain_vision(model, Demos(), steps=3, batch_size=24, lr=1e-2, image_processor=processor, threads=threads)
        else:
            params = [p for p in model.parameters() if p.requires_grad]
            train_sft(
                model,
                params,
                Demos(),
                steps=3,
                batch_size=24,
                lr=1e-2,
                pad_id=tokenizer.pad_token_id,
                image_processor=processor,
                localization_weight=1.0,
                threads=threads,
            )
        return {k: v.detach().clone() for k, v in model.state_dict().items()}

    one, two = trained(1), trained(2)
    start = AutoModelForImageTextToText.from_pretrained(model_dir).state_dict()
    assert any(not torch.equal(one[k], start[k]) for k in one)
    # The saliency's bias cannot change a softmax over cells: its gradient is rounding noise, which AdamW magnifies.
    for k in (k for k in one if k != "vision_tower.agent_score.bias"):
        torch.testing.assert_close(one[k], two[k], atol=1e-4, rtol=1e-4)
