"""Check that every upstream anchor points at the statement that raises the check's message.

Maintainer tool, not part of the checker. For each megatron-core/Megatron-LM check in
``checks/rules/upstream.py`` and each version it is anchored in, it reads the file at that
version's commit from a Megatron-LM git checkout, finds the ``raise``/``assert`` statement that
starts at the anchored line (with ``ast``; nothing is imported) and confirms that the statement
carries the check's message (or, for a message of None, that it is a bare ``assert``). When it
does not, it prints where the message is now.

Usage:

    python tools/verify_anchors.py --git /path/to/Megatron-LM \
        --repo NVIDIA-NeMo/RL=/path/to/RL --repo NVIDIA-NeMo/Megatron-Bridge=/path/to/Megatron-Bridge
"""

from __future__ import annotations

import argparse
import ast
import re
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from checks.anchors import UpstreamCheck
from checks.rules import ALL_RULES
from checks.versions import nemo_rl_commit, profile


def _statements(source: str, any_statement: bool = False) -> dict[int, ast.stmt]:
    kinds = ast.stmt if any_statement else (ast.Raise, ast.Assert)
    return {node.lineno: node for node in ast.walk(ast.parse(source)) if isinstance(node, kinds)}


def _static_text(message: str | None) -> str:
    return "" if message is None else message.split("{")[0][:40]


def _words(message: str) -> set[str]:
    """The long words of a message template, placeholders removed (they are formatted differently upstream)."""
    return set(re.findall(r"[A-Za-z_]{6,}", re.sub(r"\{[^}]*\}", " ", message)))


def _carries(node: ast.stmt, source: str, check: UpstreamCheck) -> bool:
    """Whether the statement is a bare assert (message None) or its text holds every long word of the message."""
    if check.evidence is not None:
        return check.evidence.replace(" ", "") in "".join((ast.get_source_segment(source, node) or "").split())
    if check.message is None:
        return isinstance(node, ast.Assert) and node.msg is None
    segment = ast.get_source_segment(source, node) or ""
    return _words(check.message) <= set(re.findall(r"[A-Za-z_]{6,}", segment))


def _anchors(check: UpstreamCheck) -> list[tuple[str, str, str, str]]:
    """(label, repository, commit, path:line) for every anchor of a check."""
    if check.fixed is not None:
        repo_commit, _, where = check.fixed.partition(":")
        repo, _, commit = repo_commit.partition("@")
        return [("fixed", repo, commit, where)]
    if check.project == "nemo-rl":
        return [(v, "NVIDIA-NeMo/RL", nemo_rl_commit(v), where) for v, where in check.lines.items()]
    return [(v, "NVIDIA/Megatron-LM", profile(v).commit, where) for v, where in check.lines.items()]


def verify(repos: dict[str, Path]) -> int:
    problems = checked = 0
    checks = {id(c): c for rule in ALL_RULES for c in rule.upstream}
    for check in checks.values():
        for label, repo, commit, where in _anchors(check):
            if repo not in repos:
                print(f"skipped {repo}@{commit}:{where} (no checkout given with --repo {repo}=PATH)")
                continue
            checked += 1
            path, _, line = where.rpartition(":")
            source = subprocess.run(["git", "-C", str(repos[repo]), "show", f"{commit}:{path}"], check=True,
                                    capture_output=True, text=True).stdout
            statements = _statements(source, any_statement=check.evidence is not None)
            node = statements.get(int(line))
            if node is not None and _carries(node, source, check):
                continue
            problems += 1
            now = [n.lineno for n in statements.values() if _carries(n, source, check)]
            print(f"{label} {repo}:{where}: no statement carrying {_static_text(check.message)!r} here; "
                  f"found at {now}")
    print(f"{problems} anchor problem(s) in {checked} anchors checked")
    return 1 if problems else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--git", type=Path, required=True, help="NVIDIA/Megatron-LM git directory")
    parser.add_argument("--repo", action="append", default=[], metavar="OWNER/NAME=PATH",
                        help="another repository's git directory, e.g. NVIDIA-NeMo/RL=/path (repeatable)")
    args = parser.parse_args(argv)
    repos = {"NVIDIA/Megatron-LM": args.git}
    for item in args.repo:
        name, _, path = item.partition("=")
        repos[name] = Path(path)
    return verify(repos)


if __name__ == "__main__":
    raise SystemExit(main())
