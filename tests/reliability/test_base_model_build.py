"""The run's built base model is built whole beside its place, and its marker is trusted only with its weights."""

from __future__ import annotations

import json

import pytest

from runners.train import fingerprints
from runners.models import task_tokens
from runners import build
from runners.config import apply_overrides
from runners.config.presets import get_preset


def _config(run):
    return apply_overrides(get_preset("cpu-maze-vlm"), [f"run_dir={run}"])


def test_a_rebuild_is_byte_identical_and_reuse_checks_the_weights(tmp_path):
    first = build.prepare_base_model(_config(tmp_path / "a"))
    again = build.prepare_base_model(_config(tmp_path / "b"))
    marker = json.loads((first / build.BASE_MARKER).read_text())
    assert marker["fingerprint"] == fingerprints.result_fingerprint(again, skip=(build.BASE_MARKER,))
    weights = first / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-4] + b"\0\0\0\0")  # edited under an intact marker
    build.prepare_base_model(_config(tmp_path / "a"))
    assert fingerprints.result_fingerprint(first, skip=(build.BASE_MARKER,)) == marker["fingerprint"]  # rebuilt


def test_a_build_that_dies_while_adding_task_tokens_leaves_the_previous_model(tmp_path, monkeypatch):
    out = build.prepare_base_model(_config(tmp_path))
    before = fingerprints.result_fingerprint(out)

    def killed(*args, **kwargs):
        raise KeyboardInterrupt

    changed = apply_overrides(_config(tmp_path), ["rollout.max_moves=24"])  # another recipe: a rebuild
    monkeypatch.setattr(task_tokens, "add_task_tokens", killed)
    with pytest.raises(KeyboardInterrupt):
        build.prepare_base_model(changed)
    assert fingerprints.result_fingerprint(out) == before
    assert [p.name for p in tmp_path.iterdir()] == ["base_model"]  # no temporary directory left
