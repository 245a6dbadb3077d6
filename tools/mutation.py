"""Mutation testing of the rules, the planner and the offload example: do the tests notice a broken rule?

mutmut 3.8.1 (https://github.com/boxed/mutmut) makes small changes ("mutants") to ``checks/rules/``,
``checks/plan/`` and ``examples/offload/`` and runs the tests that cover each changed function; a mutant the tests
do not fail on "survived". mutmut is installed for this purpose only, in its own virtual environment inside the
work directory, never in the project's: CI does not run this (a full run takes hours on two cores).

Usage:
    python tools/mutation.py --dir /tmp/mutation --sample 600 --seed 15 --out reference/benchmarks/mutation.json
    python tools/mutation.py --dir /tmp/mutation --rerun-survivors --out ...   # after adding tests
    python tools/mutation.py --dir /tmp/mutation --report-only --out ...       # after editing the reasons

The first run clones the committed tree (``git clone`` of HEAD) into ``--dir``, makes the venv, generates every
mutant and records which tests cover which function; later runs reuse it. ``--sample N`` runs N mutants drawn
at random (``--seed``) from each path in proportion to its mutant count, since all 13,000-odd would take a day
here. ``--rerun-survivors`` copies the current tests into the work directory and reruns the sample's survivors.
The artifact lists every sampled mutant's outcome, and each survivor with its diff and, where one is written
in ``tools/data/mutation_survivors.yaml``, the reason it is equivalent (no test could tell it apart) or
harmless.

Three workarounds, each needed for mutmut 3.8.1 to see this code as the tests use it:

- Note [Decorated functions]: mutmut leaves every decorated function unmutated (its trampoline cannot wrap
  one), and every rule is a check function decorated with ``@rule(...)``. The work copy rewrites
  ``@dec def f(...)`` as ``def f(...)`` followed by ``f = dec(f)``, which declares the same rule in the same order.
- Note [Caches hide callers]: mutmut runs for each mutant only the tests that called its function while it
  recorded coverage; behind an ``lru_cache`` only the first caller calls it, so a later test that would catch a
  change there (``reference/activation-terms.md``'s check, behind ``_kind_terms``) is never run for it. The work
  copy drops the caching decorators (the functions are pure: only speed changes).
- Note [Config from the working directory]: mutmut's trampoline reads mutmut's config from the current
  directory, so a test that runs ``python -m checks`` in a temporary directory crashes under it. The work venv's
  copy of mutmut reads it from ``$MUTMUT_ROOT`` instead.

Tests used: the ones that exercise rules, planner and offload code in the test process (``SELECTION`` below);
the command-line, loader and launch tests run the checker in subprocesses, which mutmut cannot attribute, and
take most of the suite's time. The score is therefore a lower bound.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import re
import shutil
import subprocess
import sys
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
MUTMUT = "mutmut==3.8.1"
PATHS = ("checks/rules", "checks/plan", "examples/offload")
SURVIVORS_FILE = ROOT / "tools" / "data" / "mutation_survivors.yaml"
SELECTION = (
    "test_rules", "test_rule_boundaries", "test_examples", "test_fix_convergence", "test_fix_safety",
    "test_rule_reads", "test_differential", "test_differential_properties", "test_override_semantics",
    "test_properties", "test_versions", "test_docs", "test_cli", "test_bad_input", "test_output_schema",
    "test_nemo_rl_models",
    "test_plan", "test_plan_inputs", "test_plan_memory_defects", "test_plan_time_and_confidence", "test_step_time",
    "test_planner_validation", "test_presets_published", "test_activations", "test_model",
    "test_offload", "test_offload_hazards", "test_hybrid_adam", "test_run_offload", "test_hazard_notes",
)
# What the tests read besides the code (mutmut copies only the source paths and tests/ into mutants/).
ALSO_COPY = ("reference", "evals", "tools", "benchmarks", "card.yaml", "SKILL.md", "README.md", "CHANGELOG.md",
             "ARCHITECTURE.md", "CONTRIBUTING.md", "LICENSE", ".ci")
# mutmut's exit-code meanings (mutmut/stats.py status_by_exit_code)
STATUS = {1: "killed", 3: "killed", 0: "survived", 5: "no tests", 33: "no tests", 34: "skipped", 36: "timeout",
          37: "caught by type check", -24: "timeout", 24: "timeout", 152: "timeout", 255: "timeout",
          None: "not checked"}

UNDECORATE = '''
import sys
from pathlib import Path
import libcst as cst

KEEP = {"staticmethod", "classmethod"}  # mutmut handles these itself
CACHES = ("functools.cache", "functools.lru_cache", "cache", "lru_cache")  # dropped: see Note [Caches hide callers]

def code(node):
    return cst.Module([]).code_for_node(node)

def rewrite(body):
    out = []
    for stmt in body:
        if isinstance(stmt, cst.FunctionDef) and stmt.decorators and not any(
                code(d.decorator) in KEEP for d in stmt.decorators):
            expr = cst.Name(stmt.name.value)
            kept = [d for d in stmt.decorators if not code(d.decorator).split("(")[0] in CACHES]
            for d in reversed(kept):  # @a @b def f  ==  f = a(b(f))
                expr = cst.Call(func=d.decorator, args=[cst.Arg(expr)])
            out.append(stmt.with_changes(decorators=[]))
            if kept:
                out.append(cst.SimpleStatementLine([cst.Assign([cst.AssignTarget(cst.Name(stmt.name.value))], expr)]))
        else:
            out.append(stmt)
    return out

class Undecorate(cst.CSTTransformer):
    def leave_Module(self, original, updated):
        return updated.with_changes(body=rewrite(updated.body))

    def leave_ClassDef(self, original, updated):
        if isinstance(updated.body, cst.IndentedBlock):
            return updated.with_changes(body=updated.body.with_changes(body=rewrite(updated.body.body)))
        return updated

for name in sys.argv[1:]:
    path = Path(name)
    path.write_text(cst.parse_module(path.read_text()).visit(Undecorate()).code)
'''


def _run(command: list[str], cwd: Path, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, cwd=cwd, check=True, text=True, **kwargs)


def _python(work: Path) -> Path:
    return work / ".mutenv" / "bin" / "python"


def setup(work: Path) -> None:
    """Clone HEAD into ``work``, install mutmut in its own venv, apply the workarounds, write mutmut's config."""
    _run(["git", "clone", "-q", str(ROOT), str(work)], ROOT)
    _run([sys.executable, "-m", "venv", ".mutenv"], work)
    _run([str(_python(work)), "-m", "pip", "install", "-q", "-e", ".[test]", MUTMUT], work, stderr=subprocess.DEVNULL)
    config = Path(_run([str(_python(work)), "-c", "import mutmut.configuration as c; print(c.__file__)"], work,
                       capture_output=True).stdout.strip())
    text = config.read_text()
    for old, new in (('path = Path("pyproject.toml")', 'path = Path(os.environ["MUTMUT_ROOT"]) / "pyproject.toml"'),
                     ('Path.cwd().resolve(strict=True) / "mutants" / p',
                      'Path(os.environ["MUTMUT_ROOT"]).resolve(strict=True) / "mutants" / p')):
        if old not in text:
            raise SystemExit(f"{config}: no {old!r}; the workaround is for {MUTMUT} only")
        text = text.replace(old, new, 1)
    config.write_text(text)
    sources = sorted(str(p.relative_to(work)) for path in PATHS for p in (work / path).glob("*.py"))
    _run([str(_python(work)), "-c", UNDECORATE, *sources], work)
    selection = ", ".join(f'"tests/{name}.py"' for name in SELECTION)
    with (work / "pyproject.toml").open("a", encoding="utf-8") as handle:
        handle.write("\n[tool.mutmut]\n"
                     'source_paths = ["checks", "examples"]\n'
                     f"only_mutate = {json.dumps([f'{p}/*' for p in PATHS])}\n"
                     f"also_copy = {json.dumps(list(ALSO_COPY))}\n"
                     'pytest_add_cli_args = ["-p", "no:cacheprovider"]\n'
                     # mutmut limits a mutant's CPU time to (tests' time + constant) x multiplier x 2: a
                     # forked child that imports torch needs ~20 s whatever the tests' time, and a mutant
                     # that makes the tests 3x slower has looped (mutmut's defaults: 1 s and 15x)
                     "timeout_multiplier = 3.0\ntimeout_constant = 20.0\n"
                     f"pytest_add_cli_args_test_selection = [{selection}]\n")


def mutmut(work: Path, *args: str, check: bool = True, quiet: bool = False, capture: bool = False) -> str:
    """Run mutmut in ``work``; its output when ``capture``, else it is dropped (stderr kept unless ``quiet``)."""
    # One OpenMP thread that sleeps when idle: mutmut forks each mutant's run from a process that has loaded torch,
    # and the forked child's OpenMP threads spin, so the tests of torch code overran mutmut's CPU limit (a false
    # timeout on every mutant of examples/offload/hybrid_adam.py and the activation profiles).
    env = {**os.environ, "MUTMUT_ROOT": str(work), "OMP_NUM_THREADS": "1", "OMP_WAIT_POLICY": "PASSIVE"}
    done = subprocess.run([str(work / ".mutenv" / "bin" / "mutmut"), *args], cwd=work, env=env, check=check,
                          text=True, stdout=subprocess.PIPE if capture else subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL if quiet else None)
    return done.stdout or ""


def prime(work: Path) -> None:
    """Make every mutant and record which tests cover which function, running no mutant: mutmut has no command
    for that, so ask it to run a mutant that does not exist (it refuses after the stats, as wanted)."""
    mutmut(work, "run", "none__mutmut_0", check=False, quiet=True)
    if not (work / "mutants" / "mutmut-stats.json").exists():
        raise SystemExit(f"mutmut made no stats in {work}/mutants: run `mutmut run` there to see why")


def outcomes(work: Path) -> dict[str, int | None]:
    """Every mutant's exit code (None: not run yet), from mutmut's per-file records."""
    found: dict[str, int | None] = {}
    for path in PATHS:
        for meta in sorted((work / "mutants" / path).glob("*.py.meta")):
            found.update(json.loads(meta.read_text())["exit_code_by_key"])
    return found


def path_of(mutant: str) -> str:
    return next(p for p in PATHS if mutant.startswith(p.replace("/", ".") + "."))


def draw(names: list[str], size: int, seed: int) -> list[str]:
    """``size`` mutants, from each path in proportion to its count (at least one each), reproducibly."""
    rng = random.Random(seed)
    by_path: dict[str, list[str]] = {p: sorted(n for n in names if path_of(n) == p) for p in PATHS}
    sample = []
    for members in by_path.values():
        share = max(1, round(size * len(members) / len(names)))
        sample += rng.sample(members, min(share, len(members)))
    return sorted(sample)


def copy_tests(work: Path) -> None:
    """The current tests and the files they read, into the work tree and mutmut's copy of it; the mutated
    sources must be the ones the mutants were made from."""
    for path in PATHS:
        for source in (ROOT / path).glob("*.py"):
            committed = _run(["git", "show", f"HEAD:{source.relative_to(ROOT)}"], work, capture_output=True).stdout
            if source.read_text() != committed:
                raise SystemExit(f"{source.relative_to(ROOT)} changed since the mutants were made; start a new --dir")
    for name in ("tests", *ALSO_COPY):
        for target in (work / name, work / "mutants" / name):
            if (ROOT / name).is_dir():
                shutil.copytree(ROOT / name, target, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__"))
            elif (ROOT / name).exists():
                shutil.copy2(ROOT / name, target)


def diff(work: Path, mutant: str) -> str:
    shown = mutmut(work, "show", mutant, capture=True)
    return "\n".join(line for line in shown.splitlines() if line.startswith(("+", "-")) and
                     not line.startswith(("+++", "---")))


def report(work: Path, sample: list[str], seed: int, command: str, tests_commit: str | None) -> dict[str, Any]:
    codes = outcomes(work)
    reasons = {entry["mutant"]: entry["reason"] for entry in
               (yaml.safe_load(SURVIVORS_FILE.read_text()) or [])} if SURVIVORS_FILE.exists() else {}
    status = {name: STATUS.get(codes.get(name), "suspicious") for name in sample}
    survivors = [{"mutant": name, "diff": diff(work, name), "reason": reasons.get(name)}
                 for name in sample if status[name] == "survived"]
    per_path = {}
    for path in PATHS:
        counted = Counter(s for n, s in status.items() if path_of(n) == path)
        settled = counted["killed"] + counted["survived"] + counted["timeout"]
        per_path[path] = {"mutants": sum(1 for n in codes if path_of(n) == path), "sampled": sum(counted.values()),
                          **dict(sorted(counted.items())),
                          "score": round((counted["killed"] + counted["timeout"]) / settled, 4) if settled else None}
    decided = [s for s in status.values() if s in ("killed", "survived", "timeout")]
    justified = sum(1 for s in survivors if s["reason"])
    commit = _run(["git", "rev-parse", "HEAD"], work, capture_output=True).stdout.strip()
    return {
        "artifact": "mutation",
        # the work tree is the commit, cloned, with the workarounds above applied to the copy only
        "revision": {"git_commit": commit, "git_dirty": False, "tests_commit": tests_commit or commit,
                     "tool": MUTMUT, "command": command,
                     "python": platform.python_version(), "date": datetime.now(UTC).isoformat(timespec="seconds")},
        "seed": seed,
        "tests": [f"tests/{name}.py" for name in SELECTION],
        "mutants": len(codes), "sampled": len(sample),
        "score": round(sum(s != "survived" for s in decided) / len(decided), 4) if decided else None,
        "survived": len(survivors), "survived_justified": justified,
        "score_counting_justified": round((len(decided) - len(survivors) + justified) / len(decided), 4)
        if decided else None,
        "by_path": per_path,
        "outcomes": dict(sorted(Counter(status.values()).items())),
        "survivors": survivors,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", type=Path, default=Path("/tmp/mutation"), help="work directory (made if absent)")
    parser.add_argument("--sample", type=int, default=600, help="mutants to run, across the three paths")
    parser.add_argument("--seed", type=int, default=15)
    parser.add_argument("--rerun-survivors", action="store_true", help="copy the current tests, rerun survivors")
    parser.add_argument("--report-only", action="store_true",
                        help="rewrite the artifact from the recorded outcomes (after editing the survivors' reasons)")
    parser.add_argument("--max-children", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--out", type=Path, default=ROOT / "reference" / "benchmarks" / "mutation.json")
    args = parser.parse_args(argv)
    work = args.dir.resolve()
    if not work.exists():
        setup(work)
        prime(work)
    sample = draw(list(outcomes(work)), args.sample, args.seed)
    tests_commit = None
    if args.report_only:
        previous = json.loads(args.out.read_text(encoding="utf-8"))["revision"]
        tests_commit, command = previous["tests_commit"], previous["command"]
        document = report(work, sample, args.seed, command, tests_commit)
        args.out.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
        return 0
    if args.rerun_survivors:
        if _run(["git", "status", "--porcelain", "tests", "tools"], ROOT, capture_output=True).stdout.strip():
            raise SystemExit("commit the tests first: the artifact records the commit they come from")
        tests_commit = _run(["git", "rev-parse", "HEAD"], ROOT, capture_output=True).stdout.strip()
        copy_tests(work)
        codes = outcomes(work)
        todo = [n for n in sample if STATUS.get(codes.get(n)) in ("survived", "not checked")]
        meta_reset(work, todo)
    else:
        codes = outcomes(work)
        todo = [n for n in sample if codes.get(n) is None]
        timeouts = [n for n in sample if STATUS.get(codes.get(n)) == "timeout"]
        meta_reset(work, timeouts)  # once more: was it one?
        todo += timeouts
    for start in range(0, len(todo), 200):  # a bounded command line
        mutmut(work, "run", "--max-children", str(args.max_children), *todo[start:start + 200])
    command = "python tools/mutation.py " + " ".join(a for a in (argv if argv is not None else sys.argv[1:]))
    document = report(work, sample, args.seed, re.sub(r"\s+", " ", command).strip(), tests_commit)
    args.out.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {args.out}: score {document['score']} over {document['sampled']} of {document['mutants']} "
          f"mutants; {document['survived']} survived, {document['survived_justified']} of them justified")
    return 0


def meta_reset(work: Path, names: list[str]) -> None:
    """Forget the outcome of ``names`` so that mutmut runs them again against the tests just copied in."""
    wanted = set(names)
    for path in PATHS:
        for meta in (work / "mutants" / path).glob("*.py.meta"):
            data = json.loads(meta.read_text())
            hits = wanted & data["exit_code_by_key"].keys()
            if hits:
                data["exit_code_by_key"].update(dict.fromkeys(hits))
                meta.write_text(json.dumps(data, indent=4))


if __name__ == "__main__":
    sys.exit(main())
