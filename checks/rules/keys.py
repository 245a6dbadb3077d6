"""CFG: keys and values the front end or megatron-core will misread: typos, wrong types, wrong versions."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from checks.config import REFUSED_BY_RUNNER, SWITCH_VALUE, UNUSED_WORD, Origin, Unrecognised
from checks.context import Context, disagreements
from checks.formats import BRIDGE_SECTIONS, is_offload_related, normalise
from checks.formats import close_matches as _close_matches
from checks.rules import upstream as up
from checks.rules.base import ERROR, INFO, WARNING, Example, Hit, Rule, declared, rule
from checks.values import show
from checks.versions import NEMO_RL_VERSIONS, mlm_flags, nemo_rl_keys, versions_with_field, versions_with_flag

_FRONT_END = {"bridge": "Megatron Bridge", "nemo-rl": "NeMo-RL", "megatron-lm": "Megatron-LM"}


# The class Bridge names when it skips a key its dataclass lacks (omegaconf_utils.py:472).
_BRIDGE_CLASSES = {"": "ConfigContainer", "optimizer": "OptimizerConfig", "ddp": "DistributedDataParallelConfig"}


def _consequence(ctx: Context, item: Unrecognised) -> str:
    if item.consequence == "crash":
        return "the run fails at start-up" if item.section != "argv" else "argparse exits at start-up"
    if item.consequence == "skipped":
        # A `+`/`++` override adds the key to Bridge's dict; setting the dict back onto the dataclasses skips it
        # (NVIDIA-NeMo/Megatron-Bridge@067f987d:src/megatron/bridge/training/utils/omegaconf_utils.py:470-474).
        cls = _BRIDGE_CLASSES.get(item.section) or (ctx.cfg.model_class or "").rsplit(".", 1)[-1] or \
            "<the recipe's model provider class>"
        return (f"Megatron Bridge adds it, then drops it when it sets the config back, logging only \"Key "
                f"'{item.name}' in overrides not found in config object {cls}. Skipping.\", so it has no effect")
    return f"{_FRONT_END[ctx.flavor]} drops it without an error, so it has no effect"


def _home(ctx: Context, item: Unrecognised) -> str | None:
    """The section a misplaced field really belongs to."""
    for section in ("model", "optimizer", "ddp"):
        if section != item.section and normalise(item.name) in ctx.profile.names(section):
            return section
    return None


def _candidates(ctx: Context, item: Unrecognised) -> list[str]:
    if item.section == "argv":
        return list(mlm_flags(ctx.version))
    if item.section == "":
        return sorted(BRIDGE_SECTIONS - {"_target_"})
    if item.section == "megatron_cfg":
        return sorted(nemo_rl_keys(ctx.cfg.environment.nemo_rl_version) | ctx.profile.names("model"))
    return sorted(ctx.profile.names(item.section))


def _elsewhere(ctx: Context, item: Unrecognised) -> tuple[str, ...]:
    """Other versions that have this key (empty when none has it): megatron-core, or NeMo-RL for megatron_cfg."""
    if item.section == "argv":
        return versions_with_flag(item.name)
    if item.section in ("model", "optimizer", "ddp"):
        return versions_with_field(item.section, item.name)
    if item.section == "megatron_cfg":
        return tuple(v for v in NEMO_RL_VERSIONS if item.name in nemo_rl_keys(v))
    return ()


def _suggest(ctx: Context, item: Unrecognised) -> str | None:
    key = item.name if item.section == "argv" else normalise(item.name)
    close = _close_matches(key, _candidates(ctx, item), n=1, cutoff=0.75)
    return close[0] if close else None


_SUGGESTIONS = 200  # unknown keys a config gets a closest-name suggestion for; real configs have a few


@rule("CFG001", "unknown-offload-key", ERROR,
      bad=Example("""
          optimizer:
            optimizer_cpu_ofload: true
          """),
      good=Example("""
          optimizer:
            optimizer_cpu_offload: true
            optimizer_offload_fraction: 1.0
          """))
def check_unknown_key(ctx: Context) -> Iterator[Hit]:
    """An offloading key that is not a field of its section (a typo, or the wrong place).

    What it checks:
        A key the front end does not know, in a config section megatron-core or the
        framework reads, whose name is (or nearly is) about offloading: misspelled fields
        (`optimizer_cpu_ofload`), flags (`--cpu-offload-num-layers`), NeMo-RL keys put
        directly under `megatron_cfg` that belong under `model_overrides`, and keys
        that exist in no megatron-core version (`offload_optimizer_states`). Also any
        unknown key where the front end refuses unknown keys (NeMo-RL's optimizer section
        and `model_overrides`). Suggests the closest real name.

    Why it matters:
        Depending on the front end the run either fails at start-up (Megatron-LM
        argparse, NeMo-RL) or drops the key without a word (Bridge providers, NeMo-RL's
        `megatron_cfg`), in which case the offloading you configured never happens. On the
        command line (`--set`), Bridge and NeMo-RL refuse a plain `KEY=VALUE` whose key
        the config lacks (CFG007 reports that, not this rule); a `+KEY`/`++KEY` override
        of a key a Bridge section's dataclass lacks is added and then dropped with only a
        log line ("Key '...' in overrides not found in config object ... Skipping."). A
        stray `megatron_cfg` key that `model_overrides` also sets is not dropped: NeMo-RL
        raises, and CFG006 reports it.

    Source:
        Beyond upstream.
    """
    looked = 0
    for item in ctx.cfg.unrecognised:
        if _elsewhere(ctx, item):
            continue  # CFG003 reports keys that exist in another version
        offload = is_offload_related(item.name)
        if item.section != "" and not offload and (item.consequence != "crash" or item.section == "argv"):
            continue  # scripts carry other programs' flags (torchrun, python); only offload flags are ours
        looked += 1  # difflib over a section's fields is ~2 ms a key: thousands of unknown keys would take seconds
        suggestion = _suggest(ctx, item) if looked <= _SUGGESTIONS else None
        if item.section == "" and suggestion is None:
            continue
        key = item.setting.origin.key or item.name
        home = _home(ctx, item) if item.section in ("model", "optimizer", "ddp") else None
        if item.home:
            hint, fix = (f"{_FRONT_END[ctx.flavor]} sets this model field only under {item.home.rsplit('.', 1)[0]}",
                         f"Move it to {item.home}")
        elif home is not None:
            hint, fix = f"it is a {home} field", f"Move it under {home}"
        elif suggestion is not None and suggestion != normalise(item.name):
            hint, fix = f"did you mean {suggestion!r}?", f"Rename it to {suggestion!r}"
        elif looked > _SUGGESTIONS:
            hint, fix = f"no close name looked for past the first {_SUGGESTIONS} unknown keys", "Remove or rename it"
        else:
            hint, fix = "", "Remove it"
        where = item.space or f"a field of {item.section} in megatron-core {ctx.version}"
        detail = f" ({hint})" if hint else ""
        yield Hit(key, f"{key!r} is not {where}{detail}; "
                  f"{_consequence(ctx, item)}", fix, origin=item.setting.origin)


@rule("CFG007", "override-refused", ERROR,
      bad=Example("""
          model:
            num_layers: 8
          """, overrides=("+model.cpu_offloading=true",)),
      good=Example("""
          model:
            num_layers: 8
          """, overrides=("model.cpu_offloading=true", "model.cpu_offloading_num_layers=2")),
      flavors=frozenset({"bridge", "nemo-rl"}),
      upstream=(up.BRIDGE_OVERRIDE_REFUSED, up.NRL_OVERRIDE_REFUSED))
def check_refused_override(ctx: Context) -> Iterator[Hit]:
    """A `--set` override that Megatron Bridge or NeMo-RL refuses when it applies the overrides.

    What it checks:
        Each command-line override, applied as both frameworks apply them: Hydra 1.3's
        `_apply_overrides_to_config` on the config in struct mode. Refused are a plain
        `KEY=VALUE` whose key the config lacks (a typo, a key under a null section), a dict
        value with a key the mapping lacks, `+KEY=VALUE` on a key that already has a
        non-null value (`+model.cpu_offloading=true`: the field exists, with default
        false), `~KEY` on a key that is absent or null, `~KEY=VALUE` when the value
        differs, and a list given where a mapping is (or the reverse). Quotes upstream's
        message verbatim. For a Bridge override file, a key exists when the file sets it or
        every class the section can hold declares it; where that cannot be known, CFG009
        says so instead.

    Why it matters:
        The job stops before training with "Failed to parse Hydra overrides: ...", after it
        has been scheduled. The rest of the config is checked without the refused override,
        as if it had been removed; upstream stops at the first one.

    Source:
        hydra-core 1.3 `ConfigLoaderImpl._apply_overrides_to_config`
        (hydra/_internal/config_loader_impl.py:336-399) and `OmegaConf.update`, called by
        Megatron Bridge (`parse_hydra_overrides`) and NeMo-RL (`nemo_rl.utils.config`).
    """
    check = up.BRIDGE_OVERRIDE_REFUSED if ctx.flavor == "bridge" else up.NRL_OVERRIDE_REFUSED
    for note in ctx.cfg.refused_overrides:
        error = note.message.removeprefix("Failed to parse Hydra overrides: ")
        said = " ".join(note.message.split())  # one line in the finding; the upstream record keeps it verbatim
        yield Hit(note.origin.key or note.text, f"'{note.text}' is refused at start-up: "
                  f"{_FRONT_END[ctx.flavor]} stops with \"{said}\"; the rest is checked without it",
                  _override_fix(ctx, note.text, error), upstream=ctx.upstream(check, error=error), origin=note.origin)


def _override_fix(ctx: Context, text: str, error: str) -> str:
    if error.startswith("Could not override"):
        close = _close_matches(text.split("=", 1)[0].rsplit(".", 1)[-1], sorted(
            ctx.profile.names("model") | ctx.profile.names("optimizer") | ctx.profile.names("ddp")), n=1, cutoff=0.8)
        spelled = f" (did you mean {close[0]!r}?)" if close and close[0] != text.split("=", 1)[0] else ""
        return (f"Check the key{spelled}: the config has no such key. To add one, write +{text}"
                + (" (Bridge then drops a key its dataclass lacks)" if ctx.flavor == "bridge" else ""))
    if error.startswith("Could not append"):
        return f"Drop the '+': write {text[1:]} (or ++{text[1:]}, which adds or overrides)"
    if error.startswith("Could not delete") and "does not exist" in error:
        return "Remove the override: there is nothing to delete"
    if error.startswith("Could not delete"):
        return f"Write {text.split('=', 1)[0]} without a value, or give the value the key has"
    return "Write the value with the shape the key holds (a mapping for a mapping, a list for a list, an index " \
           "for a list item)"


@rule("CFG010", "value-unknown", INFO,
      bad=Example("""
          model:
            num_layers: 8
            cpu_offloading: true
            cpu_offloading_num_layers: 2
          """, complete=False),
      good=Example("""
          _target_: megatron.bridge.training.config.ConfigContainer
          model:
            num_layers: 8
            cpu_offloading: true
            cpu_offloading_num_layers: 2
          """, complete=False),
      flavors=frozenset({"bridge", "nemo-rl"}),
      last=True)
def check_undecided(ctx: Context) -> Iterator[Hit]:
    """A value some rule needs that none of the inputs state, so that rule cannot decide.

    What it checks:
        Runs after every other rule. A rule that reads a value no input states (a field an
        override file leaves to the recipe it goes with, one a recipe sets in a way the recipe
        catalogue could not evaluate, the dimensions of a checkpoint the model catalogue does not
        hold) is not allowed to report what it would conclude from megatron-core's default.
        Instead this finding names the value, why it is unknown, the rules that could not
        decide, and how to state it. The verdict is then "ok with N values unknown", not "ok".

    Why it matters:
        Unknown is not a default. A recipe sets CUDA graphs, pipeline sizes and optimizer
        dtypes that megatron-core refuses with offloading; reading them as defaults says "ok" on
        jobs that crash after they are scheduled.

    Source:
        Goes beyond upstream: what the checker does not know about the job.
    """
    groups: dict[tuple[str, str], list[str]] = {}  # one finding per reason: a recipe not given is one cause
    for path in sorted(ctx.undecided):
        unknown = ctx.cfg.unknown_at(path)
        if unknown is not None:
            groups.setdefault((unknown.reason, unknown.supply), []).append(path)
    for (reason, supply), paths in groups.items():
        listed = "; ".join(f"{p} ({', '.join(dict.fromkeys(ctx.undecided[p]))})" for p in paths)
        count = f"{len(paths)} value{'s' if len(paths) != 1 else ''}"
        yield Hit(paths[0], f"{count} the rules need {'are' if len(paths) != 1 else 'is'} unknown, because {reason}; "
                  f"the rules named could not decide: {listed}", f"State {'them' if len(paths) != 1 else 'it'}: "
                  f"{supply}", paths=tuple(paths))


@rule("CFG011", "conflicting-fixes", WARNING,
      bad=Example("--num-layers 4 --cpu-offloading-num-layers 6 --moe-paged-stash", "megatron-lm", version="0.19.2",
                  also=("ACT001", "ACT007")),
      good=Example("--num-layers 4 --cpu-offloading-num-layers 2", "megatron-lm", version="0.19.2"),
      last=True)
def check_conflicting_patches(ctx: Context) -> Iterator[Hit]:
    """Two findings whose fixes set one key to different values.

    What it checks:
        Runs after every other rule. Each finding whose fix is a change of values carries a patch
        (`--emit-overrides` prints them, the JSON output has them as `patch`). When two findings' patches
        set the same key, as the input spells it, to different values, this names the key, the rules and
        the values each proposes. Only complete patches count: a partial one (`partial` in the JSON) is
        printed as a comment anyway. On a Megatron-LM command line two canonical fields can share one
        flag (`cpu_offloading=false` is written `--cpu-offloading-num-layers 0`, since Megatron-LM turns
        layer-level offloading on from the layer count), so they can disagree too.

    Why it matters:
        Only one value can win. Applying both keeps whichever comes last and leaves the other finding
        in place, or brings it back on the next check; which fix is right is the user's choice (keep the
        feature and fix its settings, or turn it off). `--emit-overrides` prints neither value for such
        a key, only a comment naming the conflict, and keeps every other patch of those findings back too,
        since each patch is meant to be applied whole.

    Source:
        Goes beyond upstream: the checker's own fixes. Megatron-LM derives `cpu_offloading` from
        `--cpu-offloading-num-layers` (NVIDIA/Megatron-LM@d98e8a64:megatron/training/arguments.py:1950).
    """
    spelling = ctx.cfg.spelling
    for key, found in disagreements(ctx.patches).items():
        listed = "; ".join(f"{p.rule} proposes {' '.join(spelling.override_lines({key: p.value}))}" for p in found)
        rules = ", ".join(p.rule for p in found)
        paths = tuple(dict.fromkeys(p.path for p in found))
        yield Hit(found[0].path, f"the fixes of {rules} disagree on {key}: {listed}",
                  f"Choose one: read the fixes of {rules}, set {key} to the value you mean, and check again "
                  "(--emit-overrides prints neither value)", paths=paths if len(paths) > 1 else ())


@rule("CFG012", "unused-suppression", WARNING,
      bad=Example("""
          model:
            cpu_offloading: false  # offload-check: ignore[ACT004] graphs are captured outside megatron-core
          """),
      good=Example("""
          model:
            num_layers: 4
            cpu_offloading: true
            # offload-check: ignore[ACT001] a patched build allows every layer
            cpu_offloading_num_layers: 4
          """),
      last=True, per_run=True)
def check_unused_suppression(ctx: Context) -> Iterator[Hit]:
    """An inline suppression (`# offload-check: ignore[ID] reason`) that silences no finding.

    What it checks:
        Runs after every other rule. Each suppression comment in the files the config was read
        from names rule ids or prefixes and the line it covers (its own, or the next when it is
        alone on its line); one under which none of those rules found anything is reported, with
        its reason.

    Why it matters:
        A suppression outlives the problem it was written for: after the config or the checker
        changes, it silences nothing today and hides the next finding of that rule on that line
        without anyone deciding to. ruff reports unused `noqa` comments for the same reason.

    Source:
        Goes beyond upstream: the checker's own suppressions (checks/suppressions.py).
    """
    for mark in ctx.cfg.suppressions:
        if mark in ctx.used_suppressions:
            continue
        covers = f"line {mark.lines[0]}" if mark.lines[0] == mark.lines[1] else \
            f"lines {mark.lines[0]}-{mark.lines[1]}"
        yield Hit(f"ignore[{','.join(mark.ids)}]",
                  f"the suppression of {', '.join(mark.ids)} ({mark.reason!r}) silences nothing on {covers}",
                  "Remove the comment, or name the rule that fires there",
                  origin=Origin(file=mark.file, line=mark.line, key=f"ignore[{','.join(mark.ids)}]"))


@rule("CFG009", "override-unverified", INFO,
      bad=Example("""
          model:
            num_layers: 8
          """, overrides=("+model.recompute_granularity=selective",)),
      good=Example("""
          model:
            num_layers: 8
          """, overrides=("++model.recompute_granularity=selective",)),
      flavors=frozenset({"bridge", "nemo-rl"}))
def check_unverified_override(ctx: Context) -> Iterator[Hit]:
    """A `--set` override whose outcome depends on a config the checker was not given.

    What it checks:
        A command-line override on a Bridge override file (or on no file) whose acceptance
        or effect depends on the recipe it is merged into: `+KEY` on a field whose default
        is null (the recipe may set it), a plain `KEY=VALUE` on a key only some of the
        classes the section can hold declare (a provider subclass field), a key under a
        section that is null by default (`comm_overlap`), a deleted key (`~KEY`: Bridge
        sets back only the keys left, so the field keeps the recipe's value), or an
        interpolation that needs the recipe. The override is applied as if the recipe
        allowed it, and the rest is checked on that assumption.

    Why it matters:
        Unknown is not a default: the verdict on the rest of the config assumes this
        override did what it says, and with another recipe it may be refused at start-up
        (CFG007) or change nothing.

    Source:
        Beyond upstream: the field tables of Bridge's ConfigContainer sections
        (`tools/bridge_fields.py`) and of megatron-core's config classes.
    """
    for note in ctx.cfg.unverified_overrides:
        if note.partial_delete:
            fix = f"Set {note.origin.key} to the value you mean instead of deleting it"
        elif ctx.flavor == "bridge":
            fix = ("To check it exactly, give the full config it applies to: the recipe's complete run_config.yaml "
                   "dump (or the ConfigContainer.yaml of a dry run), before any override file")
        else:
            fix = "To check it exactly, give the config file the run uses"
        yield Hit(note.origin.key or note.text, f"'{note.text}' could not be verified: {note.message}", fix,
                  origin=note.origin)


@rule("CFG002", "wrong-value-type", ERROR,
      bad=Example("""
          model:
            cpu_offloading: "False"
          """),
      good=Example("""
          model:
            cpu_offloading: false
          """))
def check_value_type(ctx: Context) -> Iterator[Hit]:
    """A value of the wrong type, such as `"True"`, `"auto"` or `"0.5"` in quotes.

    What it checks:
        A field whose value is not of the field's type in the selected megatron-core
        version: strings where a bool or number belongs, a bare name where a list of
        module names belongs, null where a value is required. An int 0/1 for a bool and
        an int for a float are accepted, because megatron-core treats them the same.

    Why it matters:
        megatron-core does not check types. A string is truthy, so
        `cpu_offloading: "False"` turns offloading *on*; `offload_modules: core_attn`
        becomes the set of its letters; a quoted fraction fails with a `TypeError`
        inside the optimizer after the job has been scheduled.

    Source:
        Beyond upstream.
    """
    for path, problem in ctx.invalid.items():
        setting = ctx.setting(path)
        if setting is None:
            continue
        value = setting.value
        name = path.split(".", 1)[1]
        truthy = ""
        spec = ctx.profile.field(*path.split(".", 1))
        if spec is not None and spec.kind == "bool" and isinstance(value, str) and value:
            truthy = "; megatron-core tests it for truth, so any non-empty string (even \"False\") means true"
        fixed = _repair(spec.kind if spec else "any", value)
        yield Hit(path, f"{name}={value!r} {problem}{truthy}",
                  f"Write {name} as {_describe_kind(spec.kind if spec else 'any')}" +
                  (f", e.g. {name}: {show(fixed)}" if fixed is not None else ""),
                  patch={path: fixed} if fixed is not None else None)


def _describe_kind(kind: str) -> str:
    return {"bool": "true or false (unquoted)", "int": "an unquoted integer", "float": "an unquoted number",
            "str": "a string", "list_str": "a list of names, [a, b]", "dtype": "a dtype name (fp32, bf16, fp16)"
            }.get(kind, "a value of the right type")


def _repair(kind: str, value: Any) -> Any:
    """The value the user most likely meant, or None when it cannot be told."""
    if isinstance(value, str):
        text = value.strip()
        if kind == "bool" and text.lower() in ("true", "false", "yes", "no", "on", "off", "1", "0"):
            return text.lower() in ("true", "yes", "on", "1")
        if kind in ("int", "float"):
            try:
                number = float(text)
            except ValueError:
                return None
            if kind == "float":
                return number
            return int(number) if number.is_integer() else None
        if kind == "list_str" and text:
            return [part for part in text.replace(",", " ").strip("[]").split() if part]
    if kind == "int" and isinstance(value, float) and value.is_integer():
        return int(value)
    return None


@rule("CFG003", "field-not-in-version", ERROR,
      bad=Example("""
          model:
            fine_grained_activation_offloading: true
            offload_modules: [core_attn]
            activation_offload_fraction: 0.5
          env_vars:
            NVTE_CPU_OFFLOAD_V1: 1
          """, version="0.16.1"),
      good=Example("""
          model:
            fine_grained_activation_offloading: true
            offload_modules: [core_attn]
            activation_offload_fraction: 0.5
          env_vars:
            NVTE_CPU_OFFLOAD_V1: 1
          """, version="0.19.2"))
def check_version(ctx: Context) -> Iterator[Hit]:
    """A field or flag that does not exist in the selected megatron-core version.

    What it checks:
        A config key or Megatron-LM flag that some known megatron-core version has but the
        selected one (`--mcore-version`) does not, e.g. `activation_offload_fraction`
        (from 0.19) with 0.16, or `--cpu-offloading-num-layers` (from 0.16) with 0.15.
        Also a key under NeMo-RL's `megatron_cfg` that another NeMo-RL release reads but
        the selected one (`--nemo-rl-version`) does not, e.g. `cuda_graph_modules` with
        0.7.0. Offloading keys, keys the front end refuses at start-up, and every
        `megatron_cfg` key (NeMo-RL drops it without a word) are reported one by one as
        errors; other megatron-core keys are gathered in one warning, since many of them
        usually mean `--mcore-version` is wrong.

    Why it matters:
        The Megatron-LM parser exits on an unknown flag; Bridge and NeMo-RL drop or
        reject a field their megatron-core lacks, and NeMo-RL drops a `megatron_cfg` key
        its release does not read. Either way the setting does not do what the config
        says.

    Source:
        Beyond upstream: the field tables of each release (`tools/mcore_fields.py`) and
        the keys each NeMo-RL release reads under `megatron_cfg` (`tools/nemo_rl_keys.py`).
    """
    others: list[tuple[str, tuple[str, ...]]] = []
    for item in ctx.cfg.unrecognised:
        present = _elsewhere(ctx, item)
        if not present:
            continue
        key = item.setting.origin.key or item.name
        nemo_rl = item.section == "megatron_cfg"
        product, current = ("NeMo-RL", ctx.env.nemo_rl_version) if nemo_rl else ("megatron-core", ctx.version)
        if is_offload_related(item.name) or item.consequence == "crash" or nemo_rl:
            newer = [v for v in present if _newer(v, current)]
            advice = f"upgrade {product} to {newer[0]}{'' if newer[0] == 'main' else ' or later'}" if newer else \
                f"use {product} {present[-1]} or earlier"
            option = "--nemo-rl-version" if nemo_rl else "--mcore-version"
            yield Hit(key, f"{key!r} does not exist in {product} {current} (it exists in "
                      f"{', '.join(present)}); {_consequence(ctx, item)}",
                      f"Remove it, or {advice} (and pass {option})", origin=item.setting.origin)
        else:
            others.append((key, present))
    if others:
        keys = ", ".join(k for k, _ in others[:8]) + (f" and {len(others) - 8} more" if len(others) > 8 else "")
        yield Hit(others[0][0], f"{len(others)} key(s) do not exist in megatron-core {ctx.version}: {keys}",
                  "Check --mcore-version (the default is the newest release the checker knows); the keys exist in "
                  f"{', '.join(others[0][1])}", origin=next(i.setting.origin for i in ctx.cfg.unrecognised
                                                             if (i.setting.origin.key or i.name) == others[0][0]),
                  severity=WARNING)


def _newer(a: str, b: str) -> bool:
    from checks.versions import version_key

    return version_key(a) > version_key(b)


@rule("CFG004", "rejected-by-argument-parser", ERROR,
      bad=Example("--bf16 --optimizer-cpu-offload --use-precision-aware-optimizer --use-distributed-optimizer "
                  "--optimizer-offload-fraction half", "megatron-lm"),
      good=Example("--bf16 --optimizer-cpu-offload --use-precision-aware-optimizer --use-distributed-optimizer "
                   "--optimizer-offload-fraction 1.0", "megatron-lm"),
      flavors=frozenset({"megatron-lm"}))
def check_rejected(ctx: Context) -> Iterator[Hit]:
    """A command line the Megatron-LM argument parser refuses, or that the functional-test runner cannot build.

    What it checks:
        Every error the selected version's argparse parser would raise, in its own words: a value it
        cannot convert (`--optimizer-offload-fraction half`: "invalid float value"), an invalid choice
        (`--recompute-granularity partial`), a missing value ("expected one argument"), a value given to a
        switch (`--bf16=true`: "ignored explicit argument"), a word no flag takes ("unrecognized arguments",
        e.g. `false` after a switch), two flags of a mutually exclusive group ("not allowed with argument"),
        and a value whose converter raises what argparse does not catch (an unknown `--attention-backend`
        name raises KeyError: a traceback). For a functional-test YAML, also what stops Megatron-LM's CI
        runner before argparse: an unmatched quote for `xargs`, shell syntax in its `eval`, a list or mapping
        as a flag value.

    Why it matters:
        The job stops at start-up, after it has been scheduled.

    Source:
        Megatron-LM's argument parser, dumped and verified per version (`tools/mlm_flags.py`), parsed with
        CPython's argparse semantics; the runner is
        NVIDIA/Megatron-LM@d98e8a64:tests/functional_tests/shell_test_utils/_run_training.sh.
    """
    for item in ctx.cfg.rejected:
        if item.cause == REFUSED_BY_RUNNER:
            fix = "Write the value so the runner passes it as intended (see the message)"
        elif item.cause == UNUSED_WORD:
            fix = ("Remove the word: a switch takes no value (write the flag alone for true, leave it out for "
                   "false); in a functional-test YAML write `--flag: true`, not false or null")
        elif item.cause == SWITCH_VALUE:
            fix = "Write the switch without =value"
        else:
            fix = "Give the flag a valid value (python -m checks explain CFG004 lists the parser's rules)"
        path = item.path if "." in item.path or item.path == "argv" else f"{_section(ctx, item.path)}.{item.path}"
        yield Hit(path, item.reason, fix, origin=item.setting.origin)


@rule("CFG008", "duplicate-key", WARNING,
      bad=Example("""
          MODEL_ARGS:
            --num-layers: 4
            --hidden-size: 256
            --num-layers: 8
          """, "megatron-lm"),
      good=Example("""
          MODEL_ARGS:
            --num-layers: 8
            --hidden-size: 256
          """, "megatron-lm"),
      flavors=frozenset({"megatron-lm"}))
def check_duplicate_key(ctx: Context) -> Iterator[Hit]:
    """A flag written twice in the MODEL_ARGS of a Megatron-LM functional-test YAML.

    What it checks:
        A key that appears twice in the same `MODEL_ARGS` (or `MODEL_ARGS_<N>`) mapping. Megatron-LM's CI
        runner reads the file with yq, which keeps both entries, and passes both flags; argparse then keeps
        the later value (an `append` flag keeps both). In a mapping with a merge key (`<<: *base`), yq's
        `explode` keeps only the later entry. Either way the earlier line has no effect. Reported with both
        lines, whether or not the values differ.

    Why it matters:
        Megatron Bridge and NeMo-RL refuse such a file (OmegaConf rejects duplicate keys), and a reader who
        edits the first line changes nothing: the job runs with the other value.

    Source:
        NVIDIA/Megatron-LM@d98e8a64:tests/functional_tests/shell_test_utils/_run_training.sh:131 (yq
        `to_entries` over MODEL_ARGS) and argparse's store action (the last value stays).
    """
    for dup in ctx.cfg.duplicates:
        first, last = dup.first, dup.last
        spec = mlm_flags(ctx.version).get(dup.key)
        where = f"lines {first.origin.line} and {last.origin.line}" if first.origin.line and last.origin.line \
            else "twice"
        if spec is not None and spec.action in ("append", "append_const", "extend", "count") and \
                "passes both" in dup.outcome:
            effect = f"argparse applies both ({spec.action})"
        elif first.value == last.value:
            effect = f"both say {_short(last.value)}, so the earlier line is redundant"
        else:
            effect = (f"the value at line {last.origin.line}, {_short(last.value)}, wins; {_short(first.value)} "
                      f"at line {first.origin.line} has no effect")
        path = f"{_section(ctx, spec.dest)}.{spec.dest}" if spec is not None else "argv"
        yield Hit(path, f"{dup.key} is given twice ({where}): {dup.outcome}; {effect}",
                  f"Keep one {dup.key} line, with the value you mean", origin=last.origin)


def _section(ctx: Context, dest: str) -> str:
    for section in ("model", "optimizer", "ddp"):
        if ctx.profile.field(section, dest) is not None:
            return section
    return "argv"


@rule("CFG005", "offload-setting-ignored", WARNING,
      bad=Example("""
          policy:
            megatron_cfg:
              enabled: false
              optimizer:
                optimizer_cpu_offload: true
                optimizer_offload_fraction: 1.0
          """, "nemo-rl"),
      good=Example("""
          policy:
            megatron_cfg:
              enabled: true
              optimizer:
                optimizer_cpu_offload: true
                optimizer_offload_fraction: 1.0
                use_distributed_optimizer: true
                use_precision_aware_optimizer: true
          """, "nemo-rl"))
def check_ignored(ctx: Context) -> Iterator[Hit]:
    """An offloading setting the front end drops without saying so.

    What it checks:
        A value the input gives that never reaches megatron-core: NeMo-RL settings while
        `megatron_cfg.enabled` is false, NeMo-RL's `offload_modules` when
        `fine_grained_activation_offloading` is false or unset, a Megatron-LM flag given
        twice (the last one wins), or a flag whose value is a shell variable the checker
        cannot resolve. Reported for offloading settings only.

    Why it matters:
        The config says one thing and the run does another.

    Source:
        Beyond upstream: NeMo-RL `_apply_performance_config`, argparse semantics.
    """
    for item in ctx.cfg.ignored:
        if not is_offload_related(item.path.rsplit(".", 1)[-1]) and not is_offload_related(item.setting.origin.key):
            continue
        key = item.setting.origin.key or item.path
        yield Hit(item.path, f"{key} = {_short(item.setting.value)} is not used: {item.reason}",
                  "Remove it, or change the setting that disables it", origin=item.setting.origin)


@rule("CFG006", "nemo-rl-model-overrides-conflict", ERROR,
      bad=Example("""
          policy:
            megatron_cfg:
              enabled: true
              model_overrides:
                recompute_granularity: selective
          """, "nemo-rl"),
      good=Example("""
          policy:
            megatron_cfg:
              enabled: true
              model_overrides:
                recompute_method: uniform
          """, "nemo-rl"),
      flavors=frozenset({"nemo-rl"}),
      upstream=(up.NRL_OVERRIDE_CONFLICT,))
def check_model_overrides_conflict(ctx: Context) -> Iterator[Hit]:
    """NeMo-RL refuses `model_overrides` entries that have a first-class `megatron_cfg` key.

    What it checks:
        A NeMo-RL config (main) with a key under `megatron_cfg.model_overrides` that
        NeMo-RL counts as first-class: a field of its `MegatronConfig` (for example
        `fine_grained_activation_offloading` or `recompute_granularity`), or any key
        written directly under `megatron_cfg`, even one NeMo-RL otherwise ignores there
        (a stray `megatron_cfg.cpu_offloading` next to `model_overrides.cpu_offloading`).

    Why it matters:
        NeMo-RL raises `ValueError` at set-up: the first-class key decides, and silently
        preferring one of two values would hide a mistake. Layer-level `cpu_offloading*`
        has no first-class key, so `model_overrides` is the right place for it, and only
        there.

    Source:
        NeMo-RL `_validate_model_override_conflicts`.
    """
    names = sorted(item.path.split(".", 1)[1] for item in ctx.cfg.rejected if item.path.startswith("model."))
    if not names:
        return
    reads = nemo_rl_keys(ctx.env.nemo_rl_version)
    why = [f"{n!r} is a first-class megatron_cfg key" if n in reads else
           f"megatron_cfg.{n} is also set (NeMo-RL does not read it there, but counts it)" for n in names]
    fixes = [f"set {n} directly under megatron_cfg, not in model_overrides" if n in reads else
             f"delete megatron_cfg.{n} (NeMo-RL reads {n} only from model_overrides)" for n in names]
    # NeMo-RL's message names policy.megatron_cfg even for the value model.
    text = ", ".join(f"policy.megatron_cfg.model_overrides.{n} conflicts with policy.megatron_cfg.{n}"
                     for n in names)
    first = next(item for item in ctx.cfg.rejected if item.path == f"model.{names[0]}")
    fix = "; ".join(fixes)
    yield Hit(f"model.{names[0]}", f"model_overrides sets {names}, which NeMo-RL refuses: {'; '.join(why)}",
              fix[0].upper() + fix[1:],
              upstream=ctx.upstream(up.NRL_OVERRIDE_CONFLICT, conflicts=text), origin=first.setting.origin)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


RULES: tuple[Rule, ...] = declared(__name__)
