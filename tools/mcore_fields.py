"""Extract the dataclass fields of megatron-core's config classes from a source tree.

Maintainer tool, not part of the checker: it reads a Megatron-LM git checkout
(``git show REF:PATH``) or an unpacked megatron-core wheel, parses the config
modules with :mod:`ast` (nothing is imported or executed), and prints the
field table that ``checks/data/mcore_fields.json`` holds for one version.

Usage (regenerate every profile after an upstream release; see reference/updating.md). The output is
exactly the committed file (:func:`render`: one-space indent, sorted keys, a final newline), so this is a
byte-for-byte regeneration; ``python tools/generate.py`` runs it with the other generators:

    python tools/mcore_fields.py --git /path/to/Megatron-LM --all > checks/data/mcore_fields.json

Compare one version of the table with an installed or unpacked wheel (exit 1 on a difference; what
``tools/generate.py --check`` does offline with the installed megatron-core):

    python tools/mcore_fields.py --compare-wheel /path/to/site-packages --version 0.16.1

Each field is recorded as ``[annotation, default]`` where ``default`` is a JSON
literal when the source default is a literal expression, ``{"factory": "list"}``
for ``field(default_factory=list)``, ``{"expr": "<source>"}`` for anything
else, and ``{"required": true}`` when the field has no default.
"""

from __future__ import annotations

import argparse
import ast
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

# (section, class name, module path): the classes whose fields the checker knows.
CLASSES: tuple[tuple[str, str, str], ...] = (
    ("model", "ModelParallelConfig", "megatron/core/model_parallel_config.py"),
    ("model", "TransformerConfig", "megatron/core/transformer/transformer_config.py"),
    ("optimizer", "OptimizerConfig", "megatron/core/optimizer/optimizer_config.py"),
    ("ddp", "DistributedDataParallelConfig", "megatron/core/distributed/distributed_data_parallel_config.py"),
)

# The versions the checker has profiles for, and where each one's source lives.
# 0.19.2 has no git tag; tag core_v0.19.0 (5be96267) carries config files that are
# byte-identical to the 0.19.2 wheel (``tools/mcore_fields.py --compare-wheel DIR --version 0.19.2``
# compares the fields).
VERSION_REFS: dict[str, str] = {
    "0.14.0": "core_v0.14.0",
    "0.15.3": "core_v0.15.3",
    "0.16.1": "core_v0.16.1",
    "0.17.1": "core_v0.17.1",
    "0.18.2": "core_v0.18.2",
    "0.19.2": "core_v0.19.0",
    # What the frameworks install (main@<commit>, oldest first): NVIDIA-NeMo/RL@7ea279ab pins Megatron-Bridge
    # 8c46dc42, whose 3rdparty/Megatron-LM submodule is 14346b65; NVIDIA-NeMo/Megatron-Bridge@067f987d pins
    # 2a75ac12 (its 3rdparty/Megatron-LM submodule). Both report megatron-core 0.20.0 (package_info.py).
    # NeMo-RL 0.4.0 pins af73aa2c (0.15.0rc3), 0.6.0 pins d30c3ae5 (0.18.0): checks/data/framework_pins.json
    "main@af73aa2c": "af73aa2cebf94a0bee5ea6dda2614ad989faffae",
    "main@d30c3ae5": "d30c3ae5469fe3f6a64d4fd2e63b6e7f7844ea81",
    "main@14346b65": "14346b65a2d0790e451919858f7771078105c5f0",
    "main@2a75ac12": "2a75ac12c54ba6a42b34024756820bf819a2e25f",
    "main": "d98e8a64ddf34856e74b24714e3bedb2f5a39553",
}

_DTYPE_NAMES = {"torch.float32": "fp32", "torch.float16": "fp16", "torch.bfloat16": "bf16"}


def _default(node: ast.expr | None) -> Any:
    if node is None:
        return {"required": True}
    if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "field":
        for kw in node.keywords:
            if kw.arg == "default":
                return _default(kw.value)
            if kw.arg == "default_factory":
                if isinstance(kw.value, ast.Name):
                    return {"factory": kw.value.id}
                if isinstance(kw.value, ast.Lambda):
                    return _default(kw.value.body)
                return {"expr": ast.unparse(kw.value)}
        return {"required": True}
    source = ast.unparse(node)
    if source in _DTYPE_NAMES:
        return _DTYPE_NAMES[source]
    try:
        value = ast.literal_eval(node)
    except ValueError:
        try:  # simple arithmetic such as 1024 * 1024
            value = eval(compile(ast.Expression(node), "<default>", "eval"), {"__builtins__": {}})
        except Exception:
            return {"expr": source}
    if isinstance(value, (bool, int, float, str, list, type(None))):
        return value
    return {"expr": source}


def class_fields(source: str, class_name: str) -> dict[str, list[Any]]:
    """Return ``{field: [annotation, default]}`` for one dataclass in ``source``."""
    tree = ast.parse(source)
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == class_name:
            out: dict[str, list[Any]] = {}
            for stmt in node.body:
                if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                    annotation = ast.unparse(stmt.annotation)
                    if annotation.startswith("ClassVar"):
                        continue
                    out[stmt.target.id] = [annotation, _default(stmt.value)]
            return out
    raise SystemExit(f"class {class_name} not found")


def read_git(repo: Path, ref: str, path: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), "show", f"{ref}:{path}"],
        check=True, capture_output=True, text=True,
    ).stdout


def list_git(repo: Path, ref: str, path: str) -> list[str]:
    """The names in a directory of ``ref`` (not recursive)."""
    return subprocess.run(
        ["git", "-C", str(repo), "ls-tree", "--name-only", f"{ref}:{path}"],
        check=True, capture_output=True, text=True,
    ).stdout.split()


def profile(read: Any) -> dict[str, dict[str, list[Any]]]:
    sections: dict[str, dict[str, list[Any]]] = {}
    for section, class_name, path in CLASSES:
        sections.setdefault(section, {}).update(class_fields(read(path), class_name))
    return sections


def build_all(git: Path) -> dict[str, Any]:
    """The whole table (``checks/data/mcore_fields.json``): every version in VERSION_REFS, read from ``git``."""
    return {
        "source": "NVIDIA/Megatron-LM",
        "refs": {v: subprocess.run(["git", "-C", str(git), "rev-parse", f"{r}^{{commit}}"],
                                   check=True, capture_output=True, text=True).stdout.strip()
                 for v, r in VERSION_REFS.items()},
        "versions": {v: profile(lambda p, r=r: read_git(git, r, p)) for v, r in VERSION_REFS.items()},
    }


def render(data: dict[str, Any]) -> str:
    """The file's text: what ``checks/data/mcore_fields.json`` holds, byte for byte."""
    return json.dumps(data, indent=1, sort_keys=True) + "\n"


def wheel_differences(table: dict[str, Any], wheel_dir: Path, version: str) -> list[str]:
    """Where ``table``'s ``version`` differs from the config classes in ``wheel_dir`` (a site-packages or an
    unpacked wheel); [] when they agree."""
    found = profile(lambda p: (wheel_dir / p).read_text())
    stored = table["versions"].get(version)
    if stored is None:
        return [f"the table has no version {version}"]
    return [f"{version} {section}.{name}: table {stored.get(section, {}).get(name)}, wheel "
            f"{found.get(section, {}).get(name)}"
            for section in sorted(set(found) | set(stored))
            for name in sorted(set(found.get(section, {})) | set(stored.get(section, {})))
            if found.get(section, {}).get(name) != stored.get(section, {}).get(name)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--git", type=Path, help="Megatron-LM git directory")
    parser.add_argument("--wheel-dir", type=Path, help="unpacked megatron-core wheel")
    parser.add_argument("--ref", help="git ref (with --git)")
    parser.add_argument("--all", action="store_true", help="every version in VERSION_REFS")
    parser.add_argument("--compare-wheel", type=Path, metavar="DIR",
                        help="compare --version of the table (--table) with the wheel installed or unpacked in DIR")
    parser.add_argument("--version", help="with --compare-wheel: the table's version label, e.g. 0.16.1")
    parser.add_argument("--table", type=Path, default=Path(__file__).resolve().parent.parent / "checks" / "data"
                        / "mcore_fields.json", help="with --compare-wheel (default: %(default)s)")
    args = parser.parse_args(argv)
    result: dict[str, Any]
    if args.compare_wheel:
        if not args.version:
            parser.error("--compare-wheel needs --version")
        differences = wheel_differences(json.loads(args.table.read_text()), args.compare_wheel, args.version)
        print("\n".join(differences) or f"{args.version}: the table and the wheel agree")
        return 1 if differences else 0
    if args.all:
        sys.stdout.write(render(build_all(args.git)))
        return 0
    if args.wheel_dir:
        result = profile(lambda p: (args.wheel_dir / p).read_text())
    else:
        result = profile(lambda p: read_git(args.git, args.ref, p))
    sys.stdout.write(render(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
