"""Train the tiny CPU model from Python: SFT, then GRPO, then the before/after table.

This is `mazegym train` without the command line. It uses a small budget so it finishes in a
few minutes on a laptop; drop the overrides for the full cpu-tiny main job.

    python examples/05_train_tiny_from_python.py
"""

from runners.config import apply_overrides, validate
from runners.local import report, train
from runners.presets import get_preset


def main() -> None:
    config = get_preset("cpu-tiny")                 # tiny Qwen2 text LM, 7x7 ASCII mazes
    apply_overrides(config, [
        "run_dir=runs/example-05",
        "sft.steps=150",                            # data budget of the supervised stage
        "loop.steps=10",                            # GRPO steps
        "loop.mazes_per_step=4",                    # 4 mazes x 8 rollouts per step
        "eval.every=5",
    ])
    validate(config)                                # fails fast with a message on a bad config
    result = train(config)                          # SFT (if missing) -> GRPO -> eval -> checkpoints
    print(report(result))
    print("solve rate before RL:", result.before["solve_rate"], "after RL:", result.after["solve_rate"])


if __name__ == "__main__":
    main()
