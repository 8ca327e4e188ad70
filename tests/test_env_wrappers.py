"""Wrappers, vector envs (sync/async), recording and replay."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from PIL import Image

import mazegym  # noqa: F401
from mazegym.evalsets import load_eval_set
from mazegym.recording import record_gif, replay
from mazegym.solver import oracle_actions
from mazegym.wrappers import ImageObsWrapper, MazeSetWrapper, ReseedWrapper, TextActionWrapper, TextObsWrapper


def test_text_action_wrapper_parses_and_charges_invalid_turns():
    env = TextActionWrapper(gym.make("VisMaze-v0", max_moves=3))
    obs, info = env.reset(seed=0)
    legal = mazegym.ACTION_NAMES[int(np.flatnonzero(info["action_mask"])[0])]
    obs, reward, terminated, truncated, info = env.step(f"Thinking... <action>{legal}</action>")
    assert info["parsed"].name == legal and not info["invalid_action"] and info["moves"] == 1
    agent = info["agent"]
    obs, reward, terminated, truncated, info = env.step("I refuse to answer")
    assert info["invalid_action"] and info["moves"] == 2 and info["agent"] == agent and reward == 0.0
    assert info["feedback"].startswith("Invalid action") and not truncated
    obs, reward, terminated, truncated, info = env.step("")
    assert truncated and info["moves"] == 3 and "No moves left" in info["feedback"]


def test_text_action_wrapper_with_stop():
    env = TextActionWrapper(gym.make("VisMaze-v0", require_stop=True))
    env.reset(seed=1)
    obs, reward, terminated, truncated, info = env.step("('stop', 'stop')")
    assert terminated and reward == 0.0 and info["parsed"].action == 4


def test_single_modality_wrappers():
    img_env = ImageObsWrapper(gym.make("VisMaze-v0"))
    obs, _ = img_env.reset(seed=0)
    assert isinstance(obs, np.ndarray) and obs.shape == (225, 225, 3) and img_env.observation_space.contains(obs)
    txt_env = TextObsWrapper(gym.make("VisMaze-v0"))
    obs, _ = txt_env.reset(seed=0)
    assert isinstance(obs, str) and txt_env.observation_space.contains(obs)
    with pytest.raises(ValueError):
        ImageObsWrapper(gym.make("VisMaze-v0", obs_mode="text"))


def test_reseed_wrapper_cycles_a_fixed_seed_set():
    env = ReseedWrapper(gym.make("VisMaze-v0"), seeds=(3, 4))
    ids = [env.reset(seed=999)[1]["maze_id"] for _ in range(4)]
    plain = gym.make("VisMaze-v0")
    expected = [plain.reset(seed=s)[1]["maze_id"] for s in (3, 4)]
    assert ids == expected * 2


def test_maze_set_wrapper_cycles_eval_mazes():
    mazes = load_eval_set("VisMaze-v0")[:3]
    env = MazeSetWrapper(gym.make("VisMaze-v0"), [m.to_dict() for m in mazes])
    assert [env.reset()[1]["maze_id"] for _ in range(4)] == [m.maze_id for m in mazes + mazes[:1]]


@pytest.mark.parametrize("mode, vector_kwargs", [("sync", {}), ("async", {"shared_memory": False})])
def test_make_vec_sync_and_async(mode, vector_kwargs):
    vector_kwargs = {"autoreset_mode": gym.vector.AutoresetMode.NEXT_STEP, **vector_kwargs}
    envs = gym.make_vec("VisMaze-v0", num_envs=3, vectorization_mode=mode, vector_kwargs=vector_kwargs)
    try:
        obs, info = envs.reset(seed=[0, 1, 2])
        single = gym.make("VisMaze-v0")
        for i in range(3):
            ref, ref_info = single.reset(seed=i)
            assert np.array_equal(obs["image"][i], ref["image"]) and obs["text"][i] == ref["text"]
            assert info["maze_id"][i] == ref_info["maze_id"]
        done_seen = np.zeros(3, bool)
        for _ in range(25):  # beyond the 20-move limit: every sub-env ends once
            obs, reward, terminated, truncated, info = envs.step(np.zeros(3, dtype=np.int64))
            done_seen |= terminated | truncated
        assert done_seen.all() and obs["image"].shape == (3, 225, 225, 3)
    finally:
        envs.close()


def test_async_shared_memory_with_image_observations():
    envs = gym.make_vec("VisMaze-v0", num_envs=2, vectorization_mode="async", obs_mode="image")
    try:
        obs, info = envs.reset(seed=[0, 1])
        ref = gym.make("VisMaze-v0", obs_mode="image").reset(seed=1)[0]["image"]
        assert np.array_equal(obs["image"][1], ref)
    finally:
        envs.close()


def test_replay_reproduces_an_episode_and_writes_a_gif(tmp_path):
    spec = load_eval_set("VisMaze-v0")[0]
    actions = oracle_actions(spec, rng=np.random.default_rng(0), detours=1)
    result = replay(spec.to_dict(), actions, max_moves=20)
    assert result.success and result.terminated and result.actions_used == len(actions)
    assert result.rewards[-1] == 1.0 and sum(result.rewards) == 1.0
    env = gym.make("VisMaze-v0")
    obs, _ = env.reset(options={"maze": spec})
    for a, frame in zip(actions, result.frames[1:]):
        obs, *_ = env.step(a)
        assert np.array_equal(obs["image"], frame)
    failed = replay(spec, [None, None], max_moves=2)
    assert failed.truncated and not failed.success and failed.infos[-1]["invalid_action"]
    path = tmp_path / "ep.gif"
    record_gif(spec, actions, path)
    with Image.open(path) as gif:
        assert gif.n_frames == len(actions) + 1 and gif.size == (225, 225)
