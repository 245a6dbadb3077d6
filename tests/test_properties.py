"""Property tests: whatever the input, the checker answers with findings or a one-line error, never a traceback."""

from __future__ import annotations

import contextlib
import io
import json
import tempfile
from pathlib import Path

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from checks.cli import main
from checks.formats import offload_field_names
from checks.versions import VERSIONS as ALL_VERSIONS

FIELDS = sorted(offload_field_names() | {
    "num_layers", "pipeline_model_parallel_size", "virtual_pipeline_model_parallel_size", "recompute_granularity",
    "recompute_method", "cuda_graph_impl", "enable_cuda_graph", "transformer_impl", "use_distributed_optimizer",
    "use_precision_aware_optimizer", "decoupled_weight_decay", "optimizer", "offload_modules", "params_dtype",
    "main_params_dtype", "enabled", "activation_checkpointing", "model_overrides", "defaults", "_target_",
})
TYPOS = st.sampled_from(FIELDS).map(lambda f: f[:-1] if len(f) > 3 else f + "x")
KEYS = st.one_of(st.sampled_from(FIELDS), TYPOS, st.text(min_size=1, max_size=12))
SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(-5, 100), st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(["True", "False", "auto", "0.5", "core_attn", "full", "selective", "none", "local",
                     "transformer_engine", "full_iteration", "${policy.precision}", "${nope}", "bf16", "[a b]"]),
    st.text(max_size=10),
)
VALUES = st.recursive(SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                       st.dictionaries(KEYS, inner, max_size=4)), max_leaves=12)
SECTIONS = st.sampled_from(["model", "optimizer", "ddp", "env_vars", "policy", "value", "MODEL_ARGS", "train"])
DOCS = st.dictionaries(SECTIONS, st.one_of(VALUES, st.dictionaries(KEYS, VALUES, max_size=8)), max_size=4)
NEMO_DOCS = st.dictionaries(st.sampled_from(["policy", "value"]), st.fixed_dictionaries(
    {"megatron_cfg": st.dictionaries(KEYS, VALUES, max_size=8)}), min_size=1)
FLAGS = st.lists(st.one_of(
    st.sampled_from(["--cpu-offloading-num-layers", "--optimizer-cpu-offload", "--optimizer-offload-fraction",
                     "--offload-modules", "--fine-grained-activation-offloading", "--recompute-activations",
                     "--num-layers", "--pipeline-model-parallel-size", "--no-pin-cpu-grads", "--cuda-graph-impl",
                     "--optimizer-cpu-ofload", "--", "-", "$X", "${Y:-3}"]),
    st.sampled_from(["2", "-1", "0.5", "1e3", "full", "core_attn", "attn_proj", "abc", "'q'", '"'])), max_size=12)
OVERRIDE_TEXT = st.one_of(
    st.builds(lambda op, k, v: f"{op}model.{k}={v}", st.sampled_from(["", "+", "++", "~"]), KEYS,
              st.text(max_size=12)),
    st.text(max_size=30),
)
SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
VERSIONS = st.sampled_from(ALL_VERSIONS)
FLAVORS = st.sampled_from(["auto", "bridge", "nemo-rl", "megatron-lm"])


def call(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(argv))
        except SystemExit as stop:  # argparse usage errors
            code = int(stop.code or 0)
    return code, out.getvalue(), err.getvalue()


def assert_answered(code: int, out: str, err: str, fmt: str = "json") -> None:
    assert code in (0, 1, 2), code
    assert "Traceback" not in err
    if code == 2:
        assert out == "" and err.count("\n") == 1 and err.startswith("error: "), err
    elif fmt == "json":
        document = json.loads(out)
        assert document["status"] in (("fail",) if code == 1 else ("ok", "incomplete"))
        assert (document["status"] == "incomplete") == (code == 0 and document["summary"]["unknown"] > 0)


_SCRATCH = tempfile.TemporaryDirectory(prefix="checks-prop-")  # removed when the test session ends


def write(text: str, name: str = "config.yaml") -> str:
    directory = Path(tempfile.mkdtemp(prefix="case-", dir=_SCRATCH.name))
    path = directory / name
    path.write_text(text, encoding="utf-8")
    return str(path)


@SETTINGS
@given(doc=st.one_of(DOCS, NEMO_DOCS), flavor=FLAVORS, version=VERSIONS)
def test_generated_yaml(doc: dict, flavor: str, version: str) -> None:
    path = write(yaml.safe_dump(doc))
    assert_answered(*call("check", path, "--flavor", flavor, "--mcore-version", version, "--format", "json"))


@SETTINGS
@given(doc=DOCS, overrides=st.lists(OVERRIDE_TEXT, max_size=4), version=VERSIONS)
def test_generated_overrides(doc: dict, overrides: list[str], version: str) -> None:
    path = write(yaml.safe_dump({"model": {"num_layers": 8}, **doc}))
    sets = [a for text in overrides for a in ("--set", text)]
    assert_answered(*call("check", path, *sets, "--mcore-version", version, "--format", "json"))


@SETTINGS
@given(flags=FLAGS, version=VERSIONS, as_script=st.booleans())
def test_generated_command_lines(flags: list[str], version: str, as_script: bool) -> None:
    line = " ".join(flags)
    if as_script:
        argv = ["check", write(f"#!/bin/bash\nN=4\npython pretrain_gpt.py {line}\n", "run.sh")]
    else:
        argv = ["check", f"--argv={line}", "--flavor", "megatron-lm"]
    assert_answered(*call(*argv, "--mcore-version", version, "--format", "json"))


@SETTINGS
@given(raw=st.binary(max_size=200))
def test_arbitrary_bytes(raw: bytes) -> None:
    directory = Path(tempfile.mkdtemp(prefix="checks-prop-"))
    path = directory / "config.yaml"
    path.write_bytes(raw)
    code, out, err = call("check", str(path))
    assert_answered(code, out, err, fmt="text")
