"""NeMo-RL YAML configs: every Megatron model the config builds, each its own canonical config.

Follows NeMo-RL's own loading (NVIDIA-NeMo/RL@7ea279ab): ``defaults:``
inheritance with ``_override_`` sections (nemo_rl/utils/config.py:31-100),
Hydra overrides, ``${...}`` interpolation with NeMo-RL's resolvers, and the
mapping of ``megatron_cfg`` keys onto Megatron Bridge / megatron-core fields in
nemo_rl/models/megatron/setup.py (see reference/formats.md).

The models, each labelled with the ``target`` its findings carry (reference/nemo-rl.md, "Which models"):
``policy``; ``value`` (PPO's value model); ``teacher`` (distillation); ``teacher:<alias>`` (on-policy
distillation's non-colocated teachers, built from ``policy.megatron_cfg``); ``generation`` (GRPO's
dedicated Megatron generation model, also built from ``policy.megatron_cfg``). Every one reaches
``validate_and_set_config`` through a Megatron worker. A ``megatron_cfg`` anywhere else (cross-tokenizer
distillation's ``teachers:`` list, an environment's model) is never built with Megatron: its offload
settings are reported as unused rather than dropped.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from checks.config import (
    CLEARED_WITH_SWITCH,
    CanonicalConfig,
    Ignored,
    Origin,
    Rejected,
    Setting,
    Unknown,
    Unrecognised,
)
from checks.errors import InputError
from checks.formats import normalise
from checks.loaders import interpolation
from checks.loaders import tree as trees
from checks.loaders.common import Request, apply_overrides, hydra_lines, with_environment
from checks.versions import Profile, nemo_rl_applied, nemo_rl_keys, nemo_rl_typed_keys, profile, version_key
from checks.yamlio import YamlDoc, load_yaml

RL = "NVIDIA-NeMo/RL@7ea279ab:"
SETUP = f"{RL}nemo_rl/models/megatron/setup.py"
# The sections that hold a megatron_cfg of their own. The distillation teacher is built by
# nemo_rl/algorithms/distillation.py:487-495 from master_config.teacher (every release, 0.4.0 on).
TARGETS: tuple[str, ...] = ("policy", "value", "teacher")
_OPD = "on_policy_distillation"
_GENERATION = "policy.generation.mcore_generation_config"
# What builds each kind of model, and the first NeMo-RL release that has it (tags in checks/data/nemo_rl_keys.json).
_SINCE: Mapping[str, tuple[str, str]] = {
    # PPO's Megatron value model: nemo_rl/models/value/ first ships in 0.7.0 (absent at 0.6.0's 5fb58893).
    "value": ("0.7.0", "NVIDIA-NeMo/RL@81aa43dd:nemo_rl/models/value/config.py"),
    # MOPD (PR #2780, 2026-06-25): nemo_rl/models/policy/teacher_worker_group.py, absent at 0.6.0.
    "opd-teacher": ("0.7.0", "NVIDIA-NeMo/RL@81aa43dd:nemo_rl/models/policy/teacher_worker_group.py"),
    # Megatron generation (PR #2355, 2026-06-16): nemo_rl/models/generation/megatron/, absent at 0.6.0.
    "generation": ("0.7.0", "NVIDIA-NeMo/RL@81aa43dd:nemo_rl/models/generation/megatron/megatron_generation.py"),
}
_WHAT: Mapping[str, str] = {"value": "Megatron value model", "opd-teacher": "on-policy-distillation teachers",
                            "generation": "Megatron generation backend"}
# Where each inference-only kind is built with init_optimizer=False, and the forward-only pass it runs.
_WORKER = f"{RL}nemo_rl/models/policy/workers/megatron_policy_worker.py"
_INFERENCE: Mapping[str, tuple[str, str]] = {
    "teacher": (f"{RL}nemo_rl/algorithms/distillation.py:487-495",
                f"get_topk_logits under torch.no_grad, {_WORKER}:2056"),
    "opd-teacher": (f"{RL}nemo_rl/models/policy/teacher_worker_group.py:203-208",
                    f"get_logprobs under torch.no_grad, {_WORKER}:1833"),
    "generation": (f"{RL}nemo_rl/models/generation/megatron/megatron_generation.py:154-162",
                   "megatron-core's inference engine under torch.inference_mode, NVIDIA/Megatron-LM@d98e8a64:"
                   "megatron/core/inference/text_generation_controllers/text_generation_controller.py:1755"),
}
# TeacherResourceConfig's declared fields (nemo_rl/algorithms/opd.py:39-54, the same at 0.7.0); any other key
# there is folded into the teacher's megatron_cfg (teacher_worker_group.py:87-89).
_RESOURCE_FIELDS = frozenset({"tensor_model_parallel_size", "pipeline_model_parallel_size", "context_parallel_size",
                              "expert_model_parallel_size", "num_nodes", "gpus_per_node", "precision",
                              "micro_batch_size", "megatron_cfg_overrides"})
_TEACHER_LAYOUT = ("tensor_model_parallel_size", "pipeline_model_parallel_size", "context_parallel_size",
                   "expert_model_parallel_size")
# MCoreGenerationSpecificArgs (nemo_rl/models/generation/megatron/config.py:21-66; 0.7.0 adds async_engine): read
# by the inference engine, not unknown megatron_cfg keys, once merged into the generation model's megatron_cfg.
_GENERATION_KEYS = frozenset({
    "async_engine", "block_size_tokens", "buffer_size_gb", "cuda_graph_impl", "enable_chunked_prefill",
    "enable_prefix_caching", "expose_http_server", "inference_cuda_graph_scope", "kv_cache_management_mode",
    "logging_step_interval", "mamba_inference_conv_states_dtype", "mamba_inference_ssm_states_dtype",
    "materialize_only_last_token_logits", "max_model_len", "max_tokens", "num_cuda_graphs", "num_speculative_tokens",
    "parsers", "refit_backend", "use_cuda_graphs_for_non_decode_steps",
})

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


@dataclass(frozen=True)
class _Model:
    """One Megatron model NeMo-RL builds from the config: what it runs with, and where its keys are written."""

    target: str  # the label its findings carry
    kind: str  # policy | value | teacher | opd-teacher | generation | unbuilt
    mc: trees.Tree  # the megatron_cfg it runs with
    base: str  # the Hydra prefix of mc's keys
    trains: bool  # False: built with init_optimizer=False, and only ever runs forward passes
    section: tuple[str, ...] = ()  # where NeMo-RL reads its precision, model_name and batch sizes
    own: tuple[str, ...] = ()  # origin-key prefixes of the settings its own section gives (not inherited)
    homes: Mapping[str, str] = field(default_factory=dict)  # a built-from-policy model: key -> where to set it
    home: str | None = None  # ... and where a key it does not set yet goes
    unused: str | None = None  # why NeMo-RL never builds a Megatron model from this section
    run: Mapping[str, Setting] = field(default_factory=dict)  # run.* values not read from ``section``

    def owns(self, setting: Setting) -> bool:
        return setting.origin.key.startswith(self.own)


def load(request: Request) -> list[CanonicalConfig]:
    if len(request.files) > 1:
        raise InputError(request.files[1], "NeMo-RL reads one config file (its parents come from `defaults:`); "
                                           "give the others with --set")
    tree: trees.Tree = _load_with_defaults(request.files[0], ()) if request.files else {}
    applied = apply_overrides(tree, request.overrides, has_file=bool(request.files),
                             at=request.override_at)  # the file is the whole config
    tree = applied.tree
    # The switches first: they decide which sections NeMo-RL reads, and only those are resolved.
    resolver = interpolation.Resolver(tree, _env(request))  # built into OmegaConf once for both steps
    tree = resolver.resolve(tree, _SWITCHES)
    tree = resolver.resolve(tree, _wanted(tree))
    existing = {".".join(map(str, keys)) for keys, _ in trees.leaves(tree)}
    configs = [_canonical(tree, model, request, existing) for model in _models(tree)]
    if not configs:
        where = request.files[0] if request.files else "--set"
        raise InputError(where, "no policy.megatron_cfg, value.megatron_cfg or teacher.megatron_cfg section: "
                                "nothing here configures the Megatron backend (on-policy-distillation teachers "
                                "and the Megatron generation model are built from policy.megatron_cfg)")
    return applied.attach(configs)


MAX_DEFAULTS_DEPTH = 32  # `defaults:` parents above a file; NeMo-RL's own examples go 3 deep
MAX_DEFAULTS_FILES = 256  # distinct files one config inherits from


def _load_with_defaults(path: str, chain: tuple[str, ...], loaded: dict[str, trees.Tree] | None = None) -> trees.Tree:
    """The file merged over its `defaults:` parents, as NeMo-RL's ``load_config_with_inheritance`` does
    (NVIDIA-NeMo/RL@7ea279ab:nemo_rl/utils/config.py:51-95): parents merged in order, then the file itself.

    A parent named twice (a diamond, or a list naming one file in each entry) is read once: upstream reads it
    again and gets the same tree, and reading it again at every level would make a few small files take
    exponential time.
    """
    loaded = {} if loaded is None else loaded
    resolved = str(Path(path).resolve())
    if resolved in chain:
        raise InputError(path, "`defaults:` inheritance loops back to this file")
    if len(chain) > MAX_DEFAULTS_DEPTH:
        raise InputError(path, f"`defaults:` inheritance deeper than {MAX_DEFAULTS_DEPTH} files is refused")
    if resolved in loaded:
        return loaded[resolved]
    if len(loaded) >= MAX_DEFAULTS_FILES:
        raise InputError(path, f"`defaults:` inheritance from more than {MAX_DEFAULTS_FILES} files is refused")
    doc = load_yaml(path)
    tree = _tree_of(doc)
    parents = tree.pop("defaults", None)
    if parents is None:
        loaded[resolved] = tree
        return tree
    names = parents.value if isinstance(parents, Setting) else None
    if isinstance(names, str):
        names = [names]
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise InputError(path, "`defaults:` must be a file path or a list of file paths", doc.line(("defaults",)))
    base: trees.Tree = {}
    for name in names:
        parent = name if name.startswith("/") else str(Path(path).parent / name)  # config.py:23-27
        if not Path(parent).exists():
            raise InputError(path, f"`defaults:` names {name!r}, which does not exist ({parent})",
                             doc.line(("defaults",)))
        if not Path(parent).is_file():
            raise InputError(path, f"`defaults:` names {name!r}, which is not a regular file ({parent})",
                             doc.line(("defaults",)))
        base = _merge_with_override(base, _load_with_defaults(parent, chain + (resolved,), loaded))
    loaded[resolved] = merged = _merge_with_override(base, tree)
    return merged


# Each parsed file's tree, as load_yaml keeps each parsed file: every config in a run rebuilt its `defaults:` bases.
_TREES: dict[int, tuple[YamlDoc, trees.Tree]] = {}
MAX_TREES = 4096


def _tree_of(doc: YamlDoc) -> trees.Tree:
    hit = _TREES.get(id(doc))
    if hit is None or hit[0] is not doc:
        if len(_TREES) >= MAX_TREES:
            _TREES.clear()
        hit = _TREES[id(doc)] = (doc, trees.from_doc(doc))
    return dict(hit[1])  # a copy of the top level, which the caller changes; no subtree is changed in place


def _merge_with_override(base: trees.Tree, top: trees.Tree) -> trees.Tree:
    """NeMo-RL's merge: a top-level section marked ``_override_: true`` replaces the parent's."""
    base = dict(base)
    top = dict(top)
    for key, node in list(top.items()):
        if isinstance(node, dict) and isinstance(node.get("_override_"), Setting) and node["_override_"].value:
            top[key] = {k: v for k, v in node.items() if k != "_override_"}
            base.pop(key, None)
    return trees.merge(base, top)


# --- which models ---------------------------------------------------------------------------------

_SWITCHES: tuple[tuple[str, ...], ...] = (
    (_OPD, "enabled"), (_OPD, "non_colocated_teachers", "enabled"), (_OPD, "deduplicate_shared_teacher_checkpoints"),
    ("policy", "generation", "backend"), ("policy", "generation", "colocated", "enabled"),
    ("policy", "dtensor_cfg", "enabled"), ("policy", "reward_model_cfg", "enabled"),
)


def _value(tree: trees.Tree, *keys: str) -> Any:
    node = trees.get(tree, keys)
    return node.value if isinstance(node, Setting) else None


def _opd_teachers_on(tree: trees.Tree) -> bool:
    # is_non_colocated_teachers_enabled (nemo_rl/algorithms/opd.py:106-112), read by grpo.py:783.
    return bool(_value(tree, _OPD, "enabled")) and bool(_value(tree, _OPD, "non_colocated_teachers", "enabled"))


def _dedicated_generation(tree: trees.Tree) -> bool:
    # GRPO builds a Megatron generation model of its own when generation is not colocated (grpo.py:1203-1214);
    # colocated generation shares the training model (megatron_generation.py:136-143).
    return "grpo" in tree and _value(tree, "policy", "generation", "backend") == "megatron" \
        and _value(tree, "policy", "generation", "colocated", "enabled") is False


def _wanted(tree: trees.Tree) -> list[tuple[Any, ...]]:
    """The leaves NeMo-RL reads to build its Megatron models (only these are interpolated)."""
    sections: list[tuple[str, ...]] = [(target, "megatron_cfg") for target in TARGETS]
    if _opd_teachers_on(tree):
        sections += [(_OPD, "teacher_model_by_agent_name"), (_OPD, "non_colocated_teachers")]
    if _dedicated_generation(tree):
        sections.append(tuple(_GENERATION.split(".")))
    keys = [k for k, _ in trees.leaves(tree) if any(k[:len(s)] == s for s in sections)]
    for target in TARGETS:
        keys += [(target, "precision")] + [k for k, _ in _run_keys((target,))]
    return [k for k in keys if trees.get(tree, k) is not None]


def _models(tree: trees.Tree) -> list[_Model]:
    models: list[_Model] = []
    xtoken = isinstance(_value(tree, "teachers"), list)  # cross-tokenizer distillation's MasterConfig.teachers
    for target in TARGETS:
        mc = trees.get(tree, (target, "megatron_cfg"))
        if isinstance(mc, dict):
            models.append(_Model(target, target, mc, f"{target}.megatron_cfg", trains=target != "teacher",
                                 section=(target,), own=(f"{target}.",), unused=_unread(tree, target, xtoken)))
    policy = trees.get(tree, ("policy", "megatron_cfg"))
    if isinstance(policy, dict):
        models += _opd_teachers(tree, policy)
        if _dedicated_generation(tree):
            models.append(_generation(tree, policy))
    models += _xtoken_teachers(tree)
    models += _elsewhere(tree, ())
    return models


def _unread(tree: trees.Tree, target: str, xtoken: bool) -> str | None:
    if target == "teacher" and xtoken:
        return ("cross-tokenizer distillation reads its `teachers:` list, not `teacher:` "
                f"({RL}nemo_rl/algorithms/xtoken_off_policy_distillation.py:199-201, :234)")
    if target == "policy" and _value(tree, "policy", "reward_model_cfg", "enabled") \
            and _value(tree, "policy", "megatron_cfg", "enabled") is not False:
        return (f"NeMo-RL refuses a reward model (policy.reward_model_cfg.enabled) on the Megatron backend and stops "
                f"at set-up with NotImplementedError, before any Megatron setting applies ({SETUP}:378-382)")
    return None


def _opd_teachers(tree: trees.Tree, policy: trees.Tree) -> list[_Model]:
    """One model per distinct teacher checkpoint, as create_teacher_configs_from_opd_config builds them
    (nemo_rl/models/policy/teacher_worker_group.py:59-108)."""
    names = trees.get(tree, (_OPD, "teacher_model_by_agent_name"))
    if not _opd_teachers_on(tree) or not isinstance(names, dict):
        return []
    dedupe = _value(tree, _OPD, "deduplicate_shared_teacher_checkpoints") is not False  # default True
    seen: set[Any] = set()
    models = []
    for alias, name in names.items():
        if not isinstance(name, Setting) or (dedupe and repr(name.value) in seen):  # repr: a list is unhashable
            continue
        seen.add(repr(name.value))
        models.append(_opd_teacher(tree, policy, alias, name))
    return models


def _opd_teacher(tree: trees.Tree, policy: trees.Tree, alias: str, name: Setting) -> _Model:
    """The teacher worker's megatron_cfg: the policy's, with the resource config's layout and its
    ``megatron_cfg_overrides`` set key by key (teacher_worker_group.py:132-151)."""
    default_home = f"{_OPD}.non_colocated_teachers.default_teacher_cfg"
    alias_home = f"{_OPD}.non_colocated_teachers.teacher_overrides.{alias}"
    resource: dict[str, tuple[Any, str]] = {}
    for home in (default_home, alias_home):  # the alias's keys replace the defaults' (teacher_worker_group.py:83)
        node = trees.get(tree, tuple(home.split(".")))
        if isinstance(node, dict):
            resource.update((key, (value, home)) for key, value in node.items())
    applied = {key: (value, home) for key, (value, home) in resource.items() if key not in _RESOURCE_FIELDS}
    explicit, explicit_home = resource.get("megatron_cfg_overrides", (None, ""))
    if isinstance(explicit, dict):  # explicit overrides win over the folded-in extra keys (:87-89)
        applied.update((key, (value, f"{explicit_home}.megatron_cfg_overrides")) for key, value in explicit.items())
    mc = dict(policy)
    mc["enabled"] = Setting(True, Origin(note="NeMo-RL turns Megatron on for a teacher (teacher_worker_group.py:137)"))
    homes: dict[str, str] = {}
    for key in _TEACHER_LAYOUT:
        given, home = resource.get(key, (None, alias_home))
        mc[key] = given if isinstance(given, Setting) else Setting(1, Origin(
            key=f"{alias_home}.{key}", note="TeacherResourceConfig's default (nemo_rl/algorithms/opd.py:46-49)"))
        homes[key] = home
    for key, (value, home) in applied.items():
        mc[key] = value
        homes[key] = home
    run = {path: setting for key, path, default in (("micro_batch_size", "run.micro_batch_size", 4),
                                                   ("num_nodes", "run.num_nodes", 1),
                                                   ("gpus_per_node", "run.gpus_per_node", 8))
           for setting in [_given_or_default(resource, key, default, alias_home)]}
    run["run.model_name"] = name
    unused = None
    if _value(tree, "policy", "dtensor_cfg", "enabled"):
        unused = (f"NeMo-RL refuses an on-policy-distillation teacher while the policy runs on DTensor "
                  f"(\"only the Megatron backend is supported for teachers\", {RL}nemo_rl/models/policy/"
                  "teacher_worker_group.py:155-159)")
    return _Model(f"teacher:{alias}", "opd-teacher", mc, "policy.megatron_cfg", trains=False, section=("policy",),
                  own=(f"{_OPD}.",), homes=homes, home=alias_home, unused=unused, run=run)


def _given_or_default(resource: Mapping[str, tuple[Any, str]], key: str, default: int, home: str) -> Setting:
    given = resource.get(key, (None, ""))[0]
    if isinstance(given, Setting):
        return given
    return Setting(default, Origin(key=f"{home}.{key}", note="TeacherResourceConfig's default (opd.py:50-53)"))


def _generation(tree: trees.Tree, policy: trees.Tree) -> _Model:
    """The dedicated generation model: the policy's megatron_cfg with mcore_generation_config over it, key by
    key, and activation checkpointing off (megatron_generation.py:44-53, generation/megatron/config.py:74-97)."""
    own = trees.get(tree, tuple(_GENERATION.split(".")))
    mc = {**policy, **(own if isinstance(own, dict) else {}),
          "activation_checkpointing": Setting(False, Origin(
              note=f"NeMo-RL turns activation checkpointing off for generation ({RL}nemo_rl/models/generation/"
                   "megatron/config.py:81)"))}
    return _Model("generation", "generation", mc, "policy.megatron_cfg", trains=False, section=("policy",),
                  own=("policy.generation.",), home=_GENERATION)


def _xtoken_teachers(tree: trees.Tree) -> list[_Model]:
    """Cross-tokenizer distillation's ``teachers:`` entries: NeMo-RL asserts every one runs on DTensor."""
    node = trees.get(tree, ("teachers",))
    if not isinstance(node, Setting) or not isinstance(node.value, list):
        return []
    models = []
    for index, item in enumerate(node.value):
        if isinstance(item, dict) and isinstance(item.get("megatron_cfg"), dict):
            base = f"teachers.{index}.megatron_cfg"
            mc = trees.from_plain(item["megatron_cfg"], node.origin, ("teachers", str(index), "megatron_cfg"))
            models.append(_Model(
                f"teachers.{index}", "unbuilt", mc, base,
                trains=False, own=(f"teachers.{index}.",),
                unused=("cross-tokenizer distillation runs every teacher on DTensor: it asserts teachers[i]."
                        f"dtensor_cfg.enabled ({RL}nemo_rl/algorithms/xtoken_off_policy_distillation.py:254-258), "
                        f"and NeMo-RL refuses Megatron and DTensor together ({RL}nemo_rl/models/policy/"
                        "lm_policy.py:121-125)")))
    return models


def _elsewhere(tree: trees.Tree, keys: tuple[str, ...]) -> Iterator[_Model]:
    """Any other ``megatron_cfg`` mapping: NeMo-RL builds no Megatron model from it."""
    for name, node in tree.items():
        if not isinstance(node, dict):
            continue
        path = keys + (name,)
        if name == "megatron_cfg" and keys and keys not in [(t,) for t in TARGETS]:
            label = ".".join(keys)
            why = (f"NeMo-RL builds no Megatron model from {label}: at 7ea279ab they come from policy, value, "
                   f"teacher, {_OPD} and policy.generation only")
            if keys[0] == "env":
                why = ("NeMo-RL runs an environment's model on DTensor: the reward-model environment sets "
                       f"dtensor_cfg.enabled ({RL}nemo_rl/environments/reward_model_environment.py:139), and NeMo-RL "
                       f"refuses Megatron and DTensor together ({RL}nemo_rl/models/policy/lm_policy.py:121-125)")
            yield _Model(label, "unbuilt", node, f"{label}.megatron_cfg", trains=False, own=(f"{label}.",), unused=why)
        else:
            yield from _elsewhere(node, path)


# --- one model ------------------------------------------------------------------------------------

def _canonical(tree: trees.Tree, model: _Model, request: Request, existing: set[str]) -> CanonicalConfig:
    prof = profile(request.version)
    version = request.environment.nemo_rl_version
    keys = nemo_rl_keys(version) | (_GENERATION_KEYS if model.kind == "generation" else frozenset())
    mapper = _Mapper(prof, model.target, keys, nemo_rl_applied(version), nemo_rl_typed_keys(version))
    enabled = model.mc.get("enabled")
    mapper.map_megatron_cfg(model.mc)
    if model.section:
        where = ".".join(model.section)
        precision = trees.get(tree, (*model.section, "precision"))
        if isinstance(precision, Setting) and isinstance(precision.value, str) and precision.value in _DTYPES:
            mapper.derive("model.params_dtype", _DTYPES[precision.value], precision, f"from {where}.precision")
        for keys_at, path in _run_keys(model.section):
            node = trees.get(tree, keys_at)
            if isinstance(node, Setting):
                mapper.settings[path] = node
    mapper.settings.update(model.run)
    unknown = _checkpoint(mapper.settings, prof)
    reason, whole = _not_built(model, enabled, version)
    if reason is not None:
        if whole:  # the whole section is unread, not only its unknown keys: they are unused like the rest
            mapper.ignored.extend(Ignored(f"{'model' if u.section == 'megatron_cfg' else u.section}.{u.name}",
                                          u.setting, reason) for u in mapper.unrecognised if model.owns(u.setting))
            mapper.unrecognised.clear()
        # What the user wrote and what it would have done: a derived value (offload_modules=[] from
        # fine_grained_activation_offloading=false) is not theirs, and a false or empty one changes nothing.
        # A model built from the policy's megatron_cfg leaves the policy's own settings to the policy.
        mapper.ignored.extend(Ignored(path, s, reason) for path, s in mapper.settings.items()
                              if _written(mapper, path, s) and model.owns(s) and _meaningful(s))
        mapper.settings.clear()
        mapper.rejected.clear()
    elif not model.trains:
        mapper.ignored.extend(_inert(model, mapper))
    with_environment(mapper.settings, request.environment, launch_wins=False)
    # What NeMo-RL does with the model, for the planner: trains it, runs it forward only, or never builds it.
    role = "unused" if reason is not None else "train" if model.trains else "inference"
    return CanonicalConfig(
        flavor="nemo-rl", version=request.version, settings=mapper.settings, target=model.target,
        role=role, role_reason=reason or _role_note(model),
        spelling=NemoRlSpelling(model.base, prof, existing, keys, mapper.first_class, homes=model.homes,
                                home=model.home, mc=model.mc),
        unrecognised=tuple(mapper.unrecognised), ignored=tuple(mapper.ignored), rejected=tuple(mapper.rejected),
        inputs=request.files, environment=request.environment, unknown=unknown, launch=request.launch,
    )


def _checkpoint(settings: dict[str, Setting], prof: Profile) -> dict[str, Unknown]:
    """The model's dimensions, from the Hugging Face checkpoint ``model_name`` names (the model catalogue).

    NeMo-RL builds the Megatron model from the checkpoint's config through Megatron Bridge, then sets what
    ``megatron_cfg`` gives over it (nemo_rl/models/megatron/setup.py), so a value the config states wins. A
    checkpoint the catalogue does not hold leaves the dimensions unknown.
    """
    from checks.loaders.checkpoint import ARCH_PATHS, CATALOGUE, values
    from checks.models import lookup

    name = settings.get("run.model_name")
    if name is None or not isinstance(name.value, str):
        return {}
    arch = lookup(name.value)
    if arch is None:
        from checks.models import closest

        near = closest(name.value)
        hint = f" (closest ids it holds: {', '.join(near)})" if near else ""
        return {path: Unknown(f"{name.value}, the checkpoint {name.origin.key or 'model_name'} names, is not in the "
                              f"model catalogue (checks/data/models.json){hint}",
                              "the field under megatron_cfg (NeMo-RL sets it over the checkpoint's), or a "
                              "model_name the catalogue holds") for path in ARCH_PATHS if path not in settings}
    for path, value in values(arch, prof).items():
        settings.setdefault(path, Setting(value, Origin(file=f"{CATALOGUE}{arch.hf_id}", key=path,
                                                        note=arch.source)))
    return {}


def _role_note(model: _Model) -> str:
    if model.trains:
        return "NeMo-RL trains it"
    built = _INFERENCE[model.kind][0]
    return f"{_name(model)} only runs forward passes: NeMo-RL builds it without an optimizer ({built})"


def _name(model: _Model) -> str:
    return "the teacher" if "teacher" in model.kind else f"the {model.target} model"


def _not_built(model: _Model, enabled: Any, version: str) -> tuple[str | None, bool]:
    """Why NeMo-RL builds no Megatron model from this section, and whether that leaves every key unread."""
    if model.unused is not None:
        return model.unused, True
    if isinstance(enabled, Setting) and enabled.value is False:
        return (f"{model.base}.enabled is false: the Megatron backend is not used, so no Megatron setting applies",
                False)
    if model.kind in _SINCE and version_key(version) < version_key(_SINCE[model.kind][0]):
        since, anchor = _SINCE[model.kind]
        return f"NeMo-RL {version} has no {_WHAT[model.kind]} (it arrived in {since}: {anchor})", True
    return None, False


def _inert(model: _Model, mapper: _Mapper) -> Iterator[Ignored]:
    """Offloading that an inference-only model validates but never uses (a silent no-op), where its own
    section asks for it; NeMo-RL still validates every setting, so the rules still run on them."""
    built, forward = _INFERENCE[model.kind]
    name = _name(model)
    for path, why in (
        ("optimizer.optimizer_cpu_offload",
         f"{name} only runs forward passes and is built with init_optimizer=False ({built}), so it has no "
         f"optimizer to offload ({SETUP}:1878-1886); NeMo-RL still validates the optimizer settings"),
        ("model.fine_grained_activation_offloading",
         f"{name} only runs forward passes ({forward}), which save no activations for backward; fine-grained "
         "offloading moves only tensors saved for backward (NVIDIA/Megatron-LM@d98e8a64:megatron/core/"
         "pipeline_parallel/fine_grained_activation_offload.py:506)"),
    ):
        setting = mapper.settings.get(path)
        if setting is not None and setting.value is True and _written(mapper, path, setting) and model.owns(setting):
            yield Ignored(path, setting, why)


def _written(mapper: _Mapper, path: str, setting: Setting) -> bool:
    """A Megatron setting the user gave (in a file or with --set), not one NeMo-RL derives or defaults."""
    given = bool(setting.origin.file or setting.origin.arg)
    return given and path not in mapper.derived and not path.startswith("run.")


def _run_keys(section: tuple[str, ...]) -> list[tuple[tuple[str, ...], str]]:
    """Launcher-level values the planner reads: the model, the sequence and batch sizes, the cluster."""
    return [((*section, "model_name"), "run.model_name"),
            ((*section, "max_total_sequence_length"), "run.seq_length"),
            ((*section, "train_micro_batch_size"), "run.micro_batch_size"),
            ((*section, "train_global_batch_size"), "run.global_batch_size"),
            (("cluster", "gpus_per_node"), "run.gpus_per_node"),
            (("cluster", "num_nodes"), "run.num_nodes")]


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
        self.derived: set[str] = set()  # paths whose value NeMo-RL derives rather than the user writes

    def derive(self, path: str, value: Any, source: Setting, note: str, derived: str = "") -> None:
        o = source.origin
        self.settings[path] = Setting(value, Origin(o.file, o.line, o.arg, o.key, note, derived))
        if note:
            self.derived.add(path)

    def map_megatron_cfg(self, mc: trees.Tree) -> None:
        clashes = self._override_conflicts(mc)
        for name, node in mc.items():
            if name not in self.keys:
                if name in clashes:
                    continue  # not dropped: NeMo-RL raises on the model_overrides entry (rejected below)
                if _meaningful(node):  # an unused key left at null/false/{} changes nothing
                    # NeMo-RL versions with model_overrides set model fields only there (setup.py)
                    home = f"megatron_cfg.model_overrides.{normalise(name)}" if "model_overrides" in self.keys \
                        and normalise(name) in self.prof.names("model") else ""
                    self.unrecognised.append(Unrecognised("megatron_cfg", name, _leaf(node), "ignored",
                                                          "a key NeMo-RL reads under megatron_cfg", home))
            elif name in _SPECIAL:
                continue
            elif isinstance(node, Setting) and name in self.applied and self.prof.field("model", name) is not None:
                value = _DTYPES.get(node.value, node.value) if name == "pipeline_dtype" and \
                    isinstance(node.value, str) else node.value  # a list is unhashable: left for CFG002
                self.settings[f"model.{name}"] = Setting(value, node.origin)
            elif isinstance(node, dict) and name in self.applied and self.prof.field("model", name) is not None:
                # a mapping where a field's value goes: kept, so that its type is checked (CFG002), not dropped
                self.settings[f"model.{name}"] = Setting(trees.plain(node), _leaf(node).origin)
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
        if isinstance(switch, dict) and switch:  # truthy to NeMo-RL's `if`; kept for its type check (CFG002)
            switch = Setting(trees.plain(switch), _leaf(switch).origin)
        if isinstance(modules, dict) and modules:
            modules = Setting(trees.plain(modules), _leaf(modules).origin)
        if not isinstance(switch, Setting) or switch.value is None:
            if isinstance(modules, Setting) and modules.value:
                self.ignored.append(Ignored("model.offload_modules", modules,
                                            "fine_grained_activation_offloading is not set, so NeMo-RL leaves "
                                            "offload_modules as the checkpoint has it"))
            return
        self.settings["model.fine_grained_activation_offloading"] = switch
        if switch.value is False:
            self.derive("model.offload_modules", [], switch, "NeMo-RL clears offload_modules when "
                        "fine_grained_activation_offloading is false", CLEARED_WITH_SWITCH)
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
        for key in ("fp8", "fp8_recipe", "fp8_param"):
            if isinstance(fp8.get(key), Setting):
                self.settings[f"model.{key}"] = fp8[key]

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
    """Hydra override keys for NeMo-RL's entry points (``examples/run_grpo.py ... KEY=VALUE``).

    A model NeMo-RL builds from the policy's megatron_cfg (an on-policy-distillation teacher, the generation
    model) is changed where its own keys are set: ``homes`` per top-level key, else ``home``. NeMo-RL sets
    those keys whole (teacher_worker_group.py:150-151, generation/megatron/config.py:78-80), so a nested key
    the model inherits is written as the whole section with the change.
    """

    def __init__(self, base: str, prof: Profile, existing: set[str], keys: frozenset[str],
                 first_class: frozenset[str], homes: Mapping[str, str] | None = None, home: str | None = None,
                 mc: trees.Tree | None = None) -> None:
        self.base = base
        self.prof = prof
        self.existing = existing
        self.keys = keys
        self.first_class = first_class
        self.homes = dict(homes or {})
        self.home = home
        self.mc = mc or {}

    def key(self, path: str) -> str | None:
        """The override key for a canonical path, or None where this NeMo-RL version has no way to set it."""
        name = self._name(path)
        return None if name is None else f"{self._home(name)}.{name}"

    def _name(self, path: str) -> str | None:
        """The key under megatron_cfg."""
        section, _, name = path.partition(".")
        if section == "optimizer":
            return f"optimizer.{name}"
        if section == "ddp":
            if name == "use_distributed_optimizer":
                return "optimizer.use_distributed_optimizer"
            return f"distributed_data_parallel_config.{name}"
        if section == "env":
            return f"env_vars.{name}"
        if name in self.first_class:
            return name
        return f"model_overrides.{name}" if "model_overrides" in self.keys else None

    def _home(self, name: str) -> str:
        return self.homes.get(name.split(".")[0], self.home or self.base)

    def patch(self, changes: Mapping[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for path, value in changes.items():
            if path == "model.recompute_granularity" and value is None:
                name: str | None = "activation_checkpointing"
                value = False
            elif path in ("model.recompute_method", "model.recompute_num_layers") and value is None:
                continue  # NeMo-RL derives these from activation_checkpointing
            else:
                name = self._name(path)
            if name is None:
                continue
            top, _, rest = name.partition(".")
            home = self._home(name)
            if rest and home != self.base and not self._set_at_home(top, home):
                whole = out.setdefault(f"{home}.{top}", _plain(self.mc.get(top)))
                _assign(whole, rest.split("."), value)
            else:
                out[f"{home}.{name}"] = value
        return out

    def _set_at_home(self, top: str, home: str) -> bool:
        """Whether the section ``top`` is itself written at ``home`` (so a key inside it can be set alone)."""
        return any(key.startswith(f"{home}.{top}.") for key in self.existing)

    def override_lines(self, patch: Mapping[str, Any]) -> list[str]:
        # Under Hydra's struct mode a key the YAML lacks must be added with "++".
        return hydra_lines(patch, {k: "++" for k in patch if k not in self.existing})


def _plain(node: Any) -> dict[str, Any]:
    return trees.plain(node) if isinstance(node, dict) else {}


def _assign(data: dict[str, Any], keys: list[str], value: Any) -> None:
    for key in keys[:-1]:
        child = data.get(key)
        data[key] = child = dict(child) if isinstance(child, dict) else {}
        data = child
    data[keys[-1]] = value


def _env(request: Request) -> dict[str, str]:
    """The launch environment as strings, for ``${oc.env:...}``."""
    return {name: str(setting.value) for name, setting in request.environment.variables.items()}
