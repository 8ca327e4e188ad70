"""The package layering holds (mazegym <- algos <- runners) and docs/ARCHITECTURE.md names only what exists."""

from __future__ import annotations

import ast
import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FORBIDDEN = {
    "mazegym": {"algos", "runners", "torch", "transformers", "peft", "vllm", "ray"},
    "algos": {"runners"},
}
"""Top-level packages each package must never import (anywhere: module level or inside functions)."""


def imported_packages(path: Path) -> set[str]:
    """Top-level names of every absolute import in the file, function-local imports included."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_imports_go_one_way(package):
    offenders = {
        str(p.relative_to(ROOT)): sorted(imported_packages(p) & FORBIDDEN[package])
        for p in sorted((ROOT / package).rglob("*.py"))
    }
    assert {k: v for k, v in offenders.items() if v} == {}


HEAVY = ("torch", "transformers", "peft", "vllm", "ray")
"""Packages that take seconds to import: reading the config or asking the CLI for help must not load them."""


@pytest.mark.parametrize(
    "code",
    [
        "import runners.config",
        "import runners.cli; runners.cli.build_parser([])",
        "import contextlib, io, runners.cli\n"
        "with contextlib.suppress(SystemExit), contextlib.redirect_stdout(io.StringIO()):\n"
        "    runners.cli.main(['--help'])",
    ],
    ids=["import runners.config", "build the CLI parser", "mazegym --help"],
)
def test_light_entry_points_load_no_heavy_package(code):
    check = f"{code}\nimport sys\nprint(sorted(m for m in {HEAVY!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", check], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "[]"


INTEGRATIONS = ("mazegym.integrations", "openenv", "skyrl_gym", "trl", "datasets", "fastapi", "uvicorn", "gradio")
"""The framework adapters and what they bring: optional extras that ``import mazegym`` must never load."""


def test_import_mazegym_loads_no_integration():
    code = (
        "import gymnasium, mazegym, mazegym.llm, mazegym.wrappers, sys\n"
        "gymnasium.make('VisMaze-v0').reset(seed=0)\n"
        f"print(sorted(m for m in sys.modules if any(m == x or m.startswith(x + '.') for x in {INTEGRATIONS!r})))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "[]"


ARCHITECTURES = re.compile(r"(Qwen|Llama|Mistral|Gemma|Phi)\d*\w*")
"""Names of transformers' concrete model classes (their configs, models and processors)."""


def own_model_classes() -> set[str]:
    """The classes defined under algos/models/ (the models mazegym ships)."""
    return {
        node.name
        for path in (ROOT / "algos" / "models").rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ClassDef)
    }


def concrete_model_mentions(path: Path, classes: set[str]) -> list[str]:
    """``line: name`` of each import of a model module under ``algos.models`` and each name of a concrete model class
    (one of ``classes`` or a transformers architecture) in the file."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module] + [a.name for a in node.names]
        elif isinstance(node, ast.Name):
            names = [node.id]
        elif isinstance(node, ast.Attribute):
            names = [node.attr]
        for name in names:
            if name.startswith("algos.models.") or name in classes or ARCHITECTURES.fullmatch(name):
                found.append(f"{node.lineno}: {name}")
    return sorted(set(found))


def test_only_the_model_registry_names_a_concrete_model():
    classes = own_model_classes()
    offenders = {
        str(p.relative_to(ROOT)): concrete_model_mentions(p, classes)
        for p in sorted((ROOT / "runners").rglob("*.py"))
        if "models" not in p.relative_to(ROOT / "runners").parts
    }
    assert "MazeVLMForConditionalGeneration" in classes
    assert {k: v for k, v in offenders.items() if v} == {}


def test_the_model_scan_finds_each_form(tmp_path):
    source = tmp_path / "m.py"
    source.write_text(
        "from algos.models.maze_vlm import recurrent_encoders\nimport algos.models\n"
        "from algos.models import load_model\n"
        "def f(m):\n    return isinstance(m, maze_vlm.RecurrentConvEncoder), transformers.Qwen2ForCausalLM, 'Qwen2'\n"
    )
    mentions = concrete_model_mentions(source, own_model_classes())
    assert mentions == ["1: algos.models.maze_vlm", "5: Qwen2ForCausalLM", "5: RecurrentConvEncoder"]


COLLECTORS = ROOT / "runners" / "rollout" / "collectors"
"""The collector registry (``__init__.py``) and the built-in collectors, one module each."""


def concrete_collector_names() -> set[str]:
    """The module names of the built-in collectors and the public names they define (functions, classes)."""
    names = set()
    for path in COLLECTORS.glob("*.py"):
        if path.name == "__init__.py":
            continue
        names.add(f"runners.rollout.collectors.{path.stem}")
        tree = ast.parse(path.read_text())
        names |= {
            n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and not n.name.startswith("_")
        }
    return names


def concrete_collector_mentions(path: Path, names: set[str]) -> list[str]:
    """``line: name`` of each import of a collector module (``runners.rollout.collectors.<name>``) and each name one
    of them defines (``names``, :func:`concrete_collector_names`) in the file."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        names_here = []
        if isinstance(node, ast.Import):
            names_here = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names_here = [node.module] + [f"{node.module}.{a.name}" for a in node.names] + [a.name for a in node.names]
        elif isinstance(node, ast.Name):
            names_here = [node.id]
        elif isinstance(node, ast.Attribute):
            names_here = [node.attr]
        for name in names_here:
            if name.startswith("runners.rollout.collectors.") or name in names:
                found.append(f"{node.lineno}: {name}")
    return sorted(set(found))


def test_only_the_collector_registry_names_a_concrete_collector():
    names = concrete_collector_names()
    shared = {"plan", "draws_no_torch_randomness"}  # hook names every collector may define; the registry's own too
    names -= shared
    offenders = {
        str(p.relative_to(ROOT)): concrete_collector_mentions(p, names)
        for p in sorted((ROOT / "runners").rglob("*.py"))
        if COLLECTORS not in p.parents
    }
    assert {"collect_branches", "collect_plays", "runners.rollout.collectors.branches"} <= names
    assert {k: v for k, v in offenders.items() if v} == {}


def test_the_collector_scan_finds_each_form(tmp_path):
    source = tmp_path / "m.py"
    source.write_text(
        "from runners.rollout.collectors.branches import cell_prompts\n"
        "import runners.rollout.collectors.plays\n"
        "from runners.rollout import collectors\n"
        "def f(c):\n    return branches.collect_branches(c), collectors.of(c)\n"
    )
    mentions = concrete_collector_mentions(source, concrete_collector_names())
    assert mentions == [
        "1: cell_prompts",
        "1: runners.rollout.collectors.branches",
        "1: runners.rollout.collectors.branches.cell_prompts",
        "2: runners.rollout.collectors.plays",
        "5: collect_branches",
    ]


def test_the_model_registry_knows_maze_vlm_by_its_model_type():
    from algos.models import maze_vlm
    from runners import models
    from runners.models.maze_vlm import MODEL_TYPE

    assert MODEL_TYPE == maze_vlm.MODEL_TYPE
    assert models.spec_for_hf_config({"model_type": MODEL_TYPE, "vision_config": {}}).name == "maze-vlm"
    assert models.spec_for_hf_config({"model_type": "qwen2_vl", "vision_config": {}}).name == models.GENERIC_VLM
    assert models.spec_for_hf_config({"model_type": "qwen2"}).name == models.GENERIC_LM


def test_the_scan_sees_function_local_imports(tmp_path):
    source = tmp_path / "m.py"
    source.write_text("import numpy\n\ndef f():\n    from runners.local import train\n    import torch.nn\n")
    assert imported_packages(source) == {"numpy", "runners", "torch"}


ARCHITECTURE = ROOT / "docs" / "ARCHITECTURE.md"


def test_every_file_the_architecture_page_names_exists():
    text = ARCHITECTURE.read_text()
    names = set(re.findall(r"`([\w/]+\.py)`", text))
    files = [str(p.relative_to(ROOT)) for pkg in ("mazegym", "algos", "runners") for p in (ROOT / pkg).rglob("*.py")]
    missing = sorted(n for n in names if not any(f == n or f.endswith("/" + n) for f in files))
    assert names and missing == []


def test_every_dotted_name_the_architecture_page_uses_exists():
    text = ARCHITECTURE.read_text()
    dotted = set(re.findall(r"`((?:mazegym|algos|runners)(?:\.\w+)+)", text))
    missing = []
    for name in sorted(dotted):
        parts = name.split(".")
        for cut in range(len(parts), 0, -1):  # longest importable module prefix, then attributes
            try:
                obj = importlib.import_module(".".join(parts[:cut]))
            except ImportError:
                continue
            try:
                for attr in parts[cut:]:
                    obj = getattr(obj, attr)
            except AttributeError:
                missing.append(name)
            break
        else:
            missing.append(name)
    assert dotted and missing == []


REPLACEABLE = (
    "_forward",
    "score_turns",
    "evaluate",
    "clip_gradients",
    "load_adapter",
    "save_adapter",
    "adapter_state_dict",
)
"""Methods a runner might be tempted to replace on an instance; seams (a strategy, a subclass) do that job."""


def _replaces_a_method(node: ast.AST) -> bool:
    """True for ``X.<method in REPLACEABLE> = ...``, a ``setattr(...)`` call, or a mention of ``MethodType``."""
    if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        return any(isinstance(t, ast.Attribute) and t.attr in REPLACEABLE for t in targets)
    if isinstance(node, ast.Call):
        return isinstance(node.func, ast.Name) and node.func.id == "setattr"
    return (isinstance(node, ast.Attribute) and node.attr == "MethodType") or (
        isinstance(node, ast.Name) and node.id == "MethodType"
    )


def method_replacements(path: Path) -> list[str]:
    """``line: code`` of each place in the file that could replace a method at run time, in line order."""
    nodes = [n for n in ast.walk(ast.parse(path.read_text(), filename=str(path))) if _replaces_a_method(n)]
    return [f"{n.lineno}: {ast.unparse(n)[:80]}" for n in sorted(nodes, key=lambda n: (n.lineno, n.col_offset))]


@pytest.mark.parametrize("package", ["algos", "runners"])
def test_no_method_is_replaced_at_run_time(package):
    offenders = {str(p.relative_to(ROOT)): method_replacements(p) for p in sorted((ROOT / package).rglob("*.py"))}
    setattr_ok = {"runners/config/overrides.py"}  # config fields by name, not methods
    offenders = {k: [h for h in v if not (k in setattr_ok and "setattr(" in h)] for k, v in offenders.items()}
    assert {k: v for k, v in offenders.items() if v} == {}


def test_the_method_replacement_scan_finds_each_form(tmp_path):
    source = tmp_path / "m.py"
    source.write_text(
        "import types\np.load_adapter = types.MethodType(f, p)\na.clip_gradients = g\n"
        "setattr(p, 'evaluate', h)\nx.lr = 1\n"
    )
    assert [h.split(":")[0] for h in method_replacements(source)] == ["2", "2", "3", "4"]


RUNNERS_LAYERS = [
    ("runners.registry", "runners.atomic"),
    ("runners.models",),
    ("runners.rollout",),
    ("runners.config",),
    ("runners.train",),
    ("runners.build",),
    ("runners.local", "runners.distributed", "runners.artifacts", "runners.bench"),
    ("runners.commands",),
    ("runners.cli",),
]
"""The order of the runners subpackages, lowest first: a module may import units of lower layers and its own
unit, never a higher layer or another unit of its layer (env -> rollout -> config -> train -> build -> runners ->
commands -> cli)."""


def _unit(module: str) -> tuple[int, str] | None:
    """(layer index, unit name) of a ``runners.*`` module name."""
    for i, layer in enumerate(RUNNERS_LAYERS):
        for unit in layer:
            if module == unit or module.startswith(unit + "."):
                return i, unit
    return None


def runners_modules() -> dict[str, Path]:
    """Dotted name -> file of every module under runners/."""
    out = {}
    for path in sorted((ROOT / "runners").rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def runners_imports(path: Path, known: set[str]) -> set[str]:
    """The ``runners.*`` modules a file imports (module level or in functions), resolved to known modules."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        for name in names:
            if name.split(".")[0] == "runners" and name in known:
                found.add(name)
    return found


def test_every_runners_module_has_a_layer():
    assert [m for m in runners_modules() if m != "runners" and _unit(m) is None] == []


def test_runners_subpackages_import_down_the_layers_only():
    modules = runners_modules()
    offenders = []
    for name, path in modules.items():
        if name == "runners":
            continue
        layer, unit = _unit(name)
        for dep in runners_imports(path, set(modules)):
            dep_layer, dep_unit = _unit(dep) or (-1, "runners")
            if dep_unit != unit and dep_layer >= layer:
                offenders.append(f"{name} imports {dep}")
    assert offenders == []


def test_runners_modules_have_no_import_cycle():
    modules = runners_modules()
    graph = {name: runners_imports(path, set(modules)) - {name} for name, path in modules.items()}
    # A package's __init__ importing its own modules is not a cycle through them.
    for name in graph:
        graph[name] = {d for d in graph[name] if not name.startswith(d + ".")}
    state: dict[str, int] = {}
    cycle: list[str] = []

    def visit(node: str, stack: list[str]) -> bool:
        state[node] = 1
        for dep in sorted(graph.get(node, ())):
            if state.get(dep) == 1:
                cycle.extend(stack[stack.index(dep) :] + [node, dep] if dep in stack else [node, dep])
                return True
            if state.get(dep) is None and visit(dep, stack + [node]):
                return True
        state[node] = 2
        return False

    for name in sorted(graph):
        if state.get(name) is None and visit(name, []):
            break
    assert cycle == []


def test_the_layer_check_catches_an_upward_import(tmp_path):
    source = tmp_path / "m.py"
    source.write_text("def f():\n    from runners.build import build_generator\n")
    deps = runners_imports(source, {"runners.build", "runners.train.steps"})
    assert deps == {"runners.build"} and _unit("runners.train.steps")[0] < _unit("runners.build")[0]


BELOW_THE_WIRING = ("algos", "runners/models", "runners/rollout", "runners/train")
"""Packages whose modules receive the settings they need as arguments, never a whole TrainConfig."""
TRAIN_STAGES = {
    "runners/train/loop.py",
    "runners/train/steps.py",
    "runners/train/sft.py",
    "runners/train/sft_result.py",
}
"""The stage drivers of runners/train (the RL loop, its step phases, the SFT stage and where its result lives): wiring,
as runners/build.py is; they turn the run's config into calls of the internals."""


def train_config_fields() -> dict[str, set[str]]:
    """Section name -> its keys, of a TrainConfig and of every registered part's settings (model kinds,
    collectors, engines, runners)."""
    import dataclasses

    from runners.config import TrainConfig
    from runners.config.parts import SLOTS

    config = TrainConfig()
    out = {
        f.name: {g.name for g in dataclasses.fields(getattr(config, f.name))}
        for f in dataclasses.fields(config)
        if dataclasses.is_dataclass(getattr(config, f.name))
    }
    for slot in SLOTS:
        head = slot.section.split(".")[0]
        for name in slot.names():
            out[head] |= (
                {g.name for g in dataclasses.fields(slot.settings_class(name))} if "." not in slot.section else set()
            )
    return out


def train_config_reads(path: Path, sections: dict[str, set[str]]) -> list[str]:
    """``line: what`` for each import of ``TrainConfig`` (or of ``runners.config``) and each read of a run config's
    setting, ``<name>.<section>.<key>`` with a TrainConfig section and one of its keys, in the file."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("runners.config"):
            found.append(f"{node.lineno}: from {node.module} import {', '.join(a.name for a in node.names)}")
        elif isinstance(node, ast.Import) and any(a.name.startswith("runners.config") for a in node.names):
            found.append(f"{node.lineno}: import runners.config")
        elif (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Attribute)
            and isinstance(node.value.value, ast.Name)
            and node.value.value.id != "self"
            and node.attr in sections.get(node.value.attr, ())
        ):
            found.append(f"{node.lineno}: {node.value.value.id}.{node.value.attr}.{node.attr}")
    return sorted(set(found))


def test_no_module_below_the_wiring_reads_a_train_config():
    sections = train_config_fields()
    files = [p for package in BELOW_THE_WIRING for p in sorted((ROOT / package).rglob("*.py"))]
    offenders = {
        str(p.relative_to(ROOT)): train_config_reads(p, sections)
        for p in files
        if str(p.relative_to(ROOT)) not in TRAIN_STAGES
    }
    assert len(files) > 40 and {k: v for k, v in offenders.items() if v} == {}


def test_the_train_config_scan_finds_each_form(tmp_path):
    source = tmp_path / "m.py"
    source.write_text(
        "from runners.config import TrainConfig\n"
        "def build(config, out):\n    return config.sft.seed, config.rollout.env_kwargs, config.loop.mazes_per_step\n"
        "def fine(rollout, model):\n    return rollout.collector.samples, model.config.hidden, self.model.device\n"
    )
    assert train_config_reads(source, train_config_fields()) == [
        "1: from runners.config import TrainConfig",
        "3: config.loop.mazes_per_step",
        "3: config.rollout.env_kwargs",
        "3: config.sft.seed",
    ]
