"""The checker must start fast on a login node: it never imports torch, megatron, Hydra or (unless needed) OmegaConf;
and its layers import one way: no module of ``checks/`` imports, even inside a function, one that imports it back."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

from conftest import ROOT

PROBE = """
import sys
from checks.cli import main
code = main({argv!r})
heavy = sorted({{m.split('.')[0] for m in sys.modules}} & {{'torch', 'megatron', 'hydra', 'omegaconf', 'antlr4',
                                                            'numpy', 'transformer_engine'}})
print('HEAVY', heavy, 'CODE', code)
"""


def heavy_modules(*argv: str) -> str:
    result = subprocess.run([sys.executable, "-c", PROBE.format(argv=list(argv))], cwd=ROOT, capture_output=True,
                            text=True, check=True)
    return result.stdout.strip().splitlines()[-1]


def test_checking_bridge_and_megatron_lm_loads_nothing_heavy() -> None:
    assert heavy_modules("check", "examples/configs/bridge/run_config_broken.yaml", "--format", "json") == \
        "HEAVY [] CODE 1"
    assert heavy_modules("check", "examples/configs/megatron-lm/pretrain_gpt_offload.sh") == "HEAVY [] CODE 1"
    assert heavy_modules("rules") == "HEAVY [] CODE 0"


def test_nemo_rl_interpolation_loads_omegaconf_only_beyond_the_native_subset(tmp_path: Path) -> None:
    # The bundled configs interpolate as NeMo-RL's examples do, which the checker evaluates itself
    # (checks/loaders/interpolation.py, Note [Native evaluation]); a float literal is left to OmegaConf.
    assert heavy_modules("check", "examples/configs/nemo-rl/grpo_offload.yaml") == "HEAVY [] CODE 0"
    for name in ("grpo_megatron_base.yaml", "grpo_offload.yaml"):
        shutil.copy(ROOT / "examples/configs/nemo-rl" / name, tmp_path / name)
    child = tmp_path / "child.yaml"
    child.write_text("defaults: grpo_offload.yaml\npolicy:\n  megatron_cfg:\n    optimizer:\n"
                     "      optimizer_offload_fraction: ${div:1, 2.0}\n", encoding="utf-8")
    assert heavy_modules("check", str(child)) == "HEAVY ['antlr4', 'omegaconf'] CODE 0"


def test_entry_point_runs_as_a_module() -> None:
    result = subprocess.run([sys.executable, "-m", "checks", "check", "examples/configs/bridge/run_config_clean.yaml"],
                            cwd=ROOT, capture_output=True, text=True)
    assert (result.returncode, result.stderr) == (0, "")
    assert "\n0 errors, 0 warnings, 1 info (bridge, megatron-core" in result.stdout


def import_graph(package: Path) -> dict[str, set[str]]:
    """Module -> the modules of ``package`` it imports, read from the source (every ``import`` and ``from``, at
    the top, in functions and under ``TYPE_CHECKING`` alike: a lazy import still ties the layers together)."""
    root = package.name
    modules = {}
    for path in sorted(package.rglob("*.py")):
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        here = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                found |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: from the package `level` steps up
                    parents = here.split(".")[:len(here.split(".")) - node.level + 1]
                    base = ".".join([*parents, *([node.module] if node.module else [])])
                # `from pkg import sub` imports the submodule; `from pkg import name` the package
                found |= {f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names}
        graph[name] = {m for m in found if m in modules and m != name and m.split(".")[0] == root}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as ``[a, b, ..., a]``, or None (depth-first search, modules in sorted order)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(module: str) -> list[str] | None:
        state[module] = 1
        path.append(module)
        for target in sorted(graph[module]):
            if state.get(target) == 1:
                return [*path[path.index(target):], target]
            if target not in state and (cycle := visit(target)) is not None:
                return cycle
        path.pop()
        state[module] = 2
        return None

    for module in sorted(graph):
        if module not in state and (cycle := visit(module)) is not None:
            return cycle
    return None


def test_checks_has_no_import_cycle() -> None:
    graph = import_graph(ROOT / "checks")
    assert {"checks.cli", "checks.parser", "checks.lint.evals", "checks.catalogue"} <= set(graph)
    assert "checks.parser" in graph["checks.lint.evals"]  # a function-level import is seen
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_the_cycle_finder_sees_lazy_and_relative_imports(tmp_path: Path) -> None:
    """The cycle this test was written for: cli -> catalogue -> lint -> lint.evals -> cli, the last one lazy."""
    package = tmp_path / "pkg"
    (package / "lint").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "cli.py").write_text("from pkg import catalogue\n")
    (package / "catalogue.py").write_text("def f():\n    from pkg.lint import RULES\n")
    (package / "lint" / "__init__.py").write_text("from . import evals\nRULES = ()\n")
    (package / "lint" / "evals.py").write_text("import os\ndef g():\n    from ..cli import main\n")
    graph = import_graph(package)
    assert find_cycle(graph) == ["pkg.catalogue", "pkg.lint", "pkg.lint.evals", "pkg.cli", "pkg.catalogue"]
    (package / "lint" / "evals.py").write_text("def g():\n    from pkg.parser import build\n")
    assert find_cycle(import_graph(package)) is None


def _reaches(graph: dict[str, set[str]], start: str) -> set[str]:
    seen: set[str] = set()
    todo = [start]
    while todo:
        for target in graph[todo.pop()] - seen:
            seen.add(target)
            todo.append(target)
    return seen


def test_the_layers_point_one_way() -> None:
    """The linter reads the command line through checks.parser, never the CLI; the config-rule catalogue never
    reaches the linter (checks.docs composes the two); loaders never reach the rules or the planner."""
    graph = import_graph(ROOT / "checks")
    assert "checks.cli" not in _reaches(graph, "checks.lint")
    assert not {m for m in _reaches(graph, "checks.catalogue") if m.startswith("checks.lint")}
    assert not {m for m in _reaches(graph, "checks.loaders") if m.startswith(("checks.rules", "checks.plan"))}


def test_every_run_path_the_code_names_is_declared_and_documented() -> None:
    """run.* is a section like the others: each key the loaders write or the rules and planner read is in
    checks/config.py RUN_KEYS, and reference/formats.md lists each with its meaning."""
    import re

    from checks.config import RUN_KEYS, SECTIONS
    from checks.loaders.bridge import _RUN_KEYS
    from checks.loaders.checkpoint import RUN_FIELDS
    from checks.model.shape import _BRIDGE_PROVIDER

    named = {m for path in (ROOT / "checks").rglob("*.py")
             for m in re.findall(r"[\"']run\.([a-z_0-9]+)[\"']", path.read_text(encoding="utf-8"))}
    named -= {"py"}  # "run.py": NeMo-RL's entry script, a file name (checks/loaders/launch.py)
    named |= {path.removeprefix("run.") for path in _RUN_KEYS.values() if path.startswith("run.")}
    named |= set(RUN_FIELDS) | set(_BRIDGE_PROVIDER)
    assert named - set(RUN_KEYS) == set(), "declare them in checks/config.py RUN_KEYS"
    assert {"model", "optimizer", "ddp", "env", "run"} == set(SECTIONS)
    formats = (ROOT / "reference" / "formats.md").read_text(encoding="utf-8")
    missing = [key for key, meaning in RUN_KEYS.items() if f"| `run.{key}` | {meaning} |" not in formats]
    assert missing == [], "document them in reference/formats.md (the run section's table)"
