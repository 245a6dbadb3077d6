"""``python -m checks``: check configs, list and explain rules, run the bundled examples."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, NoReturn

from checks import __version__
from checks.config import Environment
from checks.errors import InputError

if TYPE_CHECKING:
    from collections.abc import Mapping

    from checks.config import CanonicalConfig
    from checks.loaders.common import Request
    from checks.plan.presets import Preset
    from checks.plan.recommend import Budget
    from checks.plan.render import Entry, Planned
    from checks.plan.setup import Job

_EPILOG = """exit codes: 0 no error findings; 1 error findings (or warnings with --strict);
2 usage error or unreadable input.
The checker reads configs as data: it never imports or runs anything a config names."""


class _Once(argparse.Action):
    """An option given once: a second would silently replace the first (``--argv``)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: object,
                 option_string: str | None = None) -> None:
        if getattr(namespace, self.dest, None) is not None:
            parser.error(f"{option_string} given twice; give all of its flags in one {option_string} (a second "
                         "would replace the first)")
        setattr(namespace, self.dest, values)


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line on stderr (exit 2), like every other input error."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"error: {self.prog}: {message} (see {self.prog} --help)\n")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="python -m checks", description=__doc__, epilog=_EPILOG,
                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    check = sub.add_parser("check", help="check a config's CPU-offloading settings", epilog=_EPILOG,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    check.add_argument("files", nargs="*", metavar="FILE",
                       help="config files, applied in order (Bridge YAML, NeMo-RL YAML, a Megatron-LM launch "
                            "script or functional-test YAML)")
    check.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                       help="a Hydra override applied after the files (repeatable; + and ++ prefixes as in Hydra)")
    check.add_argument("--argv", action=_Once, help="Megatron-LM flags as one string, appended after any script; write "
                                      "--argv=\"--flag ...\" so the flags are not read as the checker's own")
    _launch_options(check)
    check.add_argument("--flavor", default="auto", choices=("auto", "bridge", "nemo-rl", "megatron-lm"),
                       help="input format (default: detect)")
    check.add_argument("--mcore-version", default=None, metavar="VERSION",
                       help="megatron-core version the job runs, e.g. 0.16.1, 0.19.2, main, or a profiled "
                            "commit such as main@14346b65 (default: the installed megatron-core's, read from its "
                            "package metadata; else the Megatron-LM commit the config's framework installs; else "
                            "the newest release the rules know)")
    check.add_argument("--te-version", metavar="VERSION",
                       help="Transformer Engine version of the job, e.g. 2.10, or none when it is not "
                            "installed (default: unknown; rules that depend on it say so)")
    check.add_argument("--nemo-rl-version", default=None, metavar="VERSION",
                       help="NeMo-RL release the config is for: 0.4 to 0.7, or main (default: main, "
                            "NVIDIA-NeMo/RL@7ea279ab)")
    check.add_argument("--env", dest="variables", action="append", default=[], metavar="NAME=VALUE",
                       help="an environment variable the job is launched with (repeatable), e.g. "
                            "NVTE_CPU_OFFLOAD_V1=1")
    check.add_argument("--format", default="text", choices=("text", "json"))
    check.add_argument("--strict", action="store_true", help="exit 1 on warnings too")
    check.add_argument("--emit-overrides", action="store_true",
                       help="print the fixes as KEY=VALUE overrides (or Megatron-LM flags) instead of findings")

    rules = sub.add_parser("rules", help="list every rule")
    rules.add_argument("--format", default="text", choices=("text", "json", "markdown", "parameters"),
                       help="parameters: the offload fields of every megatron-core version, as markdown")

    explain = sub.add_parser("explain", help="show a rule's documentation, versions, anchors and examples")
    explain.add_argument("rule_ids", nargs="+", metavar="ID")

    lint = sub.add_parser("lint", help="check the skill itself: SKILL.md, card.yaml, CHANGELOG.md, evals/evals.json",
                          epilog=_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    lint.add_argument("root", nargs="?", metavar="DIR",
                      help="the skill's directory (default: the current directory when it has a SKILL.md, else "
                           "the directory this package was installed with)")
    lint.add_argument("--format", default="text", choices=("text", "json"))
    lint.add_argument("--strict", action="store_true", help="exit 1 on warnings too")

    examples = sub.add_parser("examples", help="check every bundled example config against its expected findings")
    examples.add_argument("--format", default="text", choices=("text", "json"))

    plan = sub.add_parser("plan", help="memory per GPU and per node, each offload mechanism's effect and cost, "
                          "and what to set", epilog=_PLAN_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    plan.add_argument("files", nargs="*", metavar="FILE", help="a config, as for check (or use --preset)")
    plan.add_argument("--preset", action="append", default=[], metavar="[TARGET=]NAME",
                      help="a model by name: " + ", ".join(_preset_names()) + ", or a Hugging Face id the model "
                      "catalogue holds (e.g. Qwen/Qwen3-8B); with a config, the model "
                      "when the config does not state its dimensions (NAME: for the first trained model and "
                      "those with its model_name; TARGET=NAME: for one NeMo-RL model, e.g. teacher=NAME)")
    plan.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    plan.add_argument("--argv", action=_Once, help="Megatron-LM flags as one string (as for check)")
    _launch_options(plan)
    plan.add_argument("--flavor", default="auto", choices=("auto", "bridge", "nemo-rl", "megatron-lm"))
    plan.add_argument("--mcore-version", default=None, metavar="VERSION")
    plan.add_argument("--nemo-rl-version", default=None, metavar="VERSION")
    plan.add_argument("--gpus", type=_positive_int, help="GPUs the job runs on (sets the data-parallel size)")
    plan.add_argument("--seq-length", type=_positive_int)
    plan.add_argument("--micro-batch-size", type=_positive_int)
    plan.add_argument("--global-batch-size", type=_positive_int)
    plan.add_argument("--hardware", default="h100-sxm", help="a node type: " + ", ".join(_hardware_names())
                      + " (default: %(default)s)")
    plan.add_argument("--profile", help="a node profile written by python -m checks probe (replaces --hardware)")
    plan.add_argument("--gpu-memory-gib", type=float, help="GPU memory to plan for, instead of the hardware's")
    plan.add_argument("--headroom", type=float, default=0.1,
                      help="share of GPU memory kept free (default: %(default)s)")
    plan.add_argument("--mfu", type=float, default=0.4, help="model-FLOPs utilisation for the step-time "
                      "estimate (default: %(default)s)")
    plan.add_argument("--format", default="text", choices=("text", "json"))
    plan.add_argument("--plot", metavar="FILE.png", help="plot peak memory against the optimizer offload fraction")
    plan.set_defaults(variables=[], te_version=None)  # what check's environment options would give

    probe = sub.add_parser("probe", help="measure this node (host link, host AdamW, host memory) into a profile "
                           "that plan --profile reads; imports torch")
    probe.add_argument("--base", default="h100-sxm", help="hardware entry for what is not measured (default: "
                       "%(default)s)")
    probe.add_argument("--out", default="node_profile.json")
    probe.add_argument("--elements", type=_positive_int, default=16_000_000,
                       help="elements per host AdamW measurement (default: %(default)s)")
    return parser


def _launch_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--command", dest="command_line", metavar="COMMAND",
                        help="a launch command as typed, e.g. \"torchrun ... run_recipe.py --recipe NAME KEY=VALUE\" "
                             "(or give the command after --); a FILE ending in .sh is read the same way")
    parser.add_argument("--recipe", help="the Megatron Bridge recipe the config or overrides go with (the "
                                         "function name run_recipe.py --recipe takes)")
    parser.add_argument("--cwd", metavar="DIR", help="the directory the launch runs in, where its relative "
                                                     "--config path is (default: the script's cd, else here)")
    parser.add_argument("--assume-defaults", action="store_true",
                        help="read what no input states as its dataclass default (a Bridge override file built "
                             "without a recipe); by default such values are unknown and the rules that need them "
                             "say so (CFG010)")


_PLAN_EPILOG = """exit codes: 0 the job fits as configured; 1 it does not (the recommendation says what
would); 2 usage error or unreadable input.
Figures are estimates from the model in checks/plan/ (see reference/memory-model.md)."""


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if not 1 <= value <= _MAX_COUNT:
        raise argparse.ArgumentTypeError(f"expected a positive integer up to {_MAX_COUNT:,}, got {text!r}")
    return value


_MAX_COUNT = 10_000_000  # GPUs, sequence and batch sizes: far beyond any job, small enough to plan quickly


def _preset_names() -> list[str]:
    from checks.plan.presets import PRESETS

    return list(PRESETS)


def _hardware_names() -> list[str]:
    from checks.plan.hardware import HARDWARE

    return list(HARDWARE)


def _split_command(argv: Sequence[str]) -> tuple[list[str], str | None]:
    """``check [options] -- torchrun ...``: the words after the first bare ``--`` are a launch command."""
    import shlex

    words = list(argv)
    if len(words) > 1 and words[0] in ("check", "plan") and "--" in words:
        cut = words.index("--")
        return words[:cut], shlex.join(words[cut + 1:])
    return words, None


def main(argv: Sequence[str] | None = None) -> int:
    words, command = _split_command(sys.argv[1:] if argv is None else argv)
    args = _parser().parse_args(words)
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


def request(args: argparse.Namespace) -> Request:
    """What to read, and the megatron-core version to read it with.

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
    found = Request(tuple(args.files), tuple(args.overrides), argv, args.flavor, version, env,
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
    from checks.engine import run
    from checks.loaders import load
    from checks.report import RENDERERS, Report

    found = request(args)
    configs = load(found)
    findings = run(configs)
    report = Report(tuple(findings), configs[0].flavor, found.version, found.files, found.environment,
                    strict=args.strict)
    if args.emit_overrides:
        print(_overrides(configs, findings))
    else:
        print(RENDERERS[args.format](report))
    return report.exit_code


def _overrides(configs: Sequence[object], findings: Sequence[object]) -> str:
    """The findings' patches as the input writes them: each complete patch whole, in finding order, a key once.

    A patch that does not fix its finding alone (``partial``) is a comment saying what else it needs. Patches
    that disagree on a key (CFG011) are comments too, naming the rules and their values: neither is printed as
    an override, nor any other key of those patches, which are meant to be applied whole.
    """
    from checks.context import disagreements, proposals
    from checks.engine import Finding

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
        else:
            for key, value in patch.items():
                if key not in seen:
                    seen.add(key)
                    lines += spelling.override_lines({key: value})
    return "\n".join(lines)


def _rules(fmt: str) -> int:
    from checks.catalogue import rule_json, rules_markdown, rules_text
    from checks.rules import ALL_RULES

    if fmt == "json":
        print(json.dumps([rule_json(r) for r in ALL_RULES], indent=2))
    elif fmt == "markdown":
        sys.stdout.write(rules_markdown())
    elif fmt == "parameters":
        from checks.catalogue import parameters_markdown

        sys.stdout.write(parameters_markdown())
    else:
        print(rules_text())
    return 0


def _explain(rule_ids: Sequence[str]) -> int:
    from checks.catalogue import explain_text
    from checks.lint import BY_ID as LINT_BY_ID
    from checks.lint.docs import explain_lint_text
    from checks.rules import get

    texts = []
    for rule_id in rule_ids:
        if rule_id.upper() in LINT_BY_ID:
            texts.append(explain_lint_text(LINT_BY_ID[rule_id.upper()]))
            continue
        try:
            texts.append(explain_text(get(rule_id)))
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
    from dataclasses import replace

    from checks.loaders import load
    from checks.plan import render
    from checks.plan.hardware import HARDWARE, load_profile
    from checks.plan.recommend import Budget
    from checks.plan.setup import from_preset

    if not (args.preset or args.files or args.argv or args.overrides or args.command_line or args.recipe):
        raise InputError("plan", "give a config (FILE, --set, --argv), --preset NAME, or both (the preset then "
                                 "supplies the model when the config does not state its dimensions)")
    if not 0 <= args.headroom < 1 or not 0 < args.mfu <= 1:
        raise InputError("plan", "--headroom must be in [0, 1) and --mfu in (0, 1]")
    if args.profile:
        hardware = load_profile(args.profile)
    elif args.hardware in HARDWARE:
        hardware = HARDWARE[args.hardware]
    else:
        raise InputError("--hardware", f"unknown hardware {args.hardware!r}; known: {', '.join(HARDWARE)}")
    if args.gpu_memory_gib is not None:
        if not 0 < args.gpu_memory_gib < 2**20:  # NaN fails both comparisons
            raise InputError("--gpu-memory-gib", f"must be a positive number of GiB below {2**20}, got "
                                                 f"{args.gpu_memory_gib}")
        hardware = replace(hardware, gpu_memory_bytes=int(args.gpu_memory_gib * 2**30),
                           name=f"{hardware.name} with {args.gpu_memory_gib:g} GiB")
    budget = Budget(hardware, args.headroom, mfu=args.mfu)
    preset, per_target = _presets(args.preset)
    if not (args.files or args.argv or args.overrides or args.command_line or args.recipe):
        if preset is None:
            raise InputError("--preset", "TARGET=NAME names a model of a config; give a config, or --preset NAME")
        entries: list[Entry] = [_planned(_adjust(from_preset(preset), args), budget)]
    else:
        entries = _plan_models(load(request(args)), preset, per_target, args, budget)
    if args.plot:  # first: a plot that cannot be drawn is an error, and an error prints no plan
        render.plot_all(entries, args.plot)
    print(render.render_json_all(entries) if args.format == "json" else render.render_text_all(entries))
    return render.exit_code_all(entries)


def _presets(given: Sequence[str]) -> tuple[Preset | None, dict[str, Preset]]:
    """``--preset NAME`` and ``--preset TARGET=NAME`` (repeatable): the bare one, and one per model."""
    from checks.plan.presets import PRESETS, catalogue_preset, preset_for_model_name

    bare: list[Preset] = []
    per_target: dict[str, Preset] = {}
    for text in given:
        target, eq, name = text.rpartition("=") if "=" in text else ("", "", text)
        found = PRESETS.get(name) or (preset_for_model_name(name) if "/" in name else None)
        if found is None and "/" in name:  # a Hugging Face id: the model catalogue's row
            built = catalogue_preset(name)
            if isinstance(built, str):
                raise InputError("--preset", built)
            found = built
        if found is None:
            raise InputError("--preset", f"unknown preset {name!r}; known: {', '.join(PRESETS)}, or a Hugging Face "
                                         "id the model catalogue holds")
        if not eq:
            bare.append(found)
        elif not target or target in per_target:
            raise InputError("--preset", f"{text!r}: give each model once, as TARGET=NAME")
        else:
            per_target[target] = found
    if len(bare) > 1:
        raise InputError("--preset", "give one --preset NAME; name the other models with --preset TARGET=NAME")
    return (bare[0] if bare else None), per_target


def _plan_models(configs: Sequence[CanonicalConfig], preset: Preset | None, per_target: Mapping[str, Preset],
                 args: argparse.Namespace, budget: Budget) -> list[Entry]:
    """A plan per model: trained ones in full, forward-only and unbuilt ones as a note. A trained model the
    planner cannot size is an input error naming every such model, never a model left out."""
    from checks.context import Context
    from checks.engine import run
    from checks.plan.render import Unplanned
    from checks.plan.setup import Job, from_config

    where = args.files[0] if args.files else "--command" if args.command_line else \
        f"--recipe {args.recipe}" if args.recipe else "--argv" if args.argv else "--set"
    # The planner plans what can run: a config its framework or megatron-core refuses has no memory to plan.
    errors = sorted({f.rule for f in run(configs) if f.severity == "error"})
    if errors:
        raise InputError(where, f"the job would not start: {', '.join(errors)} (python -m checks check shows them "
                                "and their fixes); plan it once they are fixed")
    labels = [cfg.target for cfg in configs if cfg.target]
    if unknown := sorted(set(per_target) - set(labels)):
        raise InputError("--preset", f"no model {unknown[0]!r} in this config; its models: "
                                     f"{', '.join(labels) or 'one, without a target'}")
    contexts = [Context(cfg) for cfg in configs]
    # A bare --preset is the first trained model, and every model with its model_name (PPO's value model usually
    # shares the policy's); another checkpoint is another model, sized only by its own TARGET=NAME.
    trained = [ctx for ctx in contexts if ctx.cfg.role == "train"]
    first_name = trained[0].get("run.model_name") if trained else None
    entries: list[Entry] = []
    unsized: list[str] = []
    for ctx in contexts:
        target, role, name = ctx.cfg.target, ctx.cfg.role, ctx.get("run.model_name")
        if role == "unused":
            entries.append(Unplanned(target, "not_built", ctx.cfg.role_reason))
            continue
        chosen = per_target.get(target or "") or (preset if name is None or name == first_name else None)
        found = from_config(ctx, preset=chosen)
        if role == "inference":
            why = "" if isinstance(found, Job) else found.split("; add --preset")[0] + f"; add --preset {target}=NAME"
            entries.append(Unplanned(target, "inference_only", ctx.cfg.role_reason,
                                     job=found if isinstance(found, Job) else None, unsized=why))
        elif isinstance(found, str):
            unsized.append(found if len(configs) == 1 else f"[{target}] {found.split('; add --preset')[0]}")
        else:
            entries.append(_planned(_adjust(found, args), budget))
    if unsized:
        from checks.plan.presets import PRESETS

        more = "" if len(configs) == 1 else f"; add --preset NAME or TARGET=NAME (known: {', '.join(PRESETS)})"
        raise InputError(where, "; ".join(unsized) + more)
    if all(isinstance(entry, Unplanned) for entry in entries):
        raise InputError(where, "nothing to plan: " + "; ".join(
            f"[{e.target}] {e.reason}" for e in entries if isinstance(e, Unplanned)))
    return entries


def _planned(job: Job, budget: Budget) -> Planned:
    from checks.plan.recommend import recommend

    try:
        return job, recommend(job.training, budget)
    except ValueError as err:  # a layout the model cannot split (e.g. layers over pipeline stages)
        raise InputError("plan", str(err) if job.target is None else f"[{job.target}] {err}") from None


def _adjust(job: Job, args: argparse.Namespace) -> Job:
    """Command-line training dimensions over the config's or the preset's."""
    from dataclasses import replace

    t = job.training
    notes = list(job.assumptions)
    data_parallel = t.data_parallel
    if args.gpus:
        per_replica = t.par.tensor * t.par.pipeline * t.context_parallel
        if args.gpus % per_replica:
            model = "" if job.target is None else f" ([{job.target}])"
            raise InputError("--gpus", f"{args.gpus} GPUs are not a multiple of TP x PP x CP = {per_replica}{model}")
        data_parallel = args.gpus // per_replica
        notes = [n for n in notes if "data-parallel size" not in n]
    micro = args.micro_batch_size or t.micro_batch_size
    global_batch = args.global_batch_size or t.global_batch_size
    if args.gpus and not args.global_batch_size and job.source.startswith("preset"):
        global_batch = data_parallel * micro * 8
    training = replace(t, data_parallel=data_parallel, seq_length=args.seq_length or t.seq_length,
                       micro_batch_size=micro, global_batch_size=global_batch)
    return replace(job, training=training, assumptions=tuple(notes))
