"""Record every Megatron-LM command-line flag, per megatron-core version.

Maintainer tool, not part of the checker. For each version it unpacks the
``megatron/`` tree (core + training) of the matching ref from a Megatron-LM git
mirror into a scratch directory, imports it in a fresh interpreter, builds the
real parser exactly as ``megatron.training.arguments.parse_args`` does::

    add_megatron_arguments(argparse.ArgumentParser(description=..., allow_abbrev=False))

and walks ``parser._actions``. For every option string it records the dest,
the normalized action, default, nargs, type name, choices, const, whether the
option is required and whether its help is suppressed. The result is the flag
table in ``checks/data/mlm_flags.json``. ``-h``/``--help`` are included (the
parser has them). Flags that an entry script adds through ``extra_args_provider``
(``pretrain_*.py``, post-training tools; outside ``megatron/``) are not.

Nothing is copied from upstream: no source text, help strings or code is
stored, only the flag metadata listed above.

Usage (regenerate after an upstream release; the interpreter needs torch, e.g.
``pip install torch==2.13.0 numpy packaging six regex pydantic pyyaml einops triton``)::

    python tools/mlm_flags.py --mirror /path/to/Megatron-LM.git --all \
        --output checks/data/mlm_flags.json
    # refresh one version inside an existing file (other versions are kept):
    python tools/mlm_flags.py --mirror /path/to/Megatron-LM.git --version 0.16.1 \
        --output checks/data/mlm_flags.json
    # an arbitrary ref under a label of your choice:
    python tools/mlm_flags.py --mirror /path/to/Megatron-LM.git --ref next=origin/main

``--mirror`` may be a bare repository; only ``git archive`` and ``git rev-parse``
are used. ``--python`` selects the interpreter that imports the Megatron tree
(default: the one running this script).

Import environment
    * ``RANK``, ``WORLD_SIZE`` and ``LOCAL_RANK`` are removed from the child's
      environment, because some defaults are read from them at parser build time
      (``--inprocess-active-world-size``, ``--local-rank``); the table holds the
      single-process values.
    * A third-party module whose absence makes ``megatron.training.arguments``
      fail to import (an import that upstream does not guard) is replaced by an
      inert stub and the import is retried; each stub is listed under ``stubs``
      in the output (``NEVER_STUB`` packages such as torch are required, never
      stubbed). Guarded imports (``try: import x except ImportError``) are
      never stubbed, so optional features keep their "not installed" behaviour.
      A default, const or choice that turns out to be a stub object is an error.
    * Names that newer Pythons add to ``typing`` (``typing.override``, 3.12;
      megatron-core >= 0.18 requires Python 3.12) are filled in from
      ``typing_extensions`` when missing; these shims are listed under ``stubs`` too.
    * Flags that upstream only registers when an optional NVIDIA package is
      importable (``FEATURE_SWITCHES``) are recorded separately under
      ``conditional``, by rebuilding the parser with the switch forced on. They
      are not part of ``versions``, which is what a plain install accepts.

If a version's parser cannot be built at all, the tool falls back to reading
``add_argument`` calls in ``megatron/training/arguments.py`` with :mod:`ast`
(``"method": "static"``). That fallback is incomplete from 0.16 on, where many
flags are generated from config dataclasses (``ArgumentGroupFactory``); a note
saying so is written under ``notes``.

Output (compact, sorted keys; schema 2)::

    {"source": "NVIDIA/Megatron-LM", "schema": 2, "python": {"0.16.1": "3.11.7", ...},
     "refs": {"0.16.1": "<full sha>", ...},
     "method": {"0.16.1": "parser", ...},
     "actions": [{"options": ["--flag", ...], "dest": ..., "action": ..., ...}, ...],
     "versions": {"0.16.1": [<index into actions>, ...], ...},   # parser order
     "groups": {"0.16.1": [[<index>, ...], ...]},               # mutually exclusive groups
     "conditional": {"0.16.1": [[<index>, "<package>"], ...]},
     "enums": {"0.16.1": {"AttnBackend": {"members": [[name, value], ...], "aliases": {...}}}},
     "converters": {"0.16.1": {"<converter id>": "<source digest>"}},
     "verified": {"0.16.1": {"cases": N, "mismatches": [...]}},
     "stubs": {"0.16.1": [...]}, "notes": {...}}

One entry per argparse action (not per option string), identical entries shared between versions. Keys
left out take argparse's defaults: ``action`` store, ``nargs``/``type``/``choices``/``const``/``default``
None, ``required``/``suppressed``/``deprecated`` false. ``options`` lists every option string of the
action (aliases, and the ``--no-`` form argparse adds for ``BooleanOptionalAction``). ``type`` is the
converter id: ``int``, ``float``, ``str``, ``bool``, a function's ``__name__``, or ``lambda:<first
option>``; ``converters`` holds a digest of each one's upstream definition (sha1 of ``ast.unparse`` without
the docstring), so a changed converter is noticed (checks/loaders/mlm_types.py SOURCE_DIGESTS). ``enum``
names the Enum class whose members the converter looks up by name; enum members in defaults, choices and
consts are ``{"enum": class, "name": member, "value": ...}``. ``deprecated`` is true where the help says so.
Other non-JSON values (functions, non-finite floats) are ``{"repr": "..."}``; tuples become lists.

Verification. After extracting a version the child builds the checker's parser from the fresh table
(checks.loaders.mlm_argparse) and compares it with the real parser on generated argv for every flag
(tools/mlm_parity.py: valid and invalid values, missing values, ``=value``, ``--no-`` forms, repeats,
stray words); the number of cases and every mismatch go under ``verified``. A mismatch makes the tool exit 1
(the table is still written, so the mismatches can be read).
"""

from __future__ import annotations

import argparse
import ast
import enum
import functools
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import math
import os
import re
import subprocess
import sys
import tarfile
import tempfile
import types
from collections.abc import Sequence
from pathlib import Path
from typing import Any

SOURCE = "NVIDIA/Megatron-LM"

# The versions and the ref holding each one's source: one list for both tools.
from mcore_fields import VERSION_REFS  # noqa: E402

# Optional-package switches that add flags when on: (module, attribute, package that turns it on).
# megatron.core.extensions.kitchen sets HAVE_KITCHEN when nvidia_kitchen imports; from 0.16 on
# _add_kitchen_quantization_arguments registers --kitchen-* only then (0.14/0.15 always do).
FEATURE_SWITCHES: tuple[tuple[str, str, str], ...] = (
    ("megatron.core.extensions.kitchen", "HAVE_KITCHEN", "nvidia_kitchen"),
)

# Environment variables read into parser defaults; removed so the table is host-independent.
SCRUBBED_ENV: tuple[str, ...] = ("RANK", "WORLD_SIZE", "LOCAL_RANK")

# Required by the parser itself (torch dtypes are defaults, etc.): never stubbed, install them.
NEVER_STUB: frozenset[str] = frozenset({"torch", "numpy", "packaging", "typing_extensions"})

ARGUMENTS_MODULE = "megatron.training.arguments"
PARSER_DESCRIPTION = "Megatron-LM Arguments"
MAX_STUBS = 25

_ACTION_NAMES: dict[str, str] = {
    "_StoreAction": "store",
    "_StoreTrueAction": "store_true",
    "_StoreFalseAction": "store_false",
    "_StoreConstAction": "store_const",
    "_AppendAction": "append",
    "_AppendConstAction": "append_const",
    "_ExtendAction": "extend",
    "_CountAction": "count",
    "_HelpAction": "help",
    "_VersionAction": "version",
    "BooleanOptionalAction": "BooleanOptionalAction",
}
_STATIC_ACTIONS = {v for v in _ACTION_NAMES.values()}
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")

Json = Any


# --------------------------------------------------------------------------- serialization


class StubValueError(RuntimeError):
    """A recorded value came from a stubbed module, so the table would be wrong."""


def _is_stub(value: Any) -> bool:
    return bool(getattr(type(value), "_mlm_flags_stub", False) or getattr(value, "_mlm_flags_stub", False))


def _repr(value: Any) -> dict[str, str]:
    if isinstance(value, (types.FunctionType, types.BuiltinFunctionType, type)):
        text = f"{getattr(value, '__module__', None) or ''}.{value.__qualname__}".lstrip(".")
    else:
        text = _ADDRESS.sub("", repr(value))
    return {"repr": text}


def to_json(value: Any) -> Json:
    """Return ``value`` as JSON data; enum members as ``{"enum", "name", "value"}``, other non-JSON as repr."""
    if _is_stub(value):
        raise StubValueError(f"value {value!r} comes from a stubbed module")
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, enum.Enum):  # before int: IntEnum members are ints
        return {"enum": type(value).__name__, "name": value.name, "value": to_json(value.value)}
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else _repr(value)
    if isinstance(value, (list, tuple)):
        return [to_json(item) for item in value]
    if isinstance(value, (set, frozenset)):
        return sorted((to_json(item) for item in value), key=lambda item: json.dumps(item, sort_keys=True))
    if isinstance(value, dict):
        return {str(key): to_json(item) for key, item in value.items()}
    if isinstance(value, range):
        return list(value)
    return _repr(value)


def type_name(kind: Any, first_option: str = "") -> str | None:
    """The converter id of an argparse ``type=`` callable: its ``__name__``, ``lambda:<first option>``."""
    if kind is None:
        return None
    if _is_stub(kind):
        raise StubValueError(f"type {kind!r} comes from a stubbed module")
    if isinstance(kind, functools.partial):
        return type_name(kind.func, first_option)
    name = getattr(kind, "__name__", None)
    if name == "<lambda>":
        return f"lambda:{first_option}"
    return name if isinstance(name, str) else type(kind).__name__


def _without_docstring(node: ast.FunctionDef | ast.AsyncFunctionDef) -> str:
    body = [b for b in node.body if not (isinstance(b, ast.Expr) and isinstance(b.value, ast.Constant)
                                         and isinstance(b.value.value, str))]
    return ast.unparse(ast.FunctionDef(node.name, node.args, body or [ast.Pass()], [], None, lineno=node.lineno))


def source_digest(kind: Any) -> str:
    """A digest of a converter's upstream definition: sha1 of ``ast.unparse`` of it (docstring dropped) and of
    the module-level functions it calls (``_eval_pattern``).

    ``builtin`` for callables without Python source (int, float, str, bool).
    """
    import hashlib

    while isinstance(kind, functools.partial):
        kind = kind.func
    code = getattr(kind, "__code__", None)
    if code is None:
        return "builtin"
    try:
        tree = ast.parse(Path(code.co_filename).read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return "unreadable"
    functions = {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    found: list[str] = []
    nodes: list[ast.AST] = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == kind.__name__ and \
                code.co_firstlineno in (node.lineno, *(d.lineno for d in node.decorator_list)):
            found.append(_without_docstring(node))
            nodes.append(node)
        elif isinstance(node, ast.Lambda) and kind.__name__ == "<lambda>" and node.lineno == code.co_firstlineno:
            found.append(ast.unparse(node))
            nodes.append(node)
    called = sorted({c.func.id for n in nodes for c in ast.walk(n) if isinstance(c, ast.Call)
                     and isinstance(c.func, ast.Name) and c.func.id in functions and c.func.id != kind.__name__})
    found += [_without_docstring(functions[name]) for name in called]
    return hashlib.sha1("\n".join(found).encode()).hexdigest()[:12] if nodes else "unreadable"


def converter_enum(kind: Any, choices: Any) -> type[enum.Enum] | None:
    """The Enum class a converter looks members up in: a closure cell, a global it names, or the choices'."""
    found: list[type[enum.Enum]] = []
    while isinstance(kind, functools.partial):
        kind = kind.func
    for cell in getattr(kind, "__closure__", None) or ():
        try:
            content = cell.cell_contents
        except ValueError:
            continue
        if isinstance(content, type) and issubclass(content, enum.Enum):
            found.append(content)
    code = getattr(kind, "__code__", None)
    module_globals = getattr(kind, "__globals__", {})
    for name in getattr(code, "co_names", ()):
        value = module_globals.get(name)
        if isinstance(value, type) and issubclass(value, enum.Enum) and value not in found:
            found.append(value)
    if choices is not None:
        classes = {type(c) for c in choices}
        if len(classes) == 1 and issubclass(next(iter(classes)), enum.Enum) and next(iter(classes)) not in found:
            found.append(next(iter(classes)))
    if len(found) > 1:
        raise RuntimeError(f"converter {kind!r} refers to several enums: {found}")
    return found[0] if found else None


def enum_table(cls: type[enum.Enum]) -> dict[str, Json]:
    """An Enum as ``cls[name]`` sees it: canonical members in order, alias names to canonical names."""
    members = [[m.name, to_json(m.value)] for m in cls]
    aliases = {name: m.name for name, m in cls.__members__.items() if name != m.name}
    return {"members": members, **({"aliases": aliases} if aliases else {})}


def action_name(action: argparse.Action) -> str:
    cls = type(action).__name__
    return _ACTION_NAMES.get(cls, cls)


def describe_action(action: argparse.Action) -> dict[str, Json]:
    """One action's argparse semantics; keys holding argparse's default value are left out."""
    choices = action.choices
    first = action.option_strings[0]
    help_text = action.help if isinstance(action.help, str) else ""
    kind = converter_enum(action.type, list(choices) if choices is not None else None) \
        if action.type is not None or choices is not None else None
    entry: dict[str, Json] = {
        "options": list(action.option_strings),
        "dest": action.dest,
        "action": action_name(action),
        "nargs": action.nargs,
        "type": type_name(action.type, first),
        "choices": None if choices is None else to_json(list(choices)),
        "const": to_json(action.const),
        "default": to_json(action.default),
        "required": bool(action.required),
        "suppressed": action.help == argparse.SUPPRESS,
        "deprecated": "deprecat" in help_text.lower(),
        "enum": kind.__name__ if kind is not None else None,
    }
    return compact(entry)


_OMITTED: dict[str, Json] = {"action": "store", "nargs": None, "type": None, "choices": None, "const": None,
                             "default": None, "required": False, "suppressed": False, "deprecated": False,
                             "enum": None}


def compact(entry: dict[str, Json]) -> dict[str, Json]:
    return {k: v for k, v in entry.items() if not (k in _OMITTED and v == _OMITTED[k] and
                                                   type(v) is type(_OMITTED[k]))}


def flag_table(parser: argparse.ArgumentParser) -> dict[str, Json]:
    """Every optional action of ``parser`` in registration order, its mutually exclusive groups, enums and
    converter digests."""
    actions: list[dict[str, Json]] = []
    index: dict[int, int] = {}
    seen: set[str] = set()
    enums: dict[str, Json] = {}
    converters: dict[str, str] = {}
    for action in parser._actions:  # argparse has no public way to list actions
        if not action.option_strings:
            raise RuntimeError(f"positional argument {action.dest} (the checker models optionals only)")
        for option in action.option_strings:
            if option in seen:
                raise RuntimeError(f"option {option} registered twice")
            seen.add(option)
        entry = describe_action(action)
        index[id(action)] = len(actions)
        actions.append(entry)
        kind = converter_enum(action.type, list(action.choices) if action.choices is not None else None) \
            if action.type is not None or action.choices is not None else None
        if kind is not None:
            enums[kind.__name__] = enum_table(kind)
        if action.type is not None:
            converters[str(entry["type"])] = source_digest(action.type)
    groups = [[index[id(a)] for a in group._group_actions] for group in parser._mutually_exclusive_groups]
    return {"actions": actions, "groups": groups, "enums": enums, "converters": converters}


# --------------------------------------------------------------------------- parser method (child)


class _StubMeta(type):
    """Metaclass of stub attributes: any attribute, call or subclassing works."""

    _mlm_flags_stub = True

    def __getattr__(cls, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _StubMeta(name, (_StubBase,), {"__module__": cls.__module__})

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        if len(args) == 1 and callable(args[0]) and not kwargs:  # used as a decorator
            return args[0]
        return super().__call__()

    def __getitem__(cls, item: Any) -> Any:  # used in annotations such as Stub[int]
        return cls

    def __or__(cls, other: Any) -> Any:
        return cls

    __ror__ = __or__


class _StubBase(metaclass=_StubMeta):
    _mlm_flags_stub = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return getattr(type(self), name)


class _StubModule(types.ModuleType):
    _mlm_flags_stub = True

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _StubMeta(name, (_StubBase,), {"__module__": self.__name__})


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves :class:`_StubModule` for the stubbed top-level packages and their submodules."""

    def __init__(self) -> None:
        self.roots: set[str] = set()

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname.split(".")[0] in self.roots:
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = _StubModule(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        pass


_MISSING_NAME = re.compile(r"cannot import name '(\w+)' from '([\w.]+)'")


def _purge_megatron() -> None:
    for name in list(sys.modules):
        if name == "megatron" or name.startswith("megatron."):
            del sys.modules[name]


def import_arguments_module(stubs: list[str]) -> types.ModuleType:
    """Import megatron.training.arguments, stubbing unguarded missing third-party imports."""
    finder = _StubFinder()
    sys.meta_path.append(finder)
    for _ in range(MAX_STUBS):
        try:
            return importlib.import_module(ARGUMENTS_MODULE)
        except ModuleNotFoundError as error:
            missing = error.name or ""
            root = missing.split(".")[0]
            if not root or root == "megatron" or root in NEVER_STUB or root in finder.roots:
                raise
            finder.roots.add(root)
            stubs.append(f"{root} (module not importable: {missing})")
        except ImportError as error:
            match = _MISSING_NAME.search(str(error))
            if not match or match.group(2) != "typing":
                raise
            import typing

            import typing_extensions

            name = match.group(1)
            if not hasattr(typing_extensions, name):
                raise
            setattr(typing, name, getattr(typing_extensions, name))
            stubs.append(f"typing.{name} (newer-Python API, shimmed with typing_extensions.{name})")
        _purge_megatron()
    raise RuntimeError(f"gave up after {MAX_STUBS} stubs: {stubs}")


def build_parser(arguments: types.ModuleType,
                 parser_class: type[argparse.ArgumentParser] = argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The parser of ``arguments.parse_args`` without an extra_args_provider."""
    parser = parser_class(description=PARSER_DESCRIPTION, allow_abbrev=False)
    built: argparse.ArgumentParser = arguments.add_megatron_arguments(parser)
    return built


def conditional_flags(arguments: types.ModuleType, base: dict[str, Json]) -> list[dict[str, Json]]:
    """Actions that appear only when an optional package's availability switch is on."""
    known = {o for entry in base["actions"] for o in entry["options"]}
    extra: list[dict[str, Json]] = []
    for module_name, attribute, package in FEATURE_SWITCHES:
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        if not hasattr(module, attribute) or getattr(module, attribute):
            continue
        setattr(module, attribute, True)
        try:
            switched = flag_table(build_parser(arguments))
        finally:
            setattr(module, attribute, False)
        for entry in switched["actions"]:
            if not set(entry["options"]) & known:
                extra.append({**entry, "requires": package})
    return extra


def _checker_modules() -> types.ModuleType:
    """The checker's package and tools/mlm_parity.py, from this repository (pure Python, no megatron)."""
    root = Path(__file__).resolve().parent.parent
    if str(root) not in sys.path:
        sys.path.append(str(root))
    spec = importlib.util.spec_from_file_location("mlm_parity", Path(__file__).resolve().parent / "mlm_parity.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["mlm_parity"] = module
    spec.loader.exec_module(module)
    return module


def verify(arguments: types.ModuleType, table: dict[str, Json], label: str) -> dict[str, Json]:
    """Compare the checker's parser, built from ``table``, with the real parser on generated argv."""
    parity = _checker_modules()
    from checks.versions import flag_table_from

    data = {"actions": table["actions"], "versions": {label: list(range(len(table["actions"])))},
            "groups": {label: table["groups"]}, "enums": {label: table["enums"]},
            "converters": {label: table["converters"]}}
    checker_table = flag_table_from(data, label)
    real = build_parser(arguments, parity.quiet_parser_class(argparse.ArgumentParser))
    count, mismatches = parity.compare(checker_table, real)
    return {"cases": count, "mismatches": mismatches}


def extract_from_tree(tree: Path, check: bool = True) -> dict[str, Json]:
    """Child-process entry point: build the parser of the megatron tree at ``tree``."""
    import warnings

    warnings.simplefilter("ignore")
    sys.path[:] = [str(tree)] + [p for p in sys.path[1:] if Path(p or ".").resolve() != Path(__file__).parent.resolve()]
    stubs: list[str] = []
    arguments = import_arguments_module(stubs)
    module_file = Path(arguments.__file__ or "").resolve()
    if not module_file.is_relative_to(tree.resolve()):
        raise RuntimeError(f"imported {module_file}, not a module under {tree}")
    base = flag_table(build_parser(arguments))
    verified = verify(arguments, base, "extracted") if check else {"cases": 0, "mismatches": ["not verified"]}
    return {**base, "conditional": conditional_flags(arguments, base), "stubs": stubs, "verified": verified,
            "python": sys.version.split()[0]}


# --------------------------------------------------------------------------- static method


def _literal(node: ast.expr) -> Json:
    try:
        return to_json(ast.literal_eval(node))
    except (ValueError, SyntaxError, TypeError):
        return {"expr": ast.unparse(node)}


def static_flags(arguments_py: str) -> list[dict[str, Json]]:
    """Actions from literal ``add_argument`` calls; dataclass-generated groups are not seen."""
    actions: list[dict[str, Json]] = []
    seen: set[str] = set()
    for node in ast.walk(ast.parse(arguments_py)):
        if not (
            isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_argument"
        ):
            continue
        options = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
        options = [o for o in options if o.startswith("-")]
        if not options or set(options) & seen:
            continue
        kw = {k.arg: k.value for k in node.keywords if k.arg}
        action = _literal(kw["action"]) if "action" in kw else "store"
        if not isinstance(action, str):
            action = ast.unparse(kw["action"]).split(".")[-1]
        long_opts = [o for o in options if o.startswith("--")] or options
        dest = _literal(kw["dest"]) if "dest" in kw else long_opts[0].lstrip("-").replace("-", "_")
        default: Json = {"store_true": False, "store_false": True}.get(str(action))
        if "default" in kw:
            default = _literal(kw["default"])
        kind = kw.get("type")
        if action == "BooleanOptionalAction":  # argparse adds the --no- twin itself
            options = [x for o in options for x in ([o, "--no-" + o[2:]] if o.startswith("--") else [o])]
        switch = action in ("store_true", "store_false", "store_const", "BooleanOptionalAction")
        entry = {
            "options": options,
            "dest": dest,
            "action": action if action in _STATIC_ACTIONS else str(action),
            "default": default,
            "nargs": _literal(kw["nargs"]) if "nargs" in kw else (0 if switch else None),
            "type": None if kind is None else ast.unparse(kind).split(".")[-1],
            "choices": _literal(kw["choices"]) if "choices" in kw else None,
            "const": _literal(kw["const"]) if "const" in kw else {"store_true": True, "store_false": False}.get(
                str(action)),
            "required": _literal(kw["required"]) if "required" in kw else False,
            "suppressed": "help" in kw and ast.unparse(kw["help"]) == "argparse.SUPPRESS",
        }
        seen.update(options)
        actions.append(compact(entry))
    return actions


# --------------------------------------------------------------------------- driver (parent)


def git(mirror: Path, *args: str, capture: bool = True) -> str:
    result = subprocess.run(["git", "-C", str(mirror), *args], check=True, capture_output=capture, text=True)
    return result.stdout.strip() if capture else ""


def unpack_megatron(mirror: Path, sha: str, dest: Path) -> None:
    """Unpack ``megatron/`` of commit ``sha`` into ``dest``."""
    with tempfile.TemporaryFile() as archive:
        subprocess.run(
            ["git", "-C", str(mirror), "archive", "--format=tar", sha, "megatron"], check=True, stdout=archive
        )
        archive.seek(0)
        with tarfile.open(fileobj=archive) as tar:
            if hasattr(tarfile, "data_filter"):  # Python >= 3.10.12 / 3.11.4
                tar.extractall(dest, filter="data")
            else:
                tar.extractall(dest)  # the archive is written by git from the mirror


def run_child(python: str, tree: Path, scratch: Path) -> dict[str, Json]:
    env = {k: v for k, v in os.environ.items() if k not in SCRUBBED_ENV and k != "PYTHONPATH"}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    result = subprocess.run(
        [python, str(Path(__file__).resolve()), "--extract-tree", str(tree)],
        cwd=scratch,
        env=env,
        check=False,
        capture_output=True,
        text=True,
    )
    if result.returncode != 0:
        tail = "\n".join(result.stderr.strip().splitlines()[-15:])
        raise RuntimeError(f"parser build failed for {tree}:\n{tail}")
    extracted: dict[str, Json] = json.loads(result.stdout.strip().splitlines()[-1])
    return extracted


def extract_version(mirror: Path, label: str, ref: str, python: str, allow_static: bool) -> dict[str, Json]:
    sha = git(mirror, "rev-parse", "--verify", f"{ref}^{{commit}}")
    with tempfile.TemporaryDirectory(prefix=f"mlm_flags_{label}_") as scratch_dir:
        scratch = Path(scratch_dir)
        tree = scratch / "src"
        tree.mkdir()
        unpack_megatron(mirror, sha, tree)
        try:
            child = run_child(python, tree, scratch)
            return {"sha": sha, "method": "parser", **child, "note": None}
        except RuntimeError as error:
            if not allow_static:
                raise
            print(f"[{label}] {error}\n[{label}] falling back to static parsing", file=sys.stderr)
    source = git(mirror, "show", f"{sha}:megatron/training/arguments.py")
    note = (
        "static: literal add_argument calls in megatron/training/arguments.py only; "
        "flags generated from config dataclasses (ArgumentGroupFactory, megatron/training/argument_utils.py) "
        'and computed defaults are missing or given as {"expr": ...}; not verified against the parser'
    )
    return {"sha": sha, "method": "static", "actions": static_flags(source), "groups": [], "enums": {},
            "converters": {}, "conditional": [], "stubs": [], "note": note,
            "verified": {"cases": 0, "mismatches": ["static extraction: not verified"]}}


def load_existing(path: Path | None) -> dict[str, Json]:
    if path is None or not path.exists():
        return {}
    data = json.loads(path.read_text())
    return data if data.get("source") == SOURCE and data.get("schema") == SCHEMA else {}


SCHEMA = 2
_PER_VERSION = ("refs", "method", "stubs", "notes", "enums", "converters", "verified", "python")


def _expand(data: dict[str, Json], label: str) -> dict[str, Json]:
    """One version of an assembled file back in the shape ``extract_version`` returns."""
    pool = data["actions"]
    return {
        "sha": data["refs"][label], "method": data["method"][label], "stubs": data["stubs"][label],
        "note": data["notes"].get(label), "enums": data["enums"][label], "converters": data["converters"][label],
        "verified": data["verified"][label], "python": data["python"].get(label),
        "actions": [pool[i] for i in data["versions"][label]],
        "groups": [[data["versions"][label].index(i) for i in g] for g in data["groups"][label]],
        "conditional": [{**pool[i], "requires": req} for i, req in data["conditional"][label]],
    }


def assemble(results: dict[str, dict[str, Json]], previous: dict[str, Json]) -> dict[str, Json]:
    """Pool identical actions across versions (most flags do not change between releases)."""
    merged = {label: _expand(previous, label) for label in previous.get("versions", {}) if label not in results}
    merged.update(results)
    order = [label for label in VERSION_REFS if label in merged] + sorted(set(merged) - set(VERSION_REFS))
    pool: list[dict[str, Json]] = []
    where: dict[str, int] = {}

    def intern(entry: dict[str, Json]) -> int:
        key = json.dumps(entry, sort_keys=True)
        if key not in where:
            where[key] = len(pool)
            pool.append(entry)
        return where[key]

    out: dict[str, Json] = {"source": SOURCE, "schema": SCHEMA, "actions": pool, "versions": {}, "groups": {},
                            "conditional": {}, **{s: {} for s in _PER_VERSION}}
    for label in order:
        result = merged[label]
        indices = [intern(entry) for entry in result["actions"]]
        out["versions"][label] = indices
        out["groups"][label] = [[indices[i] for i in group] for group in result["groups"]]
        out["conditional"][label] = [
            [intern({k: v for k, v in entry.items() if k != "requires"}), entry["requires"]]
            for entry in result["conditional"]]
        out["refs"][label] = result["sha"]
        out["method"][label] = result["method"]
        out["stubs"][label] = result["stubs"]
        out["enums"][label] = result["enums"]
        out["converters"][label] = result["converters"]
        out["verified"][label] = result["verified"]
        if result.get("python"):
            out["python"][label] = result["python"]
        if result["note"]:
            out["notes"][label] = result["note"]
    return out


def parse_cli(argv: Sequence[str] | None) -> argparse.Namespace:
    cli = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    cli.add_argument("--mirror", type=Path, help="Megatron-LM git repository (bare is fine)")
    pick = cli.add_mutually_exclusive_group()
    pick.add_argument("--all", action="store_true", help="every version in VERSION_REFS")
    pick.add_argument(
        "--version", action="append", default=[], choices=sorted(VERSION_REFS), help="a known version (repeatable)"
    )
    pick.add_argument(
        "--ref", action="append", default=[], metavar="LABEL=REF", help="any git ref under a label (repeatable)"
    )
    cli.add_argument(
        "--output",
        "-o",
        type=Path,
        help="JSON file to write; versions not extracted now are kept from it (default: stdout)",
    )
    cli.add_argument(
        "--python", default=sys.executable, help="interpreter that imports the megatron tree (needs torch)"
    )
    cli.add_argument("--no-static", action="store_true", help="fail instead of falling back to static parsing")
    cli.add_argument("--extract-tree", type=Path, help=argparse.SUPPRESS)
    args = cli.parse_args(argv)
    if args.extract_tree is None and args.mirror is None:
        cli.error("--mirror is required")
    return args


def selected_refs(args: argparse.Namespace) -> dict[str, str]:
    if args.ref:
        pairs = [item.split("=", 1) for item in args.ref]
        if any(len(p) != 2 or not all(p) for p in pairs):
            raise SystemExit("--ref takes LABEL=REF")
        return {label: ref for label, ref in pairs}
    if args.version:
        return {v: VERSION_REFS[v] for v in args.version}
    return dict(VERSION_REFS)


def dump(data: dict[str, Json]) -> str:
    return json.dumps(data, separators=(",", ":"), sort_keys=True, allow_nan=False)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_cli(argv)
    if args.extract_tree is not None:
        print(dump(extract_from_tree(args.extract_tree)))
        return 0
    refs = selected_refs(args)
    results: dict[str, dict[str, Json]] = {}
    failed = False
    for label, ref in refs.items():
        result = extract_version(args.mirror, label, ref, args.python, not args.no_static)
        stubs = ", ".join(result["stubs"]) or "none"
        verified = result["verified"]
        flags = sum(len(a["options"]) for a in result["actions"])
        print(
            f"[{label}] {ref} {result['sha'][:12]}: {flags} flags ({len(result['actions'])} actions) via "
            f"{result['method']}, {len(result['conditional'])} conditional, stubs: {stubs}; checker parser "
            f"compared on {verified['cases']} argv, {len(verified['mismatches'])} mismatch(es)",
            file=sys.stderr,
        )
        for mismatch in verified["mismatches"][:20]:
            print(f"[{label}]   {mismatch}", file=sys.stderr)
        failed = failed or (bool(verified["mismatches"]) and result["method"] == "parser")
        results[label] = result
    previous = {} if args.all else load_existing(args.output)
    text = dump(assemble(results, previous))
    if args.output is None:
        print(text)
    else:
        args.output.write_text(text + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
