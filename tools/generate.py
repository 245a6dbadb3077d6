"""Regenerate every generated file in the repository, or check that each one is current (``--check``).

One registry, :data:`GENERATED`: each entry names an output file, the function that produces its text, and
the upstream sources that function needs. Without ``--check`` the files are written; with it nothing is
written, and the run exits 1 listing each stale file with the command that fixes it.

Offline (a fresh clone, no git mirrors) every file is still checked:

- the documents generated from the code or from committed artifacts (``reference/rules.md``,
  ``reference/parameters.md``, ``reference/memory-model.md``, ``reference/activation-terms.md``,
  ``reference/differential.md``) and the planner's
  validation (``reference/benchmarks/planner_validation.json``) are regenerated in full;
- a data table read from upstream source (``checks/data/*.json``) is re-rendered: its committed data put
  through its tool's own writer, so formatting drift shows, and where the tool can read what is installed,
  checked against that too (``mcore_fields.json``'s profile of the installed megatron-core wheel).

With the sources given (options, or the environment variables the tests use) those tables are regenerated
from upstream in full, byte for byte:

    python tools/generate.py --check                       # offline: what a fresh clone can check
    python tools/generate.py --megatron-lm DIR --bridge DIR --nemo-rl DIR --nemo DIR [--mlm-flags-python PY]
    MEGATRON_LM_GIT=DIR BRIDGE_GIT=DIR NEMO_RL_GIT=DIR NEMO_GIT=DIR python tools/generate.py --check

``checks/data/mlm_flags.json`` imports each Megatron-LM tree (minutes, and an interpreter with torch), so it
is regenerated only when ``--mlm-flags-python`` (or ``MLM_FLAGS_PYTHON``) is given as well as the mirror.
``--only PATH`` limits the run to some files; ``--list`` prints the registry.

Measured artifacts (``reference/benchmarks/*.json``: benchmarks, the differential runs, the memory-model
measurements) are inputs here, not outputs: they record a measurement, and each records the command that
made it (CONTRIBUTING.md, "Measure"). The one exception is ``reference/benchmarks/planner_validation.json``:
it is the planner's own output on the published cases of ``tools/data/published_cases.json``, so it is
regenerated (offline, in seconds) like a document, and goes stale whenever the planner's numbers move.
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
TOOLS = ROOT / "tools"
if str(ROOT) not in sys.path:  # run as a script: the checker is imported from this checkout
    sys.path.insert(0, str(ROOT))


@dataclass(frozen=True)
class Sources:
    """Upstream sources, each None when not given. The help text is the option's; the variable is the tests'."""

    megatron_lm: Path | None = field(default=None, metadata={"env": "MEGATRON_LM_GIT",
                                                             "help": "NVIDIA/Megatron-LM git directory"})
    bridge: Path | None = field(default=None, metadata={"env": "BRIDGE_GIT",
                                                        "help": "NVIDIA-NeMo/Megatron-Bridge git directory"})
    nemo_rl: Path | None = field(default=None, metadata={"env": "NEMO_RL_GIT", "help": "NVIDIA-NeMo/RL git directory"})
    nemo: Path | None = field(default=None, metadata={"env": "NEMO_GIT", "help": "NVIDIA/NeMo git directory"})
    mlm_flags_python: Path | None = field(default=None, metadata={
        "env": "MLM_FLAGS_PYTHON", "help": "an interpreter with torch that imports each Megatron-LM tree "
                                           "(checks/data/mlm_flags.json; minutes)"})

    def missing(self, needs: Sequence[str]) -> list[str]:
        return [name for name in needs if getattr(self, name) is None]


def option(name: str) -> str:
    return "--" + name.replace("_", "-")


def _no_checks(_text: str) -> list[str]:
    return []


@dataclass(frozen=True)
class Generated:
    """One generated file."""

    path: str  # relative to the repository root
    produce: Callable[[Sources], str]  # the file's whole text, from the sources in ``needs``
    needs: tuple[str, ...] = ()  # Sources fields ``produce`` reads; () when everything it reads is committed
    rerender: Callable[[str], str] | None = None  # offline: the committed text's data through the tool's writer
    verify: Callable[[str], list[str]] = _no_checks  # offline: problems with the committed content, [] if none
    how: str = ""  # the tool and its inputs, for --list


@dataclass(frozen=True)
class Outcome:
    entry: Generated
    text: str | None  # what the file should hold; None when it could not be produced
    full: bool  # regenerated from its sources (else re-rendered from the committed data)
    problems: tuple[str, ...] = ()

    @property
    def current(self) -> str | None:
        path = ROOT / self.entry.path
        return path.read_text(encoding="utf-8") if path.is_file() else None

    @property
    def stale(self) -> bool:
        return bool(self.problems) or self.text is None or self.text != self.current


# -- the tools ------------------------------------------------------------------------------------------------

@cache
def tool(name: str) -> ModuleType:
    """``tools/<name>.py`` as a module (tools/ is not a package; the tools import each other as scripts do)."""
    if str(TOOLS) not in sys.path:
        sys.path.insert(0, str(TOOLS))
    spec = importlib.util.spec_from_file_location(f"tools_{name}", TOOLS / f"{name}.py")
    if spec is None or spec.loader is None:
        raise SystemExit(f"tools/{name}.py cannot be loaded")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the tool is being defined
    spec.loader.exec_module(module)
    return module


def run_tool(name: str, *args: str | Path) -> str:
    """What ``python tools/<name>.py ARGS`` prints: the tool's own writer, exactly as documented."""
    done = subprocess.run([sys.executable, str(TOOLS / f"{name}.py"), *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no message"])[-1]
        raise RuntimeError(f"tools/{name}.py exited {done.returncode}: {last}")
    return done.stdout


@cache
def stdout_writer(name: str) -> Callable[[Any], str]:
    """The writer of a tool whose ``main`` ends ``json.dump(DATA, sys.stdout, **options)``, then a newline.

    Read from the tool's source, so the offline re-rendering cannot drift from what the tool writes: a tool
    whose ``main`` no longer has that shape is an error here, not a silent pass.
    """
    tree = ast.parse((TOOLS / f"{name}.py").read_text(encoding="utf-8"))
    main = next(node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == "main")
    calls = [node for node in ast.walk(main) if isinstance(node, ast.Call) and ast.unparse(node.func) == "json.dump"]
    newline = any(isinstance(node, ast.Call) and ast.unparse(node) == "sys.stdout.write('\\n')"
                  for node in ast.walk(main))
    if len(calls) != 1 or ast.unparse(calls[0].args[1]) != "sys.stdout":
        raise SystemExit(f"tools/{name}.py: main() no longer writes json.dump(..., sys.stdout, ...); update "
                         "tools/generate.py")
    options = {kw.arg: ast.literal_eval(kw.value) for kw in calls[0].keywords if kw.arg}
    return lambda data: json.dumps(data, **options) + ("\n" if newline else "")


def _rerender_stdout(name: str) -> Callable[[str], str]:
    return lambda text: stdout_writer(name)(json.loads(text))


# -- the entries ----------------------------------------------------------------------------------------------

def checks_cli(*args: str) -> str:
    """What ``python -m checks ARGS`` prints (the documented command, wherever the code behind it lives)."""
    done = subprocess.run([sys.executable, "-m", "checks", *args], cwd=ROOT, capture_output=True, text=True,
                          check=False)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no message"])[-1]
        raise RuntimeError(f"python -m checks {' '.join(args)} exited {done.returncode}: {last}")
    return done.stdout


def _rules_md(_: Sources) -> str:
    return checks_cli("rules", "--format", "markdown")


def _parameters_md(_: Sources) -> str:
    return checks_cli("rules", "--format", "parameters")


def _memory_model_md(_: Sources) -> str:
    data = json.loads((ROOT / "reference/benchmarks/activation_validation.json").read_text(encoding="utf-8"))
    planner = json.loads((ROOT / "reference/benchmarks/planner_validation.json").read_text(encoding="utf-8"))
    after_step = json.loads((ROOT / "reference/benchmarks/after_step_memory.json").read_text(encoding="utf-8"))
    text: str = tool("memory_report").markdown(data, planner, after_step)
    return text


def _activation_terms_md(_: Sources) -> str:
    text: str = tool("activation_terms").markdown()
    return text


def _planner_validation(_: Sources) -> str:
    text: str = tool("planner_validation").produce()
    return text


def _validation_bands(_: Sources) -> str:
    text: str = tool("planner_validation").produce_bands()
    return text


def _differential_md(_: Sources) -> str:
    data = json.loads((ROOT / "reference/benchmarks/differential.json").read_text(encoding="utf-8"))
    text: str = tool("differential_matrix").markdown(data["results"], data["revision"])
    return text


def _mcore_fields(src: Sources) -> str:
    module = tool("mcore_fields")
    text: str = module.render(module.build_all(src.megatron_lm))
    return text


def _mcore_fields_rerender(text: str) -> str:
    rendered: str = tool("mcore_fields").render(json.loads(text))
    return rendered


def _mcore_fields_wheel(text: str) -> list[str]:
    """The installed megatron-core's config classes against the table's profile of that release."""
    from importlib import metadata

    try:
        dist = metadata.distribution("megatron-core")
    except metadata.PackageNotFoundError:
        return []  # nothing installed to compare with
    table = json.loads(text)
    if dist.version not in table["versions"]:
        return []  # a release the table does not profile (a newer install): nothing to compare
    site = Path(str(dist.locate_file("")))
    differences: list[str] = tool("mcore_fields").wheel_differences(table, site, dist.version)
    return [f"installed megatron-core {dist.version}: {d}" for d in differences[:10]]


def _mlm_flags(src: Sources) -> str:
    with tempfile.TemporaryDirectory(prefix="generate-mlm-flags-") as scratch:
        out = Path(scratch) / "mlm_flags.json"
        run_tool("mlm_flags", "--mirror", src.megatron_lm or "", "--all", "--python", src.mlm_flags_python or "",
                 "--output", out)
        return out.read_text(encoding="utf-8")


def _mlm_flags_rerender(text: str) -> str:
    rendered: str = tool("mlm_flags").dump(json.loads(text)) + "\n"  # main() writes the dump and a newline
    return rendered


def _bridge_recipes(src: Sources) -> str:
    with tempfile.TemporaryDirectory(prefix="generate-bridge-recipes-") as scratch:
        out = Path(scratch) / "bridge_recipes.json"
        run_tool("bridge_recipes", "--bridge-git", src.bridge or "", "--out", out)
        return out.read_text(encoding="utf-8")


def _bridge_recipes_rerender(text: str) -> str:
    rendered: str = tool("bridge_recipes").dump(json.loads(text))
    return rendered


def _efficiency(src: Sources) -> str:
    with tempfile.TemporaryDirectory(prefix="generate-efficiency-") as scratch:
        out = Path(scratch) / "efficiency.json"
        run_tool("efficiency", "--bridge-git", src.bridge or "", "--out", out)
        return out.read_text(encoding="utf-8")


def _efficiency_rerender(text: str) -> str:
    rendered: str = tool("efficiency").dump(json.loads(text))
    return rendered


def _efficiency_verify(text: str) -> list[str]:
    problems: list[str] = tool("efficiency").verify(json.loads(text))
    return problems


def _anchors(src: Sources) -> str:
    """Every check's line per version, from the mirrors given; a repository not given keeps its committed lines
    (Transformer Engine has none here: its two lines are kept as committed)."""
    given = {"NVIDIA/Megatron-LM": src.megatron_lm, "NVIDIA-NeMo/RL": src.nemo_rl,
             "NVIDIA-NeMo/Megatron-Bridge": src.bridge}
    text: str = tool("verify_anchors").render_anchors({name: path for name, path in given.items() if path})
    return text


def _anchors_rerender(text: str) -> str:
    rendered: str = tool("verify_anchors").canonical(json.loads(text))
    return rendered


def _anchors_verify(text: str) -> list[str]:
    """Offline: every upstream check the rules cite has its entry, and no entry is left over."""
    from checks.rules import upstream

    cited = set()
    for value in vars(upstream).values():  # a check, or a table of them (O5_O8_DTYPES, by field)
        for check in value.values() if isinstance(value, dict) else (value,):
            if isinstance(check, upstream.UpstreamCheck):
                cited.add(check.key)
    held = set(json.loads(text).get("anchors", {}))
    return ([f"no anchors for {key}" for key in sorted(cited - held)]
            + [f"anchors for {key}, which no check has" for key in sorted(held - cited)])


GENERATED: tuple[Generated, ...] = (  # in the order they are written: a file before those made from it
    Generated("checks/data/mcore_fields.json", _mcore_fields, ("megatron_lm",), _mcore_fields_rerender,
              _mcore_fields_wheel, how="tools/mcore_fields.py --git MEGATRON_LM --all"),
    Generated("checks/data/mlm_flags.json", _mlm_flags, ("megatron_lm", "mlm_flags_python"), _mlm_flags_rerender,
              how="tools/mlm_flags.py --mirror MEGATRON_LM --all --python PY --output FILE"),
    Generated("checks/data/bridge_fields.json",
              lambda src: run_tool("bridge_fields", "--bridge", src.bridge or "", "--megatron-lm",
                                   src.megatron_lm or ""),
              ("bridge", "megatron_lm"), _rerender_stdout("bridge_fields"),
              how="tools/bridge_fields.py --bridge BRIDGE --megatron-lm MEGATRON_LM (the pinned --ref)"),
    Generated("checks/data/bridge_recipes.json", _bridge_recipes, ("bridge",), _bridge_recipes_rerender,
              how="tools/bridge_recipes.py --bridge-git BRIDGE --out FILE (the pinned --commit)"),
    Generated("checks/data/efficiency.json", _efficiency, ("bridge",), _efficiency_rerender, _efficiency_verify,
              how="tools/efficiency.py --bridge-git BRIDGE --out FILE (Bridge's performance tables, inverted through "
                  "checks/plan/throughput.py)"),
    Generated("checks/data/framework_pins.json",
              lambda src: run_tool("framework_pins", "--nemo-rl", src.nemo_rl or "", "--bridge", src.bridge or "",
                                   "--megatron-lm", src.megatron_lm or ""),
              ("nemo_rl", "bridge", "megatron_lm"), _rerender_stdout("framework_pins"),
              how="tools/framework_pins.py --nemo-rl NEMO_RL --bridge BRIDGE --megatron-lm MEGATRON_LM"),
    Generated("checks/data/models.json",
              lambda src: run_tool("model_catalogue", "--bridge-git", src.bridge or "", "--nemo-rl-git",
                                   src.nemo_rl or "", "--mlm-git", src.megatron_lm or "", "--nemo-git",
                                   src.nemo or ""),
              ("bridge", "nemo_rl", "megatron_lm", "nemo"), _rerender_stdout("model_catalogue"),
              how="tools/model_catalogue.py --bridge-git ... --nemo-rl-git ... --mlm-git ... --nemo-git ... "
                  "(snapshots in tools/data/model_sources.yaml)"),
    Generated("checks/data/nemo_rl_keys.json",
              lambda src: run_tool("nemo_rl_keys", "--git", src.nemo_rl or ""),
              ("nemo_rl",), _rerender_stdout("nemo_rl_keys"), how="tools/nemo_rl_keys.py --git NEMO_RL"),
    # before the documents: rules.md quotes the anchors
    Generated("checks/data/anchors.json", _anchors, ("megatron_lm",), _anchors_rerender, _anchors_verify,
              how="tools/verify_anchors.py --git MEGATRON_LM [--repo NVIDIA-NeMo/RL=NEMO_RL "
                  "--repo NVIDIA-NeMo/Megatron-Bridge=BRIDGE] --write"),
    # -- documents: after the data they are made from (a full run writes the tables first) ----------------------
    Generated("reference/rules.md", _rules_md,
              how="python -m checks rules --format markdown (from the rules and checks/data/)"),
    Generated("reference/parameters.md", _parameters_md,
              how="python -m checks rules --format parameters (from checks/data/ and the rules' examples)"),
    Generated("reference/benchmarks/planner_validation.json", _planner_validation,
              how="tools/planner_validation.py: the planner on tools/data/published_cases.json"),
    Generated("checks/data/validation_bands.json", _validation_bands,
              how="tools/planner_validation.py produce_bands(), from reference/benchmarks/planner_validation.json"),
    Generated("reference/memory-model.md", _memory_model_md,
              how="tools/memory_report.py markdown(), from reference/benchmarks/activation_validation.json, "
                  "reference/benchmarks/planner_validation.json and reference/benchmarks/after_step_memory.json"),
    Generated("reference/activation-terms.md", _activation_terms_md,
              how="tools/activation_terms.py markdown(), from checks/plan/activations.py and the presets"),
    Generated("reference/differential.md", _differential_md,
              how="tools/differential_matrix.py markdown(), from reference/benchmarks/differential.json"),
)


# -- running the registry -------------------------------------------------------------------------------------

def outcome(entry: Generated, src: Sources) -> Outcome:
    """What ``entry``'s file should hold: regenerated when its sources are given, else re-rendered."""
    try:
        if not src.missing(entry.needs):
            return Outcome(entry, entry.produce(src), True)
        current = (ROOT / entry.path).read_text(encoding="utf-8")
        if entry.rerender is None:
            return Outcome(entry, None, False, ("no offline check, and its sources are not given",))
        return Outcome(entry, entry.rerender(current), False, tuple(entry.verify(current)))
    except (OSError, ValueError, RuntimeError, subprocess.SubprocessError) as err:
        return Outcome(entry, None, not src.missing(entry.needs), (f"{type(err).__name__}: {err}",))


def fix_command(entry: Generated, src: Sources) -> str:
    needed = " ".join(f"{option(name)} {getattr(src, name) or name.upper()}" for name in entry.needs)
    return f"python tools/generate.py --only {entry.path}" + (f" {needed}" if needed else "")


def sources_from(args: argparse.Namespace) -> Sources:
    """The options, else the environment variables; an empty variable counts as not given."""
    given: dict[str, Path | None] = {}
    for spec in fields(Sources):
        value = getattr(args, spec.name) or os.environ.get(spec.metadata["env"]) or None
        given[spec.name] = Path(value) if value else None
    return Sources(**given)


def parser() -> argparse.ArgumentParser:
    cli = argparse.ArgumentParser(prog="python tools/generate.py", description=__doc__.splitlines()[0])
    cli.add_argument("--check", action="store_true", help="write nothing; exit 1 when a file is stale")
    cli.add_argument("--only", action="append", default=[], metavar="PATH", help="only this output (repeatable)")
    cli.add_argument("--list", action="store_true", help="print the registry: outputs, tools and sources")
    for spec in fields(Sources):
        cli.add_argument(option(spec.name), type=Path, metavar="DIR" if spec.name != "mlm_flags_python" else "PY",
                         help=f"{spec.metadata['help']} (default: ${spec.metadata['env']})")
    return cli


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    known = {entry.path for entry in GENERATED}
    unknown = [path for path in args.only if path not in known]
    if unknown:
        print(f"error: not a generated file: {', '.join(unknown)} (python tools/generate.py --list)", file=sys.stderr)
        return 2
    entries = [entry for entry in GENERATED if not args.only or entry.path in args.only]
    src = sources_from(args)
    if args.list:
        for entry in entries:
            needs = ", ".join(f"{option(n)} / ${Sources.__dataclass_fields__[n].metadata['env']}" for n in entry.needs)
            print(f"{entry.path}\n    {entry.how}\n    sources: {needs or 'none (offline)'}")
        return 0
    stale = 0
    for result in (outcome(entry, src) for entry in entries):
        path = result.entry.path
        partly = "" if result.full else f" (re-rendered from the committed data; for a full regeneration give " \
            f"{', '.join(option(n) for n in src.missing(result.entry.needs))})"
        if not result.stale:
            print(f"ok {path}{partly}")
            continue
        if args.check or result.text is None or result.problems:
            stale += 1
            print(f"STALE {path}{partly}")
            for problem in result.problems:
                print(f"    {problem}")
            print(f"    fix: {fix_command(result.entry, src)}")
            continue
        (ROOT / path).write_text(result.text, encoding="utf-8")
        print(f"wrote {path}{partly}")
    if stale:
        print(f"{stale} file{'s' if stale != 1 else ''} stale", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    raise SystemExit(main())
