"""Many configs in one run: the paths a user names expanded into the configs each flavor reads.

``check`` takes files, directories and globs. A file named on the command line is always checked; in a
directory (or a glob's matches) only what a front end would read as a config is: a Megatron Bridge or NeMo-RL
YAML, a Megatron-LM functional-test ``model_config.yaml``, or a shell script that launches training. The rest
is skipped, each with its reason (``--verbose`` lists them). Each config is checked on its own, as one ``check``
of that file would check it; a finding about a ``defaults:`` base that several of its children share is
reported once.
"""

from __future__ import annotations

import glob
import os
import re
from collections.abc import Callable, Iterator, Sequence

from checks.errors import InputError
from checks.formats import is_bridge_doc, is_megatron_lm_doc, is_nemo_rl_doc
from checks.report import Checked, Report, Run, Skipped

# Directories no config lives in: version control, environments, caches.
_SKIP_DIRS = frozenset({".git", ".hg", ".svn", "node_modules", "__pycache__", ".venv", "venv", ".tox", ".nox",
                        ".mypy_cache", ".ruff_cache", ".pytest_cache", "site-packages", "build", "dist"})
_YAML = (".yaml", ".yml")
_SCRIPTS = (".sh", ".bash")
# A script without a launch checks/loaders/launch.py knows is read by the Megatron-LM reader for its flags: it is
# a config when it has Megatron-LM's model or parallelism flags.
_MLM_FLAGS = re.compile(r"--(num-layers|hidden-size|tensor-model-parallel-size|pipeline-model-parallel-size|"
                        r"optimizer-cpu-offload|cpu-offloading-num-layers|fine-grained-activation-offloading)\b")
_GLOB_CHARS = frozenset("*?[")
# checks/yamlio.py's refusals of YAML that parses but holds no mapping of keys: a list, a scalar, nothing
_NOT_A_MAPPING = ("empty config", "the top level is a")


def is_batch(paths: Sequence[str]) -> bool:
    """Whether ``paths`` name more than one config: several paths, a directory, or a glob."""
    return len(paths) > 1 or any(_is_glob(p) or os.path.isdir(p) for p in paths)


def expand(paths: Sequence[str], configs_only: bool = False) -> tuple[list[str], list[Skipped]]:
    """The config files ``paths`` name, in order and each once, and the files a directory or glob held that are
    not configs (``configs_only``: a named file too). A path that does not exist, or a glob that matches nothing,
    is a usage error."""
    found: dict[str, None] = {}
    skipped: list[Skipped] = []
    for path in paths:
        if os.path.isdir(path):
            candidates = list(_walk(path))
        elif os.path.exists(path) and configs_only:
            candidates = [path]
        elif os.path.exists(path) or path in ("-", "/dev/stdin"):
            found.setdefault(path)  # named: always checked, and an error if it cannot be
            continue
        elif _is_glob(path):
            candidates = [p for match in sorted(glob.glob(path, recursive=True))
                          for p in (_walk(match) if os.path.isdir(match) else [match])]
            if not candidates:
                raise InputError(path, "the glob matches no file")
        else:
            raise InputError(path, "no such file or directory")
        for candidate in candidates:
            reason = why_not_a_config(candidate)
            if reason is None:
                found.setdefault(candidate)
            else:
                skipped.append(Skipped(candidate, reason))
    return list(found), skipped


def _is_glob(path: str) -> bool:
    return any(c in _GLOB_CHARS for c in path)


def _walk(root: str) -> Iterator[str]:
    for here, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS and not d.startswith("."))
        for name in sorted(files):
            yield os.path.join(here, name)


def why_not_a_config(path: str) -> str | None:
    """None for a file a front end reads as a config, else why it is skipped. A file that looks like a config
    but cannot be read or parsed is not skipped: checking it reports why."""
    from checks.yamlio import load_yaml, read_text

    if not path.endswith(_YAML + _SCRIPTS):
        return "not a YAML file or shell script"
    try:
        text = read_text(path)
    except InputError:
        return None  # reported when it is checked
    if path.endswith(_SCRIPTS):
        from checks.loaders import Request, launches_of

        try:
            launches = launches_of(Request(files=(path,)))
        except InputError:
            return None  # reported when it is checked
        if launches or _MLM_FLAGS.search(text):
            return None
        return "a shell script without a training launch or Megatron-LM flags"
    try:
        data = load_yaml(path, text).data
    except InputError as err:
        if err.problem.startswith(_NOT_A_MAPPING):
            return f"YAML that holds no config ({err.problem})"
        return None  # invalid YAML: reported when it is checked
    if is_megatron_lm_doc(data) or is_nemo_rl_doc(data) or is_bridge_doc(data):
        return None
    return "no model/optimizer section, no policy.megatron_cfg, no defaults:, no MODEL_ARGS"


def check_all(files: Sequence[str], check_one: Callable[[str], Report], skipped: Sequence[Skipped] = (),
              strict: bool = False) -> Run:
    """Each file checked on its own by ``check_one``; a file that cannot be read is recorded and the run goes on.

    A finding located in another file (a ``defaults:`` base) that an earlier config already reported, with the
    same rule, place and message, is not repeated: the base's problem is reported once, whichever config of
    the run reached it first.
    """
    from dataclasses import replace

    seen: set[tuple[object, ...]] = set()
    checked: list[Checked] = []
    for path in files:
        try:
            report = check_one(path)
        except InputError as err:
            checked.append(Checked(path, error=err.render()))
            continue
        kept = []
        for finding in report.findings:
            file = os.path.normpath(finding.file) if finding.file is not None else None
            key = (finding.rule, finding.target, finding.message, file, finding.line)
            elsewhere = file is not None and file != os.path.normpath(path)
            if elsewhere and key in seen:
                continue
            seen.add(key)
            kept.append(finding)
        checked.append(Checked(path, replace(report, findings=tuple(kept))))
    return Run(tuple(checked), tuple(skipped), strict)
