"""Train the default tiny VLM from Python: SFT, then GRPO, its eval curve, and the before/after table.

This is ``mazegym train`` without the command line: the ``cpu-maze-vlm`` preset (a recurrent
conv vision encoder -> projector -> one-layer Qwen2 decoder, on VisMaze-v0's images and its
fixed 64 mazes), with a shorter RL budget: half the preset's steps, 20 instead of 40 (budgets are steps,
not minutes, so a slower machine runs the same recipe, only slower). ``--preset cpu-tiny`` runs the text LM on ASCII
mazes instead: the honest contrast, a small transformer that barely moves. Afterwards,
``mazegym report RUN_DIR`` turns the run into one HTML page::

    python examples/10_train_from_python.py [--rl-steps N] [--preset cpu-tiny] [--run-dir DIR]

About 4 minutes on 2 CPU cores with the defaults (vision pretraining and SFT ~1, RL ~2.5).
"""

import argparse
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from runners.config import apply_overrides, validate  # noqa: E402
from runners.local import report, train  # noqa: E402
from runners.config.presets import get_preset  # noqa: E402

SMOKE = [
    "model.vision_pretraining.steps=2",
    "sft.steps=2",
    "sft.batch_size=8",
    "loop.steps=2",
    "loop.mazes_per_step=2",
    "eval.every=1",
    "maze.heldout_sets=[]",
]
"""Overrides that make the run a seconds-long smoke test (CI); the curve is then meaningless."""


def eval_curve(run_dir: Path) -> tuple[list[int], list[int]]:
    """(RL step, mazes solved of 64) of every evaluation the run logged."""
    steps, solved = [], []
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        record = json.loads(line)
        if record.get("phase") in ("eval", "rl") and "eval/solve_rate" in record:
            steps.append(int(record["step"]))
            solved.append(round(64 * record["eval/solve_rate"]))
    return steps, solved


def main() -> None:
    """Train, print the case-study table, plot the eval solve rate over RL steps."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="cpu-maze-vlm", help="cpu-maze-vlm (MazeVLM, images) or cpu-tiny (text LM)")
    parser.add_argument("--run-dir", default="runs/example-10", help="where the run's artifacts go")
    parser.add_argument("--rl-steps", type=int, default=None, help="RL steps (default: half the preset's)")
    parser.add_argument("--out", default="examples/out", help="where the curve PNG goes")
    parser.add_argument("--smoke", action="store_true", help="a seconds-long run (CI)")
    args = parser.parse_args()

    config = get_preset(args.preset)
    args.rl_steps = args.rl_steps or max(1, config.loop.steps // 2)
    apply_overrides(config, [f"run_dir={args.run_dir}", f"loop.steps={args.rl_steps}"] + (SMOKE if args.smoke else []))
    validate(config)  # fails fast, naming the field, on a bad config
    result = train(config)  # vision pretraining + SFT (if missing) -> GRPO -> evals -> checkpoints
    print(report(result))  # the case-study table: before and after RL on the fixed 64

    steps, solved = eval_curve(Path(args.run_dir))
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(steps, solved, marker="o")
    ax.set(xlabel="RL step", ylabel="solved of 64 (greedy)", ylim=(0, 64), title=f"{args.preset}: SFT start -> GRPO")
    ax.grid(alpha=0.3)
    out = Path(args.out) / f"10_{args.preset}_curve.png"
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100, bbox_inches="tight")
    print(f"solved at each evaluation: {solved} (steps {steps})")
    print(f"wrote {out}; next: mazegym report {args.run_dir}")


if __name__ == "__main__":
    main()
