"""Record the keys NeMo-RL reads under ``megatron_cfg``, per release, from its source.

Maintainer tool, not part of the checker. For each ref it parses (with ``ast``; nothing is imported):

- ``nemo_rl/models/policy/__init__.py``: the field names of ``MegatronConfig`` and
  ``MegatronOptimizerConfig``;
- every module under ``nemo_rl/``: the keys the code reads from a ``megatron_cfg`` mapping, inside
  the TypedDict or not. A read is ``cfg["megatron_cfg"]["k"]``, ``.get("k")``, ``.pop("k")`` or
  ``"k" in cfg["megatron_cfg"]``, directly, through a local alias (``mc = cfg["megatron_cfg"]``,
  ``dict(cfg["megatron_cfg"])``, a parameter annotated ``MegatronConfig``) or through a loop over a
  literal tuple of names. ``setdefault`` only supplies a default, so it is not a read;
- which of those keys are applied onto the model config under the same name
  (``model_cfg.k = ... cfg["megatron_cfg"]["k"] ...``, directly or through one local variable).

NeMo-RL does not enforce its TypedDicts at run time, and every release reads some keys outside
them (``moe_router_dtype``, ``layernorm_epsilon``, ``train_iters``, ...), so the table a release's
configs are checked against is the union of its ``MegatronConfig`` and the keys it reads. A key in
neither is silently unused, which is what the checker needs to know.

Output (``checks/data/nemo_rl_keys.json``): ``refs`` (version -> commit), ``megatron_cfg``
(version -> keys: TypedDict fields and keys read), ``applied`` (version -> keys applied onto the
model by name), ``outside_typeddict`` (version -> key -> first ``path:line`` that reads it, the
evidence for each key not in ``MegatronConfig``), ``optimizer`` (version -> fields).

Usage (the git directory may be bare, e.g. a mirror):

    python tools/nemo_rl_keys.py --git /path/to/NVIDIA-NeMo/RL > checks/data/nemo_rl_keys.json
"""

from __future__ import annotations

import argparse
import ast
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

REFS: dict[str, str] = {
    "0.4.0": "v0.4.0", "0.5.0": "v0.5.0", "0.6.0": "v0.6.0", "0.7.0": "v0.7.0",
    "main": "7ea279abfbeb698b092856d0dab61e7cf39bc909",
}
SECTION = "megatron_cfg"
_READS = ("get", "pop")  # methods that read a key's value (setdefault only supplies a default)


def typed_dict_fields(source: str, name: str) -> list[str]:
    for node in ast.parse(source).body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            fields = [s.target for s in node.body if isinstance(s, ast.AnnAssign)]
            return sorted(t.id for t in fields if isinstance(t, ast.Name))
    raise SystemExit(f"{name} not found")


def _names(node: ast.expr) -> tuple[str, ...] | None:
    """The strings of a literal tuple/list/set of strings, else None."""
    if not isinstance(node, ast.Tuple | ast.List | ast.Set) or not node.elts:
        return None
    names = tuple(e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str))
    return names if len(names) == len(node.elts) else None


class _Reads(ast.NodeVisitor):
    """The keys one function scope (or a module's top level) reads from ``megatron_cfg`` mappings."""

    def __init__(self, path: str, found: dict[str, str], applied: set[str]) -> None:
        self.path = path
        self.found = found  # key -> first "path:line" that reads it
        self.applied = applied
        self.aliases: set[str] = set()  # local names bound to a megatron_cfg mapping
        self.lists: dict[str, tuple[str, ...]] = {}  # local names bound to literal tuples of key names
        self.locals: dict[str, set[str]] = {}  # local name -> keys read in the values assigned to it

    def _is_section(self, node: ast.expr) -> bool:
        if isinstance(node, ast.Subscript):
            return isinstance(node.slice, ast.Constant) and node.slice.value == SECTION
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get":
            return bool(node.args) and isinstance(node.args[0], ast.Constant) and node.args[0].value == SECTION
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "dict":
            return len(node.args) == 1 and self._is_section(node.args[0])
        return isinstance(node, ast.Name) and node.id in self.aliases

    def _keys(self, node: ast.expr) -> tuple[str, ...]:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return (node.value,)
        return self.lists.get(node.id, ()) if isinstance(node, ast.Name) else ()

    def reads_in(self, node: ast.expr) -> Iterator[tuple[str, int]]:
        """Every (key, line) read in the expression ``node``."""
        for sub in ast.walk(node):
            if isinstance(sub, ast.Subscript) and isinstance(sub.ctx, ast.Load) and self._is_section(sub.value):
                yield from ((k, sub.lineno) for k in self._keys(sub.slice))
            elif isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute) and sub.func.attr in _READS \
                    and sub.args and self._is_section(sub.func.value):
                yield from ((k, sub.lineno) for k in self._keys(sub.args[0]))
            elif isinstance(sub, ast.Compare) and len(sub.ops) == 1 and isinstance(sub.ops[0], ast.In | ast.NotIn) \
                    and self._is_section(sub.comparators[0]):
                yield from ((k, sub.lineno) for k in self._keys(sub.left))

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        inner = _Reads(self.path, self.found, self.applied)
        for arg in node.args.posonlyargs + node.args.args + node.args.kwonlyargs:
            if arg.annotation is not None and ast.unparse(arg.annotation) == "MegatronConfig":
                inner.aliases.add(arg.arg)
        for default in node.args.defaults + [d for d in node.args.kw_defaults if d is not None]:
            self._record(default)
        for statement in node.body:
            inner.visit(statement)

    visit_AsyncFunctionDef = visit_FunctionDef  # type: ignore[assignment]

    def visit_For(self, node: ast.For) -> None:
        if isinstance(node.target, ast.Name):
            names = _names(node.iter) or (self.lists.get(node.iter.id) if isinstance(node.iter, ast.Name) else None)
            if names:
                self.lists[node.target.id] = names
        self.generic_visit(node)

    def visit_Assign(self, node: ast.Assign) -> None:
        keys = {k for k, _ in self.reads_in(node.value)} | {
            k for n in ast.walk(node.value) if isinstance(n, ast.Name) for k in self.locals.get(n.id, ())}
        for target in node.targets:
            if isinstance(target, ast.Name):
                if self._is_section(node.value):
                    self.aliases.add(target.id)
                elif (names := _names(node.value)) is not None:
                    self.lists[target.id] = names
                self.locals.setdefault(target.id, set()).update(keys)  # flow-insensitive: any value it held
            elif isinstance(target, ast.Attribute) and target.attr in keys:
                self.applied.add(target.attr)
        self.generic_visit(node)

    def generic_visit(self, node: ast.AST) -> None:
        # An expression is searched whole (reads_in walks it); a statement is visited, so that function scopes,
        # aliases and loops over key names are tracked.
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.expr):
                self._record(child)
            else:
                self.visit(child)

    def _record(self, node: ast.expr) -> None:
        for key, line in self.reads_in(node):
            self.found.setdefault(key, f"{self.path}:{line}")


def read_keys(git: Path, ref: str) -> tuple[dict[str, str], set[str]]:
    """The keys ``ref`` reads under ``megatron_cfg`` (key -> first ``path:line``) and those applied by name."""
    listing = _git(git, "ls-tree", "-r", "--name-only", ref, "nemo_rl").split()
    found: dict[str, str] = {}
    applied: set[str] = set()
    for path in sorted(p for p in listing if p.endswith(".py")):
        _Reads(path, found, applied).visit(ast.parse(_git(git, "show", f"{ref}:{path}")))
    return found, applied


def _git(git: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(git), *args], check=True, capture_output=True, text=True).stdout


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--git", type=Path, required=True, help="NVIDIA-NeMo/RL git directory")
    args = parser.parse_args(argv)
    refs: dict[str, str] = {}
    keys: dict[str, list[str]] = {}
    applied: dict[str, list[str]] = {}
    outside: dict[str, dict[str, str]] = {}
    optimizer: dict[str, list[str]] = {}
    for version, ref in REFS.items():
        refs[version] = _git(args.git, "rev-parse", f"{ref}^{{commit}}").strip()
        source = _git(args.git, "show", f"{ref}:nemo_rl/models/policy/__init__.py")
        typed = typed_dict_fields(source, "MegatronConfig")
        found, by_name = read_keys(args.git, ref)
        keys[version] = sorted(set(typed) | set(found))
        applied[version] = sorted(by_name)
        outside[version] = {k: found[k] for k in sorted(set(found) - set(typed))}
        optimizer[version] = typed_dict_fields(source, "MegatronOptimizerConfig")
    out = {"source": "NVIDIA-NeMo/RL", "refs": refs, "megatron_cfg": keys, "applied": applied,
           "outside_typeddict": outside, "optimizer": optimizer}
    json.dump(out, sys.stdout, sort_keys=True, separators=(",", ":"))
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
