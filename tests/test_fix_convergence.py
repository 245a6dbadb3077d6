"""The checker's own fixes converge: applying what ``--emit-overrides`` prints removes what it claims to fix.

Broken configs come from three sources: every rule's bad and good example in every version it applies to;
the differential test's generator (tests/offload_configs.py, Megatron Bridge overrides over a version's
offload fields) with further settings the rules read (layer implementation, CUDA-graph switches, parameter
dtypes, Transformer Engine version, NVTE_CPU_OFFLOAD_V1, ...), written as a Bridge override set, a NeMo-RL
YAML file and a Megatron-LM command line; and, with ``OFFLOAD_CHECK_DEEP=1``, pairs of bad examples.

For each, in up to three rounds: check it, take ``--emit-overrides --all-fixes``' text exactly as printed (the
CLI's own ``_overrides``; every fix, those that change the job beyond offloading too), apply it back (Hydra
overrides after the others for YAML; flags replaced, appended or, for ``# remove --flag``, deleted on a command
line), and check again. Every finding whose patch was printed is
gone, no error appears that was not there, and the config reaches a fixed point (nothing left to print but
comments). A patch that cannot fix alone is printed as a ``# partial`` comment and says what else it needs;
patches that disagree are a ``# conflict`` comment and a CFG011 finding.

``FIX_CONVERGENCE_EXAMPLES=N`` sets the generated configs per megatron-core version (CI: 40; deep: 400).
"""

from __future__ import annotations

import collections
import os
import shlex
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from offload_configs import bridge_overrides

from checks.catalogue import example_environment, example_version
from checks.cli import _overrides, main
from checks.config import CanonicalConfig, Environment, Origin, Setting
from checks.engine import Finding, run
from checks.loaders import Request, load
from checks.rules import ALL_RULES, BY_ID
from checks.rules.base import Example, Rule
from checks.versions import NEMO_RL_VERSIONS, VERSIONS, parse_te_version, profile

DEEP = os.environ.get("OFFLOAD_CHECK_DEEP") == "1"
EXAMPLES = int(os.environ.get("FIX_CONVERGENCE_EXAMPLES", "400" if DEEP else "40"))
ROUNDS = 3
COUNTS: collections.Counter[str] = collections.Counter()
_SCRATCH = tempfile.TemporaryDirectory(prefix="checks-fixes-")  # removed when the test session ends


@dataclass(frozen=True)
class Case:
    """A config as a user would give it: a YAML file and ``--set`` overrides, or a Megatron-LM command line."""

    flavor: str
    version: str
    text: str | None = None  # YAML file (Bridge, NeMo-RL); None: overrides alone
    sets: tuple[str, ...] = ()
    argv: tuple[str, ...] = ()  # Megatron-LM words
    environment: Environment = field(default_factory=lambda: Environment(mcore_source="option"))
    complete: bool = True  # --assume-defaults
    label: str = ""

    def request(self) -> Request:
        if self.flavor == "megatron-lm":
            return Request(argv=shlex.join(self.argv), flavor="megatron-lm", version=self.version,
                           environment=self.environment)
        files: tuple[str, ...] = ()
        if self.text is not None:
            path = Path(tempfile.mkdtemp(dir=_SCRATCH.name)) / "config.yaml"
            path.write_text(self.text, encoding="utf-8")
            files = (str(path),)
        return Request(files, self.sets, None, self.flavor, self.version, self.environment,
                       assume_defaults=self.complete)

    def applied(self, printed: str) -> Case:
        """The case with ``--emit-overrides``' text applied as a user would apply it."""
        lines = [line for line in printed.splitlines() if line]
        if self.flavor != "megatron-lm":
            return replace(self, sets=self.sets + tuple(line for line in lines if not line.startswith("#")))
        words = list(self.argv)
        for line in lines:
            if line.startswith("# remove "):
                words = _without(words, line.removeprefix("# remove ").strip())
            elif not line.startswith("#"):
                flag, *values = shlex.split(line)
                words = _without(words, flag) + [flag, *values]
        return replace(self, argv=tuple(words))


def _without(words: list[str], flag: str) -> list[str]:
    """``words`` less every ``flag`` and the values after it (up to the next ``--flag``)."""
    out: list[str] = []
    skipping = False
    for word in words:
        if word == flag or word.startswith(flag + "="):
            skipping = word == flag
            continue
        if skipping and not (word.startswith("--") and len(word) > 2):
            continue
        skipping = False
        out.append(word)
    return out


def _key(f: Finding) -> tuple[str, str, str | None]:
    return f.rule, f.path, f.target


def _check(case: Case) -> tuple[list[CanonicalConfig], list[Finding]]:
    configs = load(case.request())
    return configs, run(configs)


def converge(case: Case) -> list[str]:
    """What goes wrong when the printed fixes are applied round after round (nothing, when they converge)."""
    problems: list[str] = []
    configs, findings = _check(case)
    COUNTS[f"{case.flavor} {case.version}"] += 1
    COUNTS["patched" if any(f.patch for f in findings) else "nothing to patch"] += 1
    for round_ in range(1, ROUNDS + 1):
        printed = _overrides(configs, findings, all_fixes=True)
        actions = [line for line in printed.splitlines() if line and not line.startswith(("# partial", "# conflict"))]
        conflicts = {line.split(" on ", 1)[1].split(", choose", 1)[0] for line in printed.splitlines()
                     if line.startswith("# conflict")}
        for f in findings:
            if f.partial:
                COUNTS[f"partial {f.rule}"] += 1
                if f"# partial fix of {f.rule}" not in printed:
                    problems.append(f"round {round_}: {f.rule}'s partial patch is not a comment: {printed!r}")
        if conflicts:
            COUNTS["conflict"] += 1
            if len(configs) == 1 and not any(f.rule == "CFG011" for f in findings):
                problems.append(f"round {round_}: conflicts {sorted(conflicts)} without a CFG011 finding")
        if not actions:
            return problems
        fixed = {_key(f): f for f in findings if f.patch and not f.partial and not set(f.patch) & conflicts}
        errors = {_key(f) for f in findings if f.severity == "error"}
        case = case.applied(printed)
        configs, findings = _check(case)
        after = {_key(f): f for f in findings}
        for key, f in fixed.items():
            if key in after:
                problems.append(f"round {round_}: {f.rule}'s patch {f.patch} printed as {actions} leaves "
                                f"{after[key].message!r}")
        for key, f in after.items():
            if f.severity == "error" and key not in errors:
                problems.append(f"round {round_}: applying {actions} brings {f.rule}: {f.message!r}")
        if problems:
            return problems
    leftover = [line for line in _overrides(configs, findings, all_fixes=True).splitlines()
                if line and not line.startswith(("# partial", "# conflict"))]
    if leftover:
        problems.append(f"no fixed point after {ROUNDS} rounds: still prints {leftover}")
    return problems


def _report(case: Case, problems: list[str]) -> str:
    given = case.argv if case.flavor == "megatron-lm" else (case.text, case.sets)
    return f"{case.label} ({case.flavor}, megatron-core {case.version}): {given}\n  " + "\n  ".join(problems)


# -- the rules' own examples ---------------------------------------------------------------------------------------

def _example_case(rule: Rule, example: Example, version: str, label: str) -> Case | None:
    env = replace(example_environment(example), mcore_source="option")
    if example.flavor == "megatron-lm":
        if example.text.startswith(("MODEL_ARGS", "ENV_VARS")):
            return None  # a functional-test YAML: its fixes are edits of MODEL_ARGS, not of a command line
        return Case("megatron-lm", version, argv=tuple(shlex.split(example.text)), environment=env, label=label)
    return Case(example.flavor, version, text=example.text, sets=example.overrides, environment=env,
                complete=example.complete, label=label)


def _example_cases() -> Iterator[Case]:
    for rule in ALL_RULES:
        for name, example in (("bad", rule.bad), ("good", rule.good)):
            versions = [example.version] if example.version else \
                [v for v in VERSIONS if rule.applies_to(v, example.flavor)] or [example_version(rule, example)]
            for version in versions:
                case = _example_case(rule, example, version, f"{rule.id} {name} example")
                if case is not None:
                    yield case


def _merged(a: Example, b: Example) -> Example:
    """Two examples of one flavor as one config: YAML mappings merged (b's values win), command lines joined."""
    if a.flavor == "megatron-lm":
        return replace(a, text=f"{a.text} {b.text}")
    doc = _merge(yaml.safe_load(a.text) or {}, yaml.safe_load(b.text) or {})
    return replace(a, text=yaml.safe_dump(doc), overrides=a.overrides + b.overrides, te=b.te or a.te,
                   nemo_rl=b.nemo_rl or a.nemo_rl, complete=a.complete and b.complete)


def _merge(a: Any, b: Any) -> Any:
    if isinstance(a, dict) and isinstance(b, dict):
        return {**a, **{k: _merge(a[k], v) if k in a else v for k, v in b.items()}}
    return b


def _pair_cases() -> Iterator[Case]:
    bad = [r for r in ALL_RULES if not r.bad.text.startswith(("MODEL_ARGS", "ENV_VARS"))]
    for i, first in enumerate(bad):
        for second in bad[i + 1:]:
            if first.bad.flavor != second.bad.flavor:
                continue
            example = _merged(first.bad, second.bad)
            version = first.bad.version or second.bad.version or example_version(first, first.bad)
            if not (first.in_version(version) and second.in_version(version)):
                continue
            case = _example_case(first, example, version, f"{first.id} + {second.id} bad examples")
            if case is not None:
                yield case


EXAMPLE_CASES = list(_example_cases())


def test_rule_examples_fixes_converge() -> None:
    failures = [_report(case, problems) for case in EXAMPLE_CASES if (problems := converge(case))]
    assert not failures, "\n".join(failures)
    assert len(EXAMPLE_CASES) > 2 * len(ALL_RULES)


@pytest.mark.skipif(not DEEP, reason="OFFLOAD_CHECK_DEEP=1: pairs of bad examples (a few minutes)")
def test_pairs_of_bad_examples_fixes_converge() -> None:
    cases = list(_pair_cases())
    failures = [_report(case, problems) for case in cases if (problems := converge(case))]
    print(f"\npairs of bad examples: {len(cases)}")
    assert not failures, "\n".join(failures[:20]) + f"\n({len(failures)} in all)"


# -- generated configs, in the three front ends --------------------------------------------------------------------

@st.composite
def _more_settings(draw: Any, version: str) -> tuple[list[str], str | None, str | None, str]:
    """Settings the differential generator leaves at their defaults, that offload rules read: Bridge overrides,
    the Transformer Engine version, NVTE_CPU_OFFLOAD_V1 and the NeMo-RL release."""
    prof = profile(version)

    def has(name: str, section: str = "model") -> bool:
        return prof.field(section, name) is not None

    sets: list[str] = []
    if draw(st.integers(0, 3)) == 0:
        sets.append(f"model.transformer_impl={draw(st.sampled_from(['local', 'transformer_engine']))}")
    for name in ("enable_cuda_graph", "external_cuda_graph"):
        if has(name) and draw(st.integers(0, 7)) == 0:
            sets.append(f"model.{name}=true")
    precision = draw(st.sampled_from(["default", "default", "bf16", "fp32"]))
    if precision == "bf16":
        sets += ["model.bf16=true", "model.params_dtype=bf16"]
    elif precision == "fp32":
        sets.append("model.params_dtype=fp32")
    if draw(st.integers(0, 3)) == 0:
        activations, weights = draw(st.sampled_from([(False, False), (False, True), (True, True)]))
        sets += [f"model.cpu_offloading_activations={str(activations).lower()}",
                 f"model.cpu_offloading_weights={str(weights).lower()}"]
    for name in ("cpu_offloading_retain_pinned_cpu_buffers", "cpu_offloading_double_buffering",
                 "moe_layer_recompute"):
        if has(name) and draw(st.integers(0, 5)) == 0:
            sets.append(f"model.{name}=true")
    if draw(st.integers(0, 5)) == 0:
        sets += ["model.fp8=hybrid", "model.fp8_param=true",
                 f"model.fp8_recipe={draw(st.sampled_from(['delayed', 'tensorwise']))}"]
    if has("fp4_param") and draw(st.integers(0, 9)) == 0:
        sets.append("model.fp4_param=true")
    for name in ("overlap_cpu_optimizer_d2h_h2d", "optimizer_cuda_graph", "use_torch_optimizer_for_cpu_offload"):
        if has(name, "optimizer") and draw(st.integers(0, 5)) == 0:
            sets.append(f"optimizer.{name}=true")
    te = draw(st.sampled_from([None, None, "none", "2.5", "2.9", "2.10", "2.14"]))
    nvte = draw(st.sampled_from([None, None, "0", "1"]))
    return sets, te, nvte, draw(st.sampled_from(NEMO_RL_VERSIONS))


def _environment(te: str | None, nvte: str | None, nemo_rl: str = "main") -> Environment:
    variables = {} if nvte is None else {
        "NVTE_CPU_OFFLOAD_V1": Setting(nvte, Origin(arg="--env #1", key="NVTE_CPU_OFFLOAD_V1"))}
    return Environment(te_version=parse_te_version(te) if te else None, nemo_rl_version=nemo_rl,
                       variables=variables, mcore_source="option")


def _canonical(case: Case) -> dict[str, Any]:
    (cfg,) = load(case.request())
    return {path: setting.value for path, setting in cfg.settings.items() if not path.startswith("env.")}


def _nemo_rl_text(values: Mapping[str, Any], version: str, env: Environment) -> str:
    """A NeMo-RL config with ``values`` where NeMo-RL reads them, written by its own spelling."""
    base = "policy:\n  megatron_cfg:\n    enabled: true\n"
    spelling = load(replace(Case("nemo-rl", version, text=base, environment=env).request()))[0].spelling
    doc: dict[str, Any] = {"policy": {"megatron_cfg": {"enabled": True}}}
    for key, value in spelling.patch(values).items():
        *parents, leaf = key.split(".")
        node = doc
        for name in parents:
            node = node.setdefault(name, {})
        node[leaf] = value
    return yaml.safe_dump(doc)


def _megatron_lm_argv(values: Mapping[str, Any], version: str) -> tuple[str, ...]:
    """A Megatron-LM command line with ``values``, written by its own spelling (flags it has no way to set are
    left out, as its spelling leaves them out of patches)."""
    spelling = load(Request(argv="--num-layers 4", flavor="megatron-lm", version=version))[0].spelling
    words: list[str] = []
    for flag, value in spelling.patch(values).items():
        if value is not None:
            words += shlex.split(spelling.override_lines({flag: value})[0])
    return tuple(words)


def _generated(version: str, sets: Sequence[str], more: tuple[list[str], str | None, str | None, str]) -> list[Case]:
    extra, te, nvte, nemo_rl = more
    env = _environment(te, nvte)
    bridge = Case("bridge", version, sets=tuple(sets) + tuple(extra), environment=env, label="generated")
    values = _canonical(bridge)
    return [bridge,
            Case("nemo-rl", version, text=_nemo_rl_text(values, version, env), environment=replace(
                env, nemo_rl_version=nemo_rl), label="generated"),
            Case("megatron-lm", version, argv=_megatron_lm_argv(values, version), environment=env,
                 label="generated")]


@pytest.mark.parametrize("version", VERSIONS)
def test_generated_configs_fixes_converge(version: str) -> None:
    @settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(sets=bridge_overrides(version), more=_more_settings(version))
    def converges(sets: list[str], more: tuple[list[str], str | None, str | None, str]) -> None:
        for case in _generated(version, sets, more):
            problems = converge(case)
            assert not problems, _report(case, problems)

    before = COUNTS.copy()
    converges()
    for flavor in ("bridge", "nemo-rl", "megatron-lm"):
        assert COUNTS[f"{flavor} {version}"] - before[f"{flavor} {version}"] >= EXAMPLES
    assert COUNTS["patched"] - before["patched"] > EXAMPLES  # the generator mostly gives configs with fixes


# -- regression tests: each fix a rule's patch needed, reproduced ---------------------------------------------------

def _bridge(text: str, version: str = "0.19.2", **env: str) -> Case:
    return Case("bridge", version, text=text, environment=_environment(env.get("te"), env.get("nvte")),
                label="regression")


def _mlm(line: str, version: str = "0.19.2", te: str | None = None) -> Case:
    return Case("megatron-lm", version, argv=tuple(shlex.split(line)), environment=_environment(te, None),
                label="regression")


def _finding(case: Case, rule: str) -> Finding:
    return next(f for f in _check(case)[1] if f.rule == rule)


def test_nvte_fix_names_the_launch_environment_when_it_sets_the_variable() -> None:
    """Bridge applies env_vars with os.environ.setdefault (NVIDIA-NeMo/Megatron-Bridge@067f987d:
    src/megatron/bridge/training/config.py:1989): with NVTE_CPU_OFFLOAD_V1=0 in the launch environment,
    ++env_vars.NVTE_CPU_OFFLOAD_V1=1 changed nothing and TEX005 printed it again every round."""
    case = _bridge("model:\n  fine_grained_activation_offloading: true\n  offload_modules: [core_attn]\n",
                   te="2.12", nvte="0")
    f = _finding(case, "TEX005")
    assert f.patch is None and "launch environment" in f.fix
    assert converge(case) == []
    nemo_rl = replace(case, flavor="nemo-rl", text="policy:\n  megatron_cfg:\n    enabled: true\n"
                      "    fine_grained_activation_offloading: true\n    offload_modules: [core_attn]\n")
    assert _finding(nemo_rl, "TEX005").patch  # NeMo-RL hands env_vars to Ray, which sets them over the launch's
    assert converge(nemo_rl) == []


def test_precision_aware_fix_on_the_command_line_adds_the_distributed_optimizer() -> None:
    """--use-precision-aware-optimizer alone raised OPT008 (megatron-core OptimizerConfig asserts the
    distributed optimizer with it); the fix adds --use-distributed-optimizer when it is missing."""
    case = _mlm("--bf16 --num-layers 4 --optimizer-cpu-offload")
    f = _finding(case, "OPT005")
    assert f.patch == {"--use-precision-aware-optimizer": True, "--use-distributed-optimizer": True}
    assert not f.partial
    assert converge(case) == []
    # with SGD no flag makes it work (the precision-aware optimizer is Adam only): partial, and it says why
    sgd = _finding(_mlm("--bf16 --num-layers 4 --optimizer-cpu-offload --optimizer sgd"), "OPT005")
    assert sgd.partial.startswith("Not enough alone") and "OPT007 follows" in sgd.partial
    # fp32 parameters: the distributed optimizer then fails to build the hybrid optimizer (OPT011)
    assert "OPT011 follows" in _finding(_mlm("--num-layers 4 --optimizer-cpu-offload"), "OPT005").partial


def test_no_precision_aware_switch_offered_for_sgd() -> None:
    """OPT014's use_precision_aware_optimizer=true raised OPT007 with optimizer=sgd."""
    case = _bridge("optimizer:\n  optimizer: sgd\n  optimizer_cpu_offload: true\n  optimizer_offload_fraction: 1.0\n"
                   "  use_distributed_optimizer: true\n  use_precision_aware_optimizer: false\n")
    f = _finding(case, "OPT014")
    assert f.patch is None and "Adam only" in f.fix
    assert converge(case) == []


@pytest.mark.parametrize(("case", "rule"), [
    # FGA018 set cuda_graph_impl and left enable_cuda_graph, which wins (local graphs): FGA018 again, or
    # megatron-core's "Do not use enable_cuda_graph or external_cuda_graph with cuda_graph_impl."
    (_bridge("model:\n  fine_grained_activation_offloading: true\n  offload_modules: [core_attn]\n"
             "  enable_cuda_graph: true\n", "0.18.2", te="2.9"), "FGA018"),
    (_mlm("--num-layers 4 --fine-grained-activation-offloading --offload-modules core_attn --enable-cuda-graph",
          "0.18.2", te="2.9"), "FGA019"),
    # ACT004 turned enable_cuda_graph off and kept cuda_graph_impl's graphs
    (_bridge("model:\n  num_layers: 8\n  cpu_offloading: true\n  cpu_offloading_num_layers: 2\n"
             "  enable_cuda_graph: true\n  cuda_graph_impl: transformer_engine\n", "0.17.1"), "ACT004"),
])
def test_graph_fixes_turn_the_deprecated_switches_off(case: Case, rule: str) -> None:
    f = _finding(case, rule)
    assert f.patch and not f.partial
    assert any("enable" in key for key in f.patch)
    assert converge(case) == []


@pytest.mark.parametrize("version", ["0.16.1", "0.17.1"])
def test_bridge_local_graph_fix_before_0_18_turns_graphs_off(version: str) -> None:
    """FGA018 (Bridge refuses local per-module graphs) proposed transformer_engine graphs, which megatron-core
    before 0.18 does not support with fine-grained offloading either: FGA019 followed."""
    case = _bridge("model:\n  fine_grained_activation_offloading: true\n  offload_modules: [core_attn]\n"
                   "  cuda_graph_impl: local\n", version, te="2.9")
    f = _finding(case, "FGA018")
    assert f.patch == {"model.cuda_graph_impl": "none"} and not f.partial
    assert converge(case) == []


def test_layer_and_fine_grained_knobs_without_either_switch_get_no_switch() -> None:
    """ACT006 turned cpu_offloading on and FGA005 fine_grained_activation_offloading on: together, FGA001."""
    case = _bridge("model:\n  num_layers: 4\n  cpu_offloading: false\n  cpu_offloading_num_layers: 1\n"
                   "  fine_grained_activation_offloading: false\n  offload_modules: [core_attn]\n")
    assert _finding(case, "ACT006").patch is None and _finding(case, "FGA005").patch is None
    assert converge(case) == []


def test_offload_module_fixes_agree_on_one_list() -> None:
    """FGA003 proposed [attn_proj, qkv_linear] and FGA004 [core_attn, attn_proj, qkv_linar]: a conflict, so
    neither was printed. Every module-list fix now proposes the list with all of them applied."""
    case = _bridge("model:\n  fine_grained_activation_offloading: true\n  offload_modules: [attn_proj, qkv_linar]\n",
                   te="2.9")
    findings = _check(case)[1]
    assert {str(f.patch) for f in findings if f.rule in ("FGA003", "FGA004")} == \
        {"{'model.offload_modules': ['core_attn', 'attn_proj', 'qkv_linear']}"}
    assert "CFG011" not in {f.rule for f in findings}
    assert converge(case) == []


def test_paged_stash_fix_turns_fine_grained_offloading_off_when_nothing_is_left() -> None:
    """FGA011 emptied offload_modules with the switch on, which FGA002 refuses (megatron-core's bare assert)."""
    case = _bridge("model:\n  num_moe_experts: 8\n  moe_paged_stash: true\n  fine_grained_activation_offloading: true\n"
                   "  offload_modules: [moe_act]\n", te="2.9")
    f = _finding(case, "FGA011")
    assert f.patch == {"model.offload_modules": [], "model.fine_grained_activation_offloading": False}
    assert not f.partial and converge(case) == []


def test_switching_fine_grained_offloading_on_brings_a_list_it_accepts() -> None:
    """FGA005 turned the switch on over [attn_proj], which FGA004 then refused."""
    case = _bridge("model:\n  offload_modules: [attn_proj]\n", te="2.9")
    f = _finding(case, "FGA005")
    assert f.patch == {"model.fine_grained_activation_offloading": True,
                       "model.offload_modules": ["core_attn", "attn_proj"]}
    assert not f.partial and converge(case) == []


def test_conflicting_fixes_are_a_finding_and_a_comment(capsys: pytest.CaptureFixture[str]) -> None:
    rule = BY_ID["CFG011"]
    argv = f"--argv={rule.bad.text}"
    code = main(["check", argv, "--mcore-version", "0.19.2", "--emit-overrides"])
    out = capsys.readouterr().out
    assert code == 1
    assert out.splitlines() == ["# conflict (CFG011) on --cpu-offloading-num-layers, choose one: "
                                "ACT001: --cpu-offloading-num-layers 2; ACT007: --cpu-offloading-num-layers 0"]
    case = _mlm(rule.bad.text)
    assert _finding(case, "CFG011").message.startswith("the fixes of ACT001, ACT007 disagree on "
                                                       "--cpu-offloading-num-layers")
    assert converge(case) == []


def test_emit_overrides_prints_what_the_test_applies(capsys: pytest.CaptureFixture[str]) -> None:
    """The convergence test applies _overrides' text; python -m checks check --emit-overrides prints exactly it."""
    path = Path(tempfile.mkdtemp(dir=_SCRATCH.name)) / "run.yaml"
    path.write_text(BY_ID["ACT002"].bad.text, encoding="utf-8")
    main(["check", str(path), "--assume-defaults", "--mcore-version", "0.19.2", "--emit-overrides"])
    printed = capsys.readouterr().out
    configs, findings = _check(Case("bridge", "0.19.2", text=BY_ID["ACT002"].bad.text))
    assert printed == _overrides(configs, findings) + "\n" and printed.strip()


def test_partial_fixes_are_marked_in_the_json_output(capsys: pytest.CaptureFixture[str]) -> None:
    import json

    main(["check", "--argv=--bf16 --num-layers 4 --optimizer-cpu-offload --optimizer sgd", "--mcore-version",
          "0.19.2", "--format", "json"])
    (opt005,) = [f for f in json.loads(capsys.readouterr().out)["findings"] if f["rule"] == "OPT005"]
    assert opt005["patch"] and opt005["partial"].startswith("Not enough alone")


def test_summary() -> None:
    """Prints the counts (pytest -s); runs last in this file."""
    print("\nfix convergence: " + ", ".join(f"{k}: {v}" for k, v in sorted(COUNTS.items())))


def test_an_empty_flag_list_is_printed_as_removing_the_flag() -> None:
    """`--offload-modules` takes nargs='+': printed bare for [], argparse refused the printed fix (the deep run)."""
    from checks.loaders import Request, load

    (cfg,) = load(Request((), (), "--num-layers 4 --offload-modules core_attn", "megatron-lm", "0.16.1",
                          assume_defaults=True))
    assert cfg.spelling.override_lines({"--offload-modules": []}) == ["# remove --offload-modules"]
