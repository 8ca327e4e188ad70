"""Play a maze yourself with the arrow keys (or w/a/s/d), then watch your run as a GIF.

Teaches what the agent faces: a fixed move budget, walls that cost a move, a sparse reward.
Runs in a terminal (POSIX: Linux/macOS) or, with ``--window``, in a tkinter window showing the
image observation (the only choice on Windows)::

    python examples/02_play_by_hand.py [--seed 0] [--window] [--out examples/out]

Writes ``OUT/02_my_run.gif``. ``mazegym play`` is the same game, typed one line per move.
"""

from __future__ import annotations

import argparse
import sys

import gymnasium as gym

import mazegym  # noqa: F401  (registers VisMaze-v0)
from mazegym.recording import record_gif

KEYS = {
    "\x1b[C": 0,
    "\x1b[A": 1,
    "\x1b[D": 2,
    "\x1b[B": 3,
    "d": 0,
    "w": 1,
    "a": 2,
    "s": 3,  # terminal
    "Right": 0,
    "Up": 1,
    "Left": 2,
    "Down": 3,
}  # tkinter key names
"""Key -> action (0=right 1=up 2=left 3=down). Arrow keys reach a terminal as escape sequences."""


def terminal_keys():
    """Yield key presses from a POSIX terminal in raw mode (no Enter needed); restores it after."""
    import termios
    import tty

    fd = sys.stdin.fileno()
    saved = termios.tcgetattr(fd)
    try:
        tty.setcbreak(fd)
        while True:
            key = sys.stdin.read(1)
            if key == "\x1b":  # an arrow key sends three characters: ESC [ A..D
                key += sys.stdin.read(2)
            yield key
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


def main() -> None:
    """Play one maze until it is solved, the moves run out, or q is pressed."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0, help="which maze")
    parser.add_argument("--window", action="store_true", help="play in a tkinter window instead of the terminal")
    parser.add_argument("--out", default="examples/out", help="where the GIF of your run goes")
    args = parser.parse_args()

    env = gym.make("VisMaze-v0", obs_mode="both")
    obs, info = env.reset(seed=args.seed)
    actions = []

    def move(key: str) -> bool:
        """Apply one key press; returns True when the episode is over."""
        nonlocal obs, info
        if key not in KEYS:
            return key in ("q", "Escape")
        obs, _, terminated, truncated, info = env.step(KEYS[key])
        actions.append(KEYS[key])
        return terminated or truncated

    def show() -> None:
        print("\x1b[2J\x1b[H" + obs["text"].replace("\n", "\r\n"))  # clear the screen, draw the map
        print(f"move {info['moves']}/{info['max_moves']}  {info.get('feedback', '')}  (arrows or w/a/s/d, q quits)")

    if args.window:
        import tkinter as tk

        from PIL import Image, ImageTk

        root = tk.Tk()
        root.title("mazegym: arrow keys to move, q to quit")
        label = tk.Label(root)
        label.pack()

        def draw() -> None:
            label.photo = ImageTk.PhotoImage(Image.fromarray(obs["image"]).resize((450, 450), Image.NEAREST))
            label.configure(image=label.photo)

        root.bind("<Key>", lambda event: root.destroy() if move(event.keysym) else draw())
        draw()
        root.mainloop()
    else:
        if not sys.stdin.isatty():
            print(
                "02_play_by_hand.py reads single key presses from a terminal, and stdin is not one: "
                "run it in a terminal, or pass --window",
                file=sys.stderr,
            )
            raise SystemExit(2)
        show()
        for key in terminal_keys():
            over = move(key)
            show()
            if over:
                break
    print(
        f"{'Solved' if info['is_success'] else 'Not solved'} in {info['moves']} moves "
        f"(shortest {info['optimal_moves']})."
    )
    if actions:
        record_gif(env.unwrapped.spec_maze, actions, f"{args.out}/02_my_run.gif")
        print(f"wrote {args.out}/02_my_run.gif")


if __name__ == "__main__":
    main()
