"""Extract the dataclass fields of Megatron Bridge's ConfigContainer sections from a source tree.

Maintainer tool, not part of the checker. It reads a Megatron-Bridge git checkout and the
Megatron-LM commit Bridge pins (its ``3rdparty/Megatron-LM`` submodule) with ``git cat-file``,
parses the modules with :mod:`ast` (nothing is imported or executed), and prints the table that
``checks/data/bridge_fields.json`` holds.

The checker needs it to apply Hydra overrides to a Bridge override file the way Bridge does: the
base config is the recipe's ``ConfigContainer`` turned into an OmegaConf dict and put in struct
mode (src/megatron/bridge/training/utils/omegaconf_utils.py:163-186), so whether ``train.x=1`` is
refused depends on whether ``x`` is a field of the section's class, and whether ``+train.x=1`` is
refused on whether its value is null. The recipe itself is not known, so for each section the
table lists every class the section can hold (the annotated classes and their subclasses in
Bridge) and, per field, whether every annotated class has it (``"in": "all"``) or only some, and
the kinds of default its declarations give (``null``, ``value``, ``list``, ``map``, ``dataclass``,
``callable``, ``required``, ``unknown``).

For ``model``, ``optimizer`` and ``ddp`` the fields megatron-core's own config classes declare
(``TransformerConfig``, ``ModelParallelConfig``, ``OptimizerConfig``, ``DistributedDataParallelConfig``)
are left out: they come from the selected megatron-core version (``checks/data/mcore_fields.json``).
Redeclarations of them in Bridge classes (a provider changing a default) are kept.

Usage (after a Bridge update; see reference/updating.md):

    python tools/bridge_fields.py --bridge /path/to/Megatron-Bridge --megatron-lm /path/to/Megatron-LM \\
        --ref 067f987d > checks/data/bridge_fields.json
"""

from __future__ import annotations

import argparse
import ast
import json
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from mcore_fields import _default  # the same reading of a field's default as the megatron-core table

CONTAINER = ("megatron.bridge.training.config", "ConfigContainer")
# megatron-core classes whose fields the version profiles hold (tools/mcore_fields.py CLASSES).
PROFILE_CLASSES: dict[str, tuple[str, ...]] = {
    "model": ("megatron.core.transformer.transformer_config.TransformerConfig",
              "megatron.core.model_parallel_config.ModelParallelConfig"),
    "optimizer": ("megatron.core.optimizer.optimizer_config.OptimizerConfig",),
    "ddp": ("megatron.core.distributed.distributed_data_parallel_config.DistributedDataParallelConfig",),
}
# `model` is a provider (flat fields) in every recipe; the GPTModelConfig classes nest the transformer fields
# under `model.transformer` and are listed as the section "model.nested". MegatronMIMOProvider is not a
# TransformerConfig: the checker does not model it.
NESTED_MODEL = {"GPTModelConfig", "HybridModelConfig"}
NOT_MODELLED = {"MegatronMIMOProvider"}
# Providers outside the annotation (FluxProvider, WanModelProvider, DistillationProvider, ...) subclass Bridge's
# TransformerConfig too: a key only they declare may exist, so they count for "some" (not for "all").
BRIDGE_TRANSFORMER = "megatron.bridge.models.transformer_config.TransformerConfig"
_DATACLASS = {"dataclass", "dataclasses.dataclass"}


class Sources:
    """Files of the two repositories at their commits, read through one ``git cat-file --batch`` each."""

    def __init__(self, bridge: Path, ref: str, megatron_lm: Path) -> None:
        self.bridge_commit = _git(bridge, "rev-parse", f"{ref}^{{commit}}").strip()
        pin = _git(bridge, "ls-tree", self.bridge_commit, "3rdparty/Megatron-LM").split()
        self.mlm_commit = pin[2]
        self._repos = {"bridge": (bridge, self.bridge_commit), "mlm": (megatron_lm, self.mlm_commit)}
        self._cache: dict[tuple[str, str], str | None] = {}
        self.bridge_files = [p for p in _git(bridge, "ls-tree", "-r", "--name-only", self.bridge_commit,
                                             "src/megatron/bridge").splitlines() if p.endswith(".py")]

    def read(self, repo: str, path: str) -> str | None:
        if (repo, path) not in self._cache:
            root, commit = self._repos[repo]
            done = subprocess.run(["git", "-C", str(root), "show", f"{commit}:{path}"], capture_output=True,
                                  text=True, check=False)
            self._cache[(repo, path)] = done.stdout if done.returncode == 0 else None
        return self._cache[(repo, path)]

    def module(self, name: str) -> tuple[str, str] | None:
        """(repo, path) of a module's source, or None for one outside the two repositories."""
        parts = name.split(".")
        if parts[:2] == ["megatron", "bridge"]:
            repo, prefix = "bridge", "src/"
        elif parts[:2] in (["megatron", "core"], ["megatron", "training"]):
            repo, prefix = "mlm", ""
        else:
            return None
        base = prefix + "/".join(parts)
        for path in (base + ".py", base + "/__init__.py"):
            if self.read(repo, path) is not None:
                return repo, path
        return None


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


@dataclass
class ClassInfo:
    module: str
    name: str
    node: ast.ClassDef
    bases: list[str] = field(default_factory=list)  # qualified names; unresolved ones as written
    is_dataclass: bool = False

    @property
    def qualname(self) -> str:
        return f"{self.module}.{self.name}"


class Index:
    """Classes by qualified name, resolving imports (and package re-exports) the way Python would."""

    def __init__(self, sources: Sources) -> None:
        self.sources = sources
        self._modules: dict[str, tuple[dict[str, ClassInfo], dict[str, str]] | None] = {}
        self._fields: dict[str, dict[str, tuple[str, Any, str]]] = {}

    def _parse(self, module: str) -> tuple[dict[str, ClassInfo], dict[str, str]] | None:
        if module in self._modules:
            return self._modules[module]
        self._modules[module] = None
        where = self.sources.module(module)
        if where is None:
            return None
        source = self.sources.read(*where)
        assert source is not None
        tree = ast.parse(source)
        package = module if where[1].endswith("__init__.py") else module.rsplit(".", 1)[0]
        imports: dict[str, str] = {}
        classes: dict[str, ClassInfo] = {}
        for node in tree.body:
            if isinstance(node, ast.ImportFrom):
                origin = node.module or ""
                if node.level:
                    origin = ".".join(package.split(".")[:len(package.split(".")) - node.level + 1] +
                                      ([origin] if origin else []))
                for alias in node.names:
                    imports[alias.asname or alias.name] = f"{origin}.{alias.name}"
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    imports[alias.asname or alias.name.split(".")[0]] = alias.name if alias.asname else \
                        alias.name.split(".")[0]
            elif isinstance(node, ast.ClassDef):
                classes[node.name] = ClassInfo(module, node.name, node)
        self._modules[module] = (classes, imports)
        for info in classes.values():
            info.is_dataclass = any(_decorator_name(d) in _DATACLASS for d in info.node.decorator_list)
            info.bases = [self.qualify(module, _base_name(b)) for b in info.node.bases]
        return self._modules[module]

    def qualify(self, module: str, name: str) -> str:
        """The qualified name ``name`` (possibly dotted) stands for in ``module``."""
        parsed = self._parse(module)
        if parsed is None or not name:
            return name
        classes, imports = parsed
        head, _, rest = name.partition(".")
        if head in classes and not rest:
            return f"{module}.{head}"
        if head in imports:
            target = imports[head] + (f".{rest}" if rest else "")
            return self.canonical(target)
        return name

    def canonical(self, qualname: str) -> str:
        """Follow re-exports until the module that defines the class."""
        module, _, name = qualname.rpartition(".")
        parsed = self._parse(module)
        if parsed is None:
            return qualname
        classes, imports = parsed
        if name in classes:
            return qualname
        if name in imports and imports[name] != qualname:
            return self.canonical(imports[name])
        return qualname

    def get(self, qualname: str) -> ClassInfo | None:
        module, _, name = qualname.rpartition(".")
        parsed = self._parse(module)
        return parsed[0].get(name) if parsed else None

    def fields(self, qualname: str, skip: frozenset[str] = frozenset()) -> dict[str, tuple[str, Any, str]]:
        """``{field: (annotation, default, declaring class)}`` as dataclasses.fields() sees them; the fields of
        classes in ``skip`` (and their bases) are left out."""
        if qualname in skip:
            return {}
        info = self.get(qualname)
        if info is None:
            return {}
        out: dict[str, tuple[str, Any, str]] = {}
        for base in reversed(info.bases):
            out.update(self.fields(base, skip))
        if info.is_dataclass:
            for stmt in info.node.body:
                if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                    annotation = ast.unparse(stmt.annotation)
                    if annotation.split("[")[0] in ("ClassVar", "InitVar", "KW_ONLY", "dataclasses.KW_ONLY"):
                        continue
                    out[stmt.target.id] = (annotation, _default(stmt.value), qualname)
        return out

    def declarations(self, qualname: str, name: str, skip: frozenset[str]) -> list[tuple[str, Any, str]]:
        """Every declaration of field ``name`` on the way from ``qualname`` up its bases (outside ``skip``)."""
        info = self.get(qualname)
        if info is None or qualname in skip:
            return []
        found: list[tuple[str, Any, str]] = []
        if info.is_dataclass:
            for stmt in info.node.body:
                if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.target.id == name:
                    found.append((ast.unparse(stmt.annotation), _default(stmt.value), qualname))
        for base in info.bases:
            found += self.declarations(base, name, skip)
        return found

    def is_subclass(self, qualname: str, ancestor: str) -> bool:
        if qualname == ancestor:
            return True
        info = self.get(qualname)
        return info is not None and any(self.is_subclass(b, ancestor) for b in info.bases)

    def bridge_classes(self) -> list[str]:
        out = []
        for path in self.sources.bridge_files:
            module = path[len("src/"):-len(".py")].replace("/", ".").removesuffix(".__init__")
            parsed = self._parse(module)
            if parsed is not None:
                out += [info.qualname for info in parsed[0].values()]
        return out


def _decorator_name(node: ast.expr) -> str:
    target = node.func if isinstance(node, ast.Call) else node
    return ast.unparse(target)


def _base_name(node: ast.expr) -> str:
    if isinstance(node, ast.Subscript):  # Generic[T], ModelProviderMixin[GPTModel]
        node = node.value
    return ast.unparse(node) if isinstance(node, (ast.Name, ast.Attribute)) else ""


def _annotated(index: Index, annotation: str, module: str) -> list[str]:
    """The classes an annotation names (``A | B``, ``Optional[A]``, ``Union[A, B]``), qualified."""
    names: list[str] = []

    def visit(node: ast.expr) -> None:
        if isinstance(node, ast.BinOp):
            visit(node.left)
            visit(node.right)
        elif isinstance(node, ast.Subscript) and ast.unparse(node.value) in ("Optional", "Union"):
            inner = node.slice
            for item in inner.elts if isinstance(inner, ast.Tuple) else [inner]:
                visit(item)
        elif isinstance(node, (ast.Name, ast.Attribute)):
            qualified = index.qualify(module, ast.unparse(node))
            if index.get(qualified) is not None:
                names.append(qualified)

    visit(ast.parse(annotation, mode="eval").body)
    return names


def _kind(index: Index, annotation: str, default: Any, module: str) -> str:
    """What a declaration's default puts in the OmegaConf dict Bridge builds from the dataclass."""
    if isinstance(default, dict):
        if default.get("required"):
            return "required"
        factory = default.get("factory")
        if factory in ("list", "tuple", "set"):
            return "list"
        if factory == "dict":
            return "map"
        if factory is not None:
            info = index.get(index.qualify(module, factory))
            return "dataclass" if info is not None else "unknown"
        if "Callable" in annotation:
            return "callable"  # Bridge leaves callables out of the dict (omegaconf_utils.py:269-279)
        source = default.get("expr", "")
        try:
            expr = ast.parse(source, mode="eval").body
        except SyntaxError:
            return "unknown"
        if isinstance(expr, ast.Call) and isinstance(expr.func, (ast.Name, ast.Attribute)):
            info = index.get(index.qualify(module, ast.unparse(expr.func)))
            return "dataclass" if info is not None else "unknown"
        if isinstance(expr, ast.Attribute):  # torch.bfloat16, AttnBackend.auto
            return "value"
        if isinstance(expr, (ast.Dict, ast.DictComp)):
            return "map"
        if isinstance(expr, (ast.List, ast.Tuple, ast.ListComp)):
            return "list"
        return "unknown"
    if default is None:
        return "null"
    if isinstance(default, list):
        return "list"
    return "value"


def section_table(index: Index, candidates: list[str], skip: frozenset[str],
                  family: list[str]) -> dict[str, Any]:
    """Fields of a section whose class is one of ``candidates`` or a subclass (``family``)."""
    per_class = {c: index.fields(c, skip) for c in candidates}
    names: set[str] = set()
    for member in family:
        names.update(index.fields(member, skip))
    table: dict[str, Any] = {}
    for name in sorted(names):
        kinds: set[str] = set()
        for member in family:
            for ann, default, declared in index.declarations(member, name, skip):
                kinds.add(_kind(index, ann, default, declared.rpartition(".")[0]))
        table[name] = {"in": "all" if all(name in per_class[c] for c in candidates) else "some",
                       "kinds": sorted(kinds)}
    return {"classes": [c.rpartition(".")[2] for c in candidates], "family": len(family), "fields": table}


def build(sources: Sources) -> dict[str, Any]:
    index = Index(sources)
    container = index.canonical(".".join(CONTAINER))
    everything = index.bridge_classes()
    sections: dict[str, Any] = {}
    top: dict[str, Any] = {}
    for name, (annotation, default, _) in index.fields(container).items():
        top[name] = _kind(index, annotation, default, CONTAINER[0])
        candidates = _annotated(index, annotation, CONTAINER[0])
        if not candidates:
            continue
        skip = frozenset(PROFILE_CLASSES.get(name, ()))
        groups = {name: candidates}
        if name == "model":
            groups = {"model": [c for c in candidates if c.rpartition(".")[2] not in NESTED_MODEL | NOT_MODELLED],
                      "model.nested": [c for c in candidates if c.rpartition(".")[2] in NESTED_MODEL]}
        for label, members in groups.items():
            roots = members + ([BRIDGE_TRANSFORMER] if label == "model" else [])
            family = sorted({c for c in everything if any(index.is_subclass(c, m) for m in roots)} | set(members))
            sections[label] = section_table(index, members, skip, family)
    return {
        "source": {"bridge": f"NVIDIA-NeMo/Megatron-Bridge@{sources.bridge_commit}",
                   "megatron_lm": f"NVIDIA/Megatron-LM@{sources.mlm_commit}"},
        "profile_classes": {k: list(v) for k, v in PROFILE_CLASSES.items()},
        "container": top,
        "sections": sections,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bridge", type=Path, required=True, help="NVIDIA-NeMo/Megatron-Bridge git directory")
    parser.add_argument("--megatron-lm", type=Path, required=True, help="NVIDIA/Megatron-LM git directory")
    parser.add_argument("--ref", default="067f987d", help="Bridge commit (default: the checker's pin)")
    args = parser.parse_args(argv)
    json.dump(build(Sources(args.bridge, args.ref, args.megatron_lm)), sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
