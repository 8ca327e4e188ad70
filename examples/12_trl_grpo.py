"""Train on VisMaze with TRL's GRPOTrainer: the maze is a tool-calling environment, the env pays the reward.

The recipe for a real model on a GPU (``pip install -e ".[trl]"``; add ``vllm`` for fast generation)::

    python examples/12_trl_grpo.py --model Qwen/Qwen3-1.7B --steps 300 --use-vllm

Each rollout is one maze: the prompt describes the task, ``VisMazeToolEnv.reset`` appends the ASCII
map, the model calls ``move(direction)`` (TRL runs the tool and feeds back the result), and
``get_reward`` pays 1.0 for a solved maze. Training mazes come from ``MazeStream`` (never an
evaluation maze); the eval reward is the solve rate on VisMaze-v0's fixed 64 mazes
(``--eval-set``), the case study's evaluation. ``--server URL`` plays the mazes on a
``mazegym serve-env`` server instead of in process.

``--smoke`` runs two steps on CPU with a tiny model built from code (nothing is downloaded): the
mechanics only, its solve rate is 0.
"""

import argparse
import tempfile
from pathlib import Path

import trl
from transformers import AutoModelForCausalLM, AutoTokenizer

from mazegym.integrations.trl_env import VisMazeToolEnv, maze_dataset


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="Qwen/Qwen3-1.7B", help="a causal LM whose chat template TRL can parse")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--mazes", type=int, default=4096, help="training mazes")
    parser.add_argument("--eval-set", default="VisMaze-v0", help="fixed evaluation set (its solve rate is logged)")
    parser.add_argument("--server", default=None, help="play on a mazegym serve-env server at this URL")
    parser.add_argument("--use-vllm", action="store_true", help="generate with vLLM (GPU)")
    parser.add_argument("--out", default="runs/trl-grpo")
    parser.add_argument("--smoke", action="store_true", help="2 steps on CPU with a tiny model built from code")
    args = parser.parse_args()

    if args.smoke:
        from runners.models.tiny import build_tiny_text_lm

        model_path = build_tiny_text_lm(Path(tempfile.mkdtemp()) / "tiny-lm")
        tokenizer = AutoTokenizer.from_pretrained(model_path)
        # TRL's Qwen3 template: a tool-call format TRL parses (the tiny model's own template has no tools)
        tokenizer.chat_template = (Path(trl.__file__).parent / "chat_templates" / "qwen3.jinja").read_text()
        eval_rows = maze_dataset(args.eval_set).select(range(4))
        config = dict(max_steps=2, per_device_train_batch_size=4, num_generations=4, max_completion_length=32)
        config.update(use_cpu=True, per_device_eval_batch_size=4)
    else:
        model_path, tokenizer = args.model, AutoTokenizer.from_pretrained(args.model)
        eval_rows = maze_dataset(args.eval_set)
        config = dict(max_steps=args.steps, per_device_train_batch_size=8, num_generations=8, bf16=True)
        config.update(max_completion_length=2048, learning_rate=1e-6, eval_steps=25, per_device_eval_batch_size=8)
        config.update(use_vllm=args.use_vllm, vllm_mode="colocate", chat_template_kwargs={"enable_thinking": False})
    trainer = trl.GRPOTrainer(
        model=AutoModelForCausalLM.from_pretrained(model_path),
        processing_class=tokenizer,
        args=trl.GRPOConfig(
            output_dir=args.out,
            eval_strategy="steps" if not args.smoke else "no",
            logging_steps=1,
            report_to="none",
            save_strategy="no" if args.smoke else "steps",
            **config,
        ),
        train_dataset=maze_dataset(count=args.mazes if not args.smoke else 8),
        eval_dataset=eval_rows,
        environment_factory=lambda: VisMazeToolEnv(base_url=args.server),
    )
    trainer.train()
    result = trainer.evaluate()
    print(f"solve rate on {len(eval_rows)} mazes of {args.eval_set}: {result['eval_reward']:.3f}")


if __name__ == "__main__":
    main()
