"""Catalogue what each Megatron Bridge recipe sets, read statically from a Bridge git checkout.

Maintainer tool, not part of the checker (the checker reads only the JSON it writes). A launch such as
``scripts/training/run_recipe.py --recipe qwen3_30b_a3b_pretrain_config model.cpu_offloading=True`` runs the
ConfigContainer the recipe function builds, with the CLI overrides applied on top
(scripts/training/run_recipe.py:474-485). The recipes cannot be executed here (they import torch and call
``AutoBridge.from_hf_pretrained``, which needs the Hugging Face hub), so this tool reads them with a small
abstract interpreter over :mod:`ast`:

* names are resolved the way Python imports them (``from x import a as b``, star imports honouring ``__all__``),
  and recipes are found the way ``scripts/training/recipe_runner.py`` finds them (``load_recipe``,
  ``find_library_recipe``, ``find_benchmark_recipe``; the benchmark name index and precedence sets are read from
  ``scripts/training/recipe_metadata.py`` itself);
* a recipe body is interpreted statement by statement; config dataclasses start from their keyword arguments
  (defaults are only used to evaluate reads, never recorded), Bridge helpers are inlined, ``if`` on a known value
  takes its branch;
* whatever cannot be evaluated (an unknown ``if``, a call into torch/the environment/the HF bridge, a loop over an
  unknown) is never guessed: assignments under an unknown condition are *weak* (they keep the old value only when
  both are equal, otherwise the field becomes unknown), and a path whose value is unknown is listed under
  ``unresolved`` with the reason and line.

Usage::

    python tools/bridge_recipes.py --bridge-git /path/to/Megatron-Bridge [--commit 067f987d] \\
        [--format full|compact] --out checks/data/bridge_recipes.json

``--format full`` (the default) lists every value of every recipe; ``--format compact`` stores each recipe as
a difference from the recipe or template it starts from (about a third of the size; see ``compact``).
Megatron-core field defaults, used only to evaluate reads of fields a recipe did not set, come from
checks/data/mcore_fields.json at the Megatron-LM commit Bridge pins.
"""

from __future__ import annotations

import argparse
import ast
import json
import operator
import re
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# run_recipe.py's reading of a recipe name, the one the launch reader uses (recipe_metadata.py:214-225).
from checks.loaders.launch import infer_recipe_mode  # noqa: E402

DEFAULT_COMMIT = "067f987d"
MCORE_PROFILE = "main@2a75ac12"  # the Megatron-LM commit Bridge@067f987d pins (3rdparty/Megatron-LM)
MCORE_TABLE = ROOT / "checks" / "data" / "mcore_fields.json"

RECIPES_PKG = "megatron.bridge.recipes"
PERF_PKG = "megatron.bridge.perf_recipes"
METADATA_PATH = "scripts/training/recipe_metadata.py"
# ConfigContainer sections the catalogue keeps (the others hold paths and logging knobs).
SECTIONS = ("model", "optimizer", "ddp", "train", "dataset", "mixed_precision", "comm_overlap", "env_vars",
            "rng", "dist", "scheduler", "checkpoint", "peft")
OUTPUT_PATHS = ("checkpoint.save", "checkpoint.load", "checkpoint.pretrained_checkpoint")
AUTO_BRIDGE = "megatron.bridge.models.conversion.auto_bridge.AutoBridge"
MIXED_PRECISION_MODULE = "megatron.bridge.training.mixed_precision"
MIXED_PRECISION_CLASS = f"{MIXED_PRECISION_MODULE}.MixedPrecisionConfig"
# megatron-core config classes (outside the Bridge tree) and the mcore_fields.json section holding their fields.
MCORE_CLASSES = {
    "megatron.core.distributed.DistributedDataParallelConfig": "ddp",
    "megatron.core.distributed.distributed_data_parallel_config.DistributedDataParallelConfig": "ddp",
    "megatron.core.optimizer.OptimizerConfig": "optimizer",
    "megatron.core.optimizer.optimizer_config.OptimizerConfig": "optimizer",
    "megatron.core.transformer.TransformerConfig": "model",
    "megatron.core.transformer.transformer_config.TransformerConfig": "model",
    "megatron.core.transformer.transformer_config.MLATransformerConfig": "model",
    "megatron.core.model_parallel_config.ModelParallelConfig": "model",
}
DTYPES = {"torch.bfloat16": "bf16", "torch.float16": "fp16", "torch.half": "fp16", "torch.float32": "fp32",
          "torch.float": "fp32", "torch.float64": "fp64", "torch.int32": "int32", "torch.int64": "int64",
          "torch.uint8": "uint8", "torch.float8_e4m3fn": "fp8_e4m3"}
NO_EFFECT_CALLS = ("logging.", "logger.", "warnings.warn", "print")
ENVIRONMENT_CALLS = ("megatron.core._rank_utils.", "os.", "torch.cuda.", "torch.distributed.", "socket.", "time.",
                     "random.", "platform.",
                     "getpass.", "pathlib.", "Path")
MAX_DEPTH = 40
MAX_UNROLL = 512


# ----------------------------------------------------------------------------------------------------------------
# Abstract values


@dataclass(frozen=True)
class Unknown:
    reason: str


@dataclass(frozen=True)
class Ext:
    """A name from outside the Bridge tree (torch.bfloat16, os.getcwd, megatron.core...)."""

    name: str


@dataclass(frozen=True)
class Builtin:
    name: str


@dataclass(frozen=True)
class EnumMember:
    cls: str
    member: str
    value: Any


@dataclass(eq=False)
class Slot:
    value: Any
    at: str | None  # None: a default the interpreter materialised to evaluate a read; never recorded


@dataclass(eq=False)
class Obj:
    """An instance of a config class: the fields set so far (unset ones read as the class default)."""

    cls: str  # qualified class name
    kind: str  # "config": a class we know; "hf": a provider the HF bridge builds; "opaque": unknown origin
    slots: dict[str, Slot] = field(default_factory=dict)
    note: str = ""
    hf: dict[str, Any] | None = None
    origin: str | None = None  # module constant it came from
    tainted: str | None = None  # a call we could not follow received it


class TDict(dict):  # type: ignore[type-arg]
    """A dict literal that remembers the line that set each key (env_vars.* are recorded per key)."""

    at: dict[Any, str]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.at = {}


@dataclass(frozen=True)
class ModuleVal:
    name: str


@dataclass(eq=False)
class FuncVal:
    module: str
    node: ast.FunctionDef | ast.Lambda
    qualname: str
    self_obj: Any = None
    closure: dict[str, Any] | None = None


@dataclass(frozen=True)
class ClassVal:
    qualname: str


@dataclass(eq=False)
class HFBridge:
    model_id: Any
    revision: Any


@dataclass(eq=False)
class Method:
    """A method of a plain Python value (str.lower, dict.get, list.append)."""

    target: Any
    name: str


def is_known(value: Any) -> bool:
    if isinstance(value, Unknown):
        return False
    if isinstance(value, (list, tuple, set, frozenset)):
        return all(is_known(v) for v in value)
    if isinstance(value, dict):
        return all(is_known(k) and is_known(v) for k, v in value.items())
    return True


def first_unknown(value: Any) -> Unknown | None:
    if isinstance(value, Unknown):
        return value
    if isinstance(value, (list, tuple, set, frozenset)):
        for v in value:
            found = first_unknown(v)
            if found:
                return found
    if isinstance(value, dict):
        for v in value.values():
            found = first_unknown(v)
            if found:
                return found
    return None


class Unsupported(Exception):
    """A construct the interpreter does not model; the recipe is marked unresolved as a whole."""


class _Return(Exception):
    def __init__(self, value: Any) -> None:
        self.value = value


class _Break(Exception):
    pass


class _Abort(Exception):
    """A path under an unknown condition raises: that branch ends."""


class _Continue(Exception):
    pass


# ----------------------------------------------------------------------------------------------------------------
# Sources


class Sources:
    """Python files of one Bridge commit, read with ``git show`` (nothing is imported or executed)."""

    def __init__(self, git_dir: Path, commit: str) -> None:
        self.git_dir = git_dir
        self.commit = _git(git_dir, "rev-parse", f"{commit}^{{commit}}").strip()
        names = _git(git_dir, "ls-tree", "-r", "--name-only", self.commit, "src/megatron/bridge", "scripts/training")
        self.files = set(names.splitlines())
        self._text: dict[str, str] = {}
        self._trees: dict[str, ast.Module] = {}

    def text(self, path: str) -> str:
        if path not in self._text:
            self._text[path] = _git(self.git_dir, "show", f"{self.commit}:{path}")
        return self._text[path]

    def tree(self, path: str) -> ast.Module:
        if path not in self._trees:
            self._trees[path] = ast.parse(self.text(path), filename=path)
        return self._trees[path]

    def module_path(self, module: str) -> str | None:
        if not module.startswith("megatron.bridge"):
            return None
        base = "src/" + module.replace(".", "/")
        for path in (base + ".py", base + "/__init__.py"):
            if path in self.files:
                return path
        return None


class MemorySources(Sources):
    """Sources given as a dict ``{module name: text}``; the unit tests build tiny synthetic trees with it."""

    def __init__(self, modules: dict[str, str]) -> None:  # deliberately not calling super(): no git
        self.git_dir = Path(".")
        self.commit = "0" * 40
        self._modules = modules
        self.files = {self._path(m) for m in modules}
        self._text = {self._path(m): t for m, t in modules.items()}
        self._trees = {}

    def _path(self, module: str) -> str:
        is_pkg = any(other.startswith(module + ".") for other in self._modules)
        return "src/" + module.replace(".", "/") + ("/__init__.py" if is_pkg else ".py")

    def module_path(self, module: str) -> str | None:
        return self._path(module) if module in self._modules else None


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


def load_mcore_fields() -> dict[str, dict[str, Any]]:
    """megatron-core field defaults at the commit Bridge pins, from the checker's own table."""
    if not MCORE_TABLE.exists():
        return {}
    table = json.loads(MCORE_TABLE.read_text(encoding="utf-8"))
    return {section: {name: raw[1] for name, raw in fields.items()}
            for section, fields in table["versions"].get(MCORE_PROFILE, {}).items()}


# ----------------------------------------------------------------------------------------------------------------
# Modules: name resolution as Python's import system does it


class Modules:
    def __init__(self, sources: Sources) -> None:
        self.sources = sources

    def exists(self, module: str) -> bool:
        return self.sources.module_path(module) is not None

    def is_package(self, module: str) -> bool:
        path = self.sources.module_path(module)
        return path is not None and path.endswith("__init__.py")

    def tree(self, module: str) -> ast.Module:
        path = self.sources.module_path(module)
        assert path is not None, module
        return self.sources.tree(path)

    def path(self, module: str) -> str:
        path = self.sources.module_path(module)
        assert path is not None, module
        return path

    def absolute(self, module: str, node: ast.ImportFrom) -> str:
        if not node.level:
            return node.module or ""
        package = module if self.is_package(module) else module.rpartition(".")[0]
        parts = package.split(".")
        base = parts[:len(parts) - node.level + 1]
        return ".".join(base + ([node.module] if node.module else []))

    def top_level(self, module: str) -> list[ast.stmt]:
        """Top-level statements in execution order; ``try`` bodies count, ``if TYPE_CHECKING`` blocks do not."""
        out: list[ast.stmt] = []

        def walk(stmts: list[ast.stmt]) -> None:
            for stmt in stmts:
                if isinstance(stmt, ast.Try):
                    walk(stmt.body)
                elif isinstance(stmt, ast.If):
                    if "TYPE_CHECKING" in ast.unparse(stmt.test):
                        continue
                    walk(stmt.body)
                else:
                    out.append(stmt)

        walk(self.tree(module).body)
        return out

    def all_names(self, module: str) -> list[str] | None:
        """``__all__`` when the module defines it as a literal."""
        for stmt in reversed(self.top_level(module)):
            if isinstance(stmt, (ast.Assign, ast.AnnAssign)):
                targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets) and stmt.value is not None:
                    try:
                        return list(ast.literal_eval(stmt.value))
                    except ValueError:
                        return None
        return None

    def exported(self, module: str, _seen: frozenset[str] = frozenset()) -> list[str]:
        """Names ``from module import *`` binds: ``__all__``, else every public top-level name."""
        declared = self.all_names(module)
        if declared is not None:
            return declared
        names: list[str] = []
        for stmt in self.top_level(module):
            names += [n for n in self.bound_names(module, stmt, _seen | {module}) if not n.startswith("_")]
        return list(dict.fromkeys(names))

    def bound_names(self, module: str, stmt: ast.stmt, seen: frozenset[str]) -> list[str]:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            return [stmt.name]
        if isinstance(stmt, ast.Assign):
            return [t.id for t in stmt.targets if isinstance(t, ast.Name)]
        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value is not None:
            return [stmt.target.id]
        if isinstance(stmt, ast.Import):
            return [a.asname or a.name.split(".")[0] for a in stmt.names]
        if isinstance(stmt, ast.ImportFrom):
            origin = self.absolute(module, stmt)
            if stmt.names[0].name == "*":
                if origin in seen or not self.exists(origin):
                    return []
                return self.exported(origin, seen)
            return [a.asname or a.name for a in stmt.names]
        return []

    def binding(self, module: str, name: str) -> tuple[str, Any] | None:
        """What binds ``name`` at the end of ``module``: the last statement that binds it."""
        for stmt in reversed(self.top_level(module)):
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and stmt.name == name:
                return ("def", stmt)
            if isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in stmt.targets):
                return ("assign", stmt)
            if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.target.id == name \
                    and stmt.value is not None:
                return ("assign", stmt)
            if isinstance(stmt, ast.Import):
                for alias in stmt.names:
                    if (alias.asname or alias.name.split(".")[0]) == name:
                        return ("module", alias.name if alias.asname else alias.name.split(".")[0])
            if isinstance(stmt, ast.ImportFrom):
                origin = self.absolute(module, stmt)
                for alias in stmt.names:
                    if alias.name == "*":
                        if self.exists(origin) and origin != module and name in self.exported(origin):
                            return ("from", (origin, name))
                    elif (alias.asname or alias.name) == name:
                        return ("from", (origin, alias.name))
        return None


# ----------------------------------------------------------------------------------------------------------------
# The interpreter


@dataclass
class Frame:
    module: str
    locals: dict[str, Any]
    function: str
    after: list[str] = field(default_factory=list)  # conditions pushed by a return under a condition
    cond_base: int = 0  # conditions already active when the call began (the caller's)


class Interpreter:
    """Interprets one recipe call. Module constants are evaluated afresh per instance (one launch, one process)."""

    def __init__(self, modules: Modules, mcore_fields: dict[str, dict[str, Any]] | None = None) -> None:
        self.modules = modules
        self.mcore_fields = mcore_fields or {}
        self.cond: list[str] = []
        self.depth = 0
        self._globals: dict[tuple[str, str], Any] = {}
        self.frames: list[Frame] = []
        self.unfollowed: dict[str, int] = {}

    # -- locations ------------------------------------------------------------------------------------------------

    def at(self, node: ast.AST, module: str | None = None) -> str:
        module = module or self.frames[-1].module
        return f"{self.modules.path(module)}:{getattr(node, 'lineno', 0)}"

    def note_unfollowed(self, what: str) -> None:
        self.unfollowed[what] = self.unfollowed.get(what, 0) + 1

    # -- module globals -------------------------------------------------------------------------------------------

    def global_value(self, module: str, name: str) -> Any:
        key = (module, name)
        if key in self._globals:
            return self._globals[key]
        self._globals[key] = Unknown(f"{module}.{name} is being evaluated (a cycle)")
        value = self._resolve_global(module, name)
        self._globals[key] = value
        return value

    def _resolve_global(self, module: str, name: str) -> Any:
        bound = self.modules.binding(module, name)
        if bound is None:
            if self.modules.exists(f"{module}.{name}"):
                return ModuleVal(f"{module}.{name}")
            return None if name == "__name__" else Unknown(f"name {name} not found in {module}")
        kind, what = bound
        if kind == "def":
            if isinstance(what, ast.ClassDef):
                return ClassVal(f"{module}.{name}")
            return FuncVal(module, what, f"{module}.{name}")
        if kind == "module":
            return self.module_value(what)
        if kind == "from":
            origin, attr = what
            return self.attribute_of_module(origin, attr)
        frame = Frame(module, {}, f"<module {module}>")
        self.frames.append(frame)
        saved, self.cond = self.cond, []
        try:
            value = self.eval(what.value)
        except Unsupported as err:
            value = Unknown(str(err))
        finally:
            self.cond = saved
            self.frames.pop()
        if isinstance(value, Obj) and value.origin is None:
            value.origin = f"{module}.{name}"
        return value

    def module_value(self, name: str) -> Any:
        return ModuleVal(name) if self.modules.exists(name) else Ext(name)

    def attribute_of_module(self, module: str, attr: str) -> Any:
        if not self.modules.exists(module):
            return Ext(f"{module}.{attr}")
        if self.modules.binding(module, attr) is not None:
            return self.global_value(module, attr)
        if self.modules.exists(f"{module}.{attr}"):
            return ModuleVal(f"{module}.{attr}")
        return Unknown(f"{module} has no attribute {attr}")

    # -- classes --------------------------------------------------------------------------------------------------

    def class_node(self, qualname: str) -> ast.ClassDef | None:
        module, _, name = qualname.rpartition(".")
        if not self.modules.exists(module):
            return None
        bound = self.modules.binding(module, name)
        if bound and bound[0] == "def" and isinstance(bound[1], ast.ClassDef):
            return bound[1]
        return None

    def canonical_class(self, value: Any) -> str | None:
        if isinstance(value, ClassVal):
            return value.qualname
        if isinstance(value, Ext):
            return value.name
        return None

    def bases(self, qualname: str) -> list[str]:
        node = self.class_node(qualname)
        if node is None:
            return []
        module = qualname.rpartition(".")[0]
        out: list[str] = []
        for base in node.bases:
            if isinstance(base, ast.Subscript):
                base = base.value
            self.frames.append(Frame(module, {}, f"<class {qualname}>"))
            try:
                value = self.eval(base)
            except Unsupported:
                value = None
            finally:
                self.frames.pop()
            name = self.canonical_class(value)
            if name:
                out.append(name)
        return out

    def mro(self, qualname: str) -> list[str]:
        out = [qualname]
        for base in self.bases(qualname):
            for c in self.mro(base):
                if c not in out:
                    out.append(c)
        return out

    def is_enum(self, qualname: str) -> bool:
        return any(c in ("enum.Enum", "enum.IntEnum", "enum.StrEnum") for c in self.mro(qualname))

    def is_dataclass(self, qualname: str) -> bool:
        for c in self.mro(qualname):
            node = self.class_node(c)
            if node is not None and any("dataclass" in ast.unparse(d) for d in node.decorator_list):
                return True
            if c in MCORE_CLASSES or _external_config_class(c):
                return True
        return False

    def field_default(self, qualname: str, name: str) -> tuple[bool, Any]:
        """(has the field, its default) through the class's bases; megatron-core bases from mcore_fields.json."""
        for c in self.mro(qualname):
            node = self.class_node(c)
            if node is not None:
                for stmt in node.body:
                    if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) \
                            and stmt.target.id == name:
                        if ast.unparse(stmt.annotation).startswith(("ClassVar", "InitVar")):
                            continue
                        return True, self._default_value(c, stmt.value)
            elif c in MCORE_CLASSES:
                table = self.mcore_fields.get(MCORE_CLASSES[c], {})
                if name in table:
                    return True, self._mcore_default(table[name], c, name)
        return False, None

    def _mcore_default(self, raw: Any, cls: str, name: str) -> Any:
        if isinstance(raw, dict):
            return Unknown(f"megatron-core default of {cls}.{name} is an expression")
        if raw in ("bf16", "fp16", "fp32") and name.endswith("dtype"):
            return Ext({"bf16": "torch.bfloat16", "fp16": "torch.float16", "fp32": "torch.float32"}[raw])
        return raw

    def _default_value(self, cls: str, node: ast.expr | None) -> Any:
        if node is None:
            return Unknown(f"{cls} field without a default")
        module = cls.rpartition(".")[0]
        self.frames.append(Frame(module, {}, f"<default {cls}>"))
        saved, self.cond = self.cond, []
        try:
            if isinstance(node, ast.Call) and ast.unparse(node.func) in ("field", "dataclasses.field"):
                for kw in node.keywords:
                    if kw.arg == "default":
                        return self.eval(kw.value)
                    if kw.arg == "default_factory":
                        return self.call(self.eval(kw.value), [], {}, node)
                return Unknown(f"{cls} field without a default")
            return self.eval(node)
        except Unsupported as err:
            return Unknown(str(err))
        finally:
            self.cond = saved
            self.frames.pop()

    def has_field(self, obj: Obj, name: str) -> Any:
        if name in obj.slots:
            return True
        if obj.kind != "config":
            if obj.kind == "hf" and (obj.hf or {}).get("method") == "to_megatron_provider" \
                    and name in self.mcore_fields.get("model", {}):
                return True  # every provider to_megatron_provider builds is a megatron-core TransformerConfig
            return Unknown(f"whether {obj.note or obj.cls} has {name}")
        found, _ = self.field_default(obj.cls, name)
        if found or self.find_method(obj.cls, name) is not None:
            return True
        if any(self.class_node(c) is None and c not in MCORE_CLASSES and c != "builtins.object"
               for c in self.mro(obj.cls)):
            return Unknown(f"{obj.cls} has a base class outside the sources")
        return False

    def find_method(self, qualname: str, name: str) -> tuple[str, ast.FunctionDef] | None:
        for c in self.mro(qualname):
            node = self.class_node(c)
            if node is None:
                continue
            for stmt in node.body:
                if isinstance(stmt, ast.FunctionDef) and stmt.name == name:
                    return c, stmt
        return None

    def construct(self, qualname: str, args: list[Any], kwargs: dict[str, tuple[Any, str]], node: ast.AST) -> Any:
        if self.is_enum(qualname):
            return Unknown(f"enum {qualname} called")
        if not self.is_dataclass(qualname):
            return Obj(qualname, "opaque", note=f"{qualname}(...) is not a dataclass the interpreter models")
        obj = Obj(qualname, "config")
        if args:
            return Obj(qualname, "opaque", note=f"{qualname} built with positional arguments ({self.at(node)})")
        for name, (value, at) in kwargs.items():
            obj.slots[name] = Slot(value, at)
        if qualname == MIXED_PRECISION_CLASS:
            # MixedPrecisionConfig.__setattr__ (training/mixed_precision.py:77-95) runs during __init__: fp8_param
            # is declared before fp8_param_gather, so setting the latter overwrites fp8_param (same for fp4).
            for param, gather in (("fp8_param", "fp8_param_gather"), ("fp4_param", "fp4_param_gather")):
                obj.slots[param] = Slot(self.load_attr(obj, gather, node), self.setattr_line(param))
        return obj

    def setattr_line(self, name: str) -> str:
        """Where MixedPrecisionConfig.__setattr__ writes ``name`` for its twin (training/mixed_precision.py:77-95)."""
        found = self.find_method(MIXED_PRECISION_CLASS, "__setattr__")
        assert found is not None
        for sub in ast.walk(found[1]):
            if isinstance(sub, ast.Call) and ast.unparse(sub.func) == "object.__setattr__" and any(
                    isinstance(a, ast.Constant) and a.value == name for a in sub.args):
                return self.at(sub, MIXED_PRECISION_MODULE)
        return self.at(found[1], MIXED_PRECISION_MODULE)

    # -- attribute access -----------------------------------------------------------------------------------------

    def load_attr(self, value: Any, name: str, node: ast.AST) -> Any:
        if isinstance(value, Unknown):
            return value
        if isinstance(value, ModuleVal):
            return self.attribute_of_module(value.name, name)
        if isinstance(value, Ext):
            return Ext(f"{value.name}.{name}")
        if isinstance(value, ClassVal):
            if self.is_enum(value.qualname):
                return self.enum_member(value.qualname, name)
            found = self.find_method(value.qualname, name)
            if found is not None:
                return FuncVal(found[0].rpartition(".")[0], found[1], f"{found[0]}.{name}")
            has, default = self.field_default(value.qualname, name)
            if has:
                return default
            if value.qualname == AUTO_BRIDGE:
                return FuncVal("", _placeholder(), f"{AUTO_BRIDGE}.{name}")
            return Unknown(f"{value.qualname}.{name}")
        if isinstance(value, HFBridge):
            return Method(value, name)
        if isinstance(value, Obj):
            if name in value.slots:
                return value.slots[name].value
            if value.kind == "hf":
                return Unknown(f"model.{name} is filled by the HF bridge from {value.note}")
            if value.kind == "opaque":
                return Unknown(f"{name} of {value.note}")
            found = self.find_method(value.cls, name)
            if found is not None:
                return FuncVal(found[0].rpartition(".")[0], found[1], f"{found[0]}.{name}", self_obj=value)
            has, default = self.field_default(value.cls, name)
            if not has:
                return Unknown(f"{value.cls} has no field {name} the interpreter can see")
            value.slots[name] = Slot(default, None)
            return default
        if isinstance(value, EnumMember):
            if name == "name":
                return value.member
            if name == "value":
                return value.value
            return Unknown(f"{value.cls}.{value.member}.{name}")
        if isinstance(value, (str, list, dict, tuple, set, int, float)) and not isinstance(value, bool) and \
                callable(getattr(value, name, None)):
            return Method(value, name)
        return Unknown(f"attribute {name} of {type(value).__name__}")

    def enum_member(self, qualname: str, member: str) -> Any:
        node = self.class_node(qualname)
        assert node is not None
        for stmt in node.body:
            if isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == member for t in stmt.targets):
                try:
                    return EnumMember(qualname, member, ast.literal_eval(stmt.value))
                except ValueError:
                    return EnumMember(qualname, member, None)
        return Unknown(f"{qualname} has no member {member}")

    def store_attr(self, target: Any, name: str, value: Any, at: str) -> None:
        if isinstance(target, Obj):
            if target.cls == MIXED_PRECISION_CLASS and name in ("fp8_param_gather", "fp8_param", "fp4_param_gather",
                                                                 "fp4_param"):
                # MixedPrecisionConfig.__setattr__ keeps the pair in step (training/mixed_precision.py:81-95).
                twin = {"fp8_param_gather": "fp8_param", "fp8_param": "fp8_param_gather",
                        "fp4_param_gather": "fp4_param", "fp4_param": "fp4_param_gather"}[name]
                self._weak_store(target, twin, value, self.setattr_line(twin))
            self._weak_store(target, name, value, at)
            return
        # A store into something we do not model (a module, an unknown): nothing to record.
        self.note_unfollowed(f"store .{name} on {type(target).__name__}")

    def _weak_store(self, target: Obj, name: str, value: Any, at: str) -> None:
        if self.cond:
            old = target.slots[name].value if name in target.slots else self.load_attr(target, name, ast.Pass())
            if not (is_known(old) and is_known(value) and _same(old, value)):
                value = Unknown(f"set under an unknown condition ({self.cond[-1]}) at {at}")
            else:
                return
        target.slots[name] = Slot(value, at)

    # -- expressions ----------------------------------------------------------------------------------------------

    def lookup(self, name: str, node: ast.AST) -> Any:
        frame = self.frames[-1]
        if name in frame.locals:
            return frame.locals[name]
        if name == "__name__":
            return frame.module
        if frame.module:
            bound = self.modules.binding(frame.module, name)
            if bound is not None:
                return self.global_value(frame.module, name)
        if name in BUILTINS or name in ("str", "int", "float", "bool", "list", "dict", "tuple", "set", "type",
                                        "object", "frozenset"):
            return Builtin(name)
        if name in ("True", "False", "None"):
            return {"True": True, "False": False, "None": None}[name]
        raise Unsupported(f"name {name} is not defined ({self.at(node)})")

    def eval(self, node: ast.expr) -> Any:
        method = getattr(self, f"eval_{type(node).__name__}", None)
        if method is None:
            return Unknown(f"{type(node).__name__} expression not modelled ({self.at(node)})")
        return method(node)

    def eval_Constant(self, node: ast.Constant) -> Any:
        return node.value

    def eval_Name(self, node: ast.Name) -> Any:
        return self.lookup(node.id, node)

    def eval_Attribute(self, node: ast.Attribute) -> Any:
        return self.load_attr(self.eval(node.value), node.attr, node)

    def eval_List(self, node: ast.List) -> Any:
        out: list[Any] = []
        for elt in node.elts:
            if isinstance(elt, ast.Starred):
                value = self.eval(elt.value)
                if not isinstance(value, (list, tuple)):
                    return Unknown(f"*{ast.unparse(elt.value)} ({self.at(node)})")
                out += list(value)
            else:
                out.append(self.eval(elt))
        return out

    def eval_Tuple(self, node: ast.Tuple) -> Any:
        value = self.eval_List(ast.List(elts=node.elts, lineno=node.lineno))
        return tuple(value) if isinstance(value, list) else value

    def eval_Set(self, node: ast.Set) -> Any:
        value = self.eval_List(ast.List(elts=node.elts, lineno=node.lineno))
        if isinstance(value, list) and all(_hashable(v) for v in value):
            return set(value)
        return Unknown(f"set of unhashable values ({self.at(node)})")

    def eval_Dict(self, node: ast.Dict) -> Any:
        out = TDict()
        for key_node, value_node in zip(node.keys, node.values, strict=True):
            if key_node is None:  # **spread
                spread = self.eval(value_node)
                if not isinstance(spread, dict):
                    return Unknown(f"**{ast.unparse(value_node)} is not a known dict ({self.at(node)})")
                for k, v in spread.items():
                    out[k] = v
                    out.at[k] = spread.at.get(k, self.at(node)) if isinstance(spread, TDict) else self.at(node)
                continue
            key = self.eval(key_node)
            if not _hashable(key) or isinstance(key, Unknown):
                return Unknown(f"dict with an unknown key ({self.at(node)})")
            out[key] = self.eval(value_node)
            out.at[key] = self.at(key_node)
        return out

    def eval_JoinedStr(self, node: ast.JoinedStr) -> Any:
        parts: list[str] = []
        for value in node.values:
            if isinstance(value, ast.Constant):
                parts.append(str(value.value))
                continue
            assert isinstance(value, ast.FormattedValue)
            inner = self.eval(value.value)
            if not _plain(inner):
                return Unknown(f"f-string over {ast.unparse(value.value)} ({self.at(node)})")
            spec = self.eval(value.format_spec) if value.format_spec is not None else ""
            if not isinstance(spec, str):
                return Unknown(f"f-string format ({self.at(node)})")
            if value.conversion == ord("r"):
                inner = repr(inner)
            elif value.conversion == ord("s"):
                inner = str(inner)
            parts.append(format(inner, spec))
        return "".join(parts)

    def eval_UnaryOp(self, node: ast.UnaryOp) -> Any:
        operand = self.eval(node.operand)
        if isinstance(node.op, ast.Not):
            truth = self.truth(operand)
            return truth if isinstance(truth, Unknown) else not truth
        if not _plain(operand):
            return Unknown(f"{ast.unparse(node)} ({self.at(node)})")
        ops: dict[type, Callable[[Any], Any]] = {ast.USub: operator.neg, ast.UAdd: operator.pos,
                                                 ast.Invert: operator.invert}
        return ops[type(node.op)](operand)

    def eval_BinOp(self, node: ast.BinOp) -> Any:
        left, right = self.eval(node.left), self.eval(node.right)
        if not (_plain(left) and _plain(right)):
            return Unknown(f"{ast.unparse(node)} over unknown values ({self.at(node)})")
        ops: dict[type, Callable[[Any, Any], Any]] = {
            ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
            ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow,
            ast.BitOr: operator.or_, ast.BitAnd: operator.and_, ast.LShift: operator.lshift,
            ast.RShift: operator.rshift}
        try:
            return ops[type(node.op)](left, right)
        except Exception as err:  # the recipe itself would fail here; do not guess
            return Unknown(f"{ast.unparse(node)} raises {type(err).__name__} ({self.at(node)})")

    def eval_BoolOp(self, node: ast.BoolOp) -> Any:
        value: Any = None
        for i, operand in enumerate(node.values):
            value = self.eval(operand)
            if i == len(node.values) - 1:
                return value
            truth = self.truth(value)
            if isinstance(truth, Unknown):
                return truth
            if isinstance(node.op, ast.And) and not truth:
                return value
            if isinstance(node.op, ast.Or) and truth:
                return value
        return value

    def eval_Compare(self, node: ast.Compare) -> Any:
        left = self.eval(node.left)
        result: Any = True
        for op, right_node in zip(node.ops, node.comparators, strict=True):
            right = self.eval(right_node)
            outcome = self.compare(op, left, right, node)
            if isinstance(outcome, Unknown):
                return outcome
            if not outcome:
                return False
            left = right
        return result

    def compare(self, op: ast.cmpop, left: Any, right: Any, node: ast.AST) -> Any:
        if isinstance(op, (ast.Is, ast.IsNot)):
            if isinstance(left, Unknown) or isinstance(right, Unknown):
                return Unknown(f"{ast.unparse(node)}: {(left if isinstance(left, Unknown) else right).reason}")
            same = (left is right) or (left is None and right is None) or (
                isinstance(left, bool) and isinstance(right, bool) and left == right) or (
                isinstance(left, (Ext, EnumMember)) and left == right)
            return same if isinstance(op, ast.Is) else not same
        if isinstance(op, (ast.In, ast.NotIn)):
            if not is_known(right) or not isinstance(right, (list, tuple, set, frozenset, dict, str)):
                return Unknown(f"{ast.unparse(node)} over an unknown container ({self.at(node)})")
            if isinstance(left, Unknown):
                return left
            inside = any(_same(left, r) for r in right) if not isinstance(right, str) else (
                isinstance(left, str) and left in right)
            return inside if isinstance(op, ast.In) else not inside
        if isinstance(left, Unknown) or isinstance(right, Unknown):
            return Unknown(f"{ast.unparse(node)}: {(left if isinstance(left, Unknown) else right).reason}")
        if isinstance(op, (ast.Eq, ast.NotEq)):
            if not (_comparable(left) and _comparable(right)):
                return Unknown(f"{ast.unparse(node)} compares objects ({self.at(node)})")
            same = _same(left, right)
            return same if isinstance(op, ast.Eq) else not same
        if not (_plain(left) and _plain(right)):
            return Unknown(f"{ast.unparse(node)} ({self.at(node)})")
        ops: dict[type, Callable[[Any, Any], Any]] = {ast.Lt: operator.lt, ast.LtE: operator.le,
                                                      ast.Gt: operator.gt, ast.GtE: operator.ge}
        try:
            return ops[type(op)](left, right)
        except TypeError:
            return Unknown(f"{ast.unparse(node)} raises TypeError ({self.at(node)})")

    def eval_IfExp(self, node: ast.IfExp) -> Any:
        truth = self.truth(self.eval(node.test))
        if isinstance(truth, Unknown):
            body, orelse = self.eval(node.body), self.eval(node.orelse)
            return body if is_known(body) and is_known(orelse) and _same(body, orelse) else truth
        return self.eval(node.body if truth else node.orelse)

    def eval_Subscript(self, node: ast.Subscript) -> Any:
        container = self.eval(node.value)
        key = self.eval(node.slice)
        if isinstance(container, Unknown):
            return container
        if isinstance(key, Unknown):
            return key
        if isinstance(container, (ClassVal, Ext, Builtin)):
            return container  # a type annotation such as Optional[int]
        if isinstance(container, (list, tuple, dict, str)):
            try:
                return container[key]
            except (KeyError, IndexError, TypeError):
                return Unknown(f"{ast.unparse(node)} has no such item ({self.at(node)})")
        return Unknown(f"subscript of {type(container).__name__} ({self.at(node)})")

    def eval_Slice(self, node: ast.Slice) -> Any:
        parts = [self.eval(p) if p is not None else None for p in (node.lower, node.upper, node.step)]
        if not all(p is None or isinstance(p, int) for p in parts):
            return Unknown(f"slice bounds ({self.at(node)})")
        return slice(*parts)

    def eval_Lambda(self, node: ast.Lambda) -> Any:
        return FuncVal(self.frames[-1].module, node, "<lambda>", closure=dict(self.frames[-1].locals))

    def _comprehension(self, generators: list[ast.comprehension], emit: Callable[[], None],
                       node: ast.AST) -> Unknown | None:
        frame = self.frames[-1]

        def loop(i: int) -> Unknown | None:
            if i == len(generators):
                emit()
                return None
            gen = generators[i]
            iterable = self.eval(gen.iter)
            items = self.iterate(iterable)
            if items is None:
                return Unknown(f"comprehension over {ast.unparse(gen.iter)} ({self.at(node)})")
            for item in items:
                self.bind(gen.target, item, frame)
                keep = True
                for test in gen.ifs:
                    truth = self.truth(self.eval(test))
                    if isinstance(truth, Unknown):
                        return truth
                    keep = keep and truth
                if keep:
                    failed = loop(i + 1)
                    if failed:
                        return failed
            return None

        saved = dict(frame.locals)
        try:
            return loop(0)
        finally:
            frame.locals = saved

    def bind(self, target: ast.expr, value: Any, frame: Frame) -> None:
        """Bind a comprehension variable (its own scope: no weak update)."""
        if isinstance(target, ast.Name):
            frame.locals[target.id] = value
            return
        if isinstance(target, (ast.Tuple, ast.List)):
            items = list(value) if isinstance(value, (list, tuple)) else None
            for i, elt in enumerate(target.elts):
                self.bind(elt, items[i] if items is not None and i < len(items) else Unknown("unpacking"), frame)
            return
        raise Unsupported(f"comprehension target {ast.unparse(target)}")

    def eval_ListComp(self, node: ast.ListComp) -> Any:
        out: list[Any] = []
        failed = self._comprehension(node.generators, lambda: out.append(self.eval(node.elt)), node)
        return failed or out

    def eval_GeneratorExp(self, node: ast.GeneratorExp) -> Any:
        return self.eval_ListComp(ast.ListComp(elt=node.elt, generators=node.generators, lineno=node.lineno))

    def eval_SetComp(self, node: ast.SetComp) -> Any:
        value = self.eval_ListComp(ast.ListComp(elt=node.elt, generators=node.generators, lineno=node.lineno))
        if isinstance(value, list) and all(_hashable(v) for v in value):
            return set(value)
        return value if isinstance(value, Unknown) else Unknown(f"set comprehension ({self.at(node)})")

    def eval_DictComp(self, node: ast.DictComp) -> Any:
        out = TDict()

        def emit() -> None:
            key = self.eval(node.key)
            out[key if _hashable(key) else repr(key)] = self.eval(node.value)
            out.at[key if _hashable(key) else repr(key)] = self.at(node)

        failed = self._comprehension(node.generators, emit, node)
        return failed or out

    def eval_Starred(self, node: ast.Starred) -> Any:
        return Unknown(f"starred expression ({self.at(node)})")

    def eval_NamedExpr(self, node: ast.NamedExpr) -> Any:
        value = self.eval(node.value)
        self.assign_name(node.target.id, value)
        return value

    def truth(self, value: Any) -> Any:
        if isinstance(value, Unknown):
            return value
        if isinstance(value, (Obj, FuncVal, ClassVal, ModuleVal, HFBridge, EnumMember, Builtin)):
            return True
        if isinstance(value, Ext):
            return Unknown(f"truth of {value.name}")
        if not is_known(value) and isinstance(value, (list, tuple, dict, set)) and len(value) > 0:
            return True
        try:
            return bool(value)
        except Exception:
            return Unknown(f"truth of {type(value).__name__}")

    def iterate(self, value: Any) -> list[Any] | None:
        if isinstance(value, (list, tuple, set, frozenset, str, range)):
            items = sorted(value, key=repr) if isinstance(value, (set, frozenset)) else list(value)
            return items if len(items) <= MAX_UNROLL else None
        if isinstance(value, dict):
            return list(value.keys())
        return None

    # -- calls ----------------------------------------------------------------------------------------------------

    def eval_Call(self, node: ast.Call) -> Any:
        func = self.eval(node.func)
        args: list[Any] = []
        for arg in node.args:
            if isinstance(arg, ast.Starred):
                spread = self.eval(arg.value)
                if not isinstance(spread, (list, tuple)):
                    return self.unfollowed_call(func, [spread], {}, node, "a *args spread of unknown length")
                args += list(spread)
            else:
                args.append(self.eval(arg))
        if isinstance(func, Unknown) and isinstance(node.func, ast.Attribute):
            # A method we cannot follow may change the object it is called on.
            self.taint(self.eval(node.func.value), f"{ast.unparse(node.func)}() is not interpreted ({self.at(node)})")
        kwargs: dict[str, tuple[Any, str]] = {}
        for kw in node.keywords:
            value = self.eval(kw.value)
            if kw.arg is None:
                if not isinstance(value, dict):
                    return self.unfollowed_call(func, args, {}, node, "a **kwargs spread that is not known")
                for k, v in value.items():
                    kwargs[k] = (v, value.at.get(k, self.at(kw)) if isinstance(value, TDict) else self.at(kw))
            else:
                kwargs[kw.arg] = (value, self.at(kw))
        return self.call(func, args, kwargs, node)

    def call(self, func: Any, args: list[Any], kwargs: dict[str, tuple[Any, str]], node: ast.AST) -> Any:
        if isinstance(func, Unknown):
            return self.unfollowed_call(func, args, kwargs, node, func.reason)
        if isinstance(func, FuncVal):
            special = SPECIAL_FUNCTIONS.get(func.qualname)
            if special is not None:
                return special(self, args, kwargs, node)
            return self.inline(func, args, kwargs, node)
        if isinstance(func, ClassVal):
            return self.construct(func.qualname, args, kwargs, node)
        if isinstance(func, Builtin):
            return call_builtin(self, func.name, args, kwargs, node)
        if isinstance(func, Method):
            return call_method(self, func, args, kwargs, node)
        if isinstance(func, Ext):
            return self.call_external(func.name, args, kwargs, node)
        return self.unfollowed_call(func, args, kwargs, node, f"call of a {type(func).__name__}")

    def call_external(self, name: str, args: list[Any], kwargs: dict[str, tuple[Any, str]], node: ast.AST) -> Any:
        if name in MCORE_CLASSES or _external_config_class(name):
            return self.construct(name, args, kwargs, node)
        if name == "logging.getLogger":
            return Ext("logger")
        if name == "typing.cast" and len(args) == 2:
            return args[1]
        if name.startswith(NO_EFFECT_CALLS):
            return None
        if name in ("copy.deepcopy", "copy.copy") and len(args) == 1:
            return clone(args[0])
        if name == "dataclasses.replace" and args and isinstance(args[0], Obj):
            new = clone(args[0])
            assert isinstance(new, Obj)
            for k, (v, at) in kwargs.items():
                new.slots[k] = Slot(v, at)
            return new
        if name in ("dataclasses.fields",):
            return Unknown(f"dataclasses.fields ({self.at(node)})")
        if name.startswith(ENVIRONMENT_CALLS):
            return Unknown(f"{name}() depends on the runtime environment ({self.at(node)})")
        return self.unfollowed_call(Ext(name), args, kwargs, node, f"{name}() is outside the Bridge sources")

    def unfollowed_call(self, func: Any, args: list[Any], kwargs: dict[str, tuple[Any, str]], node: ast.AST,
                        why: str) -> Unknown:
        name = func.name if isinstance(func, Ext) else ast.unparse(node.func) if isinstance(node, ast.Call) else "?"
        self.note_unfollowed(name)
        reason = f"{why} ({self.at(node)})"
        for value in list(args) + [v for v, _ in kwargs.values()]:
            self.taint(value, f"passed to {name}, which is not interpreted ({self.at(node)})")
        return Unknown(reason)

    def taint(self, value: Any, reason: str) -> None:
        if isinstance(value, Obj) and value.tainted is None:
            value.tainted = reason
            for slot in value.slots.values():
                self.taint(slot.value, reason)

    def inline(self, func: FuncVal, args: list[Any], kwargs: dict[str, tuple[Any, str]], node: ast.AST) -> Any:
        if isinstance(func.node, ast.Lambda) and not func.module:
            return self.unfollowed_call(Ext(func.qualname), args, kwargs, node, f"{func.qualname}() not modelled")
        if self.depth >= MAX_DEPTH:
            return self.unfollowed_call(func, args, kwargs, node, "call depth limit")
        if func.self_obj is not None:
            args = [func.self_obj] + args
        local = self.bind_arguments(func, args, kwargs, node)
        if isinstance(local, Unknown):
            return self.unfollowed_call(func, args, kwargs, node, local.reason)
        frame = Frame(func.module, local, func.qualname, cond_base=len(self.cond))
        self.frames.append(frame)
        self.depth += 1
        returns: list[Any] = []
        try:
            if isinstance(func.node, ast.Lambda):
                return self.eval(func.node.body)
            try:
                self.exec_block(func.node.body, returns)
            except _Return:
                pass
            except _Abort:
                if not frame.after:
                    raise  # the raise ends a path of the caller's condition
                # else: this path, already past a return under an unknown condition, raises; the others returned
            else:
                returns.append(None)  # the end of the body is reachable
            return join_values(returns, f"{func.qualname} returns different values on unknown paths")
        finally:
            for reason in frame.after:
                self.cond.remove(reason)
            self.depth -= 1
            self.frames.pop()

    def bind_arguments(self, func: FuncVal, args: list[Any], kwargs: dict[str, tuple[Any, str]],
                       node: ast.AST) -> dict[str, Any] | Unknown:
        spec = func.node.args
        local: dict[str, Any] = dict(func.closure or {})
        positional = spec.posonlyargs + spec.args
        defaults = [None] * (len(positional) - len(spec.defaults)) + list(spec.defaults)
        remaining = dict(kwargs)
        for i, param in enumerate(positional):
            if i < len(args):
                local[param.arg] = args[i]
            elif param.arg in remaining:
                local[param.arg] = remaining.pop(param.arg)[0]
            elif (default := defaults[i]) is not None:
                local[param.arg] = self.eval_default(func, default)
            else:
                return Unknown(f"missing argument {param.arg} of {func.qualname}")
        extra = args[len(positional):]
        if spec.vararg:
            local[spec.vararg.arg] = tuple(extra)
        elif extra:
            return Unknown(f"too many arguments for {func.qualname}")
        for param, default in zip(spec.kwonlyargs, spec.kw_defaults, strict=True):
            if param.arg in remaining:
                local[param.arg] = remaining.pop(param.arg)[0]
            elif default is not None:
                local[param.arg] = self.eval_default(func, default)
            else:
                return Unknown(f"missing keyword argument {param.arg} of {func.qualname}")
        if spec.kwarg:
            spread = TDict()
            for k, (v, at) in remaining.items():
                spread[k] = v
                spread.at[k] = at
            local[spec.kwarg.arg] = spread
        elif remaining:
            return Unknown(f"unexpected keyword {sorted(remaining)[0]} for {func.qualname}")
        return local

    def eval_default(self, func: FuncVal, node: ast.expr) -> Any:
        self.frames.append(Frame(func.module, {}, f"<defaults {func.qualname}>"))
        try:
            return self.eval(node)
        finally:
            self.frames.pop()

    # -- statements -----------------------------------------------------------------------------------------------

    def exec_block(self, stmts: list[ast.stmt], returns: list[Any]) -> None:
        for stmt in stmts:
            self.exec(stmt, returns)

    def exec(self, stmt: ast.stmt, returns: list[Any]) -> None:
        method = getattr(self, f"exec_{type(stmt).__name__}", None)
        if method is None:
            raise Unsupported(f"{type(stmt).__name__} statement not modelled ({self.at(stmt)})")
        method(stmt, returns)

    def exec_Expr(self, stmt: ast.Expr, returns: list[Any]) -> None:
        if isinstance(stmt.value, ast.Constant):
            return  # docstring
        self.eval(stmt.value)

    def exec_Pass(self, stmt: ast.Pass, returns: list[Any]) -> None:
        return

    def exec_Assert(self, stmt: ast.Assert, returns: list[Any]) -> None:
        return  # an assert that fails makes the recipe raise; the catalogue describes the runs that succeed

    def exec_Import(self, stmt: ast.Import, returns: list[Any]) -> None:
        for alias in stmt.names:
            name = alias.asname or alias.name.split(".")[0]
            self.assign_name(name, self.module_value(alias.name if alias.asname else alias.name.split(".")[0]))

    def exec_ImportFrom(self, stmt: ast.ImportFrom, returns: list[Any]) -> None:
        origin = self.modules.absolute(self.frames[-1].module, stmt)
        for alias in stmt.names:
            if alias.name == "*":
                raise Unsupported(f"star import inside a function ({self.at(stmt)})")
            self.assign_name(alias.asname or alias.name, self.attribute_of_module(origin, alias.name))

    def exec_FunctionDef(self, stmt: ast.FunctionDef, returns: list[Any]) -> None:
        frame = self.frames[-1]
        self.assign_name(stmt.name, FuncVal(frame.module, stmt, f"{frame.function}.<locals>.{stmt.name}",
                                            closure=frame.locals))

    def exec_Return(self, stmt: ast.Return, returns: list[Any]) -> None:
        value = self.eval(stmt.value) if stmt.value is not None else None
        frame = self.frames[-1]
        returns.append(value)
        if all(reason in frame.after for reason in self.cond[frame.cond_base:]):
            raise _Return(value)  # every path still running returns here
        # A return under an unknown condition: the rest of the function runs only on the other paths.
        reason = f"{frame.function} may have returned at {self.at(stmt)}"
        frame.after.append(reason)
        self.cond.append(reason)

    def exec_Raise(self, stmt: ast.Raise, returns: list[Any]) -> None:
        if self.cond:
            # The catalogue describes the runs that succeed: the path that raises ends here, the others go on.
            raise _Abort()
        raise Unsupported(f"the recipe raises at {self.at(stmt)}")

    def cond_since_frame(self) -> bool:
        """Whether the statement runs under a condition this frame (not only its caller) introduced."""
        return bool(self.cond) and len(self.cond) > self._frame_cond_base()

    def _frame_cond_base(self) -> int:
        return self.frames[-1].cond_base

    def exec_Assign(self, stmt: ast.Assign, returns: list[Any]) -> None:
        value = self.eval(stmt.value)
        for target in stmt.targets:
            self.assign(target, value, self.at(target))

    def exec_AnnAssign(self, stmt: ast.AnnAssign, returns: list[Any]) -> None:
        if stmt.value is not None:
            self.assign(stmt.target, self.eval(stmt.value), self.at(stmt.target))

    def exec_AugAssign(self, stmt: ast.AugAssign, returns: list[Any]) -> None:
        current = self.eval(_as_load(stmt.target))
        value = self.eval_BinOp(ast.BinOp(left=ast.Constant(current), op=stmt.op, right=stmt.value,
                                          lineno=stmt.lineno))
        if isinstance(current, list) and isinstance(stmt.op, ast.Add) and isinstance(value, list):
            if self.cond:
                current.append(Unknown(f"extended under an unknown condition ({self.at(stmt)})"))
            else:
                current[:] = value
            return
        self.assign(stmt.target, value, self.at(stmt.target))

    def exec_Delete(self, stmt: ast.Delete, returns: list[Any]) -> None:
        for target in stmt.targets:
            if isinstance(target, ast.Name):
                self.frames[-1].locals.pop(target.id, None)

    def assign(self, target: ast.expr, value: Any, at: str) -> None:
        if isinstance(target, ast.Name):
            self.assign_name(target.id, value)
        elif isinstance(target, ast.Attribute):
            base = self.eval_for_store(target.value, at)
            self.store_attr(base, target.attr, value, at)
        elif isinstance(target, (ast.Tuple, ast.List)):
            items = self.iterate(value) if not isinstance(value, (str, dict)) else None
            if items is None or len(items) != len(target.elts):
                for elt in target.elts:
                    self.assign(elt, Unknown(f"unpacking {type(value).__name__} at {at}"), at)
                return
            for elt, item in zip(target.elts, items, strict=True):
                self.assign(elt, item, at)
        elif isinstance(target, ast.Subscript):
            container = self.eval_for_store(target.value, at)
            key = self.eval(target.slice)
            if isinstance(container, dict) and _hashable(key) and not isinstance(key, Unknown):
                if self.cond and not (key in container and _same(container[key], value)):
                    value = Unknown(f"set under an unknown condition ({self.cond[-1]}) at {at}")
                container[key] = value
                if isinstance(container, TDict):
                    container.at[key] = at
            elif isinstance(container, list) and isinstance(key, int):
                container[key] = value if not self.cond else Unknown(f"set under an unknown condition at {at}")
            else:
                self.note_unfollowed(f"subscript store on {type(container).__name__}")
        else:
            raise Unsupported(f"assignment to {type(target).__name__} ({at})")

    def eval_for_store(self, node: ast.expr, at: str) -> Any:
        """Evaluate the object a store goes into; an unknown section becomes an opaque object to write into."""
        if isinstance(node, ast.Attribute):
            parent = self.eval_for_store(node.value, at)
            value = self.load_attr(parent, node.attr, node)
            if isinstance(value, Unknown) and isinstance(parent, Obj):
                opaque = Obj("?", "opaque", note=value.reason)
                parent.slots[node.attr] = Slot(opaque, parent.slots[node.attr].at if node.attr in parent.slots
                                               else None)
                return opaque
            return value
        return self.eval(node)

    def assign_name(self, name: str, value: Any) -> None:
        frame = self.frames[-1]
        if self.cond_since_frame():
            old = frame.locals.get(name, Unknown(f"{name} may be unbound"))
            if not (is_known(old) and is_known(value) and _same(old, value)):
                value = join_values([old, value], f"{name} differs on unknown paths ({self.cond[-1]})")
        frame.locals[name] = value

    def exec_If(self, stmt: ast.If, returns: list[Any]) -> None:
        truth = self.truth(self.eval(stmt.test))
        if not isinstance(truth, Unknown):
            self.exec_block(stmt.body if truth else stmt.orelse, returns)
            return
        reason = f"if {ast.unparse(stmt.test)} at {self.at(stmt)}: {truth.reason}"
        self.under(reason, lambda: self.exec_block(stmt.body, returns))
        self.under(reason, lambda: self.exec_block(stmt.orelse, returns))

    def under(self, reason: str, run: Callable[[], None]) -> None:
        self.cond.append(reason)
        try:
            run()
        except _Abort:
            pass
        finally:
            self.cond.remove(reason)

    def exec_For(self, stmt: ast.For, returns: list[Any]) -> None:
        items = self.iterate(self.eval(stmt.iter))
        if items is None:
            reason = f"for over {ast.unparse(stmt.iter)} at {self.at(stmt)}"

            def body() -> None:
                self.assign(stmt.target, Unknown(reason), self.at(stmt))
                self.exec_block(stmt.body, returns)

            self.under(reason, body)
            self.under(reason, lambda: self.exec_block(stmt.orelse, returns))
            return
        for item in items:
            self.assign(stmt.target, item, self.at(stmt))
            try:
                self.exec_block(stmt.body, returns)
            except _Continue:
                continue
            except _Break:
                break
        else:
            self.exec_block(stmt.orelse, returns)

    def exec_While(self, stmt: ast.While, returns: list[Any]) -> None:
        reason = f"while {ast.unparse(stmt.test)} at {self.at(stmt)}"
        self.under(reason, lambda: self.exec_block(stmt.body, returns))

    def exec_Break(self, stmt: ast.Break, returns: list[Any]) -> None:
        if self.cond_since_frame():
            raise Unsupported(f"break under an unknown condition ({self.at(stmt)})")
        raise _Break()

    def exec_Continue(self, stmt: ast.Continue, returns: list[Any]) -> None:
        if self.cond_since_frame():
            raise Unsupported(f"continue under an unknown condition ({self.at(stmt)})")
        raise _Continue()

    def exec_Try(self, stmt: ast.Try, returns: list[Any]) -> None:
        self.exec_block(stmt.body, returns)
        for handler in stmt.handlers:
            def run_handler(body: list[ast.stmt] = handler.body) -> None:
                self.exec_block(body, returns)

            self.under(f"except at {self.at(handler)}", run_handler)
        self.exec_block(stmt.orelse, returns)
        self.exec_block(stmt.finalbody, returns)

    def exec_With(self, stmt: ast.With, returns: list[Any]) -> None:
        for item in stmt.items:
            value = self.eval(item.context_expr)
            if item.optional_vars is not None:
                self.assign(item.optional_vars, Unknown(f"context manager value ({self.at(stmt)})"), self.at(stmt))
            del value
        self.exec_block(stmt.body, returns)

    def exec_Global(self, stmt: ast.Global, returns: list[Any]) -> None:
        raise Unsupported(f"global statement ({self.at(stmt)})")

    # -- entry ----------------------------------------------------------------------------------------------------

    def run(self, func: FuncVal) -> Any:
        try:
            return self.inline(func, [], {}, func.node)
        except _Abort as err:
            raise Unsupported("the recipe raises on every path the interpreter follows") from err


def _placeholder() -> ast.Lambda:
    """The node of a function the interpreter does not follow (a method of AutoBridge it does not model)."""
    node = ast.parse("lambda: None", mode="eval").body
    assert isinstance(node, ast.Lambda)
    return node


def _external_config_class(name: str) -> bool:
    """A megatron-core / megatron.training config dataclass Bridge imports (RNGConfig, ValidationConfig, ...)."""
    return name.startswith(("megatron.core.", "megatron.training.")) and name.rpartition(".")[2].endswith("Config")


def join_values(values: list[Any], reason: str) -> Any:
    if not values:
        return None
    first = values[0]
    for other in values[1:]:
        if other is first:
            continue
        if not (is_known(first) and is_known(other) and _same(first, other)):
            return Unknown(reason)
    return first


def _same(a: Any, b: Any) -> bool:
    if a is b:
        return True
    if isinstance(a, (Obj, FuncVal, HFBridge, Method)) or isinstance(b, (Obj, FuncVal, HFBridge, Method)):
        return False
    if type(a) is bool or type(b) is bool:
        return type(a) is type(b) and a == b
    try:
        return bool(a == b)
    except Exception:
        return False


def _hashable(value: Any) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True


def _plain(value: Any) -> bool:
    return isinstance(value, (int, float, str, bool, type(None), list, tuple, dict, set, frozenset)) and \
        is_known(value)


def _comparable(value: Any) -> bool:
    return _plain(value) or isinstance(value, (Ext, EnumMember, ClassVal, Builtin))


def _as_load(node: ast.expr) -> ast.expr:
    clone_node = ast.parse(ast.unparse(node), mode="eval").body
    return ast.copy_location(clone_node, node)


def clone(value: Any, memo: dict[int, Any] | None = None) -> Any:
    memo = {} if memo is None else memo
    if id(value) in memo:
        return memo[id(value)]
    if isinstance(value, Obj):
        new = Obj(value.cls, value.kind, {}, value.note, value.hf, value.origin, value.tainted)
        memo[id(value)] = new
        new.slots = {k: Slot(clone(s.value, memo), s.at) for k, s in value.slots.items()}
        return new
    if isinstance(value, TDict):
        out = TDict({k: clone(v, memo) for k, v in value.items()})
        out.at = dict(value.at)
        return out
    if isinstance(value, dict):
        return {k: clone(v, memo) for k, v in value.items()}
    if isinstance(value, list):
        return [clone(v, memo) for v in value]
    return value


# ----------------------------------------------------------------------------------------------------------------
# Builtins, methods of plain values and the Bridge functions the interpreter models rather than inlines

BUILTINS = {"len", "isinstance", "getattr", "hasattr", "setattr", "min", "max", "sum", "any", "all", "sorted",
            "range", "enumerate", "zip", "abs", "round", "print", "repr", "reversed", "callable", "issubclass",
            "ValueError", "TypeError", "KeyError", "RuntimeError", "AssertionError", "NotImplementedError",
            "ImportError", "ModuleNotFoundError", "AttributeError", "Exception", "divmod", "FutureWarning",
            "DeprecationWarning", "UserWarning", "Warning"}
PURE_METHODS = {"lower", "upper", "startswith", "endswith", "replace", "split", "strip", "lstrip", "rstrip", "join",
                "format", "get", "keys", "values", "items", "copy", "index", "count", "rsplit", "removesuffix",
                "removeprefix", "isdigit", "title"}
MUTATING_METHODS = {"append", "extend", "update", "pop", "setdefault", "insert", "remove", "add", "clear"}


def call_builtin(interp: Interpreter, name: str, args: list[Any], kwargs: dict[str, tuple[Any, str]],
                 node: ast.AST) -> Any:
    kw = {k: v for k, (v, _) in kwargs.items()}
    if name == "print":
        return None
    if name not in ("getattr", "hasattr", "isinstance", "setattr"):
        for value in list(args) + list(kw.values()):
            if isinstance(value, Unknown):
                return value  # keep the first reason rather than "int() of an unknown value"
    if name in ("getattr", "hasattr") and len(args) >= 2 and isinstance(args[1], str):
        target, attr = args[0], args[1]
        if isinstance(target, Obj):
            has = interp.has_field(target, attr)
        elif isinstance(target, Unknown):
            has = target
        elif target is None:
            has = False
        else:
            probe = interp.load_attr(target, attr, node)
            has = Unknown(f"hasattr on {type(target).__name__}") if isinstance(probe, Unknown) else True
        if name == "hasattr":
            return has
        if isinstance(has, Unknown):
            return has
        if has:
            return interp.load_attr(target, attr, node)
        if len(args) >= 3:
            return args[2]
        return Unknown(f"getattr raises AttributeError ({interp.at(node)})")
    if name == "setattr" and len(args) == 3 and isinstance(args[1], str):
        interp.store_attr(args[0], args[1], args[2], interp.at(node))
        return None
    if name == "isinstance" and len(args) == 2:
        return _isinstance(interp, args[0], args[1])
    if name in ("str", "int", "float", "bool", "list", "tuple", "set", "dict", "frozenset"):
        if not all(_plain(a) for a in args) or not all(_plain(v) for v in kw.values()):
            return Unknown(f"{name}() of an unknown value ({interp.at(node)})")
        try:
            return {"str": str, "int": int, "float": float, "bool": bool, "list": list, "tuple": tuple,
                    "set": set, "dict": dict, "frozenset": frozenset}[name](*args, **kw)
        except Exception as err:
            return Unknown(f"{name}() raises {type(err).__name__} ({interp.at(node)})")
    simple: dict[str, Callable[..., Any]] = {"len": len, "min": min, "max": max, "sum": sum, "any": any, "all": all,
                                             "sorted": sorted, "range": range, "enumerate": enumerate, "zip": zip,
                                             "abs": abs, "round": round, "repr": repr, "reversed": reversed,
                                             "divmod": divmod}
    if name in simple:
        if not all(_plain(a) or isinstance(a, range) for a in args) or not all(_plain(v) for v in kw.values()):
            return Unknown(f"{name}() of an unknown value ({interp.at(node)})")
        try:
            result = simple[name](*args, **kw)
        except Exception as err:
            return Unknown(f"{name}() raises {type(err).__name__} ({interp.at(node)})")
        return list(result) if name in ("enumerate", "zip", "reversed") else result
    if name == "callable" and args:
        return isinstance(args[0], (FuncVal, ClassVal, Builtin)) or Unknown("callable()")
    if name == "type":
        return Unknown(f"type() ({interp.at(node)})")
    return Unknown(f"builtin {name}() ({interp.at(node)})")


def _isinstance(interp: Interpreter, value: Any, kinds: Any) -> Any:
    if isinstance(kinds, tuple):
        results = [_isinstance(interp, value, k) for k in kinds]
        if any(r is True for r in results):
            return True
        unknown = [r for r in results if isinstance(r, Unknown)]
        return unknown[0] if unknown else False
    if isinstance(value, Unknown):
        return value
    if isinstance(kinds, Builtin):
        types = {"str": str, "int": int, "float": float, "bool": bool, "list": list, "tuple": tuple, "dict": dict,
                 "set": set}
        if kinds.name not in types:
            return Unknown(f"isinstance(..., {kinds.name})")
        if isinstance(value, Obj):
            return False
        return isinstance(value, types[kinds.name]) if _plain(value) else Unknown("isinstance of an object")
    cls = interp.canonical_class(kinds)
    if cls is None:
        return Unknown("isinstance with an unknown class")
    if isinstance(value, Obj):
        if value.kind != "config":
            return Unknown(f"isinstance of {value.note or value.cls}")
        return cls in interp.mro(value.cls)
    if _plain(value):
        return False
    return Unknown(f"isinstance({type(value).__name__}, {cls})")


def call_method(interp: Interpreter, method: Method, args: list[Any], kwargs: dict[str, tuple[Any, str]],
                node: ast.AST) -> Any:
    target = method.target
    kw = {k: v for k, (v, _) in kwargs.items()}
    if isinstance(target, HFBridge):
        if method.name in ("to_megatron_provider", "get_model_config"):
            # AutoBridge.to_megatron_provider / get_model_config (models/conversion/auto_bridge.py:1728,1928)
            # build the provider from the HF config: its fields are the HF bridge's, not the recipe's.
            return Obj("?", "hf", note=f"{target.model_id}", hf={"id": target.model_id, "revision": target.revision,
                                                                 "method": method.name})
        return Unknown(f"AutoBridge.{method.name}() ({interp.at(node)})")
    for value in list(args) + list(kw.values()):
        if isinstance(value, Unknown):
            return value
    if method.name in PURE_METHODS:
        if not all(_plain(a) for a in args) or not all(_plain(v) for v in kw.values()):
            return Unknown(f".{method.name}() of an unknown value ({interp.at(node)})")
        if not is_known(target) and method.name not in ("get", "keys", "items", "values", "copy"):
            return Unknown(f".{method.name}() on a value holding unknowns ({interp.at(node)})")
        try:
            result = getattr(target, method.name)(*args, **kw)
        except Exception as err:
            return Unknown(f".{method.name}() raises {type(err).__name__} ({interp.at(node)})")
        if method.name in ("keys", "values", "items"):
            return list(result)
        if method.name == "copy" and isinstance(target, TDict):
            out = TDict(result)
            out.at = dict(target.at)
            return out
        return result
    if method.name in MUTATING_METHODS and isinstance(target, (list, dict, set)):
        if interp.cond:
            if isinstance(target, list):
                target.append(Unknown(f".{method.name}() under an unknown condition ({interp.at(node)})"))
            elif isinstance(target, dict) and method.name == "update" and args and isinstance(args[0], dict):
                for k in args[0]:
                    if not (k in target and _same(target[k], args[0][k])):
                        target[k] = Unknown(f"updated under an unknown condition ({interp.at(node)})")
            else:
                return Unknown(f".{method.name}() under an unknown condition ({interp.at(node)})")
            return None
        try:
            result = getattr(target, method.name)(*args, **kw)
        except Exception as err:
            return Unknown(f".{method.name}() raises {type(err).__name__} ({interp.at(node)})")
        if isinstance(target, TDict) and method.name in ("update", "setdefault"):
            for k in (args[0] if method.name == "update" and args else {args[0]: None} if args else kw):
                target.at[k] = interp.at(node)
            for k in kw:
                target.at[k] = kwargs[k][1]
        return result
    return Unknown(f".{method.name}() of {type(target).__name__} ({interp.at(node)})")


def _from_hf_pretrained(interp: Interpreter, args: list[Any], kwargs: dict[str, tuple[Any, str]],
                        node: ast.AST) -> Any:
    # AutoBridge.from_hf_pretrained(path, **kwargs) (models/conversion/auto_bridge.py:529): the model id and the
    # revision keyword are what the catalogue records.
    model_id = args[0] if args else kwargs.get("path", (Unknown("no model id"), ""))[0]
    revision = kwargs.get("revision", (None, ""))[0]
    return HFBridge(model_id, revision)


def _get_mixed_precision_config(interp: Interpreter, args: list[Any], kwargs: dict[str, tuple[Any, str]],
                                node: ast.AST) -> Any:
    # training/mixed_precision.py:441-445: an instance passes through; a name is looked up (hyphens as underscores)
    # in the registry the @register decorator fills with the preset functions of that module.
    name = args[0] if args else kwargs.get("name", (None, ""))[0]
    if isinstance(name, Obj):
        return name
    if not isinstance(name, str):
        return Unknown(f"mixed-precision preset {name!r} ({interp.at(node)})")
    func = interp.global_value(MIXED_PRECISION_MODULE, name.replace("-", "_"))
    if not isinstance(func, FuncVal) or name.replace("-", "_") not in preset_names(interp.modules):
        return Unknown(f"unknown mixed-precision preset {name} ({interp.at(node)})")
    return interp.inline(func, [], {}, node)


SPECIAL_FUNCTIONS: dict[str, Callable[[Interpreter, list[Any], dict[str, tuple[Any, str]], ast.AST], Any]] = {
    f"{AUTO_BRIDGE}.from_hf_pretrained": _from_hf_pretrained,
    f"{MIXED_PRECISION_MODULE}.get_mixed_precision_config": _get_mixed_precision_config,
}


def preset_names(modules: Modules) -> list[str]:
    """Functions of training/mixed_precision.py decorated with @register (mixed_precision.py:167-181)."""
    out = []
    for stmt in modules.top_level(MIXED_PRECISION_MODULE):
        if isinstance(stmt, ast.FunctionDef) and any(ast.unparse(d) == "register" for d in stmt.decorator_list):
            out.append(stmt.name)
    return out


# ----------------------------------------------------------------------------------------------------------------
# Turning the final ConfigContainer into the catalogue's entries


def to_json(value: Any) -> Any:
    """A JSON-plain rendering, or raise ValueError for a value that has none."""
    if isinstance(value, Ext):
        return DTYPES.get(value.name, value.name)
    if isinstance(value, EnumMember):
        return value.member
    if isinstance(value, FuncVal):
        return value.qualname
    if isinstance(value, ClassVal):
        return value.qualname
    if isinstance(value, Builtin):
        return value.name
    if isinstance(value, (bool, int, str, type(None))):
        return value
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            return str(value)
        return value
    if isinstance(value, (list, tuple)):
        return [to_json(v) for v in value]
    if isinstance(value, (set, frozenset)):
        return sorted((to_json(v) for v in value), key=repr)
    if isinstance(value, dict):
        return {str(k): to_json(v) for k, v in value.items()}
    if isinstance(value, Obj):
        if value.origin:
            return value.origin
        raise ValueError(f"object of {value.cls}")
    raise ValueError(type(value).__name__)


@dataclass
class Flat:
    values: dict[str, dict[str, Any]] = field(default_factory=dict)
    unresolved: dict[str, str] = field(default_factory=dict)
    classes: dict[str, str] = field(default_factory=dict)


def flatten(obj: Obj, prefix: str, out: Flat) -> None:
    if obj.tainted:
        out.unresolved[f"{prefix}*"] = f"fields not listed may be changed: {obj.tainted}"
    if obj.kind == "opaque" and prefix:
        out.unresolved[f"{prefix}*"] = f"fields not listed are unknown: {obj.note}"
    for name in sorted(obj.slots):
        slot = obj.slots[name]
        path = prefix + name
        value = slot.value
        if isinstance(value, Obj) and not value.origin:
            if slot.at is not None and value.kind == "config":
                out.classes[path] = value.cls
            flatten(value, path + ".", out)
            continue
        if slot.at is None:
            continue  # a default materialised for a read
        if isinstance(value, TDict) and path == "env_vars":
            for key in sorted(value, key=str):
                emit(f"{path}.{key}", value[key], value.at.get(key, slot.at), out)
            continue
        emit(path, value, slot.at, out)


def emit(path: str, value: Any, at: str, out: Flat) -> None:
    unknown = first_unknown(value)
    if unknown is not None:
        out.unresolved[path] = unknown.reason if len(unknown.reason) <= 300 else unknown.reason[:297] + "..."
        return
    try:
        out.values[path] = {"value": to_json(value), "at": at}
    except ValueError as err:
        out.unresolved[path] = f"value has no plain form ({err}) at {at}"


def describe(interp: Interpreter, func: FuncVal) -> dict[str, Any]:
    node = func.node
    assert isinstance(node, ast.FunctionDef)
    entry: dict[str, Any] = {"defined": f"{interp.modules.path(func.module)}:{node.lineno}",
                             "function": node.name, "module": func.module,
                             "hf_model": None, "model_provider": None, "parameters": {}, "values": {},
                             "unresolved": {}, "classes": {}}
    spec = node.args
    positional = spec.posonlyargs + spec.args
    for param, default in list(zip(positional[len(positional) - len(spec.defaults):], spec.defaults, strict=True)) + [
            (p, d) for p, d in zip(spec.kwonlyargs, spec.kw_defaults, strict=True) if d is not None]:
        try:
            entry["parameters"][param.arg] = to_json(interp.eval_default(func, default))
        except (ValueError, Unsupported):
            entry["parameters"][param.arg] = ast.unparse(default)
    entry["_base"] = base_call(interp, func)
    try:
        result = interp.run(func)
    except Unsupported as err:
        entry["unresolved"]["*"] = f"not interpreted: {err}"
        return entry
    if not isinstance(result, Obj):
        entry["unresolved"]["*"] = f"the recipe returns {result!r:.200}"
        return entry
    flat = Flat()
    for section in SECTIONS:
        if section not in result.slots:
            continue
        slot = result.slots[section]
        value = slot.value
        if isinstance(value, Obj):
            if slot.at is not None and value.kind == "config":
                flat.classes[section] = value.cls
            flatten(value, section + ".", flat)
            if section == "model":
                if value.kind == "hf" and value.hf is not None:
                    entry["hf_model"] = {k: to_json(v) if is_known(v) else None for k, v in value.hf.items()}
                    for k in ("id", "revision"):
                        if not is_known(value.hf[k]):
                            flat.unresolved[f"hf_model.{k}"] = value.hf[k].reason
                elif value.kind == "config":
                    entry["model_provider"] = {"class": value.cls.rpartition(".")[2],
                                               "module": value.cls.rpartition(".")[0]}
        elif slot.at is not None:
            if isinstance(value, TDict) and section == "env_vars":
                for key in sorted(value, key=str):
                    emit(f"env_vars.{key}", value[key], value.at.get(key, slot.at), flat)
            else:
                emit(section, value, slot.at, flat)
    if result.tainted:
        flat.unresolved["*"] = f"the container may be changed: {result.tainted}"
    for path in OUTPUT_PATHS:  # output directories from os.getcwd(): irrelevant to the checks, left out
        if "runtime environment" in flat.unresolved.get(path, ""):
            del flat.unresolved[path]
    # A value and an unresolved entry for the same path cannot both stand.
    for path in list(flat.values):
        if path in flat.unresolved:
            del flat.values[path]
    entry["values"] = flat.values
    entry["unresolved"] = flat.unresolved
    entry["classes"] = flat.classes
    return entry


def base_call(interp: Interpreter, func: FuncVal) -> FuncVal | None:
    """The zero-argument function a recipe starts from (``cfg = _pretrain_common()``, ``cfg = other_recipe()``)."""
    node = func.node
    assert isinstance(node, ast.FunctionDef)
    body = [s for s in node.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    if not body or not isinstance(body[0], ast.Assign) or not isinstance(body[0].value, ast.Call):
        return None
    call = body[0].value
    if call.args or call.keywords or not isinstance(call.func, ast.Name):
        return None
    callee = interp.global_value(func.module, call.func.id)
    return callee if isinstance(callee, FuncVal) and isinstance(callee.node, ast.FunctionDef) else None


def compact(entries: dict[str, dict[str, Any]]) -> list[str]:
    """Store each entry as a difference from the entry it starts from (its ``base``) and the ``at`` of each value
    as ``"<index into files>:<line>"``; returns the files table.

    expand(R) = expand(base) minus R.drop, minus the paths R lists as unresolved, plus R.values (classes the same
    way); R.unresolved is complete (not inherited). tests/test_bridge_recipes.py expand() is the reference."""
    full = {k: dict(e.get("values", {})) for k, e in entries.items()}
    full_classes = {k: dict(e.get("classes", {})) for k, e in entries.items()}
    for key, entry in entries.items():
        base = entry.get("base")
        own, own_classes = full[key], full_classes[key]
        if base is None:
            entry["drop"] = []
            continue
        inherited, inherited_classes = full[base], full_classes[base]
        entry["values"] = {p: v for p, v in own.items() if inherited.get(p) != v}
        entry["classes"] = {p: c for p, c in own_classes.items() if inherited_classes.get(p) != c}
        entry["drop"] = sorted({p for p in inherited if p not in own and p not in entry.get("unresolved", {})} |
                               {p for p in inherited_classes if p not in own_classes})
    files = sorted({v["at"].rpartition(":")[0] for e in entries.values() for v in e.get("values", {}).values()})
    index = {f: i for i, f in enumerate(files)}
    for entry in entries.values():
        entry["values"] = {p: [v["value"], f"{index[v['at'].rpartition(':')[0]]}:{v['at'].rpartition(':')[2]}"]
                           for p, v in entry.get("values", {}).items()}
    return files


# ----------------------------------------------------------------------------------------------------------------
# Which recipes exist: recipe_runner.py / recipe_metadata.py semantics


@dataclass(frozen=True)
class Metadata:
    family_prefixes: tuple[tuple[str, str], ...]
    pattern: re.Pattern[str]
    benchmark_collisions: frozenset[str]
    library_collisions: frozenset[str]


def read_metadata(sources: Sources) -> Metadata:
    """The constants of scripts/training/recipe_metadata.py, read from its source."""
    tree = sources.tree(METADATA_PATH)
    values: dict[str, ast.expr] = {}
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and isinstance(stmt.targets[0], ast.Name):
            values[stmt.targets[0].id] = stmt.value
        elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value is not None:
            values[stmt.target.id] = stmt.value

    def literal(name: str) -> Any:
        node = values[name]
        if isinstance(node, ast.Call):  # frozenset({...}) / frozenset() / re.compile(...)
            return ast.literal_eval(node.args[0]) if node.args else ()
        return ast.literal_eval(node)

    return Metadata(tuple(tuple(p) for p in literal("BENCHMARK_RECIPE_FAMILY_PREFIXES")),
                    re.compile(literal("BENCHMARK_RECIPE_PATTERN")),
                    frozenset(literal("BENCHMARK_RECIPE_PRECEDENCE_COLLISIONS")),
                    frozenset(literal("LIBRARY_RECIPE_PRECEDENCE_COLLISIONS")))


def benchmark_names(sources: Sources, family: str) -> set[str]:
    """recipe_metadata.benchmark_recipe_names: aliases and string constants ending in _config in the
    family's __init__.py files (recipe_metadata.py:139-158)."""
    root = f"src/megatron/bridge/perf_recipes/{family}/"
    names: set[str] = set()
    for path in sorted(p for p in sources.files if p.startswith(root) and p.endswith("__init__.py")):
        for node in ast.walk(sources.tree(path)):
            if isinstance(node, ast.alias):
                candidate = node.asname or node.name
                if candidate.endswith("_config"):
                    names.add(candidate)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.endswith("_config"):
                names.add(node.value)
    return names


def library_candidates(interp: Interpreter) -> dict[str, FuncVal]:
    """find_library_recipe: the recipes package's attributes, then each family's h100 package (sorted)."""
    modules = interp.modules
    found: dict[str, FuncVal] = {}
    for name in modules.exported(RECIPES_PKG) + [n for s in modules.top_level(RECIPES_PKG)
                                                  for n in modules.bound_names(RECIPES_PKG, s, frozenset())]:
        if name.endswith("_config") and name not in found:
            value = interp.global_value(RECIPES_PKG, name)
            if isinstance(value, FuncVal):
                found[name] = value
    # recipe_runner.library_h100_modules (recipe_runner.py:173-189): subpackages of recipes with an h100 package.
    packages = sorted({p.split("/")[4] for p in modules.sources.files
                       if p.startswith("src/megatron/bridge/recipes/") and p.count("/") >= 5
                       and p.split("/")[5:6] == ["h100"]})
    for family in packages:
        if family.startswith("_") or family == "utils":
            continue
        module = f"{RECIPES_PKG}.{family}.h100"
        if not modules.exists(module):
            continue
        for stmt in modules.top_level(module):
            for name in modules.bound_names(module, stmt, frozenset()):
                if name.endswith("_config") and name not in found:
                    value = interp.global_value(module, name)
                    if isinstance(value, FuncVal):
                        found[name] = value
    return found


def benchmark_candidates(interp: Interpreter, metadata: Metadata) -> dict[str, FuncVal | Unknown]:
    """Names resolved_benchmark_recipe_metadata accepts, each with what find_benchmark_recipe returns."""
    found: dict[str, FuncVal | Unknown] = {}
    families = sorted({family for _, family in metadata.family_prefixes})
    for family in families:
        for name in sorted(benchmark_names(interp.modules.sources, family)):
            if name in metadata.library_collisions or not metadata.pattern.search(name):
                continue
            owner = next((f for prefix, f in metadata.family_prefixes if name.startswith(prefix)), None)
            if owner != family:
                continue  # available_benchmark_recipe_metadata looks in the family the prefix names
            value = interp.attribute_of_module(f"{PERF_PKG}.{family}", name)
            found[name] = value if isinstance(value, FuncVal) else Unknown(f"{name} is indexed but not callable")
    return found


def build(sources: Sources, form: str = "full") -> dict[str, Any]:
    """The catalogue; ``form`` "full" lists every value per recipe, "compact" stores differences (see compact)."""
    modules = Modules(sources)
    mcore = load_mcore_fields()
    probe = Interpreter(modules, mcore)
    metadata = read_metadata(sources)
    library = library_candidates(probe)
    benchmark = benchmark_candidates(probe, metadata)

    recipes: dict[str, Any] = {}
    aliases: dict[str, str] = {}
    unfollowed: dict[str, int] = {}
    defined_key: dict[tuple[str, str], str] = {}

    def key_for(func: FuncVal, kind: str) -> str:
        node = func.node
        assert isinstance(node, ast.FunctionDef)
        ident = (func.module, node.name)
        if ident in defined_key:
            return defined_key[ident]
        # A definition is keyed by its own name unless launching that name selects another definition (a
        # benchmark recipe of the same name wins, recipe_runner.py:235-243); then by its qualified name.
        own = node.name
        launched = benchmark.get(own) if own in benchmark else library.get(own)
        key = own if launched is not None and isinstance(launched, FuncVal) and \
            (launched.module, getattr(launched.node, "name", "")) == ident else f"{func.module}.{own}"
        defined_key[ident] = key
        if key not in recipes:
            interp = Interpreter(modules, mcore)
            entry = describe(interp, func)
            entry["kind"] = kind
            entry["mode"] = infer_recipe_mode(node.name)
            recipes[key] = entry
            for what, n in interp.unfollowed.items():
                unfollowed[what] = unfollowed.get(what, 0) + n
        return key

    launch_names = sorted(set(library) | set(benchmark))
    for name in launch_names:
        if name in benchmark:  # load_recipe: benchmark metadata first (recipe_runner.py:233-242)
            target = benchmark[name]
            if isinstance(target, Unknown):
                recipes[name] = {"kind": "benchmark", "unresolved": {"*": target.reason}, "values": {}}
                continue
            key = key_for(target, "benchmark")
        else:
            key = key_for(library[name], "library")
        if key != name:
            aliases[name] = key
    for key, entry in recipes.items():
        entry.setdefault("mode", infer_recipe_mode(key))
    # Bases a recipe starts from that are not launchable recipes themselves (_pretrain_common, ...) are catalogued
    # as templates so recipes can be stored as differences.
    templates: dict[str, Any] = {}
    pending = list(recipes.items())
    while pending:
        key, entry = pending.pop()
        base_func = entry.pop("_base", None)
        entry["base"] = None
        if base_func is None or "*" in entry.get("unresolved", {}):
            continue
        ident = (base_func.module, base_func.node.name)  # type: ignore[union-attr]
        base_key = defined_key.get(ident, f"{base_func.module}.{base_func.node.name}")  # type: ignore[union-attr]
        if base_key not in recipes and base_key not in templates:
            template = describe(Interpreter(modules, mcore), base_func)
            template["kind"] = "template"
            template["mode"] = None
            templates[base_key] = template
            pending.append((base_key, template))
        target = recipes.get(base_key) or templates[base_key]
        if "*" not in target.get("unresolved", {}):
            entry["base"] = base_key
    everything = {**recipes, **templates}
    expanded_values = sum(len(e.get("values", {})) for e in everything.values() if e.get("kind") != "template")
    files: list[str] = []
    if form == "compact":
        files = compact(everything)
    else:
        for entry in everything.values():
            entry.pop("base", None)

    presets = {}
    interp = Interpreter(modules, mcore)
    for name in preset_names(modules):
        func = interp.global_value(MIXED_PRECISION_MODULE, name)
        assert isinstance(func, FuncVal)
        obj = Interpreter(modules, mcore).run(func)
        flat = Flat()
        if isinstance(obj, Obj):
            flatten(obj, "", flat)
        presets[name] = {"values": {k: v["value"] for k, v in flat.values.items()},
                         "at": {k: v["at"] for k, v in flat.values.items()},
                         "defined": f"{modules.path(MIXED_PRECISION_MODULE)}:{func.node.lineno}",
                         "unresolved": flat.unresolved}
        if "_" in name:  # @register also files the hyphenated name (mixed_precision.py:176-179)
            presets[name]["also_registered_as"] = name.replace("_", "-")
    defaults = {}
    for c in [MIXED_PRECISION_CLASS]:
        node = probe.class_node(c)
        assert node is not None
        for stmt in node.body:
            if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                try:
                    defaults[stmt.target.id] = to_json(probe._default_value(c, stmt.value))
                except ValueError:
                    defaults[stmt.target.id] = None
    cfg_path = "src/megatron/bridge/training/config.py"
    mp_path = modules.path(MIXED_PRECISION_MODULE)
    pretrain_path = "src/megatron/bridge/training/pretrain.py"
    runner_path = "scripts/training/recipe_runner.py"
    launcher_path = "scripts/training/run_recipe.py"
    applies = (
        f"runtime_config_update ({cfg_path}:{_line(sources, cfg_path, 'def runtime_config_update')}) runs when "
        f"training starts ({pretrain_path}:{_line(sources, pretrain_path, 'runtime_config_update(config)')}; the "
        f"dry-run path {runner_path}:{_line(sources, runner_path, 'runtime_config_update(config)')}), i.e. after "
        f"run_recipe.py applied the CLI overrides (apply_cli_overrides, "
        f"{launcher_path}:{_line(sources, launcher_path, 'recipe = apply_cli_overrides(')}). "
        f"If cfg.mixed_precision is not None: a string is resolved with get_mixed_precision_config "
        f"({cfg_path}:{_line(sources, cfg_path, 'cfg.mixed_precision = get_mixed_precision_config(')}; "
        f"{mp_path}:{_line(sources, mp_path, 'def get_mixed_precision_config')}, hyphens read as underscores), "
        f"then finalize() (fp8_param/fp4_param None -> their *_param_gather, "
        f"{mp_path}:{_line(sources, mp_path, 'def finalize')}) "
        f"and setup(model, optimizer, ddp) ({cfg_path}:{_line(sources, cfg_path, 'cfg.mixed_precision.setup(')}; "
        f"{mp_path}:{_line(sources, mp_path, 'def setup')}): update_config_with_precision_overrides "
        f"({mp_path}:{_line(sources, mp_path, 'def update_config_with_precision_overrides')}) copies EVERY "
        "MixedPrecisionConfig field (preset values and class defaults alike, see mixed_precision_defaults) onto "
        "each of model, optimizer and ddp that has a field of that name, overwriting values the recipe or the CLI "
        "set there (so e.g. ddp.grad_reduce_in_fp32 and model.fp8 come from the mixed-precision config). A "
        "mixed_precision.* CLI override changes the config before it is applied; a CLI override of, say, "
        "ddp.grad_reduce_in_fp32 is overwritten by it. comm_overlap.setup runs after this "
        f"({cfg_path}:{_line(sources, cfg_path, 'cfg.comm_overlap.setup(')}). MixedPrecisionConfig.__setattr__ "
        f"keeps fp8_param == fp8_param_gather and fp4_param == fp4_param_gather on every assignment, including "
        f"those in __init__ ({mp_path}:{_line(sources, mp_path, 'def __setattr__')}), so after construction "
        "fp8_param/fp4_param equal their *_param_gather (the presets list them)."
    )
    stored = sum(len(e.get("values", {})) for e in everything.values())
    unresolved = sum(len(e.get("unresolved", {})) for e in recipes.values())
    out: dict[str, Any] = {
        "source": {"repo": "NVIDIA-NeMo/Megatron-Bridge", "commit": sources.commit, "tool": "tools/bridge_recipes.py",
                   "megatron_core_defaults": f"checks/data/mcore_fields.json {MCORE_PROFILE} (reads only)"},
        "recipes": recipes,
        "aliases": aliases,
        "format": FULL_FORMAT if form == "full" else COMPACT_FORMAT,
        "mixed_precision_presets": presets,

        "mixed_precision_defaults": {"values": defaults,
                                     "at": f"{mp_path}:{_line(sources, mp_path, 'class MixedPrecisionConfig')}"},
        "applies": applies,
        "_unfollowed": unfollowed,
        "counts": {"recipes": len(recipes), "aliases": len(aliases), "values": expanded_values,
                   "unresolved": unresolved},
    }
    if form == "compact":
        out.update({"templates": templates, "files": files})
        out["counts"].update({"templates": len(templates), "values_stored": stored})
    return out


_COMMON_FORMAT = ("recipes[name] is what `run_recipe.py --recipe name` runs; aliases[name] names the entry for a "
                  "name that selects a definition of another name (a library recipe whose own name a benchmark "
                  "recipe takes is keyed by its module-qualified name). A path ending in '*' is unresolved for "
                  "every field under it that values do not list. classes: the config class of each object the "
                  "recipe builds itself. ")
FULL_FORMAT = _COMMON_FORMAT + "values: path -> {value, at (file:line where the value is finally set)}."
COMPACT_FORMAT = _COMMON_FORMAT + (
    "values are stored as a difference from the entry named by base (in recipes or templates): expand(R) = "
    "expand(base) - R.drop - paths in R.unresolved + R.values (classes likewise); each value is [value, 'F:LINE'] "
    "where F indexes files; R.unresolved, hf_model, model_provider, parameters are complete.")


def _line(sources: Sources, path: str, needle: str) -> int:
    for number, text in enumerate(sources.text(path).splitlines(), start=1):
        if needle in text:
            return number
    raise SystemExit(f"{needle!r} not found in {path}: the tool needs updating for this Bridge commit")


# Tables written one entry per line, so that the checker can read the one recipe it needs (and its bases)
# without parsing the rest (checks/loaders/bridge_recipe.py, `_Table`): a launch is checked at start-up speed.
LINED = ("recipes", "templates")


def dump(data: dict[str, Any]) -> str:
    """Valid JSON, keys sorted: every top-level key on a line of its own, and each entry of the ``LINED``
    tables on a line of its own."""
    def compact(value: Any) -> str:
        return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)

    parts = []
    for key in sorted(data):
        if key in LINED:
            entries = ",\n".join(f"{compact(name)}:{compact(data[key][name])}" for name in sorted(data[key]))
            parts.append(f"{compact(key)}:{{\n{entries}\n}}")
        else:
            parts.append(f"{compact(key)}:{compact(data[key])}")
    return "{\n" + ",\n".join(parts) + "\n}\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bridge-git", type=Path, required=True, help="NVIDIA-NeMo/Megatron-Bridge git directory")
    parser.add_argument("--commit", default=DEFAULT_COMMIT, help="Bridge commit (default: the checker's pin)")
    parser.add_argument("--out", type=Path, help="write here (default: stdout)")
    parser.add_argument("--stats", action="store_true", help="print the calls not followed to stderr")
    parser.add_argument("--format", choices=("full", "compact"), default="compact",
                        help="compact (default, what checks/data holds): differences from a base, ~1/3 the size; "
                             "full: every value per recipe")
    args = parser.parse_args(argv)
    data = build(Sources(args.bridge_git, args.commit), args.format)
    unfollowed = data.pop("_unfollowed")
    if args.stats:
        for what, n in sorted(unfollowed.items(), key=lambda item: -item[1]):
            print(f"{n:6d} {what}", file=sys.stderr)
    text = dump(data)
    if args.out:
        args.out.write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    print(json.dumps(data["counts"]), file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
