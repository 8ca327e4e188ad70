"""The SkyRL-Gym env, driven through skyrl_gym's own registry and API (make, init, step, reward, done)."""

import pytest

skyrl_gym = pytest.importorskip("skyrl_gym", reason="needs the skyrl extra: pip install -e '.[skyrl]'")

from mazegym import load_eval_set  # noqa: E402
from mazegym.integrations.skyrl_env import ENV_CLASS, VisMazeSkyRLEnv, dataset_rows, register_env  # noqa: E402
from mazegym.integrations.visgym import VISGYM_SPLITS  # noqa: E402
from mazegym.llm import format_action  # noqa: E402
from mazegym.solver import oracle_actions  # noqa: E402


def extras_of(row):
    """What SkyRL hands the env: the row's fields besides the prompt."""
    return {k: v for k, v in row.items() if k != "prompt"}


def play(env, replies):
    prompt, _ = env.init([{"role": "user", "content": "placeholder"}])
    outputs = []
    for reply in replies:
        out = env.step(reply)
        outputs.append(out)
        if out["done"]:
            break
    return prompt, outputs


def test_registered_and_made_by_skyrl_gym():
    register_env()  # again: a no-op
    assert ENV_CLASS in skyrl_gym.registry
    env = skyrl_gym.make(ENV_CLASS, env_config={}, extras={"seed": 3})
    assert isinstance(env, VisMazeSkyRLEnv) and isinstance(env, skyrl_gym.Env)
    assert env.env_id == "VisMaze-v0" and env.max_turns == 20


@pytest.mark.parametrize("eval_set", ["VisMaze-v0", "VisMaze-Hard-v0"])
def test_oracle_replies_solve_every_fixed_maze(eval_set):
    rows = dataset_rows(eval_set)
    mazes = load_eval_set(eval_set)
    assert len(rows) == len(mazes) == 64 and {r["env_class"] for r in rows} == {ENV_CLASS}
    metrics = []
    for row, spec in zip(rows, mazes):
        env = skyrl_gym.make(row["env_class"], env_config={}, extras=extras_of(row))
        replies = [f"I go {format_action(a)}" for a in oracle_actions(spec)]
        prompt, outputs = play(env, replies)
        assert prompt[0]["role"] == "system" and prompt[1]["content"][0]["type"] == "image_url"
        assert [o["done"] for o in outputs] == [False] * (len(replies) - 1) + [True]
        assert [o["reward"] for o in outputs] == [0.0] * (len(replies) - 1) + [1.0]
        assert all(o["observations"] for o in outputs[:-1]) and outputs[-1]["observations"] == []
        assert outputs[-1]["metadata"]["maze_id"] == spec.maze_id
        metrics.append(env.get_metrics())
        env.close()
    assert VisMazeSkyRLEnv.aggregate_metrics(metrics)["solved"] == 1.0


def test_visgym_split_rows_need_a_stop_and_spend_moves_on_bad_replies():
    spec = load_eval_set(VISGYM_SPLITS["maze_2d/easy"])[0]
    extras = {"visgym_env_id": "maze_2d/easy", "eval_set": "VisMaze-v0", "index": 0, "obs_mode": "text"}
    env = skyrl_gym.make(ENV_CLASS, extras=extras)
    assert env.require_stop
    moves = [format_action(a, style="visgym") for a in oracle_actions(spec)]
    prompt, outputs = play(env, ["hmm?"] + moves + ["('stop', 'stop')"])
    assert "stopping on the goal" in prompt[0]["content"]
    assert (
        outputs[0]["metadata"]["invalid_action"]
        and "Invalid action" in outputs[0]["observations"][0]["content"][0]["text"]
    )
    assert not outputs[-2]["done"] and outputs[-1]["done"] and outputs[-1]["reward"] == 1.0
    assert env.get_metrics() == {
        "solved": 1.0,
        "moves": len(moves) + 2,
        "invalid_replies": 1,
        "optimal_moves": len(moves),
    }


def test_the_move_limit_ends_an_episode_unsolved():
    env = skyrl_gym.make(ENV_CLASS, extras={"env_id": "VisMaze-v0", "seed": 0, "obs_mode": "text"})
    _, outputs = play(env, ["<action>up</action>"] * 30)
    assert len(outputs) == 20 and outputs[-1]["done"] and sum(o["reward"] for o in outputs) == 0.0
    assert "No moves left" in outputs[-1]["metadata"]["feedback"]
    with pytest.raises(ValueError, match="unknown eval_set"):
        skyrl_gym.make(ENV_CLASS, extras={"eval_set": "nope"})
