"""A model directory's own Python code never runs: ``auto_map`` is refused before anything is loaded."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from algos.models import refuse_remote_code

ROOT = Path(__file__).resolve().parents[2]


def _hostile_model(tmp_path: Path, where: str = "config.json") -> tuple[Path, Path]:
    """A model dir whose ``where`` maps an unknown model type to a Python file that leaves a marker when imported."""
    model = tmp_path / "model"
    model.mkdir()
    marker = tmp_path / "ran.txt"
    (model / "evil.py").write_text(f"open({str(marker)!r}, 'w').write('the model directory ran code')\n")
    config = {"model_type": "definitely_not_a_model", "architectures": ["EvilModel"]}
    auto_map = {"auto_map": {"AutoConfig": "evil.EvilConfig", "AutoModelForCausalLM": "evil.EvilModel"}}
    (model / "config.json").write_text(json.dumps({**config, **(auto_map if where == "config.json" else {})}))
    if where != "config.json":
        (model / where).write_text(json.dumps(auto_map))
    return model, marker


@pytest.mark.parametrize("where", ["config.json", "tokenizer_config.json", "preprocessor_config.json"])
def test_refused_with_a_message_naming_the_file(tmp_path, where):
    model, marker = _hostile_model(tmp_path, where)
    with pytest.raises(ValueError, match=f"{where} has an auto_map entry.*never runs code"):
        refuse_remote_code(model)
    assert not marker.exists()


def test_engine_and_policy_refuse_before_loading(tmp_path):
    from algos.policies.lm import LoRALMPolicy
    from runners.rollout.generation.hf import HFGenerator

    model, marker = _hostile_model(tmp_path)
    with pytest.raises(ValueError, match="auto_map"):
        HFGenerator(model)
    with pytest.raises(ValueError, match="auto_map"):
        LoRALMPolicy.from_pretrained(model)
    assert not marker.exists()


def _loads_without_trust_remote_code_false() -> list[str]:
    """Every ``X.from_pretrained(...)`` and vLLM ``LLM(...)`` call in runners/ and algos/ that does not pass
    ``trust_remote_code=False`` (``file:line``), found in the syntax tree so calls over several lines count too.
    PEFT adapters and mazegym's own ``LoRALMPolicy`` (which refuses remote code before it loads) are exempt."""
    import ast

    exempt = {"PeftModel", "AutoPeftModelForCausalLM", "LoRALMPolicy"}
    found = []
    for path in sorted([*ROOT.glob("runners/**/*.py"), *ROOT.glob("algos/**/*.py")]):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            loads = isinstance(func, ast.Attribute) and func.attr == "from_pretrained"
            loads = loads and not (isinstance(func.value, ast.Name) and func.value.id in exempt)
            if not (loads or (isinstance(func, ast.Name) and func.id == "LLM")):
                continue
            safe = any(
                k.arg == "trust_remote_code" and isinstance(k.value, ast.Constant) and k.value.value is False
                for k in node.keywords
            )
            if isinstance(func, ast.Name):  # LLM(**kwargs): the kwargs are set where they are built
                safe = safe or 'kwargs["trust_remote_code"] = False' in path.read_text()
            if not safe:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


def test_transformers_itself_is_told_not_to_trust_remote_code(tmp_path):
    """Past the check (e.g. an auto_map added after it ran), every load says trust_remote_code=False."""
    from transformers import AutoConfig

    model, marker = _hostile_model(tmp_path)
    with pytest.raises(ValueError):
        AutoConfig.from_pretrained(str(model), trust_remote_code=False)
    assert not marker.exists()
    assert _loads_without_trust_remote_code_false() == []


def test_eval_command_answered_yes_on_stdin_still_refuses(tmp_path):
    model, marker = _hostile_model(tmp_path)
    proc = subprocess.run(
        [sys.executable, "-m", "runners.cli", "eval", "--model", str(model), "--sets", "VisMaze-v0"],
        input="y\ny\n",
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "auto_map" in proc.stderr and "Traceback" not in proc.stderr
    assert not marker.exists()
