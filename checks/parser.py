"""The command line of ``python -m checks``: its parser and how a launch command after ``--`` is split off.

Kept apart from ``checks/cli.py`` (which runs the commands) so that code which only needs to know whether the
CLI accepts a command line, such as the eval linter (``checks/lint/evals.py``), imports no command code.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import NoReturn

from checks import __version__

DESCRIPTION = "``python -m checks``: check configs, list and explain rules, run the bundled examples."
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


def build_parser() -> argparse.ArgumentParser:
    """The command line of ``python -m checks``, every subcommand and option (nothing is run)."""
    parser = _Parser(prog="python -m checks", description=DESCRIPTION, epilog=_EPILOG,
                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    check = sub.add_parser("check", help="check a config's CPU-offloading settings", epilog=_EPILOG,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    check.add_argument("files", nargs="*", metavar="PATH",
                       help="config files, directories or globs (Bridge YAML, NeMo-RL YAML, a Megatron-LM launch "
                            "script or functional-test YAML): each config is checked on its own, with one summary; "
                            "in a directory, what is not a config is skipped (--verbose lists it)")
    check.add_argument("--merge", action="store_true",
                       help="layer the FILEs in order into one config, as Bridge and Hydra layer a recipe dump and "
                            "its override files, and check that")
    check.add_argument("--configs-only", action="store_true",
                       help="skip a named file that is not a config, as a directory's are skipped (for pre-commit, "
                            "which names every staged YAML file)")
    check.add_argument("--verbose", action="store_true",
                       help="with several configs, list each one checked and each file skipped, with why")
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
    check.add_argument("--select", action="append", default=[], metavar="ID[,ID...]",
                       help="report only these rules, by id or prefix (OPT, ACT001); replaces the select of the "
                            "[tool.megatron-offload-check] table of the nearest pyproject.toml")
    check.add_argument("--ignore", action="append", default=[], metavar="ID[,ID...]",
                       help="never report these rules, by id or prefix; adds to the table's ignore")
    check.add_argument("--format", default="text", choices=("text", "json", "sarif", "github"),
                       help="sarif: SARIF 2.1.0 for code scanning and editors; github: workflow annotations")
    check.add_argument("--strict", action="store_true", help="exit 1 on warnings too")
    check.add_argument("--emit-overrides", action="store_true",
                       help="print the fixes as KEY=VALUE overrides (or Megatron-LM flags) instead of findings: "
                            "those that change only offload settings; the others are # comments")
    check.add_argument("--all-fixes", action="store_true",
                       help="with --emit-overrides, also print the fixes that change the job beyond offloading "
                            "(its layout, parallelism, recompute or precision)")

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
    plan.add_argument("--mfu", type=float, default=None,
                      help="compute efficiency for the step-time estimate, a share of the GPU's dense bf16 peak "
                      "(default: the published one for the model family, hardware and precision, "
                      "checks/data/efficiency.json)")
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


def split_command(argv: Sequence[str]) -> tuple[list[str], str | None]:
    """``check [options] -- torchrun ...``: the words after the first bare ``--`` are a launch command."""
    import shlex

    words = list(argv)
    if len(words) > 1 and words[0] in ("check", "plan") and "--" in words:
        cut = words.index("--")
        return words[:cut], shlex.join(words[cut + 1:])
    return words, None
