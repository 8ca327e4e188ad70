"""Write docs/envs.md from the code: the env's module docstring, the gymnasium registry and the evaluation sets.

    python scripts/gen_envs_doc.py            # rewrite docs/envs.md
    python scripts/gen_envs_doc.py --check    # exit 1 when the file is out of date (the tests run this)

The page is generated so it cannot drift from the code. Its text is module docstrings: every
``## `` section of ``mazegym/envs/vismaze.py``'s, then those of ``mazegym.evalsets``,
``mazegym.multiagent`` and ``mazegym.llm`` and the vector-env section of ``mazegym.wrappers``.
The header table comes from a real ``gym.make("VisMaze-v0")``, the configurations table from
``gymnasium.registry`` (the ids starting with ``VisMaze``) and the evaluation-set table from
``mazegym.evalsets.EVAL_SETS``. Only the notes column, the GIF list, the performance figures and the
version history are written here. Imports mazegym only, so it runs without torch.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from docgen import write_or_check  # noqa: E402

import gymnasium as gym  # noqa: E402
from gymnasium import spaces  # noqa: E402

import mazegym  # noqa: E402
import mazegym.llm  # noqa: E402
import mazegym.multiagent  # noqa: E402
import mazegym.wrappers  # noqa: E402
from mazegym import evalsets  # noqa: E402
from mazegym.envs import vismaze  # noqa: E402

DOC = ROOT / "docs" / "envs.md"
DEFAULT_ID = "VisMaze-v0"

GIFS = {"VisMaze-v0": "assets/vismaze_v0.gif", "VisMaze-Hard-v0": "assets/vismaze_hard_v0.gif"}
"""Episode GIFs shown at the top of the page (paths relative to docs/), by env id."""

NOTES = {
    "VisMaze-v0": "VisGym maze_2d easy",
    "VisMaze-Hard-v0": "VisGym maze_2d hard",
    "VisMaze-5x5-v0": "generalisation (smaller)",
    "VisMaze-7x7-v0": "generalisation (smaller)",
    "VisMaze-13x13-v0": "generalisation",
    "VisMaze-15x15-v0": "generalisation",
    "VisMaze-17x17-v0": "generalisation",
    "VisMaze-19x19-v0": "generalisation",
    "VisMaze-21x21-v0": "generalisation",
    "VisMaze-33x33-v0": "generalisation (showcase)",
    "VisMaze-Loops-v0": "loops (`extra_openings=0.2`): RL beyond perfect-maze supervision",
    "VisMaze-Loops-13x13-v0": "loops, a larger size",
    "VisMaze-Loops-21x21-v0": "loops, a larger size",
}
"""The notes column of the configurations table; a registered id missing here gets an empty note."""

REWARD_RANGE = "`[0, 1]` (plus the shaping term when `shaping=True`)"
IMPORT = '`import mazegym; gymnasium.make("VisMaze-v0")` or `gymnasium.make("mazegym:VisMaze-v0")`'

PERFORMANCE = """\
On the shared 2-core VMs (CPU time, other jobs running): about 100k steps/s with 225 px image
observations and 250k-350k with text only, through `gymnasium.make`; reset (generation + BFS
+ first frame) about 0.1 ms at 9x9. MiniGrid with 64 px RGB frames ran about 30x slower in the
same process. Commands and the full table: `benchmarks/README.md`."""

VERSION_HISTORY = "* v0: initial release."

_FENCE = re.compile(r"^```.*?^```[ \t]*$", re.M | re.S)
_LITERAL = re.compile(r"``(.+?)``", re.S)
_ROLE = re.compile(r":(?:func|class|data|meth|attr|mod|obj):`(~?)([\w.]+)`")


def _inline(text: str) -> str:
    """Docstring prose as markdown: ``code`` -> `code`, Sphinx roles -> `name`, a closing ``::`` -> ``:``."""
    text = _ROLE.sub(lambda m: f"`{m.group(2).rsplit('.', 1)[-1] if m.group(1) else m.group(2)}`", text)
    text = _LITERAL.sub(r"`\1`", text)
    return re.sub(r"::$", ":", text, flags=re.M)


def markdown(doc: str) -> str:
    """A docstring as markdown: prose converted by ``_inline``, fenced code blocks kept as they are."""
    text = inspect.cleandoc(doc).strip()
    out, pos = [], 0
    for fence in _FENCE.finditer(text):
        out += [_inline(text[pos : fence.start()]), fence.group(0)]
        pos = fence.end()
    return "".join(out + [_inline(text[pos:])])


def sections(doc: str) -> tuple[str, dict[str, str]]:
    """The text before the first ``## `` heading of a docstring, and each section's body by heading."""
    intro, *rest = re.split(r"^## (.+)$", inspect.cleandoc(doc), flags=re.M)
    return intro.strip(), {title.strip(): body.strip() for title, body in zip(rest[::2], rest[1::2])}


def module_text(module) -> str:
    """A module's docstring as a page section: named after the module, its own headings demoted one level."""
    text = re.sub(r"^(#+) ", r"#\1 ", markdown(module.__doc__ or ""), flags=re.M)
    return f"`{module.__name__}` \N{EM DASH} {text}"


def attribute_doc(module, name: str) -> str:
    """The docstring written under the module-level assignment ``name = ...`` in ``module``'s source."""
    body = ast.parse(inspect.getsource(module)).body
    for node, nxt in zip(body, body[1:]):
        targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
        if any(isinstance(t, ast.Name) and t.id == name for t in targets):
            if isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant) and isinstance(nxt.value.value, str):
                return inspect.cleandoc(nxt.value.value)
    raise LookupError(f"{module.__name__}.{name} has no docstring")


def space_text(space: spaces.Space) -> str:
    """A short, readable form of an observation or action space, e.g. ``Box(0, 255, (225, 225, 3), uint8)``."""
    if isinstance(space, spaces.Dict):
        return "Dict(" + ", ".join(f"{key}={space_text(sub)}" for key, sub in space.spaces.items()) + ")"
    if isinstance(space, spaces.Box):
        return f"Box({space.low.min():g}, {space.high.max():g}, {space.shape}, {space.dtype})"
    if isinstance(space, spaces.Text):
        return f"Text({space.max_length})"
    return str(space)


def vismaze_ids() -> list[str]:
    """Registered gymnasium ids starting with ``VisMaze``, in registration order."""
    return [env_id for env_id in gym.registry if env_id.startswith("VisMaze")]


def _kwarg(env_id: str, name: str):
    """The spec's kwarg ``name`` for ``env_id``, or VisMazeEnv's default when the spec does not set it."""
    default = inspect.signature(vismaze.VisMazeEnv.__init__).parameters[name].default
    return gym.registry[env_id].kwargs.get(name, default)


def arguments_call(env_id: str = DEFAULT_ID) -> str:
    """``gymnasium.make(env_id, ...)`` with every VisMazeEnv argument at its value for ``env_id``."""
    params = [p for p in inspect.signature(vismaze.VisMazeEnv.__init__).parameters if p != "self"]
    values = {p: _kwarg(env_id, p) for p in params}
    args = ", ".join(f'{p}="{v}"' if isinstance(v, str) else f"{p}={v!r}" for p, v in values.items())
    return f'import gymnasium\nimport mazegym\n\ngymnasium.make("{env_id}", {args})'


def check_arguments(body: str) -> None:
    """Fail when the docstring's Arguments code block differs from VisMazeEnv's signature and defaults."""
    block = re.search(r"```python\n(.*?)```", body, re.S)
    expected = arguments_call()
    if block is None or "".join(block.group(1).split()) != "".join(expected.split()):
        raise SystemExit(
            "the '## Arguments' block of mazegym/envs/vismaze.py's docstring does not match "
            f"VisMazeEnv's signature; it should read:\n{expected}"
        )


def header_table() -> list[str]:
    """The summary table under the title, read from a real ``gym.make("VisMaze-v0")``."""
    env = gym.make(DEFAULT_ID)
    with_stop = gym.make(DEFAULT_ID, require_stop=True)
    base = env.unwrapped
    module, _ = gym.registry[DEFAULT_ID].entry_point.split(":")
    source = Path(importlib.import_module(module).__file__).resolve().relative_to(ROOT)
    rows = [
        ("Action Space", f"`{env.action_space}` (`{with_stop.action_space}` with `require_stop=True`)"),
        (
            "Observation Space",
            f"`{space_text(env.observation_space)}` for `{DEFAULT_ID}` ({base.size}x{base.size}, "
            f"`cell_px={base.cell_px}`; the image side is `size·cell_px`)",
        ),
        ("Reward Range", REWARD_RANGE),
        ("Import", IMPORT),
        ("Source", f"`{source.as_posix()}`"),
    ]
    env.close()
    with_stop.close()
    return ["| | |", "|---|---|"] + [f"| {name} | {value} |" for name, value in rows]


def configurations_table() -> list[str]:
    """One row per registered VisMaze id: size and move limit from the spec, frame size from the env."""
    lines = ["| id | size | max_moves | image (default `cell_px`) | notes |", "|---|---|---|---|---|"]
    for env_id in vismaze_ids():
        env = gym.make(env_id)
        image = env.observation_space["image"].shape if "image" in env.observation_space.spaces else None
        env.close()
        size, moves = _kwarg(env_id, "size"), _kwarg(env_id, "max_moves")
        frame = f"{image[0]}x{image[1]} px" if image else "-"
        lines.append(f"| `{env_id}` | {size}x{size} | {moves} | {frame} | {NOTES.get(env_id, '')} |")
    return lines


def eval_sets_table() -> list[str]:
    """One row per evaluation set in ``EVAL_SETS``: its env, grid size, move limit and number of mazes."""
    lines = ["| name | env | size | max_moves | mazes |", "|---|---|---|---|---|"]
    for name, info in evalsets.EVAL_SETS.items():
        count = len(evalsets.load_eval_set(name))
        lines.append(f"| `{name}` | `{info.env_id}` | {info.size}x{info.size} | {info.max_moves} | {count} |")
    return lines


def render() -> str:
    """The page's markdown."""
    intro, env_sections = sections(vismaze.__doc__ or "")
    check_arguments(env_sections.get("Arguments", ""))
    for path in GIFS.values():
        if not (DOC.parent / path).exists():
            raise SystemExit(f"docs/{path} is missing (GIFS in scripts/gen_envs_doc.py)")
    lines = [
        "# VisMaze",
        "",
        "Generated by `python scripts/gen_envs_doc.py` from the code (the module docstrings of "
        "`mazegym/envs/vismaze.py`,",
        "`mazegym.evalsets`, `mazegym.wrappers`, `mazegym.multiagent` and `mazegym.llm`, `gymnasium.registry` and",
        "`mazegym.evalsets.EVAL_SETS`); do not edit by hand: edit the docstrings and rerun the command.",
        "",
        " ".join(f"![{env_id}]({path})" for env_id, path in GIFS.items()),
        "",
    ]
    lines += header_table()
    lines += ["", markdown(intro)]
    for title, body in env_sections.items():
        lines += ["", f"## {title}", "", markdown(body)]
    lines += ["", "## Registered Configurations", ""] + configurations_table()
    lines += ["", markdown(attribute_doc(mazegym, "REGISTERED_ENVS").partition("\n\n")[2])]  # without its summary
    lines += ["", "## Evaluation Sets", "", module_text(evalsets), ""] + eval_sets_table()
    vector_envs = sections(mazegym.wrappers.__doc__ or "")[1]["Vector Environments"]
    lines += ["", "## Vector Environments", "", markdown(vector_envs)]
    lines += ["", "## Multi-agent: VisMazeRace", "", module_text(mazegym.multiagent)]
    lines += ["", "## LLM Interface", "", module_text(mazegym.llm)]
    lines += ["", "## Performance", "", PERFORMANCE]
    lines += ["", "## Version History", "", VERSION_HISTORY]
    return "\n".join(lines) + "\n"


def main() -> int:
    """Rewrite the page, or with ``--check`` say whether it is current."""
    return write_or_check(DOC, render, __doc__, "the code")


if __name__ == "__main__":
    sys.exit(main())
