"""Megatron Bridge configs: full ``_target_`` dumps, partial override YAMLs and Hydra overrides.

Nothing named by a ``_target_`` is imported or instantiated: the dumps are
read as data. Layouts: flat provider fields (``model.cpu_offloading``, every
recipe) and the nested ``GPTModelConfig`` layout (``model.transformer.X``),
NVIDIA-NeMo/Megatron-Bridge@067f987d (see reference/formats.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from checks.config import CanonicalConfig, Origin, OverrideNote, Setting, Unknown, Unrecognised
from checks.formats import BRIDGE_SECTIONS
from checks.loaders import interpolation
from checks.loaders import tree as trees
from checks.loaders.apply import ABSENT, Base
from checks.loaders.bridge_recipe import Recipe, RecipeBase, ResolvedRecipe, find_recipe
from checks.loaders.bridge_recipe import table as bridge_fields
from checks.loaders.common import Applied, Request, apply_overrides, hydra_lines, with_environment
from checks.versions import profile
from checks.yamlio import KeyPath, load_yaml

# ConfigContainer sections whose fields map onto megatron-core config classes.
SECTIONS: Mapping[str, str] = {"model": "model", "optimizer": "optimizer", "ddp": "ddp", "env_vars": "env"}
_CONTAINER = "a section of Megatron Bridge's ConfigContainer"  # what a top-level key is looked up as
TARGET_KEYS: frozenset[str] = frozenset({"_target_", "_call_", "_args_", "_name_", "_partial_", "_builder_"})
_TORCH_DTYPES: Mapping[str, str] = {
    "torch.float32": "fp32", "torch.float": "fp32", "torch.float16": "fp16", "torch.half": "fp16",
    "torch.bfloat16": "bf16", "torch.float64": "fp64",
}
# Launcher-level settings some rules need, from sections that are not megatron-core config classes.
_RUN_KEYS: Mapping[tuple[str, str], str] = {
    ("train", "skip_train"): "run.skip_train",
    ("train", "rampup_batch_size"): "run.rampup_batch_size",
    ("train", "micro_batch_size"): "run.micro_batch_size",
    ("train", "global_batch_size"): "run.global_batch_size",
    ("dist", "use_megatron_fsdp"): "run.use_megatron_fsdp",
    ("ddp", "use_megatron_fsdp"): "run.use_megatron_fsdp",
    ("ddp", "megatron_fsdp_version"): "run.megatron_fsdp_version",  # Bridge's own DDP field
    # GPTModelProvider fields that are not TransformerConfig fields: the model's dimensions
    # (Megatron-Bridge@067f987d:src/megatron/bridge/models/gpt_provider.py:140-184).
    **{("model", name): f"run.{name}" for name in (
        "vocab_size", "should_pad_vocab", "make_vocab_size_divisible_by", "share_embeddings_and_output_weights",
        "position_embedding_type", "seq_length")},
    # An MLATransformerConfig field (NVIDIA/Megatron-LM@d98e8a64:megatron/core/transformer/transformer_config.py:3338)
    # that decides whether attention's input norm is fused away (rule FGA014).
    ("model", "mla_down_proj_fusion"): "run.mla_down_proj_fusion",
}
_SYNC_NOTE = ("Bridge enables the distributed optimizer in both ddp and optimizer when either is set "
              "(Megatron-Bridge@067f987d:src/megatron/bridge/training/config.py:2101-2138)")


def decode_target(mapping: dict[str, Any]) -> Any:
    """A ``{_target_: ...}`` mapping that stands for a value (dtype, enum, callable), as a plain value."""
    if "_target_" not in mapping or set(mapping) - TARGET_KEYS:
        return trees.NOT_SPECIAL
    target = str(mapping["_target_"])
    if target in _TORCH_DTYPES:
        return _TORCH_DTYPES[target]
    if "_name_" in mapping:  # enums dumped by ConfigContainer.to_yaml carry their name
        return mapping["_name_"]
    args = mapping.get("_args_")
    if mapping.get("_call_") and isinstance(args, list) and len(args) == 1:
        return args[0]
    return target


def load(request: Request) -> list[CanonicalConfig]:
    recipe = find_recipe(request.recipe) if request.recipe is not None else None
    tree: trees.Tree = _recipe_tree(recipe, request.version) if recipe is not None else {}
    dump: trees.Tree | None = None  # a `_target_` dump (run_config.yaml): what the overrides start from
    for path in request.files:
        layer = trees.from_doc(load_yaml(path), decode_target)
        if dump is None and "_target_" in layer:
            dump = layer
        tree = trees.merge(tree, layer)  # later files as --config-file: OmegaConf.merge, not struct
    nested = isinstance(trees.get(tree, ("model", "transformer")), dict)  # the layout the config itself uses
    # The command-line overrides in struct mode over the recipe (or the dump) merged with the files
    # (NVIDIA-NeMo/Megatron-Bridge@067f987d:src/megatron/bridge/training/utils/omegaconf_utils.py:139-153).
    # A dump holds every field; one the file leaves out (an abridged dump) is still a field of its class.
    base: Base = ResolvedRecipe(request.version, recipe) if recipe is not None and dump is None else \
        RecipeBase(request.version, nested=nested, source="dump" if dump is not None else "recipe")
    applied = _written_back(apply_overrides(tree, request.overrides, base, at=request.override_at), dump,
                            request.overrides)
    wanted = [keys for keys, _ in trees.leaves(applied.tree) if keys and keys[0] in SECTIONS]
    tree = interpolation.resolve(applied.tree, wanted, _env(request))
    if recipe is not None and dump is None:
        tree = _with_mixed_precision(tree, recipe, request.version)
    cfg = _canonical(tree, request, nested, base)
    if recipe is not None and recipe.hf_model is not None:  # the checkpoint, for the planner's presets
        at, _, line = recipe.where(recipe.defined).rpartition(":")
        cfg = replace(cfg, settings={**cfg.settings, "run.model_name": Setting(recipe.hf_model, Origin(
            at, int(line) if line.isdigit() else None, key="model", note=f"the recipe {recipe.name} builds its "
            "model with AutoBridge.from_hf_pretrained"))})
    cfg = replace(cfg, unknown=_unknown(recipe, dump is not None or request.assume_defaults),
                  launch=request.launch, inputs=request.files or ((request.launch,) if request.launch else ()))
    return applied.attach([cfg])


def _recipe_tree(recipe: Recipe, version: str) -> trees.Tree:
    """What the recipe function sets, each value at the line of Bridge's source that sets it; under it, the
    dimensions of the checkpoint its model is built from (the model catalogue), which the recipe's own
    assignments override."""
    from checks.loaders.checkpoint import CATALOGUE, values
    from checks.models import lookup

    tree: trees.Tree = {}
    arch = lookup(recipe.hf_model) if recipe.hf_model else None
    if arch is not None:
        for path, value in values(arch, profile(version)).items():
            name = path.split(".", 1)[1]
            tree = trees.put(tree, ("model", name), Setting(value, Origin(
                file=f"{CATALOGUE}{arch.hf_id}", key=f"model.{name}", note=arch.source)))
    for path, (value, at) in sorted(recipe.values.items()):
        file, _, line = recipe.where(at).rpartition(":")
        tree = trees.put(tree, tuple(path.split(".")), Setting(value, Origin(
            file=file, line=int(line) if line.isdigit() else None, key=path, note=f"set by the recipe {recipe.name}")))
    return tree


def _with_mixed_precision(tree: trees.Tree, recipe: Recipe, version: str) -> trees.Tree:
    """The config after Bridge's mixed-precision set-up, which runs at training start, after the overrides.

    It copies every ``MixedPrecisionConfig`` field onto each of model, optimizer and ddp that has one of that
    name, over what the recipe or the command line set there (Megatron-Bridge@067f987d:src/megatron/bridge/
    training/config.py:1992-2016, training/mixed_precision.py:113-138).
    """
    from checks.loaders.bridge_recipe import mixed_precision

    node = tree.get("mixed_precision")
    if node is None or (isinstance(node, Setting) and node.value is None):
        return tree
    # A preset name, or the config's fields: these are set before finalize() derives fp8_param/fp4_param.
    given: Any = node.value if isinstance(node, Setting) else \
        {str(k): (v.value, v.origin.describe()) for k, v in node.items() if isinstance(v, Setting)}
    values, label = mixed_precision(given)
    prof = profile(version)
    for name, (value, at) in sorted(values.items()):
        file, _, line = recipe.where(at).rpartition(":") if ".py:" in at else (at, "", "")
        for section in ("model", "optimizer", "ddp"):
            if prof.field(section, name) is None:
                continue
            tree = trees.put(tree, (section, name), Setting(value, Origin(
                file=file, line=int(line) if line.isdigit() else None, key=f"mixed_precision.{name}",
                note=f"Bridge's mixed-precision set-up copies {label}'s {name} over {section}.{name} after the "
                     "overrides (training/mixed_precision.py:138)")))
    return tree


_NO_RECIPE = Unknown("the recipe this override file is merged over sets it, and the checker was not given the "
                     "recipe", "--recipe NAME (the function run_recipe.py loads), --set KEY=VALUE, or "
                     "--assume-defaults when the config really is built from the dataclass defaults")


def _unknown(recipe: Recipe | None, complete: bool) -> dict[str, Unknown]:
    """What the job holds that no input states: without a recipe, whatever the override file leaves out."""
    from checks.loaders.checkpoint import ARCH_PATHS
    from checks.models import lookup

    if complete:
        return {}
    if recipe is None:
        return {f"{section}.*": _NO_RECIPE for section in ("model", "optimizer", "ddp", "env", "run")}
    found: dict[str, Unknown] = {}
    for path, why in recipe.unresolved.items():
        section, _, name = path.partition(".")
        if section == "model" and name.startswith("transformer."):  # the GPTModelConfig layout
            name = name.removeprefix("transformer.")
        canonical = _RUN_KEYS.get((section, name)) or (f"{SECTIONS[section]}.{name}" if section in SECTIONS
                                                       else None)
        if canonical is not None:
            found[canonical] = Unknown(f"the recipe {recipe.name} sets it in a way the recipe catalogue could not "
                                       f"evaluate ({why})", f"--set {path}=VALUE")
    if recipe.hf_model and lookup(recipe.hf_model) is None:
        for path in ARCH_PATHS:
            key = "model." + path.split(".", 1)[1]  # run.vocab_size is the provider's model.vocab_size
            found.setdefault(path, Unknown(f"the recipe builds its model from {recipe.hf_model}, which the model "
                                           "catalogue does not hold", f"--set {key}=VALUE"))
    return found


def _written_back(applied: Applied, dump: trees.Tree | None, overrides: tuple[str, ...]) -> Applied:
    """The config after Bridge sets the overridden dict back onto its dataclasses.

    ``_apply_overrides`` sets only the keys the dict holds (omegaconf_utils.py:469-474), so a field an
    override deleted keeps the value it had before the overrides: the recipe's, or the dump's. A key of a
    plain dict field (``env_vars``) is really gone: the whole dict is set.
    """
    from checks.loaders.overrides import parse_override

    tree = applied.tree
    notes = list(applied.unverified)
    refused = {note.index for note in applied.refused}
    for index, text in enumerate(overrides, start=1):
        if index in refused or not text.startswith("~"):
            continue
        keys = tuple(parse_override(text).key.split("."))
        if not _is_dataclass_field(keys):
            continue
        before = trees.get(dump, keys) if dump is not None else None
        if before is not None:
            tree = trees.put(tree, keys, before)
            kept = f"the dump's value, which the checker keeps ({_shown(before)})"
        elif dump is not None:
            kept = "its value from before the overrides, which the dump leaves out (the checker reads it as unset)"
        else:
            kept = "the recipe's value, which the checker does not have (it reads the field as unset)"
        said = (f"Bridge deletes '{'.'.join(keys)}' from its override dict, then sets back only the keys the dict "
                f"holds (NVIDIA-NeMo/Megatron-Bridge@067f987d:src/megatron/bridge/training/utils/omegaconf_utils.py:"
                f"469-474), so the field keeps {kept}")
        earlier = next((i for i, n in enumerate(notes) if n.index == index), None)
        if earlier is None:
            notes.append(OverrideNote(index, text, Origin(arg=f"--set #{index}", key=".".join(keys), note=text), said,
                                      partial_delete=True))
        else:  # one finding per override: the deletion itself could not be verified either
            notes[earlier] = replace(notes[earlier], message=f"{notes[earlier].message}; if it passes, {said}",
                                     partial_delete=True)
    return replace(applied, tree=tree, unverified=tuple(notes))


def _is_dataclass_field(keys: KeyPath) -> bool:
    """Whether ``keys`` names a ConfigContainer section or a field of a section's dataclass."""
    kind = bridge_fields()["container"].get(keys[0])
    if kind is None:  # not a ConfigContainer field: nothing to set back
        return False
    if kind == "map":  # env_vars is a plain dict: it is set back whole, without a deleted entry
        return len(keys) == 1
    return len(keys) <= 2 or (keys[:2] == ("model", "transformer") and len(keys) == 3)


def _shown(node: object) -> str:
    return repr(node.value) if isinstance(node, Setting) else "a mapping"


def _dropped(setting: Setting, base: Base) -> str:
    """What Bridge does with a key that is not a field: a `+`/`++` override's key absent from the config is
    added, then skipped with a log line when the dict is set back (omegaconf_utils.py:470-474)."""
    if setting.origin.arg and setting.origin.note.startswith("+") and setting.origin.key:
        keys = tuple(setting.origin.key.split("."))
        if any(base.hidden(keys[:i]).kind == ABSENT for i in range(1, len(keys) + 1)):
            return "skipped"
    return "ignored"


def _canonical(tree: trees.Tree, request: Request, nested: bool, base: Base) -> CanonicalConfig:
    prof = profile(request.version)
    settings: dict[str, Setting] = {}
    unrecognised: list[Unrecognised] = []
    for name, node in tree.items():
        if name not in BRIDGE_SECTIONS:
            setting = node if isinstance(node, Setting) else _first_leaf(node)
            unrecognised.append(Unrecognised("", name, setting, _dropped(setting, base), _CONTAINER))
    for key, section in SECTIONS.items():
        node = tree.get(key)
        if isinstance(node, Setting):
            unrecognised.append(Unrecognised("", key, node, "crash", _CONTAINER))
            continue
        fields = dict(node or {})
        if section == "model" and isinstance(fields.get("transformer"), dict):
            fields = {**{k: v for k, v in fields.items() if k != "transformer"}, **fields["transformer"]}
        for name, value in fields.items():
            if name in TARGET_KEYS:
                continue
            if section == "env":
                if isinstance(value, Setting):
                    settings[f"env.{name}"] = value
                continue
            if isinstance(value, dict):  # a nested object: not a field, or a mapping where a field's value goes
                leaf = _first_leaf(value)
                if prof.field(section, name) is None:
                    unrecognised.append(Unrecognised(section, name, leaf, _dropped(leaf, base)))
                else:  # kept, so that its type is checked (CFG002) rather than dropped
                    settings[f"{section}.{name}"] = Setting(trees.plain(value), replace(leaf.origin, key=name))
                continue
            if prof.field(section, name) is None:
                unrecognised.append(Unrecognised(section, name, value, _dropped(value, base)))
            else:
                settings[f"{section}.{name}"] = value
    for (section, name), path in _RUN_KEYS.items():
        node = trees.get(tree, (section, name))
        if isinstance(node, Setting) and (path not in settings or node.value):
            settings[path] = node
    unrecognised = [u for u in unrecognised if (u.section, u.name) not in _RUN_KEYS]
    _sync_distributed_optimizer(settings)
    _sync_sequence_parallel(settings)
    with_environment(settings, request.environment, launch_wins=True)
    target = trees.get(tree, ("model", "_target_"))
    return CanonicalConfig(
        flavor="bridge", version=request.version, settings=settings,
        spelling=BridgeSpelling(nested), unrecognised=tuple(unrecognised), inputs=request.files,
        environment=request.environment, model_class=str(target.value) if isinstance(target, Setting) else None,
    )


def _first_leaf(tree: trees.Tree) -> Setting:
    for _, setting in trees.leaves(tree):
        return setting
    return Setting({}, Origin())


def _sync_sequence_parallel(settings: dict[str, Setting]) -> None:
    """Bridge's TransformerConfig turns sequence parallelism off without tensor parallelism before megatron-core
    sees it (Megatron-Bridge@067f987d:src/megatron/bridge/models/transformer_config.py:175-176)."""
    sp = settings.get("model.sequence_parallel")
    tp = settings.get("model.tensor_model_parallel_size")
    if sp is not None and sp.value is True and (tp is None or (isinstance(tp.value, int) and tp.value <= 1)):
        settings["model.sequence_parallel"] = Setting(False, replace(sp.origin, note=(
            "Bridge turns sequence_parallel off with tensor_model_parallel_size <= 1 "
            "(Megatron-Bridge@067f987d:src/megatron/bridge/models/transformer_config.py:175-176)")))


def _sync_distributed_optimizer(settings: dict[str, Setting]) -> None:
    enabled = [settings[p] for p in ("ddp.use_distributed_optimizer", "optimizer.use_distributed_optimizer")
               if p in settings and settings[p].value is True]
    if not enabled:
        return
    source = enabled[0]
    for path in ("ddp.use_distributed_optimizer", "optimizer.use_distributed_optimizer"):
        current = settings.get(path)
        if current is None or current.value is not True:
            settings[path] = Setting(True, Origin(source.origin.file, source.origin.line, source.origin.arg,
                                                  source.origin.key, _SYNC_NOTE))


class BridgeSpelling:
    """Hydra override keys as Bridge's ``run_recipe.py`` accepts them."""

    def __init__(self, nested: bool) -> None:
        self.nested = nested

    def key(self, path: str) -> str:
        section, _, name = path.partition(".")
        if section == "env":
            return f"env_vars.{name}"
        if section == "model" and self.nested:
            return f"model.transformer.{name}"
        return path

    def patch(self, changes: Mapping[str, Any]) -> dict[str, Any]:
        return {self.key(path): value for path, value in changes.items()}

    def override_lines(self, patch: Mapping[str, Any]) -> list[str]:
        # env_vars is a dict field: new keys need "++" under Hydra's struct mode.
        return hydra_lines(patch, {k: "++" for k in patch if k.startswith("env_vars.")})


def _env(request: Request) -> dict[str, str]:
    """The launch environment as strings, for ``${oc.env:...}``."""
    return {name: str(setting.value) for name, setting in request.environment.variables.items()}
