"""TRL's GRPOTrainer trains a tiny model (built from code) on VisMaze through TRL's environment interface."""

from pathlib import Path

import pytest

trl = pytest.importorskip("trl", reason="needs the trl extra: pip install -e '.[trl]'")

from mazegym import load_eval_set  # noqa: E402
from mazegym.integrations.trl_env import VisMazeToolEnv, maze_dataset  # noqa: E402
from mazegym.llm import ACTION_NAMES  # noqa: E402
from mazegym.solver import oracle_actions  # noqa: E402


def test_the_move_tool_plays_the_maze_and_the_reward_comes_from_the_env():
    from transformers.utils import get_json_schema  # what renders a tool for the chat template

    env = VisMazeToolEnv()
    schema = get_json_schema(env.move)["function"]
    assert schema["name"] == "move" and list(schema["parameters"]["properties"]) == ["direction"]
    row = maze_dataset("VisMaze-v0")[5]
    assert "You have 20 moves" in env.reset(**row) and env.get_reward() == 0.0
    assert env.move("north").startswith("Unknown direction 'north'")
    for action in oracle_actions(load_eval_set("VisMaze-v0")[5]):
        feedback = env.move(ACTION_NAMES[action])
    assert "Reached the goal!" in feedback and env.get_reward() == 1.0
    assert env.move("up") == "The episode is over."
    assert env.reset(**row) and env.get_reward() == 0.0  # a reset starts over


def test_training_mazes_avoid_the_eval_sets_and_fit_the_move_limit():
    from mazegym import MazeSpec, is_eval_maze
    from mazegym.solver import optimal_moves

    rows = maze_dataset(count=16)
    specs = [MazeSpec.from_dict(r["maze"]) for r in rows]
    assert len({s.maze_id for s in specs}) == 16 and not any(is_eval_maze(s.maze_id) for s in specs)
    assert all(optimal_moves(s.grid, s.start, s.goal) <= 20 for s in specs)


def test_grpo_trainer_runs_on_vismaze_with_the_env_owning_the_reward(tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from runners.models.tiny import build_tiny_text_lm

    calls = []

    class Recorded(VisMazeToolEnv):
        def get_reward(self):
            calls.append(super().get_reward())
            return calls[-1]

    model_dir = build_tiny_text_lm(tmp_path / "tiny")
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    # TRL's own Qwen3 template: its tool-call format is one TRL knows how to parse
    tokenizer.chat_template = (Path(trl.__file__).parent / "chat_templates" / "qwen3.jinja").read_text()
    args = trl.GRPOConfig(
        output_dir=str(tmp_path / "grpo"),
        max_steps=2,
        per_device_train_batch_size=4,
        num_generations=4,
        max_completion_length=32,
        logging_steps=1,
        report_to="none",
        use_cpu=True,
        save_strategy="no",
    )
    trainer = trl.GRPOTrainer(
        model=AutoModelForCausalLM.from_pretrained(model_dir),
        processing_class=tokenizer,
        args=args,
        train_dataset=maze_dataset(count=8),
        environment_factory=Recorded,
    )
    trainer.train()
    logs = [h for h in trainer.state.log_history if "reward" in h]
    assert len(logs) == 2 and len(calls) == 2 * 4  # one env reward per rollout, 4 rollouts a step
    assert all(log["rewards/Recorded/mean"] == log["reward"] for log in logs)  # the env is the only reward source
    assert "tools/call_frequency" in logs[0]
