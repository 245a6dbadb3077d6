"""Differential test over Megatron Bridge recipes: the checker against megatron-core on the job a launch runs.

The cases and their reading are ``tools/recipe_differential.py``'s: ``run_recipe.py --recipe NAME`` with each
generated offload override set, read by the checker as a launch, and megatron-core's config classes (the
installed release, 0.16.1 in CI) built from the same values. Any disagreement fails; so does comparing fewer
than 30 recipes.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("oracle")  # needs torch and megatron-core
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))

import recipe_differential


def test_recipes_with_offload_overrides_agree_with_megatron_core() -> None:
    result = recipe_differential.run(80)
    assert result["recipes_compared"] >= 30, result["outcomes"]
    assert result["agree"] >= 0.8 * result["cases"], (result["agree"], result["cases"])
