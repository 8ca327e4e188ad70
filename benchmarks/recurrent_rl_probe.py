"""Probe: can on-policy updates lift MazeVLM's recurrent conv encoder after a short SFT?

A fast stand-in for the full pipeline: the encoder of :mod:`algos.models.maze_vlm` with a linear
4-way head read at the agent's cell (the language model's readout replaced by an oracle index,
so only the encoder's learning is measured), trained by SFT on BFS path demonstrations, then
updated on its own rollouts of fresh VisMaze-v0 mazes. Greedy solve rate on VisMaze-v0's fixed
64 mazes is printed every 5 iterations. Update modes (``--mode``):

* ``gigpo``   sparse success reward: group-normalised episode advantage + anchor-state step advantage;
* ``shaping`` per-move progress reward (+1 closer to the goal, -1 farther; the env's distance);
* ``dagger``  supervised BFS move at every visited state (an upper bound on any per-move signal);
* ``best``    expert iteration: cross-entropy on each group's shortest successful play;
* ``maxq``    cross-entropy on the best move known at each visited cell from the group's own
  experience (steps to the goal over the transitions the group saw: a max-backup, no solver);
* ``branch``  a group per state: from every open cell of each training maze (exploring starts) all
  4 first moves are tried, each followed by the current greedy policy until the goal or the move
  limit; the group-normalised discounted success of the 4 branches is each move's advantage
  (GRPO's group, GiGPO's anchor state, VinePPO's branching; the env's reward only, no solver).

``--mazes`` sets how many different mazes feed each iteration: with one optimizer step per
128 rows, few mazes per iteration means many steps on the same few mazes. ``--rl-iterations`` is the on-policy
stage's budget (0: SFT only).

Examples (minutes on one core)::

    python benchmarks/recurrent_rl_probe.py --sft-steps 100 --mode dagger --lr 1e-3 --keep-optimizer
    python benchmarks/recurrent_rl_probe.py --sft-steps 100 --mode branch --lr 1e-3 --mazes 32 --minibatch 128
"""

from __future__ import annotations

import argparse
import collections
import time

import numpy as np
import torch

from algos.models.maze_vlm import MazeVLMImageProcessor, RecurrentConvEncoder
from mazegym.evalsets import MazeStream, load_eval_set
from mazegym.maze import MazeSpec
from mazegym.render import render_frame
from mazegym.solver import bfs_distances, next_cell
from runners.rollout.collectors.branches import greedy_moves_to_goal
from runners.train.demos import random_start_maze

Row = tuple[MazeSpec, tuple[int, int], int, float, float]
"""One training row: (maze, cell, move, the move's log-probability when played, advantage)."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--width", type=int, default=32)
    p.add_argument("--iterations", type=int, default=20, help="the encoder's recurrent iterations")
    p.add_argument("--readout", choices=["conv", "cell"], default="conv", help="the encoder's decision readout")
    p.add_argument("--sft-steps", type=int, default=100, help="SFT steps of 128 demonstration moves (lr --sft-lr)")
    p.add_argument("--sft-lr", type=float, default=2e-3)
    p.add_argument("--sft-print", type=int, default=100, help="print the greedy solve rate every this many SFT steps")
    p.add_argument(
        "--sft-cells",
        choices=["path", "all"],
        default="path",
        help="demonstrate the BFS move on the shortest path only, or at every open cell",
    )
    p.add_argument("--mode", choices=["gigpo", "shaping", "dagger", "best", "maxq", "branch"], default="gigpo")
    p.add_argument("--episode-weight", type=float, default=1.0, help="gigpo: weight of the episode-level term")
    p.add_argument("--warmup", type=int, default=0, help="linear learning-rate warmup over this many optimizer steps")
    p.add_argument(
        "--random-starts",
        action="store_true",
        help="exploring starts: each play of a training maze starts from a random open cell (same goal)",
    )
    p.add_argument(
        "--epsilon",
        type=float,
        default=0.0,
        help="maxq: take a uniformly random move with this probability (its labels need no on-policy data)",
    )
    p.add_argument(
        "--branch-cells",
        choices=["all", "visited"],
        default="all",
        help="branch: anchor states are every open cell, or only the cells the group's plays visited",
    )
    p.add_argument(
        "--branch-loss",
        choices=["pg", "ce", "ppo", "grpo"],
        default="ce",
        help="branch: advantage-weighted log-likelihood of every move (pg), cross-entropy on the best "
        "branch (ce), the clipped surrogate of the expected advantage sum_k pi(k) A_k (ppo), or GRPO's clipped "
        "surrogate with each branch's group-normalised advantage (grpo)",
    )
    p.add_argument("--branch-limit", type=int, default=30, help="branch: moves a branch may take to reach the goal")
    p.add_argument("--epochs", type=int, default=1, help="passes over each iteration's rows")
    p.add_argument("--lr", type=float, default=3e-4, help="learning rate of the on-policy stage")
    p.add_argument("--keep-optimizer", action="store_true", help="continue SFT's AdamW state instead of a fresh one")
    p.add_argument("--minibatch", type=int, default=0, help="rows per optimizer step (0 = one step per iteration)")
    p.add_argument("--unique-states", action="store_true", help="train on each (maze, cell, move) once per iteration")
    p.add_argument(
        "--state-weighting",
        action="store_true",
        help="weight each row by 1 / its (maze, cell)'s row count, so every visited state counts once",
    )
    p.add_argument("--mazes", type=int, default=8)
    p.add_argument("--group", type=int, default=8)
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--gamma", type=float, default=0.9)
    p.add_argument("--rl-iterations", type=int, default=60, help="on-policy iterations (0: SFT only)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--save-sft", default="", help="write the SFT weights here (safetensors)")
    p.add_argument("--load-sft", default="", help="skip SFT and start from these weights (safetensors)")
    args = p.parse_args(argv)
    if args.rl_iterations < 0 or args.sft_steps < 0:
        p.error("--rl-iterations and --sft-steps must be >= 0")
    return args


class EncoderPolicy:
    """The encoder with its pretraining head read at the agent's cell, as a maze policy (9x9 mazes)."""

    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.encoder = RecurrentConvEncoder(5, args.width, args.iterations, readout=args.readout)
        self.processor = MazeVLMImageProcessor()
        self.distances: dict[str, np.ndarray] = {}

    def distance(self, spec: MazeSpec) -> np.ndarray:
        """Each cell's BFS distance to the goal (the oracle: SFT, DAgger, shaping and the printout read it)."""
        if spec.maze_id not in self.distances:
            self.distances[spec.maze_id] = bfs_distances(spec.grid, spec.goal)
        return self.distances[spec.maze_id]

    def best_move(self, spec: MazeSpec, cell: tuple[int, int]) -> int:
        """The oracle's move at ``cell``: what DAgger and SFT learn, and what the printout compares with."""
        d = self.distance(spec)
        return next(k for k in range(4) if (n := next_cell(spec.grid, cell, k)) != cell and d[n] == d[cell] - 1)

    def logits(self, specs: list[MazeSpec], cells: list[tuple[int, int]]) -> torch.Tensor:
        """The head's 4 move logits with the agent drawn at each cell."""
        frames = [render_frame(s.grid, c, s.goal) for s, c in zip(specs, cells)]
        pixels = self.processor(frames)["pixel_values"]
        _, decision = self.encoder.cell_features(pixels.reshape(len(specs), 9, 9, -1))
        index = torch.tensor([c[0] * 9 + c[1] for c in cells])
        return self.encoder.action_head(decision[torch.arange(len(specs)), index])

    @torch.no_grad()
    def play(self, specs: list[MazeSpec], greedy: bool, generator: torch.Generator | None = None):
        """Plays each maze from its start for up to 20 moves: (reached the goal, [(cell, move, log-prob)] each,
        final cells)."""
        a = self.args
        pos, done, trajs = [s.start for s in specs], [False] * len(specs), [[] for _ in specs]
        for _ in range(20):
            active = [i for i in range(len(specs)) if not done[i]]
            if not active:
                break
            lg = self.logits([specs[i] for i in active], [pos[i] for i in active])
            logp = torch.log_softmax(lg / a.temperature, -1)
            picks = lg.argmax(-1) if greedy else torch.multinomial(logp.exp(), 1, generator=generator).squeeze(-1)
            if not greedy and a.epsilon > 0:
                explore = torch.rand(len(picks), generator=generator) < a.epsilon
                picks = torch.where(explore, torch.randint(0, 4, (len(picks),), generator=generator), picks)
            for j, i in enumerate(active):
                k = int(picks[j])
                trajs[i].append((pos[i], k, float(logp[j, k])))
                pos[i] = next_cell(specs[i].grid, pos[i], k)
                done[i] = pos[i] == specs[i].goal
        return done, trajs, pos

    def solved(self, specs: list[MazeSpec]) -> int:
        """Mazes the greedy policy solves."""
        return sum(self.play(specs, True)[0])


def sft(policy: EncoderPolicy, optimizer: torch.optim.Optimizer, evalset: list[MazeSpec]) -> None:
    """``--sft-steps`` steps of cross-entropy on 128 BFS moves each, on the shortest path or at every open cell."""
    a, params = policy.args, list(policy.encoder.parameters())
    demos = MazeStream(size=9, seed=1, max_optimal_moves=20)
    t0 = time.time()
    for sft_step in range(a.sft_steps):
        specs, cells, labels = [], [], []
        while len(specs) < 128:
            spec = next(demos)
            if a.sft_cells == "all":
                for r, c in np.argwhere(~spec.grid):
                    if (int(r), int(c)) != spec.goal:
                        specs.append(spec)
                        cells.append((int(r), int(c)))
                        labels.append(policy.best_move(spec, (int(r), int(c))))
                continue
            cell = spec.start
            while cell != spec.goal:
                k = policy.best_move(spec, cell)
                specs.append(spec), cells.append(cell), labels.append(k)
                cell = next_cell(spec.grid, cell, k)
        loss = torch.nn.functional.cross_entropy(policy.logits(specs[:128], cells[:128]), torch.tensor(labels[:128]))
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        if (sft_step + 1) % a.sft_print == 0 and sft_step + 1 < a.sft_steps:
            print(f"SFT step {sft_step + 1} ({time.time() - t0:.0f}s): solved {policy.solved(evalset)}/64", flush=True)
    print(f"SFT {a.sft_steps} steps in {time.time() - t0:.0f}s: solved {policy.solved(evalset)}/64", flush=True)


@torch.no_grad()
def branch_rows(policy: EncoderPolicy, mazes: list[MazeSpec], trajs: list) -> list[Row]:
    """Each anchor cell's 4 moves, scored by the greedy policy's continuation after them (``--branch-loss``)."""
    a = policy.args
    rows = []
    for g, spec in enumerate(mazes):
        free = [(int(r), int(c)) for r, c in np.argwhere(~spec.grid) if (int(r), int(c)) != spec.goal]
        if a.branch_cells == "all":
            cells = free
        else:
            cells = sorted({cell for tr in trajs[g * a.group : (g + 1) * a.group] for cell, _, _ in tr})
        free_logits = policy.logits([spec] * len(free), free)
        greedy = free_logits.argmax(-1).tolist()
        old_logp = dict(zip(free, torch.log_softmax(free_logits / a.temperature, -1).tolist()))
        togo = greedy_moves_to_goal(spec, dict(zip(free, greedy)), a.branch_limit)
        for cell in cells:
            after = [togo.get(next_cell(spec.grid, cell, k)) for k in range(4)]
            ret = np.array([a.gamma**n if n is not None and n + 1 <= a.branch_limit else 0.0 for n in after])
            if ret.std() == 0:
                continue
            if a.branch_loss == "ce":
                if (ret == ret.max()).sum() == 1:
                    rows.append((spec, cell, int(ret.argmax()), 0.0, 1.0))
                continue
            adv = (ret - ret.mean()) / ret.std()
            lp = old_logp[cell] if a.branch_loss in ("grpo", "ppo") else [0.0] * 4
            # ppo: each branch weighted by the policy's probability of it (times 4, the group size): the enumerated
            # group's estimate of the on-policy gradient of E_pi[A].
            scale = [4 * float(np.exp(lp[k])) if a.branch_loss == "ppo" else 1.0 for k in range(4)]
            rows.extend((spec, cell, k, lp[k], scale[k] * float(adv[k])) for k in range(4) if adv[k] != 0)
    return rows


def maxq_rows(specs: list[MazeSpec], trajs: list, finals: list, mazes: int, group: int) -> list[Row]:
    """Steps to the goal over the transitions each maze's group experienced (a max-backup, as Q-learning to
    convergence on the group's replay); the best-known move at each visited cell."""
    rows = []
    for g in range(mazes):
        edges = {}
        for i in range(g * group, (g + 1) * group):
            tr = trajs[i]
            for t, (cell, k, lp) in enumerate(tr):
                edges[(cell, k)] = (tr[t + 1][0] if t + 1 < len(tr) else finals[i], lp)
        togo = {specs[g * group].goal: 0}
        for _ in range(40):
            changed = False
            for (cell, k), (nxt, _) in edges.items():
                if nxt in togo and togo[nxt] + 1 < togo.get(cell, 1e9):
                    togo[cell] = togo[nxt] + 1
                    changed = True
            if not changed:
                break
        for (cell, k), (nxt, lp) in edges.items():
            if cell in togo and nxt in togo and togo[nxt] + 1 == togo[cell]:
                rows.append((specs[g * group], cell, k, lp, 1.0))
    return rows


def play_rows(policy: EncoderPolicy, specs: list[MazeSpec], done: list[bool], trajs: list) -> list[Row]:
    """Every played move with its advantage by ``--mode`` (gigpo, shaping, dagger or best); zero advantages
    dropped."""
    a = policy.args
    success = np.array(done, float).reshape(-1, a.group)
    episode_adv = (success - success.mean(1, keepdims=True)) / (success.std(1, keepdims=True) + 1e-6)
    returns = [[a.gamma ** (len(tr) - 1 - t) if done[i] else 0.0 for t in range(len(tr))] for i, tr in enumerate(trajs)]
    anchors = collections.defaultdict(list)
    for i, tr in enumerate(trajs):
        for t, (cell, _, _) in enumerate(tr):
            anchors[(i // a.group, cell)].append(returns[i][t])
    rows = []
    for i, tr in enumerate(trajs):
        for t, (cell, k, lp) in enumerate(tr):
            if a.mode == "gigpo":
                group = anchors[(i // a.group, cell)]
                step = (returns[i][t] - np.mean(group)) / np.std(group) if np.std(group) > 0 else 0.0
                adv = a.episode_weight * episode_adv[i // a.group, i % a.group] + step
            elif a.mode == "shaping":
                d = policy.distance(specs[i])
                adv = float(d[cell] - d[next_cell(specs[i].grid, cell, k)])
            elif a.mode == "best":
                group = range((i // a.group) * a.group, (i // a.group + 1) * a.group)
                winners = [j for j in group if done[j]]
                adv = 1.0 if winners and i == min(winners, key=lambda j: len(trajs[j])) else 0.0
            else:
                adv = 1.0
            if adv != 0:
                rows.append((specs[i], cell, k, lp, adv))
    return rows


def row_loss(policy: EncoderPolicy, batch: list[Row], weight: torch.Tensor) -> torch.Tensor:
    """The ``--mode``'s loss on a minibatch of rows."""
    a = policy.args
    lg = policy.logits([r[0] for r in batch], [r[1] for r in batch])
    if a.mode in ("best", "maxq") or (a.mode == "branch" and a.branch_loss == "ce"):
        return torch.nn.functional.cross_entropy(lg, torch.tensor([r[2] for r in batch]))
    if a.mode == "dagger":
        labels = torch.tensor([policy.best_move(r[0], r[1]) for r in batch])
        return (weight * torch.nn.functional.cross_entropy(lg, labels, reduction="none")).mean()
    logp = torch.log_softmax(lg / a.temperature, -1)[torch.arange(len(batch)), torch.tensor([r[2] for r in batch])]
    adv = torch.tensor([r[4] for r in batch], dtype=torch.float32)
    if a.mode == "branch" and a.branch_loss == "pg":  # every branch scored, none sampled: no ratio
        return -(weight * adv * logp).mean()
    ratio = torch.exp(logp - torch.tensor([r[3] for r in batch]))
    return -(weight * torch.min(ratio * adv, ratio.clamp(0.8, 1.2) * adv)).mean()


def update(policy: EncoderPolicy, optimizer, scheduler, rows: list[Row], iteration: int) -> None:
    """``--epochs`` passes over the rows in minibatches, shuffled by the iteration's number."""
    a, params = policy.args, list(policy.encoder.parameters())
    if not rows:  # every move scored alike: nothing to learn this iteration
        return
    if a.unique_states:
        rows = list({(r[0].maze_id, r[1], r[2]): r for r in rows}.values())
    visits = collections.Counter((r[0].maze_id, r[1]) for r in rows)
    weights = [len(rows) / len(visits) / visits[(r[0].maze_id, r[1])] if a.state_weighting else 1.0 for r in rows]
    order = np.random.default_rng(iteration).permutation(len(rows))
    size = a.minibatch or len(rows)
    for start in [s for _ in range(a.epochs) for s in range(0, len(rows), size)]:
        batch = [rows[j] for j in order[start : start + size]]
        weight = torch.tensor([weights[j] for j in order[start : start + size]], dtype=torch.float32)
        loss = row_loss(policy, batch, weight)
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        scheduler.step()


def on_policy(policy: EncoderPolicy, optimizer: torch.optim.Optimizer, evalset: list[MazeSpec]) -> None:
    """``--rl-iterations`` iterations: play fresh mazes, score the rows by ``--mode``, update; print every 5."""
    a = policy.args
    warmup = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda n: min(1.0, (n + 1) / a.warmup) if a.warmup else 1.0)
    generator = torch.Generator().manual_seed(a.seed)
    start_rng = np.random.default_rng(a.seed)
    stream = MazeStream(size=9, seed=100 + a.seed, max_optimal_moves=20)
    t0 = time.time()
    for iteration in range(1, a.rl_iterations + 1):
        mazes = [next(stream) for _ in range(a.mazes)]
        specs = [m for m in mazes for _ in range(a.group)]
        if a.random_starts:
            specs = [random_start_maze(s, start_rng) for s in specs]
        done, trajs, finals = policy.play(specs, False, generator)
        if a.mode == "maxq":
            rows = maxq_rows(specs, trajs, finals, a.mazes, a.group)
        elif a.mode == "branch":
            rows = branch_rows(policy, mazes, trajs)
        else:
            rows = play_rows(policy, specs, done, trajs)
        update(policy, optimizer, warmup, rows, iteration - 1)
        if iteration % 5 == 0:
            agree = np.mean([policy.best_move(r[0], r[1]) == r[2] for r in rows if r[4] > 0]) if rows else float("nan")
            print(
                f"iteration {iteration} ({time.time() - t0:.0f}s): sampled success {np.mean(done):.2f}, "
                f"positive rows that are the BFS move {agree:.3f}, "
                f"rows {len(rows)}, greedy solved {policy.solved(evalset)}/64",
                flush=True,
            )


def main(argv: list[str] | None = None) -> None:
    """Run SFT then the on-policy stage, printing the greedy solve rate."""
    a = parse_args(argv)
    torch.set_num_threads(1)
    torch.manual_seed(a.seed)
    policy = EncoderPolicy(a)
    params = list(policy.encoder.parameters())
    evalset = load_eval_set("VisMaze-v0")
    optimizer = torch.optim.AdamW(params, lr=a.sft_lr, weight_decay=0.0)
    if a.load_sft:
        from safetensors.torch import load_file

        state = load_file(a.load_sft)
        policy.encoder.load_state_dict({k[8:]: v for k, v in state.items() if k.startswith("encoder.")})
        print(f"SFT weights from {a.load_sft}: solved {policy.solved(evalset)}/64", flush=True)
    else:
        sft(policy, optimizer, evalset)
    if a.save_sft:
        from safetensors.torch import save_file

        save_file({f"encoder.{k}": v for k, v in policy.encoder.state_dict().items()}, a.save_sft)
    if a.keep_optimizer:
        for group in optimizer.param_groups:
            group["lr"] = a.lr
    else:
        optimizer = torch.optim.AdamW(params, lr=a.lr, weight_decay=0.0)
    on_policy(policy, optimizer, evalset)


if __name__ == "__main__":
    main()
