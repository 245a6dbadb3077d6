"""Launch commands: what a shell script or a pasted command line starts, as the job's own scripts read it.

A launch is found behind the wrappers people put in front of it (``python``, ``python -m``, ``uv run``,
``torchrun`` / ``python -m torch.distributed.run``, ``srun``, ``bash -c``, ``env``, ``exec``), and read with the
argument handling of the script it starts:

* Megatron Bridge ``scripts/training/run_recipe.py``: ``--recipe`` / ``--model`` + ``--mode``, ``--dataset``, the
  convenience flags turned into overrides, then the trailing ``KEY=VALUE`` overrides, which win
  (NVIDIA-NeMo/Megatron-Bridge@067f987d:scripts/training/run_recipe.py:161-274, 439-446); ``train.sh`` and
  ``setup_experiment.py`` forward what their own parser does not own (setup_experiment.py:46-140, 302-333).
* NeMo-RL ``examples/run_*.py``: ``--config FILE`` and every other word an override
  (NVIDIA-NeMo/RL@7ea279ab:examples/run_grpo.py:57-92); no ``--config``: the script's own default file.
* Megatron-LM ``pretrain_*.py``: the flags, for :mod:`checks.loaders.megatron_lm`.

The replicas below are argparse parsers built with the same option strings, actions, types, choices and
``allow_abbrev`` as upstream's; ``tests/test_launch.py`` runs upstream's own functions, extracted from the
source, over the same command lines and compares.
"""

from __future__ import annotations

import argparse
import json
import posixpath
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import NamedTuple, NoReturn

from checks.config import Origin, Setting
from checks.errors import InputError
from checks.loaders.mlm_argparse import Word as Token
from checks.loaders.shell import Command, Word, commands

BRIDGE = "NVIDIA-NeMo/Megatron-Bridge@067f987d:"
RUN_RECIPE = f"{BRIDGE}scripts/training/run_recipe.py"
NEMO_RL = "NVIDIA-NeMo/RL@7ea279ab:"
MAX_LAUNCHES = 64  # each is loaded and checked as a job of its own (~10 ms); a sweep's script launches a few

# --- wrappers ---------------------------------------------------------------------------------------------------

# torchrun's options that take a value (torch 2.13 torch/distributed/run.py, get_args_parser); the rest are flags.
# tests/test_launch.py compares this table with the parser torch builds.
_TORCHRUN_VALUES = frozenset({
    "--nnodes", "--nproc-per-node", "--nproc_per_node", "--rdzv-backend", "--rdzv_backend", "--rdzv-endpoint",
    "--rdzv_endpoint", "--rdzv-id", "--rdzv_id", "--rdzv-conf", "--rdzv_conf", "--max-restarts", "--max_restarts",
    "--monitor-interval", "--monitor_interval", "--start-method", "--start_method", "--role", "--log-dir",
    "--log_dir", "-r", "--redirects", "-t", "--tee", "--local-ranks-filter", "--local_ranks_filter",
    "--node-rank", "--node_rank", "--master-addr", "--master_addr", "--master-port", "--master_port",
    "--local-addr", "--local_addr", "--logs-specs", "--logs_specs", "--event-log-handler", "--event_log_handler",
    "--numa-binding", "--numa_binding", "--signals-to-handle", "--signals_to_handle", "--shutdown-timeout",
    "--shutdown_timeout", "--duplicate-stdout-filters",
    "--duplicate_stdout_filters", "--duplicate-stderr-filters", "--duplicate_stderr_filters",
})
_TORCHRUN_MODULE = frozenset({"-m", "--module"})
_TORCHRUN_NO_PYTHON = frozenset({"--no-python", "--no_python"})
_TORCHRUN_MODULES = frozenset({"torch.distributed.run", "torch.distributed.launch"})
# `uv run` options that take a value (uv's CLI reference, docs.astral.sh/uv/reference/cli/#uv-run).
_UV_VALUES = frozenset({
    "--extra", "--no-extra", "--group", "--no-group", "--only-group", "--with", "--with-editable",
    "--with-requirements", "--package", "--python", "-p", "--project", "--directory", "--env-file", "--index",
    "--default-index", "--index-url", "-i", "--extra-index-url", "--find-links", "-f", "--config-file",
    "--cache-dir", "--color", "--index-strategy", "--keyring-provider", "--resolution", "--prerelease",
    "--fork-strategy", "--exclude-newer", "--link-mode", "--reinstall-package", "--upgrade-package", "-P",
    "--refresh-package", "--no-build-package", "--no-binary-package", "--config-setting", "-C",
    "--python-platform", "--no-sources-package", "--exclude-newer-package",
})
# srun options that take a value in their short or unambiguous long form (Slurm's srun(1) manual).
_SRUN_SHORT_VALUES = frozenset("ACDGJLNSTcdeijmnopqrtwx")
_SRUN_LONG_VALUES = frozenset({
    "--account", "--nodes", "--ntasks", "--ntasks-per-node", "--cpus-per-task", "--gpus", "--gpus-per-node",
    "--gpus-per-task", "--gres", "--partition", "--time", "--job-name", "--output", "--error", "--input",
    "--mpi", "--container-image", "--container-mounts", "--container-workdir", "--container-name",
    "--container-env", "--constraint", "--chdir", "--dependency", "--distribution", "--export", "--licenses",
    "--mem", "--mem-per-cpu", "--mem-per-gpu", "--nodelist", "--exclude", "--qos", "--reservation",
    "--cpu-bind", "--gpu-bind", "--kill-on-bad-exit", "--label", "--mail-type", "--mail-user", "--network",
    "--overlap-args", "--het-group", "--switches", "--segment", "--signal", "--tres-per-task", "--wckey",
})
# python's own options that take a value (python(1): -W arg, -X opt, -Q); -m and -c end the options.
_PYTHON_VALUES = frozenset({"-W", "-X", "-Q"})
_PYTHON = re.compile(r"python(\d+(\.\d+)?)?$")


class _Start(NamedTuple):
    """A program start found behind the wrappers: the script (or module) and the words it receives."""

    script: Word
    args: tuple[Word, ...]
    module: bool = False  # `python -m NAME`: script holds the module name
    env: Mapping[str, Word] = {}


class _Unplaceable(Exception):
    def __init__(self, word: Word, why: str) -> None:
        super().__init__(why)
        self.word, self.why = word, why


def _basename(text: str) -> str:
    return posixpath.basename(text)


def _skip_options(words: Sequence[Word], values: frozenset[str], *, short_values: frozenset[str] = frozenset(),
                  stop: frozenset[str] = frozenset()) -> int:
    """Index of the first word that is not an option of the wrapper (or is one of ``stop``)."""
    i = 0
    while i < len(words):
        text = words[i].text
        if text in stop or not text.startswith("-") or text == "-":
            return i
        if text == "--":
            return i + 1
        if text.startswith("--"):
            i += 1 if "=" in text or text not in values else 2
        elif text in values or (len(text) == 2 and text[1] in short_values):
            i += 2
        else:
            i += 1
    return i


def _start(words: Sequence[Word]) -> _Start | list[Command] | None:
    """The program a command starts, behind its wrappers; a ``bash -c`` string gives its own commands;
    None when the command starts no Python program (``echo``, ``mkdir``, ``set``)."""
    env: dict[str, Word] = {}
    words = list(words)
    while words:
        head = _basename(words[0].text)
        rest = words[1:]
        if head in ("exec", "nohup", "time", "command"):
            words = rest
        elif head == "env":
            i = 0
            while i < len(rest) and (rest[i].text.startswith("-") or "=" in rest[i].text):
                if "=" in rest[i].text and not rest[i].text.startswith("-"):
                    name, _, value = rest[i].text.partition("=")
                    env[name] = Word(value, rest[i].line, rest[i].unresolved)
                i += 1 + (rest[i].text in ("-u", "--unset", "-C", "--chdir", "-S", "--split-string"))
            words = rest[i:]
        elif head == "srun":
            words = rest[_skip_options(rest, _SRUN_LONG_VALUES, short_values=_SRUN_SHORT_VALUES):]
        elif head == "uv" and rest and rest[0].text == "run":
            after = rest[1:]
            i = _skip_options(after, _UV_VALUES, stop=frozenset({"-m", "--module"}))
            if i < len(after) and after[i].text in ("-m", "--module"):
                return _module(after[i + 1:], after[i], env)
            words = after[i:]
        elif head in ("bash", "sh") and len(rest) >= 2 and rest[0].text == "-c":
            return commands(rest[1].text, "bash -c", first_line=rest[1].line)
        elif head in ("bash", "sh") and rest and rest[0].text.endswith(".sh"):  # bash train.sh ARGS
            words = rest
        elif head == "train.sh":  # Bridge's scripts/training/train.sh execs setup_experiment.py "$@"
            return _Start(words[0], tuple(rest), env=env)
        elif _PYTHON.fullmatch(head):
            i = _skip_options(rest, _PYTHON_VALUES, stop=frozenset({"-m", "-c"}))
            if i < len(rest) and rest[i].text == "-c":
                raise _Unplaceable(rest[i], "python -c runs inline code, which the checker cannot read")
            if i < len(rest) and rest[i].text == "-m":
                return _module(rest[i + 1:], rest[i], env)
            if i >= len(rest):
                return None
            return _Start(rest[i], tuple(rest[i + 1:]), env=env)
        elif head == "torchrun":
            return _torchrun(rest, env)
        elif head.endswith(".py"):
            return _Start(words[0], tuple(rest), env=env)
        else:
            return None
    return None


def _module(rest: Sequence[Word], flag: Word, env: dict[str, Word]) -> _Start | list[Command] | None:
    if not rest:
        raise _Unplaceable(flag, "-m names no module")
    if rest[0].text in _TORCHRUN_MODULES:
        return _torchrun(rest[1:], env)
    return _Start(rest[0], tuple(rest[1:]), module=True, env=env)


def _torchrun(rest: Sequence[Word], env: dict[str, Word]) -> _Start | list[Command] | None:
    i = _skip_options(rest, _TORCHRUN_VALUES, stop=_TORCHRUN_MODULE | _TORCHRUN_NO_PYTHON)
    if i < len(rest) and rest[i].text in _TORCHRUN_MODULE:
        return _module(rest[i + 1:], rest[i], env)
    if i < len(rest) and rest[i].text in _TORCHRUN_NO_PYTHON:
        return _start(rest[i + 1:])
    if i >= len(rest):
        return None
    return _Start(rest[i], tuple(rest[i + 1:]), env=env)


# --- the launch -------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Launch:
    """One training launch, read the way its script reads its arguments."""

    flavor: str  # bridge | nemo-rl | megatron-lm
    where: str  # the script (or "--command") and line, for messages
    file: str | None  # the script the command is in, for origins
    line: int
    script: str  # the training script as written
    files: tuple[str, ...] = ()  # NeMo-RL: the config file, as the command names it
    cwd: str | None = None  # the directory the script's `cd` moved to, where relative paths are
    overrides: tuple[str, ...] = ()  # Hydra overrides, in the order the framework applies them
    override_origins: tuple[Origin, ...] = ()
    words: tuple[Token, ...] = ()  # Megatron-LM: the flags the script receives
    recipe: str | None = None  # Bridge: the recipe function run_recipe.py loads
    mode: str | None = None
    dataset: str | None = None
    environment: Mapping[str, Setting] = field(default_factory=dict)  # exports and VAR=value prefixes
    notes: tuple[str, ...] = ()  # what the launcher itself did, for the report
    command_words: tuple[Word, ...] = field(default=(), repr=False, compare=False)  # for "word N" positions

    def position(self, word: Word) -> int:
        """1-based position of ``word`` on the command line (0 when it is not one of its words)."""
        return next((i for i, w in enumerate(self.command_words, start=1) if w is word), 0)


class _Refused(Exception):
    """argparse's ``parser.error``: upstream prints usage and exits with status 2."""


class _Replica(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise _Refused(message)

    def exit(self, status: int = 0, message: str | None = None) -> NoReturn:  # --help
        raise _Refused(message or "exits before training (--help)")

    def _print_message(self, message: str, file: object = None) -> None:
        """--help prints upstream's usage to stdout: that is the launched script's output, not the checker's."""


def read(text: str, where: str, *, file: str | None, environment: Mapping[str, str] | None = None) -> list[Launch]:
    """Every training launch in a script (or one command line), in order.

    A command that starts a Python program the checker cannot place is an input error naming its line:
    the verdict would otherwise be silent about a job it did not read.
    """
    launches: list[Launch] = []
    pending = commands(text, where, environment)
    pending.reverse()  # popped from the end: popping the front of a long script's commands was quadratic
    while pending:
        command = pending.pop()
        try:
            found = _start(command.words)
        except _Unplaceable as err:
            raise InputError(f"{where}:{err.word.line}", f"cannot read this launch: {err.why}") from None
        if found is None:
            continue
        if isinstance(found, list):  # bash -c "...": its commands run where this one does
            pending += reversed([Command(c.words, c.line, {**command.env, **c.env}, c.cwd or command.cwd)
                                 for c in found])
            continue
        launches.append(_launch(command, found, where, file))
        if len(launches) > MAX_LAUNCHES:
            raise InputError(f"{where}:{command.line}", f"more than {MAX_LAUNCHES} training launches in one script "
                                                        "are refused; check them in smaller scripts")
    return launches


def _launch(command: Command, start: _Start, where: str, file: str | None) -> Launch:
    script = start.script
    name = _basename(script.text)
    at = f"{where}:{command.line}"
    env = {name_: Setting(word.text, Origin(file, word.line or None, arg=None if file else where, key=name_,
                                            note="exported by the launch script" if file else "command prefix"))
           for name_, word in {**command.env, **start.env}.items() if not word.unresolved}
    base = Launch("", at, file, command.line, script.text, cwd=command.cwd, environment=env,
                  command_words=command.words)
    if script.unresolved:
        raise InputError(at, f"the script {script.text!r} holds a shell expansion the checker cannot perform; "
                             "write the script path out")
    if start.module:
        raise InputError(at, f"python -m {script.text}: not a training script the checker knows (Megatron Bridge "
                             "scripts/training/run_recipe.py, NeMo-RL examples/run_*.py, Megatron-LM pretrain_*.py)")
    if name == "run_recipe.py":
        return _bridge(start.args, base, where)
    if name in ("setup_experiment.py", "train.sh"):
        return _bridge(_setup_experiment(start.args, at), base, where)
    if name.startswith("run_") and name.endswith(".py"):
        return _nemo_rl(start.args, base, where)
    if (name.startswith("pretrain_") and name.endswith(".py")) or name == "train_rl.py":
        tokens = tuple(Token(w.text, Origin(file, w.line or None, arg=None if file else
                                            f"{where} word {base.position(w)}", key=w.text),
                             "a shell variable the checker cannot resolve" if w.unresolved else "")
                       for w in start.args)
        return replace(base, flavor="megatron-lm", words=tokens)
    raise InputError(at, f"{script.text}: not a training script the checker knows (Megatron Bridge "
                         "scripts/training/run_recipe.py, train.sh or setup_experiment.py; NeMo-RL "
                         "examples/run_*.py; Megatron-LM pretrain_*.py); check its config directly")


def _origin(word: Word, base: Launch) -> Origin:
    where = base.where.rpartition(":")[0] if base.file is None else base.where
    return Origin(base.file, word.line or None, arg=None if base.file else f"{where} word {base.position(word)}",
                  key=word.text.split("=")[0], note=word.text)


# --- Megatron Bridge ---------------------------------------------------------------------------------------------

# (option strings, dest, type) of run_recipe.py's convenience flags, in COMMON_OVERRIDE_FIELDS order
# (run_recipe.py:134-153, 190-256): each becomes `FIELD=VALUE` ahead of the trailing overrides.
_CONVENIENCE: tuple[tuple[tuple[str, ...], str, type, str], ...] = (
    (("-ms", "--max_steps"), "max_steps", int, "train.train_iters"),
    (("-gb", "--global_batch_size"), "global_batch_size", int, "train.global_batch_size"),
    (("-mb", "--micro_batch_size"), "micro_batch_size", int, "train.micro_batch_size"),
    (("-sl", "--seq_length"), "seq_length", int, "dataset.seq_length"),
    (("-tp", "--tensor_model_parallel_size"), "tensor_model_parallel_size", int, "model.tensor_model_parallel_size"),
    (("-pp", "--pipeline_model_parallel_size"), "pipeline_model_parallel_size", int,
     "model.pipeline_model_parallel_size"),
    (("-cp", "--context_parallel_size"), "context_parallel_size", int, "model.context_parallel_size"),
    (("-vp", "--virtual_pipeline_model_parallel_size"), "virtual_pipeline_model_parallel_size", int,
     "model.virtual_pipeline_model_parallel_size"),
    (("-ep", "--expert_model_parallel_size"), "expert_model_parallel_size", int, "model.expert_model_parallel_size"),
    (("-etp", "--expert_tensor_parallel_size"), "expert_tensor_parallel_size", int,
     "model.expert_tensor_parallel_size"),
    (("--lr",), "lr", float, "optimizer.lr"),
    (("--min_lr",), "min_lr", float, "optimizer.min_lr"),
    (("--warmup_iters",), "warmup_iters", int, "scheduler.lr_warmup_iters"),
    (("--pretrained_checkpoint",), "pretrained_checkpoint", str, "checkpoint.pretrained_checkpoint"),
    (("--save_dir",), "save_dir", str, "checkpoint.save"),
    (("--load_dir",), "load_dir", str, "checkpoint.load"),
    (("--save_interval",), "save_interval", int, "checkpoint.save_interval"),
)
# DATASET_PRESETS' keys (NVIDIA-NeMo/Megatron-Bridge@067f987d:src/megatron/bridge/recipes/utils/dataset_utils.py:541),
# the choices of --dataset.
DATASETS: tuple[str, ...] = ("cord-v2", "energon", "gsm8k", "llava-video-178k", "local-jsonl", "local-vlm",
                             "medpix", "megatron-indexed", "mock", "openmathinstruct2", "openmathinstruct2-thinking",
                             "raven", "rdr", "squad", "tulu3")
MODES: tuple[str, ...] = ("pretrain", "sft", "lora", "dora")


def run_recipe_parser() -> argparse.ArgumentParser:
    """run_recipe.py's parser (run_recipe.py:161-258), with the same option strings and types."""
    parser = _Replica(prog="run_recipe.py", allow_abbrev=False, add_help=True)
    selection = parser.add_mutually_exclusive_group(required=True)
    selection.add_argument("--model")
    selection.add_argument("--recipe")
    parser.add_argument("--mode", choices=list(MODES))
    parser.add_argument("--step-func", "--step_func", dest="step_func")
    parser.add_argument("--dataset", choices=sorted(DATASETS))
    for options, dest, kind, _ in _CONVENIENCE:
        parser.add_argument(*options, dest=dest, type=kind)
    parser.add_argument("--dry-run", "--dry_run", action="store_true", dest="dryrun")
    parser.add_argument("--deterministic", action="store_true")
    parser.add_argument("--dump-env", "--dump_env", action="store_true", dest="dump_env")
    return parser


def infer_recipe_mode(recipe: str) -> str | None:
    """recipe_metadata.infer_recipe_mode
    (NVIDIA-NeMo/Megatron-Bridge@067f987d:scripts/training/recipe_metadata.py:214-225)."""
    name = f"_{recipe.lower().strip('_')}_"
    if "_pretrain_" in name:
        return "pretrain"
    if "_sft_" in name or "_finetune_" in name:
        return "sft"
    if "_dora_" in name:
        return "dora"
    if "_peft_" in name or "_lora_" in name:
        return "lora"
    return None


def recipe_task(mode: str) -> str:
    """recipe_metadata.recipe_task (recipe_metadata.py:209-211): the task a recipe name encodes."""
    return "peft" if mode in ("lora", "dora") else mode


class RunRecipeArgs(NamedTuple):
    """What run_recipe.py's ``parse_args`` returns, plus the recipe name it then loads."""

    recipe: str
    mode: str
    dataset: str | None
    overrides: tuple[str, ...]  # convenience overrides first, then the trailing ones (index into the words)
    trailing_from: int  # overrides[trailing_from:] are the trailing KEY=VALUE words


def parse_run_recipe(argv: Sequence[str]) -> RunRecipeArgs:
    """run_recipe.py's ``parse_args`` and ``_selected_recipe_name`` (run_recipe.py:262-274, 426-428, 439-446).

    Raises ``ValueError`` with upstream's message for what upstream refuses.
    """
    parser = run_recipe_parser()
    try:
        args, unknown = parser.parse_known_args(list(argv))
        trailing = []
        for value in unknown:  # _collect_overrides, run_recipe.py:262-271
            if value.startswith("-"):
                parser.error(f"Unknown option: {value}")
            if "=" not in value:
                parser.error(f"Expected override in KEY=VALUE form, got {value!r}")
            trailing.append(value)
    except _Refused as err:
        raise ValueError(f"run_recipe.py: error: {err}") from None
    convenience = []
    for _, dest, _, config_field in _CONVENIENCE:  # _common_config_overrides, run_recipe.py:274-283
        value = getattr(args, dest)
        if value is not None:
            convenience.append(f"{config_field}={json.dumps(value) if isinstance(value, str) else value}")
    mode = args.mode
    if mode is None and args.recipe:  # _infer_mode, run_recipe.py:291-296
        mode = infer_recipe_mode(args.recipe)
    if mode is None:
        raise ValueError("Unable to infer training mode; pass --mode or use a conventional --recipe name.")
    recipe = args.recipe or f"{args.model}_{recipe_task(mode)}_config"
    if args.recipe:  # _validate_recipe_mode, run_recipe.py:299-303
        named = infer_recipe_mode(args.recipe)
        if named is not None and recipe_task(named) != recipe_task(mode):
            raise ValueError(f"Mode '{mode}' is incompatible with recipe '{args.recipe}'.")
    return RunRecipeArgs(recipe, mode, args.dataset, (*convenience, *trailing), len(convenience))


def setup_experiment_parser() -> argparse.ArgumentParser:
    """setup_experiment.py's own options (setup_experiment.py:46-140); what it does not own goes to run_recipe.py."""
    parser = _Replica(prog="setup_experiment.py", allow_abbrev=False)
    parser.add_argument("--nodes", type=int, default=1)
    parser.add_argument("--gpus-per-node", "--gpus_per_node", type=int, dest="gpus_per_node")
    for option in ("--account", "--partition", "--time", "--gres", "--container-image", "--experiment-name"):
        parser.add_argument(option)
    parser.add_argument("--additional-slurm-params", "--additional_slurm_params")
    parser.add_argument("--no-gpu-resource-request", action="store_true")
    parser.add_argument("--mount", action="append", default=[])
    parser.add_argument("--env", action="append", default=[])
    parser.add_argument("--srun-arg", action="append", default=[], dest="srun_args")
    parser.add_argument("-lmc", "--peak-mem-clk", "--peak_mem_clk", type=int, dest="peak_mem_clk")
    parser.add_argument("--submission-dry-run", "--dry-run", action="store_true", dest="submission_dry_run")
    parser.add_argument("--wait", action="store_true")
    return parser


def _setup_experiment(args: Sequence[Word], at: str) -> tuple[Word, ...]:
    """The words setup_experiment.py forwards to run_recipe.py: those its parse_known_args leaves."""
    texts = [w.text for w in args]
    try:
        _, forwarded = setup_experiment_parser().parse_known_args(texts)
    except _Refused as err:
        raise InputError(at, f"setup_experiment.py: error: {err}") from None
    return tuple(_matching(args, forwarded))


def _bridge(args: Sequence[Word], base: Launch, where: str) -> Launch:
    at, file = base.where, base.file
    for word in args:
        if word.unresolved:
            raise InputError(f"{where}:{word.line}", f"{word.text!r} holds a shell expansion the checker cannot "
                                                     "perform; write the value out")
    try:
        parsed = parse_run_recipe([w.text for w in args])
    except ValueError as err:
        raise InputError(at, str(err)) from None
    trailing = _matching(args, parsed.overrides[parsed.trailing_from:])
    origins: list[Origin] = []
    for text in parsed.overrides[:parsed.trailing_from]:
        flag = _flag_word(args, text)
        if flag is None:  # argparse found it, so a word names it; keep the override's text as the key
            origins.append(Origin(file, None, arg=None if file else where, key=text.split("=", 1)[0], note=text))
            continue
        located = _origin(flag, base)
        origins.append(replace(located, key=text.split("=", 1)[0],
                               note=f"run_recipe.py turns {flag.text} into {text} ({RUN_RECIPE}:274-283)"))
    origins += [_origin(w, base) for w in trailing]
    return replace(base, flavor="bridge", overrides=parsed.overrides, override_origins=tuple(origins),
                   recipe=parsed.recipe, mode=parsed.mode, dataset=parsed.dataset)


def _matching(args: Sequence[Word], texts: Sequence[str]) -> list[Word]:
    """The words argparse left over as ``texts`` (parse_known_args keeps their order), mapped back, in order."""
    found: list[Word] = []
    i = 0
    for text in texts:
        while i < len(args) and args[i].text != text:
            i += 1
        found.append(args[i] if i < len(args) else Word(text, 0))
        i += 1
    return found


def _flag_word(args: Sequence[Word], override: str) -> Word | None:
    """The convenience flag an override came from (for its line)."""
    field_name = override.split("=", 1)[0]
    options = next(opts for opts, _, _, f in _CONVENIENCE if f == field_name)
    for word in args:
        if word.text in options or word.text.split("=", 1)[0] in options:
            return word
    return None


# --- NeMo-RL -----------------------------------------------------------------------------------------------------

# The config each example script reads without --config (`os.path.join(os.path.dirname(__file__), "configs", X)`),
# NVIDIA-NeMo/RL@7ea279ab:examples/run_<name>.py; the scripts not listed have no default and need --config.
_NEMO_RL_DEFAULTS: Mapping[str, str] = {
    "run_distillation.py": "distillation_math.yaml", "run_dpo.py": "dpo.yaml", "run_grpo.py": "grpo_math_1B.yaml",
    "run_grpo_single_controller.py": "grpo_math_1B_megatron_single_controller.yaml",
    "run_grpo_sliding_puzzle.py": "grpo_sliding_puzzle.yaml", "run_ppo.py": "ppo_math_1B.yaml",
    "run_rm.py": "rm.yaml", "run_sft.py": "sft.yaml", "run_vlm_grpo.py": "vlm_grpo_3B.yaml",
    "run_xtoken_off_policy_distillation.py": "xtoken_off_policy_distillation.yaml",
}


def nemo_rl_parser() -> argparse.ArgumentParser:
    """The examples' parser: one ``--config`` option, argparse's defaults otherwise (examples/run_grpo.py:57-67),
    so ``--conf FILE`` abbreviates it; every word it does not know is an override."""
    parser = _Replica(prog="run.py")
    parser.add_argument("--config", type=str, default=None)
    return parser


def parse_nemo_rl(argv: Sequence[str]) -> tuple[str | None, list[str]]:
    try:
        args, overrides = nemo_rl_parser().parse_known_args(list(argv))
    except _Refused as err:
        raise ValueError(f"error: {err}") from None
    return args.config, overrides


def _nemo_rl(args: Sequence[Word], base: Launch, where: str) -> Launch:
    at, script = base.where, base.script
    try:
        config, overrides = parse_nemo_rl([w.text for w in args])
    except ValueError as err:
        raise InputError(at, f"{script}: {err}") from None
    notes: list[str] = []
    if config is None:
        default = _NEMO_RL_DEFAULTS.get(_basename(script))
        if default is None:
            raise InputError(at, f"{script} without --config: the checker does not know this script's default "
                                 "config; add --config FILE")
        config = posixpath.join(posixpath.dirname(script), "configs", default)
        notes.append(f"{script} reads {config} without --config ({NEMO_RL}examples/{_basename(script)})")
    for word in args:
        if word.unresolved and word.text in overrides:
            raise InputError(f"{where}:{word.line}", f"{word.text!r} holds a shell expansion the checker cannot "
                                                     "perform; write the value out")
    origins = tuple(_origin(w, base) for w in _matching(args, overrides))
    return replace(base, flavor="nemo-rl", files=(config,), overrides=tuple(overrides), override_origins=origins,
                   notes=tuple(notes))
