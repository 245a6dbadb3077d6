"""Derive every upstream anchor, behaviour switch and offload-module set from upstream source: checks/data/anchors.json.

Maintainer tool, not part of the checker. For each check in ``checks/rules/upstream.py`` and each version the
checker knows (megatron-core labels for megatron-core and Megatron-LM checks, NeMo-RL releases for NeMo-RL's,
the one pinned commit for a check marked ``fixed``), it reads the check's file at that version's commit from a
git directory, parses it with ``ast`` (nothing is imported) and finds the ``raise``/``assert`` whose message
the check's template matches (placeholders match any text), or, for a check with ``evidence``, the statement
holding that code. One statement: that is the anchor. None: the version does not perform the check (no
anchor). More than one: the check's identity is ambiguous (give it ``within`` or ``evidence``) and the tool
fails. It derives the behaviour switches (``FEATURES`` below), the ``allowed_modules`` set of
``TransformerConfig.__post_init__`` and each main-branch label's ``package_info.py`` version (where it sorts
among the releases: ``checks.versions.version_key``) the same way.

Usage (see reference/updating.md):

    python tools/verify_anchors.py --git /path/to/Megatron-LM \\
        --repo NVIDIA-NeMo/RL=/path/to/RL --repo NVIDIA-NeMo/Megatron-Bridge=/path/to/Megatron-Bridge [--write]

Without ``--write`` it compares what it derives with ``checks/data/anchors.json`` and exits 1 on a difference;
with ``--write`` it rewrites the file. Repositories not given (Transformer Engine has no mirror here) keep the
entries the file has. ``render_anchors`` is the pure function behind both (``tools/generate.py`` calls it).
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from checks.anchors import FIXED, UpstreamCheck
from checks.rules import upstream as up
from checks.versions import NEMO_RL_VERSIONS, VERSIONS, anchor_table, nemo_rl_commit, profile, version_key

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "checks" / "data" / "anchors.json"
MLM = "NVIDIA/Megatron-LM"
NEMO_RL = "NVIDIA-NeMo/RL"
TC = "megatron/core/transformer/transformer_config.py"


def upstream_checks() -> dict[str, UpstreamCheck]:
    """Every check ``checks/rules/upstream.py`` defines, by key."""
    found: dict[str, UpstreamCheck] = {}
    for value in vars(up).values():
        for check in (value.values() if isinstance(value, dict) else (value,)):
            if isinstance(check, UpstreamCheck):
                found[check.key] = check
    return found


# --- reading source -------------------------------------------------------------------------------

class Source:
    """A file at a commit, parsed once; its statements are listed once."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.tree = ast.parse(text)
        self.lines = text.splitlines(keepends=True)
        self._located: list[Located] | None = None

    @property
    def located(self) -> list[Located]:
        if self._located is None:
            self._located = list(_walk(self.tree))
        return self._located

    def segment(self, node: ast.stmt) -> str:
        """The statement's source (``ast.get_source_segment`` re-splits the whole file on every call)."""
        first, last = node.lineno - 1, (node.end_lineno or node.lineno) - 1
        if first == last:
            return self.lines[first][node.col_offset:node.end_col_offset]
        return "".join([self.lines[first][node.col_offset:], *self.lines[first + 1:last],
                        self.lines[last][:node.end_col_offset]])


Reader = Callable[[str, str, str], Source | None]  # (repository, commit, path) -> the file, or None


def git_reader(repos: Mapping[str, Path]) -> Reader:
    @cache
    def read(repo: str, commit: str, path: str) -> Source | None:
        done = subprocess.run(["git", "-C", str(repos[repo]), "show", f"{commit}:{path}"], capture_output=True,
                              text=True)
        if done.returncode != 0:
            if "does not exist" in done.stderr or "exists on disk, but not in" in done.stderr:
                return None  # the file is not in that version
            raise SystemExit(f"git show {commit}:{path} in {repos[repo]}: {done.stderr.strip()}")
        return Source(done.stdout)
    return read


@dataclass(frozen=True)
class Located:
    node: ast.stmt
    function: str | None  # the innermost enclosing def
    guards: tuple[ast.expr, ...]  # the tests of the enclosing ``if`` statements, outermost first


def _walk(node: ast.AST, function: str | None = None, guards: tuple[ast.expr, ...] = ()) -> Iterator[Located]:
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield from _walk(child, child.name, ())
        elif isinstance(child, ast.If):
            yield Located(child, function, guards)
            for stmt in child.body:
                yield from _walk_one(stmt, function, guards + (child.test,))
            for stmt in child.orelse:
                yield from _walk_one(stmt, function, guards)
        else:  # another statement, or what holds statements (an except handler, a match case)
            if isinstance(child, ast.stmt):
                yield Located(child, function, guards)
            yield from _walk(child, function, guards)


def _walk_one(stmt: ast.stmt, function: str | None, guards: tuple[ast.expr, ...]) -> Iterator[Located]:
    holder = ast.Module(body=[stmt], type_ignores=[])
    yield from _walk(holder, function, guards)


@cache
def _message_text(node: ast.stmt) -> str | None:
    """The static text of a raise's or assert's message; each formatted value becomes a NUL."""
    expr = node.msg if isinstance(node, ast.Assert) else node.exc if isinstance(node, ast.Raise) else None
    if expr is None:
        return None
    parts: list[str] = []

    def collect(n: ast.AST) -> None:
        if isinstance(n, ast.Constant) and isinstance(n.value, str):
            parts.append(n.value)
        elif isinstance(n, ast.FormattedValue):
            parts.append("\0")
        else:
            for c in ast.iter_child_nodes(n):
                collect(c)
    collect(expr)
    return " ".join("".join(parts).split())


@cache
def _template(message: str) -> re.Pattern[str]:
    pieces = re.split(r"\{[^}]*\}", message)
    return re.compile(".*".join(re.escape(" ".join(p.split())) for p in pieces), re.S)


def _squeeze(text: str) -> str:
    return "".join(text.split())


_COMPOUND = (ast.If, ast.For, ast.While, ast.With, ast.Try, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def _matches(located: Located, source: Source, check: UpstreamCheck) -> bool:
    node = located.node
    if check.within is not None and located.function != check.within:
        return False
    if check.evidence is not None:
        if isinstance(node, _COMPOUND):
            return False
        pattern = ".*".join(re.escape(_squeeze(p)) for p in check.evidence.split("..."))
        return re.search(pattern, _squeeze(source.segment(node))) is not None
    if not isinstance(node, (ast.Raise, ast.Assert)):
        return False
    if check.message is None:
        return isinstance(node, ast.Assert) and node.msg is None
    text = _message_text(node)
    return text is not None and _template(check.message).search(text) is not None


def locate(read: Reader, repo: str, commit: str, check: UpstreamCheck) -> list[tuple[str, Located]]:
    """Every statement in the check's file(s) at ``commit`` that carries the check."""
    hits: list[tuple[str, Located]] = []
    for path in check.paths:
        source = read(repo, commit, path)
        if source is not None:
            hits += [(path, loc) for loc in source.located if _matches(loc, source, check)]
    return hits


# --- what is derived ------------------------------------------------------------------------------

def _targets(check: UpstreamCheck) -> list[tuple[str, str, str]]:
    """(label, repository, commit) of every version the check is looked for in."""
    if check.fixed is not None:
        repo, _, commit = check.fixed.partition("@")
        return [(FIXED, repo, commit)]
    if check.project == "nemo-rl":
        return [(v, NEMO_RL, nemo_rl_commit(v)) for v in NEMO_RL_VERSIONS]
    return [(v, MLM, profile(v).commit) for v in VERSIONS if check.concerns(v)]


class Ambiguous(Exception):
    pass


def derive_anchors(read: Reader, given: frozenset[str], previous: Mapping[str, Any]) -> dict[str, dict[str, str]]:
    anchors: dict[str, dict[str, str]] = {}
    problems: list[str] = []
    for key, check in sorted(upstream_checks().items()):
        lines: dict[str, str] = {}
        for label, repo, commit in _targets(check):
            if repo not in given:  # no git directory for it: keep what the data says
                kept = previous.get(key, {}).get(label)
                if kept is not None:
                    lines[label] = kept
                continue
            hits = locate(read, repo, commit, check)
            if len(hits) > 1:
                problems.append(f"{key} {label} {repo}@{commit[:8]}: {len(hits)} statements carry it, at "
                                f"{[f'{p}:{h.node.lineno}' for p, h in hits]}; give it `within` or `evidence`")
            elif hits:
                path, hit = hits[0]
                lines[label] = f"{path}:{hit.node.lineno}"
        anchors[key] = lines
    if problems:
        raise Ambiguous("\n".join(problems))
    return anchors


@dataclass(frozen=True)
class Feature:
    """A behaviour switch: what it means and how it is read from a version's source."""

    about: str
    derived: str  # how, in words (written into the data beside the answer)
    test: Callable[[Reader, str, Mapping[str, Mapping[str, str]]], bool]  # (read, version, anchors) -> holds


def _anchored(key: str) -> Callable[[Reader, str, Mapping[str, Mapping[str, str]]], bool]:
    return lambda read, version, anchors: version in anchors.get(key, {})


def _reads_attribute(path: str, attribute: str) -> Callable[[Reader, str, Mapping[str, Mapping[str, str]]], bool]:
    def test(read: Reader, version: str, anchors: Mapping[str, Mapping[str, str]]) -> bool:
        source = read(MLM, profile(version).commit, path)
        return source is not None and any(
            isinstance(n, ast.Attribute) and n.attr == attribute and isinstance(n.ctx, ast.Load)
            and isinstance(n.value, ast.Name) and n.value.id == "self" for n in ast.walk(source.tree))
    return test


def _guard_names(key: str, name: str) -> Callable[[Reader, str, Mapping[str, Mapping[str, str]]], bool]:
    def test(read: Reader, version: str, anchors: Mapping[str, Mapping[str, str]]) -> bool:
        where = anchors.get(key, {}).get(version)
        if where is None:
            return False
        path, _, line = where.rpartition(":")
        source = read(MLM, profile(version).commit, path)
        assert source is not None
        located = next(loc for loc in source.located if loc.node.lineno == int(line)
                       and isinstance(loc.node, (ast.Raise, ast.Assert)))
        return any(isinstance(n, ast.Attribute) and n.attr == name for g in located.guards for n in ast.walk(g))
    return test


# megatron-core behaviour switches (checks.versions.has_feature)
FEATURES: dict[str, Feature] = {
    "cuda_graph_impl_offload_check": Feature(
        "the CPU-offloading CUDA-graph check (C4_CUDA_GRAPHS) tests cuda_graph_impl, not only enable_cuda_graph",
        "an `if` around C4_CUDA_GRAPHS's raise reads cuda_graph_impl", _guard_names("C4_CUDA_GRAPHS",
                                                                                   "cuda_graph_impl")),
    "gdp_qkv_recompute_check": Feature(
        "TransformerConfig refuses gdp_qkv offloading with gdp_in_proj recompute", "F5_GDP_QKV has an anchor",
        _anchored("F5_GDP_QKV")),
    "mhc_recompute_check": Feature(
        "TransformerConfig refuses 'mhc' recompute with fine-grained offloading", "F13_MHC has an anchor",
        _anchored("F13_MHC")),
    "pao_distopt_in_factory": Feature(
        "the precision-aware optimizer's distributed-optimizer check is in the optimizer factory "
        "(get_megatron_optimizer), not in OptimizerConfig", "I4_PAO_DISTOPT has an anchor",
        _anchored("I4_PAO_DISTOPT")),
    "pin_cpu_params_honoured": Feature(
        "HybridDeviceOptimizer reads pin_cpu_params (before, the host masters are never pinned whatever it says)",
        "megatron/core/optimizer/cpu_offloading/hybrid_optimizer.py reads self.pin_cpu_params",
        _reads_attribute("megatron/core/optimizer/cpu_offloading/hybrid_optimizer.py", "pin_cpu_params")),
}

# NeMo-RL behaviour switches (checks.versions.nemo_rl_has_feature)
NEMO_RL_FEATURES: dict[str, Feature] = {
    "offload_fraction_must_be_one": Feature(
        "optimizer offloading accepts only optimizer_offload_fraction=1.0 (before NVIDIA-NeMo/RL PR #3628)",
        "NRL_LEGACY_FRACTION has an anchor", _anchored("NRL_LEGACY_FRACTION")),
}


def _switches(features: Mapping[str, Feature], labels: tuple[str, ...], read: Reader,
              anchors: Mapping[str, Mapping[str, str]]) -> dict[str, Any]:
    return {name: {"about": f.about, "derived": f.derived, "versions": {v: f.test(read, v, anchors) for v in labels}}
            for name, f in features.items()}


def allowed_offload_modules(source: Source) -> list[str] | None:
    """The set ``TransformerConfig.__post_init__`` checks ``offload_modules`` against (``set(self.offload_modules)
    - NAME``, NAME a set literal assigned before it); None where there is no such check."""
    statements = [loc.node for loc in source.located if loc.function == "__post_init__"]
    for node in statements:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.BinOp) and isinstance(node.value.op, ast.Sub) \
                and _squeeze(ast.unparse(node.value.left)) == "set(self.offload_modules)" \
                and isinstance(node.value.right, ast.Name):
            name = node.value.right.id
            assigned = [s for s in statements if isinstance(s, ast.Assign) and s.lineno < node.lineno
                        and any(isinstance(t, ast.Name) and t.id == name for t in s.targets)]
            if not assigned or not isinstance(assigned[-1].value, (ast.Set, ast.List, ast.Tuple)):
                raise SystemExit(f"{name}, the offload_modules check's set, is no longer a literal")
            return sorted(ast.literal_eval(e) for e in assigned[-1].value.elts)
    return None


def package_version(read: Reader, commit: str) -> str:
    """``MAJOR.MINOR.PATCH`` (and ``PRE_RELEASE``) of ``megatron/core/package_info.py`` at ``commit``: where a
    main-branch commit sorts among the releases."""
    source = read(MLM, commit, "megatron/core/package_info.py")
    if source is None:
        raise SystemExit(f"{commit[:8]} has no megatron/core/package_info.py")
    values = {t.id: node.value.value for node in source.tree.body if isinstance(node, ast.Assign)
              and isinstance(node.value, ast.Constant) for t in node.targets if isinstance(t, ast.Name)}
    return f"{values['MAJOR']}.{values['MINOR']}.{values['PATCH']}{values.get('PRE_RELEASE') or ''}"


def derive(read: Reader, given: frozenset[str], previous: Mapping[str, Any]) -> dict[str, Any]:
    if MLM in given:  # a label new to the data sorts by its package version: the checker needs it before the anchors
        fresh = {v: package_version(read, profile(v).commit) for v in VERSIONS if "@" in v or v == "main"}
        anchor_table().setdefault("package_versions", {}).update(fresh)
        version_key.cache_clear()
    anchors = derive_anchors(read, given, previous.get("anchors", {}))
    data: dict[str, Any] = {
        "about": "Generated by tools/verify_anchors.py --write from the upstream git directories; do not edit.",
        "anchors": anchors,
    }
    if MLM in given:
        data["package_versions"] = fresh
        data["features"] = _switches(FEATURES, VERSIONS, read, anchors)
        modules: dict[str, list[str]] = {}
        for v in VERSIONS:
            source = read(MLM, profile(v).commit, TC)
            found = allowed_offload_modules(source) if source is not None else None
            if found is not None:
                modules[v] = found
        data["offload_modules"] = modules
    else:
        data["package_versions"] = previous.get("package_versions", {})
        data["features"] = previous.get("features", {})
        data["offload_modules"] = previous.get("offload_modules", {})
    data["nemo_rl_features"] = _switches(NEMO_RL_FEATURES, NEMO_RL_VERSIONS, read, anchors) if NEMO_RL in given \
        else previous.get("nemo_rl_features", {})
    return data


def canonical(data: Mapping[str, Any]) -> str:
    """The one text form of the data: sorted keys, one-space indent, a final newline."""
    return json.dumps(data, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def render_anchors(repos: Mapping[str, Path], previous: Mapping[str, Any] | None = None) -> str:
    """The text of ``checks/data/anchors.json`` derived from the git directories ``repos`` (repository name, e.g.
    ``NVIDIA/Megatron-LM``, -> path). Entries of a repository not given are taken from ``previous`` (by default
    the committed file). Raises :class:`Ambiguous` when a check matches more than one statement."""
    if previous is None:
        previous = json.loads(DATA.read_text(encoding="utf-8")) if DATA.exists() else {}
    return canonical(derive(git_reader(repos), frozenset(repos), previous))


def _differences(old: Mapping[str, Any], new: Mapping[str, Any]) -> Iterator[str]:
    for key in sorted(set(old.get("anchors", {})) | set(new.get("anchors", {}))):
        a, b = old.get("anchors", {}).get(key, {}), new.get("anchors", {}).get(key, {})
        for label in sorted(set(a) | set(b)):
            if a.get(label) != b.get(label):
                yield f"{key} {label}: data has {a.get(label)}, source has {b.get(label)}"
    for part in ("features", "nemo_rl_features", "offload_modules"):
        if old.get(part) != new.get(part):
            yield f"{part} differ"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--git", type=Path, required=True, help="NVIDIA/Megatron-LM git directory")
    parser.add_argument("--repo", action="append", default=[], metavar="OWNER/NAME=PATH",
                        help="another repository's git directory, e.g. NVIDIA-NeMo/RL=/path (repeatable)")
    parser.add_argument("--write", action="store_true", help=f"rewrite {DATA.relative_to(ROOT)}")
    args = parser.parse_args(argv)
    repos = {MLM: args.git}
    for item in args.repo:
        name, _, path = item.partition("=")
        repos[name] = Path(path)
    old_text = DATA.read_text(encoding="utf-8") if DATA.exists() else "{}"
    try:
        text = render_anchors(repos, json.loads(old_text))
    except Ambiguous as error:
        print(error, file=sys.stderr)
        return 1
    if args.write:
        DATA.write_text(text, encoding="utf-8")
        print(f"wrote {DATA.relative_to(ROOT)}")
        return 0
    problems = list(_differences(json.loads(old_text), json.loads(text)))
    if text != old_text and not problems:
        problems.append("the file is not in canonical form (rerun with --write)")
    for line in problems:
        print(line)
    print(f"{len(problems)} difference(s) between {DATA.relative_to(ROOT)} and the source")
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
