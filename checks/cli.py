"""``python -m checks``: check configs, list and explain rules, run the bundled examples."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from checks.config import Environment
from checks.errors import InputError
from checks.parser import build_parser, split_command

if TYPE_CHECKING:
    from checks.engine import Finding
    from checks.loaders.common import Request
    from checks.report import Report


def main(argv: Sequence[str] | None = None) -> int:
    words, command = split_command(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(words)
    if command is not None:
        if args.command_line is not None:
            print("error: python -m checks: give the launch command once: --command or after --", file=sys.stderr)
            return 2
        args.command_line = command
    try:
        if args.command == "check":
            return _check(args)
        if args.command == "rules":
            return _rules(args.format)
        if args.command == "explain":
            return _explain(args.rule_ids)
        if args.command == "lint":
            return _lint(args)
        if args.command == "examples":
            from checks.demo import run_examples

            return run_examples(args.format)
        if args.command == "plan":
            return _plan(args)
        if args.command == "probe":
            from checks.plan.probe import probe

            return probe(args.base, args.out, args.elements)
    except InputError as err:
        print(f"error: {err.render()}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0
    raise AssertionError(args.command)


def request(args: argparse.Namespace, files: Sequence[str] | None = None) -> Request:
    """What to read (``files``: instead of the command line's), and the megatron-core version to read it with.

    The version is the user's (``--mcore-version``), else the installed megatron-core's, else the Megatron-LM
    commit the config's framework installs (NeMo-RL and Bridge pin one), else the newest release.
    """
    from dataclasses import replace

    from checks.loaders import Request, detect_flavor
    from checks.versions import framework_pin

    version, env = environment(args)
    argv = args.argv
    if isinstance(argv, list):  # argparse turns "--argv=--" into [] (it drops the "--" separator)
        argv = " ".join(argv) or "--"
    found = Request(tuple(args.files if files is None else files), tuple(args.overrides), argv, args.flavor, version,
                    env,
                    command=args.command_line, cwd=args.cwd, recipe=args.recipe,
                    assume_defaults=args.assume_defaults)
    if env.mcore_source != "default" or not (found.files or found.overrides or found.argv is not None
                                             or found.command is not None):
        return found
    if found.flavor == "auto":  # told once, so that load() does not read the input again
        found = replace(found, flavor=detect_flavor(found))
    pin = framework_pin(found.flavor, env.nemo_rl_version)
    if pin is None:
        return found
    if pin.label is None:
        source = f"default; {pin.describe()}{'' if pin.commit is None else ', which has no profile'}: " \
                 "pass --mcore-version"
        return replace(found, environment=replace(env, mcore_source=source))
    return replace(found, version=pin.label, environment=replace(env, mcore_source=f"pinned by {pin.framework}"))


def environment(args: argparse.Namespace) -> tuple[str, Environment]:
    """The megatron-core version and what else the user told us about the job's environment."""
    from checks.config import Origin, Setting
    from checks.versions import (
        DEFAULT_NEMO_RL_VERSION,
        DEFAULT_VERSION,
        installed_mcore_version,
        parse_te_version,
        resolve_nemo_rl_version,
        resolve_version,
    )

    version, source = DEFAULT_VERSION, "default"
    if args.mcore_version:
        version, source = resolve_version(args.mcore_version), "option"
    elif installed := installed_mcore_version():
        with contextlib.suppress(InputError):  # a release the rules do not know keeps the default
            version, source = resolve_version(installed), f"installed megatron-core {installed}"
    variables = {}
    for index, text in enumerate(args.variables, start=1):
        name, eq, value = text.partition("=")
        if not eq or not name.strip():
            raise InputError(f"--env #{index}", f"{text!r} is not NAME=VALUE")
        variables[name.strip()] = Setting(value, Origin(arg=f"--env #{index}", key=name.strip()))
    return version, Environment(
        te_version=parse_te_version(args.te_version) if args.te_version else None,
        nemo_rl_version=resolve_nemo_rl_version(args.nemo_rl_version) if args.nemo_rl_version
        else DEFAULT_NEMO_RL_VERSION,
        variables=variables, mcore_source=source)


def _check(args: argparse.Namespace) -> int:
    from checks.report import RENDERERS

    if args.all_fixes and not args.emit_overrides:
        raise InputError("--all-fixes", "goes with --emit-overrides (it says which fixes that prints); the findings "
                                        "mark each fix that changes the job beyond offloading")
    from checks.batch import is_batch
    from checks.selection import codes

    args.select, args.ignore = codes(args.select, "--select"), codes(args.ignore, "--ignore")
    if args.merge:
        import os

        if layered := [p for p in args.files if os.path.isdir(p)]:
            raise InputError(layered[0], "--merge layers config files; this is a directory")
    elif is_batch(args.files) or args.configs_only:
        return _check_many(args)
    configs, report = _report(args)
    if args.emit_overrides:
        print(_overrides(configs, report.findings, all_fixes=args.all_fixes))
    elif args.format in ("sarif", "github"):
        from checks.report import Checked, Run, input_name
        from checks.sarif import RENDERERS as RUN_RENDERERS

        print(RUN_RENDERERS[args.format](Run((Checked(input_name(report), report),), strict=args.strict)))
    else:
        print(RENDERERS[args.format](report))
    return report.exit_code


def _report(args: argparse.Namespace, files: Sequence[str] | None = None) -> tuple[list[Any], Report]:
    """One config checked: the command line's inputs (``files`` instead of its files), its canonical configs, and
    the report of the findings the rule selection keeps."""
    from checks.engine import run
    from checks.loaders import load
    from checks.report import Report

    found = request(args, files)
    configs = load(found)
    findings = _selected(run(configs), found.files[0] if found.files else None, args)
    return configs, Report(tuple(findings), configs[0].flavor, found.version, found.files, found.environment,
                           strict=args.strict)


def _selected(findings: Sequence[Finding], path: str | None, args: argparse.Namespace) -> list[Finding]:
    """The findings the run's rule selection reports: --select/--ignore over the pyproject.toml table above
    ``path``; a per-file ignore matches the file a finding is in (else ``path``)."""
    from checks.selection import for_path

    selection = for_path(path, args.select, args.ignore)
    return [f for f in findings
            if selection.allows(f.rule, f.file or path)]


def _check_many(args: argparse.Namespace) -> int:
    """Each config the paths name, checked on its own in this process; one summary, one exit code."""
    from checks.batch import check_all, expand
    from checks.report import render_run_json, render_run_text
    from checks.sarif import RENDERERS as RUN_RENDERERS

    given = [name for name, on in (("--set", args.overrides), ("--argv", args.argv is not None),
                                   ("--command", args.command_line is not None), ("--recipe", args.recipe),
                                   ("--emit-overrides", args.emit_overrides)) if on]
    if given:
        raise InputError(given[0], "goes with one config, not several: check the configs one at a time, or layer "
                                   "the files into one with --merge")
    files, skipped = expand(args.files, configs_only=args.configs_only)

    result = check_all(files, lambda path: _report(args, (path,))[1], skipped, strict=args.strict)
    if args.format == "text":
        print(render_run_text(result, verbose=args.verbose))
    else:
        print({"json": render_run_json, **RUN_RENDERERS}[args.format](result))
    return result.exit_code


def _overrides(configs: Sequence[object], findings: Sequence[object], *, all_fixes: bool = False) -> str:
    """The findings' patches as the input writes them: each complete patch whole, in finding order, a key once.

    A patch that does not fix its finding alone (``partial``) is a comment saying what else it needs. Patches
    that disagree on a key (CFG011) are comments too, naming the rules and their values: neither is printed as
    an override, nor any other key of those patches, which are meant to be applied whole. A patch that changes
    the job beyond offloading (not ``safe``, checks/fixes.py) is a comment naming its rule and what it changes,
    unless ``all_fixes`` (``--all-fixes``): the user decides those.
    """
    from checks.context import disagreements, proposals
    from checks.engine import Finding
    from checks.fixes import describe

    spelling = configs[0].spelling  # type: ignore[attr-defined]
    patched = [f for f in findings if isinstance(f, Finding) and f.patch]
    complete = [f for f in patched if not f.partial]
    conflicts = disagreements(pair for f in complete for pair in proposals(f.rule, {}, f.patch or {}, spelling))
    lines: list[str] = []
    seen: set[str] = set()
    noted: set[str] = set()
    for finding in patched:
        patch = finding.patch or {}
        clash = [key for key in patch if key in conflicts]
        if finding.partial:
            lines.append(f"# partial fix of {finding.rule}, not applied: {'; '.join(spelling.override_lines(patch))}. "
                         f"{finding.partial}")
        elif clash:
            for key in clash:
                if key not in noted:
                    noted.add(key)
                    listed = "; ".join(f"{p.rule}: {' '.join(spelling.override_lines({key: p.value}))}"
                                       for p in conflicts[key])
                    lines.append(f"# conflict (CFG011) on {key}, choose one: {listed}")
        elif not finding.safe and not all_fixes:
            lines.append(f"# left out (unsafe: {describe(finding.unsafe_paths)}) {finding.rule}: "
                         f"{'; '.join(line.removeprefix('# ') for line in spelling.override_lines(patch))}")
        else:
            for key, value in patch.items():
                if key not in seen:
                    seen.add(key)
                    lines += spelling.override_lines({key: value})
    if any(line.startswith("# left out") for line in lines):
        lines.append("# --all-fixes prints the fixes left out")
    return "\n".join(lines)


def _rules(fmt: str) -> int:
    from checks.catalogue import rule_json, rules_text
    from checks.rules import ALL_RULES

    if fmt == "json":
        print(json.dumps([rule_json(r) for r in ALL_RULES], indent=2))
    elif fmt == "markdown":
        from checks.docs import rules_markdown

        sys.stdout.write(rules_markdown())
    elif fmt == "parameters":
        from checks.catalogue import parameters_markdown

        sys.stdout.write(parameters_markdown())
    else:
        print(rules_text())
    return 0


def _explain(rule_ids: Sequence[str]) -> int:
    from checks.docs import explain

    texts = []
    for rule_id in rule_ids:
        try:
            texts.append(explain(rule_id))
        except ValueError as err:
            print(f"error: {err}; list them with python -m checks rules", file=sys.stderr)
            return 2
    print("\n\n".join(texts))
    return 0


def _lint(args: argparse.Namespace) -> int:
    from pathlib import Path

    from checks.lint import lint
    from checks.report import LINT_RENDERERS, LintReport

    if args.root is not None:
        root = Path(args.root)
    elif Path("SKILL.md").is_file():
        root = Path(".")
    else:
        root = Path(__file__).resolve().parent.parent
    report = LintReport(tuple(lint(root)), str(root), strict=args.strict)
    print(LINT_RENDERERS[args.format](report))
    return report.exit_code


def _plan(args: argparse.Namespace) -> int:
    """Parse the plan's inputs and print what ``checks/plan/job.py`` plans."""
    from checks.loaders import load
    from checks.plan import render
    from checks.plan.job import Dimensions, budget_for, plan_configs, plan_preset, presets

    configured = bool(args.files or args.argv or args.overrides or args.command_line or args.recipe)
    if not (args.preset or configured):
        raise InputError("plan", "give a config (FILE, --set, --argv), --preset NAME, or both (the preset then "
                                 "supplies the model when the config does not state its dimensions)")
    budget = budget_for(args.hardware, args.profile, args.gpu_memory_gib, args.headroom, args.mfu)
    preset, per_target = presets(args.preset)
    dims = Dimensions(args.gpus, args.seq_length, args.micro_batch_size, args.global_batch_size)
    if not configured:
        if preset is None:
            raise InputError("--preset", "TARGET=NAME names a model of a config; give a config, or --preset NAME")
        version, _ = environment(args)  # the megatron-core version a config would be read in (--mcore-version)
        result = plan_preset(preset, dims, budget, version)
    else:
        where = args.files[0] if args.files else "--command" if args.command_line else \
            f"--recipe {args.recipe}" if args.recipe else "--argv" if args.argv else "--set"
        # Bare --set overrides are no config file: over a preset they change the preset's job, whose training
        # settings fill what they leave unsaid (checks/plan/setup.py); a file or command states its own.
        result = plan_configs(load(request(args)), preset, per_target, dims, budget, where,
                              overrides_only=where == "--set")
    if args.plot:  # first: a plot that cannot be drawn is an error, and an error prints no plan
        render.plot_all(result, args.plot)
    print(render.render_json_all(result) if args.format == "json" else render.render_text_all(result))
    return result.exit_code
