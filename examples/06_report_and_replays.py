"""Look at what a run did: per-maze eval records, a before/after grid, GIF replays, the HTML report.

Teaches the run-directory format the training loop writes and ``mazegym report`` reads: one
``RUN/eval/step_<N>_<set>.json`` per evaluation, holding each maze's outcome and actions (an
episode is its maze plus its actions, so replays need no model). Here a network policy is trained
for a few GRPO updates and evaluated on the fixed 64-maze set ``heldout-7x7`` before and after::

    python examples/06_report_and_replays.py [--updates 15] [--out examples/out]

Writes ``OUT/06_eval_grid.png`` (before RL | after RL, titled, over a legend: green solved, purple failed),
``OUT/06_replays.gif`` (four mazes after training) and ``OUT/06_run/report.html``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch
from PIL import Image

import algos
from algos.net_rollout import play_mazes, sample_mazes
from algos.policies.net import MazeNetPolicy
from mazegym import EVAL_SETS, load_eval_set
from mazegym.recording import before_after_grids, replay, save_gif
from runners.cli import main as mazegym_cli
from runners.rollout.evaluate import list_eval_records, write_eval_records

SET = "heldout-7x7"


def evaluate(policy: MazeNetPolicy, run_dir: Path, step: int, label: str) -> None:
    """Play the fixed set greedily and write its per-maze records, the way the training loop does."""
    mazes, max_moves = load_eval_set(SET), EVAL_SETS[SET].max_moves
    episodes = play_mazes(policy, mazes, greedy=True, max_moves=max_moves)
    records = [
        {
            "index": i,
            "maze_id": m.maze_id,
            "size": m.size,
            "success": ep.success,
            "moves": len(ep.turns),
            "optimal_moves": ep.optimal_moves,
            "actions": [t.action for t in ep.turns],
        }
        for i, (m, ep) in enumerate(zip(mazes, episodes))
    ]
    solved = sum(r["success"] for r in records)
    summary = {
        "set": SET,
        "solve_rate": solved / len(records),
        "solved": solved,
        "episodes": len(records),
        "env": {"max_moves": max_moves},
        "mazes": records,
    }
    write_eval_records(run_dir, step, summary, label=label)
    print(f"step {step:3d}: solved {solved}/{len(records)} of {SET}")


def main() -> None:
    """Train briefly with evaluations, then draw the records and write the report."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--updates", type=int, default=15, help="GRPO updates (8 mazes x 8 rollouts each)")
    parser.add_argument("--out", default="examples/out", help="where the pictures and the run dir go")
    parser.add_argument("--smoke", action="store_true", help="tiny budget (CI)")
    args = parser.parse_args()
    updates, out = (6 if args.smoke else args.updates), Path(args.out)
    run_dir = out / "06_run"
    torch.set_num_threads(1)
    torch.manual_seed(0)

    policy = MazeNetPolicy(grid_size=7)
    algo = algos.make(
        "grpo",
        policy,
        lr=3e-2,
        epochs=2,
        minibatch_size=1024,
        old_logprobs="rollout",
        turn_credit=True,
        gamma=0.9,
        turn_baseline="turn_index",
    )
    evaluate(policy, run_dir, 0, "before_rl")
    exclude = {m.maze_id for m in load_eval_set(SET)}  # never train on the evaluation mazes
    for update in range(1, updates + 1):
        mazes = sample_mazes(8, 7, seed=1000 + update, exclude=exclude)
        algo.update(play_mazes(policy, mazes, group_size=8, max_moves=14, seed=update, env_kwargs={"shaping": True}))
    evaluate(policy, run_dir, updates, "final")

    # Everything below reads only the run dir, as you would for a run trained elsewhere.
    first, last = list_eval_records(run_dir, SET)[0], list_eval_records(run_dir, SET)[-1]
    specs = load_eval_set(SET)
    outcomes = [[r["success"] for r in rec["mazes"]] for rec in (first, last)]
    titles = [
        f"{when} RL (step {rec['step']}): {sum(o)}/{len(o)} solved"
        for when, rec, o in zip(("before", "after"), (first, last), outcomes)
    ]
    Image.fromarray(before_after_grids(specs, *outcomes, titles=tuple(titles))).save(out / "06_eval_grid.png")
    clips = [replay(specs[r["index"]], r["actions"]).frames for r in last["mazes"][:4]]
    longest = max(len(c) for c in clips)
    clips = [c + c[-1:] * (longest - len(c)) for c in clips]
    save_gif([np.concatenate(frames, axis=1) for frames in zip(*clips)], out / "06_replays.gif")
    mazegym_cli(["report", str(run_dir)])  # the same as `mazegym report RUN_DIR` in a shell
    print(f"wrote {out}/06_eval_grid.png, {out}/06_replays.gif and {run_dir}/report.html")


if __name__ == "__main__":
    main()
