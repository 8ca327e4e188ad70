"""The wiring: the one place that builds a run's objects from its config.

Every entry point builds through these functions -- the local runner, each Ray worker, ``mazegym
sft`` / ``eval`` / ``export`` and the benchmarks -- so they cannot drift apart: the base model
(:func:`prepare_base_model`), the model RL starts from (:func:`rl_start`, running SFT first when
needed; :func:`trained_model` without running it), the weights a finished run is evaluated, served and
exported with (:func:`resolve_weights`), the sampler (:func:`build_generator`), the
trainable policy and the algorithm (:func:`build_training`), the maze streams
(:func:`build_stream`, :func:`build_sft_stream`) and the run directory's bookkeeping
(:func:`open_run`).
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path
from typing import Any, Callable

import torch

import algos
from mazegym.evalsets import MazeStream
from runners import atomic, models
from runners.models import task_tokens
from runners.train.calibration import calibrate
from runners.train.run_info import record_invocation, release_freed_memory
from runners.train.run_lock import run_dir_lock
from runners.config import TrainConfig, to_dict, validate
from runners.config.overrides import defaults_like
from runners.config.derived import env_kwargs, max_images_per_prompt, rl_stream_args, sft_stream_args
from runners.config.migrate import migrate
from runners.config.runner import update_threads
from runners.train import sft as sftmod
from runners.train import sft_result
from runners.train.fingerprints import result_fingerprint
from runners.train.seeding import seed_everything
from runners.train.checkpoint import CheckpointManager, required_files
from runners.train.metrics import MetricsLogger
from runners.train.steps import set_threads


def _dtype(name: str) -> torch.dtype:
    return getattr(torch, name)


def base_model_dir(config: TrainConfig) -> Path:
    """The model RL/SFT start from: ``model.path``, or the tiny model built into the run dir."""
    if config.model.path:
        return Path(config.model.path).expanduser()
    return Path(config.run_dir) / "base_model"


def prepare_base_model(config: TrainConfig) -> Path:
    """Build the tiny model (with task tokens / image budget) unless ``model.path`` names one."""
    if config.model.path:
        return base_model_dir(config)
    out = base_model_dir(config)
    recipe = {
        "model": build_recipe(dataclasses.asdict(config.model), type(config.model)),
        "size": config.maze.size,
        "max_moves": config.rollout.max_moves,
        "obs_mode": config.rollout.obs_mode,
        "seed": config.sft.seed,
    }
    if _built_base_model(out, type(config.model)) == recipe:
        return out
    # Built whole beside its place and swapped in: a crash never leaves a model half-built (or tokens added
    # to a model that was already marked as finished).
    tmp = atomic.temp_dir_beside(out)
    try:
        _build_tiny_model(config, tmp)
        atomic.write_json(tmp / BASE_MARKER, {**recipe, "fingerprint": result_fingerprint(tmp, skip=(BASE_MARKER,))})
        atomic.replace_dir(tmp, out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return out


BASE_MARKER = "mazegym_base.json"
"""The file naming what a built base model was built from (its recipe) and a fingerprint of its files."""


def build_recipe(model: dict, settings: type) -> dict:
    """The model settings a tiny build depends on: the ``model`` section without the settings that only a stage
    reads (fields whose metadata names a ``stage``: SFT, RL or evaluation)."""
    stages = {f.name for f in dataclasses.fields(settings) if f.metadata.get("stage")}
    return {k: v for k, v in model.items() if k not in stages}


def _built_base_model(out: Path, settings: type) -> dict | None:
    """The recipe ``out``'s base model was built from, when its marker is intact and its files still match the
    fingerprint the marker recorded; else None (missing, edited or foreign: it is rebuilt). A marker written before
    each part owned its section reads in today's layout (:func:`runners.config.migrate.migrate`)."""
    try:
        saved = json.loads((out / BASE_MARKER).read_text())
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        return None
    if not isinstance(saved, dict):
        return None
    fingerprint = saved.pop("fingerprint", None)
    if fingerprint != result_fingerprint(out, skip=(BASE_MARKER,)):
        return None
    if isinstance(saved.get("model"), dict) and "kind" not in saved["model"]:
        try:
            saved["model"] = migrate({"model": saved["model"]})["model"]
        except (ValueError, KeyError):
            return None
    if isinstance(saved.get("model"), dict):
        saved["model"] = build_recipe(saved["model"], settings)
    return saved


def _build_tiny_model(config: TrainConfig, out: Path) -> None:
    """Build the tiny model of ``config.model`` (its registered spec's builder) into the empty directory ``out``,
    then add its task tokens."""
    context = models.BuildContext(seed=config.sft.seed, maze_size=config.maze.size, env_kwargs=env_kwargs(config))
    models.get(config.model.kind).build(config.model, out, context)
    if getattr(config.model, "task_tokens", False):
        task_tokens.add_task_tokens(
            out,
            task_tokens.task_phrases(
                config.maze.size,
                config.rollout.max_moves,
                config.rollout.obs_mode,
                config.rollout.require_stop,
                config.rollout.size_free_prompt,
            ),
        )


def build_generator(
    config: TrainConfig, model_dir: Path, adapter: Path | None = None, version: int = 0, sleep_mode: bool = False
):
    """The sampler: HF transformers (default) or vLLM (``sleep_mode``: an engine that can free its GPU
    memory during the update, for a colocated trainer), optionally with an adapter loaded as ``version``."""
    if config.engine.name == "vllm":
        from runners.rollout.generation.vllm import VLLMGenerator

        generator = VLLMGenerator(
            str(model_dir),
            dtype=config.model.dtype,
            max_lora_rank=config.lora.rank,
            gpu_memory_utilization=config.engine.gpu_memory_utilization,
            max_images_per_prompt=max_images_per_prompt(config),
            **({"enable_sleep_mode": True} if sleep_mode else {}),
        )
    else:
        from runners.rollout.generation.hf import HFGenerator

        generator = HFGenerator(model_dir, device=config.model.device, dtype=config.model.dtype)
    if adapter is not None:
        generator.load_adapter(str(adapter), version)
    return generator


def build_policy(config: TrainConfig, model_dir: Path, adapter: Path | None = None):
    """The trainable LoRA policy on ``model_dir`` (optionally starting from ``adapter``), with a value head when
    the algorithm trains a critic (ppo)."""
    from algos.policies.lm import LoRALMPolicy

    # Score log-probs at the rollout temperature: the importance ratio compares like with like.
    temperature = config.rollout.temperature if config.rollout.temperature > 0 else 1.0
    policy = LoRALMPolicy.from_pretrained(
        model_dir,
        lora=config.lora,
        dtype=_dtype(config.model.dtype),
        device=config.model.device,
        adapter=adapter,
        temperature=temperature,
        value_head=algos.get(config.algo.name).needs_value_head,
        gradient_checkpointing=config.model.gradient_checkpointing,
    )
    # The kinds with a recurrent vision encoder declare how RL runs it (MazeVLM's settings).
    grad_iterations = getattr(config.model, "vision_grad_iterations", 0)
    update_iterations = getattr(config.model, "vision_update_iterations", [])
    if grad_iterations or update_iterations:
        spec = models.spec_of(policy.model)
        if spec.truncate_vision_backward is None or spec.vary_vision_iterations is None:
            raise ValueError(
                f"model.kind={config.model.kind}: the {spec.name} model at {model_dir} has no recurrent vision encoder"
            )
        if grad_iterations:
            spec.truncate_vision_backward(policy.model, grad_iterations)
        if update_iterations:
            spec.vary_vision_iterations(policy.model, *update_iterations)
    if getattr(config.model, "vision_iterations_by_area", False) and _encoder_runs_one_depth(policy.model):
        raise ValueError(
            f"model.vision_iterations_by_area=true, but the model at {model_dir} was built without it (its encoder "
            "runs one iteration count on every maze size): start from a model built with the setting, or leave it off"
        )
    return policy


def _encoder_runs_one_depth(model: Any) -> bool:
    """Whether ``model`` has a recurrent vision encoder that runs one iteration count on images of every size."""
    spec = models.spec_of(model)
    return spec is not None and spec.vision_iterations is not None and spec.vision_iterations(model) is not None


def build_training(
    config: TrainConfig,
    model_dir: Path,
    adapter: Path | None = None,
    generator: Any = None,
    prepare_policy: Callable[[Any], Any] | None = None,
):
    """Build ``(generator, policy, algorithm, probe)``, seeded, exactly as every runner must.

    The local runner and each Ray worker call this, so every rank starts from the same LoRA
    init and the same algorithm state. ``generator`` replaces the default one (e.g. a vLLM
    engine with sleep mode on a GPU worker); ``prepare_policy(policy)`` runs after the LoRA init
    and before the optimizer is built (the Ray worker shards the policy there:
    :func:`runners.distributed.fsdp.shard_policy`); ``probe`` is None when ``loop.parity_every == 0``.
    """
    if generator is None:
        generator = build_generator(config, model_dir, adapter, version=0)
    seed_everything(config.loop.seed)  # after the generator, whichever built it: the LoRA init is the same everywhere
    policy = build_policy(config, model_dir, adapter)
    if prepare_policy is not None:
        policy = prepare_policy(policy)
    params = dict(config.algo.params)
    params.setdefault("seed", config.loop.seed)
    algorithm = algos.make(config.algo.name, policy, **params)
    if update_threads(config.runner) > 1 and config.model.device == "cpu":
        from algos.parallel import ThreadReplicas

        algorithm.strategy = ThreadReplicas(policy, update_threads(config.runner))
    probe = None
    if config.loop.parity_every > 0:
        from runners.train.parity import ParityProbe

        probe = ParityProbe.for_generator(generator, trainer_dtype=config.model.dtype)
    return generator, policy, algorithm, probe


def build_stream(config: TrainConfig) -> MazeStream:
    """The RL training maze stream (seeded by ``maze.stream_seed``; never yields an evaluation maze)."""
    return MazeStream(**rl_stream_args(config))


def build_sft_stream(config: TrainConfig) -> MazeStream:
    """The SFT demonstration maze stream (``maze.stream_seed + 1``: other mazes than RL's)."""
    return MazeStream(**sft_stream_args(config))


def run_sft(config: TrainConfig, log: Callable[[str], None] = print, metrics: MetricsLogger | None = None) -> Path:
    """Build the base model and run the SFT stage (:func:`runners.train.sft.run_sft`); returns its result dir.

    Refused in a run dir that holds RL checkpoints: they were trained on the SFT result there, which a new
    SFT stage would replace under them.
    """
    from runners.config import ConfigError

    set_threads(config)
    with run_dir_lock(config.run_dir):  # re-entrant: `mazegym train` already holds it
        held = [path.name for _, path in CheckpointManager(Path(config.run_dir) / "checkpoints").list()]
        if held:
            raise ConfigError(
                f"{config.run_dir} holds RL checkpoints ({', '.join(held[-3:])}) trained on its SFT result; a new SFT "
                "stage would replace the model under them. Run SFT in another run dir, or move the checkpoints aside"
            )
        return sftmod.run_sft(config, prepare_base_model(config), build_sft_stream(config), log=log, metrics=metrics)


def start_from(found: Path | None, base: Path) -> tuple[Path, Path | None]:
    """(model dir, starting adapter or None) given the SFT result ``found``: an SFT model dir is the model
    itself; an SFT adapter dir (lora mode) applies to the base model; no SFT result leaves the base model."""
    if found is None:
        return base, None
    if (found / "config.json").is_file():
        return found, None
    return base, found


def rl_start(
    config: TrainConfig, log: Callable[[str], None] = print, metrics: MetricsLogger | None = None
) -> tuple[Path, Path | None]:
    """(model dir, starting adapter or None) for RL: run SFT first when enabled and missing."""
    base = prepare_base_model(config)
    if config.sft.enabled == "never":
        return base, None
    found = None if config.sft.enabled == "always" else sft_result.find_sft_checkpoint(config)
    if found is None:
        found = run_sft(config, log=log, metrics=metrics)
        release_freed_memory()  # the supervised stages' batches, before RL allocates its own
    else:
        log(f"[sft] using existing SFT checkpoint {found}")
    return start_from(found, base)


def trained_model(config: TrainConfig, build_base: bool = True) -> tuple[Path, Path | None, Path | None]:
    """(model dir, SFT adapter or None, SFT result or None) that a run's RL adapters apply to, without
    training anything: what ``mazegym eval`` and ``export`` load. ``build_base=False`` only names the
    base model's directory (for a run whose base model must already exist)."""
    base = prepare_base_model(config) if build_base else base_model_dir(config)
    found = sft_result.find_sft_checkpoint(config) if config.sft.enabled != "never" else None
    model, adapter = start_from(found, base)
    return model, adapter, found


@dataclasses.dataclass(frozen=True)
class Weights:
    """The weights ``mazegym eval`` evaluates, ``serve`` serves and ``export`` ships: a model and its adapter."""

    model_dir: Path
    adapter: Path | None
    source: str
    """Where they come from: "checkpoint", "final adapter", "SFT result", "base model" or "given" (paths passed in)."""
    label: str
    """What they are, in words, for the command's output."""
    checkpoint: Path | None = None
    """The RL checkpoint the adapter is read from, when it is one."""

    @property
    def trained_by_rl(self) -> bool:
        """Whether the adapter is the run's RL result (a checkpoint's or the final one)."""
        return self.source in ("checkpoint", "final adapter")


def resolve_weights(
    config: TrainConfig,
    checkpoint: str | None = None,
    adapter: str | Path | None = None,
    model: str | Path | None = None,
    check_lora: bool = True,
) -> Weights:
    """The weights of a run to evaluate, serve or export: ``checkpoint`` (``latest`` or a path), ``adapter`` or
    ``model`` when given, else the run's latest valid checkpoint, else its final adapter, else its SFT result, else
    its base model. Never builds or trains anything. A checkpoint named but not valid raises ``ValueError``; a
    checkpoint trained on another SFT result than the run holds raises ``ConfigError``; with ``check_lora`` the run's
    own adapter is held to the run's LoRA settings (export, which copies only a checkpoint's verified files, does
    not ask)."""
    from runners.rollout.generation.adapters import check_adapter

    run_dir = Path(config.run_dir)
    adapter_dir = Path(adapter) if adapter else None
    found: Path | None = None
    source, label = "given", (f"adapter {adapter_dir}" if adapter_dir else "")
    if checkpoint or (adapter_dir is None and not model):
        manager = CheckpointManager(run_dir / "checkpoints")
        found = manager.resolve(checkpoint or "latest")
        if found is not None:
            if not model:
                refuse_other_sft(config, found)
            adapter_dir, source, label = found / "adapter", "checkpoint", f"checkpoint {found}"
        elif checkpoint:
            raise ValueError(f"no valid checkpoint in {manager.root}; train first or pass --adapter/--model")
        elif (run_dir / "final_adapter" / "adapter_model.safetensors").is_file():
            adapter_dir, source = run_dir / "final_adapter", "final adapter"
            label = f"final adapter {adapter_dir} (no valid checkpoint)"
    model_dir = Path(model) if model else None
    if model_dir is None:
        # The run's own base model is read as it is, never built or rebuilt (an override such as rollout.max_moves
        # would otherwise rebuild it in place under the run's adapters, beside a training run writing there).
        model_dir, sft_adapter, sft = trained_model(config, build_base=False)
        if not (model_dir / "config.json").is_file():
            raise FileNotFoundError(
                f"the run's model {model_dir} is missing (no config.json); evaluating, serving or exporting never "
                "builds a run's model: rerun `mazegym train` there to build it, or pass --model DIR"
            )
        if adapter_dir is None:
            adapter_dir = sft_adapter
            source, label = (
                ("SFT result", f"SFT result {sft} (the run has no RL checkpoint)")
                if sft is not None
                else ("base model", f"base model {model_dir} (no RL checkpoint, no SFT)")
            )
    if not (model_dir / "config.json").is_file():
        raise ValueError(f"--model {model_dir} is not a model directory (no config.json)")
    if check_lora and adapter_dir is not None and not (adapter or model):
        check_adapter(model_dir, adapter_dir, lora=config.lora)
    return Weights(model_dir, adapter_dir, source, label or f"model {model_dir}", found)


RECIPE_SECTIONS = ("model", "lora", "rollout", "algo", "sft")
"""Config sections a checkpoint's weights, optimizer and data were made with: a resume may not change them."""
RECIPE_KEYS = ("maze.size", "maze.generator", "maze.stream_seed", "maze.eval_set", "loop.seed", "loop.mazes_per_step")
"""Single settings of other sections that a resume may not change either."""
MAY_CHANGE = (
    "sft.checkpoint",
    "sft.enabled",
    "model.device",
    "model.eval_vision_iterations",
    "model.scale_eval_vision_iterations",
)
"""Settings of those sections a resume may change: where the SFT start is read from, the device, how evaluation
runs the model."""


def refuse_changed_recipe(config: TrainConfig, checkpoint: Path) -> None:
    """Raise ConfigError listing the recipe settings (:data:`RECIPE_SECTIONS`, :data:`RECIPE_KEYS`) that differ from
    the ones checkpoint ``checkpoint`` was written with.

    A resumed optimizer keeps its own learning rate and a resumed adapter its own shape, so a changed
    setting would be recorded in config.json and not used; budgets (``loop.steps``), evaluation,
    logging, checkpoint and runner settings may change.
    """
    import json

    from runners.config import ConfigError

    try:
        saved = json.loads((checkpoint / "state.json").read_text()).get("config")
    except (OSError, ValueError, RecursionError):
        return  # the checkpoint's own validity checks report a broken state.json
    if not isinstance(saved, dict):
        return
    saved = migrate(saved)
    now = to_dict(config)

    def flat(data: dict, prefix: str = "") -> dict[str, object]:
        out: dict[str, object] = {}
        for k, v in data.items():
            if isinstance(v, dict) and not (prefix == "algo." and k == "params"):
                out.update(flat(v, f"{prefix}{k}."))
            elif isinstance(v, dict):
                out.update({f"algo.{pk}": pv for pk, pv in v.items()})
            else:
                out[f"{prefix}{k}"] = v
        return out

    # A setting added since the checkpoint was written is compared as its default, the behaviour the run had.
    defaults = {k: v for k, v in flat(to_dict(defaults_like(config))).items() if not k.startswith("algo.")}
    old, new = {**defaults, **flat(saved)}, flat(now)
    keys = sorted(
        k
        for k in set(old) | set(new)
        if (k.split(".")[0] in RECIPE_SECTIONS or k in RECIPE_KEYS) and k not in MAY_CHANGE
    )
    changed = [f"{k}: {old.get(k, '(unset)')!r} -> {new.get(k, '(unset)')!r}" for k in keys if old.get(k) != new.get(k)]
    if changed:
        raise ConfigError(
            f"resuming {checkpoint} with changed settings ({'; '.join(changed[:6])}"
            f"{'; ...' if len(changed) > 6 else ''}): the checkpoint's weights and optimizer were made with the old "
            "ones and would not follow the new; to change them start a new run (checkpoint.resume=none with another "
            "run_dir), or resume without the change"
        )


def refuse_other_sft(config: TrainConfig, checkpoint: Path) -> None:
    """Raise ConfigError when checkpoint ``checkpoint`` was trained on another SFT result than the run starts from
    now (the run dir's, replaced or missing, or another ``sft.checkpoint``); checkpoints that recorded none are not
    checked."""
    import json

    from runners.config import ConfigError

    try:
        trained_on = json.loads((Path(checkpoint) / "state.json").read_text()).get("sft_fingerprint")
    except (OSError, ValueError, RecursionError, AttributeError):
        return  # the checkpoint's own validity checks report a broken state.json
    if not isinstance(trained_on, str) or config.sft.enabled == "never":
        return
    now = sft_result.start_fingerprint(config)
    if config.sft.checkpoint and now != trained_on:
        raise ConfigError(
            f"{checkpoint} was trained from another SFT model than sft.checkpoint={config.sft.checkpoint!r} holds "
            f"(fingerprint {trained_on[:12]}, now {str(now)[:12]}): its adapter means nothing on that model. Resume "
            "with the sft.checkpoint it started from, or start a new run"
        )
    if now is None:
        raise ConfigError(
            f"{checkpoint} was trained on the SFT result in {sft_result.sft_dir(config)}, which is missing or "
            "unfinished; its adapter means nothing on another model. Restore that SFT result, or start a new run"
        )
    if now != trained_on:
        raise ConfigError(
            f"{checkpoint} was trained on another SFT result than {sft_result.sft_dir(config)} holds now (fingerprint "
            f"{trained_on[:12]}, now {now[:12]}): the SFT stage was rerun under it. Use the SFT result it was trained "
            "on, or start a new run"
        )


def checkpoint_files(config: TrainConfig) -> tuple[str, ...]:
    """The files every checkpoint of this run must hold (the critic's weights too when the algorithm trains one)."""
    return required_files(value_head=algos.get(config.algo.name).needs_value_head)


def resume_point(config: TrainConfig, log: Callable[[str], None] = print) -> tuple[CheckpointManager, Path | None]:
    """The run dir's checkpoint manager and the checkpoint a run of ``config`` resumes (None: a fresh start).

    Raises the refusals that come before anything in the run dir changes: a checkpoint of another run dir, nothing
    to resume under ``--resume latest``, an earlier run's checkpoints under a fresh start, a changed recipe or SFT
    result under a resume. ``mazegym train --dry-run`` asks it too, so that it refuses what the run would refuse.
    """
    manager = CheckpointManager(
        Path(config.run_dir) / "checkpoints", keep=config.checkpoint.keep, log=log, required=checkpoint_files(config)
    )
    resume_from = manager.start_run(config.checkpoint.resume)
    if resume_from is not None:
        refuse_changed_recipe(config, resume_from)
        refuse_other_sft(config, resume_from)
    return manager, resume_from


def open_run(
    config: TrainConfig, log: Callable[[str], None] = print, command: str | None = None
) -> tuple[Path, CheckpointManager, Path | None, MetricsLogger]:
    """Validate, then claim the run dir: (run dir, checkpoint manager, checkpoint to resume or None, metrics).

    Refusals (a foreign or broken checkpoint to resume) come before anything in the run dir changes;
    then ``config.json`` and the invocation (``run_info.json``) are written and the metrics opened.
    """
    validate(config)
    set_threads(config)
    run_dir = Path(config.run_dir)
    manager, resume_from = resume_point(config, log)
    if resume_from is not None:
        manager.continue_from(resume_from)
    run_dir.mkdir(parents=True, exist_ok=True)
    atomic.write_json(run_dir / "config.json", to_dict(config))
    calibration = calibrate(config.logging.calibration_seconds) if config.logging.calibration_seconds > 0 else None
    if calibration:
        log(
            f"[machine] calibration: {calibration['units_per_s']:.2f} units/s on one thread "
            f"({calibration['cpus']} CPUs, load average {calibration['load_avg_1m']}); recorded in run_info.json"
        )
    record_invocation(run_dir, command, calibration)
    metrics = MetricsLogger(
        run_dir,
        sinks=config.logging.sinks,
        config=to_dict(config),
    )
    return run_dir, manager, resume_from, metrics
