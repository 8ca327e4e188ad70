"""Play a VisMaze maze yourself, in the terminal or a small window (``mazegym play``), like MiniGrid's
``manual_control.py``: w/a/s/d (or arrow words) move, q quits."""

from __future__ import annotations

import mazegym
from mazegym.envs.vismaze import VisMazeEnv
from mazegym.evalsets import EVAL_SETS, load_eval_set

KEYS = {"w": 1, "up": 1, "k": 1, "a": 2, "left": 2, "h": 2, "s": 3, "down": 3, "j": 3, "d": 0, "right": 0, "l": 0}
"""Keys a person can type in `mazegym play` -> env action (0=right 1=up 2=left 3=down)."""


def play(
    size: int = 9,
    max_moves: int | None = None,
    seed: int | None = None,
    eval_set: str | None = None,
    index: int = 0,
    window: bool = False,
    input_fn=input,
    out=print,
) -> int:
    """Play one maze interactively; returns 0 when solved, 1 otherwise."""
    options = None
    if eval_set:
        mazes = load_eval_set(eval_set)
        if not 0 <= index < len(mazes):
            raise ValueError(f"--index must be in 0..{len(mazes) - 1}")
        size, max_moves = mazes[index].size, max_moves or EVAL_SETS[eval_set].max_moves
        options = {"maze": mazes[index]}
    if max_moves is None:
        known = [kw["max_moves"] for kw in mazegym.REGISTERED_ENVS.values() if kw["size"] == size]
        max_moves = known[0] if known else 2 * size
    env = VisMazeEnv(size=size, max_moves=max_moves, obs_mode="both" if window else "text")
    obs, info = env.reset(seed=seed, options=options)
    viewer = _Viewer() if window else None
    out(f"Reach G from A in at most {max_moves} moves (shortest: {info['optimal_moves']}). w/a/s/d or words; q quits.")
    while True:
        out(obs["text"])
        if viewer is not None:
            viewer.show(obs["image"])
        key = input_fn(f"move {info['moves'] + 1}/{max_moves}> ").strip().lower()
        if key in ("q", "quit", "exit"):
            out("Bye.")
            return 1
        if key not in KEYS:
            out("Type w (up), a (left), s (down), d (right) or q.")
            continue
        obs, reward, terminated, truncated, info = env.step(KEYS[key])
        out(info["feedback"])
        if terminated or truncated:
            out(obs["text"])
            solved = bool(info["is_success"])
            out(f"{'Solved' if solved else 'Not solved'} in {info['moves']} moves (shortest {info['optimal_moves']}).")
            return 0 if solved else 1


class _Viewer:
    """A small tkinter window showing the image observation."""

    def __init__(self) -> None:
        try:
            import tkinter as tk
        except ImportError:
            raise SystemExit("--window needs tkinter (apt install python3-tk); play in the terminal without --window")
        try:
            self.root = tk.Tk()
        except Exception as exc:
            raise SystemExit(f"--window: cannot open a window ({exc}); play in the terminal without --window")
        self.root.title("mazegym play")
        self.label = tk.Label(self.root)
        self.label.pack()

    def show(self, image) -> None:
        """Display an HxWx3 uint8 frame."""
        from PIL import Image, ImageTk

        self.photo = ImageTk.PhotoImage(
            Image.fromarray(image).resize((image.shape[1] * 2, image.shape[0] * 2), Image.NEAREST)
        )
        self.label.configure(image=self.photo)
        self.root.update()
