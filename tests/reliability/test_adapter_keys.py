"""Adapters missing LoRA tensors, or holding unexpected ones, are refused by the trainer and both generators."""

from __future__ import annotations

import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from runners.models.tiny import build_tiny_text_lm


@pytest.fixture(scope="module")
def model_path(tmp_path_factory):
    return build_tiny_text_lm(tmp_path_factory.mktemp("m") / "text")


@pytest.fixture(scope="module")
def adapters(model_path, tmp_path_factory):
    """A good adapter, one missing two tensors, one with an extra tensor."""
    from algos.policies.lm import LoRAConfig, LoRALMPolicy

    root = tmp_path_factory.mktemp("adapters")
    policy = LoRALMPolicy.from_pretrained(model_path, lora=LoRAConfig(rank=4, alpha=8), dtype=torch.float32)
    good = policy.save_adapter(root / "good")
    state = load_file(str(good / "adapter_model.safetensors"))
    names = sorted(state)
    out = {"good": good}
    for kind, tensors in (
        ("missing", {k: v for k, v in state.items() if k not in names[:2]}),
        ("unexpected", {**state, "base_model.model.model.extra.lora_A.weight": torch.zeros(4, 4)}),
    ):
        shutil.copytree(good, root / kind)
        save_file(tensors, str(root / kind / "adapter_model.safetensors"))
        out[kind] = root / kind
    out["dropped"] = names[:2]
    return out


def _policy(model_path):
    from algos.policies.lm import LoRAConfig, LoRALMPolicy

    return LoRALMPolicy.from_pretrained(model_path, lora=LoRAConfig(rank=4, alpha=8), dtype=torch.float32)


def test_trainer_refuses_missing_and_unexpected_tensors(model_path, adapters):
    policy = _policy(model_path)
    policy.load_adapter(adapters["good"])
    with pytest.raises(ValueError, match="2 missing.*" + adapters["dropped"][0].replace(".", r"\.")):
        policy.load_adapter(adapters["missing"])
    with pytest.raises(ValueError, match="unexpected.*extra"):
        policy.load_adapter(adapters["unexpected"])


def test_hf_generator_refuses_missing_and_unexpected_tensors(model_path, adapters):
    from runners.rollout.generation.hf import HFGenerator

    generator = HFGenerator(model_path)
    with pytest.raises(ValueError, match="missing.*" + adapters["dropped"][1].replace(".", r"\.")):
        generator.load_adapter(adapters["missing"], 1)  # no adapter loaded yet
    generator.load_adapter(adapters["good"], 1)
    for kind, pattern in (("missing", "missing"), ("unexpected", "unexpected.*extra")):
        with pytest.raises(ValueError, match=pattern):
            generator.load_adapter(adapters[kind], 2)
    assert generator.adapter_version == 1 and generator.adapter_path == str(adapters["good"])


class _Engine:
    def __init__(self):
        self.added = []

    def add_lora(self, request):
        self.added.append(request)
        return True

    def remove_lora(self, lora_id):
        pass


def test_vllm_generator_refuses_before_the_engine_sees_the_adapter(model_path, adapters):
    from runners.rollout.generation.vllm import VLLMGenerator

    generator = VLLMGenerator.__new__(VLLMGenerator)  # no engine build: only load_adapter's checks run
    generator.model_path = str(model_path)
    generator.llm = type("LLM", (), {"llm_engine": _Engine()})()
    generator.lora_request, generator._next_lora_id, generator.adapter_version = None, 1, 0
    for kind, pattern in (("missing", "missing"), ("unexpected", "unexpected.*extra")):
        with pytest.raises(ValueError, match=pattern):
            generator.load_adapter(adapters[kind], 1)
    assert generator.llm.llm_engine.added == [] and generator.adapter_version == 0


@pytest.mark.parametrize("header", [b"\xff" * 8 + b"{not json", b"\x10\x00\x00\x00\x00\x00\x00\x00[1, 2, 3]     "])
def test_a_crafted_safetensors_header_is_one_clear_error_for_trainer_and_generator(
    model_path, adapters, tmp_path, header
):
    from runners.rollout.generation.hf import HFGenerator

    crafted = tmp_path / "crafted"
    shutil.copytree(adapters["good"], crafted)
    (crafted / "adapter_model.safetensors").write_bytes(header)
    with pytest.raises(ValueError, match="not a readable safetensors file.*corrupt"):
        _policy(model_path).load_adapter(crafted)
    generator = HFGenerator(model_path)
    with pytest.raises(ValueError, match="not a readable safetensors file.*corrupt"):
        generator.load_adapter(crafted, 1)
    assert generator.adapter_version == 0


def test_an_adapter_whose_config_was_edited_to_match_removed_tensors_is_refused_for_the_run(
    model_path, adapters, tmp_path
):
    """Its own config says only q_proj is adapted, so a check against that config passes; against the LoRA
    settings the run trains with (what ``mazegym eval`` checks a run's adapter with) it is refused, and so is an
    edited alpha."""
    import json

    from algos.lora import LoRAConfig
    from runners.rollout.generation.adapters import check_adapter

    run_lora = LoRAConfig(rank=4, alpha=8)
    check_adapter(model_path, adapters["good"], lora=run_lora)
    cut = tmp_path / "cut"
    shutil.copytree(adapters["good"], cut)
    state = load_file(str(cut / "adapter_model.safetensors"))
    save_file({k: v for k, v in state.items() if ".q_proj." in k}, str(cut / "adapter_model.safetensors"))
    config = json.loads((cut / "adapter_config.json").read_text())
    (cut / "adapter_config.json").write_text(json.dumps({**config, "target_modules": ["q_proj"]}))
    assert len(load_file(str(cut / "adapter_model.safetensors"))) < len(state) / 4
    check_adapter(model_path, cut)  # consistent with itself: the attack
    with pytest.raises(ValueError, match="does not fit this model: LoRA tensors .* missing"):
        check_adapter(model_path, cut, lora=run_lora)
    louder = tmp_path / "louder"
    shutil.copytree(adapters["good"], louder)
    (louder / "adapter_config.json").write_text(json.dumps({**config, "lora_alpha": 80}))
    with pytest.raises(ValueError, match="alpha 80, but the run trains rank 4 and alpha 8"):
        check_adapter(model_path, louder, lora=run_lora)


@pytest.mark.parametrize(
    "key, value",
    [
        ("target_modules", "(.*.*.*)*X"),
        ("target_modules", ["q_proj", "(a+)+$"]),
        ("exclude_modules", "(.*a){25}"),
        ("modules_to_save", ["lm_head", 3]),
    ],
)
def test_an_adapter_config_with_a_module_pattern_is_refused_before_peft_runs_it(
    model_path, adapters, tmp_path, key, value
):
    """PEFT matches a string there as a regular expression against every module: a hostile one hangs eval and serve."""
    import json
    import time

    from runners.rollout.generation.adapters import check_adapter

    hostile = shutil.copytree(adapters["good"], tmp_path / "hostile")
    config = json.loads((hostile / "adapter_config.json").read_text())
    (hostile / "adapter_config.json").write_text(json.dumps({**config, key: value}))
    start = time.perf_counter()
    with pytest.raises(ValueError, match=f"{key}=.* is not a list of module names"):
        check_adapter("unused: refused before the model is read", hostile)
    assert time.perf_counter() - start < 5
    check_adapter(model_path, adapters["good"])  # what mazegym writes passes
