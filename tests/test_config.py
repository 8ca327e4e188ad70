"""Typed configs: each part's section, one resolution of preset/files/overrides, errors that say what to fix, help
text for every field, configs saved in the earlier layout."""

import dataclasses
import json
from pathlib import Path

import pytest

from runners import config as C
from runners import models
from runners.config.parts import SLOTS
from runners.config.presets import TRAINING_PRESETS, get_preset
from runners.rollout import collectors

V1 = Path(__file__).parent / "data" / "config_v1"
"""Configs saved by mazegym before each part owned its section (config version 1): every preset's, and the run
``--preset cpu-maze-vlm algo.name=ppo`` resolved then (moved to episode plays)."""


def _every_settings_class():
    """The generic schema and the settings class of every part mazegym registers (not those a test registered from
    a docs page's code, which has no source file to read docstrings from)."""
    yield C.TrainConfig
    for slot in SLOTS:
        for name in slot.names():
            if slot.settings_class(name).__module__.startswith("runners."):
                yield slot.settings_class(name)


def test_every_field_of_every_section_and_part_has_help():
    def check(cls):
        docs = C.field_docs(cls)
        for f in dataclasses.fields(cls):
            assert docs.get(f.name), f"{cls.__name__}.{f.name} has no docstring"
            default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
            if dataclasses.is_dataclass(default):
                check(type(default))

    for cls in _every_settings_class():
        check(cls)


def test_dotted_overrides_are_typed():
    cfg = get_preset("cpu-tiny")
    C.apply_overrides(
        cfg,
        [
            "rollout.group_size=4",
            "algo.lr=3e-4",
            "loop.steps=7",
            "logging.sinks={wandb: my-project}",
            "maze.heldout_sets=VisMaze-v0,heldout-13x13",
            'rollout.env_kwargs={"shaping": true}',
        ],
    )
    assert cfg.rollout.group_size == 4 and isinstance(cfg.rollout.group_size, int)
    assert cfg.algo.params["lr"] == pytest.approx(3e-4)
    assert cfg.loop.steps == 7 and cfg.logging.sinks == {"wandb": "my-project"}
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


def test_a_key_of_another_part_names_the_part_that_has_it():
    with pytest.raises(C.ConfigError, match=r"'model.vision_width' \(a setting of model kind maze-vlm:"):
        C.apply_overrides(get_preset("cpu-tiny"), ["model.vision_width=8"])
    with pytest.raises(C.ConfigError, match=r"'rollout.collector.samples' \(a setting of collector branches"):
        C.apply_overrides(get_preset("cpu-tiny"), ["rollout.collector.samples=8"])
    with pytest.raises(C.ConfigError, match=r"'runner.num_workers' \(a setting of runner ray"):
        C.apply_overrides(get_preset("cpu-tiny"), ["runner.num_workers=2"])
    with pytest.raises(C.ConfigError, match=r"'engine.gpu_memory_utilization' \(a setting of engine vllm"):
        C.apply_overrides(get_preset("cpu-tiny"), ["engine.gpu_memory_utilization=0.4"])


@pytest.mark.parametrize(
    "old, new",
    [
        ("model.tiny=vlm", "did you mean model.kind?"),
        ("model.tiny_layers=3", None),  # still a key of the tiny kinds
        ("sft.vision_steps=5", "did you mean model.vision_pretraining.steps?"),
        ("sft.localization_weight=0.5", "did you mean model.localization_weight?"),
        ("eval.vision_iterations=50", "did you mean model.eval_vision_iterations?"),
        ("rollout.branching=true", "did you mean rollout.collector.name=branches?"),
        ("rollout.branching=false", "did you mean rollout.collector.name=plays?"),
        ("rollout.collector=branches", "did you mean rollout.collector.name=branches?"),
        ("rollout.branch_samples=4", "did you mean rollout.collector.samples?"),
        ("loop.engine=vllm", "did you mean engine.name?"),
        ("loop.update_threads=2", "did you mean runner.update_threads?"),
        ("runner.vllm_gpu_memory_utilization=0.4", "did you mean engine.gpu_memory_utilization?"),
        ("runner.ray.address=auto", "did you mean runner.address?"),
        ("logging.wandb=true", r"did you mean logging.sinks={wandb: mazegym}"),
        ("logging.project=p", r"did you mean logging.sinks={wandb: NAME}"),
        ("preset=cpu-tiny", "preset is not a setting; choose the preset with --preset NAME"),
    ],
)
def test_a_key_spelt_as_in_version_1_fails_naming_the_new_one(old, new):
    if new is None:
        C.apply_overrides(get_preset("cpu-maze-vlm"), [old])
        return
    with pytest.raises(C.ConfigError) as err:
        C.apply_overrides(get_preset("cpu-maze-vlm"), [old])
    assert str(err.value).count("\n") == 0
    assert f"override {old}:" in str(err.value)
    assert __import__("re").search(new, str(err.value)), str(err.value)


def test_old_spellings_in_a_config_file_fail_the_same_way(tmp_path):
    path = tmp_path / "old.yaml"
    path.write_text("rollout:\n  branching: true\n  branch_samples: 4\n")
    with pytest.raises(C.ConfigError, match=rf"config file {path}: .*did you mean rollout.collector.name=branches"):
        C.build_config("cpu-tiny", [path])
    path.write_text("scheme_settings:\n  episodes: {rollout: {temperature: 0.3}}\n")
    with pytest.raises(C.ConfigError, match="a preset for each rollout scheme, e.g. --preset cpu-maze-vlm-plays"):
        C.build_config("cpu-tiny", [path])


@pytest.mark.parametrize(
    "override, message",
    [
        ("rollout.group_size=eight", "rollout.group_size: expected an integer"),
        ("loop.steps=1.5", "loop.steps: expected an integer"),
        ("model.gradient_checkpointing=maybe", "expected true/false"),
        ("algo.lr=fast", "algo.lr: expected a number"),
        ("rollout.group_size", "must look like key=value"),
        ("model.kind=nosuch", "model.kind='nosuch' is not a registered model kind; choose one of"),
        ("rollout.collector.name=nosuch", "is not a registered collector"),
        ("maze=3", "maze is a section; set one of its keys, e.g. maze.size=..."),
        ("rollout.env_kwargs.cell_px=30", r"rollout.env_kwargs is one setting \(a mapping\): set it whole"),
    ],
)
def test_bad_values_fail_fast(override, message):
    with pytest.raises(C.ConfigError, match=message):
        C.apply_overrides(get_preset("cpu-tiny"), [override])


@pytest.mark.parametrize(
    "override, message",
    [
        ("sft.mode=half", "sft.mode='half' is not allowed; choose one of full, lora"),
        ("algo.name=nope", "algo.name='nope' is not a registered algorithm"),
        ("rollout.history=some", "rollout.history='some' is not allowed; choose one of full, last_k, none"),
        ("maze.eval_set=VisMaze-v0", "has 9x9 mazes but maze.size=7"),
        ("rollout.group_size=0", "rollout.group_size=0 is out of range: it must be >= 1"),
        ("rollout.obs_mode=image", "tiny text model cannot see them"),
        ("checkpoint.resume=/no/such/ckpt", "is no such checkpoint"),
        ("algo.loss_agg=foo", r"algo \(grpo\): loss_agg='foo'; choose one of"),
        ("algo.lr=-1", r"lr must be in \(0, 1\]"),
        ("algo.name=ppo algo.vf_coef=x", "algo.vf_coef"),
        ('eval.set_mazes={"heldout-99x99":4}', "eval.set_mazes=.* names 'heldout-99x99', which is not an eval set"),
        ('eval.set_mazes={"heldout-21x21":0}', r"eval.set_mazes=.*\['heldout-21x21'\]=0 must be a whole number"),
        ('maze.rl_shapes=[{"extra_openings":1.5}]', r"maze.rl_shapes=.*extra_openings must be in \[0, 1\]"),
        ("maze.rl_shapes=[{openings:0.2}]", r"maze.rl_shapes=.*unknown maze shape key"),
        ('maze.rl_shapes=[{"generator":"nope"}]', r"maze.rl_shapes=.*unknown maze generator"),
        ("maze.size=8", r"maze.size=8 must be odd and >= 5 \(a grid of cells and walls\)"),
        ("loop.max_env_turns=-1", "loop.max_env_turns=-1 is out of range: it must be >= 0"),
        ('logging.sinks={"tensorboard":"x"}', "logging.sinks=.* names 'tensorboard'; choose from wandb, mlflow"),
    ],
)
def test_validation_errors_say_what_to_fix(override, message):
    with pytest.raises(C.ConfigError, match=message):
        C.validate(C.apply_overrides(get_preset("cpu-tiny"), override.split()))


@pytest.mark.parametrize(
    "override, message",
    [
        ("model.vision_pretraining.iterations=[40,10]", r"model.vision_pretraining.iterations=\[40, 10\] must be \[\]"),
        ("model.vision_pretraining.iterations=[5]", "model.vision_pretraining.iterations"),
        ("model.vision_pretraining.path_weight=-1", "model.vision_pretraining.path_weight=-1.0 is out of range"),
        ("model.vision_pretraining.batch_size=-3", "model.vision_pretraining.batch_size=-3 is out of range"),
        ("model.eval_vision_iterations=-2", "model.eval_vision_iterations=-2 is out of range"),
        ("model.vision_update_iterations=[40,10]", r"model.vision_update_iterations=\[40, 10\] must be \[\] or"),
        ("model.vision_locator=nearest", "model.vision_locator='nearest' is not allowed; choose one of learned"),
        ("rollout.obs_mode=text", "model.kind=maze-vlm reads the maze image only; set rollout.obs_mode=image"),
        (
            "model.vision_iterations_by_area=true model.eval_vision_iterations=40",
            "model.eval_vision_iterations is ignored when model.vision_iterations_by_area=true",
        ),
        ('maze.rl_shapes=[{"size":12}]', "maze.rl_shapes=.*no registered env has 12x12 mazes"),
        ('maze.rl_shapes=[{"size":5},{}]', "maze.rl_shapes=.*can never be yielded: of 200 probe draws, 200 are eval"),
        ("rollout.collector.continuation=greedy rollout.collector.settled=0.5", "settled needs the scored move"),
        ("rollout.collector.gamma=0", "rollout.collector.gamma=0.0 is out of range: it must be > 0"),
    ],
)
def test_each_part_checks_its_own_settings(override, message):
    with pytest.raises(C.ConfigError, match=message):
        C.validate(C.apply_overrides(get_preset("cpu-maze-vlm"), override.split()), need_model=False)


@pytest.mark.parametrize("preset", ["cpu-tiny", "cpu-maze-vlm-plays"])
@pytest.mark.parametrize("runner", ["local", "ray"])
def test_ppo_is_accepted_on_the_language_model_presets(preset, runner):
    # the LM policies get a value head for ppo (algos.policies.lm.ValueHead), so nothing refuses it
    ppo = ["algo.name=ppo", "algo.vf_clip=0.2", f"runner.kind={runner}"]
    cfg, _ = C.build_config(preset, overrides=ppo)
    C.validate(cfg, need_model=False)
    assert cfg.algo.name == "ppo" and cfg.algo.params["vf_clip"] == 0.2


def test_an_algorithm_that_cannot_train_on_the_scheme_is_refused_naming_the_preset_or_key():
    cfg, notes = C.build_config("cpu-maze-vlm", overrides=["algo.name=ppo"])
    assert notes == [] and cfg.rollout.collector.name == "branches"  # nothing is rewritten
    with pytest.raises(
        C.ConfigError,
        match=r"algo.name=ppo trains on episode plays only, but rollout.collector.name=branches collects branching "
        r"rollouts: use --preset cpu-maze-vlm-plays, or set rollout.collector.name=plays",
    ):
        C.validate(cfg, need_model=False)
    cfg, _ = C.build_config("cpu-maze-loops", overrides=["algo.name=ppo"])
    with pytest.raises(C.ConfigError, match="use --preset cpu-maze-loops-plays"):
        C.validate(cfg, need_model=False)
    cfg, _ = C.build_config("cpu-maze-scratch", overrides=["algo.name=ppo"])  # no preset of its own for plays
    with pytest.raises(C.ConfigError, match=r"branching rollouts: set rollout.collector.name=plays"):
        C.validate(cfg, need_model=False)


def test_an_algorithm_that_only_branches_is_refused_on_plays(monkeypatch):
    import algos

    monkeypatch.setattr(algos.get("rloo"), "rollout_schemes", ("branching",))
    cfg, _ = C.build_config("cpu-tiny", overrides=["algo.name=rloo"])
    with pytest.raises(C.ConfigError, match="algo.name=rloo trains on branching rollouts only.*=branches"):
        C.validate(cfg, need_model=False)


def test_the_scheme_presets_differ_from_theirs_only_by_the_scheme():
    for preset, plays in (("cpu-maze-vlm", "cpu-maze-vlm-plays"), ("cpu-maze-loops", "cpu-maze-loops-plays")):
        base, other = C.to_dict(get_preset(preset)), C.to_dict(get_preset(plays))
        assert other["rollout"]["collector"] == {"name": "plays"}
        assert (other["rollout"]["temperature"], other["loop"]["mazes_per_step"]) == (0.3, 16)
        assert other["loop"]["overlap_generation"] is False and other["algo"]["params"]["epochs"] == 1
        assert "skip_zero_advantage" not in other["algo"]["params"]  # the algorithm's own default
        for section in ("model", "maze", "sft", "lora", "eval", "checkpoint", "engine", "runner"):
            assert base[section] == other[section], section


def test_choosing_another_part_leaves_the_replaced_parts_settings_out_and_says_so():
    cfg, notes = C.build_config("cpu-maze-vlm", overrides=["model.kind=text", "rollout.obs_mode=text"])
    assert type(cfg.model) is models.get("text").settings and not hasattr(cfg.model, "vision_width")
    assert (cfg.model.tiny_layers, cfg.model.tiny_hidden) == (1, 64)  # settings the text kind has carry over
    assert len(notes) == 1 and notes[0].startswith("model.kind=text (override model.kind=text) replaces")
    assert "model.vision_width" in notes[0] and "model.vision_pretraining" in notes[0]
    C.validate(cfg, need_model=False)
    cfg, notes = C.build_config("cpu-maze-vlm", overrides=["rollout.collector.name=plays"])
    assert type(cfg.rollout.collector) is collectors.CollectorConfig and "rollout.collector.samples" in notes[0]
    with pytest.raises(C.ConfigError, match="loop.overlap_generation=true needs a collector that draws no random"):
        C.validate(cfg, need_model=False)  # the preset's overlap stays: the user chose the collector
    # a key of the replaced part given with (or after) the choice is refused, not dropped
    with pytest.raises(C.ConfigError, match="model.vision_width"):
        C.build_config("cpu-maze-vlm", overrides=["model.kind=text", "model.vision_width=8"])


def test_a_section_assigned_another_part_by_hand_is_refused():
    cfg = get_preset("cpu-tiny")
    cfg.model.kind = "maze-vlm"
    with pytest.raises(C.ConfigError, match="model.kind=maze-vlm but the model section holds TinyModelConfig"):
        C.validate(cfg, need_model=False)


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
    vlm = tmp_path / "vlm"
    vlm.mkdir()
    (vlm / "config.json").write_text(json.dumps({"model_type": "qwen2_vl", "vision_config": {}}))
    with pytest.raises(C.ConfigError, match=f"model.path={vlm} holds a vlm model; set model.kind=vlm"):
        C.validate(C.apply_overrides(get_preset("cpu-tiny"), [f"model.path={vlm}"]))


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


def test_one_resolution_order_and_a_later_mapping_replaces_an_earlier_one(tmp_path):
    first, second = tmp_path / "a.yaml", tmp_path / "b.yaml"
    first.write_text("loop: {steps: 5, seed: 3}\neval: {set_mazes: {heldout-13x13: 8}}\nrun_dir: from-file\n")
    second.write_text("loop: {steps: 6}\n")
    cfg, _ = C.build_config("cpu-maze-vlm", [first, second], run_dir="from-flag", overrides=["loop.steps=7"])
    assert (cfg.loop.steps, cfg.loop.seed, cfg.run_dir) == (7, 3, "from-flag")
    assert cfg.eval.set_mazes == {"heldout-13x13": 8}  # the preset's mapping is replaced, not merged into
    assert get_preset("cpu-maze-scratch").eval.set_mazes == {}  # a preset clears its parent's the same way


def test_round_trip_through_dict():
    for name in TRAINING_PRESETS:
        cfg = get_preset(name)
        saved = json.loads(json.dumps(C.to_dict(cfg)))
        assert saved["config_version"] == C.CONFIG_VERSION
        again = C.from_dict(saved)
        assert C.to_dict(again) == C.to_dict(cfg) and again.preset == name


def _v1(name, tmp_path):
    """A version-1 saved config; the Qwen3-VL one points at a model directory made here."""
    data = json.loads((V1 / f"{name}.json").read_text())
    if data["model"]["path"] == "QWEN3_DIR":
        (tmp_path / "qwen3").mkdir(exist_ok=True)
        (tmp_path / "qwen3" / "config.json").write_text(json.dumps({"model_type": "qwen3_vl", "vision_config": {}}))
        data["model"]["path"] = str(tmp_path / "qwen3")
    return data


@pytest.mark.parametrize("name", sorted(p.stem for p in V1.glob("*.json") if "+" not in p.stem))
def test_a_config_saved_in_version_1_reads_as_the_same_preset_today(name, tmp_path, monkeypatch):
    monkeypatch.setenv("MAZEGYM_QWEN3_VL_8B", str(tmp_path / "qwen3"))
    old = C.from_dict(_v1(name, tmp_path))
    assert C.to_dict(old) == C.to_dict(get_preset(name))


def test_a_run_moved_to_episode_plays_in_version_1_reads_as_the_plays_preset_with_its_algorithm(tmp_path):
    old = C.from_dict(_v1("cpu-maze-vlm+ppo", tmp_path))
    now, _ = C.build_config("cpu-maze-vlm-plays", run_dir="runs/cpu-maze-vlm", overrides=["algo.name=ppo"])
    old_dict, now_dict = C.to_dict(old), C.to_dict(now)
    assert old_dict.pop("preset") == "cpu-maze-vlm" and now_dict.pop("preset") == "cpu-maze-vlm-plays"
    for key in ("skip_zero_advantage", "filter_zero_variance"):  # written out then, the algorithm's default now
        assert old_dict["algo"]["params"].pop(key) is False
    assert old_dict == now_dict
    C.validate(old, need_model=False)


def test_a_config_from_a_newer_mazegym_is_refused_naming_its_version():
    data = C.to_dict(get_preset("cpu-tiny"))
    data["config_version"] = C.CONFIG_VERSION + 1
    with pytest.raises(C.ConfigError, match=f"config version {C.CONFIG_VERSION + 1}; this one reads versions 1 to"):
        C.from_dict(data)


def test_presets_are_valid():
    for name in TRAINING_PRESETS:
        C.validate(get_preset(name), need_model=False)
    big = get_preset("qwen3-vl-8b-lora32")
    assert (big.lora.rank, big.algo.name, big.runner.num_gpus, big.engine.name) == (32, "grpo", 6, "vllm")
    assert big.model.kind == "vlm"
    with pytest.raises(C.ConfigError, match="unknown preset"):
        get_preset("gpt-5")


def test_the_schema_defaults_are_no_presets():
    plain = C.TrainConfig()
    assert plain.preset == "" and plain.run_dir == "runs/default"
    assert plain.run_dir not in {get_preset(name).run_dir for name in TRAINING_PRESETS}
    from runners.config.presets import DEFAULT_PRESET

    assert DEFAULT_PRESET in TRAINING_PRESETS


def test_a_preset_that_names_a_scheme_sets_none_of_the_schemes_keys():
    from runners.config import presets
    from runners.config.resolve import Layer, _Flat, _flatten

    def keys(data):
        flat = _Flat()
        _flatten(Layer("x", data), C.TrainConfig(), "", {slot.section for slot in SLOTS}, flat)
        return set(flat.leaves)

    for name in TRAINING_PRESETS:
        data = presets.preset_data(name)
        if data.get("scheme"):
            own = keys({k: v for k, v in data.items() if k not in presets.PRESET_KEYS})
            assert not own & keys(presets.scheme_data(data["scheme"])), name


def test_presets_are_yaml_files_that_extend_and_read_the_environment(tmp_path, monkeypatch):
    from runners.config import presets

    monkeypatch.setenv(presets.QWEN3_VL_8B_PATH_ENV, "/local/qwen3")
    assert get_preset("qwen3-vl-8b-lora32").model.path == "/local/qwen3"
    monkeypatch.delenv(presets.QWEN3_VL_8B_PATH_ENV)
    assert get_preset("qwen3-vl-8b-lora32").model.path == "/models/Qwen3-VL-8B-Instruct"
    smoke, default = get_preset("smoke"), get_preset("cpu-maze-vlm")
    assert smoke.preset == "smoke" and smoke.loop.steps == 2 and smoke.rollout == default.rollout
    assert smoke.model.vision_pretraining.steps == 2 and smoke.model.vision_width == default.model.vision_width
    assert [layer.label for layer in presets.preset_layers("smoke")] == [
        "scheme maze-vlm-branches",
        "preset cpu-maze-vlm",
        "preset smoke",
    ]
    for name in TRAINING_PRESETS:
        assert len(presets.describe_preset(name)) > 20, name
    # the docs' example preset (docs/extending.md), in a preset directory of its own
    for path in presets.PRESET_DIR.glob("*.yaml"):
        (tmp_path / path.name).write_text(path.read_text())
    (tmp_path / "schemes").mkdir()
    for path in (presets.PRESET_DIR / "schemes").glob("*.yaml"):
        (tmp_path / "schemes" / path.name).write_text(path.read_text())
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
    with pytest.raises(C.ConfigError, match="preset typo: unknown config key 'loop.stepz'.*did you mean 'steps'"):
        presets.load_preset("typo")
    (tmp_path / "noscheme.yaml").write_text("scheme: nope\n")
    with pytest.raises(C.ConfigError, match="scheme 'nope' does not exist; choose one of maze-vlm-branches"):
        presets.load_preset("noscheme")


def test_algorithm_specific_checks_run_without_a_policy():
    cfg = C.apply_overrides(get_preset("cpu-tiny"), ["algo.name=gigpo", "algo.turn_credit=true"])
    with pytest.raises(C.ConfigError, match="gigpo already credits turns"):
        C.validate(cfg)


def test_vllm_serves_modules_trained_in_full_only_for_maze_vlm_encoder_and_projector():
    base = get_preset("cpu-maze-vlm")
    C.validate(C.apply_overrides(base, ["engine.name=vllm"]), need_model=False)  # the projector runs beside it
    with pytest.raises(C.ConfigError, match="modules_to_save"):
        C.validate(
            C.apply_overrides(base, ["engine.name=vllm", "lora.modules_to_save=vision_tower,lm_head"]),
            need_model=False,
        )
    with pytest.raises(C.ConfigError, match="modules_to_save"):
        C.validate(
            C.apply_overrides(get_preset("cpu-tiny-vlm"), ["engine.name=vllm", "lora.modules_to_save=visual"]),
            need_model=False,
        )
    vision_lora = ["lora.exclude_vision=false", "lora.target_modules=[q_proj,conv_in]"]
    hf = C.apply_overrides(get_preset("cpu-maze-vlm"), vision_lora)
    C.validate(hf, need_model=False)  # the HF engine runs the adapted encoder
    with pytest.raises(C.ConfigError, match="lora.exclude_vision=false puts LoRA on the vision side"):
        C.validate(C.apply_overrides(hf, ["engine.name=vllm"]), need_model=False)


def test_evaluation_scales_the_encoder_iterations_with_the_maze_or_fixes_them():
    from runners.config.derived import eval_vision_iterations

    cfg = get_preset("cpu-maze-vlm")  # trained on 9x9 at 20 iterations
    assert eval_vision_iterations(cfg, 20, 9) is None  # the model's own count on its own size
    assert eval_vision_iterations(cfg, 20, 7) is None  # and on smaller mazes
    assert eval_vision_iterations(cfg, 20, 13) == 42  # ceil(20 * (13 / 9)^2) = ceil(41.7)
    assert eval_vision_iterations(cfg, 20, 21) == 109  # ceil(108.9)
    assert eval_vision_iterations(cfg, None, 21) is None  # no recurrent encoder
    off = C.apply_overrides(cfg, ["model.scale_eval_vision_iterations=false"])
    assert eval_vision_iterations(off, 20, 21) is None
    fixed = C.apply_overrides(cfg, ["model.eval_vision_iterations=60"])
    assert eval_vision_iterations(fixed, 20, 7) == 60 and eval_vision_iterations(fixed, 20, 21) == 60


def test_vision_pretraining_batches_default_to_the_sft_batch_size():
    from runners.config.derived import vision_batch_size

    cfg = C.apply_overrides(get_preset("cpu-maze-vlm"), ["sft.batch_size=96"])
    assert vision_batch_size(C.apply_overrides(cfg, ["model.vision_pretraining.batch_size=0"])) == 96
    assert vision_batch_size(C.apply_overrides(cfg, ["model.vision_pretraining.batch_size=32"])) == 32
