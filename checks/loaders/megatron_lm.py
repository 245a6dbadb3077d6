"""Megatron-LM command lines: an argv string, a launch script, or a functional-test YAML.

Flags are parsed with argparse's semantics over the real parser of the selected version
(:mod:`checks.loaders.mlm_argparse`, flag table ``data/mlm_flags.json``), and mapped to config fields by
``dest``, because Megatron-LM copies every ``args`` attribute whose name matches a ``TransformerConfig`` or
``OptimizerConfig`` field (NVIDIA/Megatron-LM@d98e8a64:megatron/training/argument_utils.py:277 and
megatron/training/training.py:2609).

* ``--argv`` is the argv the training script receives: every word must be argparse's.
* A functional-test YAML is turned into one argv per run exactly as the CI runner does it
  (:mod:`checks.loaders.mlm_runner`); a file with ``MODEL_ARGS_<N>`` gives one config per run.
* A launch script is scanned for flags, not executed: simple ``NAME=value`` assignments are substituted,
  anything else containing ``$`` is reported as unresolved, and words of other programs are skipped. With a
  script among the inputs the whole command line is scanned that way.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from checks.config import (
    REFUSED_BY_RUNNER,
    SWITCH_VALUE,
    UNUSED_WORD,
    CanonicalConfig,
    Duplicate,
    Ignored,
    Origin,
    Rejected,
    Setting,
    Unrecognised,
)
from checks.errors import InputError
from checks.loaders import mlm_argparse, mlm_runner
from checks.loaders.common import Request, with_environment
from checks.loaders.mlm_argparse import Word
from checks.versions import EnumMember, FlagSpec, FlagTable, Profile, mlm_flag_table, profile
from checks.yamlio import read_text

# dests that are not spelled like the config field they set.
_DEST_ALIASES: Mapping[str, tuple[str, ...]] = {
    "fp8_param_gather": ("model.fp8_param", "ddp.fp8_param_gather"),
    "num_experts": ("model.num_moe_experts",),
    "num_virtual_stages_per_pipeline_rank": ("model.virtual_pipeline_model_parallel_size",),
    "cuda_graph_scope_deprecated": ("model.cuda_graph_scope",),
    "te_rng_tracker": ("model.use_te_rng_tracker",),
    # NVIDIA/Megatron-LM@d98e8a64:megatron/training/argument_utils.py:310-311
    "decoder_first_pipeline_num_layers": ("model.num_layers_in_first_pipeline_stage",),
    "decoder_last_pipeline_num_layers": ("model.num_layers_in_last_pipeline_stage",),
}
_IMPLIES = "implied by --cpu-offloading-num-layers > 0 (megatron/training/arguments.py, validate_args)"
_SELECTIVE = "--recompute-activations sets recompute_granularity='selective' (megatron/training/arguments.py)"
_GATED = "sets gated_linear_unit (NVIDIA/Megatron-LM@d98e8a64:megatron/training/argument_utils.py:314-325)"
_ROPE = "--use-rotary-position-embeddings sets position_embedding_type='rope' " \
    "(NVIDIA/Megatron-LM@d98e8a64:megatron/training/arguments.py:1626-1627)"
_SWIGLU_FFN = ("--swiglu without --ffn-hidden-size: int(4 * hidden_size * 2 / 3 / 64) * 64 "
               "(NVIDIA/Megatron-LM@d98e8a64:megatron/training/arguments.py:1320-1327)")
# Launcher flags whose defaults decide the model's shape (checks/model/shape.py reads them).
_SHAPE_DESTS: frozenset[str] = frozenset({
    "make_vocab_size_divisible_by", "position_embedding_type", "untie_embeddings_and_output_weights"})
_VAR = re.compile(r"\$(?:\{(?P<braced>[A-Za-z_]\w*)(?::?-(?P<default>[^}]*))?\}|(?P<bare>[A-Za-z_]\w*))", re.ASCII)
_ASSIGN = re.compile(r"^(?:export\s+)?(?P<name>[A-Za-z_][A-Za-z0-9_]*)=(?P<value>.*)$")

_UNRESOLVED = "a shell variable the checker cannot resolve"
Token = Word  # a launch script's or argv's word with its origin (the name the rest of the package knows)


@dataclass
class _Source:
    """The words one run gets, with what the runner itself reported."""

    words: list[Word]
    problems: list[mlm_runner.RunnerProblem]
    duplicates: list[Duplicate]
    not_read: list[tuple[str, Setting, str]]


def load(request: Request) -> list[CanonicalConfig]:
    if request.overrides:
        raise InputError("--set", "Megatron-LM command lines take flags, not KEY=VALUE overrides; "
                                  "add flags with --argv \"--flag value\"")
    runs: dict[str, _Source] = {"MODEL_ARGS": _Source([], [], [], [])}
    env: dict[str, Setting] = {}
    env_ignored: list[Ignored] = []
    strict = True
    for path in request.files:
        if path.endswith((".yaml", ".yml")):
            test = mlm_runner.read(path)
            by_name = {run.name: run for run in test.runs}
            for name in by_name:
                if name not in runs:  # a new run starts from what the inputs before this file gave
                    base = runs["MODEL_ARGS"]
                    runs[name] = _Source(list(base.words), list(base.problems), list(base.duplicates),
                                         list(base.not_read))
            for name, source in runs.items():
                run = by_name.get(name, by_name["MODEL_ARGS"])  # the runner falls back to MODEL_ARGS
                source.words += run.words
                source.problems += run.problems + test.problems
                source.duplicates += run.duplicates
                source.not_read += run.not_read
            for name, setting in test.env.items():
                env[f"env.{name}"] = setting
            for name, setting in test.env_unresolved:
                env.pop(f"env.{name}", None)
                env_ignored.append(Ignored(f"env.{name}", setting, f"the value {setting.value!r} holds a variable "
                                                                     "the runner substitutes; the checker cannot"))
        else:
            strict = False
            words = script_tokens(read_text(path), path)
            for source in runs.values():
                source.words += words
    if request.words is not None:  # a launch command's words, each with its line
        for source in runs.values():
            source.words += list(request.words)
    if request.argv is not None:
        words = argv_tokens(request.argv)
        for source in runs.values():
            source.words += words
    prof = profile(request.version)
    table = mlm_flag_table(request.version)
    targets = list(runs) if len(runs) > 1 else [None]
    return [_Parser(request, prof, table, strict).parse(source, env, env_ignored, target)
            for target, source in zip(targets, runs.values(), strict=True)]


def argv_tokens(argv: str) -> list[Token]:
    try:
        words = shlex.split(argv, comments=True)
    except ValueError as err:
        raise InputError("--argv", f"cannot split the command line: {err}") from None
    # A pasted launch line (`torchrun --nproc_per_node 8 pretrain_gpt.py --num-layers ...`): the training script
    # receives only the words after it, so the launcher's are not Megatron-LM's to judge.
    start = next((i + 1 for i, w in enumerate(words) if not w.startswith("-") and w.endswith(".py")), 0)
    return [Token(w, Origin(arg=f"argv[{i}]", key=w), _UNRESOLVED if "$" in w else "")
            for i, w in enumerate(words) if i >= start]


def script_tokens(text: str, path: str) -> list[Token]:
    """Words of a launch script, with their lines; quotes are dropped, not interpreted.

    A flag scanner rather than a shell: words inside quoted strings are split
    too, because ``GPT_ARGS="--num-layers 24 ..."`` is expanded unquoted later.
    """
    variables = _assignments(text)
    out: list[Token] = []
    for line_no, word in _words(text):
        if _ASSIGN.match(word) and not word.startswith("--"):
            word = word.split("=", 1)[1]
            if not word.startswith("--"):
                continue
        text = _substitute(word, variables)
        out.append(Token(text, Origin(path, line_no, key=word), _UNRESOLVED if "$" in text else ""))
    return out


def _words(text: str) -> Iterator[tuple[int, str]]:
    line, quote, word, word_line = 1, "", "", 1
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text) and text[i + 1] == "\n":
            i += 2
            line += 1
            continue
        if ch == quote:
            quote = ""
        elif not quote and ch in "'\"":
            quote = ch
        elif not quote and ch == "#" and not word:
            while i < len(text) and text[i] != "\n":
                i += 1
            continue
        elif ch.isspace() or (not quote and ch in "();|&`"):
            if word:
                yield word_line, word
            word = ""
        else:
            if not word:
                word_line = line
            word += ch
        if ch == "\n":
            line += 1
        i += 1
    if word:
        yield word_line, word


def _assignments(text: str) -> dict[str, str]:
    found: dict[str, str] = {}
    for raw in text.splitlines():
        match = _ASSIGN.match(raw.strip())
        if match:
            value = match.group("value").strip()
            if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
                value = value[1:-1]
            found[match.group("name")] = value
    return found


def _substitute(word: str, variables: Mapping[str, str]) -> str:
    def replace(match: re.Match[str]) -> str:
        name = match.group("braced") or match.group("bare")
        if name in variables and "$" not in variables[name]:
            return variables[name]
        if match.group("default") is not None:
            return match.group("default")
        return match.group(0)

    return _VAR.sub(replace, word)


def _canonical(value: Any) -> Any:
    """A parsed value as the config holds it: enum members by name (as Bridge and NeMo-RL YAML write them)."""
    if isinstance(value, EnumMember):
        return value.name
    if isinstance(value, list):
        return [_canonical(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_canonical(v) for v in value)
    return value


class _Parser:
    """One run's argv through the argparse model, into a canonical config that keeps every word's origin."""

    def __init__(self, request: Request, prof: Profile, table: FlagTable, strict: bool) -> None:
        self.request = request
        self.prof = prof
        self.table = table
        self.flags = table.flags
        self.strict = strict
        self.values: dict[str, tuple[FlagSpec, Any, Origin]] = {}  # dest -> last value
        self.unrecognised: list[Unrecognised] = []
        self.ignored: list[Ignored] = []
        self.rejected: list[Rejected] = []

    def parse(self, source: _Source, env: dict[str, Setting], env_ignored: list[Ignored],
              target: str | None) -> CanonicalConfig:
        outcome, _ = mlm_argparse.parse(source.words, self.table, strict=self.strict)
        duplicate_origins = {(d.first.origin.file, d.first.origin.line) for d in source.duplicates}
        for unknown in outcome.unknown:
            inline = unknown.word.text.split("=", 1)[1] if "=" in unknown.word.text else True
            space = f"a Megatron-LM flag in megatron-core {self.request.version}"
            self.unrecognised.append(Unrecognised("argv", unknown.name, Setting(inline, unknown.word.origin),
                                                  "crash", space))
        for error in outcome.errors:
            reason = f"argparse: {error.message}" + (f" ({error.hint})" if error.hint else "")
            path = error.spec.dest if error.spec is not None else "argv"
            cause = SWITCH_VALUE if error.switch_value else UNUSED_WORD if error.kind == "extra" else ""
            self.rejected.append(Rejected(path, Setting(error.word.text, error.word.origin), reason, cause))
        for problem in source.problems:
            self.rejected.append(Rejected("argv", Setting(problem.origin.key, problem.origin),
                                          f"runner: {problem.message}", REFUSED_BY_RUNNER))
        last: dict[str, mlm_argparse.Assignment] = {}
        for event in outcome.events:
            spec = event.spec
            if isinstance(event, mlm_argparse.Unresolved):
                text = " ".join(w.text for w in event.words[1:]) or event.words[0].text.partition("=")[2]
                why = next((w.unresolved for w in event.words if w.unresolved), _UNRESOLVED)
                self.ignored.append(Ignored(spec.flag, Setting(text, event.words[0].origin),
                                            f"the value holds {why}; pass the flag with --argv to check it"))
                self.values.pop(spec.dest, None)
                last.pop(spec.dest, None)
                continue
            origin = event.words[0].origin
            previous = last.get(spec.dest)
            if previous is not None and spec.action not in ("append", "append_const", "extend", "count"):
                where = previous.words[0].origin
                if (where.file, where.line) not in duplicate_origins or where.file is None:
                    self.ignored.append(Ignored(previous.spec.flag, Setting(_canonical(previous.value), where),
                                                f"{spec.flag} is given again at {origin.describe()}; argparse keeps "
                                                "the last value"))
            last[spec.dest] = event
            self.values[spec.dest] = (spec, _canonical(event.value), origin)
        for key, setting, why in source.not_read:
            self.ignored.append(Ignored(key, setting, why))
        self.ignored += env_ignored
        settings = self._settings()
        settings.update(env)
        with_environment(settings, self.request.environment, launch_wins=True)
        return CanonicalConfig(
            flavor="megatron-lm", version=self.request.version, settings=settings,
            spelling=MegatronLmSpelling(self.flags, self.prof, {s.flag for s, _, _ in self.values.values()}),
            target=target, defaults=self._defaults(), unrecognised=tuple(self.unrecognised),
            ignored=tuple(self.ignored), rejected=tuple(self.rejected), inputs=self.request.files,
            environment=self.request.environment, duplicates=tuple(source.duplicates),
        )

    def _paths(self, dest: str) -> tuple[str, ...]:
        """Config fields a flag sets; a flag that sets none is kept as a launcher setting, ``run.<dest>``."""
        if dest in _DEST_ALIASES:
            return _DEST_ALIASES[dest]
        fields = tuple(f"{section}.{dest}" for section in ("model", "optimizer", "ddp")
                       if self.prof.field(section, dest) is not None)
        return fields or (f"run.{dest}",)

    def _settings(self) -> dict[str, Setting]:
        settings: dict[str, Setting] = {}
        for dest, (spec, value, origin) in self.values.items():
            for path in self._paths(dest):
                settings[path] = Setting(value, Origin(origin.file, origin.line, origin.arg, spec.flag))
        layers = self.values.get("cpu_offloading_num_layers")
        if layers and isinstance(layers[1], int) and layers[1] > 0:
            o = layers[2]
            settings["model.cpu_offloading"] = Setting(True, Origin(o.file, o.line, o.arg, layers[0].flag, _IMPLIES))
        recompute = self.values.get("recompute_activations")
        if recompute and recompute[1] is True:
            o = recompute[2]
            settings["model.recompute_granularity"] = Setting(
                "selective", Origin(o.file, o.line, o.arg, recompute[0].flag, _SELECTIVE))
        self._derive_vpp(settings)
        self._derive_architecture(settings)
        return settings

    def _derive_architecture(self, settings: dict[str, Setting]) -> None:
        """What ``core_transformer_config_from_args`` and ``validate_args`` make of the architecture flags."""
        for dest in ("quick_geglu", "swiglu"):
            flag = self.values.get(dest)
            if flag and flag[1] is True:
                spec, _, o = flag
                settings["model.gated_linear_unit"] = Setting(True, Origin(o.file, o.line, o.arg, spec.flag, _GATED))
        swiglu = self.values.get("swiglu")
        if swiglu and swiglu[1] is True:
            spec, _, o = swiglu
            hidden = settings.get("model.hidden_size")
            if "ffn_hidden_size" not in self.values and hidden is not None and isinstance(hidden.value, int):
                settings["model.ffn_hidden_size"] = Setting(
                    int((4 * hidden.value * 2 / 3) / 64) * 64,
                    Origin(o.file, o.line, o.arg, spec.flag, _SWIGLU_FFN))
        rope = self.values.get("use_rotary_position_embeddings")
        if rope and rope[1] is True:
            spec, _, o = rope
            settings["run.position_embedding_type"] = Setting("rope", Origin(o.file, o.line, o.arg, spec.flag, _ROPE))
        gqa = self.values.get("group_query_attention")
        groups = settings.pop("model.num_query_groups", None)
        if groups is not None:
            # Without --group-query-attention the value never reaches the config.
            settings["model.num_query_groups" if gqa and gqa[1] is True else "run.num_query_groups"] = groups

    def _derive_vpp(self, settings: dict[str, Setting]) -> None:
        per_stage = self.values.get("num_layers_per_virtual_pipeline_stage")
        layers = settings.get("model.num_layers")
        if not per_stage or layers is None:
            return
        pp = settings.get("model.pipeline_model_parallel_size")
        pp_size = pp.value if pp is not None else 1
        spec, value, o = per_stage
        if isinstance(value, int) and value > 0 and isinstance(layers.value, int) and isinstance(pp_size, int) \
                and pp_size > 0:
            settings["model.virtual_pipeline_model_parallel_size"] = Setting(
                layers.value // pp_size // value,
                Origin(o.file, o.line, o.arg, spec.flag, "num_layers / pipeline size / layers per virtual stage"))

    def _defaults(self) -> dict[str, Any]:
        """Where the command line's default differs from the dataclass default, the command line wins."""
        out: dict[str, Any] = {}
        for spec in self.flags.values():
            if spec.default is None or isinstance(spec.default, (dict, EnumMember)) or spec.action == "store_false":
                continue
            if spec.dest in _SHAPE_DESTS:
                out[f"run.{spec.dest}"] = spec.default
                continue
            gqa = self.values.get("group_query_attention")
            if spec.dest == "num_query_groups" and not (gqa and gqa[1] is True):
                # Without --group-query-attention the config gets None, which megatron-core reads as one group per
                # head (NVIDIA/Megatron-LM@d98e8a64:megatron/training/argument_utils.py:330-333), not the flag's 1.
                continue
            for path in self._paths(spec.dest):
                section, _, name = path.partition(".")
                field = self.prof.field(section, name)
                if field is not None and field.default != spec.default and field.kind in ("bool", "int", "float",
                                                                                         "str", "list_str"):
                    out[path] = spec.default
        return out


class MegatronLmSpelling:
    """Megatron-LM flags for canonical paths, in the selected version."""

    def __init__(self, flags: Mapping[str, FlagSpec], prof: Profile, given: set[str]) -> None:
        self.by_dest: dict[str, list[FlagSpec]] = {}
        for spec in flags.values():
            self.by_dest.setdefault(spec.dest, []).append(spec)
        self.given = given

    def _flag(self, dest: str, action: str | None = None) -> FlagSpec | None:
        for spec in self.by_dest.get(dest, []):
            if action is None or spec.action == action:
                return spec
        return None

    def patch(self, changes: Mapping[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for path, value in changes.items():
            name = path.partition(".")[2]
            if path == "model.cpu_offloading":
                if value is False:
                    out["--cpu-offloading-num-layers"] = 0
                continue
            if path == "model.recompute_granularity" and value is None:
                for flag in ("--recompute-granularity", "--recompute-activations"):
                    if flag in self.given:
                        out[flag] = None
                continue
            if path == "ddp.use_distributed_optimizer":
                name = "use_distributed_optimizer"
            if isinstance(value, bool):
                spec = self._flag(name, "store_true") if value else self._flag(name, "store_false")
                if spec is not None:
                    out[spec.flag] = True
                    continue
                spec = self._flag(name)
                if spec is not None:
                    out[spec.flag] = None  # remove the store_true flag (or the --no- flag)
                continue
            spec = self._flag(name)
            if spec is not None:
                out[spec.flag] = value
        return out

    def override_lines(self, patch: Mapping[str, Any]) -> list[str]:
        return [f"# remove {flag}" if (words := flag_words(flag, value)) is None else " ".join(words)
                for flag, value in patch.items()]


def flag_words(flag: str, value: Any) -> list[str] | None:
    """A patched flag as a command line writes it: the flag and its values (just the flag for a switch); None
    where the patch removes it (nargs='+' takes no empty list; leaving the flag out gives [])."""
    if value is None or value == []:
        return None
    if value is True:
        return [flag]
    return [flag, *map(str, value)] if isinstance(value, list) else [flag, str(value)]
