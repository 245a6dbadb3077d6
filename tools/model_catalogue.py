"""Build ``checks/data/models.json``: the architecture of each Hugging Face model id the checker may meet.

Maintainer tool, not part of the checker. There is no network to the Hugging Face hub, so every number comes
from upstream source that names the model, read (with ``ast`` or a flag scan; nothing is imported) from git
mirrors at pinned commits. ``tools/data/model_sources.yaml`` says which snapshots to read and which upstream
object describes which id; it holds no numbers of its own. Kinds of source, in the order a row prefers them:

- ``bridge_provider``: Megatron Bridge's size-specific provider dataclasses (megatron-core field names), at the
  snapshot before they were folded into the bridges (the table names it). Fields resolve through the class
  bases (Bridge's ``GPTModelProvider`` / ``MLAModelProvider`` / ``MambaModelProvider``, then megatron-core's
  ``TransformerConfig`` / ``MLATransformerConfig`` from the Megatron-LM mirror).
- ``nemo2``: NeMo 2 model configs (``nemo/collections/llm/gpt/model/*.py``), resolved the same way.
- ``mlm_conf``: Megatron-LM's per-model argument files
  (``examples/post_training/modelopt/conf/<org>/<model>.sh``); the id is the script's own ``HF_MODEL_CKPT``.
- ``bridge_test``: HF ``config.json`` dicts in Bridge's unit tests, converted to megatron-core names the way the
  bridge converts them: the generic ``CONFIG_MAPPING`` (read from ``model_bridge.py``), then the family bridge's
  own ``provider_bridge`` / ``hf_config_to_model_config_kwargs`` assignments (read from the bridge registered for
  the dict's ``architectures[0]``, evaluated on the dict).

A class whose docstring links ``huggingface.co/<id>`` describes that id (upstream says so); other classes and
test dicts are attached to ids in the table. A field a source sets itself is *explicit*; one it inherits from a
framework base class is a *default*; one megatron-core's ``__post_init__`` would derive is *derived*. A row takes
each field from the first source that sets it explicitly, else the first default/derived value, and lists every
other source whose value differs under ``disagreements``.

Ids come from Megatron Bridge recipes (``from_hf_pretrained`` arguments and the names they are bound to) and
from every ``model_name`` in NeMo-RL's ``examples/configs/**.yaml`` (simple ``${a.b}`` interpolations resolved).
An id with no source is listed under ``missing`` with what was tried.

Usage (git directories may be bare mirrors):

    python tools/model_catalogue.py --bridge-git DIR --nemo-rl-git DIR --mlm-git DIR --nemo-git DIR \\
        > checks/data/models.json
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import json
import operator
import re
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

TABLE = Path(__file__).parent / "data" / "model_sources.yaml"
HF_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
FIELDS = ("num_layers", "hidden_size", "ffn_hidden_size", "num_attention_heads", "num_query_groups", "kv_channels",
          "num_moe_experts", "moe_ffn_hidden_size", "moe_router_topk", "moe_shared_expert_intermediate_size",
          "moe_layer_freq", "vocab_size", "share_embeddings_and_output_weights", "seq_length",
          "multi_latent_attention", "q_lora_rank", "kv_lora_rank", "hybrid_override_pattern", "gated_linear_unit",
          "normalization")
MOE_ONLY = ("num_moe_experts", "moe_ffn_hidden_size", "moe_router_topk", "moe_shared_expert_intermediate_size",
            "moe_layer_freq")
MLA_ONLY = ("q_lora_rank", "kv_lora_rank")
REPOS = {"bridge": "NVIDIA-NeMo/Megatron-Bridge", "nemo_rl": "NVIDIA-NeMo/RL", "mlm": "NVIDIA/Megatron-LM",
         "nemo": "NVIDIA/NeMo"}


class Unevaluable(Exception):
    """An expression the small evaluator does not model; the field is left to other sources."""


# --------------------------------------------------------------------------------------------------- git access
@dataclass
class Git:
    key: str  # "bridge", "mlm", ...
    path: str
    _cache: dict[tuple[str, str], str] = field(default_factory=dict)

    def run(self, *args: str) -> str:
        out = subprocess.run(["git", "-C", self.path, *args], capture_output=True, text=True)
        if out.returncode:
            raise SystemExit(f"git {' '.join(args)} in {self.path}: {out.stderr.strip()}")
        return out.stdout

    def commit(self, ref: str) -> str:
        return self.run("rev-parse", f"{ref}^{{commit}}").strip()

    def show(self, ref: str, path: str) -> str:
        if (ref, path) not in self._cache:
            self._cache[ref, path] = self.run("show", f"{ref}:{path}")
        return self._cache[ref, path]

    def ls(self, ref: str, *prefixes: str) -> list[str]:
        return sorted(self.run("ls-tree", "-r", "--name-only", ref, "--", *prefixes).split())

    def cite(self, ref: str, path: str, line: int) -> str:
        return f"{REPOS[self.key]}@{ref[:8]}:{path}:{line}"


# ----------------------------------------------------------------------------------------- a small evaluator
_BINOPS: dict[type, Callable[[Any, Any], Any]] = {ast.Add: operator.add, ast.Mult: operator.mul,
                                                    ast.Sub: operator.sub, ast.FloorDiv: operator.floordiv}


def evaluate(node: ast.expr, names: Mapping[str, Any]) -> Any:
    """Literals, list arithmetic, ``field(default=...)``/``default_factory=lambda: ...``, names bound in
    ``names`` and attribute / ``getattr`` reads of a dict bound there (an HF config). Anything else raises."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -evaluate(node.operand, names)
    if isinstance(node, ast.List | ast.Tuple):
        return [evaluate(e, names) for e in node.elts]
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        return _BINOPS[type(node.op)](evaluate(node.left, names), evaluate(node.right, names))
    if isinstance(node, ast.BoolOp) and isinstance(node.op, ast.Or):
        value = None
        for e in node.values:
            value = evaluate(e, names)
            if value:
                return value
        return value
    if isinstance(node, ast.Name):
        if node.id in names:
            return names[node.id]
        raise Unevaluable(node.id)
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and isinstance(names.get(node.value.id),
                                                                                              dict):
        config = names[node.value.id]
        if node.attr not in config:
            raise Unevaluable(f"{node.value.id}.{node.attr} absent")
        return config[node.attr]
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        if node.func.id == "field":
            for kw in node.keywords:
                if kw.arg == "default":
                    return evaluate(kw.value, names)
                if kw.arg == "default_factory" and isinstance(kw.value, ast.Lambda):
                    return evaluate(kw.value.body, names)
        if node.func.id == "getattr" and len(node.args) in (2, 3) and isinstance(node.args[0], ast.Name):
            config, key = names.get(node.args[0].id), evaluate(node.args[1], names)
            if isinstance(config, dict):
                if key in config:
                    return config[key]
                if len(node.args) == 3:
                    return evaluate(node.args[2], names)
    raise Unevaluable(ast.unparse(node))


# ------------------------------------------------------------------------------------------ evidence records
@dataclass
class Value:
    value: Any
    cite: str
    kind: str  # "explicit" | "default" | "derived"


@dataclass
class Evidence:
    source: str  # where the whole record comes from (class or file line)
    values: dict[str, Value]
    hf_architecture: str | None = None
    revision: str | None = None
    notes: list[str] = field(default_factory=list)


# ------------------------------------------------------------------------------------ dataclass field resolver
@dataclass
class ClassInfo:
    name: str
    path: str
    line: int
    bases: list[str]
    fields: dict[str, tuple[ast.expr, int]]
    doc: str
    module_names: dict[str, Any]
    git: Git
    ref: str


def _base_name(node: ast.expr) -> str:
    if isinstance(node, ast.Subscript):  # ModelProviderMixin[MCoreGPTModel]
        node = node.value
    if isinstance(node, ast.Attribute):
        return node.attr
    return node.id if isinstance(node, ast.Name) else ast.unparse(node)


def classes(git: Git, ref: str, paths: list[str]) -> dict[str, list[ClassInfo]]:
    """Every class in ``paths`` by name (a name may be defined in several files)."""
    found: dict[str, list[ClassInfo]] = {}
    for path in paths:
        tree = ast.parse(git.show(ref, path))
        module: dict[str, Any] = {}
        for stmt in tree.body:  # module-level constants a field may refer to
            if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
                with contextlib.suppress(Unevaluable):
                    module[stmt.targets[0].id] = evaluate(stmt.value, module)
        for stmt in tree.body:
            if not isinstance(stmt, ast.ClassDef):
                continue
            own: dict[str, tuple[ast.expr, int]] = {}
            for item in stmt.body:
                if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name) and item.value is not None:
                    own[item.target.id] = (item.value, item.lineno)
                elif isinstance(item, ast.Assign) and len(item.targets) == 1 and isinstance(item.targets[0], ast.Name):
                    own[item.targets[0].id] = (item.value, item.lineno)
            info = ClassInfo(stmt.name, path, stmt.lineno, [_base_name(b) for b in stmt.bases], own,
                             ast.get_docstring(stmt) or "", module, git, ref)
            found.setdefault(stmt.name, []).append(info)
    return found


@dataclass
class Resolver:
    registries: list[dict[str, list[ClassInfo]]]  # searched in order: the snapshot's own files, then megatron-core
    framework: frozenset[str]  # base classes whose values are framework defaults, not model statements

    def find(self, name: str, near: ClassInfo | None) -> ClassInfo | None:
        for registry in self.registries:
            candidates = registry.get(name, [])
            same_file = [c for c in candidates if near is not None and c.path == near.path]
            if same_file or candidates:
                return (same_file or candidates)[0]
        return None

    def resolve(self, info: ClassInfo) -> dict[str, Value]:
        merged: dict[str, Value] = {}
        for base in reversed(info.bases):  # the first base wins, as in a dataclass MRO for these simple trees
            found = self.find(base, info)
            if found is not None and found is not info:
                merged.update(self.resolve(found))
        # megatron-core's own classes and the framework's base classes speak for no model in particular
        kind = "default" if info.name in self.framework or info.git.key == "mlm" else "explicit"
        for name, (node, line) in info.fields.items():
            try:
                merged[name] = Value(evaluate(node, info.module_names), info.git.cite(info.ref, info.path, line), kind)
            except Unevaluable:
                merged.pop(name, None)
        return merged


# ---------------------------------------------------------------------------------- megatron-core derivations
@dataclass(frozen=True)
class Derivations:
    """Where megatron-core's ``TransformerConfig.__post_init__`` fills unset dimensions (cited per field)."""

    ffn: str
    kv: str
    groups: str
    moe_ffn: str


def derivations(mlm: Git, ref: str) -> Derivations:
    path = "megatron/core/transformer/transformer_config.py"
    lines = mlm.show(ref, path).splitlines()

    def where(text: str) -> str:
        for number, line in enumerate(lines, 1):
            if text in line:
                return mlm.cite(ref, path, number)
        raise SystemExit(f"{path}: {text!r} not found at {ref}")

    return Derivations(where("self.ffn_hidden_size = 4 * self.hidden_size"),
                       where("self.kv_channels = self.hidden_size // self.num_attention_heads"),
                       where("self.num_query_groups = self.num_attention_heads"),
                       where("self.moe_ffn_hidden_size = self.ffn_hidden_size"))


def derive(values: dict[str, Value], how: Derivations) -> None:
    """Fill what megatron-core would derive, marked ``derived`` so an explicit value elsewhere wins."""

    def get(name: str) -> Any:
        return values[name].value if name in values else None

    hidden, heads = get("hidden_size"), get("num_attention_heads")
    if get("ffn_hidden_size") is None and hidden is not None:
        values["ffn_hidden_size"] = Value(4 * hidden, how.ffn, "derived")
    if get("kv_channels") is None and hidden is not None and heads:
        values["kv_channels"] = Value(hidden // heads, how.kv, "derived")
    if get("num_query_groups") is None and heads is not None:
        values["num_query_groups"] = Value(heads, how.groups, "derived")
    if get("num_moe_experts") and get("moe_ffn_hidden_size") is None and get("ffn_hidden_size") is not None:
        values["moe_ffn_hidden_size"] = Value(get("ffn_hidden_size"), how.moe_ffn, "derived")
    pattern = get("hybrid_override_pattern")
    if pattern and get("num_layers") is None:
        values["num_layers"] = Value(len(pattern), values["hybrid_override_pattern"].cite, "derived")


# -------------------------------------------------------------------------------------- source: class snapshots
@dataclass
class Snapshot:
    kind: str
    git: Git
    ref: str
    resolver: Resolver
    classes: dict[str, list[ClassInfo]]

    def by_docstring(self) -> dict[str, list[str]]:
        """hf id -> class names whose docstring links ``huggingface.co/<id>``."""
        out: dict[str, list[str]] = {}
        for name, infos in sorted(self.classes.items()):
            linked = {i.rstrip(".") for i in re.findall(r"huggingface\.co/([\w.-]+/[\w.-]+)", infos[0].doc)}
            if len(linked) == 1:  # a family base class linking several sizes describes none of them alone
                out.setdefault(linked.pop(), []).append(name)
        return out

    def evidence(self, class_name: str, how: Derivations) -> Evidence:
        info = self.resolver.find(class_name, None)
        if info is None or info.git is not self.git:
            raise SystemExit(f"{self.kind}: class {class_name} not found at {self.ref[:8]}")
        resolved = self.resolver.resolve(info)
        if "max_position_embeddings" in resolved:  # the model's length, which Bridge maps to seq_length
            resolved["seq_length"] = resolved["max_position_embeddings"]
        values = {k: v for k, v in resolved.items() if k in FIELDS}
        # mcore's own defaults for a field that is None mean "not set"; derive() decides what it becomes
        values = {k: v for k, v in values.items() if v.value is not None or v.kind == "explicit"}
        derive(values, how)
        return Evidence(f"{self.git.cite(self.ref, info.path, info.line)} (class {class_name})", values)


def snapshot(kind: str, git: Git, ref: str, files: Mapping[str, str], framework: list[str],
             mcore: dict[str, list[ClassInfo]]) -> Snapshot:
    """The classes of the files under ``files["under"]`` whose name matches ``files["name"]`` (a regex)."""
    paths = [p for p in git.ls(ref, files["under"]) if re.fullmatch(files["name"], Path(p).name)]
    own = classes(git, ref, paths)
    return Snapshot(kind, git, ref, Resolver([own, mcore], frozenset(framework)), own)


# ------------------------------------------------------------------------------------- source: Megatron-LM conf
_MLM_FLAGS: dict[str, str] = {
    "--num-layers": "num_layers", "--hidden-size": "hidden_size", "--ffn-hidden-size": "ffn_hidden_size",
    "--num-attention-heads": "num_attention_heads", "--num-query-groups": "num_query_groups",
    "--kv-channels": "kv_channels", "--num-experts": "num_moe_experts",
    "--moe-ffn-hidden-size": "moe_ffn_hidden_size", "--moe-router-topk": "moe_router_topk",
    "--moe-shared-expert-intermediate-size": "moe_shared_expert_intermediate_size",
    "--moe-layer-freq": "moe_layer_freq", "--max-position-embeddings": "seq_length",
    "--normalization": "normalization", "--q-lora-rank": "q_lora_rank", "--kv-lora-rank": "kv_lora_rank",
    "--hybrid-override-pattern": "hybrid_override_pattern", "--hybrid-layer-pattern": "hybrid_override_pattern",
    "--vocab-size": "vocab_size",
}
_MLM_SWITCHES: dict[str, tuple[str, Any]] = {
    "--untie-embeddings-and-output-weights": ("share_embeddings_and_output_weights", False),
    "--swiglu": ("gated_linear_unit", True), "--multi-latent-attention": ("multi_latent_attention", True),
}


def mlm_conf(git: Git, ref: str, path: str, how: Derivations) -> tuple[str | None, Evidence]:
    """The id a Megatron-LM argument file names (its ``HF_MODEL_CKPT`` default) and the model it describes."""
    text = git.show(ref, path)
    hf_id = None
    values: dict[str, Value] = {}
    for number, line in enumerate(text.splitlines(), 1):
        line = line.split("#", 1)[0]
        ckpt = re.match(r"\s*HF_MODEL_CKPT=([\w./-]+)\s*$", line)
        if ckpt and hf_id is None:
            hf_id = ckpt.group(1)
        words = line.replace("\\", " ").replace('"', " ").split()
        for i, word in enumerate(words):
            cite = git.cite(ref, path, number)
            if word in _MLM_SWITCHES:
                name, switch = _MLM_SWITCHES[word]
                values[name] = Value(switch, cite, "explicit")
            elif word in _MLM_FLAGS and i + 1 < len(words):
                raw = words[i + 1]
                name = _MLM_FLAGS[word]
                if name in ("normalization", "hybrid_override_pattern"):
                    value: Any = raw
                elif name == "moe_layer_freq":
                    value = raw if raw.isdigit() else _moe_freq(raw)
                    value = int(value) if isinstance(value, str) else value
                else:
                    value = int(raw)
                values[name] = Value(value, cite, "explicit")
    if "num_query_groups" in values and "--group-query-attention" not in text:
        values.pop("num_query_groups")  # Megatron-LM ignores --num-query-groups without --group-query-attention
    derive(values, how)
    return hf_id, Evidence(git.cite(ref, path, 1), values)


def _moe_freq(raw: str) -> Any:
    try:
        return evaluate(ast.parse(raw.strip("()'"), mode="eval").body, {})
    except (Unevaluable, SyntaxError):
        return raw


# --------------------------------------------------------------------------------- source: Bridge test HF dicts
@dataclass
class BridgeMapping:
    git: Git
    ref: str
    generic: list[tuple[str, str]]
    generic_cite: str
    by_architecture: dict[str, ClassInfo]  # HF architectures[0] -> registered bridge class
    bridges: dict[str, list[ClassInfo]]
    trees: dict[str, ast.Module]


def bridge_mapping(git: Git, ref: str) -> BridgeMapping:
    path = "src/megatron/bridge/models/conversion/model_bridge.py"
    generic: list[tuple[str, str]] = []
    cite = ""
    for node in ast.walk(ast.parse(git.show(ref, path))):
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "CONFIG_MAPPING"
                                                for t in node.targets) and isinstance(node.value, ast.List):
            generic = [tuple(evaluate(e, {})) for e in node.value.elts]  # type: ignore[misc]
            cite = git.cite(ref, path, node.lineno)
            break
    paths = [p for p in git.ls(ref, "src/megatron/bridge/models") if p.endswith("_bridge.py")]
    found = classes(git, ref, paths)
    trees = {p: ast.parse(git.show(ref, p)) for p in paths}
    by_arch: dict[str, ClassInfo] = {}
    for p, tree in trees.items():
        for stmt in tree.body:
            if not isinstance(stmt, ast.ClassDef):
                continue
            for deco in stmt.decorator_list:
                if isinstance(deco, ast.Call) and ast.unparse(deco.func).endswith("register_bridge"):
                    for kw in deco.keywords:
                        if kw.arg == "source" and isinstance(kw.value, ast.Constant) and isinstance(kw.value.value,
                                                                                                   str):
                            info = next(i for i in found[stmt.name] if i.path == p)
                            by_arch.setdefault(kw.value.value, info)
    return BridgeMapping(git, ref, generic, cite, by_arch, found, trees)


_BRIDGE_METHODS = ("provider_bridge", "hf_config_to_model_config_kwargs", "hf_config_to_provider_kwargs")


def _bridge_chain(m: BridgeMapping, info: ClassInfo) -> list[ClassInfo]:
    chain = [info]
    for base in info.bases:
        for cand in m.bridges.get(base, []):
            chain = _bridge_chain(m, cand) + chain
            break
    return chain


def bridge_test(m: BridgeMapping, path: str, fixture: str, key: str | None, how: Derivations) -> Evidence:
    """An HF config dict from a Bridge unit test, converted as the registered bridge converts it."""
    tree = ast.parse(m.git.show(m.ref, path))
    hf, line = None, 0
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == fixture:
            for stmt in ast.walk(node):
                if isinstance(stmt, ast.Return) and isinstance(stmt.value, ast.Dict):
                    hf, line = evaluate_dict(stmt.value), stmt.lineno
    if hf is None:
        raise SystemExit(f"{path}: fixture {fixture} returning a dict literal not found at {m.ref[:8]}")
    if key is not None:
        hf, line = hf[key], _key_line(tree, fixture, key)
    cite = m.git.cite(m.ref, path, line)
    values: dict[str, Value] = {}
    for hf_name, mc_name in m.generic:  # the first HF name that is present wins, as model_bridge.py does
        if hf_name in hf and mc_name not in values:
            values[mc_name] = Value(hf[hf_name], f"{cite} ({hf_name}) via {m.generic_cite}", "explicit")
    arch = (hf.get("architectures") or [None])[0]
    notes = []
    bridge = m.by_architecture.get(arch) if arch else None
    if bridge is None:
        notes.append(f"no bridge registered for {arch}; only the generic CONFIG_MAPPING applied")
    else:
        for info in _bridge_chain(m, bridge):
            for stmt in _method_statements(m.trees[info.path], info.name):
                for name, node in _assignments(stmt):
                    if name not in FIELDS:
                        continue
                    try:
                        value = evaluate(node, {"hf_config": hf})
                    except Unevaluable:
                        continue
                    values[name] = Value(value, m.git.cite(m.ref, info.path, stmt.lineno), "explicit")
    if values.get("share_embeddings_and_output_weights") is None and "tie_word_embeddings" not in hf:
        notes.append("tie_word_embeddings absent from the test dict")
    derive(values, how)
    return Evidence(cite, values, arch, None, notes)


def evaluate_dict(node: ast.Dict) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in zip(node.keys, node.values, strict=True):
        if isinstance(k, ast.Constant) and isinstance(k.value, str):
            with contextlib.suppress(Unevaluable):
                out[k.value] = evaluate_dict(v) if isinstance(v, ast.Dict) else evaluate(v, {})
    return out


def _key_line(tree: ast.Module, fixture: str, key: str) -> int:
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == fixture:
            for d in ast.walk(node):
                if isinstance(d, ast.Dict):
                    for k in d.keys:
                        if isinstance(k, ast.Constant) and k.value == key:
                            return k.lineno
    raise SystemExit(f"{fixture}: key {key} not found")


def _method_statements(tree: ast.Module, class_name: str) -> Iterator[ast.stmt]:
    """Top-level statements of the bridge's conversion methods (branches are not followed: they depend on
    inputs a static reading cannot see, so a field set only in a branch is left to other sources)."""
    for stmt in tree.body:
        if isinstance(stmt, ast.ClassDef) and stmt.name == class_name:
            for item in stmt.body:
                if isinstance(item, ast.FunctionDef) and item.name in _BRIDGE_METHODS:
                    yield from item.body


def _assignments(stmt: ast.stmt) -> Iterator[tuple[str, ast.expr]]:
    if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
        target = stmt.targets[0]
        if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == "provider":
            yield target.attr, stmt.value
        if isinstance(target, ast.Subscript) and isinstance(target.slice, ast.Constant):
            yield str(target.slice.value), stmt.value
    if (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)
            and isinstance(stmt.value.func, ast.Attribute) and stmt.value.func.attr == "update"):
        for kw in stmt.value.keywords:
            if kw.arg:
                yield kw.arg, kw.value


# ------------------------------------------------------------------------------------------------ id discovery
def bridge_recipe_ids(git: Git, ref: str) -> dict[str, str]:
    """hf id -> first ``path:line`` a recipe names it: a literal ``from_hf_pretrained`` argument, or a string
    bound (assignment, parameter default, ``*_MODEL_ID`` constant, ``cfg.model.hf_model_id``) to a name that a
    ``from_hf_pretrained`` call passes."""
    paths = [p for p in git.ls(ref, "src/megatron/bridge/recipes", "src/megatron/bridge/perf_recipes")
             if p.endswith(".py")]
    trees = {p: ast.parse(git.show(ref, p)) for p in paths}
    passed: set[str] = set()
    found: dict[str, str] = {}
    for p, tree in trees.items():
        for node in ast.walk(tree):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "from_hf_pretrained" and node.args):
                arg = node.args[0]
                if isinstance(arg, ast.Name):
                    passed.add(arg.id)
                elif isinstance(arg, ast.Constant) and isinstance(arg.value, str) and HF_ID.match(arg.value):
                    found.setdefault(arg.value, git.cite(ref, p, node.lineno))
    for p, tree in trees.items():
        for node in ast.walk(tree):
            for name, value, line in _bindings(node):
                if ((name in passed or name.endswith("_MODEL_ID") or name == "hf_model_id")
                        and isinstance(value, ast.Constant) and isinstance(value.value, str)
                        and HF_ID.match(value.value)):
                    found.setdefault(value.value, git.cite(ref, p, line))
    return dict(sorted(found.items()))


def _bindings(node: ast.AST) -> Iterator[tuple[str, ast.expr, int]]:
    if isinstance(node, ast.Assign):
        for target in node.targets:
            if isinstance(target, ast.Name):
                yield target.id, node.value, node.lineno
            elif isinstance(target, ast.Attribute) and target.attr == "hf_model_id":
                yield "hf_model_id", node.value, node.lineno
    elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
        yield node.target.id, node.value, node.lineno
    elif isinstance(node, ast.FunctionDef):
        positional = node.args.args[len(node.args.args) - len(node.args.defaults):]
        for a, d in zip(positional, node.args.defaults, strict=True):
            yield a.arg, d, node.lineno
        for a, default in zip(node.args.kwonlyargs, node.args.kw_defaults, strict=True):
            if default is not None:
                yield a.arg, default, node.lineno


def nemo_rl_ids(git: Git, ref: str) -> tuple[dict[str, str], dict[str, str]]:
    """(hf id -> first ``path:key``, non-id values -> where) for every ``model_name`` in the example configs."""
    ids: dict[str, str] = {}
    other: dict[str, str] = {}
    for p in git.ls(ref, "examples/configs"):
        if not p.endswith((".yaml", ".yml")):
            continue
        doc = yaml.safe_load(git.show(ref, p))
        for where, value in _model_names(doc, ()):
            value = _interpolate(doc, value)
            spot = f"{REPOS['nemo_rl']}@{ref[:8]}:{p}:{where}"
            if isinstance(value, str) and HF_ID.match(value):
                ids.setdefault(value, spot)
            else:
                other.setdefault(str(value), spot)
    return dict(sorted(ids.items())), dict(sorted(other.items()))


def _model_names(node: Any, where: tuple[str, ...]) -> Iterator[tuple[str, Any]]:
    if isinstance(node, dict):
        for k, v in node.items():
            if k == "model_name" and not isinstance(v, dict | list):
                yield ".".join((*where, "model_name")), v
            else:
                yield from _model_names(v, (*where, str(k)))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _model_names(v, (*where, str(i)))


def _interpolate(doc: Any, value: Any) -> Any:
    """``${a.b}`` naming another key of the same file, as OmegaConf resolves it; anything else is kept."""
    for _ in range(5):
        m = re.fullmatch(r"\$\{([\w.]+)\}", value) if isinstance(value, str) else None
        if not m:
            return value
        node = doc
        for part in m.group(1).split("."):
            if not isinstance(node, dict) or part not in node:
                return value
            node = node[part]
        value = node
    return value


# ------------------------------------------------------------------------------------------------------ rows
def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float | int) and isinstance(b, float | int):
        return float(a) == float(b)
    return bool(a == b)


def row(hf_id: str, evidence: list[Evidence], revision: str | None, extra_notes: list[str]) -> dict[str, Any]:
    chosen: dict[str, Value] = {}
    for rank in ("explicit", "default", "derived"):
        for ev in evidence:
            for name, v in ev.values.items():
                if name not in chosen and v.kind == rank:
                    chosen[name] = v
    disagreements: dict[str, list[str]] = {}
    for name, pick in sorted(chosen.items()):
        for ev in evidence:
            other = ev.values.get(name)
            if other is not None and other is not pick and not _same(other.value, pick.value):
                disagreements.setdefault(name, []).append(
                    f"{json.dumps(other.value)} ({other.kind}) at {other.cite}"
                    f" vs {json.dumps(pick.value)} ({pick.kind}) at {pick.cite}")
    out: dict[str, Any] = {}
    experts = chosen.get("num_moe_experts")
    pattern = chosen.get("hybrid_override_pattern")
    out["architecture"] = ("hybrid" if pattern is not None and pattern.value else
                           "moe" if experts is not None and experts.value else "dense")
    out["hf_architecture"] = next((ev.hf_architecture for ev in evidence if ev.hf_architecture), None)
    for name in FIELDS:
        out[name] = chosen[name].value if name in chosen else None
    if not out["num_moe_experts"]:
        for name in MOE_ONLY:  # a dense model has no expert fields, whatever framework default they carry
            out[name] = None
    if out["multi_latent_attention"] is not True:
        out["multi_latent_attention"] = False
        for name in MLA_ONLY:
            out[name] = None
    if not out["hybrid_override_pattern"]:
        out["hybrid_override_pattern"] = None
    out["source"] = "; ".join(ev.source for ev in evidence)
    out["field_sources"] = {name: f"{chosen[name].cite} ({chosen[name].kind})" for name in FIELDS
                            if name in chosen and out[name] is not None}
    out["revision"] = revision
    out["disagreements"] = disagreements
    notes = [n for ev in evidence for n in ev.notes if n] + extra_notes
    if "vocab_size" not in chosen:
        notes.append("no source gives vocab_size")
    out["notes"] = " ".join(notes) or None
    return out


# ------------------------------------------------------------------------------------------------------ main
def build(args: argparse.Namespace) -> dict[str, Any]:
    table = yaml.safe_load(TABLE.read_text())
    pins = table["pins"]
    bridge, nemo_rl = Git("bridge", args.bridge_git), Git("nemo_rl", args.nemo_rl_git)
    mlm, nemo = Git("mlm", args.mlm_git), Git("nemo", args.nemo_git)
    mlm_ref = mlm.commit(pins["mlm"])
    how = derivations(mlm, mlm_ref)
    mcore = classes(mlm, mlm_ref, pins["mcore_files"])
    snaps = {
        "bridge_provider": snapshot("bridge_provider", bridge, bridge.commit(pins["bridge_providers"]),
                                    pins["bridge_provider_files"], pins["bridge_framework_classes"], mcore),
        "nemo2": snapshot("nemo2", nemo, nemo.commit(pins["nemo"]), pins["nemo_files"],
                          pins["nemo_framework_classes"], mcore),
    }
    bridge_ref = bridge.commit(pins["bridge"])
    mapping = bridge_mapping(bridge, bridge_ref)

    sources: dict[str, list[Evidence]] = {}
    for snap in snaps.values():  # upstream's own docstring links
        for hf_id, names in snap.by_docstring().items():
            for name in names:
                sources.setdefault(hf_id, []).append(snap.evidence(name, how))
    for hf_id, entry in (table.get("classes") or {}).items():  # classes the table attaches to an id
        for kind, names in entry.items():
            for name in names:
                sources.setdefault(hf_id, []).append(snaps[kind].evidence(name, how))
    conf = "examples/post_training/modelopt/conf/"
    for path in mlm.ls(mlm_ref, conf):
        # The file is named by the id (conf/<org>/<model>.sh); its HF_MODEL_CKPT default is sometimes a copy
        # from a sibling (gpt-oss-120b.sh names openai/gpt-oss-20b), so the path decides and a mismatch is noted.
        hf_id = path[len(conf):-len(".sh")] if path.endswith(".sh") else ""
        if not HF_ID.match(hf_id):
            continue
        ckpt, ev = mlm_conf(mlm, mlm_ref, path, how)
        if ckpt is not None and not HF_ID.match(ckpt):
            continue  # a variant for a local checkpoint path (moonshotai/kimi_k2_instruct.sh)
        if ckpt is not None and ckpt != hf_id:
            ev.notes.append(f"{path} sets HF_MODEL_CKPT={ckpt}, not the id its name gives.")
        if "num_layers" in ev.values:
            sources.setdefault(hf_id, []).append(ev)
    for hf_id, tests in (table.get("bridge_tests") or {}).items():
        for t in tests:
            sources.setdefault(hf_id, []).append(bridge_test(mapping, t["path"], t["fixture"], t.get("key"), how))
    order = {"bridge_provider": 0, "nemo2": 1, "mlm_conf": 2, "bridge_test": 3}

    def rank(ev: Evidence) -> int:
        if "Megatron-LM" in ev.source:
            return order["mlm_conf"]
        if "tests/unit_tests" in ev.source:
            return order["bridge_test"]
        return order["nemo2"] if "NVIDIA/NeMo@" in ev.source else order["bridge_provider"]

    recipe_ids = bridge_recipe_ids(bridge, bridge_ref)
    rl_ids, rl_other = nemo_rl_ids(nemo_rl, nemo_rl.commit(pins["nemo_rl"]))
    revisions = table.get("revisions") or {}
    models: dict[str, Any] = {}
    for hf_id in sorted(sources):
        if not any("num_layers" in ev.values for ev in sources[hf_id]):
            continue  # not a transformer these fields describe (e.g. NeMo's Hyena configs)
        evidence = sorted(sources[hf_id], key=rank)
        notes = list((table.get("notes") or {}).get(hf_id, []))
        rev = revisions.get(hf_id)
        models[hf_id] = row(hf_id, evidence, rev["revision"] if rev else None,
                            notes + ([f"revision from {rev['source']}"] if rev else []))
    wanted = {**{k: f"Bridge recipe {v}" for k, v in recipe_ids.items()},
              **{k: f"NeMo-RL config {v}" for k, v in rl_ids.items() if k not in recipe_ids}}
    tried = table["tried"]
    missing = {hf_id: f"named by {where}; tried: {tried}" + (f" ({table['missing_notes'][hf_id]})"
                                                            if hf_id in (table.get("missing_notes") or {}) else "")
               for hf_id, where in sorted(wanted.items()) if hf_id not in models}
    archs: dict[str, int] = {}
    for m in models.values():
        archs[m["architecture"]] = archs.get(m["architecture"], 0) + 1
    return {
        "source": {
            "tool": "tools/model_catalogue.py",
            "pins": {"bridge": bridge_ref[:8], "bridge_providers": snaps["bridge_provider"].ref[:8],
                     "nemo_rl": nemo_rl.commit(pins["nemo_rl"])[:8], "megatron_lm": mlm_ref[:8],
                     "nemo": snaps["nemo2"].ref[:8]},
            "notes": table["notes_header"],
        },
        "models": models,
        "aliases": table.get("aliases") or {},
        "missing": missing,
        "wanted": {"bridge_recipes": recipe_ids, "nemo_rl_configs": rl_ids, "nemo_rl_non_ids": rl_other},
        "counts": {"models": len(models), **{f"models_{k}": v for k, v in sorted(archs.items())},
                   "missing": len(missing), "bridge_recipe_ids": len(recipe_ids), "nemo_rl_ids": len(rl_ids),
                   "with_disagreements": sum(1 for m in models.values() if m["disagreements"])},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bridge-git", required=True)
    parser.add_argument("--nemo-rl-git", required=True)
    parser.add_argument("--mlm-git", required=True)
    parser.add_argument("--nemo-git", required=True)
    args = parser.parse_args(argv)
    json.dump(build(args), sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
