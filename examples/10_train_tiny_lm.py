"""Train the tiny CPU language model from Python: SFT, then GRPO, then the before/after table.

This is ``mazegym train`` without the command line, on a small budget (minutes on a laptop; not
run in CI). Drop the overrides for the full ``cpu-tiny`` main job. Afterwards, ``mazegym report
RUN_DIR`` turns the run into one HTML page (learning curves, solved/failed mazes, GIF replays)::

    python examples/10_train_tiny_lm.py [--run-dir runs/example-10]
"""

import argparse

from runners.config import apply_overrides, validate
from runners.local import report, train
from runners.presets import get_preset


def main() -> None:
    """Train with a small budget, print the case-study table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run-dir", default="runs/example-10", help="where the run's artifacts go")
    args = parser.parse_args()
    config = get_preset("cpu-tiny")                 # tiny Qwen2 text LM, 7x7 ASCII mazes
    apply_overrides(config, [
        f"run_dir={args.run_dir}",
        "sft.steps=150",                            # data budget of the supervised stage
        "loop.steps=10",                            # GRPO steps
        "loop.mazes_per_step=4",                    # 4 mazes x 8 rollouts per step
        "eval.every=5",
    ])
    validate(config)                                # fails fast with a message on a bad config
    result = train(config)                          # SFT (if missing) -> GRPO -> eval -> checkpoints
    print(report(result))
    print("solve rate before RL:", result.before["solve_rate"], "after RL:", result.after["solve_rate"])
    print(f"next: mazegym report {args.run_dir}")


if __name__ == "__main__":
    main()
