"""Property-based differential test: generated offload configs, the checker against megatron-core.

Hypothesis generates Megatron Bridge override sets over the offload field space of the installed
megatron-core (layer-level and fine-grained activation offloading, optimizer offloading, and the
pipeline, recompute and CUDA-graph settings they interact with). For each one, megatron-core
raises for an offload reason if and only if the checker reports an upstream-backed error, with the
same message (``oracle.compare``). Configs megatron-core refuses for unrelated reasons are avoided
by the generator where it can, and counted where it cannot; the summary line reports every count.

Against another megatron-core release (Python 3.12, or 3.11 with the config classes only):

    pip install torch==2.13.0 pyyaml numpy packaging six regex pydantic triton pytest hypothesis jsonschema
    pip install --no-deps --ignore-requires-python --target /tmp/mc/0.19.2 megatron-core==0.19.2
    PYTHONPATH=/tmp/mc/0.19.2:. DIFFERENTIAL_EXAMPLES=2000 python -m pytest tests/test_differential_properties.py -s

(reference/differential.md records the runs against 0.14.0 to 0.19.2.)
"""

from __future__ import annotations

import collections
import contextlib
import os

import pytest
from hypothesis import HealthCheck, given, settings
from offload_configs import bridge_overrides

from checks.loaders import Request, load

oracle = pytest.importorskip("oracle")  # needs torch and megatron-core
VERSION = oracle.VERSION
EXAMPLES = int(os.environ.get("DIFFERENTIAL_EXAMPLES", "2000"))
COUNTS: collections.Counter[str] = collections.Counter()
RAISED: set[str] = set()  # megatron-core's offload messages seen across the generated configs


@settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(overrides=bridge_overrides(VERSION))
def _agree(overrides: list[str]) -> None:
    COUNTS["generated"] += 1
    (cfg,) = load(Request((), tuple(overrides), None, "bridge", VERSION, assume_defaults=True))
    try:
        verdict = oracle.compare(cfg)
    except oracle.UnrelatedRejection:
        COUNTS["rejected for other reasons"] += 1
        return
    for stage, raised in verdict.items():
        state = "no verdict" if raised is oracle.UNKNOWN else "raised" if raised else "accepted"
        COUNTS[f"{stage} {state}"] += 1
        if raised and raised is not oracle.UNKNOWN:
            RAISED.add(raised.message)


def test_generated_configs_agree_with_megatron_core() -> None:
    COUNTS.clear()
    RAISED.clear()
    _agree()
    # the hand-written cases of test_differential.py reach the checks that need many preconditions at once
    from test_differential import ARGV_VARIANTS, CASES, _configs

    cases = [c for e, v in CASES for c in _configs(e, v)] + \
        [c for a in ARGV_VARIANTS for c in load(Request((), (), a, "megatron-lm", VERSION))]
    for cfg in cases:
        with contextlib.suppress(oracle.UnrelatedRejection):
            RAISED.update(r.message for r in oracle.megatron_verdict(cfg).values() if r and r is not oracle.UNKNOWN)
    summary = ", ".join(f"{key}: {value}" for key, value in sorted(COUNTS.items()))
    print(f"\ndifferential against megatron-core {oracle.MCORE_VERSION}: {summary}")
    assert COUNTS["generated"] >= EXAMPLES
    compared = COUNTS["generated"] - COUNTS["rejected for other reasons"]
    assert compared >= 0.75 * COUNTS["generated"], summary  # the generator must mostly reach the offload checks
    assert COUNTS["model raised"] > 0.1 * compared and COUNTS["optimizer raised"] > 0, summary
    never = [m for m in oracle.registered_messages() if not any(oracle.same_check(m, r) for r in RAISED)]
    print(f"megatron-core offload checks raised: {len(oracle.registered_messages()) - len(never)} of "
          f"{len(oracle.registered_messages())}" + (f"; never reached: {never}" if never else ""))
    assert not never
