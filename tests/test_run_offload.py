"""The example command: its table, its artifact (validated against the schema in checks/) and its guard."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("torch")
jsonschema = pytest.importorskip("jsonschema")

from examples import run_offload  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SCHEMA = json.loads((ROOT / "checks" / "schemas" / "offload_run.schema.json").read_text())
TINY = ["--steps", "2", "--layers", "2", "--hidden", "32", "--seq-len", "16", "--batch-size", "2", "--device", "cpu"]


@pytest.mark.parametrize("model", ["dense", "moe"])
def test_artifact_validates_and_every_variant_matches_the_baseline(tmp_path: Path, model: str,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run.json"
    assert run_offload.main([*TINY, "--model", model, "--variants", "all", "--out", str(out)]) == 0
    artifact = json.loads(out.read_text())
    jsonschema.validate(artifact, SCHEMA)
    names = [v["name"] for v in artifact["variants"]]
    assert names == list(run_offload.variants(run_offload.GPTConfig(num_layers=2)))
    by_name = {v["name"]: v for v in artifact["variants"]}
    assert all(v["max_abs_loss_delta"] == 0 for v in artifact["variants"])  # offloading changes no bit
    assert by_name["layer"]["activation_peak_device_bytes"] < by_name["baseline"]["activation_peak_device_bytes"]
    assert by_name["fine-grained-default-size"]["d2h_bytes_per_step"] == 0  # 1 Mi elements: nothing qualifies
    assert by_name["optimizer"]["optimizer_device_bytes"] < by_name["baseline"]["optimizer_device_bytes"]
    assert artifact["revision"]["command"].endswith(f"--out {out}")
    main_table, losses = capsys.readouterr().out.split("\n\n")
    assert main_table.splitlines()[0].split()[:3] == ["variant", "peak", "device"]
    assert len(main_table.splitlines()) == 1 + len(names)
    assert losses.splitlines()[0].split() == ["loss", "by", "step", "1", "2"]
    assert [line.split()[0] for line in losses.splitlines()[1:]] == names


def test_baseline_is_always_run_first(tmp_path: Path) -> None:
    out = tmp_path / "run.json"
    assert run_offload.main([*TINY, "--variants", "layer", "--out", str(out)]) == 0
    assert [v["name"] for v in json.loads(out.read_text())["variants"]] == ["baseline", "layer"]


def test_a_long_run_asks_for_yes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(run_offload, "BUDGET_S", 0.0)
    out = tmp_path / "run.json"
    assert run_offload.main([*TINY, "--out", str(out)]) == 2
    assert "pass --yes to run it" in capsys.readouterr().err and not out.exists()
    assert run_offload.main([*TINY, "--out", str(out), "--yes"]) == 0


def test_unknown_variant_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as err:
        run_offload.main(["--variants", "layers"])
    assert err.value.code == 2
    assert "unknown variant(s) ['layers']" in capsys.readouterr().err


@pytest.mark.parametrize(("argv", "message"), [
    (["--hidden", "9"], "--hidden must be a multiple of the 4 attention heads"),  # used to fail in a view()
    (["--out", "/"], "give a file path in an existing directory"),  # used to fail after training
])
def test_bad_options_are_usage_errors_before_training(argv: list[str], message: str,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as err:
        run_offload.main(argv)
    assert err.value.code == 2 and message in capsys.readouterr().err


def test_a_huge_run_asks_for_yes_before_building_its_data(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--steps 2000000 used to build every batch (and run out of memory) before the estimate asked for --yes."""
    assert run_offload.main(["--steps", "2000000", "--device", "cpu", "--out",
                             str(tmp_path / "r.json")]) == 2
    assert "pass --yes to run it" in capsys.readouterr().err


@pytest.mark.parametrize(("model", "variants"), [("dense", "layer,fine-grained"), ("moe", "fine-grained")])
def test_in_process_run_gives_the_committed_artifacts_bytes(tmp_path: Path, model: str, variants: str) -> None:
    """The card's default model, at its committed step count, gives the bytes its committed artifact records (a
    subprocess run of the full command checks every variant; this one runs in the test's own process, where a
    mutation tool sees which code it covers). Per-step figures are averages: the fine-grained plan's first step
    offloads every group, later ones keep each module's last group on the device."""
    committed = json.loads((ROOT / "reference" / "benchmarks" / f"example_offload_run_{model}.json").read_text())
    out = tmp_path / "run.json"
    assert run_offload.main(["--model", model, "--steps", str(committed["steps"]), "--variants", variants,
                             "--device", "cpu", "--out", str(out)]) == 0
    by_name = {v["name"]: v for v in committed["variants"]}
    fields = ("peak_device_bytes", "activation_peak_device_bytes", "optimizer_device_bytes", "host_peak_bytes",
              "d2h_bytes_per_step", "h2d_bytes_per_step", "tensors_offloaded_per_step")
    for ours in json.loads(out.read_text())["variants"]:
        assert {k: ours[k] for k in fields} == {k: by_name[ours["name"]][k] for k in fields}, ours["name"]
