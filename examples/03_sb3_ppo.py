"""An external client: Stable-Baselines3 PPO on VisMaze-v0 pixels, through standard wrappers only.

Teaches that mazegym is a plain Gymnasium env: SB3's ``CnnPolicy`` needs a ``Box`` image, and the
one-line :class:`mazegym.wrappers.ImageObsWrapper` gives it one. The default observation is a
``Dict`` with a ``Text`` map, which SB3 cannot batch (``TypeError: 'NoneType' object is not
iterable`` in ``DummyVecEnv``): use ``obs_mode="image"`` plus ``ImageObsWrapper``::

    pip install -e ".[sb3]"
    python examples/03_sb3_ppo.py [--steps 60000] [--out examples/out]

A generic CNN learning from pixels with no planning prior is slow on fresh mazes, so this run
cycles through 8 fixed mazes (``ReseedWrapper``) with potential-based shaping. Writes
``OUT/03_sb3_learning_curve.png`` (success rate and shaped return vs environment steps).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import gymnasium as gym
import matplotlib
import numpy as np
import torch
from stable_baselines3 import PPO
from stable_baselines3.common.env_util import make_vec_env

import mazegym  # noqa: F401  (registers VisMaze-v0)
from mazegym.wrappers import ImageObsWrapper, ReseedWrapper

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def make_env() -> gym.Env:
    """VisMaze-v0 (9x9, 20 moves) as a 36x36x3 uint8 Box, cycling through 8 mazes."""
    env = gym.make("VisMaze-v0", obs_mode="image", cell_px=4, shaping=True)
    return ReseedWrapper(ImageObsWrapper(env), seeds=range(8))


def main() -> None:
    """Train PPO in chunks, log the last 100 episodes' success rate and return, plot both."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=60_000, help="environment steps")
    parser.add_argument("--out", default="examples/out", help="where the PNG goes")
    parser.add_argument("--smoke", action="store_true", help="tiny budget (CI)")
    args = parser.parse_args()
    steps, chunk = (2048, 1024) if args.smoke else (args.steps, 4096)
    torch.set_num_threads(1)

    venv = make_vec_env(make_env, n_envs=8, seed=0)  # Monitor-wrapped: SB3 logs episodes and info["is_success"]
    model = PPO("CnnPolicy", venv, n_steps=128, batch_size=256, n_epochs=4, learning_rate=5e-4, ent_coef=0.01, seed=0)
    start, curve = time.perf_counter(), []
    while model.num_timesteps < steps:
        model.learn(chunk, reset_num_timesteps=False)
        success = float(np.mean(model.ep_success_buffer)) if model.ep_success_buffer else 0.0
        ret = float(np.mean([ep["r"] for ep in model.ep_info_buffer])) if model.ep_info_buffer else 0.0
        curve.append((model.num_timesteps, success, ret))
        print(
            f"[{time.perf_counter() - start:5.0f}s] {model.num_timesteps:6d} steps  "
            f"success (last 100 episodes) {success:.2f}  shaped return {ret:+.2f}",
            flush=True,
        )

    x, success, ret = np.array(curve).T
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9, 3.5))
    ax1.plot(x, success, marker="o")
    ax1.set(xlabel="environment steps", ylabel="success rate (last 100 episodes)", ylim=(-0.02, 1.02))
    ax2.plot(x, ret, marker="o", color="tab:orange")
    ax2.set(xlabel="environment steps", ylabel="shaped return (last 100 episodes)")
    fig.suptitle("Stable-Baselines3 PPO (CnnPolicy) on VisMaze-v0 pixels, 8 fixed mazes")
    fig.tight_layout()
    Path(args.out).mkdir(parents=True, exist_ok=True)
    fig.savefig(Path(args.out) / "03_sb3_learning_curve.png", dpi=100)
    print(f"final success {success[-1]:.2f}; wrote {args.out}/03_sb3_learning_curve.png")


if __name__ == "__main__":
    main()
