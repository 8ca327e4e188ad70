"""The README's pictures of a finished run: before/after grids of the fixed 64 mazes and a trained-agent GIF.

    python benchmarks/readme_pictures.py runs/cpu-maze-vlm --out docs/assets

Reads only the run's per-maze eval records (``RUN/eval/step_<N>_<set>.json``); no model is loaded.
Writes ``main_job_grids.png`` (before RL on the left, after on the right, each titled with its step and
solve count, over a legend: solved green, failed purple)
and ``main_job_agent.gif`` (the trained agent on a maze it failed before RL, replayed from its actions).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from PIL import Image

from mazegym.evalsets import load_eval_set
from mazegym.recording import before_after_grids, save_gif
from runners.rollout.evaluate import list_eval_records, replay_record


def main() -> None:
    """Write the two pictures of RUN_DIR's first and last evaluation on its eval set."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run_dir", type=Path)
    p.add_argument("--set", default="VisMaze-v0", help="eval set (default VisMaze-v0)")
    p.add_argument("--out", type=Path, default=Path("docs/assets"))
    a = p.parse_args()
    records = list_eval_records(a.run_dir, a.set)
    if len(records) < 2:
        raise SystemExit(f"{a.run_dir}: needs at least two evaluations of {a.set} (found {len(records)})")
    first, last = records[0], records[-1]
    specs = load_eval_set(a.set)

    def outcomes(data):
        solved: list[bool | None] = [None] * len(specs)
        for rec in data["mazes"]:
            if rec.get("index") is not None:
                solved[rec["index"]] = bool(rec["success"])
        return solved

    before, after = outcomes(first), outcomes(last)
    titles = (
        f"before RL (step {first['step']}): {sum(map(bool, before))}/{len(specs)} solved",
        f"after RL (step {last['step']}): {sum(map(bool, after))}/{len(specs)} solved",
    )
    a.out.mkdir(parents=True, exist_ok=True)
    Image.fromarray(before_after_grids(specs, before, after, titles)).save(a.out / "main_job_grids.png")
    flipped = [i for i, (b, f) in enumerate(zip(before, after)) if f and not b] or [i for i, f in enumerate(after) if f]
    moves = {r["index"]: r["moves"] for r in last["mazes"] if r.get("index") is not None}
    index = max(flipped, key=lambda i: moves.get(i, 0))  # the longest solved play
    record = next(r for r in last["mazes"] if r.get("index") == index)
    frames = replay_record(record, last.get("env", {}), specs[index]).frames
    save_gif(frames, a.out / "main_job_agent.gif", fps=4)
    print(
        f"before step {first['step']}: {sum(map(bool, before))}/64, after step {last['step']}: "
        f"{sum(map(bool, after))}/64; "
        f"GIF of maze {index} ({record['moves']} moves) -> {a.out}"
    )


if __name__ == "__main__":
    main()
