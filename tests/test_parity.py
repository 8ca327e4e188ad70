"""Parity probe: passes after a real sync, catches skipped syncs and stale or missing adapters."""

import pytest
import torch

from runners.rollout.generation.hf import HFGenerator
from runners.train.parity import ParityProbe, StaleWeightsError, tolerance_for
from runners.train.sync import AdapterSync
from runners.models.tiny import build_tiny_text_lm
from lora_helpers import perturb_lora


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    from algos.policies.lm import LoRAConfig, LoRALMPolicy

    path = build_tiny_text_lm(tmp_path_factory.mktemp("m") / "text")
    policy = LoRALMPolicy.from_pretrained(path, lora=LoRAConfig(rank=4, alpha=8), dtype=torch.float32)
    gen = HFGenerator(path)
    return policy, gen, ParityProbe.from_encoder(gen.encoder)


def test_tolerances():
    assert tolerance_for(torch.float32) == tolerance_for("float32") == 1e-3
    assert tolerance_for(torch.bfloat16) == tolerance_for("float16") == 5e-2


def test_probe_is_a_fixed_maze_prompt_and_reply(setup):
    _, gen, probe = setup
    text = gen.tokenizer.decode(probe.prompt_ids)
    assert "Map:" in text and text.endswith("<|im_start|>assistant\n")
    assert gen.tokenizer.decode(probe.response_ids) == "I should go down.<action>down</action><|im_end|>"
    assert ParityProbe.from_encoder(gen.encoder).prompt_ids == probe.prompt_ids  # deterministic


def test_probe_passes_after_sync_and_catches_skipped_and_stale_syncs(tmp_path, setup):
    policy, gen, probe = setup
    sync = AdapterSync(tmp_path / "sync")

    perturb_lora(policy, seed=1)
    sync.publish(policy, 1)
    sync.pull(gen)
    result = probe.check(gen, policy, version=1)
    assert result["version"] == 1 and result["mean_abs"] < 1e-5  # measured hf-vs-trainer fp32 gap

    # Skipped sync: the trainer published v2, the generator never loaded it.
    perturb_lora(policy, seed=2)
    sync.publish(policy, 2)
    with pytest.raises(StaleWeightsError, match="published adapter version 2 but the generator serves version 1"):
        probe.check(gen, policy, version=2)

    # Stale weights under a fresh version stamp (e.g. an engine that cached the old LoRA):
    # the version check passes, the log-prob check must not.
    gen.load_adapter(sync.sync_dir / "v000001", version=2)
    with pytest.raises(StaleWeightsError, match="still serves the previous adapter") as err:
        probe.check(gen, policy, version=2)
    assert "trainer expects" in str(err.value) and "generator gives" in str(err.value)

    gen.load_adapter(sync.latest()[1], version=2)
    assert probe.check(gen, policy, version=2)["mean_abs"] < 1e-5


def test_probe_names_base_model_when_adapter_never_applied(tmp_path, setup):
    policy, _, _ = setup
    gen = HFGenerator(setup[1].model_path)  # no adapter loaded: base weights
    probe = ParityProbe.from_encoder(gen.encoder)
    perturb_lora(policy, seed=3)
    with pytest.raises(StaleWeightsError, match="BASE model"):
        probe.check(gen, policy)


def test_probe_tolerance_follows_the_looser_dtype(setup):
    _, gen, _ = setup
    assert ParityProbe.for_generator(gen).tolerance == 1e-3  # fp32 generator, fp32 trainer
    assert ParityProbe.for_generator(gen, trainer_dtype=torch.bfloat16).tolerance == 5e-2


def test_vllm_max_lora_rank_rounds_up_to_a_supported_value():
    from runners.rollout.generation.vllm import supported_max_lora_rank

    assert [supported_max_lora_rank(r) for r in (1, 4, 8, 12, 16, 17, 512)] == [1, 8, 8, 16, 16, 32, 512]
    with pytest.raises(ValueError):
        supported_max_lora_rank(1024)


class OffsetGenerator:
    """A generator that serves the right weights with a fixed numerical gap (a bf16 engine against an fp32
    trainer), ``offset`` per token on top of the real generator's log-probs."""

    def __init__(self, generator, offset: float):
        self.generator, self.offset = generator, offset

    def __getattr__(self, name):
        return getattr(self.generator, name)

    def score(self, prompt_ids, response_ids, images=None):
        real = self.generator.score(prompt_ids, response_ids, images)
        return [x + (self.offset if i % 2 else -self.offset) for i, x in enumerate(real)]


def test_calibrated_probe_logs_a_numerical_gap_and_still_catches_stale_weights(tmp_path, setup):
    from algos.policies.lm import LoRAConfig, LoRALMPolicy

    path = setup[1].model_path
    policy = LoRALMPolicy.from_pretrained(path, lora=LoRAConfig(rank=4, alpha=8), dtype=torch.float32)
    gen = OffsetGenerator(HFGenerator(path), offset=0.2)  # far above the fp32 tolerance of 1e-3
    probe = ParityProbe.from_encoder(gen.encoder)
    sync = AdapterSync(tmp_path / "sync")

    assert probe.calibrate(gen, policy)["baseline"] == pytest.approx(0.2, abs=1e-4)  # identical weights at step 0
    perturb_lora(policy, seed=1)
    sync.publish(policy, 1)
    sync.pull(gen.generator)
    result = probe.check(gen, policy, version=1)
    assert result["mean_abs"] == pytest.approx(0.2, abs=1e-3) and result["drift"] == 0.0
    assert result["excess"] < 1e-3

    # The engine's gap grows, but it follows the trainer: a metric, not a stop.
    gen.offset = 0.4
    perturb_lora(policy, seed=2)
    sync.publish(policy, 2)
    sync.pull(gen.generator)
    result = probe.check(gen, policy, version=2)
    assert result["drift"] == 1.0 and result["excess"] == pytest.approx(0.2, abs=1e-3)

    # Still the previous weights under the new version stamp: stopped.
    perturb_lora(policy, seed=3)
    sync.publish(policy, 3)
    gen.generator.load_adapter(sync.sync_dir / "v000002", version=3)
    with pytest.raises(StaleWeightsError, match="still serves the previous adapter"):
        probe.check(gen, policy, version=3)


def test_calibrated_probe_catches_an_engine_that_serves_the_base_model(setup):
    from algos.policies.lm import LoRAConfig, LoRALMPolicy

    path = setup[1].model_path
    policy = LoRALMPolicy.from_pretrained(path, lora=LoRAConfig(rank=4, alpha=8), dtype=torch.float32)
    perturb_lora(policy, seed=4)  # a start adapter (e.g. from SFT) the engine never loaded
    gen = OffsetGenerator(HFGenerator(path), offset=0.01)
    probe = ParityProbe.from_encoder(gen.encoder)
    with pytest.raises(StaleWeightsError, match="BASE model"):
        probe.check(gen, policy)
