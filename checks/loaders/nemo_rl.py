"""NeMo-RL YAML configs: ``policy.megatron_cfg`` and ``value.megatron_cfg``, each its own model.

Follows NeMo-RL's own loading (NVIDIA-NeMo/RL@7ea279ab): ``defaults:``
inheritance with ``_override_`` sections (nemo_rl/utils/config.py:31-100),
Hydra overrides, ``${...}`` interpolation with NeMo-RL's resolvers, and the
mapping of ``megatron_cfg`` keys onto Megatron Bridge / megatron-core fields in
nemo_rl/models/megatron/setup.py (see reference/formats.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from checks.config import CanonicalConfig, Ignored, Origin, Rejected, Setting, Unrecognised
from checks.errors import InputError
from checks.loaders import interpolation
from checks.loaders import tree as trees
from checks.loaders.common import Request, apply_overrides, hydra_lines, with_environment
from checks.versions import Profile, nemo_rl_applied, nemo_rl_keys, nemo_rl_typed_keys, profile, version_key
from checks.yamlio import load_yaml

TARGETS: tuple[str, ...] = ("policy", "value")
# PPO's Megatron value model: nemo_rl/models/value/ first ships in 0.7.0 (absent at 0.6.0's 5fb58893).
_VALUE_MODEL_SINCE = "0.7.0"
_VALUE_MODEL = "NVIDIA-NeMo/RL@81aa43dd:nemo_rl/models/value/config.py"

# megatron_cfg keys with their own handling below; the other keys NeMo-RL copies onto the model config
# under the same name (nemo_rl_applied) map 1:1. A key it only reads does not reach the model: main reads
# virtual_pipeline_model_parallel_size only to refuse VPP for Nemotron Omni
# (NVIDIA-NeMo/RL@7ea279ab:nemo_rl/models/policy/workers/megatron_policy_worker.py:640).
_SPECIAL = frozenset({
    "activation_checkpointing", "recompute_granularity", "recompute_modules", "fine_grained_activation_offloading",
    "offload_modules", "cuda_graph_modules", "optimizer", "distributed_data_parallel_config", "model_overrides",
    "env_vars", "fp8_cfg", "enabled",
})
# distributed_data_parallel_config keys NeMo-RL passes on (setup.py:1424-1440); the rest are ignored.
_DDP_KEYS = frozenset({"grad_reduce_in_fp32", "overlap_grad_reduce", "overlap_param_gather",
                       "data_parallel_sharding_strategy"})
_DTYPES: Mapping[str, str] = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32", "bf16": "bf16",
                              "fp16": "fp16", "fp32": "fp32"}
SETUP = "NVIDIA-NeMo/RL@7ea279ab:nemo_rl/models/megatron/setup.py"




def load(request: Request) -> list[CanonicalConfig]:
    if len(request.files) > 1:
        raise InputError(request.files[1], "NeMo-RL reads one config file (its parents come from `defaults:`); "
                                           "give the others with --set")
    tree: trees.Tree = _load_with_defaults(request.files[0], ()) if request.files else {}
    tree = apply_overrides(tree, request.overrides)
    configs = [_canonical(tree, target, request) for target in TARGETS
               if isinstance(trees.get(tree, (target, "megatron_cfg")), dict)]
    if not configs:
        where = request.files[0] if request.files else "--set"
        raise InputError(where, "no policy.megatron_cfg or value.megatron_cfg section: "
                                "nothing here configures the Megatron backend")
    return configs


def _load_with_defaults(path: str, chain: tuple[str, ...]) -> trees.Tree:
    resolved = str(Path(path).resolve())
    if resolved in chain:
        raise InputError(path, "`defaults:` inheritance loops back to this file")
    doc = load_yaml(path)
    tree = trees.from_doc(doc)
    parents = tree.pop("defaults", None)
    if parents is None:
        return tree
    names = parents.value if isinstance(parents, Setting) else None
    if isinstance(names, str):
        names = [names]
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise InputError(path, "`defaults:` must be a file path or a list of file paths", doc.line(("defaults",)))
    base: trees.Tree = {}
    for name in names:
        parent = name if name.startswith("/") else str(Path(path).parent / name)
        if not Path(parent).is_file():
            raise InputError(path, f"`defaults:` names {name!r}, which does not exist ({parent})",
                             doc.line(("defaults",)))
        base = _merge_with_override(base, _load_with_defaults(parent, chain + (resolved,)))
    return _merge_with_override(base, tree)


def _merge_with_override(base: trees.Tree, top: trees.Tree) -> trees.Tree:
    """NeMo-RL's merge: a top-level section marked ``_override_: true`` replaces the parent's."""
    base = dict(base)
    top = dict(top)
    for key, node in list(top.items()):
        if isinstance(node, dict) and isinstance(node.get("_override_"), Setting) and node["_override_"].value:
            top[key] = {k: v for k, v in node.items() if k != "_override_"}
            base.pop(key, None)
    return trees.merge(base, top)


def _canonical(tree: trees.Tree, target: str, request: Request) -> CanonicalConfig:
    prof = profile(request.version)
    mc: trees.Tree = trees.get(tree, (target, "megatron_cfg"))
    prefix = (target, "megatron_cfg")
    tree = interpolation.resolve(tree, _wanted(tree, target))
    mc = trees.get(tree, prefix)
    keys = nemo_rl_keys(request.environment.nemo_rl_version)
    version = request.environment.nemo_rl_version
    mapper = _Mapper(prof, target, keys, nemo_rl_applied(version), nemo_rl_typed_keys(version))
    enabled = mc.get("enabled")
    mapper.map_megatron_cfg(mc)
    precision = trees.get(tree, (target, "precision"))
    if isinstance(precision, Setting) and isinstance(precision.value, str) and precision.value in _DTYPES:
        mapper.derive("model.params_dtype", _DTYPES[precision.value], precision, "from policy.precision")
    for where, path in _run_keys(target):
        node = trees.get(tree, where)
        if isinstance(node, Setting):
            mapper.settings[path] = node
    existing = {".".join(map(str, keys)) for keys, _ in trees.leaves(tree)}
    reason = None
    if isinstance(enabled, Setting) and enabled.value is False:
        reason = f"{target}.megatron_cfg.enabled is false: the Megatron backend is not used, so no Megatron " \
                 "setting applies"
    elif target == "value" and version_key(version) < version_key(_VALUE_MODEL_SINCE):
        reason = f"NeMo-RL {version} has no Megatron value model (it arrived in {_VALUE_MODEL_SINCE}: {_VALUE_MODEL})"
        mapper.unrecognised.clear()  # the whole section is unread, not only its unknown keys
    if reason is not None:
        # What the user wrote and what it would have done: a derived value (offload_modules=[] from
        # fine_grained_activation_offloading=false) is not theirs, and a false or empty one changes nothing.
        mapper.ignored.extend(Ignored(path, s, reason) for path, s in mapper.settings.items()
                              if not s.origin.note and _meaningful(s))
        mapper.settings.clear()
        mapper.rejected.clear()
    with_environment(mapper.settings, request.environment, launch_wins=False)
    return CanonicalConfig(
        flavor="nemo-rl", version=request.version, settings=mapper.settings, target=target,
        spelling=NemoRlSpelling(target, prof, existing, keys, mapper.first_class),
        unrecognised=tuple(mapper.unrecognised), ignored=tuple(mapper.ignored), rejected=tuple(mapper.rejected),
        inputs=request.files, environment=request.environment,
    )


def _run_keys(target: str) -> list[tuple[tuple[str, ...], str]]:
    """Launcher-level values the planner reads: the model, the sequence and batch sizes, the cluster."""
    return [((target, "model_name"), "run.model_name"),
            ((target, "max_total_sequence_length"), "run.seq_length"),
            ((target, "train_micro_batch_size"), "run.micro_batch_size"),
            ((target, "train_global_batch_size"), "run.global_batch_size"),
            (("cluster", "gpus_per_node"), "run.gpus_per_node"),
            (("cluster", "num_nodes"), "run.num_nodes")]


def _wanted(tree: trees.Tree, target: str) -> list[tuple[Any, ...]]:
    keys = [k for k, _ in trees.leaves(tree) if k[:2] == (target, "megatron_cfg")]
    return keys + [(target, "precision")] + [k for k, _ in _run_keys(target) if trees.get(tree, k) is not None]


class _Mapper:
    """Map one megatron_cfg subtree onto canonical settings, as setup.py applies it."""

    def __init__(self, prof: Profile, target: str, keys: frozenset[str], applied: frozenset[str],
                 typed: frozenset[str]) -> None:
        self.prof = prof
        self.target = target
        self.keys = keys  # what this NeMo-RL version reads under megatron_cfg
        self.applied = applied  # what it copies onto the model config by name
        self.typed = typed  # its MegatronConfig fields
        # the model fields a first-class megatron_cfg key sets (the rest only via model_overrides)
        self.first_class = frozenset(keys & (applied | _SPECIAL))
        self.settings: dict[str, Setting] = {}
        self.unrecognised: list[Unrecognised] = []
        self.ignored: list[Ignored] = []
        self.rejected: list[Rejected] = []

    def derive(self, path: str, value: Any, source: Setting, note: str) -> None:
        o = source.origin
        self.settings[path] = Setting(value, Origin(o.file, o.line, o.arg, o.key, note))

    def map_megatron_cfg(self, mc: trees.Tree) -> None:
        clashes = self._override_conflicts(mc)
        for name, node in mc.items():
            if name not in self.keys:
                if name in clashes:
                    continue  # not dropped: NeMo-RL raises on the model_overrides entry (rejected below)
                if _meaningful(node):  # an unused key left at null/false/{} changes nothing
                    self.unrecognised.append(Unrecognised("megatron_cfg", name, _leaf(node), "ignored"))
            elif name in _SPECIAL:
                continue
            elif isinstance(node, Setting) and name in self.applied and self.prof.field("model", name) is not None:
                value = _DTYPES.get(node.value, node.value) if name == "pipeline_dtype" else node.value
                self.settings[f"model.{name}"] = Setting(value, node.origin)
        known = {k: v for k, v in mc.items() if k in self.keys}
        self._recompute(known)
        self._fine_grained(known)
        self._cuda_graph_modules(known)
        self._fp8(known)
        self._section(known.get("optimizer"), "optimizer", "crash")
        self._ddp(known)
        self._model_overrides(known.get("model_overrides"), clashes)
        env = known.get("env_vars")
        if isinstance(env, dict):
            for key, setting in env.items():
                if isinstance(setting, Setting):
                    self.settings[f"env.{key}"] = setting

    def _recompute(self, mc: trees.Tree) -> None:
        # setup.py:1071-1090: recompute_* apply only when activation_checkpointing is true.
        switch = mc.get("activation_checkpointing")
        granularity = mc.get("recompute_granularity")
        if not (isinstance(switch, Setting) and switch.value):
            return
        value = granularity.value if isinstance(granularity, Setting) else "full"
        source = granularity if isinstance(granularity, Setting) else switch
        self.derive("model.recompute_granularity", value, source,
                    "" if source is granularity else "activation_checkpointing: true defaults to full recompute")
        if value == "full":
            self.derive("model.recompute_method", "uniform", source, "NeMo-RL sets uniform for full recompute")
            self.derive("model.recompute_num_layers", 1, source, "NeMo-RL sets 1 for full recompute")
        elif value == "selective" and isinstance(mc.get("recompute_modules"), Setting) \
                and mc["recompute_modules"].value is not None:
            self.settings["model.recompute_modules"] = mc["recompute_modules"]

    def _fine_grained(self, mc: trees.Tree) -> None:
        # setup.py:1181-1209: None keeps the checkpoint's value, False forces offload off, truthy enables.
        switch = mc.get("fine_grained_activation_offloading")
        modules = mc.get("offload_modules")
        if not isinstance(switch, Setting) or switch.value is None:
            if isinstance(modules, Setting) and modules.value:
                self.ignored.append(Ignored("model.offload_modules", modules,
                                            "fine_grained_activation_offloading is not set, so NeMo-RL leaves "
                                            "offload_modules as the checkpoint has it"))
            return
        self.settings["model.fine_grained_activation_offloading"] = switch
        if switch.value is False:
            self.derive("model.offload_modules", [], switch, "NeMo-RL clears offload_modules when "
                        "fine_grained_activation_offloading is false")
            if isinstance(modules, Setting) and modules.value:
                self.ignored.append(Ignored("model.offload_modules", modules,
                                            "NeMo-RL replaces it with [] because "
                                            "fine_grained_activation_offloading is false"))
        elif isinstance(modules, Setting):
            self.settings["model.offload_modules"] = modules

    def _cuda_graph_modules(self, mc: trees.Tree) -> None:
        node = mc.get("cuda_graph_modules")
        if not isinstance(node, Setting):
            return
        name = "cuda_graph_modules" if self.prof.field("model", "cuda_graph_modules") else "cuda_graph_scope"
        self.settings[f"model.{name}"] = node

    def _fp8(self, mc: trees.Tree) -> None:
        fp8 = mc.get("fp8_cfg")
        if not isinstance(fp8, dict) or not (isinstance(fp8.get("enabled"), Setting) and fp8["enabled"].value):
            return
        for key, field in (("fp8", "fp8"), ("fp8_recipe", "fp8_recipe"), ("fp8_param", "fp8_param")):
            if isinstance(fp8.get(key), Setting):
                self.settings[f"model.{field}"] = fp8[key]

    def _section(self, node: Any, section: str, consequence: str) -> None:
        if not isinstance(node, dict):
            return
        for name, setting in node.items():
            if self.prof.field(section, name) is None:
                self.unrecognised.append(Unrecognised(section, name, _leaf(setting), consequence))
            elif isinstance(setting, Setting):
                self.settings[f"{section}.{name}"] = setting
        distopt = node.get("use_distributed_optimizer")
        if section == "optimizer" and isinstance(distopt, Setting):
            self.derive("ddp.use_distributed_optimizer", distopt.value, distopt,
                        "NeMo-RL copies optimizer.use_distributed_optimizer into the DDP config")

    def _ddp(self, mc: trees.Tree) -> None:
        node = mc.get("distributed_data_parallel_config")
        if not isinstance(node, dict):
            return
        for name, setting in node.items():
            if name in _DDP_KEYS and isinstance(setting, Setting) and self.prof.field("ddp", name):
                self.settings[f"ddp.{name}"] = setting
            elif name not in _DDP_KEYS:
                self.ignored.append(Ignored(f"distributed_data_parallel_config.{name}", _leaf(setting),
                                            "NeMo-RL passes only grad_reduce_in_fp32, overlap_grad_reduce, "
                                            "overlap_param_gather and data_parallel_sharding_strategy on"))

    def _override_conflicts(self, mc: trees.Tree) -> frozenset[str]:
        """The ``model_overrides`` entries NeMo-RL refuses: those naming a ``MegatronConfig`` field or any key
        present directly under ``megatron_cfg``, even one it otherwise ignores (NVIDIA-NeMo/RL@7ea279ab:
        nemo_rl/models/megatron/setup.py:663-664, 760-763; only a non-empty ``model_overrides`` is checked)."""
        overrides = mc.get("model_overrides") if "model_overrides" in self.keys else None
        if not isinstance(overrides, dict) or not overrides:
            return frozenset()
        return frozenset(overrides) & ((self.typed | frozenset(mc)) - {"model_overrides"})

    def _model_overrides(self, node: Any, clashes: frozenset[str]) -> None:
        if not isinstance(node, dict):
            return
        for name in sorted(clashes):
            where = "is a MegatronConfig field" if name in self.typed else "is also set directly under megatron_cfg"
            self.rejected.append(Rejected(f"model.{name}", _leaf(node[name]), f"model_overrides: {name} {where}"))
        for name, setting in node.items():
            if self.prof.field("model", name) is None:
                # _merge_model_overrides raises AttributeError for a field the provider lacks.
                self.unrecognised.append(Unrecognised("model", name, _leaf(setting), "crash"))
            elif isinstance(setting, Setting):
                self.settings[f"model.{name}"] = setting


def _meaningful(node: Any) -> bool:
    if isinstance(node, Setting):
        return bool(node.value)
    return any(_meaningful(child) for child in node.values())


def _leaf(node: Any) -> Setting:
    if isinstance(node, Setting):
        return node
    for _, setting in trees.leaves(node):
        return setting
    return Setting({}, Origin())


class NemoRlSpelling:
    """Hydra override keys for NeMo-RL's entry points (``examples/run_grpo.py ... KEY=VALUE``)."""

    def __init__(self, target: str, prof: Profile, existing: set[str], keys: frozenset[str],
                 first_class: frozenset[str]) -> None:
        self.base = f"{target}.megatron_cfg"
        self.prof = prof
        self.existing = existing
        self.keys = keys
        self.first_class = first_class

    def key(self, path: str) -> str | None:
        """The override key for a canonical path, or None where this NeMo-RL version has no way to set it."""
        section, _, name = path.partition(".")
        if section == "optimizer":
            return f"{self.base}.optimizer.{name}"
        if section == "ddp":
            if name == "use_distributed_optimizer":
                return f"{self.base}.optimizer.use_distributed_optimizer"
            return f"{self.base}.distributed_data_parallel_config.{name}"
        if section == "env":
            return f"{self.base}.env_vars.{name}"
        if name in self.first_class:
            return f"{self.base}.{name}"
        return f"{self.base}.model_overrides.{name}" if "model_overrides" in self.keys else None

    def patch(self, changes: Mapping[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for path, value in changes.items():
            if path == "model.recompute_granularity" and value is None:
                out[f"{self.base}.activation_checkpointing"] = False
            elif path in ("model.recompute_method", "model.recompute_num_layers") and value is None:
                continue  # NeMo-RL derives these from activation_checkpointing
            elif (key := self.key(path)) is not None:
                out[key] = value
        return out

    def override_lines(self, patch: Mapping[str, Any]) -> list[str]:
        # Under Hydra's struct mode a key the YAML lacks must be added with "++".
        return hydra_lines(patch, {k: "++" for k in patch if k not in self.existing})
