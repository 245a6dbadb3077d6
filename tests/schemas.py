"""The JSON Schemas of the CLI's JSON outputs (reference/*-output.schema.json), for tests to validate against.

``validate_output("check", text)`` parses what ``python -m checks check --format json`` printed as strict JSON
(no NaN or Infinity, no duplicate keys) and validates it; the kinds are the commands: check, plan, lint, rules,
examples. Import it as ``from schemas import validate_output`` (pytest puts tests/ on the path).
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator
from referencing import Registry, Resource

REFERENCE = Path(__file__).resolve().parent.parent / "reference"
COMMON = REFERENCE / "output-common.schema.json"
SCHEMAS: dict[str, Path] = {kind: REFERENCE / f"{kind}-output.schema.json"
                            for kind in ("check", "check-run", "plan", "lint", "rules", "examples")}


def load_schema(path: Path) -> dict[str, Any]:
    schema: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return schema


@cache
def registry() -> Registry:
    """Every output schema by its ``$id``, so the relative ``$ref`` to output-common.schema.json resolves offline."""
    resources = [Resource.from_contents(load_schema(path)) for path in (COMMON, *SCHEMAS.values())]
    return Registry().with_resources((resource.id(), resource) for resource in resources)


@cache
def validator(kind: str) -> Draft202012Validator:
    """The validator of one command's output (formats are not asserted: the schemas use none)."""
    if kind not in SCHEMAS:
        raise KeyError(f"no output schema for {kind!r}; known: {', '.join(SCHEMAS)}")
    return Draft202012Validator(load_schema(SCHEMAS[kind]), registry=registry())


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"not strict JSON: {name}")


def _refuse_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [key for key, _ in pairs]
    if len(set(keys)) != len(keys):
        raise ValueError(f"not strict JSON: duplicate key in {keys}")
    return dict(pairs)


def parse_strict(text: str) -> Any:
    """``text`` as JSON, refusing NaN, Infinity and -Infinity (which Python's json reads by default)."""
    return json.loads(text, parse_constant=_refuse_constant, object_pairs_hook=_refuse_duplicates)


def validate_output(kind: str, text: str) -> Any:
    """Parse ``text`` strictly and validate it against ``kind``'s schema; return the document.

    Raises ``ValueError`` (json.JSONDecodeError included) when the text is not strict JSON and
    ``jsonschema.ValidationError`` (the best match of every error) when the document breaks the schema."""
    document = parse_strict(text)
    errors = list(validator(kind).iter_errors(document))
    if errors:
        from jsonschema.exceptions import best_match

        raise best_match(errors)
    return document
