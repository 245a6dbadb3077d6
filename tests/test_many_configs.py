"""Checking configs where they live: many files, directories and globs in one run, rule selection, inline
suppressions, SARIF and GitHub output, and the pre-commit hook."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from schemas import validate_output

from checks.cli import main

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples" / "configs"
SARIF_SCHEMA = ROOT / "tests" / "data" / "sarif-schema-2.1.0.json"

BROKEN = "model:\n  num_layers: 4\n  cpu_offloading: true\n  cpu_offloading_num_layers: 6\n"
CLEAN = "model:\n  num_layers: 4\n  cpu_offloading: true\n  cpu_offloading_num_layers: 2\n"


def check(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["check", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def check_json(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict]:
    """The JSON document, validated against its schema: one config's, or a run's over several."""
    code, out, err = check(capsys, *argv, "--format", "json")
    assert err == "", err
    return code, validate_output("check" if "assumptions" in json.loads(out) else "check-run", out)


def write(directory: Path, name: str, text: str) -> Path:
    path = directory / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


# --- many configs in one run ------------------------------------------------------------------------------------

def test_a_directory_checks_each_config_and_skips_the_rest(capsys: pytest.CaptureFixture[str]) -> None:
    code, document = check_json(capsys, str(EXAMPLES))
    files = {Path(f["path"]).relative_to(EXAMPLES).as_posix(): f for f in document["files"]}
    assert files["bridge/run_config_broken.yaml"]["flavor"] == "bridge"
    assert files["bridge/run_config_broken.yaml"]["status"] == "fail"
    assert files["nemo-rl/grpo_offload.yaml"]["flavor"] == "nemo-rl"
    assert files["megatron-lm/pretrain_gpt_offload.sh"]["flavor"] == "megatron-lm"
    assert files["launch/bridge_nemotron3_super_card.sh"]["flavor"] == "bridge"  # a launch script
    assert [(Path(s["path"]).name, s["reason"].split(" (")[0]) for s in document["skipped"]] == \
        [("manifest.yaml", "YAML that holds no config")]
    assert code == 1 and document["status"] == "fail"
    for finding in document["findings"]:  # each carries the config whose check found it
        assert finding["file"] in {f["path"] for f in document["files"]}
    assert document["summary"]["configs"] == len(files) and document["summary"]["skipped"] == 1
    broken = [f for f in document["findings"] if f["file"].endswith("run_config_broken.yaml")]
    assert files["bridge/run_config_broken.yaml"]["summary"]["error"] == sum(f["severity"] == "error" for f in broken)


def test_each_file_is_checked_as_one_check_of_it_would(capsys: pytest.CaptureFixture[str]) -> None:
    """The same findings, file by file, as separate runs give."""
    paths = [str(EXAMPLES / "bridge" / "run_config_broken.yaml"), str(EXAMPLES / "nemo-rl" / "grpo_broken.yaml")]
    _, together = check_json(capsys, *paths)
    for path in paths:
        _, alone = check_json(capsys, path)
        assert [{k: v for k, v in f.items() if k != "file"} for f in together["findings"] if f["file"] == path] \
            == alone["findings"]
        assert alone["files"] == [{**next(f for f in together["files"] if f["path"] == path)}]


def test_an_unreadable_file_is_reported_and_the_others_still_are(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    write(tmp_path, "a_broken.yaml", BROKEN)
    write(tmp_path, "b_bad.yaml", "model:\n  num_layers: [1,\n")
    write(tmp_path, "c_clean.yaml", CLEAN)
    code, document = check_json(capsys, str(tmp_path), "--assume-defaults")
    statuses = {Path(f["path"]).name: f["status"] for f in document["files"]}
    assert statuses == {"a_broken.yaml": "fail", "b_bad.yaml": "error", "c_clean.yaml": "ok"}
    (bad,) = [f for f in document["files"] if f["status"] == "error"]
    assert "invalid YAML" in bad["error"]
    assert code == 2 and {f["rule"] for f in document["findings"]} == {"ACT001"}
    code, out, _ = check(capsys, str(tmp_path), "--assume-defaults")
    assert code == 2 and "error: " in out and "1 could not be read" in out and "ACT001" in out


@pytest.mark.parametrize(("argv", "says"), [
    (("/nonexistent/x.yaml", str(EXAMPLES / "bridge")), "/nonexistent/x.yaml: no such file or directory"),
    ((str(EXAMPLES / "nothing-*.yaml"),), "the glob matches no file"),
    ((str(EXAMPLES / "bridge"), "--set", "model.num_layers=4"), "--set: goes with one config, not several"),
    ((str(EXAMPLES / "bridge"), "--merge"), "--merge layers config files; this is a directory"),
    ((str(EXAMPLES / "bridge"), "--select", "NOPE"), "--select: 'NOPE' is no rule id or prefix of one"),
])
def test_bad_paths_and_options_are_one_line(capsys: pytest.CaptureFixture[str], argv: tuple[str, ...],
                                            says: str) -> None:
    code, out, err = check(capsys, *argv)
    assert code == 2 and out == "" and says in err and len(err.strip().splitlines()) == 1, err


def test_a_glob_checks_what_it_matches(capsys: pytest.CaptureFixture[str]) -> None:
    _, document = check_json(capsys, str(EXAMPLES / "bridge" / "run_config_*.yaml"))
    assert sorted(Path(f["path"]).name for f in document["files"]) == \
        sorted(p.name for p in (EXAMPLES / "bridge").glob("run_config_*.yaml"))


def test_merge_layers_the_files_into_one_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--merge keeps the old meaning of several files: one config, the later file over the earlier."""
    base = write(tmp_path, "base.yaml", BROKEN)
    fix = write(tmp_path, "fix.yaml", "model:\n  cpu_offloading_num_layers: 2\n")
    _, merged = check_json(capsys, str(base), str(fix), "--merge", "--assume-defaults")
    assert merged["files"][0]["path"] == f"{base} + {fix}" and merged["findings"] == []
    _, apart = check_json(capsys, str(base), str(fix), "--assume-defaults")
    assert [f["rule"] for f in apart["findings"] if f["file"] == str(base)] == ["ACT001"]


def test_a_defaults_base_shared_by_children_is_reported_once(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    base = ("policy:\n  model_name: meta-llama/Llama-3.1-8B-Instruct\n  megatron_cfg:\n    enabled: true\n"
            "    optimizer:\n      optimizer: adam\n      use_distributed_optimizer: true\n"
            "      use_precision_aware_optimizer: true\n      optimizer_cpu_offload: true\n"
            "      optimizer_offload_fraction: 0.0\n")
    write(tmp_path, "base.yaml", base)
    write(tmp_path, "child_a.yaml", "defaults: base.yaml\npolicy:\n  train_micro_batch_size: 1\n")
    write(tmp_path, "child_b.yaml", "defaults: base.yaml\npolicy:\n  train_micro_batch_size: 2\n")
    _, document = check_json(capsys, str(tmp_path))
    opt001 = [f for f in document["findings"] if f["rule"] == "OPT001"]
    assert len(opt001) == 1 and opt001[0]["location"]["file"].endswith("base.yaml")
    assert len(document["files"]) == 3  # the base alone, and each child through it


# --- rule selection ---------------------------------------------------------------------------------------------

def test_select_and_ignore_by_id_or_prefix(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = str(write(tmp_path, "c.yaml", BROKEN + "  recompute_granularity: full\n"))
    rules = lambda *argv: {f["rule"] for f in check_json(capsys, path, "--assume-defaults", *argv)[1]["findings"]}  # noqa: E731
    everything = rules()
    assert {"ACT001", "ACT003", "ACT011"} <= everything
    assert rules("--select", "ACT00") == {r for r in everything if r.startswith("ACT00")}
    assert rules("--ignore", "ACT003,ACT011") == everything - {"ACT003", "ACT011"}
    assert rules("--select", "ACT", "--ignore", "ACT001") == {r for r in everything if r.startswith("ACT")} - {"ACT001"}


def test_a_pyproject_table_selects_for_the_files_below_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = write(tmp_path, "configs/sub/c.yaml", BROKEN + "  recompute_granularity: full\n")
    write(tmp_path, "pyproject.toml", "[tool.megatron-offload-check]\nignore = [\"ACT011\"]\n"
                                      "per-file-ignores = {\"configs/sub/*.yaml\" = [\"ACT003\"]}\n")
    rules = {f["rule"] for f in check_json(capsys, str(config), "--assume-defaults")[1]["findings"]}
    assert "ACT001" in rules and not rules & {"ACT003", "ACT011"}
    _, document = check_json(capsys, str(config), "--assume-defaults", "--select", "ACT003")
    rules = {f["rule"] for f in document["findings"]}
    assert rules == set()  # the command line's select replaces the table's; its per-file ignore still applies


@pytest.mark.parametrize(("table", "says"), [
    ("[tool.megatron-offload-check\n", "invalid TOML"),
    ("[tool.megatron-offload-check]\nselct = [\"ACT\"]\n", "unknown key 'selct'; the keys are select, ignore"),
    ("[tool.megatron-offload-check]\nignore = \"ACT\"\n", "ignore must be a list of rule ids or prefixes"),
    ("[tool.megatron-offload-check]\nignore = [\"XYZ\"]\n", "'XYZ' is no rule id or prefix of one"),
])
def test_a_malformed_table_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], table: str,
                                       says: str) -> None:
    config = write(tmp_path, "c.yaml", CLEAN)
    write(tmp_path, "pyproject.toml", table)
    code, out, err = check(capsys, str(config))
    assert code == 2 and out == "" and says in err and len(err.strip().splitlines()) == 1, err


# --- inline suppressions ----------------------------------------------------------------------------------------

def test_a_suppression_silences_exactly_its_finding(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = ("model:\n  num_layers: 4\n  cpu_offloading: true\n"
            "  cpu_offloading_num_layers: 6  # offload-check: ignore[ACT001] a patched build allows it\n"
            "  recompute_granularity: full\n")
    path = write(tmp_path, "c.yaml", text)
    _, document = check_json(capsys, str(path), "--assume-defaults")
    found = {(f["rule"], f["location"]["line"]) for f in document["findings"]}
    assert ("ACT001", 4) not in found and ("ACT003", 5) in found and ("ACT011", 5) in found
    assert not any(f["rule"] == "CFG012" for f in document["findings"])
    _, unsuppressed = check_json(capsys, str(write(tmp_path, "d.yaml", text.split("  #")[0] + "\n"
                                                   "  recompute_granularity: full\n")), "--assume-defaults")
    assert ("ACT001", 4) in {(f["rule"], f["location"]["line"]) for f in unsuppressed["findings"]}


def test_a_suppression_alone_on_its_line_covers_the_next(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, "c.yaml", "model:\n  num_layers: 4\n  cpu_offloading: true\n"
                                     "  # offload-check: ignore[ACT] kept on purpose for this test\n"
                                     "  cpu_offloading_num_layers: 6\n")
    _, document = check_json(capsys, str(path), "--assume-defaults")
    assert document["findings"] == []


def test_a_suppression_above_a_shell_command_covers_its_continued_lines(tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    script = ("#!/bin/bash\n# offload-check: ignore[OPT005] precision-aware optimizer comes from the cluster wrapper\n"
              "torchrun pretrain_gpt.py \\\n    --bf16 \\\n    --optimizer-cpu-offload \\\n"
              "    --optimizer-offload-fraction 1.0 \\\n    --use-distributed-optimizer\n")
    path = write(tmp_path, "train.sh", script)
    _, document = check_json(capsys, str(path))
    assert "OPT005" not in {f["rule"] for f in document["findings"]}
    _, plain = check_json(capsys, str(write(tmp_path, "plain.sh", script.replace("# offload-check", "# note"))))
    assert "OPT005" in {f["rule"] for f in plain["findings"]}


def test_an_unused_suppression_is_reported(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, "c.yaml", "model:\n  num_layers: 4\n"
                                     "  cpu_offloading: false  # offload-check: ignore[ACT004] graphs elsewhere\n")
    _, document = check_json(capsys, str(path), "--assume-defaults")
    (unused,) = document["findings"]
    assert (unused["rule"], unused["location"]["line"]) == ("CFG012", 3)
    assert unused["message"] == "the suppression of ACT004 ('graphs elsewhere') silences nothing on line 3"


@pytest.mark.parametrize(("comment", "says"), [
    ("# offload-check: skip this", "malformed suppression '# offload-check: skip this': write # offload-check: "
                                   "ignore[ID] reason"),
    ("# offload-check: ignore[ACT001]", "needs a reason"),
    ("# offload-check: ignore[] why", "needs a rule id"),
    ("# offload-check: ignore[XYZ9] why", "'XYZ9', which is no rule id or prefix of one"),
    ("# offload-check: ignore[CFG010] why", "CFG010 cannot be silenced on a line"),
])
def test_a_malformed_suppression_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], comment: str,
                                             says: str) -> None:
    path = write(tmp_path, "c.yaml", f"model:\n  cpu_offloading: true  {comment}\n")
    code, out, err = check(capsys, str(path))
    assert code == 2 and out == "" and says in err and f"{path}:2" in err and len(err.strip().splitlines()) == 1, err


# --- SARIF and GitHub annotations -------------------------------------------------------------------------------

def _validate_sarif(text: str) -> dict:
    import jsonschema

    document = json.loads(text)
    schema = json.loads(SARIF_SCHEMA.read_text(encoding="utf-8"))
    jsonschema.Draft4Validator(schema, format_checker=jsonschema.FormatChecker()).validate(document)
    return document


BUNDLED = sorted(p for p in EXAMPLES.rglob("*") if p.suffix in (".yaml", ".sh") and p.name != "manifest.yaml")


@pytest.mark.parametrize("path", BUNDLED, ids=lambda p: p.relative_to(EXAMPLES).as_posix())
def test_sarif_validates_for_every_bundled_example(capsys: pytest.CaptureFixture[str], path: Path) -> None:
    _, out, _ = check(capsys, str(path), "--format", "sarif")
    document = _validate_sarif(out)
    (run,) = document["runs"]
    _, plain = check_json(capsys, str(path))
    assert [r["ruleId"] for r in run["results"]] == [f["rule"] for f in plain["findings"]]
    for result in run["results"]:
        assert run["tool"]["driver"]["rules"][result["ruleIndex"]]["id"] == result["ruleId"]


def test_sarif_of_a_directory_has_regions_rules_and_fixes(capsys: pytest.CaptureFixture[str]) -> None:
    _, out, _ = check(capsys, str(EXAMPLES), "--format", "sarif")
    (run,) = _validate_sarif(out)["runs"]
    broken = [r for r in run["results"]
              if r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"].endswith("run_config_broken.yaml")]
    act001 = next(r for r in broken if r["ruleId"] == "ACT001")
    region = act001["locations"][0]["physicalLocation"]["region"]
    line = (EXAMPLES / "bridge" / "run_config_broken.yaml").read_text().splitlines()[region["startLine"] - 1]
    assert line[region["startColumn"] - 1:].startswith("cpu_offloading_num_layers")
    (change,) = act001["fixes"][0]["artifactChanges"]
    (replacement,) = change["replacements"]
    deleted = replacement["deletedRegion"]
    assert line[deleted["startColumn"] - 1:deleted["endColumn"] - 1] == "32"
    assert replacement["insertedContent"]["text"] == "30"
    rule = next(r for r in run["tool"]["driver"]["rules"] if r["id"] == "ACT001")
    assert rule["help"]["text"].startswith(rule["shortDescription"]["text"])
    assert any(c["anchors"] for c in rule["properties"]["upstream"])
    assert run["invocations"][0]["executionSuccessful"] is True



def _apply(change: dict, root: Path) -> None:
    """A SARIF artifact change applied to its file, right to left on each line (columns are the original's)."""
    path = Path(change["artifactLocation"]["uri"])
    lines = path.read_text(encoding="utf-8").split("\n")
    for r in sorted(change["replacements"], key=lambda r: (r["deletedRegion"]["startLine"],
                                                           r["deletedRegion"]["startColumn"]), reverse=True):
        region, n = r["deletedRegion"], r["deletedRegion"]["startLine"] - 1
        lines[n] = lines[n][:region["startColumn"] - 1] + r["insertedContent"]["text"] + \
            lines[n][region["endColumn"] - 1:]
    path.write_text("\n".join(lines), encoding="utf-8")


def test_every_sarif_fix_removes_its_finding(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Each fix of each bundled example, applied to a copy, makes its finding go (unless the finding says its patch
    is partial), and the fixes cover the patches that a YAML value or a Megatron-LM flag can carry."""
    fixed = 0
    for path in BUNDLED:
        relative = path.relative_to(EXAMPLES)
        shutil.copytree(EXAMPLES, tmp_path / "before", dirs_exist_ok=True)
        _, out, _ = check(capsys, str(tmp_path / "before" / relative), "--format", "sarif")
        _, plain = check_json(capsys, str(tmp_path / "before" / relative))
        partial = {(f["rule"], f["path"]) for f in plain["findings"] if f.get("partial")}
        for result in _validate_sarif(out)["runs"][0]["results"]:
            if not result.get("fixes"):
                continue
            work = tmp_path / f"fix{fixed}"
            shutil.copytree(tmp_path / "before", work)
            (change,) = result["fixes"][0]["artifactChanges"]
            change = {**change, "artifactLocation": {"uri": change["artifactLocation"]["uri"].replace(
                str(tmp_path / "before"), str(work))}}
            _apply(change, work)
            _, after = check_json(capsys, str(work / relative))
            key = (result["ruleId"], result["properties"]["path"])
            if key not in partial:
                assert key not in {(f["rule"], f["path"]) for f in after["findings"]}, (relative, key)
            fixed += 1
    assert fixed >= 10



@pytest.mark.parametrize(("line", "patch", "after"), [
    ("    --recompute-activations \\", {"--recompute-activations": None}, "    \\"),
    ("  --a 1 --cpu-offloading-num-layers 4 --b", {"--cpu-offloading-num-layers": None}, "  --a 1 --b"),
    ("  --a 1 --cpu-offloading-num-layers 4", {"--cpu-offloading-num-layers": None}, "  --a 1"),
    ("  --optimizer-offload-fraction 0.5  # half", {"--optimizer-offload-fraction": 1.0},
     "  --optimizer-offload-fraction 1.0  # half"),
    ("  --offload-modules a b --x", {"--offload-modules": ["core_attn", "attn_proj"]},
     "  --offload-modules core_attn attn_proj --x"),
    ("  --optimizer-cpu-offload", {"--use-precision-aware-optimizer": True, "--optimizer-offload-fraction": 1.0},
     "  --use-precision-aware-optimizer --optimizer-offload-fraction 1.0 --optimizer-cpu-offload"),
    ("  --lr -1e-4 --x", {"--lr": None}, "  --x"),
])
def test_flag_fixes_edit_the_line_as_override_lines_would(line: str, patch: dict, after: str) -> None:
    from checks import sarif

    anchor = sarif._token_start(line, {"startColumn": line.index("--") + 1})
    edits = sarif._flag_edits(patch, line, anchor)
    assert edits is not None
    for start, end, text in sorted(edits, reverse=True):
        line = line[:start] + text + line[end:]
    assert line == after


@pytest.mark.parametrize(("line", "patch"), [
    ("  --x 1 --x 2", {"--x": None}),  # written twice: which one?
    ("  --y", {"--x": None}),  # nothing to remove
    ("  --x \"$V\" --y", {"--x": 3}),  # a quoted value: the shell decides where it ends
    ("  --x 1 # --y", {"--y": None}),  # only in the comment
    ("  --x $N --y", {"--x": None}),  # an expansion after the flag: its value, or another word?
])
def test_flag_fixes_give_up_where_the_line_is_ambiguous(line: str, patch: dict) -> None:
    from checks import sarif

    assert sarif._flag_edits(patch, line, 2) is None


def test_github_annotations(capsys: pytest.CaptureFixture[str]) -> None:
    path = EXAMPLES / "bridge" / "run_config_broken.yaml"
    code, out, _ = check(capsys, str(path), "--format", "github")
    first = out.splitlines()[0]
    assert code == 1
    assert first.startswith(f"::error file={path},line=11,title=ACT001 error::cpu_offloading_num_layers=32")


# --- the pre-commit hook ----------------------------------------------------------------------------------------

@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_the_pre_commit_hook_fails_on_a_broken_config_and_passes_a_clean_one(tmp_path: Path) -> None:
    """The real pre-commit runs this repository's .pre-commit-hooks.yaml (try-repo installs the package into its
    own environment) in a scratch git repository."""
    pytest.importorskip("pre_commit")
    if not (ROOT / ".git").exists():
        pytest.skip("try-repo needs this checkout to be a git repository")
    repo = tmp_path / "repo"
    repo.mkdir()
    env = {**os.environ, "PRE_COMMIT_HOME": str(tmp_path / "cache"), "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True, env=env)
    write(repo, "broken.yaml", "_target_: megatron.bridge.training.config.ConfigContainer\n" + BROKEN)
    write(repo, "clean.yaml", "_target_: megatron.bridge.training.config.ConfigContainer\n" + CLEAN)
    write(repo, ".github/workflows/ci.yaml", "on: push\njobs: {}\n")  # not a config: skipped, not an error
    subprocess.run(["git", "add", "."], cwd=repo, check=True, env=env)

    def hook(*files: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "pre_commit", "try-repo", str(ROOT), "megatron-offload-check",
                               "--files", *files], cwd=repo, env=env, capture_output=True, text=True, timeout=600)

    failed = hook("broken.yaml", ".github/workflows/ci.yaml")
    assert failed.returncode == 1 and "ACT001" in failed.stdout, failed.stdout + failed.stderr
    passed = hook("clean.yaml", ".github/workflows/ci.yaml")
    assert passed.returncode == 0, passed.stdout + passed.stderr
