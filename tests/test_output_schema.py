"""The JSON outputs against their schemas (reference/*-output.schema.json), and the schemas against formats.md.

Every bundled example goes through the CLI in-process with ``--format json``: each manifest entry, each
example config through ``check``, every preset and each example config ``plan`` accepts (one and several
NeMo-RL models), ``lint`` on the repository and on a broken skill, ``rules`` and ``examples``. The
formats.md JSON blocks are walked key by key against the schema each section names, so the documentation
and the schema cannot drift apart.
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import math
import re
import shlex
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator, ValidationError
from schemas import COMMON, SCHEMAS, load_schema, parse_strict, registry, validate_output, validator

from checks.cli import main
from checks.demo import EXAMPLES, entries
from checks.plan.hardware import HARDWARE
from checks.plan.presets import PRESETS

ROOT = Path(__file__).resolve().parent.parent
FORMATS = ROOT / "reference" / "formats.md"
CONFIGS = sorted(str(p.relative_to(ROOT)) for p in EXAMPLES.rglob("*") if p.is_file() and p.name != "manifest.yaml")
PPO = "examples/configs/nemo-rl/ppo_value_model.yaml"
# the PPO example's value model without the two errors it is bundled to show (recompute with layer offload, a
# fraction above 1), so that plan plans it; its value model names no checkpoint, so a preset sizes it
PPO_FIXED = ["--set", "value.megatron_cfg.activation_checkpointing=false",
             "--set", "value.megatron_cfg.recompute_granularity=null",
             "--set", "value.megatron_cfg.optimizer.optimizer_offload_fraction=1.0", "--preset", "value=llama3-8b"]

# On-policy distillation (NVIDIA-NeMo/RL@7ea279ab:nemo_rl/algorithms/distillation.py:487-495 builds the teacher
# without an optimizer): plan shows the teacher as inference_only, sized from the catalogue when it can be.
DISTILLATION = """\
distillation:
  max_num_steps: 10
policy:
  model_name: meta-llama/Llama-3.1-8B-Instruct
  max_total_sequence_length: 4096
  train_micro_batch_size: 1
  train_global_batch_size: 8
  megatron_cfg:
    enabled: true
    tensor_model_parallel_size: 8
    optimizer: {optimizer: adam, use_distributed_optimizer: true}
teacher:
  model_name: TEACHER
  max_total_sequence_length: 4096
  train_micro_batch_size: 1
  train_global_batch_size: 8
  megatron_cfg:
    enabled: true
    tensor_model_parallel_size: 8
    optimizer: {optimizer: adam, use_distributed_optimizer: true}
cluster:
  gpus_per_node: 8
  num_nodes: 1
"""


def cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


def json_of(kind: str, *argv: str) -> Any:
    """The validated document a command printed; it must have exited 0 or 1 (2 is an input error)."""
    code, out, err = cli(kind, *argv, "--format", "json")
    assert code in (0, 1), f"{kind} {shlex.join(argv)} exited {code}: {err.strip()}"
    return validate_output(kind, out)


@pytest.fixture(autouse=True)
def _at_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)  # the manifest's commands name examples/configs/... from the repository root


# --- the schemas --------------------------------------------------------------------------------------

@pytest.mark.parametrize("path", [COMMON, *SCHEMAS.values()], ids=lambda p: p.name)
def test_schema_is_valid_draft_2020_12(path: Path) -> None:
    schema = load_schema(path)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    Draft202012Validator.check_schema(schema)
    assert schema["$id"].endswith(f"/reference/{path.name}")  # the relative $refs resolve beside it


def test_schema_enums_are_the_codes_own() -> None:
    """The closed vocabularies the schemas list are the ones the code has, so a new one fails here first."""
    from checks.lint import BY_ID
    from checks.rules import ALL_RULES
    from checks.rules.base import ALL_FLAVORS
    from checks.versions import NEMO_RL_VERSIONS, VERSIONS

    defs = load_schema(COMMON)["$defs"]
    assert {c.project for r in ALL_RULES for c in r.upstream} == set(defs["project"]["enum"])
    assert set(ALL_FLAVORS) == set(defs["flavor"]["enum"])
    assert {r.severity for r in ALL_RULES} == set(defs["severity"]["enum"])
    check = load_schema(SCHEMAS["check"])
    assert check["properties"]["assumptions"]["properties"]["nemo_rl_version"]["enum"] == [*NEMO_RL_VERSIONS, None]
    lint = load_schema(SCHEMAS["lint"])["properties"]["findings"]["items"]["properties"]
    assert {r.severity for r in BY_ID.values()} == set(lint["severity"]["enum"])
    assert all(re.fullmatch(lint["rule"]["pattern"], rule_id) for rule_id in BY_ID)
    version = re.compile(defs["mcore_version"]["pattern"])
    assert all(version.fullmatch(v) for v in VERSIONS) and all(version.fullmatch(v) for v in NEMO_RL_VERSIONS)
    assert all(re.fullmatch(defs["rule_id"]["pattern"], r.id) for r in ALL_RULES)


# --- every bundled example's output -------------------------------------------------------------------

def _entry_argv(entry: Any) -> list[str]:
    """The manifest entry's own command line, with the versions it is checked against spelled out."""
    words = shlex.split(entry.command())[3:]  # past "python -m checks"
    cut = words.index("--") if "--" in words else len(words)
    extra = ["--format", "json", "--mcore-version", entry.version, "--nemo-rl-version", entry.nemo_rl_version]
    return words[:cut] + extra + words[cut:]


def test_examples_output_and_every_entry_through_check() -> None:
    """``examples --format json`` and each entry's own ``check`` command: valid, and the same findings."""
    listed = entries()
    code, out, err = cli("examples", "--format", "json")
    assert code in (0, 1), err
    document = validate_output("examples", out)
    assert [e["name"] for e in document] == [e.name for e in listed]
    for entry, shown in zip(listed, document, strict=True):
        code, out, err = cli(*_entry_argv(entry))
        assert code in (0, 1), f"{entry.name}: {err.strip()}"
        checked = validate_output("check", out)
        assert checked["findings"] == shown["findings"], entry.name
        assert shown["got"] == sorted({f["rule"] for f in checked["findings"]}) and shown["command"] == entry.command()


@pytest.mark.parametrize("config", CONFIGS)
def test_check_of_every_example_config(config: str) -> None:
    document = json_of("check", config)
    assert document["summary"] == {**{s: sum(f["severity"] == s for f in document["findings"])
                                      for s in ("error", "warning", "info")},
                                   "unknown": document["summary"]["unknown"]}


@pytest.mark.parametrize("preset", list(PRESETS))
def test_plan_of_every_preset(preset: str) -> None:
    assert "models" not in json_of("plan", "--preset", preset)


@pytest.mark.parametrize("hardware", list(HARDWARE))
def test_plan_on_every_hardware(hardware: str) -> None:
    document = json_of("plan", "--preset", "qwen3-30b-a3b", "--hardware", hardware, "--gpus", "16")
    assert document["hardware"]["name"] == hardware and document["training"]["world_size"] == 16


def test_plan_of_every_example_config_it_accepts() -> None:
    """A config plan refuses is one input-error line; every other prints a valid plan."""
    accepted = []
    for config in CONFIGS:
        code, out, err = cli("plan", config, "--format", "json")
        if code == 2:
            assert out == "" and err.startswith("error: ") and err.count("\n") == 1, config
            continue
        assert code in (0, 1), err
        validate_output("plan", out)
        accepted.append(config)
    # the clean Bridge dump, a Bridge and a NeMo-RL launch, and the NeMo-RL configs with one model
    assert {"examples/configs/bridge/run_config_clean.yaml", "examples/configs/launch/bridge_qwen3_moe_fixed.sh",
            "examples/configs/launch/nemo_rl_grpo_clean.sh", "examples/configs/nemo-rl/grpo_offload.yaml"} \
        <= set(accepted)


def test_plan_of_several_nemo_rl_models(tmp_path: Path) -> None:
    both = json_of("plan", PPO, *PPO_FIXED)
    assert [(m["target"], "as_configured" in m) for m in both["models"]] == [("policy", True), ("value", True)]
    unbuilt = json_of("plan", PPO, "--set", "value.megatron_cfg.enabled=false")
    assert [m["status"] for m in unbuilt["models"]][1:] == ["not_built"]
    for teacher, sized in (("meta-llama/Meta-Llama-3-70B", True), ("example-org/Not-In-The-Catalogue", False)):
        path = tmp_path / "distillation.yaml"
        path.write_text(DISTILLATION.replace("TEACHER", teacher), encoding="utf-8")
        shown = json_of("plan", str(path))["models"][1]
        assert shown["status"] == "inference_only" and (shown["weights_bytes_per_gpu"] is not None) == sized


def test_plan_options_of_a_config_that_does_not_fit() -> None:
    """A small GPU budget makes every mechanism an option, the recommendation one of them."""
    document = json_of("plan", "examples/configs/nemo-rl/grpo_offload.yaml", "--gpu-memory-gib", "8")
    assert document["status"] != "fits" and len(document["options"]) > 1


def test_lint_of_the_repository_and_of_a_broken_skill(tmp_path: Path) -> None:
    assert json_of("lint", str(ROOT))["status"] in ("ok", "fail")
    (tmp_path / "SKILL.md").write_text("---\nname: x\ndescription: y\n---\n# X\nIt is 45.1x faster.\n", "utf-8")
    broken = json_of("lint", str(tmp_path))
    assert broken["status"] == "fail" and broken["findings"]


def test_rules_output() -> None:
    from checks.rules import ALL_RULES

    document = validate_output("rules", cli("rules", "--format", "json")[1])
    assert [r["id"] for r in document] == [r.id for r in ALL_RULES]


# --- the validator refuses what breaks the contract ---------------------------------------------------

def _edited(base: Any, edit: Callable[[Any], object]) -> Any:
    document = copy.deepcopy(base)
    edit(document)
    return document


def test_bad_documents_are_refused() -> None:
    """One change each to valid documents, each a break of the contract the schemas must catch."""
    check = json_of("check", "examples/configs/bridge/run_config_broken.yaml")
    i = next(n for n, f in enumerate(check["findings"]) if f["upstream"] and f.get("patch"))
    finding = check["findings"][i]
    key = next(iter(finding["patch"]))
    plan = json_of("plan", "--preset", "llama3-8b")  # does not fit: no recommendation
    stage = plan["as_configured"]["stages"][0]
    lint = json_of("lint", str(ROOT))
    rules = validate_output("rules", cli("rules", "--format", "json")[1])
    bad: dict[str, tuple[str, Any]] = {
        "Infinity in a patch": ("check", _edited(check, lambda d: d["findings"][i]["patch"].update({key: math.inf}))),
        "unknown project": ("check", _edited(check, lambda d: d["findings"][i]["upstream"].update(project="pytorch"))),
        "anchor without a commit": ("check", _edited(check, lambda d: d["findings"][i]["upstream"].update(
            anchor="megatron/core/transformer/transformer_config.py:1140"))),
        "missing summary": ("check", _edited(check, lambda d: d.pop("summary"))),
        "extra key": ("check", _edited(check, lambda d: d.update(verdict="ok"))),
        "empty paths": ("check", _edited(check, lambda d: d["findings"][i].update(paths=[]))),
        "partial without a patch": ("check", _edited(check, lambda d: d["findings"][i].pop("patch") and d[
            "findings"][i].update(partial="needs more"))),
        "patch without safe": ("check", _edited(check, lambda d: d["findings"][i].pop("safe"))),
        "unsafe patch without its paths": ("check", _edited(check, lambda d: d["findings"][i].update(
            safe=False) or d["findings"][i].pop("unsafe_paths", None))),
        "safe patch with unsafe paths": ("check", _edited(check, lambda d: d["findings"][i].update(
            safe=True, unsafe_paths=[key]))),
        "safe without a patch": ("check", _edited(check, lambda d: d["findings"][i].pop("patch"))),
        "location of nothing": ("check", _edited(check, lambda d: d["findings"][i].update(
            location={"file": None, "line": None, "arg": None}))),
        "count not an integer": ("check", _edited(check, lambda d: d["summary"].update(error=1.5))),
        "ok with errors": ("check", _edited(check, lambda d: d.update(status="ok"))),
        "NeMo-RL release of a Bridge config": ("check", _edited(check, lambda d: d["assumptions"].update(
            nemo_rl_version="main"))),
        "Infinity mfu": ("plan", _edited(plan, lambda d: d["budget"].update(mfu=math.inf))),
        "bytes as the string inf": ("plan", _edited(plan, lambda d: d["as_configured"]["stages"][0].update(
            weights_bytes="inf"))),
        "fractional bytes": ("plan", _edited(plan, lambda d: d["as_configured"]["stages"][0].update(
            weights_bytes=stage["weights_bytes"] + 0.5))),
        "unknown mechanism": ("plan", _edited(plan, lambda d: d["options"][0].update(mechanism="magic"))),
        "fraction above 1": ("plan", _edited(plan, lambda d: d["options"][0]["settings"].update(
            optimizer_offload_fraction=2.0))),
        "does_not_fit with a recommendation": ("plan", _edited(plan, lambda d: d.update(
            recommendation=d["options"][0]))),
        "both shapes at once": ("plan", _edited(plan, lambda d: d.update(models=[]))),
        "a lint finding with an upstream check": ("lint", _edited(lint, lambda d: d["findings"].append(
            {**finding, "location": {"file": "SKILL.md", "line": 1, "arg": None}}))),
        "unknown stage": ("rules", _edited(rules, lambda d: d[0]["upstream"][0].update(stage="runtime"))),
    }
    assert plan["status"] == "does_not_fit" and plan["recommendation"] is None
    accepted = [name for name, (kind, document) in bad.items() if validator(kind).is_valid(document)]
    assert not accepted, f"the schemas accept: {accepted}"
    # NaN passes every comparison a schema can make, so the strict parse is what refuses it
    for text in ('{"a": NaN}', '{"a": Infinity}', '{"a": -Infinity}', '{"a": 1, "a": 2}'):
        with pytest.raises(ValueError, match="not strict JSON"):
            parse_strict(text)
    with pytest.raises(ValidationError):
        validate_output("check", json.dumps({**check, "flavor": "torchtitan"}))
    with pytest.raises(ValueError, match="not strict JSON"):  # Python's json.dumps writes the patch's Infinity
        validate_output("check", json.dumps(bad["Infinity in a patch"][1]))


# --- formats.md and the schemas agree -----------------------------------------------------------------

SECTIONS = {"## JSON output": ["check"], "## Several configs in one run (`check PATH...`)": ["check-run"],
            "## `plan` JSON output": ["plan"], "## `lint` JSON output": ["lint"],
            "## `rules` and `examples` JSON output": ["rules", "examples"]}
ELIDED = "..."


def _sections() -> dict[str, str]:
    text = FORMATS.read_text(encoding="utf-8")
    found = {}
    for heading in SECTIONS:
        start = text.index(f"\n{heading}\n")
        end = text.find("\n## ", start + 1)
        found[heading] = text[start:end if end >= 0 else len(text)]
    return found


def _resolved(kind: str) -> dict[str, Any]:
    """The schema with every $ref replaced by what it names (a recursive one by {}: any value)."""
    schema = load_schema(SCHEMAS[kind])

    def walk(node: Any, resolver: Any, seen: tuple[int, ...]) -> Any:
        if isinstance(node, list):
            return [walk(n, resolver, seen) for n in node]
        if not isinstance(node, dict):
            return node
        out = {k: walk(v, resolver, seen) for k, v in node.items() if k != "$ref"}
        if "$ref" in node:
            target = resolver.lookup(node["$ref"])
            if id(target.contents) not in seen:
                out = {**walk(target.contents, target.resolver, (*seen, id(target.contents))), **out}
        return out

    resolved: dict[str, Any] = walk(schema, registry().resolver(schema["$id"]), ())
    return resolved


Parts = list[dict[str, Any]]  # subschemas that all apply to one value


def _alternatives(schema: dict[str, Any]) -> list[Parts]:
    """The schema as alternatives (anyOf/oneOf), each a conjunction of parts (allOf); if/then/else, which
    only narrow, are left out."""
    base = {k: v for k, v in schema.items() if k not in ("allOf", "anyOf", "oneOf")}
    options: list[Parts] = [[base]]
    for part in schema.get("allOf", []):
        options = [o + a for o in options for a in _alternatives(part)]
    for key in ("anyOf", "oneOf"):
        if key in schema:
            options = [o + a for o in options for member in schema[key] for a in _alternatives(member)]
    return options


def _expand(conjunctions: list[Parts]) -> list[Parts]:
    """Alternatives of a list of conjunctions: each conjunction's parts, every combination of their own."""
    out = []
    for parts in conjunctions:
        options: list[Parts] = [[]]
        for part in parts:
            options = [o + a for o in options for a in _alternatives(part)]
        out += options
    return out


def _open(part: dict[str, Any], key: str) -> bool:
    return key not in part.get("properties", {}) and isinstance(part.get("additionalProperties"), dict)


def _constants(options: list[Parts]) -> set[Any] | None:
    """The values an enum-like position allows (over its alternatives), or None when it is not closed."""
    values: set[Any] = set()
    for parts in options:
        closed = [set(p["enum"]) if "enum" in p else {p["const"]} if "const" in p else {None}
                  for p in parts if "enum" in p or "const" in p or p.get("type") == "null"]
        if not closed:
            return None
        values |= set.intersection(*closed)
    return values


def _check_block(example: Any, schema: dict[str, Any], section: str) -> Iterator[str]:
    """Every key the example shows is the schema's; every required key is shown (unless the object says "...");
    every value, and each alternative of an "a | b" value, validates; a listed enum is the schema's whole enum,
    and every enum value the schema has is named in the section."""

    def walk(node: Any, conjunctions: list[Parts], where: str) -> Iterator[str]:
        options = _expand(conjunctions)
        if isinstance(node, dict):
            keys = [k for k in node if k != ELIDED]
            fitting = [parts for parts in options if all(any(k in p.get("properties", {}) or _open(p, k)
                                                             for p in parts) for k in keys)]
            if not fitting:
                yield f"{where}: the schema has no object with the keys {keys}"
                return
            if ELIDED not in node:
                if not any({r for p in parts for r in p.get("required", [])} <= set(keys) for parts in fitting):
                    yield f"{where}: the example leaves out a required key (write \"...\" to elide)"
                # an optional key the example leaves out is named in the section's prose
                missing = {k for parts in fitting for p in parts for k in p.get("properties", {})} - set(keys)
                yield from (f"{where}.{k}: neither in the example nor named in the section"
                            for k in sorted(missing) if f"{k}`" not in section)
            for k in keys:
                children = [[p["properties"][k] if k in p.get("properties", {}) else p["additionalProperties"]
                             for p in parts if k in p.get("properties", {}) or _open(p, k)] for parts in fitting]
                yield from walk(node[k], children, f"{where}.{k}")
        elif isinstance(node, list):
            items = [[p["items"] for p in parts if "items" in p] for parts in options]
            items = [conj for conj in items if conj]
            if not items:
                yield f"{where}: the schema has no array here"
            for i, item in enumerate(node):
                yield from walk(item, items, f"{where}[{i}]")
        elif node != ELIDED:
            shown = [None if a == "null" else a for a in node.split(" | ")] \
                if isinstance(node, str) and " | " in node else [node]
            for value in shown:
                if not any(all(Draft202012Validator(p).is_valid(value) for p in conj) for conj in conjunctions):
                    yield f"{where}: {value!r} does not validate"
            allowed = _constants(options)
            if allowed is not None:
                if len(shown) > 1 and set(shown) != allowed:
                    yield f"{where}: lists {shown}, the schema allows {sorted(allowed, key=str)}"
                unnamed = [v for v in allowed if v is not None and v not in shown and f"`{v}`" not in section]
                if unnamed:
                    yield f"{where}: the section does not name the values {unnamed}"

    yield from walk(example, [[schema]], "$")


def _blocks(section: str) -> list[Any]:
    return [json.loads(block) for block in re.findall(r"```json\n(.*?)```", section, re.S)]


@pytest.mark.parametrize("heading", list(SECTIONS))
def test_formats_md_json_examples_agree_with_the_schema(heading: str) -> None:
    section = _sections()[heading]
    kinds = SECTIONS[heading]
    for kind in kinds:
        assert f"reference/{SCHEMAS[kind].name}" in section, f"{heading} does not name its schema"
    blocks = _blocks(section)
    assert blocks, f"{heading} has no JSON example"
    problems = []
    for block in blocks:
        # a section with two outputs: each block is the one whose schema takes its shape
        found = {kind: list(_check_block(block, _resolved(kind), section)) for kind in kinds}
        problems += min(found.values(), key=len)
    assert not problems, "\n".join(problems)
