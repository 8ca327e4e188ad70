"""The benchmark's tracks: what an algorithm is measured on, each defined once, here.

A track is a preset (which names its rollout scheme), a start checkpoint built once from it or from the preset it
varies (``mazegym sft`` with the track's settings, shared by every algorithm and seed), the settings of every run, a
budget of RL steps *and* environment turns (a run ends at whichever comes first; ``loop.max_env_turns``), and the
fixed eval set of its preset, evaluated greedily every ``eval_every`` steps. Every algorithm of a track starts from
the same checkpoint, plays the same maze stream for a given seed and gets the same budget; the only settings that
differ by algorithm are :data:`ALGO_SETTINGS`, printed beside its row.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Track:
    """One benchmark track."""

    name: str
    """Its name on the command line (``--tracks NAME``)."""
    description: str
    """One line for ``mazegym bench --list`` and the published table."""
    preset: str
    """The preset every run of the track is built from (its rollout scheme included)."""
    start: tuple[str, ...] | None
    """KEY=VALUE settings of the start's ``mazegym sft``; None = no start (RL from the preset's own initial model)."""
    settings: tuple[str, ...]
    """KEY=VALUE settings of every run (after the preset's)."""
    rl_steps: int
    """The budget in RL steps."""
    env_turns: int
    """The budget in environment turns (``loop.max_env_turns``)."""
    eval_every: int
    """Evaluate the eval set greedily every this many RL steps (and before the first and after the last)."""
    scheme: str
    """The rollout scheme of the preset's collector (``episodes`` or ``branching``; a test checks they agree); an
    algorithm that cannot train on it gets a row saying so."""
    start_preset: str = ""
    """The preset the start is built from (default: ``preset``): a preset that differs from the track's only in its
    rollout scheme has the same supervised start, so tracks on either share it."""

    @property
    def start_key(self) -> str:
        """The name of the start checkpoint's directory; tracks with the same start preset and settings share it."""
        preset = self.start_preset or self.preset
        return preset if not self.start else f"{preset}-" + "-".join(s.replace("=", "") for s in self.start)

    def run_settings(self) -> list[str]:
        """The KEY=VALUE settings of one of the track's runs: its budgets, its schedule."""
        return [
            *self.settings,
            f"loop.steps={self.rl_steps}",
            f"loop.max_env_turns={self.env_turns}",
            f"algo.decay_updates={self.rl_steps}",
            f"eval.every={self.eval_every}",
            f"checkpoint.every={self.eval_every}",
            "checkpoint.keep=1",
            "maze.heldout_sets=[]",
        ]


ALGO_SETTINGS: dict[str, tuple[str, ...]] = {
    "ppo": ("algo.filter_zero_variance=false",),
    "dapo": ("algo.filter_zero_variance=true",),
}
"""Settings an algorithm needs beyond a track's: PPO's critic must see every episode, so the presets' zero-variance
filter (a GRPO setting) is off; DAPO's dynamic sampling *is* that filter (its clip-higher and token-mean loss are
DAPOConfig's defaults)."""

ONE_THREAD = ("runner.update_threads=1", "engine.rollout_threads=1", "runner.num_threads=1", "logging.progress=false")
"""Every benchmark process runs on one thread: the benchmark spreads its runs over the cores instead."""

TRACKS: dict[str, Track] = {
    t.name: t
    for t in (
        Track(
            name="trees",
            description="sanity: perfect 9x9 mazes (VisMaze-v0) from a short SFT on them; expected saturated",
            preset="cpu-maze-vlm",
            start=(),
            settings=("loop.mazes_per_step=16",),
            rl_steps=6,
            env_turns=6 * 16 * 31,
            eval_every=1,
            scheme="branching",
        ),
        Track(
            name="loops",
            description="9x9 mazes with loops (loops-9x9) from supervision on perfect mazes only; branching rollouts",
            preset="cpu-maze-loops",
            start=(),
            settings=("loop.mazes_per_step=16",),
            rl_steps=6,
            env_turns=6 * 16 * 40,
            eval_every=1,
            scheme="branching",
        ),
        Track(
            name="long",
            description="loops-9x9 from whole plays of up to 20 moves, one reward at the end (credit over a play)",
            preset="cpu-maze-loops-plays",
            start=(),
            settings=("loop.mazes_per_step=8",),
            rl_steps=12,
            env_turns=4000,
            eval_every=2,
            scheme="episodes",
            start_preset="cpu-maze-loops",
        ),
        Track(
            name="text",
            description="the text LM on 7x7 ASCII mazes (cpu-tiny, heldout-7x7), whole plays; the policy is weak",
            preset="cpu-tiny",
            start=(),
            settings=("loop.mazes_per_step=8",),
            rl_steps=12,
            env_turns=4000,
            eval_every=2,
            scheme="episodes",
        ),
        Track(
            name="scratch",
            description="VisMaze-v0 from a random init, no oracle anywhere: RL from the sparse reward alone",
            preset="cpu-maze-scratch",
            start=None,
            settings=(),
            rl_steps=40,
            env_turns=40 * 64 * 31,
            eval_every=5,
            scheme="branching",
        ),
    )
}
"""Every track, by name."""

DEFAULT_TRACKS = ("trees", "loops", "long", "text")
"""What ``mazegym bench`` runs without ``--tracks``. ``scratch`` is left out for its cost: its policy first solves
mazes after more than a thousand of them (docs/rl-earns-its-lift.md), so each of its runs plays the preset's 64 mazes a
step for 40 steps, over twenty times the environment turns of a default track's run."""

SMOKE_SETTINGS = (
    "model.vision_pretraining.steps=2",
    "model.vision_pretraining.batch_size=8",
    "sft.steps=2",
    "sft.batch_size=8",
    "loop.mazes_per_step=2",
    "rollout.group_size=2",
    "eval.set_mazes={VisMaze-v0: 4, loops-9x9: 4, heldout-7x7: 4}",
)
"""``mazegym bench --smoke``: budgets of a few seconds a run, to check the pipeline (its figures mean nothing)."""
SMOKE_STEPS = 2
"""RL steps of a ``--smoke`` run."""


def track(name: str) -> Track:
    """The track called ``name`` (ValueError naming the known ones otherwise)."""
    if name not in TRACKS:
        raise ValueError(f"--tracks: unknown track {name!r}; known: {', '.join(TRACKS)}")
    return TRACKS[name]
