"""One RL step of the VLM path, spelled out: collect groups -> update -> publish/load adapter -> evaluate.

What `mazegym train` does each step, with nothing hidden: the rollouts (here the default recipe's
branching groups: every open cell of each maze, its 4 moves each followed by the greedy policy),
GRPO from the registry with positive-only advantages, the adapter written atomically as a new
version and hot-loaded into the sampler, and the greedy solve rate on VisMaze-v0's fixed 64 mazes.

    python examples/11_lm_rl_step.py                                   # a random MazeVLM: mechanics only
    python examples/11_lm_rl_step.py --model runs/cpu-maze-loops/sft/model --steps 20   # from the main job's SFT

From a random model nothing is solved and nothing improves (the random policy rarely reaches a
goal, so almost every group is all-zero and filtered out). From the main job's SFT model the solve
rate climbs over the steps, with single evaluations swinging by a few mazes; the main job's own curve is
in the README. The curve goes to ``--out``.
"""

import argparse
import tempfile
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402

import algos  # noqa: E402
from algos.policies.lm import LoRAConfig, LoRALMPolicy  # noqa: E402
from mazegym.evalsets import MazeStream, load_eval_set  # noqa: E402
from runners.rollout.evaluate import evaluate_set  # noqa: E402
from runners.rollout.generation.hf import HFGenerator  # noqa: E402
from runners.rollout import collectors  # noqa: E402
from runners.rollout.collect import RolloutConfig, collect_groups  # noqa: E402
from runners.train.sync import AdapterSync  # noqa: E402
from runners.models.tiny import build_maze_vlm  # noqa: E402


def main() -> None:
    """Run ``--steps`` RL steps and plot the eval solve rate."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="", help="a MazeVLM directory (default: build a random one)")
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--mazes", type=int, default=16, help="training mazes per step")
    p.add_argument("--eval-every", type=int, default=2)
    p.add_argument("--out", default="examples/out")
    p.add_argument("--smoke", action="store_true", help="tiny budget (CI): 2 steps of 2 mazes, 8 eval mazes")
    a = p.parse_args()
    if a.smoke:
        a.steps, a.mazes, a.eval_every = 2, 2, 1
    torch.manual_seed(0)
    work = Path(tempfile.mkdtemp(prefix="lm_rl_step_"))
    model = a.model or str(build_maze_vlm(work / "model", seed=0))

    # 1. The trainer (LoRA on the decoder, the vision encoder trained in full) and the sampler.
    lora = LoRAConfig(rank=16, alpha=32, modules_to_save=["vision_tower"])
    policy = LoRALMPolicy.from_pretrained(model, lora=lora, dtype=torch.float32)
    generator = HFGenerator(model)
    algorithm = algos.make(
        "grpo",
        policy,
        lr=3e-4,
        old_logprobs="recompute",
        negative_weight=0.0,
        minibatch_groups=True,
        minibatch_size=128,
        filter_zero_variance=True,
    )
    sync = AdapterSync(work / "adapters")
    rollout = RolloutConfig(
        obs_mode="image", history="none", max_moves=20, max_new_tokens=6, collector=collectors.settings_for("branches")
    )
    stream = MazeStream(size=9, seed=0, max_optimal_moves=20)
    eval_set = "VisMaze-v0"
    n_eval = 8 if a.smoke else len(load_eval_set(eval_set))

    def solve_rate() -> float:
        if a.smoke:  # a slice of the fixed set keeps CI fast
            from runners.rollout.evaluate import eval_summary
            from runners.rollout.collect import evaluate_mazes

            episodes = evaluate_mazes(generator, load_eval_set(eval_set)[:n_eval], rollout)
            return eval_summary(eval_set, episodes, rollout)["solve_rate"]
        return evaluate_set(generator, eval_set, rollout)["solve_rate"]

    curve = [(0, solve_rate())]
    print(f"step 0: solve rate {curve[-1][1]:.3f} on {n_eval} mazes of {eval_set}")
    for step in range(1, a.steps + 1):
        # 2. Collect groups with the sampler's current weights.
        episodes = collect_groups(
            generator, [next(stream) for _ in range(a.mazes)], rollout, seed=step, group_offset=step * a.mazes
        )
        # 3. One update: group-normalised advantages, clipped policy loss, optimizer steps.
        metrics = algorithm.update(episodes)
        # 4. Publish the adapter as version `step` and hot-load it into the sampler.
        path = sync.publish(policy, step)
        generator.load_adapter(str(path), step)
        solved_from_start = {e.maze_id: e.info["greedy_solves_start"] for e in episodes}
        line = (
            f"step {step}: {len(episodes)} branches, kept {metrics['kept_episode_frac']:.2f}, "
            f"loss {metrics['loss']:.4f}, greedy policy solves {sum(solved_from_start.values())}/{a.mazes} "
            f"training mazes from their start"
        )
        # 5. Evaluate now and then on the fixed mazes.
        if step % a.eval_every == 0 or step == a.steps:
            curve.append((step, solve_rate()))
            line += f"; solve rate {curve[-1][1]:.3f}"
        print(line, flush=True)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    plt.figure(figsize=(5, 3))
    plt.plot(*zip(*curve), marker="o")
    plt.xlabel("RL step")
    plt.ylabel(f"greedy solve rate ({n_eval} mazes)")
    plt.ylim(0, 1)
    plt.tight_layout()
    plt.savefig(out / "lm_rl_step.png", dpi=100)
    print(f"curve -> {out / 'lm_rl_step.png'}")


if __name__ == "__main__":
    main()
