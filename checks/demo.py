"""``python -m checks examples``: check every bundled example config against its expected findings.

The main job on a bundled default: it shows what the checker says about real
configs in each format, and fails when any example's findings differ from the
rule ids its manifest entry expects.
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from checks.config import Environment
from checks.engine import Finding, run
from checks.errors import InputError
from checks.jsonio import dumps
from checks.loaders import Request, load
from checks.report import Report, finding_json, render_text
from checks.versions import DEFAULT_NEMO_RL_VERSION, DEFAULT_VERSION, resolve_nemo_rl_version, resolve_version

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "configs"
MANIFEST = EXAMPLES / "manifest.yaml"


@dataclass(frozen=True)
class Entry:
    """One manifest entry: an input, how to check it, and the rule ids it must produce."""

    name: str
    about: str
    files: tuple[str, ...]
    overrides: tuple[str, ...]
    argv: str | None
    version: str
    expect: tuple[str, ...]
    nemo_rl_version: str = DEFAULT_NEMO_RL_VERSION
    recipe: str | None = None  # --recipe: the Bridge recipe an override file goes with
    launch: str | None = None  # a launch command line (--command)
    assume_defaults: bool = False
    te_version: str | None = None

    def request(self) -> Request:
        from checks.versions import parse_te_version

        te = parse_te_version(self.te_version) if self.te_version else None
        return Request(tuple(_display_path(EXAMPLES / f) for f in self.files), self.overrides, self.argv, "auto",
                       self.version, Environment(mcore_source="option", nemo_rl_version=self.nemo_rl_version,
                                                 te_version=te),
                       command=self.launch, recipe=self.recipe, assume_defaults=self.assume_defaults)

    def command(self) -> str:
        words = ["python", "-m", "checks", "check", *(f"examples/configs/{f}" for f in self.files)]
        if self.recipe is not None:
            words += ["--recipe", self.recipe]
        for text in self.overrides:
            words += ["--set", text]
        if self.argv is not None:
            words.append(f"--argv={self.argv}")  # "=" so argparse never mistakes the flags for its own
        if self.assume_defaults:
            words.append("--assume-defaults")
        if self.te_version is not None:
            words += ["--te-version", self.te_version]
        if self.version != DEFAULT_VERSION:
            words += ["--mcore-version", self.version]
        if self.nemo_rl_version != DEFAULT_NEMO_RL_VERSION:
            words += ["--nemo-rl-version", self.nemo_rl_version]
        line = " ".join(shlex.quote(w) for w in words)
        return line if self.launch is None else f"{line} -- {self.launch}"


def _display_path(path: Path) -> str:
    """Relative to the working directory when the examples are below it, as a user would type it."""
    relative = os.path.relpath(path)
    return path.as_posix() if relative.startswith("..") else relative


def entries() -> list[Entry]:
    if not MANIFEST.is_file():
        raise InputError(str(MANIFEST), "the bundled examples are missing; run from the skill's directory")
    raw: list[dict[str, Any]] = yaml.safe_load(MANIFEST.read_text(encoding="utf-8"))
    return [Entry(e["name"], e.get("about", ""), tuple(e.get("files", ())), tuple(e.get("set", ())), e.get("argv"),
                  resolve_version(str(e.get("mcore_version", DEFAULT_VERSION))), tuple(e.get("expect", ())),
                  resolve_nemo_rl_version(str(e.get("nemo_rl_version", DEFAULT_NEMO_RL_VERSION))),
                  e.get("recipe"), e.get("command"), bool(e.get("assume_defaults", False)),
                  str(e["te_version"]) if "te_version" in e else None)
            for e in raw]


def check_entry(entry: Entry) -> tuple[Report, list[Finding]]:
    request = entry.request()
    configs = load(request)
    findings = run(configs)
    # the request's environment, so the summary names the NeMo-RL release the findings were checked against
    return Report(tuple(findings), configs[0].flavor, entry.version, entry.files or configs[0].inputs,
                  request.environment), findings


def run_examples(fmt: str) -> int:
    results = []
    for entry in entries():
        report, findings = check_entry(entry)
        got = sorted(set(f.rule for f in findings))
        results.append((entry, report, findings, got, got == sorted(entry.expect)))
    if fmt == "json":
        # strict JSON, as check's: a patch's non-finite number is written as a string
        print(dumps([{"name": e.name, "command": e.command(), "expected": sorted(e.expect), "got": got,
                      "ok": ok, "findings": [finding_json(f) for f in findings]}
                     for e, _, findings, got, ok in results]))
    else:
        for entry, report, _, _, ok in results:
            print(f"== {entry.name}: {entry.about}")
            print(f"$ {entry.command()}")
            print(render_text(report))
            verdict = "as expected" if ok else f"MISMATCH: expected {sorted(entry.expect) or 'no findings'}"
            print(f"-> {verdict}\n")
        failed = [e.name for e, *_, ok in results if not ok]
        print(f"{len(results) - len(failed)} of {len(results)} examples gave the expected findings"
              + (f"; mismatched: {', '.join(failed)}" if failed else ""))
    return 0 if all(ok for *_, ok in results) else 1
