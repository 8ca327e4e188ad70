"""The SERVING.md ``mazegym export`` writes beside an export, rendered from ``SERVING.md.jinja`` in this folder:
every command and snippet names that export's paths and runs as it is (the tests run its Python blocks)."""

import shlex
from pathlib import Path
from typing import Any

from runners import models
from runners.artifacts.serve.protocol import CLIENT_ROLLOUT_KEYS, DEFAULT_HOST, DEFAULT_PORT

EXAMPLE_URL = f"http://{DEFAULT_HOST}:{DEFAULT_PORT}"
"""The server address SERVING.md's snippets use (``mazegym serve``'s default)."""
TEMPLATE = Path(__file__).with_name("SERVING.md.jinja")
"""The page's text, with the export's paths and settings left as template fields."""


def serving_markdown(
    run_dir: Path,
    adapter: Path,
    base_model: Path,
    merged: Path | None,
    rank: int,
    model_type: str | None,
    rollout: dict[str, Any],
    eval_set: str,
) -> str:
    """The SERVING.md ``mazegym export`` writes beside an export: every command and snippet names this export's
    paths and runs as it is (tests run its Python blocks)."""
    import jinja2

    obs_mode = rollout["obs_mode"]
    # Paths reach the shell quoted and Python as string literals, so no file name is ever read as code.
    env = jinja2.Environment(
        autoescape=False,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        undefined=jinja2.StrictUndefined,
    )
    env.filters["shell"] = lambda value: shlex.quote(str(value))
    env.filters["python"] = repr
    return env.from_string(TEMPLATE.read_text(encoding="utf-8")).render(
        run_dir=str(run_dir),
        adapter=str(adapter),
        base_model=str(base_model),
        merged=None if merged is None else str(merged),
        rank=rank,
        eval_set=eval_set,
        port=DEFAULT_PORT,
        url=EXAMPLE_URL,
        prompt_embeds=models.spec_for_hf_config({"model_type": model_type}).prompt_embeds,
        size=_maze_size(eval_set),
        obs_mode=obs_mode,
        max_moves=int(rollout["max_moves"]),
        size_free=bool(rollout.get("size_free_prompt", False)),
        env_kwargs=sorted(dict(rollout.get("env_kwargs") or {}).items()),
        auto_class="AutoModelForImageTextToText" if obs_mode != "text" else "AutoModelForCausalLM",
        client_settings=_client_settings(rollout),
    )


def _maze_size(eval_set: str) -> int:
    """The maze size of the named eval set (9 for a set this install does not know)."""
    from mazegym.evalsets import EVAL_SETS

    return EVAL_SETS[eval_set].size if eval_set in EVAL_SETS else 9


def _client_settings(rollout: dict[str, Any]) -> dict[str, Any]:
    """The rollout settings a client needs, as SERVING.md passes them to ``RolloutConfig``."""
    kept = {k: rollout[k] for k in CLIENT_ROLLOUT_KEYS if k in rollout}
    if rollout.get("env_kwargs"):
        kept["env_kwargs"] = dict(rollout["env_kwargs"])
    return kept
