"""What a language model sees: the chat messages built from VisMaze observations.

    python examples/08_what_the_model_sees.py [--obs-mode both|image|text] [--out examples/out]

Plays the BFS oracle's moves as if they were model replies, going through the same prompt
builder and action parser an LLM runner uses, and saves the first frame as ``OUT/08_first_frame.png``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import gymnasium as gym
from PIL import Image

import mazegym  # noqa: F401
from mazegym.llm import build_messages, format_action, parse_action, system_prompt, user_message
from mazegym.solver import oracle_actions


def describe(message: dict) -> str:
    """One-line summary of a chat message (images shown by shape)."""
    parts = []
    for part in message["content"]:
        parts.append(f"<image {part['image'].shape}>" if part["type"] == "image" else part["text"])
    return f"[{message['role']}] " + " | ".join(parts)


def main() -> None:
    """Build the first two turns of a conversation and print them."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--obs-mode", default="both", choices=["both", "image", "text"])
    parser.add_argument("--out", default="examples/out", help="where the PNG goes")
    args = parser.parse_args()

    env = gym.make("VisMaze-v0", obs_mode="both")
    obs, info = env.reset(seed=0)
    png = Path(args.out) / "08_first_frame.png"
    png.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(obs["image"]).save(png)
    system = system_prompt(size=9, max_moves=20, obs_mode=args.obs_mode)
    history = []
    for action in oracle_actions(env.unwrapped.spec_maze)[:2]:
        current = user_message(obs, info, obs_mode=args.obs_mode)
        for message in build_messages(system, history, current, history_mode="last_k", k=1):
            print(describe(message))
        reply = f"The path continues this way. {format_action(action)}"  # a stand-in for the model
        parsed = parse_action(reply)
        print(f"[assistant] {reply}  -> parsed {parsed.name}\n")
        history.append((current, reply))
        obs, reward, terminated, truncated, info = env.step(parsed.action)
    print(f"first frame saved to {png}")


if __name__ == "__main__":
    main()
