"""Export a trained adapter (and optionally a merged model) ready for vLLM or transformers.

Output (default ``<run_dir>/export``)::

    adapter/         PEFT LoRA adapter (adapter_config.json + adapter_model.safetensors)
    base_model/      the model the adapter applies to, when it is not a user-provided path
                     (the tiny model after full-weight SFT lives only in the run dir)
    merged/          with --merged: base + adapter merged, a plain transformers model
    SERVING.md       how to serve it (mazegym serve, transformers + PEFT, vLLM where it applies), for exactly
                     these paths; every snippet in it runs as it is
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

from runners import atomic
from runners.train.checkpoint import read_manifest
from runners.train.run_lock import run_dir_lock
from runners.build import resolve_weights
from runners.config import TrainConfig
from runners.config.derived import rollout_config
from runners.artifacts.serve.serving_doc import serving_markdown


def export(
    config: TrainConfig,
    checkpoint: str = "latest",
    out_dir: str | None = None,
    merged: bool = False,
    force: bool = False,
) -> Path:
    """Write adapter (+ base model when local-only, + merged model) and SERVING.md; returns the output dir.

    The export is built in a hidden directory beside ``out_dir`` and swapped into place, so a
    crash leaves the previous export intact. A non-empty ``out_dir`` that is not an earlier
    export is refused (``FileExistsError``) unless ``force``: its files would be deleted.
    """
    run_dir = Path(config.run_dir)
    with run_dir_lock(
        run_dir, create=False
    ):  # one writer per run dir (a training run there is refused, and refuses this)
        # "latest" falls back to the final adapter when no checkpoint is valid; a named checkpoint must be valid.
        weights = resolve_weights(config, checkpoint=None if checkpoint == "latest" else checkpoint, check_lora=False)
        if not weights.trained_by_rl:
            raise FileNotFoundError(
                f"no trained adapter in {run_dir} (no valid checkpoint, no final_adapter); run `mazegym train` first"
            )
        ckpt, adapter_src, model = weights.checkpoint, weights.adapter, weights.model_dir
        final = Path(out_dir) if out_dir else run_dir / "export"
        if final.exists() and not force and not _is_export(final):
            raise FileExistsError(
                f"--out {final} is not empty and holds no earlier export; exporting would delete its "
                f"files. Choose an empty directory, or pass --force to replace it"
            )
        out = atomic.temp_dir_beside(final)
        try:
            _write_export(config, ckpt, adapter_src, model, out, final, merged)
            atomic.replace_dir(out, final)
        finally:
            shutil.rmtree(out, ignore_errors=True)
        return final


def _is_export(directory: Path) -> bool:
    """True for an empty directory or one this command wrote (it has export.json)."""
    return directory.is_dir() and (not any(directory.iterdir()) or (directory / "export.json").is_file())


def _write_export(
    config: TrainConfig, ckpt: Path | None, adapter_src: Path, model: Path, out: Path, final: Path, merged: bool
) -> None:
    """Fill the staging dir ``out`` with the adapter, base model (when local-only), merged model and
    SERVING.md; every path written into the files names its place under ``final``, where ``out`` goes."""
    final = final.resolve()
    adapter = out / "adapter"
    listed = None
    if ckpt is not None:  # only what the checkpoint's manifest lists (and its check verified), nothing added since
        manifest, problem = read_manifest(ckpt)
        if manifest is None:
            raise ValueError(f"checkpoint {ckpt} is broken: {problem}")
        listed = {rel.removeprefix("adapter/") for rel in manifest["files"] if rel.startswith("adapter/")}
    atomic.copy_regular_tree(adapter_src, adapter, only=listed)
    base, base_public = model, model.resolve()
    if not config.model.path:  # tiny / SFT weights exist only in the run dir: ship them
        base = out / "base_model"
        base_public = final / "base_model"
        atomic.copy_regular_tree(model, base, skip=("DONE", "mazegym_base.json"))
    adapter_public = final / "adapter"
    cfg_path = adapter / "adapter_config.json"
    adapter_cfg = json.loads(cfg_path.read_text())
    adapter_cfg["base_model_name_or_path"] = str(base_public)
    cfg_path.write_text(json.dumps(adapter_cfg, indent=2))
    if merged:
        _merge(base, adapter, out / "merged")
    rank = adapter_cfg.get("r", config.lora.rank)
    try:
        model_type = json.loads((base / "config.json").read_text()).get("model_type")
    except (OSError, ValueError, AttributeError, RecursionError):
        model_type = None  # SERVING.md then gives the generic commands
    settings = dataclasses.asdict(rollout_config(config))
    serving = serving_markdown(
        run_dir=Path(config.run_dir).resolve(),
        adapter=adapter_public,
        base_model=base_public,
        merged=final / "merged" if merged else None,
        rank=rank,
        model_type=model_type,
        rollout=settings,
        eval_set=config.maze.eval_set,
    )
    (out / "SERVING.md").write_text(serving)
    meta = {
        "checkpoint": str(ckpt) if ckpt else None,
        "adapter": str(adapter_public),
        "base_model": str(base_public),
        "merged": merged,
        "preset": config.preset,
    }
    (out / "export.json").write_text(json.dumps(meta, indent=2))


def _merge(base: Path, adapter: Path, target: Path) -> None:
    """Merge ``adapter`` into ``base`` and save a plain transformers model at ``target``."""
    import torch
    from peft import PeftModel
    from transformers import AutoTokenizer

    from algos.models import load_model

    model = load_model(base, dtype=torch.float32)
    model = PeftModel.from_pretrained(model, str(adapter)).merge_and_unload()
    model.save_pretrained(str(target), safe_serialization=True)
    AutoTokenizer.from_pretrained(str(base), trust_remote_code=False).save_pretrained(str(target))
    for extra in ("preprocessor_config.json", "generation_config.json"):
        if (base / extra).is_file():
            shutil.copy(base / extra, target / extra)
