"""Every input channel of the CLI, generated: whatever a user gives, the checker answers, and answers quickly.

For every generated case, run in-process (``checks.cli.main``, or ``examples/run_offload.py``'s ``main``), the
oracles are: no uncaught exception; an ``int`` exit code in {0, 1, 2}; on exit 2 nothing on stdout and exactly
one line on stderr, starting with ``error:``; with ``--format json`` stdout is strict JSON (no NaN or Infinity)
that validates against the output schema; the case finishes within ``LIMIT_S`` of CPU time; and nothing of the
checker's own environment reaches the verdict (``${oc.env:X}`` reads only ``--env``).

Channels and generated cases per run (the CI profile is derandomized, a fixed seed; ``OFFLOAD_CHECK_DEEP=1``
selects the deep profile: ``DEEP_FACTOR`` times as many cases, a new seed each run). The ``@example`` inputs run
on top of these:

    channel                                       test                               CI    deep
    (a) raw bytes in a file                       test_raw_bytes                     400   6000
    (a) YAML structures (anchors, merges, tags)   test_yaml_structures               350   5250
    (a) YAML near the limits (depth, size)        test_yaml_near_limits               80   1200
    (a) Bridge / NeMo-RL / Megatron-LM shapes     test_flavor_shapes                 350   5250
    (a) NeMo-RL ``defaults:`` chains              test_nemo_rl_defaults_chains       150   2250
    (a) shell launch scripts (file, --command)    test_launch_scripts                350   5250
    (b) ``--set KEY=VALUE`` Hydra overrides       test_overrides                     400   6000
    (c) Megatron-LM ``--argv``                    test_megatron_lm_argv              350   5250
    (d) ``check`` options                         test_check_options                 400   6000
    (e) ``plan`` options (and --profile files)    test_plan_options                  300   4500
    (f) ``examples/run_offload.py`` options       test_run_offload_options           400   6000

Most generated inputs are plausible (they reach the loaders and the rules); a minority is hostile in one place
(``mostly``). The explicit ``@example`` cases and the parametrized tests at the end are inputs these tests found.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shlex
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from schemas import validate_output as schema_validate

from checks.cli import main
from checks.formats import offload_field_names
from checks.plan.hardware import HARDWARE
from checks.plan.presets import PRESETS
from checks.versions import NEMO_RL_VERSIONS, VERSIONS, all_field_names, mlm_flag_table

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples" / "configs"
LIMIT_S = 2.0  # CPU seconds per case (wall time on a shared machine is noisy); real inputs take ~20-60 ms
DEEP = os.environ.get("OFFLOAD_CHECK_DEEP") == "1"
DEEP_FACTOR = 15
SENTINEL_NAME, SENTINEL_VALUE = "CHECKS_PROPERTY_SENTINEL", "leaked-from-the-checkers-own-shell"

_SUPPRESS = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much,
             HealthCheck.large_base_example]
settings.register_profile("offload-check-ci", deadline=None, derandomize=True, database=None, print_blob=True,
                          suppress_health_check=_SUPPRESS)
settings.register_profile("offload-check-deep", deadline=None, derandomize=False, database=None, print_blob=True,
                          suppress_health_check=_SUPPRESS)
_PROFILE = settings.get_profile("offload-check-deep" if DEEP else "offload-check-ci")

CASES = {  # the table in the module docstring
    "raw_bytes": 400, "yaml_structures": 350, "yaml_near_limits": 80, "flavor_shapes": 350,
    "defaults_chains": 150, "launch_scripts": 350, "overrides": 400, "argv": 350, "check_options": 400,
    "plan_options": 300, "run_offload": 400,
}


def cases(channel: str) -> settings:
    return settings(_PROFILE, max_examples=CASES[channel] * (DEEP_FACTOR if DEEP else 1))


# --- running a case and its oracles ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Answer:
    code: int
    out: str
    err: str
    seconds: float


def call(argv: Sequence[str], entry: Callable[[list[str]], int] = main) -> Answer:
    """One in-process run; argparse's usage errors leave through SystemExit, which is an answer too."""
    out, err = io.StringIO(), io.StringIO()
    start = time.process_time()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code: object = entry(list(argv))
        except SystemExit as stop:
            code = 0 if stop.code is None else stop.code
    seconds = time.process_time() - start  # CPU time: the bound is the checker's work, not the load
    assert isinstance(code, int) and not isinstance(code, bool), f"exit code {code!r} is not an int"
    return Answer(code, out.getvalue(), err.getvalue(), seconds)


def validate_output(kind: str, text: str) -> None:
    """Strict JSON (no NaN or Infinity, no duplicate keys) valid against reference/<kind>-output.schema.json."""
    try:
        schema_validate(kind, text)
    except (ValueError, jsonschema.ValidationError) as err:
        raise AssertionError(f"not a valid {kind} document: {str(err)[:1500]}\n{text[:1500]}") from None


AT_SCALE_S = 6.0  # the regressions built at a limit (a 20,000-key file, a 235B plan): they took 28 s to 213 s


def assert_answered(answer: Answer, argv: Sequence[str], *, kind: str = "check", limit_s: float = LIMIT_S) -> None:
    """The oracles every case shares; ``kind``: which JSON document a ``--format json`` run prints."""
    code, out, err = answer.code, answer.out, answer.err
    assert code in (0, 1, 2), (code, err[-2000:])
    assert "Traceback (most recent call last)" not in err + out, err[-2000:]
    assert answer.seconds < limit_s, f"took {answer.seconds:.2f} s"
    assert SENTINEL_VALUE not in out + err, "the checker read its own environment"
    if code == 2 and out and not err:  # several configs: the readable ones reported, each unreadable one named
        if _option(argv, "--format") == "json":
            validate_output("check-run", out)
        else:
            assert "could not be read" in out, out[-500:]
        return
    if code == 2:
        lines = err.splitlines()
        assert out == "" and len(lines) == 1 and lines[0].startswith("error: "), (out[:500], err[:2000])
        return
    if _asks_help(argv) or "--emit-overrides" in argv:  # help text; fix lines, none when nothing has a fix
        return
    if _option(argv, "--format") == "json":
        # check over several configs prints the run's document (reference/check-run-output.schema.json)
        validate_output("check-run" if kind == "check" and '"assumptions"' not in out else kind, out)
    else:
        assert out.strip(), "no verdict printed"


def _option(argv: Sequence[str], name: str) -> str | None:
    found = None
    for i, word in enumerate(argv):
        if word == "--":
            break
        if word == name and i + 1 < len(argv):
            found = argv[i + 1]
        elif word.startswith(name + "="):
            found = word.split("=", 1)[1]
    return found


def _asks_help(argv: Sequence[str]) -> bool:
    words = list(argv)[: list(argv).index("--")] if "--" in argv else list(argv)
    return any(w in ("-h", "--help", "--version") for w in words)


# --- scratch files --------------------------------------------------------------------------------------------

_SCRATCH = tempfile.TemporaryDirectory(prefix="checks-input-properties-")


def case_dir() -> Path:
    """A fresh directory per case: loaders may cache by path or text, so no file is ever rewritten."""
    return Path(tempfile.mkdtemp(dir=_SCRATCH.name))


def write(text: str | bytes, name: str = "config.yaml", directory: Path | None = None) -> str:
    path = (directory or case_dir()) / name
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return str(path)


@pytest.fixture(autouse=True, scope="module")
def _isolated() -> Iterator[None]:
    """The checker's own shell holds a sentinel that no case may see, and runs from an empty directory (a
    relative path means the same wherever pytest is started)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(SENTINEL_NAME, SENTINEL_VALUE)
        patch.chdir(_SCRATCH.name)
        yield


# --- shared vocabularies ----------------------------------------------------------------------------------------

SENTINEL_REF = f"${{oc.env:{SENTINEL_NAME}}}"
MODEL_FIELDS = sorted(offload_field_names() | {
    "num_layers", "hidden_size", "num_attention_heads", "ffn_hidden_size", "seq_length", "num_moe_experts",
    "pipeline_model_parallel_size", "virtual_pipeline_model_parallel_size", "tensor_model_parallel_size",
    "context_parallel_size", "expert_model_parallel_size", "recompute_granularity", "recompute_method",
    "recompute_num_layers", "recompute_modules", "cuda_graph_impl", "enable_cuda_graph", "cuda_graph_scope",
    "transformer_impl", "use_distributed_optimizer", "use_precision_aware_optimizer", "optimizer", "params_dtype",
    "main_params_dtype", "pipeline_dtype", "bf16", "fp16", "fp8", "sequence_parallel", "moe_router_dtype",
})
ALL_MODEL_FIELDS = sorted(all_field_names("model") | all_field_names("optimizer") | all_field_names("ddp"))
NEMO_RL_FIELDS = ["enabled", "activation_checkpointing", "model_overrides", "env_vars", "optimizer",
                  "distributed_data_parallel_config", "empty_unused_memory_level", "scheduler", "converter_type",
                  "freeze_moe_router", "apply_rope_fusion", "defer_fp32_logits", "force_overwrite_initial_ckpt"]
ENV_NAMES = ["NVTE_CPU_OFFLOAD_V1", "CUDA_DEVICE_MAX_CONNECTIONS", "NCCL_GRAPH_REGISTER", "PYTORCH_CUDA_ALLOC_CONF",
             "NVTE_FUSED_ATTN", "X", "", "1X", "a b"]
TYPO = st.sampled_from(MODEL_FIELDS).map(lambda f: f[:-1] if len(f) > 4 else f + "s")
FIELD = st.one_of(st.sampled_from(MODEL_FIELDS), st.sampled_from(ALL_MODEL_FIELDS), TYPO)
INTERPOLATIONS = ["${policy.precision}", "${model.num_layers}", "${nope}", "${.num_layers}", "${..x}",
                  SENTINEL_REF, f"${{oc.env:{SENTINEL_NAME},1}}", "${oc.env:NVTE_CPU_OFFLOAD_V1}",
                  "${oc.env:X,true}", "${add:1,2}", "${mul:${policy.x},2}", "${div:1,0}", "${max:a,1}",
                  "${oc.decode:'[1,2]'}", "${oc.create:{a: 1}}", "${oc.select:model.x,3}", "${oc.deprecated:a.b}",
                  "${oc.dict.keys:model}", "${unknown_resolver:1}", "${", "${}", "${a.${b}}", "\\${escaped}",
                  "???", "${model}", "${policy}", "${oc.env:}", "${ oc.env : X }", "$" + "{x" * 40 + "}" * 40]
WORDS = ["true", "false", "True", "FALSE", "yes", "no", "on", "off", "null", "None", "~", "0", "1", "-1", "2", "8",
         "0.5", "1.0", "1.5", "-0.0", "1e-5", "1e400", "inf", ".inf", "-.inf", ".nan", "nan", "0x10", "0o17",
         "1_000", "12:30", "2001-12-14", "auto", "full", "selective", "uniform", "block", "none", "local",
         "transformer_engine", "full_iteration", "attn", "core_attn", "attn_proj", "moe_act", "expert_fc1",
         "qkv_linear", "bf16", "bfloat16", "float32", "torch.bfloat16", "adam", "sgd", "hybridadam", "[a b]",
         "9" * 30, "é", "-", "?", "abc"]


def mostly(good: Sequence[Any] | st.SearchStrategy[Any], odd: Sequence[Any] | st.SearchStrategy[Any],
           weight: int = 4) -> st.SearchStrategy[Any]:
    """``good`` about ``weight`` times as often as ``odd``: most cases get past the first check to the rules."""
    def strategy(x: Sequence[Any] | st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
        return x if isinstance(x, st.SearchStrategy) else st.sampled_from(list(x))

    good_strategy, odd_strategy = strategy(good), strategy(odd)  # (st.one_of merges repeated branches: no weights)
    return st.sampled_from([True] * weight + [False]).flatmap(lambda ok: good_strategy if ok else odd_strategy)


# --- (a) raw bytes ----------------------------------------------------------------------------------------------

BYTE_PREFIXES = [b"", b"\xef\xbb\xbf", b"#!/bin/bash\n", b"---\n", b"%YAML 1.2\n---\n", b"model:\n  ",
                 b"policy:\n  megatron_cfg:\n    ", b"MODEL_ARGS:\n  ", b"\xff\xfe", b"\t", b"defaults: "]
SUFFIXES = ["config.yaml", "config.yml", "run.sh", "run.bash", "args.txt", "flags.args", "config.json", "config"]
FLAVORS = ["auto", "bridge", "nemo-rl", "megatron-lm"]


@cases("raw_bytes")
@given(prefix=st.sampled_from(BYTE_PREFIXES), raw=st.one_of(
    st.binary(max_size=300),
    st.text(max_size=200).map(lambda s: s.encode("utf-8", "surrogatepass")),
    st.text(alphabet=st.characters(codec="latin-1"), max_size=100).map(lambda s: s.encode("utf-16")),
), name=st.sampled_from(SUFFIXES), flavor=st.sampled_from(FLAVORS))
@example(prefix=b"", raw=b"\x00", name="config.yaml", flavor="auto")
@example(prefix=b"#!/bin/bash\n", raw=b"\x85", name="run.sh", flavor="auto")
def test_raw_bytes(prefix: bytes, raw: bytes, name: str, flavor: str) -> None:
    argv = ["check", write(prefix + raw, name), "--flavor", flavor, "--format", "json"]
    assert_answered(call(argv), argv)


# --- (a) YAML structures ----------------------------------------------------------------------------------------
# A node: ("s", text as written) a scalar, ("a", k) an alias, ("m", pairs, flow, anchored, tag) a mapping,
# ("l", items, flow, anchored, tag) a sequence. Rendered as block or flow YAML text, so anchors, aliases, merge keys
# and tags reach the reader exactly as a user writes them (yaml.safe_dump cannot write most of these). Anchors are
# named in document order; alias k names the k-th anchor already complete (without one, alias 5 names an
# enclosing anchor, a recursive alias, or an undefined one, and the others are a plain scalar).

Node = tuple[Any, ...]
SCALAR_TAGS = ["!!str", "!!int", "!!float", "!!bool", "!!null", "!!binary", "!!timestamp", "!custom",
               "!<tag:yaml.org,2002:int>", "!!python/object:os.system", "!!python/name:builtins.eval",
               "!!python/object/apply:os.system", "!!merge", "!"]
MAP_TAGS = ["!!map", "!!set", "!!omap", "!!seq", "!!python/object/new:dict", "!!str", "!local"]
SEQ_TAGS = ["!!seq", "!!omap", "!!pairs", "!!set", "!!map", "!!python/tuple", "!!binary"]
ODD_KEYS = ["1", "1.5", "true", "~", "null", "'<<'", '"a.b"', "a.b", "'$x'", '"${x}"', "''", '"é"', "'-'", "x y",
            "'2'", '"\\t"', "? a", "[a]", "{a: 1}", "*x", "&y z"]
SECTION_KEYS = ["model", "optimizer", "ddp", "env_vars", "policy", "megatron_cfg", "value", "teacher", "defaults",
                "MODEL_ARGS", "ENV_VARS", "_target_", "transformer", "model_overrides"]
PRINTABLE = st.text(alphabet=st.characters(blacklist_categories=("Cs", "Cc")), max_size=12)


def _double_quoted(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)  # a JSON string is a YAML double-quoted scalar (\ud83d is not)


def _single_quoted(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


SCALAR_TEXT = mostly(st.one_of(
    st.sampled_from(WORDS), st.sampled_from(INTERPOLATIONS).map(_single_quoted), PRINTABLE.map(_double_quoted),
    PRINTABLE.map(_single_quoted), st.sampled_from(["1e-5", "0.5", "8", "true", "core_attn", "full"]),
), st.one_of(
    st.text(max_size=6).map(_double_quoted),
    st.tuples(st.sampled_from(SCALAR_TAGS), st.sampled_from(WORDS + ["abc", "aGVsbG8=", "!!!", "''"])).map(" ".join),
    st.sampled_from(["|\n  block", ">-\n  folded", "'unterminated", '"bad \\q escape"', "a: b", "[", "{", "*",
                     "&", "@reserved", "`tick", "%", "#c", "- x", "-1e", "0b101", "+12", "1.2.3", "12e",
                     *INTERPOLATIONS]),
), 30)  # one hostile scalar makes the whole document an error: most documents have none
SCALAR = SCALAR_TEXT.map(lambda text: ("s", text))
ALIAS = st.integers(0, 5).map(lambda k: ("a", k))
KEY = mostly(st.one_of(st.sampled_from(MODEL_FIELDS), st.sampled_from(SECTION_KEYS)), ODD_KEYS, 30)


def _containers(inner: st.SearchStrategy[Node]) -> st.SearchStrategy[Node]:
    anchored = st.sampled_from([False, False, False, True])
    merged = st.one_of(ALIAS, st.lists(ALIAS, max_size=3).map(lambda a: ("l", a, True, False, None)), inner)
    pair = mostly(st.tuples(KEY, inner), st.tuples(st.just("<<"), merged), 15)
    return st.one_of(
        st.tuples(st.just("m"), st.lists(pair, max_size=5), st.booleans(), anchored,
                  mostly(st.none(), st.sampled_from(MAP_TAGS), 20)),
        st.tuples(st.just("l"), st.lists(inner, max_size=5), st.booleans(), anchored,
                  mostly(st.none(), st.sampled_from(SEQ_TAGS), 20)),
    )


NODE = st.recursive(mostly(SCALAR, ALIAS, 8), _containers, max_leaves=25)


def _is_block(node: Node) -> bool:
    return node[0] in ("m", "l") and not node[2] and bool(node[1])


class _Renderer:
    def __init__(self) -> None:
        self.count = 0
        self.open: list[str] = []  # anchors of the nodes being written
        self.closed: list[str] = []

    def alias(self, k: int) -> str:
        if self.closed:
            return "*" + self.closed[k % len(self.closed)]
        if k == 5:
            return "*" + (self.open[-1] if self.open else "undefined")  # recursive, or undefined
        return "x"

    def begin(self, node: Node) -> tuple[str, str | None]:
        name = None
        if node[3]:
            self.count += 1
            name = f"a{self.count}"
            self.open.append(name)
        return " ".join(p for p in (f"&{name}" if name else "", node[4] or "") if p), name

    def end(self, name: str | None) -> None:
        if name is not None:
            self.open.remove(name)
            self.closed.append(name)

    def inline(self, node: Node) -> str:
        if node[0] == "s":
            return str(node[1])
        if node[0] == "a":
            return self.alias(node[1])
        props, name = self.begin(node)
        if node[0] == "l":
            body = "[" + ", ".join(self.inline(item) for item in node[1]) + "]"
        else:
            body = "{" + ", ".join(f"{key}: {self.inline(value)}" for key, value in node[1]) + "}"
        self.end(name)
        return f"{props} {body}" if props else body

    def block(self, node: Node, indent: int = 0) -> list[str]:
        """Lines of a block mapping or sequence at ``indent``; a child's anchor and tag go on its key's line."""
        pad = " " * indent
        lines: list[str] = []
        for entry in node[1]:
            lead, child = (f"{pad}{entry[0]}:", entry[1]) if node[0] == "m" else (f"{pad}-", entry)
            if _is_block(child):
                props, name = self.begin(child)
                lines.append(f"{lead}{' ' + props if props else ''}")
                lines += self.block(child, indent + 2)
                self.end(name)
            else:
                lines.append(f"{lead} {self.inline(child)}")
        return lines


def render(node: Node) -> str:
    writer = _Renderer()
    if not _is_block(node):
        return writer.inline(node) + "\n"
    props, name = writer.begin(node)
    text = (f"--- {props}\n" if props else "") + "\n".join(writer.block(node)) + "\n"
    writer.end(name)
    return text


TOP = mostly(st.tuples(st.just("m"), st.lists(st.tuples(mostly(SECTION_KEYS, KEY, 3), NODE), min_size=1, max_size=5),
                       st.just(False), st.sampled_from([False, False, False, True]), st.none()), NODE, 4)


@cases("yaml_structures")
@given(top=TOP, flavor=mostly(["auto"], FLAVORS[1:], 4), assume_defaults=st.booleans())
@example(top=("m", [("model", ("s", "!!binary aGVsbG8="))], False, False, None), flavor="auto",
         assume_defaults=False)
@example(top=("m", [("model", ("m", [("cpu_offloading", ("s", "!!timestamp 2001-12-14"))], False, False, None))],
              False, False, None), flavor="auto", assume_defaults=True)
@example(top=("m", [("model", ("m", [("cpu_offloading", ("s", "true"))], False, False, "!!set"))],
              False, False, None), flavor="auto", assume_defaults=True)
@example(top=("m", [("model", ("m", [("cpu_offloading", ("s", "!!bool 2")), ("num_layers", ("s", "!!int ''")),
                                     ("optimizer_offload_fraction", ("s", "!!timestamp x"))], False, False, None))],
              False, False, None), flavor="auto", assume_defaults=True)
def test_yaml_structures(top: Node, flavor: str, assume_defaults: bool) -> None:
    argv = ["check", write(render(top)), "--flavor", flavor, "--format", "json"]
    argv += ["--assume-defaults"] if assume_defaults else []
    assert_answered(call(argv), argv)


@st.composite
def near_limits(draw: st.DrawFn) -> str:
    """Depth around MAX_DEPTH (64), alias and merge fan-out around 100,000 nodes, long scalars and keys, wide
    mappings, integers around 4,300 digits: the regions of reference/formats.md "Limits"."""
    kind = draw(st.sampled_from(["deep_flow", "deep_block", "alias_fanout", "merge_fanout", "long_scalar",
                                 "long_key", "wide", "digits", "many_docs", "long_interpolation"]))
    n = draw(st.integers(1, 8))
    if kind == "deep_flow":
        depth = draw(st.integers(55, 75))
        opener = draw(st.sampled_from(["[", "{a: "]))
        closer = "]" if opener == "[" else "}"
        return "model:\n  num_layers: " + opener * depth + "1" + closer * depth + "\n"
    if kind == "deep_block":
        depth = draw(st.integers(55, 75))
        return "".join(" " * i + f"k{i}:\n" for i in range(depth)) + " " * depth + "x: 1\n"
    if kind == "alias_fanout":
        width = draw(st.integers(2, 12))
        levels = draw(st.integers(2, 6))
        lines = ["l0: &l0 [" + ", ".join(["cpu_offloading"] * width) + "]"]
        lines += [f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * width) + "]" for i in range(1, levels)]
        return "model:\n  num_layers: 2\n" + "\n".join(lines) + "\n"
    if kind == "merge_fanout":
        width = draw(st.integers(2, 9))
        lines = ["a0: &a0 {" + ", ".join(f"k{j}: {j}" for j in range(width)) + "}"]
        lines += [f"a{i}: &a{i} {{" + ", ".join(f"m{j}: {{<<: *a{i - 1}}}" for j in range(width)) + "}"
                  for i in range(1, n + 1)]
        return "\n".join(lines) + f"\nmodel:\n  num_layers: 2\n  <<: *a{n}\n"
    if kind == "long_scalar":
        size = draw(st.sampled_from([1_000, 100_000, 1_000_000, 3_000_000]))
        return f"model:\n  cpu_offloading: {'x' * size}\n  offload_modules: [{'core_attn, ' * (size // 20)}]\n"
    if kind == "long_key":
        size = draw(st.sampled_from([100, 10_000, 1_000_000]))
        return f"model:\n  {'cpu_offloadin' + 'g' * size}: true\n"
    if kind == "wide":  # (5,000 unknown keys: test_unknown_keys_at_scale)
        unknown = draw(st.booleans())
        size = draw(st.sampled_from([50, 500, 2_000] if unknown else [100, 1_000, 3_000]))
        return "model:\n" + "".join(f"  {'cpu_offloadng' if unknown else 'k'}{i}: {i}\n" for i in range(size))
    if kind == "digits":
        digits = draw(st.integers(4_250, 4_350))
        sign = draw(st.sampled_from(["", "-", "+"]))
        return f"model:\n  num_layers: {sign}{'9' * digits}\n  optimizer_offload_fraction: 0.{'5' * digits}\n"
    if kind == "many_docs":
        return "model: {num_layers: 2}\n" + "---\nmodel: {num_layers: 3}\n" * n
    return "model:\n  num_layers: 2\n  cpu_offloading: '" + "${model.num_layers}" * draw(
        st.sampled_from([10, 1_000, 50_000])) + "'\n"


@cases("yaml_near_limits")
@given(text=near_limits(), flavor=st.sampled_from(FLAVORS))
def test_yaml_near_limits(text: str, flavor: str) -> None:
    argv = ["check", write(text), "--flavor", flavor, "--format", "json", "--assume-defaults"]
    assert_answered(call(argv), argv)


# --- (a) the three flavors' shapes --------------------------------------------------------------------------------


MODULES = ["core_attn", "attn_proj", "moe_act", "expert_fc1", "qkv_linear", "attn_norm", "mlp_norm", "typo"]
REALISTIC = st.one_of(st.sampled_from(WORDS), st.sampled_from(INTERPOLATIONS).map(_single_quoted),
                      st.integers(-3, 64).map(str), st.floats(0, 1.5).map(lambda f: f"{f:.3g}"),
                      st.lists(st.sampled_from(MODULES), max_size=4).map(lambda items: "[" + ", ".join(items) + "]"))
VALUE = mostly(REALISTIC.map(lambda text: ("s", text)), NODE, 6)


def _mapping(pairs: list[tuple[str, Node]], anchored: bool = False) -> Node:
    return ("m", pairs, False, anchored, None)


def fields(keys: st.SearchStrategy[str], max_size: int = 8) -> st.SearchStrategy[list[tuple[str, Node]]]:
    return st.lists(st.tuples(keys, VALUE), max_size=max_size, unique_by=lambda pair: pair[0])


@st.composite
def bridge_doc(draw: st.DrawFn) -> Node:
    pairs: list[tuple[str, Node]] = []
    if draw(st.booleans()):
        target = draw(mostly(["megatron.bridge.training.config.ConfigContainer"],
                             ["x.ConfigContainer", "ConfigContainer2", "${x}", ""], 2))
        pairs.append(("_target_", ("s", _double_quoted(target))))
    sections = draw(st.lists(mostly(["model", "optimizer", "ddp", "env_vars"], [
        "train", "mixed_precision", "comm_overlap", "checkpoint", "dist", "unknown"], 3), min_size=1, max_size=4,
        unique=True))
    for section in sections:
        if section == "env_vars":
            body = draw(fields(st.sampled_from(ENV_NAMES), 3))
        elif section == "mixed_precision" and draw(st.booleans()):
            pairs.append((section, ("s", draw(st.sampled_from(["bf16_mixed", "fp8_mixed", "nope", "null"])))))
            continue
        elif section == "model" and draw(st.integers(0, 3)) == 0:  # the nested GPTModelConfig layout
            body = [("transformer", _mapping(draw(fields(FIELD))))] + draw(fields(FIELD, 3))
        else:
            body = draw(fields(FIELD))
        if draw(st.integers(0, 4)) == 0:
            body.append(("_target_", ("s", draw(st.sampled_from(["megatron.bridge.models.GPTModelProvider",
                                                                 "torch.bfloat16", "os.system"])))))
        pairs.append((section, _mapping(list(dict(body).items()))))
    return _mapping(pairs)


SWITCH = mostly(st.sampled_from(["true", "false"]).map(lambda text: ("s", text)), VALUE, 4)


def _megatron_cfg(draw: st.DrawFn) -> Node:
    body = [("enabled", ("s", draw(mostly(["true"], ["false", "'true'", "null", "1"], 3))))]
    body += draw(fields(st.one_of(FIELD, st.sampled_from(NEMO_RL_FIELDS))))
    if draw(st.booleans()):
        body.append(("optimizer", _mapping(draw(fields(FIELD)))))
    if draw(st.booleans()):
        body.append(("model_overrides", _mapping(draw(fields(FIELD, 4)))))
    if draw(st.booleans()):
        body.append(("env_vars", _mapping(draw(fields(st.sampled_from(ENV_NAMES), 3)))))
    return _mapping(list(dict(body).items()))


@st.composite
def nemo_rl_doc(draw: st.DrawFn) -> Node:
    pairs: list[tuple[str, Node]] = []
    targets = draw(st.lists(mostly(["policy"], ["value", "teacher", "teachers", "on_policy_distillation", "loss_fn",
                                                "grpo"], 2), min_size=1, max_size=3, unique=True))
    for target in targets:
        model: list[tuple[str, Node]] = [("megatron_cfg", _megatron_cfg(draw))]
        if draw(st.booleans()):
            model.append(("model_name", ("s", draw(st.sampled_from(["Qwen/Qwen2.5-1.5B", "Qwen/Qwen3-30B-A3B",
                                                                    "meta-llama/Llama-3.1-8B", "nope/none",
                                                                    "${policy.model_name}"])))))
        if draw(st.booleans()):
            model.append(("precision", ("s", draw(mostly(["bfloat16"], ["float16", "fp8", "32", "x"], 2)))))
        if draw(st.integers(0, 3)) == 0:
            model.append(("dtensor_cfg", _mapping([("enabled", ("s", draw(st.sampled_from(["true", "false",
                                                                                         "maybe"]))))])))
        if target == "policy" and draw(st.booleans()):
            model.append(("generation", _mapping([
                ("backend", ("s", draw(mostly(["megatron", "vllm"], ["x", "null", "[]"], 4)))),
                ("colocated", _mapping([("enabled", draw(SWITCH))])),
                ("mcore_generation_config", _mapping(draw(fields(FIELD, 3))))])))
        if target == "policy" and draw(st.integers(0, 3)) == 0:
            model.append(("reward_model_cfg", _mapping([("enabled", draw(SWITCH))])))
        if target == "teachers":
            pairs.append((target, ("l", [_mapping(model)] * draw(st.integers(0, 3)), False, False, None)))
        elif target == "on_policy_distillation":  # MOPD: one teacher model per distinct checkpoint
            names = draw(st.lists(VALUE, max_size=3))
            pairs.append((target, _mapping([
                ("enabled", draw(SWITCH)), ("non_colocated_teachers", _mapping([("enabled", draw(SWITCH))])),
                ("deduplicate_shared_teacher_checkpoints", draw(SWITCH)),
                ("teacher_model_by_agent_name", _mapping([(f"agent{i}", name) for i, name in enumerate(names)])),
                *model])))
        else:
            pairs.append((target, _mapping(model)))
    return _mapping(pairs)


@st.composite
def megatron_lm_doc(draw: st.DrawFn) -> Node:
    table = mlm_flag_table(draw(st.sampled_from(VERSIONS)))
    flags = mostly(sorted(table.flags), ["--cpu-offloading-num-layer", "--no-such-flag", "-x", "--", "num"], 6)
    pairs: list[tuple[str, Node]] = []
    if draw(st.booleans()):
        pairs.append(("ENV_VARS", _mapping(draw(fields(st.sampled_from(ENV_NAMES), 3)))))
    runs = draw(st.lists(mostly(["MODEL_ARGS"], ["MODEL_ARGS_2", "MODEL_ARGS_10", "MODEL_ARGS_99999999999999999999"],
                                3), min_size=1, max_size=2, unique=True))
    for run in runs:
        pairs.append((run, _mapping(draw(st.lists(st.tuples(flags, VALUE), max_size=10)))))
    for key in draw(st.lists(st.sampled_from(["TEST_TYPE", "MODE", "trainer.max_steps"]), max_size=2, unique=True)):
        pairs.append((key, ("s", draw(st.sampled_from(["regular", "ckpt-resume", "1"])))))
    return _mapping(pairs)


@cases("flavor_shapes")
@given(doc=st.one_of(bridge_doc(), nemo_rl_doc(), megatron_lm_doc()), flavor=mostly(["auto"], FLAVORS, 3),
       version=st.sampled_from(VERSIONS), assume_defaults=st.booleans(), strict=st.booleans(),
       env=st.lists(st.sampled_from(["NVTE_CPU_OFFLOAD_V1=1", "NVTE_CPU_OFFLOAD_V1=0", f"X={SENTINEL_REF}",
                                     "X=1"]), max_size=2))
def test_flavor_shapes(doc: Node, flavor: str, version: str, assume_defaults: bool, strict: bool,
                       env: list[str]) -> None:
    argv = ["check", write(render(doc)), "--flavor", flavor, "--mcore-version", version, "--format", "json"]
    argv += ["--assume-defaults"] * assume_defaults + ["--strict"] * strict
    argv += [a for text in env for a in ("--env", text)]
    assert_answered(call(argv), argv)


PLAIN_FIELDS = st.lists(st.tuples(FIELD, REALISTIC.map(lambda text: ("s", text))), max_size=6,
                        unique_by=lambda pair: pair[0])
# A file of a chain: mostly a policy's megatron_cfg of plausible values (each file overrides some), else any shape.
CHAIN_BODY = mostly(st.builds(lambda body, opt: render(_mapping([("policy", _mapping([("megatron_cfg", _mapping(
    [("enabled", ("s", "true")), *body, ("optimizer", _mapping(opt))]))]))])), PLAIN_FIELDS, PLAIN_FIELDS),
    st.one_of(nemo_rl_doc().map(render), st.just("policy: {}\n")), 3)
DEFAULTS_FILES = ["child.yaml", "base.yaml", "sub/mid.yaml", "sub/deeper/leaf.yaml", "other.yml"]


@st.composite
def defaults_chain(draw: st.DrawFn) -> list[tuple[str, str]]:
    """Up to five files, in a directory and sub-directories, each naming parents by `defaults:` (relative to
    itself): chains and diamonds over the files after it; in about one chain in four, one file names something
    else: a file before it (a loop), itself, a missing file, a directory, an absolute path, or a value that is
    not a path."""
    count = draw(st.integers(1, 5))
    names = DEFAULTS_FILES[:count]
    hostile = draw(mostly([None], list(range(count)), 3))
    files: list[tuple[str, str]] = []
    for index, name in enumerate(names):
        here = Path(name).parent

        def relative(target: str, here: Path = here) -> str:
            return os.path.relpath(target, here)

        later = names[index + 1:]
        if index == hostile:
            odd = st.one_of(st.sampled_from(names[:index + 1]).map(relative), st.sampled_from(
                ["missing.yaml", "sub", ".", "", "/dev/null", "/", "${x}", "../../../../etc/hostname", "sub/",
                 NEMO_CONFIG]))
            parent = mostly(st.sampled_from(later).map(relative), odd, 1) if later else odd
            one = mostly(parent.map(_double_quoted), ["1", "null", "{a: b}", "[[a.yaml]]", "true", "''", "[]"], 3)
        elif later:
            parent = st.sampled_from(later).map(relative)
            one = parent.map(_double_quoted)
        else:
            files.append((name, draw(CHAIN_BODY)))
            continue
        lists = st.lists(parent, min_size=1, max_size=3).map(lambda items: "[" + ", ".join(map(_double_quoted,
                                                                                             items)) + "]")
        defaults = draw(mostly(one, lists, 2))
        files.append((name, f"defaults: {defaults}\n" + draw(CHAIN_BODY)))
    return files


@cases("defaults_chains")
@given(files=defaults_chain(), sets=st.lists(st.sampled_from([
    "policy.megatron_cfg.optimizer.optimizer_cpu_offload=true", "~policy.megatron_cfg", "+defaults=x.yaml",
    "++policy.megatron_cfg.fine_grained_activation_offloading=true", "defaults=null"]), max_size=2))
def test_nemo_rl_defaults_chains(files: list[tuple[str, str]], sets: list[str]) -> None:
    directory = case_dir()
    for name, text in files:
        write(text, name, directory)
    argv = ["check", str(directory / files[0][0]), "--format", "json"] + [a for s in sets for a in ("--set", s)]
    assert_answered(call(argv), argv)


# --- (a) shell launch scripts -------------------------------------------------------------------------------------

RECIPES = ["llama3_8b_pretrain_config", "qwen3_30b_a3b_pretrain_config", "llama3_8b", "deepseek_v3_pretrain_config"]
ODD_RECIPES = ["nope_config", "${RECIPE}", "", "llama3_8b_pretrain_config ", "a" * 300]
NEMO_CONFIG = str(EXAMPLES / "nemo-rl" / "grpo_megatron_base.yaml")
SHELL_OVERRIDES = ["model.cpu_offloading=True", "model.cpu_offloading_num_layers=12",
                   "optimizer.optimizer_cpu_offload=true", "'model.offload_modules=[core_attn,attn_proj]'",
                   "++model.x=1", "~model.cpu_offloading", "model.num_layers=${N}",
                   "\"model.recompute_granularity=${G:-full}\"", "optimizer.optimizer_offload_fraction=0.5",
                   "++env_vars.NVTE_CPU_OFFLOAD_V1=1"]
NEMO_OVERRIDES = ["policy.megatron_cfg.fine_grained_activation_offloading=true",
                  "'policy.megatron_cfg.offload_modules=[moe_act]'", "++policy.megatron_cfg.env_vars.X=1",
                  "policy.megatron_cfg.optimizer.optimizer_cpu_offload=true",
                  "policy.megatron_cfg.optimizer.optimizer_offload_fraction=${F:-1.0}", "policy.model_name=x/y"]
ODD_OVERRIDES = ["a=b=c", "=", "+", "x", "'", "model.cpu_offloading=$(echo true)", "model.x=[", "--set", "-pp"]


def _flag_words(version: str) -> st.SearchStrategy[str]:
    table = mlm_flag_table(version)
    offload = ["--cpu-offloading-num-layers", "--optimizer-cpu-offload", "--optimizer-offload-fraction",
               "--offload-modules", "--fine-grained-activation-offloading", "--num-layers", "--recompute-activations",
               "--no-pin-cpu-grads", "--cpu-offloading-num-layers=2", "--pipeline-model-parallel-size", "--bf16",
               "--use-distributed-optimizer", "--overlap-cpu-optimizer-d2h-h2d", "--cuda-graph-impl"]
    return mostly(st.one_of(st.sampled_from(offload), st.sampled_from(sorted(table.flags)), st.sampled_from(WORDS)),
                  ["--optimizer-cpu-ofload", "$N", "${N:-4}", "\"${ARGS[@]}\"", "$ARGS", "$(nproc)", "`hostname`",
                   "--", "-", "'a b'", '"c d"'], 6)


SCRIPT_LINES = ["unset N", "cd /opt/Megatron-Bridge", "cd $HOME", "cd ..", "cd", "cd -", "pushd /x",
                "if [ -n \"$N\" ]; then", "fi", "for i in 1 2; do", "done", "cat <<EOF\n--num-layers 2\nEOF",
                "echo hi > /dev/null 2>&1", "a && b || c", "x | y", "sleep 1 &", "# comment with --num-layers 3",
                "declare -a ARR=(1 2)", "readonly N=8", "local A=1", "{ echo; }", "(subshell)", "$((1 + 2))",
                "case $x in a) ;; esac", "function f() {", "}", "A=x; A=\"$A$A\"; A=\"$A$A\"",
                "B=${B:-${C:-${D:-1}}}"]
ODD_SCRIPT_LINES = ["cat <<'EOF'", "\\", "'", "\"", "${", "$(", "`", "${N:-${"]


@st.composite
def launch_script(draw: st.DrawFn) -> str:
    version = draw(st.sampled_from(VERSIONS))
    flag = _flag_words(version)
    lines: list[str] = [draw(st.sampled_from(["#!/bin/bash", "#!/usr/bin/env bash", "", "set -euo pipefail"]))]
    for _ in range(draw(st.integers(0, 6))):
        lines.append(draw(st.one_of(
            st.builds(lambda n, v: f"{n}={v}", st.sampled_from(["N", "ARGS", "G", "RECIPE", "CFG", "A", "F",
                                                                SENTINEL_NAME]),
                      mostly(["4", "full", "\"--num-layers 8 --bf16\"", "'$N'", "$N", "${N}2", "0.5",
                              "(\n  --num-layers 4\n  --bf16\n)", "( a 'b c' )"],
                             st.one_of(st.sampled_from(["\"$A$A\"", "$(date)", "", "\"unterminated"]),
                                       PRINTABLE.map(shlex.quote)), 3)),
            st.builds(lambda n, v: f"export {n}={v}", st.sampled_from(["NVTE_CPU_OFFLOAD_V1", "X", "N", "1BAD"]),
                      st.sampled_from(["1", "0", "$N", "\"a b\"", ""])),
            mostly(SCRIPT_LINES, ODD_SCRIPT_LINES, 12),
        )))
    wrapper = draw(mostly(["", "torchrun --nproc-per-node=8 ", "torchrun --nproc_per_node 8 --nnodes 2 ", "python ",
                           "python3 -u ", "uv run ", "uv run --extra mcore ", "srun -N 2 ", "srun --ntasks 8 python ",
                           "env A=1 python ", "NRL_X=1 uv run ", "python -m torch.distributed.run --nproc-per-node 2 ",
                           "bash -c "],
                          ["exec ", "nohup python ", "torchrun --no-python ", "python -m ", "python -c ", "time ",
                           "sh -c ", "env -u X ", "uv run -m "], 3))
    program = draw(mostly(["pretrain_gpt.py", "pretrain_mamba.py", "scripts/training/run_recipe.py",
                           "examples/run_grpo.py", "examples/run_sft.py", "./scripts/training/train.sh",
                           "scripts/performance/setup_experiment.py"],
                          ["examples/run_distillation.py", "megatron.bridge.x", "train.py", "echo", "$SCRIPT",
                           "run_recipe.py", "examples/run_dpo.py"], 4))
    args: list[str] = []
    if "run_recipe" in program or "setup_experiment" in program or "train.sh" in program:
        if draw(st.integers(0, 4)):
            args += [draw(mostly(["--recipe"], ["--model", "--recipe=", "--mode"], 4)),
                     draw(mostly(RECIPES, [*ODD_RECIPES, "pretrain", "finetune"], 4))]
        args += draw(st.lists(mostly(SHELL_OVERRIDES, ODD_OVERRIDES + [
            "-pp", "2", "-tp", "--nodes", "1", "--dataset", "mock", "--gpus-per-node", "8", "--help", "--seq_length",
            "--packed-sequence", "--hf-token"], 4), max_size=6))
    elif "examples/run_" in program:
        if draw(st.integers(0, 4)):
            args += ["--config", draw(mostly([NEMO_CONFIG, "$CFG"], ["missing.yaml", "examples/configs/grpo.yaml",
                                                                     "/dev/null", str(EXAMPLES / "bridge")], 4))]
        args += draw(st.lists(mostly(NEMO_OVERRIDES, ODD_OVERRIDES, 4), max_size=5))
    else:
        args += draw(st.lists(flag, max_size=10))
    command = program + " " + " ".join(args)
    if wrapper.endswith("-c "):
        command = shlex.quote(command)
    continuation = draw(st.sampled_from([" ", " \\\n    "]))
    lines.append(wrapper + command.replace(" ", continuation, draw(st.integers(0, 3))))
    lines += draw(st.lists(st.sampled_from(["", "wait", "echo done", "python pretrain_gpt.py --num-layers 2"]),
                           max_size=2))
    return "\n".join(lines) + "\n"


@cases("launch_scripts")
@given(script=launch_script(), how=st.sampled_from(["file", "file", "command", "after_dashdash"]),
       cwd=mostly([None], [str(ROOT), "/nonexistent", str(EXAMPLES / "nemo-rl" / "grpo_offload.yaml")], 3),
       env=st.lists(st.sampled_from(["N=4", "CFG=" + NEMO_CONFIG, "RECIPE=llama3_8b_pretrain_config",
                                     f"ARGS={SENTINEL_REF}", "F=0.5"]), max_size=2),
       sets=st.lists(st.sampled_from(SHELL_OVERRIDES[:6] + NEMO_OVERRIDES[:3]), max_size=2))
@example(script="#!/bin/bash\nA=x\n" + "A=\"$A$A\"\n" * 40 + "python pretrain_gpt.py --num-layers 2 $A\n",
         how="file", cwd=None, env=[], sets=[])
@example(script="#!/bin/bash\n" + "a;" * 100_000 + "\n", how="file", cwd=None, env=[], sets=[])
@example(script="#!/bin/bash\npython pretrain_gpt.py --num-layers " + "9" * 200_000 + "\n", how="file", cwd=None,
         env=[], sets=[])
@example(script="python pretrain_gpt.py --num-layers " + "${A:-" * 3000 + "1" + "}" * 3000, how="command",
         cwd=None, env=[], sets=[])
@example(script="python pretrain_gpt.py --bf16\n" * 100, how="file", cwd=None, env=[], sets=[])
@example(script="python scripts/training/run_recipe.py --recipe llama3_8b_pretrain_config --help", how="command",
         cwd=None, env=[], sets=[])
def test_launch_scripts(script: str, how: str, cwd: str | None, env: list[str], sets: list[str]) -> None:
    if how == "file":
        argv = ["check", write(script, "launch.sh")]
    elif how == "command":
        argv = ["check", "--command", script]
    else:
        try:
            words = shlex.split(script, comments=True)
        except ValueError:
            words = script.split()
        argv = ["check", "--format", "json", "--", *words]
    options = ["--format", "json"] if how != "after_dashdash" else []
    options += ["--cwd", cwd] if cwd else []
    options += [a for text in env for a in ("--env", text)] + [a for s in sets for a in ("--set", s)]
    if how == "after_dashdash":
        argv = argv[:1] + options + argv[1:]
    else:
        argv += options
    assert_answered(call(argv), argv)


# --- (b) --set KEY=VALUE ----------------------------------------------------------------------------------------

BRIDGE_KEYS = ["model.cpu_offloading", "model.cpu_offloading_num_layers", "model.offload_modules",
               "model.fine_grained_activation_offloading", "optimizer.optimizer_cpu_offload",
               "optimizer.optimizer_offload_fraction", "model.num_layers", "model.transformer.num_layers",
               "env_vars.NVTE_CPU_OFFLOAD_V1", "model", "optimizer", "_target_", "model._target_",
               "model.recompute_granularity", "model.pipeline_model_parallel_size", "ddp.use_distributed_optimizer",
               "optimizer.use_precision_aware_optimizer", "model.cuda_graph_impl", "mixed_precision"]
NEMO_RL_KEYS = ["policy.megatron_cfg.optimizer.optimizer_cpu_offload",
                "policy.megatron_cfg.optimizer.optimizer_offload_fraction",
                "policy.megatron_cfg.fine_grained_activation_offloading", "policy.megatron_cfg.offload_modules",
                "policy.megatron_cfg.model_overrides.cpu_offloading", "policy.megatron_cfg.env_vars.X",
                "policy.megatron_cfg.env_vars.NVTE_CPU_OFFLOAD_V1", "policy.megatron_cfg", "policy",
                "value.megatron_cfg.enabled", "teacher.megatron_cfg.enabled", "policy.model_name",
                "policy.megatron_cfg.activation_checkpointing", "policy.megatron_cfg.enabled", "defaults"]
ODD_OVERRIDE_KEYS = ["model.cpu_offloading.x", "model.offload_modules.0", "a", "a.b.c.d.e.f", "0", "0.x", "$x", "x-y",
                     "a..b", "a.", ".a", "a/b", "a@b", "a@", "db/mysql@pkg", "é", "", "a b", "a=b", "MODEL_ARGS",
                     "model.k" + "x" * 3000]


def _override_value(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return mostly(st.one_of(
        st.builds(lambda items: "[" + ",".join(items) + "]", st.lists(inner, max_size=4)),
        st.builds(lambda pairs: "{" + ",".join(f"{k}:{v}" for k, v in pairs) + "}",
                  st.lists(st.tuples(mostly(["a", "cpu_offloading", "enabled"], ["1", "true", "a\\ b", "'q'", ""]),
                                     inner), max_size=3))), st.one_of(
        st.builds(lambda a, b: f"{a},{b}", inner, inner),
        st.builds(lambda f, a: f"{f}({a})", st.sampled_from(["int", "float", "str", "bool", "choice", "range",
                                                            "glob", "interval", "shuffle", "sort", "tag", "f"]),
                  inner),
        st.builds(lambda a: f" {a} ", inner),
    ), 4)


OVERRIDE_PRIMITIVE = mostly(st.one_of(st.sampled_from(WORDS), st.sampled_from(INTERPOLATIONS)), st.one_of(
    st.sampled_from(["'quoted'", '"dq"', "'it\\'s'", '"\\"x\\""', "'unterminated", "'a\\\\'", "a\\,b", "a\\ b",
                     "\\", "1_0", "+1", "-inf", "NaN", "1e1_0", "0x1", "  ", "", "a b c", "${a}b", "a${b}", "=", "a=b",
                     "@", "%", "*", "?", "|", "\t", "'\t'", "null", "Null", "nULL", "\u212a", "١", "9" * 5000,
                     "'" * 3000, "[" * 3000]),
    PRINTABLE), 3)
OVERRIDE_VALUE = st.recursive(OVERRIDE_PRIMITIVE, _override_value, max_leaves=10)


@st.composite
def override_text(draw: st.DrawFn, keys: Sequence[str]) -> str:
    if draw(st.integers(0, 14)) == 0:
        return draw(PRINTABLE)
    prefix = draw(mostly(["", "", "+", "++", "~"], ["+++", "~~", "~+", " "], 6))
    key = draw(mostly(st.one_of(st.sampled_from(list(keys)), st.sampled_from(list(keys)),
                                st.builds(".".join, st.lists(FIELD, min_size=1, max_size=3))),
                      ODD_OVERRIDE_KEYS, 5))
    if prefix == "~" and draw(st.booleans()):
        return f"~{key}"
    separator = draw(mostly(["="], ["= ", "==", ":", ""], 6))
    return f"{prefix}{key}{separator}{draw(OVERRIDE_VALUE)}"


BRIDGE_BASES = [None, str(EXAMPLES / "bridge" / "run_config_broken.yaml"),
                str(EXAMPLES / "bridge" / "run_config_clean.yaml"),
                str(EXAMPLES / "bridge" / "override_optimizer_offload.yaml")]
NEMO_RL_BASES = [None, str(EXAMPLES / "nemo-rl" / "grpo_offload.yaml"),
                 str(EXAMPLES / "nemo-rl" / "ppo_value_model.yaml")]


@st.composite
def override_case(draw: st.DrawFn) -> list[str]:
    nemo = draw(st.booleans())
    base = draw(st.sampled_from(NEMO_RL_BASES if nemo else BRIDGE_BASES))
    overrides = draw(st.lists(override_text(NEMO_RL_KEYS if nemo else BRIDGE_KEYS), min_size=1, max_size=4))
    flavor = draw(mostly(["auto"], ["nemo-rl" if nemo else "bridge", "megatron-lm", "bridge" if nemo else "nemo-rl"],
                         4))
    argv = ["check"] + ([base] if base else []) + [a for text in overrides for a in ("--set", text)]
    argv += ["--flavor", flavor, "--format", "json"]
    if not nemo and draw(st.integers(0, 2)) == 0:
        argv += ["--recipe", draw(mostly(RECIPES, ODD_RECIPES, 4))]
    argv += ["--emit-overrides"] * (draw(st.integers(0, 3)) == 0) + ["--assume-defaults"] * draw(st.booleans())
    return argv


@cases("overrides")
@given(argv=override_case())
@example(argv=["check", "--set", "model.cpu_offloading=" + "'" * 3000, "--flavor", "bridge", "--format", "json"])
@example(argv=["check", "--set", "model.x=" + "[" * 3000, "--flavor", "bridge", "--format", "json"])
@example(argv=["check", "--set", "model.x=" + "[" * 50 + "]" * 50, "--flavor", "bridge", "--format", "json"])
def test_overrides(argv: list[str]) -> None:
    assert_answered(call(argv), argv)


# --- (c) Megatron-LM --argv ---------------------------------------------------------------------------------------


@st.composite
def argv_text(draw: st.DrawFn) -> tuple[str, str]:
    version = draw(st.sampled_from(VERSIONS))
    table = mlm_flag_table(version)
    flags = sorted(table.flags)
    offload = [f for f in flags if any(w in f for w in ("offload", "recompute", "pipeline", "cuda-graph", "layers",
                                                        "distributed-optimizer", "precision-aware"))]
    words: list[str] = []
    for _ in range(draw(st.integers(0, 14))):
        choice = draw(st.integers(0, 9))
        if choice <= 6:
            flag = draw(mostly(offload, flags, 2))
            spec = table.flags[flag]
            if spec.choices and draw(st.integers(0, 3)):
                value = str(draw(st.sampled_from(list(spec.choices))))
            elif spec.type in ("int", "float") and draw(st.integers(0, 3)):
                value = str(draw(st.one_of(st.integers(-2, 64), st.floats(0, 2).map(lambda f: round(f, 3)))))
            else:
                value = draw(st.sampled_from(WORDS))
            form = draw(mostly(["plain"], ["equals", "bare", "abbrev", "underscore", "no", "repeat"], 6))
            if form == "equals":
                words.append(f"{flag}={value}")
            elif form == "bare" or (form == "plain" and not spec.takes_value):
                words.append(flag)
            elif form == "abbrev":
                words += [flag[: max(3, len(flag) // 2)], value]
            elif form == "underscore":
                words += ["--" + flag.lstrip("-").replace("-", "_"), value]
            elif form == "no":
                words.append("--no-" + flag.lstrip("-"))
            elif form == "repeat":
                words += [flag] + [value] * draw(st.integers(2, 3))
            else:
                words += [flag, value]
        elif choice <= 8:
            words.append(draw(st.sampled_from(WORDS + ["--", "-", "-1", "-.5", "-x", "--=", "--a=b=c", "''", '""',
                                                       "$X", "${X:-1}", "`x`", "#", "#comment --num-layers 2", "\\",
                                                       "torchrun", "pretrain_gpt.py", "--nproc_per_node", "8"])))
        else:
            words.append(draw(PRINTABLE))
    quoting = draw(mostly(["shlex"], ["raw"], 3))
    return version, (shlex.join(words) if quoting == "shlex" else " ".join(words))


@cases("argv")
@given(case=argv_text(), flavor=mostly(["megatron-lm", "auto"], ["bridge", "nemo-rl"], 12),
       script=mostly([None, str(EXAMPLES / "megatron-lm" / "functional_test_fine_grained.yaml")],
                     [str(EXAMPLES / "megatron-lm" / "pretrain_gpt_offload.sh")], 8),
       emit=st.booleans(), env=st.lists(mostly(["NVTE_CPU_OFFLOAD_V1=1", "NVTE_CPU_OFFLOAD_V1=0"], ["=1", "X"], 12),
                                        max_size=1))
@example(case=("0.16.1", "--num-layers " + "9" * 5000), flavor="megatron-lm", script=None, emit=False, env=[])
@example(case=("0.16.1", "--help"), flavor="megatron-lm", script=None, emit=False, env=[])
@example(case=("main", "--optimizer-offload-fraction nan --cpu-offloading-num-layers -1"), flavor="megatron-lm",
         script=None, emit=True, env=[])
def test_megatron_lm_argv(case: tuple[str, str], flavor: str, script: str | None, emit: bool, env: list[str]) -> None:
    version, text = case
    argv = ["check"] + ([script] if script else []) + [f"--argv={text}", "--flavor", flavor, "--mcore-version",
                                                        version, "--format", "json"]
    argv += ["--emit-overrides"] * emit + [a for e in env for a in ("--env", e)]
    assert_answered(call(argv), argv)


# --- (d) check options ------------------------------------------------------------------------------------------

MCORE_VERSIONS = [*VERSIONS, "main", "dev", "0.16", "0.16.0", "v0.16.1", "0.16.x", "0.16.1rc1", "14346b65"]
ODD_MCORE_VERSIONS = ["core_v0.16.1", "0.13.0", "0.99.1", "1.0", "main@deadbeef", "main@", "", " ", " 0.16.1 ", "x",
                      "0.", "-1", "0.16.1.2", "9" * 400 + ".1", "main@" + "f" * 40, "é", "0.1e3"]
TE_VERSIONS = ["2.10", "2.9", "none", "None", "absent", "0", "2.10.0", "2.10.0.dev0+abc", "v2.10", " 2.10"]
ODD_TE_VERSIONS = ["2", "abc", "", "-1.0", "1e3", "2.x", "nan", "9" * 400 + ".1"]
NEMO_RL_OPTIONS = [*NEMO_RL_VERSIONS, "0.4", "v0.7.0", "dev", "0.7.1"]
ODD_NEMO_RL_OPTIONS = ["0.3.0", "0.8", "", "x", "main@7ea279ab", "9" * 400 + ".1"]
INPUTS: list[list[str]] = [
    [str(EXAMPLES / "bridge" / "run_config_broken.yaml")],
    [str(EXAMPLES / "bridge" / "override_optimizer_offload.yaml")],
    [str(EXAMPLES / "nemo-rl" / "grpo_offload.yaml")], [str(EXAMPLES / "nemo-rl" / "ppo_value_model.yaml")],
    [str(EXAMPLES / "megatron-lm" / "pretrain_gpt_offload.sh")],
    [str(EXAMPLES / "megatron-lm" / "functional_test_fine_grained.yaml")],
    [str(EXAMPLES / "launch" / "bridge_qwen3_moe_broken.sh")], [str(EXAMPLES / "launch" / "nemo_rl_grpo_broken.sh")],
    [str(EXAMPLES / "bridge" / "run_config_clean.yaml"), str(EXAMPLES / "bridge" / "override_nested_layout.yaml")],
    ["--set", "model.cpu_offloading=true"], ["--set", "policy.megatron_cfg.optimizer.optimizer_cpu_offload=true"],
    ["--argv=--num-layers 4 --cpu-offloading-num-layers 2"], ["--command", "torchrun pretrain_gpt.py --num-layers 2"],
    ["--command", "python scripts/training/run_recipe.py --recipe llama3_8b_pretrain_config model.cpu_offloading=1"],
    ["--", "uv", "run", "examples/run_grpo.py", "--config", NEMO_CONFIG], ["--recipe", "llama3_8b_pretrain_config"],
]
ODD_INPUTS: list[list[str]] = [
    [str(EXAMPLES / "nemo-rl" / "grpo_offload.yaml"), str(EXAMPLES / "bridge" / "run_config_clean.yaml")], [],
    ["/nonexistent.yaml"], [str(EXAMPLES)], [str(EXAMPLES / "manifest.yaml")],
    [str(EXAMPLES / "launch" / "bridge_qwen3_moe_broken.sh"), "--argv=--bf16"],
]
CHECK_OPTIONS: list[tuple[str, list[str], list[str]]] = [
    ("--flavor", FLAVORS, ["Bridge", "", "nemo_rl"]), ("--mcore-version", MCORE_VERSIONS, ODD_MCORE_VERSIONS),
    ("--te-version", TE_VERSIONS, ODD_TE_VERSIONS), ("--nemo-rl-version", NEMO_RL_OPTIONS, ODD_NEMO_RL_OPTIONS),
    ("--recipe", RECIPES, ODD_RECIPES),
    ("--cwd", [str(ROOT), "."], ["/nonexistent", "", str(EXAMPLES / "manifest.yaml")]),
    ("--command", ["torchrun pretrain_gpt.py --num-layers 2 --cpu-offloading-num-layers 1",
                   "bash -c 'bash -c \"python pretrain_gpt.py --num-layers 2\"'"],
     ["", "echo hi", "python -c 'x'", "torchrun", "'", "pretrain_gpt.py " * 50]),
    ("--format", ["json", "json", "text"], ["markdown", ""]),
]


@st.composite
def check_argv(draw: st.DrawFn) -> list[str]:
    given = list(draw(mostly(INPUTS, ODD_INPUTS, 6)))
    options: list[str] = []
    for name, good, odd in CHECK_OPTIONS:
        if draw(st.integers(0, 3)) == 0:
            options += [name, draw(mostly(good, odd, 5))]
    for _ in range(draw(st.integers(0, 2))):
        options += ["--env", draw(mostly(["NVTE_CPU_OFFLOAD_V1=1", "NVTE_CPU_OFFLOAD_V1=0", "NVTE_CPU_OFFLOAD_V1=",
                                          "A=B=C", f"{SENTINEL_NAME}=x", "é=1"],
                                         st.one_of(st.sampled_from(["=1", "X", " =1"]), PRINTABLE), 4))]
    options += [flag for flag in ("--strict", "--assume-defaults", "--emit-overrides") if draw(st.booleans())]
    options += draw(mostly([[]], [["--argv", "--x"], ["--argv=--"], ["--argv="], ["--set"], ["--unknown"],
                                  ["--set", "=x"], ["--flavor"], ["--te-version"], ["--format", "json", "--strict"]],
                           8))
    if "--" in given:
        cut = given.index("--")
        return ["check", *given[:cut], *options, *given[cut:]]
    return ["check", *(given + options if draw(st.booleans()) else options + given)]


@cases("check_options")
@given(argv=check_argv())
def test_check_options(argv: list[str]) -> None:
    assert_answered(call(argv), argv)


# --- (e) plan options -------------------------------------------------------------------------------------------

PRESET_NAMES = [*PRESETS, "Qwen/Qwen3-8B", "Qwen/Qwen2.5-1.5B", "meta-llama/Llama-3.1-8B", "policy=llama3-8b"]
ODD_PRESET_NAMES = ["nope/none", "", "/", "value=llama3-8b", "=llama3-8b", "policy=", "a=b=llama3-8b", "LLAMA3-8B"]
COUNTS = ["1", "2", "4", "8", "16", "64", "256", "1024", "4096", "8192", "10000000"]
ODD_COUNTS = ["0", "-1", "1.5", "abc", "", "1e3", "10000001", "9" * 30, "inf", "nan", "0x8", " 8", "٨"]
FLOATS = ["0", "0.1", "0.05", "0.3", "0.5", "0.99", "1e-300", "0.0001"]
ODD_FLOATS = ["1", "-0.1", "1.5", "nan", "inf", "-inf", "1e308", "abc", "", "1_0", "-0"]
MEMORY = ["16", "24", "40", "80", "141", "192", "0.5", "1048575", "1e-3"]
ODD_MEMORY = ["0", "-1", "nan", "inf", "1048576", "1e308", "abc", ""]
PLAN_INPUTS: list[list[str]] = [
    [], [], [str(EXAMPLES / "bridge" / "run_config_clean.yaml")], [str(EXAMPLES / "nemo-rl" / "grpo_offload.yaml")],
    [str(EXAMPLES / "nemo-rl" / "ppo_value_model.yaml")], [str(EXAMPLES / "megatron-lm" / "pretrain_gpt_offload.sh")],
    [str(EXAMPLES / "bridge" / "run_config_broken.yaml")],
    ["--argv=--num-layers 4 --hidden-size 256 --num-attention-heads 4"],
    ["--recipe", "llama3_8b_pretrain_config"],
    ["--command", "python scripts/training/run_recipe.py --recipe llama3_8b"],
]
PLAN_SETS = ["model.tensor_model_parallel_size=2", "model.num_layers=8", "model.pipeline_model_parallel_size=4",
             "optimizer.optimizer_cpu_offload=true", "optimizer.optimizer_offload_fraction=0.5",
             "model.cpu_offloading=true", "model.recompute_granularity=full",
             "policy.megatron_cfg.tensor_model_parallel_size=2"]
ODD_PLAN_SETS = ["model.tensor_model_parallel_size=0", "model.tensor_model_parallel_size=3", "model.num_layers=7",
                 "model.seq_length=1", "model.hidden_size=1", "model.num_attention_heads=0",
                 "model.num_layers=1000000000", "policy.megatron_cfg.context_parallel_size=0", "model.hidden_size=-8",
                 "model.num_moe_experts=3", "model.seq_length=" + "9" * 30]


@st.composite
def profile_text(draw: st.DrawFn) -> str:
    keys = ["base", "gpu_memory_bytes", "d2h_bytes_per_s", "h2d_bytes_per_s", "host_memory_bytes",
            "host_memory_bytes_per_s", "gpus_per_node", "host_adam_elements_per_s", "name", "extra"]
    good = st.sampled_from([8, 4, 80 * 2**30, 141 * 2**30, 2 * 10**12, 25e9, 5.5e9, 1e9])
    odd: st.SearchStrategy[Any] = st.sampled_from([0, 1, -1, 0.5, 1e300, -1e300, 10 ** 30, True, False, None, "8",
                                                   [], {}, 2**63, 1e-300, "nope", ""])
    document = draw(st.dictionaries(st.sampled_from(keys), mostly(good, odd, 3), max_size=6))
    if draw(st.booleans()):
        document["base"] = draw(mostly(list(HARDWARE), ["nope", "", 1, None], 6))
    text = json.dumps(document)
    return draw(mostly([text], ["[]", "", "{", "NaN", '{"gpus_per_node": NaN}', '{"a": 1e999}',
                                "[" * 5000 + "]" * 5000, '{"base": "h100-sxm", "gpu_memory_bytes": 1e999}'], 4))


@st.composite
def plan_argv(draw: st.DrawFn) -> list[str]:
    given = list(draw(st.sampled_from(PLAN_INPUTS)))
    presets = draw(st.lists(mostly(PRESET_NAMES, ODD_PRESET_NAMES, 6), min_size=0 if given else 1, max_size=2))
    options = [a for name in presets for a in ("--preset", name)]
    for name, good, odd in (("--gpus", COUNTS[:8], ODD_COUNTS), ("--seq-length", COUNTS, ODD_COUNTS),
                            ("--micro-batch-size", COUNTS[:6], ODD_COUNTS), ("--global-batch-size", COUNTS, ODD_COUNTS),
                            ("--gpu-memory-gib", MEMORY, ODD_MEMORY), ("--headroom", FLOATS, ODD_FLOATS),
                            ("--mfu", FLOATS[1:] + ["1"], ODD_FLOATS[1:]),
                            ("--hardware", list(HARDWARE), ["H100", "", "nope"]),
                            ("--mcore-version", MCORE_VERSIONS, ODD_MCORE_VERSIONS[:6]),
                            ("--nemo-rl-version", NEMO_RL_OPTIONS, ODD_NEMO_RL_OPTIONS[:4]),
                            ("--flavor", ["auto"], FLAVORS[1:]), ("--format", ["json", "json", "text"], ["yaml"])):
        if draw(st.integers(0, 3)) == 0:
            options += [name, draw(mostly(good, odd, 6))]
    if draw(st.integers(0, 4)) == 0:
        options += ["--profile", write(draw(profile_text()), "profile.json")]
    options += [a for text in draw(st.lists(mostly(PLAN_SETS, ODD_PLAN_SETS, 3), max_size=2)) for a in ("--set", text)]
    if draw(st.integers(0, 14)) == 0:
        options += ["--plot", str(case_dir() / draw(st.sampled_from(["plot.png", "plot.xyz", "missing/plot.png"])))]
    return ["plan", *given, *options]


@cases("plan_options")
@given(argv=plan_argv())
@example(argv=["plan", "--preset", "llama3-8b", "--format", "json", "--plot", "plot.png"])
def test_plan_options(argv: list[str]) -> None:
    assert_answered(call(argv), argv, kind="plan")


# --- (f) examples/run_offload.py ----------------------------------------------------------------------------------


class _WouldTrain(Exception):
    """Raised where run_offload.py would build its first batch: every option was accepted."""


RUN_OFFLOAD_INTS = ["1", "2", "3", "4", "8", "16", "32", "64", "128", "256", "1024"]
ODD_RUN_OFFLOAD_INTS = ["0", "-1", "9", "1000", "10000000", "9" * 30, "abc", "1.5", "", "0x10", "1_0", " 2", "100000",
                        "2147483648"]


@st.composite
def run_offload_argv(draw: st.DrawFn) -> list[str]:
    ints = mostly(st.one_of(st.sampled_from(RUN_OFFLOAD_INTS), st.integers(1, 300).map(str)), ODD_RUN_OFFLOAD_INTS,
                  6)
    argv: list[str] = []
    for name, values in (("--model", mostly(["dense", "moe"], ["sparse", ""], 6)),
                         ("--variants", mostly(["all", "baseline", "layer,optimizer", "fine-grained",
                                                "layer-double-buffered,optimizer-exact", "baseline,baseline"],
                                               st.one_of(st.sampled_from(["", ",", "layers", " all"]), PRINTABLE), 4)),
                         ("--steps", ints), ("--batch-size", ints), ("--layers", ints),
                         ("--hidden", mostly(["8", "16", "32", "64", "128", "256", "512", "4096", "65536"],
                                             ODD_RUN_OFFLOAD_INTS, 4)),
                         ("--seq-len", ints), ("--device", mostly(["cpu"], ["auto", "cuda", "tpu"], 6)),
                         ("--seed", mostly(["0", "1", "42", "-1"], ["9" * 30, "18446744073709551616", "abc"], 4)),
                         ("--out", mostly(["run.json", "/dev/null"],
                                          ["/", "/nonexistent/dir/run.json", "", ".", "sub/run.json"], 4))):
        if draw(st.integers(0, 2)) == 0:
            argv += [name, draw(values)]
    if "--device" not in argv:
        argv += ["--device", "cpu"]  # "auto" would pick a GPU the machine may have; a case must not depend on it
    argv += ["--yes"] * draw(st.booleans())
    argv += draw(mostly([[]], [["--unknown"], ["extra"], ["--steps"]], 6))
    return argv


@pytest.fixture(scope="module")
def run_offload_stopped() -> Iterator[Any]:
    """examples/run_offload.py with training stopped where it would start: its first batch."""
    pytest.importorskip("torch")
    from examples import run_offload

    def stop(*args: Any, **kwargs: Any) -> Any:
        raise _WouldTrain()

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(run_offload, "batches", stop)
        patch.setattr(run_offload, "train", stop)
        yield run_offload


@cases("run_offload")
@given(argv=run_offload_argv())
@example(argv=["--hidden", "100000", "--layers", "1000", "--device", "cpu"])
@example(argv=["--batch-size", "10000000", "--seq-len", "10000000", "--device", "cpu"])
@example(argv=["--layers", "100000000", "--device", "cpu"])
@example(argv=["--seed", "18446744073709551616", "--device", "cpu"])
def test_run_offload_options(argv: list[str], run_offload_stopped: Any) -> None:
    try:
        answer = call(argv, run_offload_stopped.main)
    except _WouldTrain:
        return  # every option accepted, and nothing was built or trained
    assert_answered(answer, argv)


# --- regressions found by the generators, with the message each now gives -------------------------------------


def refused_with(argv: Sequence[str], message: str, entry: Callable[[list[str]], int] = main,
                 limit_s: float = LIMIT_S) -> None:
    answer = call(argv, entry)
    assert_answered(answer, argv, limit_s=limit_s)
    assert answer.code == 2 and message in answer.err, answer.err


@pytest.mark.parametrize(("script", "message"), [
    # each used to run for minutes, run out of memory or end in a traceback (RecursionError)
    ("A=x\n" + 'A="$A$A"\n' * 40 + "python pretrain_gpt.py $A\n", "variables expand to more than 1,000,000"),
    ("python pretrain_gpt.py --num-layers " + "${A:-" * 3000 + "1" + "}" * 3000 + "\n", "nested deeper than 32"),
    ("a;" * 70_000, "characters is refused; the checker reads up to 131,072"),
    ("a\n" * 10_001, "more than 10,000 commands"),
    ("python pretrain_gpt.py --bf16\n" * 65, "more than 64 training launches"),
    # upstream's usage used to reach stdout ahead of the error line
    ("python scripts/training/run_recipe.py --recipe llama3_8b_pretrain_config --help\n", "exits before training"),
])
def test_launch_script_limits(script: str, message: str) -> None:
    refused_with(["check", write("#!/bin/bash\n" + script, "launch.sh"), "--format", "json"], message)


def test_a_long_word_and_a_doubled_variable_are_still_read() -> None:
    """Reading a word used to copy it once per character (200 KB: a minute); small expansions are unchanged."""
    script = "#!/bin/bash\nA=x\nA=\"$A$A\"\npython pretrain_gpt.py --num-layers 2 --hidden-size " + "1" * 100_000 + \
        " --micro-batch-size $A\n"
    argv = ["check", write(script, "launch.sh"), "--mcore-version", "0.16.1", "--format", "json"]
    answer = call(argv)
    assert_answered(answer, argv)
    assert "argument --micro-batch-size: invalid int value: 'xx'" in answer.out  # $A$A, expanded


@pytest.mark.parametrize("text", [
    # OmegaConf resolved one at a time, each in an os.environ swapped for the job's: 28 s, 30 s, 3 s
    "model:\n  num_layers: 2\n  cpu_offloading: '" + "${model.num_layers}" * 50_000 + "'\n",
    "model:\n  num_layers: 2\n" + "".join(f"  k{i}: '${{model.num_layers}}'\n" for i in range(20_000)),
    "model:\n  num_layers: 2\n  cpu_offloading: '" + "x" * 1_000_000 + "${model.num_layers}'\n",
])
def test_interpolations_past_the_limit(text: str) -> None:
    refused_with(["check", write(text), "--assume-defaults", "--format", "json"], "interpolations (and 100,000",
                 limit_s=AT_SCALE_S)


def test_interpolations_within_the_limit_are_resolved() -> None:
    text = "model:\n  num_layers: 2\n" + "".join(f"  k{i}: '${{model.num_layers}}'\n" for i in range(400)) + \
        "  cpu_offloading: '${model.num_layers}'\n"
    argv = ["check", write(text), "--assume-defaults", "--format", "json"]
    answer = call(argv)
    assert_answered(answer, argv)
    (finding,) = [f for f in json.loads(answer.out)["findings"] if f["path"] == "model.cpu_offloading"]
    assert finding["rule"] == "CFG002" and "got an int (2)" in finding["message"]  # resolved: the int 2


@pytest.mark.parametrize(("value", "message"), [
    ("!!bool 2", "invalid YAML value '2' (tag:yaml.org,2002:bool): not a valid bool"),  # used to be a KeyError
    ("!!int ''", "not a valid int"),  # IndexError
    ("!!float ''", "not a valid float"),
    ("!!timestamp x", "not a valid timestamp"),  # AttributeError
])
def test_yaml_tags_pyyaml_cannot_construct(value: str, message: str) -> None:
    refused_with(["check", write(f"model:\n  cpu_offloading: {value}\n")], message)


@pytest.mark.parametrize("text", [
    "a: &a1 {[a]: 1, b: 2}\nmodel:\n  <<: *a1\n",  # a complex key merged: TypeError in yamlio (unhashable list)
    "policy:\n  megatron_cfg:\n    enabled: true\n    pipeline_dtype: []\n",  # TypeError in the NeMo-RL loader
    "policy:\n  model_name: a\n  megatron_cfg:\n    enabled: true\non_policy_distillation:\n  enabled: true\n"
    "  non_colocated_teachers:\n    enabled: true\n  teacher_model_by_agent_name:\n    x: [a]\n    y: [a]\n",
])
def test_a_list_where_a_name_goes(text: str) -> None:
    argv = ["check", write(text), "--format", "json"]
    assert_answered(call(argv), argv)


@pytest.mark.parametrize("argv", [
    # the distributed optimizer's shards were built rank by rank, every tensor for every rank: 2 to 213 s
    ["plan", str(EXAMPLES / "nemo-rl" / "grpo_offload.yaml"), "--preset", "qwen3-235b-a22b", "--format", "json"],
    ["plan", "--recipe", "llama3_8b_pretrain_config", "--gpus", "1024", "--seq-length", "8"],
    ["plan", "--preset", "llama3-8b", "--gpus", "10000000", "--format", "json"],
    # 512 x 19531 GPUs: megatron-core needs ETP x EP x PP (1 x 64 x 8) to divide the world size
    ["plan", "--preset", "deepseek-v3", "--gpus", "9999872", "--format", "json"],
])
def test_plans_of_many_ranks_are_quick(argv: list[str]) -> None:
    assert_answered(call(argv), argv, kind="plan", limit_s=AT_SCALE_S)


@pytest.mark.parametrize("preset", ["llama3-8b", "mixtral-8x7b"])
def test_ranks_of_a_run_hold_alike_shards(preset: str) -> None:
    """The planner sizes one rank of each run (checks.model.optimizer_split.distinct_ranks): every rank's shard
    is its run's first rank's, as building each rank's shard (what the planner used to do) shows."""
    import bisect
    from dataclasses import replace

    from checks.model.optimizer_split import distinct_ranks, shard_pieces
    from checks.plan import memory
    from checks.plan.setup import from_preset

    training = from_preset(PRESETS[preset]).training
    for dp, bucket, pipeline in ((3, None, 1), (8, 10**6, 2), (64, 40_000_000, 1), (200, 10**6, 4)):
        t = replace(training, par=replace(training.par, pipeline=pipeline), data_parallel=dp, bucket_size=bucket)
        tensors = [list(chunk) for chunk in memory._stage_tensors(t, 0)]
        own = frozenset().union(*(memory._shared_embeddings(t, c) for c in memory.stage_layers(t)[0]))
        for expert in (False, True):
            every = shard_pieces(tensors, expert, dp, t.version, bucket, own)
            firsts = distinct_ranks(tensors, expert, dp, bucket, own)
            assert len(firsts) < dp or dp <= 8
            chosen = shard_pieces(tensors, expert, dp, t.version, bucket, own, distinct=True)
            assert len(chosen) == len(firsts)
            for rank, pieces in enumerate(every):
                assert pieces == chosen[bisect.bisect_right(firsts, rank) - 1], (dp, bucket, rank)


def test_a_plot_that_cannot_be_drawn_prints_no_plan() -> None:
    """Without matplotlib the plan used to be printed, then the error: exit 2 with a document on stdout."""
    # (either way an error: matplotlib is missing, or the plot's directory is)
    argv = ["plan", "--preset", "llama3-8b", "--format", "json", "--plot", str(case_dir() / "missing" / "p.png")]
    answer = call(argv, main)
    assert_answered(answer, argv, kind="plan")
    assert answer.code == 2


@pytest.mark.parametrize(("argv", "message"), [
    # each allocation used to fail in torch with a traceback (or never finish building a million layers)
    (["--hidden", "65536", "--layers", "1000"], "more than the"),
    (["--batch-size", "100000", "--seq-len", "100000"], "more than the"),
    (["--layers", "100000000"], "--layers must be at most 1024"),
    (["--hidden", "2147483648"], "--hidden at most 65536"),
    (["--seed", "18446744073709551616"], "--seed must be in"),
    (["--steps", "0"], "--steps and --batch-size must be >= 1"),  # argparse's usage is one line now
])
def test_run_offload_refuses_before_building(argv: list[str], message: str, run_offload_stopped: Any) -> None:
    refused_with([*argv, "--device", "cpu"], message, run_offload_stopped.main)


# --- regressions: inputs outside the loaders' code, found here and fixed by the code's owners ------------------

_DIGITS = "9" * 5000 + ".1"


@pytest.mark.parametrize("argv", [
    ["check", "--set", "model.cpu_offloading=true", "--mcore-version", _DIGITS],  # int() of over 4,300 digits
    ["check", "--set", "model.cpu_offloading=true", "--te-version", _DIGITS],
    ["check", "--set", "policy.megatron_cfg.enabled=true", "--nemo-rl-version", _DIGITS],
])
def test_version_options_of_many_digits(argv: list[str]) -> None:
    """checks/versions.py read the digits with int(), which raises past 4,300 digits: a traceback."""
    assert_answered(call(argv), argv)


def test_repeated_flags_at_scale() -> None:
    """A flag given 15,000 times: the rules looked each repetition up with difflib (seconds)."""
    argv = ["check", write("#!/bin/bash\npython pretrain_gpt.py " + "--bf16 " * 15_000 + "\n", "launch.sh"),
            "--format", "json"]
    assert_answered(call(argv), argv)


def test_unknown_keys_at_scale() -> None:
    """difflib over every field for each unknown key took about 2 ms a key (5,000 keys: 11 s); suggestions stop
    after the first 200 unknown keys, and the findings say so."""
    text = "model:\n" + "".join(f"  cpu_offloadng{i}: {i}\n" for i in range(5_000))
    argv = ["check", write(text), "--assume-defaults", "--format", "json"]
    assert_answered(call(argv), argv)


def test_the_case_table_is_current() -> None:
    """The table in the module docstring is what runs (the issue's record cites it): its rows in CASES order."""
    rows = [line.split() for line in (__doc__ or "").splitlines()
            if line.strip()[:3] in ("(a)", "(b)", "(c)", "(d)", "(e)", "(f)")]
    assert [(int(row[-2]), int(row[-1])) for row in rows] == [(n, n * DEEP_FACTOR) for n in CASES.values()]
    tests = {name for name, fn in globals().items() if name.startswith("test_") and hasattr(fn, "hypothesis")}
    assert {row[-3] for row in rows} == tests
