"""Typed configs: overrides, files, validation errors that say what to fix, help text for every field."""

import dataclasses
import json

import pytest

from runners import config as C
from runners.config.presets import TRAINING_PRESETS, get_preset


def test_every_field_of_every_section_has_help():
    def check(cls):
        docs = C.field_docs(cls)
        for f in dataclasses.fields(cls):
            assert docs.get(f.name), f"{cls.__name__}.{f.name} has no docstring"
            default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
            if dataclasses.is_dataclass(default):
                check(type(default))

    check(C.TrainConfig)


def test_dotted_overrides_are_typed():
    cfg = get_preset("cpu-tiny")
    C.apply_overrides(
        cfg,
        [
            "rollout.group_size=4",
            "algo.lr=3e-4",
            "loop.steps=7",
            "logging.wandb=true",
            "maze.heldout_sets=VisMaze-v0,heldout-13x13",
            'rollout.env_kwargs={"shaping": true}',
        ],
    )
    assert cfg.rollout.group_size == 4 and isinstance(cfg.rollout.group_size, int)
    assert cfg.algo.params["lr"] == pytest.approx(3e-4)
    assert cfg.loop.steps == 7 and cfg.logging.wandb is True
    assert cfg.maze.heldout_sets == ["VisMaze-v0", "heldout-13x13"]
    assert cfg.rollout.env_kwargs == {"shaping": True}
    C.validate(cfg)


def test_unknown_key_fails_with_suggestion():
    cfg = get_preset("cpu-tiny")
    with pytest.raises(C.ConfigError, match=r"unknown config key 'rollout.group_sise'.*did you mean 'group_size'"):
        C.apply_overrides(cfg, ["rollout.group_sise=8"])
    with pytest.raises(C.ConfigError, match="unknown config key 'nosuch'"):
        C.apply_overrides(cfg, ["nosuch.thing=1"])
    with pytest.raises(C.ConfigError, match=r"algo.lrr.*did you mean 'lr'"):
        C.apply_overrides(cfg, ["algo.lrr=1"])


@pytest.mark.parametrize(
    "override, message",
    [
        ("rollout.group_size=eight", "rollout.group_size: expected an integer"),
        ("loop.steps=1.5", "loop.steps: expected an integer"),
        ("logging.wandb=maybe", "expected true/false"),
        ("algo.lr=fast", "algo.lr: expected a number"),
        ("rollout.group_size", "must look like key=value"),
    ],
)
def test_bad_values_fail_fast(override, message):
    with pytest.raises(C.ConfigError, match=message):
        C.apply_overrides(get_preset("cpu-tiny"), [override])


@pytest.mark.parametrize(
    "override, message",
    [
        ("sft.mode=half", "sft.mode='half' is not allowed; choose one of full, lora"),
        ("algo.name=nope", "not a registered algorithm"),
        ("rollout.history=some", "rollout.history: history must be one of"),
        ("maze.eval_set=VisMaze-v0", "has 9x9 mazes but maze.size=7"),
        ("rollout.group_size=0", "rollout.group_size: group_size must be >= 1"),
        ("rollout.obs_mode=image", "tiny text model cannot see them"),
        ("checkpoint.resume=/no/such/ckpt", "no such checkpoint"),
        ("algo.loss_agg=foo", r"algo \(grpo\): loss_agg='foo'; choose one of"),
        ("algo.lr=-1", r"lr must be in \(0, 1\]"),
        ("algo.name=ppo algo.vf_coef=x", "algo.vf_coef"),
        ("sft.vision_iterations=[40,10]", r"sft.vision_iterations=\[40, 10\] must be \[\] or \[low, high\]"),
        ("sft.vision_iterations=[5]", "sft.vision_iterations"),
        ("sft.vision_path_weight=-1", "sft.vision_path_weight=-1.0 is out of range"),
        ("sft.vision_batch_size=-3", "sft.vision_batch_size=-3 is out of range"),
        ('eval.set_mazes={"heldout-99x99":4}', "eval.set_mazes names 'heldout-99x99', which is not an eval set"),
        ('eval.set_mazes={"heldout-21x21":0}', r"eval.set_mazes\['heldout-21x21'\]=0 must be a whole number"),
        ("eval.vision_iterations=-2", "eval.vision_iterations=-2 is out of range"),
        ('maze.rl_shapes=[{"extra_openings":1.5}]', r"maze.rl_shapes=.*extra_openings must be in \[0, 1\]"),
        ("maze.rl_shapes=[{openings:0.2}]", r"maze.rl_shapes=.*unknown maze shape key"),
        ('maze.rl_shapes=[{"generator":"nope"}]', r"maze.rl_shapes=.*unknown maze generator"),
        ("model.vision_update_iterations=[40,10]", r"model.vision_update_iterations must be \[\] or \[low, high\]"),
        ("model.vision_update_iterations=[10,40]", "model.vision_update_iterations varies the depth"),
        ("maze.size=8", r"maze.size must be odd and >= 5 \(a grid of cells and walls\), got 8"),
        ("loop.max_env_turns=-1", "loop.max_env_turns must be >= 0"),
    ],
)
def test_validation_errors_say_what_to_fix(override, message):
    with pytest.raises(C.ConfigError, match=message):
        C.validate(C.apply_overrides(get_preset("cpu-tiny"), override.split()))


@pytest.mark.parametrize("preset", ["cpu-tiny", "cpu-maze-vlm"])
@pytest.mark.parametrize("runner", ["local", "ray"])
def test_ppo_is_accepted_on_the_language_model_presets(preset, runner):
    # the LM policies get a value head for ppo (algos.policies.lm.ValueHead), so nothing refuses it
    ppo = ["algo.name=ppo", "algo.vf_clip=0.2", f"runner.kind={runner}"]
    if get_preset(preset).rollout.branching:  # a critic needs whole plays, not branches: the error says so
        with pytest.raises(
            C.ConfigError, match="algo.name=ppo trains on episode plays only; set rollout.branching=false"
        ):
            C.validate(C.apply_overrides(get_preset(preset), ppo))
        ppo += "rollout.branching=false algo.skip_zero_advantage=false loop.overlap_generation=false".split()
    if runner == "ray" and get_preset(preset).loop.update_threads > 1:  # the Ray runner's parallelism is workers
        ppo += ["loop.update_threads=1"]
    cfg = C.apply_overrides(get_preset(preset), ppo)
    C.validate(cfg)
    assert cfg.algo.name == "ppo" and cfg.algo.params["vf_clip"] == 0.2


def _resolved(preset, overrides, files=()):
    """``preset`` with ``overrides``, put on its algorithm's rollout scheme as ``mazegym`` does; (config, note)."""
    cfg = get_preset(preset)
    base = C.scheme_of(cfg)
    C.apply_overrides(cfg, overrides)
    return cfg, C.resolve_scheme(cfg, base, C.override_keys(overrides, files))


def test_an_algorithm_that_cannot_branch_moves_to_episode_plays():
    cfg, note = _resolved("cpu-maze-vlm", ["algo.name=ppo"])
    assert note.startswith("algo.name=ppo trains on episode plays only: rollout.branching=false")
    assert not cfg.rollout.branching and not cfg.loop.overlap_generation
    assert cfg.algo.params["skip_zero_advantage"] is False and cfg.algo.params["filter_zero_variance"] is False
    assert cfg.algo.params["epochs"] == 1  # its scheme_settings
    assert cfg.algo.params["decay_updates"] == 20  # the preset's other settings stay
    C.validate(cfg, need_model=False)
    for name in ("grpo", "dapo"):  # they branch: nothing moves
        cfg, note = _resolved("cpu-maze-vlm", [f"algo.name={name}"])
        assert note is None and cfg.rollout.branching and cfg.algo.params["skip_zero_advantage"] is True
    cfg, note = _resolved("cpu-tiny", ["algo.name=ppo"])  # already on episode plays: the preset stays as it is
    assert note is None and cfg.algo.params["filter_zero_variance"] is True


def test_a_scheme_the_user_chose_brings_its_settings_but_keeps_the_users():
    cfg, note = _resolved("cpu-maze-vlm", ["rollout.branching=false"])
    assert note == (
        "episode plays (rollout.branching=false) also set: loop.overlap_generation=false "
        "algo.skip_zero_advantage=false algo.filter_zero_variance=false rollout.temperature=0.3 "
        "loop.mazes_per_step=16 algo.epochs=1"
    )
    C.validate(cfg, need_model=False)
    # the preset's settings for episode plays (scheme_settings) yield to the user's own
    cfg, note = _resolved("cpu-maze-vlm", ["algo.name=ppo", "rollout.temperature=1.0"])
    assert cfg.rollout.temperature == 1.0 and "temperature" not in note and cfg.loop.mazes_per_step == 16
    cfg, note = _resolved("cpu-maze-vlm", ["algo.name=dapo", "rollout.branching=false"])
    assert "filter_zero_variance" not in note and cfg.algo.params["filter_zero_variance"] is True  # DAPO's default
    cfg, note = _resolved("cpu-maze-vlm", ["algo.name=ppo", "algo.params.filter_zero_variance=true"])
    assert cfg.algo.params["filter_zero_variance"] is True and "filter_zero_variance" not in note
    cfg, note = _resolved("cpu-maze-vlm", ["algo.name=ppo"], files=[{"rollout": {"branching": True}}])
    assert note is None and cfg.rollout.branching
    with pytest.raises(C.ConfigError, match="rollout.branching=true: algo.name=ppo"):
        C.validate(cfg, need_model=False)


def test_scheme_settings_apply_only_on_the_other_scheme_and_are_checked():
    cfg, note = _resolved("cpu-maze-vlm", ["algo.name=grpo"])  # on the preset's own scheme they are not applied
    assert note is None and cfg.rollout.temperature == 1.0 and cfg.loop.mazes_per_step == 64
    cfg, _ = _resolved("cpu-maze-vlm", ["algo.name=ppo"])
    assert (cfg.rollout.temperature, cfg.loop.mazes_per_step) == (0.3, 16)
    assert C.from_dict(C.to_dict(cfg)).scheme_settings == cfg.scheme_settings  # a saved run keeps them
    # a preset or config file of one's own may set them; each key is checked as if it were set
    for bad, match in (
        ({"episode": {"rollout": {"temperature": 0.3}}}, "scheme_settings.episode: not a rollout scheme"),
        ({"episodes": {"rollout": {"temprature": 0.3}}}, "scheme_settings.episodes: unknown config key 'rollout.temp"),
        ({"episodes": {"loop": {"mazes_per_step": "many"}}}, "scheme_settings.episodes: loop.mazes_per_step"),
        ({"episodes": {"rollout": {"branching": True}}}, "the scheme itself cannot be one of its settings"),
    ):
        cfg = C.apply_config_file(get_preset("cpu-maze-vlm"), {"scheme_settings": bad})
        with pytest.raises(C.ConfigError, match=match):
            C.validate(cfg, need_model=False)
    cfg = C.apply_config_file(
        get_preset("cpu-tiny"), {"scheme_settings": {"branching": {"rollout": {"branch_samples": 4}}}}
    )
    C.validate(cfg, need_model=False)
    base = C.scheme_of(cfg)
    C.apply_overrides(cfg, ["rollout.branching=true"])
    note = C.resolve_scheme(cfg, base, {"rollout.branching"})
    assert cfg.rollout.branch_samples == 4 and "rollout.branch_samples=4" in note


def test_an_algorithm_that_only_branches_moves_to_branching(monkeypatch):
    import algos

    monkeypatch.setattr(algos.get("rloo"), "rollout_schemes", ("branching",))
    cfg, note = _resolved("cpu-tiny", ["algo.name=rloo"])
    assert note.startswith("algo.name=rloo trains on branching rollouts only: rollout.branching=true")
    assert cfg.rollout.branching and cfg.algo.params["old_logprobs"] == "recompute"
    C.validate(cfg, need_model=False)
    with pytest.raises(C.ConfigError, match="set rollout.branching=true .* or use grpo"):
        C.validate(C.apply_overrides(get_preset("cpu-tiny"), ["algo.name=rloo"]), need_model=False)


def test_override_keys_name_what_the_user_set():
    keys = C.override_keys(["algo.params.lr=1", "rollout.branching = true"], [{"algo": {"name": "ppo"}, "x": 1}])
    assert keys == {"algo.lr", "rollout.branching", "algo", "algo.name", "x"}


def test_branching_needs_recomputed_old_logprobs():
    cfg = C.apply_overrides(get_preset("cpu-maze-vlm"), ["algo.old_logprobs=rollout"])
    with pytest.raises(C.ConfigError, match="algo.old_logprobs=recompute"):
        C.validate(cfg)
    with pytest.raises(C.ConfigError, match="history"):
        C.validate(C.apply_overrides(get_preset("cpu-maze-vlm"), ["rollout.history=full"]))


def test_missing_model_path_fails_with_instructions(tmp_path):
    cfg = C.apply_overrides(get_preset("cpu-tiny"), [f"model.path={tmp_path / 'nothing'}"])
    with pytest.raises(C.ConfigError, match=r"model.path=.*not a local model directory.*config.json"):
        C.validate(cfg)
    C.validate(cfg, need_model=False)  # a dry run does not need the weights


def test_json_and_yaml_files(tmp_path):
    path = tmp_path / "c.json"
    path.write_text(
        json.dumps({"rollout": {"group_size": 4}, "algo": {"name": "rloo", "lr": 1e-4}, "loop": {"steps": 3}})
    )
    cfg = C.load_config_file(get_preset("cpu-tiny"), path)
    assert (cfg.rollout.group_size, cfg.algo.name, cfg.algo.params["lr"], cfg.loop.steps) == (4, "rloo", 1e-4, 3)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"rollout": {"groupsize": 4}}))
    with pytest.raises(C.ConfigError, match="rollout.groupsize"):
        C.load_config_file(get_preset("cpu-tiny"), bad)
    yaml = pytest.importorskip("yaml")
    ypath = tmp_path / "c.yaml"
    ypath.write_text(yaml.safe_dump({"sft": {"steps": 11}, "maze": {"heldout_sets": ["VisMaze-v0"]}}))
    cfg = C.load_config_file(get_preset("cpu-tiny"), ypath)
    assert cfg.sft.steps == 11 and cfg.maze.heldout_sets == ["VisMaze-v0"]


def test_round_trip_through_dict():
    for name in TRAINING_PRESETS:
        cfg = get_preset(name)
        again = C.from_dict(json.loads(json.dumps(C.to_dict(cfg))))
        assert C.to_dict(again) == C.to_dict(cfg)
    # a config saved when episode_mean was a field of the algo section itself reads the same
    saved = C.to_dict(get_preset("cpu-tiny"))
    saved["algo"]["params"].pop("episode_mean")
    saved["algo"]["episode_mean"] = True
    assert C.from_dict(saved).algo.params["episode_mean"] is True


def test_presets_are_valid():
    for name in TRAINING_PRESETS:
        C.validate(get_preset(name), need_model=False)
    big = get_preset("qwen3-vl-8b-lora32")
    assert (big.lora.rank, big.algo.name, big.runner.num_gpus, big.loop.engine) == (32, "grpo", 6, "vllm")
    with pytest.raises(C.ConfigError, match="unknown preset"):
        get_preset("gpt-5")


def test_presets_are_yaml_files_that_extend_and_read_the_environment(tmp_path, monkeypatch):
    from runners.config import presets

    monkeypatch.setenv(presets.QWEN3_VL_8B_PATH_ENV, "/local/qwen3")
    assert get_preset("qwen3-vl-8b-lora32").model.path == "/local/qwen3"
    monkeypatch.delenv(presets.QWEN3_VL_8B_PATH_ENV)
    assert get_preset("qwen3-vl-8b-lora32").model.path == "/models/Qwen3-VL-8B-Instruct"
    smoke, default = get_preset("smoke"), get_preset("cpu-maze-vlm")
    assert smoke.preset == "smoke" and smoke.loop.steps == 2 and smoke.model == default.model  # extends the default
    for name in TRAINING_PRESETS:
        assert len(presets.describe_preset(name)) > 20, name
    # the docs' example preset (docs/extending.md), in a preset directory of its own
    for path in presets.PRESET_DIR.glob("*.yaml"):
        (tmp_path / path.name).write_text(path.read_text())
    (tmp_path / "cpu-maze-vlm-32.yaml").write_text(
        "# cpu-maze-vlm-32: the default job with 32 mazes per step and minibatches of 64 turns.\n"
        "extends: cpu-maze-vlm\nrun_dir: runs/cpu-maze-vlm-32\nloop:\n  mazes_per_step: 32\n"
        "algo:\n  minibatch_size: 64\n  micro_batch_size: 64\n"
    )
    monkeypatch.setattr(presets, "PRESET_DIR", tmp_path)
    mine = presets.load_preset("cpu-maze-vlm-32")
    assert (mine.preset, mine.loop.mazes_per_step, mine.algo.params["minibatch_size"]) == ("cpu-maze-vlm-32", 32, 64)
    assert mine.algo.params["epochs"] == 3 and mine.model == default.model
    assert presets.describe_preset("cpu-maze-vlm-32").startswith("the default job with 32 mazes")
    (tmp_path / "broken.yaml").write_text("loop:\n  steps: [unclosed\n")
    with pytest.raises(C.ConfigError, match="preset 'broken'"):
        presets.load_preset("broken")
    (tmp_path / "typo.yaml").write_text("loop:\n  stepz: 3\n")
    with pytest.raises(C.ConfigError, match="did you mean 'steps'"):
        presets.load_preset("typo")


def test_algorithm_specific_checks_run_without_a_policy():
    cfg = C.apply_overrides(get_preset("cpu-tiny"), ["algo.name=gigpo", "algo.turn_credit=true"])
    with pytest.raises(C.ConfigError, match="gigpo already credits turns"):
        C.validate(cfg)


def test_vllm_serves_modules_trained_in_full_only_for_maze_vlm_encoder_and_projector():
    base = get_preset("cpu-maze-vlm")
    C.validate(C.apply_overrides(base, ["loop.engine=vllm"]), need_model=False)  # the projector runs beside the engine
    with pytest.raises(C.ConfigError, match="modules_to_save"):
        C.validate(
            C.apply_overrides(base, ["loop.engine=vllm", "lora.modules_to_save=vision_tower,lm_head"]),
            need_model=False,
        )
    with pytest.raises(C.ConfigError, match="modules_to_save"):
        C.validate(
            C.apply_overrides(get_preset("cpu-tiny-vlm"), ["loop.engine=vllm", "lora.modules_to_save=visual"]),
            need_model=False,
        )


def test_evaluation_scales_the_encoder_iterations_with_the_maze_or_fixes_them():
    from runners.config.derived import eval_vision_iterations

    cfg = get_preset("cpu-maze-vlm")  # trained on 9x9 at 20 iterations
    assert eval_vision_iterations(cfg, 20, 9) is None  # the model's own count on its own size
    assert eval_vision_iterations(cfg, 20, 7) is None  # and on smaller mazes
    assert eval_vision_iterations(cfg, 20, 13) == 42  # ceil(20 * (13 / 9)^2) = ceil(41.7)
    assert eval_vision_iterations(cfg, 20, 21) == 109  # ceil(108.9)
    assert eval_vision_iterations(cfg, None, 21) is None  # no recurrent encoder
    off = C.apply_overrides(cfg, ["eval.scale_vision_iterations=false"])
    assert eval_vision_iterations(off, 20, 21) is None
    fixed = C.apply_overrides(cfg, ["eval.vision_iterations=60"])
    assert eval_vision_iterations(fixed, 20, 7) == 60 and eval_vision_iterations(fixed, 20, 21) == 60


def test_vision_pretraining_batches_default_to_the_sft_batch_size():
    from runners.config.derived import vision_batch_size

    cfg = C.apply_overrides(get_preset("cpu-maze-vlm"), ["sft.batch_size=96"])
    assert vision_batch_size(C.apply_overrides(cfg, ["sft.vision_batch_size=0"])) == 96
    assert vision_batch_size(C.apply_overrides(cfg, ["sft.vision_batch_size=32"])) == 32
