"""Does MazeVLM's recurrent vision encoder, trained on 9x9 mazes only, solve larger ones when it thinks longer?

    python benchmarks/encoder_extrapolation.py --state residual           # the encoder as built by default
    python benchmarks/encoder_extrapolation.py --state gated              # the bounded, gated state update
    python benchmarks/encoder_extrapolation.py --state residual --progressive 0.5   # Bansal et al.'s progressive loss
    python benchmarks/encoder_extrapolation.py --state gated --steps 600 --train-depth 10 40 --path-weight 1.0
                                                                          # the preset's vision pretraining
    python benchmarks/encoder_extrapolation.py --model RUN/sft/model     # a trained run's encoder, no training

Trains the encoder alone, as the SFT stage's vision pretraining does (AdamW lr 2e-3, batches of 128
BFS moves from random open cells of fresh 9x9 mazes, the move read at the agent's cell by a linear head,
plus the agent-localisation loss), then plays *encoder-only* greedy walks (the head's move at the
agent's cell, no decoder, no solver) on the fixed sets of each size with the encoder run for
``--iterations`` (a multiple of the size-scaled count ``ceil(20 * size / 9)``). A recurrence that
extrapolates keeps or raises its solve rate as iterations grow; one that "overthinks" collapses.
``--progressive ALPHA`` mixes the loss after the full 20 iterations with (weight ALPHA) the loss after
n iterations without gradient followed by k with it (n, k random; Bansal et al. 2022); ``--train-depth LO HI``
runs each batch a random number of iterations; ``--path-weight W`` adds the per-cell path loss
(``model.vision_pretraining.path_weight``). Unlike the SFT stage it takes every batch's cells from fresh mazes of its
own stream, one thread, and the head of the path loss is its own. One thread; results differ across machines and
seeds. Writes nothing unless ``--json PATH``.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402

from algos.models.maze_vlm import MazeVLMImageProcessor, RecurrentConvEncoder  # noqa: E402
from mazegym.envs.vismaze import VisMazeEnv  # noqa: E402
from mazegym.evalsets import EVAL_SETS, MazeStream, load_eval_set  # noqa: E402
from mazegym.maze import MazeSpec  # noqa: E402
from mazegym.solver import bfs_distances, next_cell  # noqa: E402

SETS = {
    5: "heldout-5x5",
    7: "heldout-7x7",
    9: "VisMaze-v0",
    11: "VisMaze-Hard-v0",
    13: "heldout-13x13",
    15: "heldout-15x15",
    17: "heldout-17x17",
    19: "heldout-19x19",
    21: "heldout-21x21",
    33: "heldout-33x33",
}

DEPTH = 20
"""The encoder's iterations on a 9x9 maze, which ``--iterations`` scales by size."""


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line's options, checked."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--state", choices=("residual", "gated"), default="residual", help="the state update")
    parser.add_argument("--progressive", type=float, default=0.0, help="weight of the progressive loss (0 = off)")
    parser.add_argument(
        "--steps", type=int, default=220, help="training batches (the preset's model.vision_pretraining.steps)"
    )
    parser.add_argument("--batch", type=int, default=128, help="moves per batch")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--sizes", type=int, nargs="+", default=[7, 9, 11, 13, 17], help=f"of {sorted(SETS)}")
    parser.add_argument("--iterations", type=float, nargs="+", default=[1.0, 2.0], help="multiples of the scaled count")
    parser.add_argument("--at", type=int, nargs="+", default=[], help="also play at these absolute iteration counts")
    parser.add_argument(
        "--train-depth",
        type=int,
        nargs=2,
        default=[20, 20],
        metavar=("LO", "HI"),
        help="each batch runs a random number of iterations in [LO, HI] (20 20 = the preset's fixed depth)",
    )
    parser.add_argument("--train-sizes", type=int, nargs="+", default=[9], help="maze sizes trained on (<= 9)")
    parser.add_argument("--width", type=int, default=32, help="encoder channels")
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument(
        "--final-lr-ratio",
        type=float,
        default=1.0,
        help="the learning rate decays with a cosine to this fraction of --lr by the last step (1 = constant, as the"
        " SFT stage's vision pretraining runs)",
    )
    parser.add_argument(
        "--init-std",
        type=float,
        default=0.0,
        help="initialise every weight normal(0, S) and every bias 0, as a transformers initializer_range S does "
        "(0 = PyTorch's default init)",
    )
    parser.add_argument(
        "--rule",
        choices=("linear", "area"),
        default="linear",
        help="what --iterations multiplies: ceil(20 x size/9) (linear) or ceil(20 x (size/9)^2) (area, what eval uses)",
    )
    parser.add_argument(
        "--model",
        type=Path,
        default=None,
        help="play the encoder of this MazeVLM directory (e.g. RUN/sft/model) instead of training one",
    )
    parser.add_argument(
        "--grad-iterations",
        type=int,
        default=0,
        help="backpropagate through only the last K iterations of each batch (0 = all; earlier ones run without it)",
    )
    parser.add_argument(
        "--path-weight",
        type=float,
        default=0.0,
        help="weight of a per-cell loss: is the cell on the shortest path from the agent to the goal (0 = off)",
    )
    parser.add_argument("--first", type=int, default=32, help="mazes per set (the 9x9 set is always played whole)")
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = parser.parse_args(argv)
    if any(s not in SETS for s in args.sizes) or not 0.0 <= args.progressive <= 1.0 or args.steps < 1:
        parser.error(f"sizes must be among {sorted(SETS)}, --progressive in [0, 1], --steps >= 1")
    if args.model is not None:
        args.steps = 0  # a saved encoder is played as it is
    return args


class Frames:
    """Renders maze specs through the env and the MazeVLM image processor into ``(mazes, size, size, pixels)``."""

    def __init__(self) -> None:
        self.processor = MazeVLMImageProcessor(cell_px=25, patch_px=5, tokens="agent")
        self.envs: dict[int, VisMazeEnv] = {}

    def grids(self, specs: list[MazeSpec]) -> torch.Tensor:
        """The patches of each spec's first frame, on the cell grid (all specs of one size)."""
        images = []
        for spec in specs:
            env = self.envs.setdefault(spec.size, VisMazeEnv(size=spec.size, max_moves=10_000, obs_mode="image"))
            images.append(env.reset(options={"maze": spec})[0]["image"])
        pixels = self.processor(images=images, return_tensors="pt")["pixel_values"]
        return pixels.reshape(len(specs), specs[0].size, specs[0].size, -1)


def build_encoder(args: argparse.Namespace) -> tuple[RecurrentConvEncoder, nn.Linear]:
    """The encoder to train (or the one saved at ``--model``) and the path loss's own head."""
    encoder = RecurrentConvEncoder(5, args.width, DEPTH, tokens="agent", state=args.state)
    if args.model is not None:
        import algos.models  # noqa: F401  (registers MazeVLM)
        from algos.models.maze_vlm import MazeVLMForConditionalGeneration

        encoder = MazeVLMForConditionalGeneration.from_pretrained(args.model).vision_tower.eval()
    path_head = nn.Linear(2 * args.width, 1)
    if args.init_std > 0 and args.model is None:
        for module in [*encoder.modules(), path_head]:
            if isinstance(module, (nn.Linear, nn.Conv2d)):
                nn.init.normal_(module.weight, std=args.init_std)
                nn.init.zeros_(module.bias)
    return encoder, path_head


def decisions(encoder: RecurrentConvEncoder, grid: torch.Tensor, free: int, trained: int) -> torch.Tensor:
    """Decision features of every cell after ``free`` iterations without gradient and ``trained`` with it."""
    recall = torch.relu(encoder.patch_embed(grid)).permute(0, 3, 1, 2)
    state = None  # all zeros
    with torch.no_grad():
        weights = encoder.step_weights(recall)
        for _ in range(free):
            state = encoder.step(state, *weights)
    weights = encoder.step_weights(recall)
    for _ in range(trained):
        state = encoder.step(state, *weights)
    state = torch.zeros_like(recall) if state is None else state
    out = torch.relu(encoder.readout(torch.cat([state, recall], 1)))
    return out.permute(0, 2, 3, 1).reshape(grid.shape[0], -1, out.shape[1])


def oracle_batch(stream: MazeStream, rng: np.random.Generator, batch: int, with_paths: bool) -> tuple:
    """``batch`` fresh mazes, each with a random open cell as the agent's: (specs, cell indices, BFS moves, and per
    cell whether it is on the shortest path from the agent to the goal, or None)."""
    specs, cells, moves, paths = [], [], [], []
    while len(specs) < batch:
        maze = next(stream)
        distance = bfs_distances(maze.grid, maze.goal)
        open_cells = [(int(r), int(c)) for r, c in np.argwhere(~maze.grid) if (int(r), int(c)) != maze.goal]
        cell = open_cells[int(rng.integers(len(open_cells)))]
        steps_to_goal = [distance[n] if (n := next_cell(maze.grid, cell, a)) != cell else math.inf for a in range(4)]
        specs.append(MazeSpec(maze.grid, cell, maze.goal))
        cells.append(cell[0] * maze.size + cell[1])
        moves.append(int(np.argmin(steps_to_goal)))
        if with_paths:
            from_agent = bfs_distances(maze.grid, cell)
            paths.append((distance + from_agent == distance[cell]).reshape(-1))
    paths_t = torch.tensor(np.stack(paths), dtype=torch.float32) if paths else None
    return specs, torch.tensor(cells), torch.tensor(moves), paths_t


def train(encoder: RecurrentConvEncoder, path_head: nn.Linear, frames: Frames, args: argparse.Namespace) -> None:
    """Train the encoder on BFS moves (and the path loss) at random open cells of fresh mazes, ``--steps`` batches."""
    rng = np.random.default_rng(args.seed)
    optimizer = torch.optim.AdamW([*encoder.parameters(), *path_head.parameters()], lr=args.lr, weight_decay=0.0)
    ratio = args.final_lr_ratio
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda done: ratio + (1 - ratio) * 0.5 * (1 + math.cos(math.pi * done / max(args.steps, 1)))
    )

    def move_loss(grid, cells, moves, free, trained, paths=None):
        decision = decisions(encoder, grid, free, trained)
        loss = nn.functional.cross_entropy(encoder.action_head(decision[torch.arange(len(cells)), cells]), moves)
        if paths is not None and args.path_weight > 0:
            on_path = path_head(decision).squeeze(-1)
            loss = loss + args.path_weight * nn.functional.binary_cross_entropy_with_logits(on_path, paths)
        return loss

    streams = {size: MazeStream(size, seed=args.seed) for size in args.train_sizes}
    started = time.perf_counter()
    for step in range(1, args.steps + 1):
        size = int(rng.choice(args.train_sizes))
        depth = int(rng.integers(args.train_depth[0], args.train_depth[1] + 1))
        specs, cells, moves, paths = oracle_batch(streams[size], rng, args.batch, args.path_weight > 0)
        grid = frames.grids(specs)
        scores = encoder.agent_score(grid.reshape(len(specs), size * size, -1)).squeeze(-1) * encoder.score_scale
        loss = nn.functional.cross_entropy(scores, cells)
        if args.progressive < 1.0:
            free = max(0, depth - args.grad_iterations) if args.grad_iterations else 0
            loss = loss + (1 - args.progressive) * move_loss(grid, cells, moves, free, depth - free, paths)
        if args.progressive > 0.0:
            free = int(rng.integers(0, depth))
            loss = loss + args.progressive * move_loss(grid, cells, moves, free, int(rng.integers(1, depth - free + 1)))
        optimizer.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(encoder.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        if step % 20 == 0:
            print(f"step {step}: loss {loss.item():.3f} ({time.perf_counter() - started:.0f} s)", flush=True)


@torch.no_grad()
def walk_solve_rate(encoder: RecurrentConvEncoder, frames: Frames, name: str, iterations: int, first: int) -> float:
    """Share of the first ``first`` mazes of set ``name`` that the encoder's own greedy moves walk to the goal."""
    specs = load_eval_set(name)[:first]
    position, done = [s.start for s in specs], [False] * len(specs)
    for _ in range(EVAL_SETS[name].max_moves):
        active = [i for i in range(len(specs)) if not done[i]]
        if not active:
            break
        grid = frames.grids([MazeSpec(specs[i].grid, position[i], specs[i].goal) for i in active])
        size = specs[0].size
        at = torch.tensor([position[i][0] * size + position[i][1] for i in active])
        chosen = encoder.action_head(decisions(encoder, grid, iterations, 0)[torch.arange(len(active)), at]).argmax(-1)
        for i, move in zip(active, chosen.tolist()):
            position[i] = next_cell(specs[i].grid, position[i], move)
            done[i] = position[i] == specs[i].goal
    return sum(done) / len(specs)


def play_every_size(encoder: RecurrentConvEncoder, frames: Frames, args: argparse.Namespace) -> dict[str, float]:
    """Solve rate per ``"size@iterations"``, printed as a markdown table row by row."""
    rates = {}
    print(f"\n| size | {' | '.join([f'{m:g}x depth' for m in args.iterations] + [f'{n} it.' for n in args.at])} |")
    print("|---|" + "---|" * (len(args.iterations) + len(args.at)))
    for size in args.sizes:
        cells = []
        scaled = DEPTH * size / 9 if args.rule == "linear" else DEPTH * (size / 9) ** 2
        counts = [max(1, math.ceil(scaled * m)) for m in args.iterations] + list(args.at)
        for iterations in counts:
            rate = walk_solve_rate(encoder, frames, SETS[size], iterations, 64 if size == 9 else args.first)
            rates[f"{size}@{iterations}"] = rate
            cells.append(f"{rate:.1%} ({iterations} it.)")
        print(f"| {size}x{size} | {' | '.join(cells)} |", flush=True)
    return rates


def main(argv: list[str] | None = None) -> int:
    """Train the encoder on 9x9 moves, then print (and optionally write) its walk solve rate per size and depth."""
    args = parse_args(argv)
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)
    frames = Frames()
    encoder, path_head = build_encoder(args)
    started = time.perf_counter()
    train(encoder, path_head, frames, args)
    record = {
        "model": str(args.model) if args.model else None,
        "state": args.state,
        "progressive": args.progressive,
        "steps": args.steps,
        "seed": args.seed,
        "settings": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "train_seconds": time.perf_counter() - started,
    }
    record["rates"] = play_every_size(encoder, frames, args)
    if args.json is not None:
        from runners.atomic import write_json

        write_json(args.json, record)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
