"""The supervised stages against their budgets: is the SFT start at its plateau?

    python benchmarks/sft_curve.py --out runs/sft-curve                     # the cpu-maze-loops preset, seeds 0 1 2
    python benchmarks/sft_curve.py --seeds 0 --vision-steps 200 400 --sft-steps 10 20 --decoder-at 400 --out DIR

For each seed, the preset's vision pretraining (perfect mazes only) runs once to the largest of ``--vision-steps``,
its encoder kept at each listed count (the pretraining's learning rate is constant, so an encoder kept at step V is
the encoder a V-step pretraining gives). On each kept encoder the decoder stage (SFT, the encoder frozen) trains the
preset's ``sft.steps``; on the encoder of ``--decoder-at`` it also trains each of ``--sft-steps`` (a fresh run each,
its learning-rate schedule over its own budget). Every model is played greedily on ``--sets`` (the perfect-maze set
and the loops set by default). Writes ``curve.json`` and ``curve.md`` (a table per stage, mean and range over seeds)
into ``--out``. The decoder stage reads its demonstrations from a stream of its own, not the mazes left after
pretraining as ``mazegym sft`` does: the mazes differ, the budgets and the recipe do not.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def pretrained_encoders(config, base: Path, keep_at: list[int]) -> dict[int, dict]:
    """The preset's vision pretraining run to ``max(keep_at)`` steps; the encoder's weights at each step of keep_at."""
    from algos.models import load_model
    from runners.build import build_sft_stream
    from runners.train.demos import DemoStream
    from runners.train.seeding import seed_everything
    from runners.train.sft import demo_maker, pretrain_vision_as_configured

    seed_everything(config.sft.seed)
    _, image_processor, make_turns = demo_maker(config, base)
    cells = DemoStream(
        build_sft_stream(config), lambda spec, rng: make_turns(spec, rng, vision=True), seed=config.sft.seed
    )
    model = load_model(base)
    kept: dict[int, dict] = {}

    def keep(step: int, metrics: dict) -> None:
        if step in keep_at:
            kept[step] = {n: p.detach().clone() for n, p in model.named_parameters() if "vision_tower" in n}
            print(f"  vision step {step}: loss {metrics['vision_loss']:.4f}", flush=True)

    pretrain_vision_as_configured(config, model, cells, image_processor, max(keep_at), keep)
    return kept


def decoder_sft(config, base: Path, encoder: dict, steps: int, out: Path) -> Path:
    """The decoder stage on a kept encoder: ``steps`` SFT steps, the encoder frozen; the model saved in ``out``."""
    import shutil

    from algos.models import load_model
    from runners.build import build_sft_stream
    from runners.train.demos import DemoStream
    from runners.train.freezing import freeze_vision_tower
    from runners.train.seeding import seed_everything
    from runners.train.sft import demo_maker, sft_threads, train_sft

    seed_everything(config.sft.seed)
    tokenizer, image_processor, make_turns = demo_maker(config, base)
    demos = DemoStream(build_sft_stream(config), make_turns, seed=config.sft.seed)
    model = load_model(base)
    model.load_state_dict(encoder, strict=False)
    freeze_vision_tower(model)
    train_sft(
        model,
        [p for p in model.parameters() if p.requires_grad],
        demos,
        steps=steps,
        batch_size=config.sft.batch_size,
        lr=config.sft.lr,
        pad_id=tokenizer.pad_token_id,
        image_processor=image_processor,
        localization_weight=config.model.localization_weight,
        threads=sft_threads(config),
    )
    model.save_pretrained(str(out), safe_serialization=True)
    tokenizer.save_pretrained(str(out))
    for extra in ("preprocessor_config.json", "generation_config.json"):
        if (base / extra).is_file():
            shutil.copy(base / extra, out / extra)
    return out


def solve_rates(config, model_dir: Path, sets: list[str]) -> dict[str, int]:
    """Greedy solved count of ``model_dir`` on each set, as ``mazegym eval`` plays it."""
    from runners.build import build_generator
    from runners.train.steps import eval_step

    generator = build_generator(config, model_dir)
    return {name: int(eval_step(generator, config, name)["solved"]) for name in sets}


def summary_table(rows: list[dict], key: str, label: str, sets: list[str]) -> list[str]:
    """Markdown rows: one per budget of ``key``, each set's mean solved count and range over the seeds."""
    lines = [
        f"| {label} | " + " | ".join(f"{s}: mean (min-max) of 64" for s in sets) + " |",
        "|---|" + "---|" * len(sets),
    ]
    for budget in sorted({r[key] for r in rows}):
        at = [r for r in rows if r[key] == budget]
        cells = []
        for name in sets:
            counts = [r["solved"][name] for r in at]
            cells.append(f"{sum(counts) / len(counts):.1f} ({min(counts)}-{max(counts)}), {len(counts)} seeds")
        lines.append(f"| {budget} | " + " | ".join(cells) + " |")
    return lines


def main(argv: list[str] | None = None) -> int:
    """Train and evaluate the supervised stages at each budget; print and write the curve."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="cpu-maze-loops")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--vision-steps", type=int, nargs="+", default=[400, 800, 1600, 2400])
    parser.add_argument("--sft-steps", type=int, nargs="+", default=[10, 20, 40, 80, 160])
    parser.add_argument("--decoder-at", type=int, default=1600, help="the vision step whose encoder gets every budget")
    parser.add_argument("--sets", nargs="+", default=["VisMaze-v0", "loops-9x9"])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("overrides", nargs="*", help="KEY=VALUE config overrides")
    args = parser.parse_args(argv)
    if args.decoder_at not in args.vision_steps:
        parser.error("--decoder-at must be one of --vision-steps")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    from runners.atomic import write_json, write_text
    from runners.build import prepare_base_model
    from runners.config import apply_overrides
    from runners.config.presets import get_preset

    rows: list[dict] = []
    for seed in args.seeds:
        run = args.out / f"seed{seed}"
        config = apply_overrides(
            get_preset(args.preset), [f"run_dir={run}", f"sft.seed={seed}", "logging.progress=false", *args.overrides]
        )
        base = prepare_base_model(config)
        print(f"seed {seed}: vision pretraining to {max(args.vision_steps)} steps", flush=True)
        encoders = pretrained_encoders(config, base, args.vision_steps)
        for vision_steps in args.vision_steps:
            budgets = (
                sorted({*args.sft_steps, config.sft.steps}) if vision_steps == args.decoder_at else [config.sft.steps]
            )
            for sft_steps in budgets:
                model_dir = decoder_sft(
                    config, base, encoders[vision_steps], sft_steps, run / f"v{vision_steps}_s{sft_steps}"
                )
                solved = solve_rates(copy.deepcopy(config), model_dir, args.sets)
                rows.append({"seed": seed, "vision_steps": vision_steps, "sft_steps": sft_steps, "solved": solved})
                print(f"  vision {vision_steps}, decoder {sft_steps}: {solved}", flush=True)
                write_json(args.out / "curve.json", {"preset": args.preset, "sets": args.sets, "rows": rows})
    default_sft = apply_overrides(get_preset(args.preset), list(args.overrides)).sft.steps
    command = "python benchmarks/sft_curve.py " + " ".join(sys.argv[1:] if argv is None else argv)
    lines = [f"Command: `{command}`", "", f"Vision pretraining steps (decoder SFT {default_sft} steps on each):", ""]
    lines += summary_table(
        [r for r in rows if r["sft_steps"] == default_sft], "vision_steps", "vision steps", args.sets
    )
    lines += ["", f"Decoder SFT steps (on the encoder of {args.decoder_at} vision steps):", ""]
    lines += summary_table(
        [r for r in rows if r["vision_steps"] == args.decoder_at], "sft_steps", "SFT steps", args.sets
    )
    write_text(args.out / "curve.md", "\n".join(lines) + "\n")
    print("\n".join(lines))
    print(json.dumps({"wrote": str(args.out / "curve.md")}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
