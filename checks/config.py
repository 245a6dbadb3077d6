"""The canonical config: what every loader produces and the only thing rules read.

Keys are grouped into the five :data:`SECTIONS` and written as dotted paths,
``"model.cpu_offloading"``: megatron-core field names (``model``, ``optimizer``,
``ddp``), environment variables (``env``) and what the front ends hold beyond
megatron-core's dataclasses (``run``, each key declared in :data:`RUN_KEYS`).
Every value the user gave is a :class:`Setting` that remembers where it came
from, so a finding can point at the line to edit and a patch can be written back
in the input's own spelling.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Protocol

# What each section holds. ``model``, ``optimizer`` and ``ddp`` are checked against the megatron-core version's
# dataclass fields (checks/data/mcore_fields.json); ``env`` and ``run`` are not dataclasses: any name is a path.
SECTIONS: Mapping[str, str] = {
    "model": "TransformerConfig and ModelParallelConfig fields (megatron-core)",
    "optimizer": "OptimizerConfig fields (megatron-core)",
    "ddp": "DistributedDataParallelConfig fields (megatron-core)",
    "env": "environment variables of the launch: a config's env_vars, a launch script's exports, --env",
    "run": "the job beyond megatron-core's dataclasses: training loop, cluster, model-provider fields (RUN_KEYS)",
}

# Every run.* key a loader writes and a rule or the planner reads: which input key it comes from, and what it
# means. A Megatron-LM flag that sets no megatron-core field is kept as run.<its argparse dest> too
# (checks/loaders/megatron_lm.py), and only the dests listed here are read. tests/test_imports.py fails on a
# run.* path the code names that this table does not declare.
RUN_KEYS: Mapping[str, str] = {
    "model_name": "the Hugging Face checkpoint the model loads (NeMo-RL policy.model_name, a Bridge recipe's "
                  "hf_model); the planner sizes the model from it",
    "seq_length": "tokens per sample (Bridge model.seq_length, NeMo-RL policy.max_total_sequence_length, "
                  "--seq-length)",
    "micro_batch_size": "samples per micro-batch per data-parallel rank (Bridge train.micro_batch_size, NeMo-RL "
                        "policy.train_micro_batch_size, --micro-batch-size)",
    "global_batch_size": "samples per step over all data-parallel ranks (Bridge train.global_batch_size, NeMo-RL "
                         "policy.train_global_batch_size, --global-batch-size)",
    "num_nodes": "nodes of the job (NeMo-RL cluster.num_nodes)",
    "gpus_per_node": "GPUs per node (NeMo-RL cluster.gpus_per_node)",
    "skip_train": "evaluation only, no training step (Bridge train.skip_train, --skip-train)",
    "rampup_batch_size": "the global batch grows over the first steps (Bridge train.rampup_batch_size, "
                         "--rampup-batch-size)",
    "use_megatron_fsdp": "Megatron-FSDP shards parameters, gradients and optimizer state (Bridge "
                         "dist.use_megatron_fsdp or ddp.use_megatron_fsdp, --use-megatron-fsdp)",
    "megatron_fsdp_version": "which Megatron-FSDP Bridge builds (Bridge's own ddp.megatron_fsdp_version)",
    "vocab_size": "the tokenizer's vocabulary (a GPTModelProvider field, --vocab-size, the model catalogue)",
    "should_pad_vocab": "whether the vocabulary is padded to make_vocab_size_divisible_by (GPTModelProvider)",
    "make_vocab_size_divisible_by": "the padding multiple of the vocabulary (GPTModelProvider, "
                                    "--make-vocab-size-divisible-by)",
    "share_embeddings_and_output_weights": "tied input embedding and output layer (GPTModelProvider, the model "
                                           "catalogue)",
    "untie_embeddings_and_output_weights": "separate input embedding and output layer "
                                           "(--untie-embeddings-and-output-weights)",
    "position_embedding_type": "learned_absolute, rope, ... (GPTModelProvider, --position-embedding-type)",
    "max_position_embeddings": "rows of a learned position embedding (--max-position-embeddings)",
    "num_query_groups": "--num-query-groups without --group-query-attention, which megatron-core never sees",
    "mla_down_proj_fusion": "an MLATransformerConfig field: attention's input norm fused into the down "
                            "projection (rule FGA014)",
    "grad_reduce_in_bf16": "gradients reduced in bf16 rather than fp32 (--grad-reduce-in-bf16)",
    "rl_offload_optimizer_during_inference": "Megatron-LM RL moves the optimizer state to the host while it "
                                             "generates (--rl-offload-optimizer-during-inference)",
}

# How a loader derived a value rather than read it (Origin.derived): rules test these codes, never a note's
# wording. CLEARED_WITH_SWITCH: the front end empties a list because its switch is off (NeMo-RL replaces
# offload_modules with [] when fine_grained_activation_offloading is false).
CLEARED_WITH_SWITCH = "cleared_with_switch"


@dataclass(frozen=True)
class Origin:
    """Where a value came from."""

    file: str | None = None  # path as the user gave it
    line: int | None = None  # 1-based
    arg: str | None = None  # command-line position: "--set #2", "argv[5]"
    key: str = ""  # the key as spelled in the input
    note: str = ""  # how the value was derived, when it was not written as such (for the reader)
    derived: str = ""  # the same as a code rules test, e.g. CLEARED_WITH_SWITCH; "" when not derived so

    def describe(self) -> str:
        """``file:line``, ``file``, ``--set #2`` or ``argv[5]``, for text output."""
        if self.file is not None and self.line is not None:
            return f"{self.file}:{self.line}"
        if self.file is not None:
            return self.file
        return self.arg or "<config>"


@dataclass(frozen=True)
class Setting:
    """A value the input gave (or that the framework derives from one)."""

    value: Any
    origin: Origin


@dataclass(frozen=True)
class Unrecognised:
    """A key in a config section that is not a field of that section in this version."""

    section: str  # canonical section the key was found in ("" at the top level)
    name: str  # the leaf name as given
    setting: Setting
    consequence: str  # what the front end does with it: "ignored" (silently), "crash" (at start-up), or
    # "skipped" (Bridge adds a `+`/`++` override's key, then skips it with a log line when writing the config back)
    space: str = ""  # what the front end looked the key up as, in words ("a Megatron-LM flag in ..."); "" for a
    # megatron-core section, whose fields the rules know
    home: str = ""  # where the front end reads this key instead, when the loader knows (a NeMo-RL model field)


@dataclass(frozen=True)
class Rejected:
    """A value the front end refuses before megatron-core sees it (argparse: invalid int or choice)."""

    path: str  # canonical path
    setting: Setting
    reason: str
    cause: str = ""  # for the fix: REFUSED_BY_RUNNER, UNUSED_WORD, SWITCH_VALUE, or "" (an invalid value)


# Why a Megatron-LM command line is refused (Rejected.cause)
REFUSED_BY_RUNNER = "runner"  # the functional-test runner, before argparse (xargs quoting, eval, a YAML list)
UNUSED_WORD = "unused-word"  # a word no option takes: argparse's "unrecognized arguments"
SWITCH_VALUE = "switch-value"  # `--switch=value`: argparse's "ignored explicit argument"


@dataclass(frozen=True)
class Ignored:
    """A value the user gave that the framework drops without saying so."""

    path: str  # canonical path, or the input key when it has none
    setting: Setting
    reason: str


@dataclass(frozen=True)
class OverrideNote:
    """A ``--set`` override upstream refuses, or one whose outcome the checker cannot verify."""

    index: int  # 1-based position among the --set options
    text: str  # the override as given
    origin: Origin
    message: str  # refused: upstream's message, verbatim; unverified: why it cannot be verified
    partial_delete: bool = False  # unverified because Bridge's ~KEY sets back only the keys its dict holds


@dataclass(frozen=True)
class Unknown:
    """A value the job has that none of the inputs state."""

    reason: str  # what holds it: "the recipe sets it in a way the catalogue could not evaluate (file:line)"
    supply: str  # how to state it: "--recipe NAME", "--set model.num_layers=N"


@dataclass(frozen=True)
class Duplicate:
    """A key the input gives twice in one mapping (a functional-test YAML's MODEL_ARGS, which yq reads)."""

    key: str  # as spelled in the input
    first: Setting  # the earlier occurrence
    last: Setting  # the later occurrence, the one that decides
    outcome: str  # what the reader makes of the pair, e.g. "the runner passes both; argparse keeps the last"


class Spelling(Protocol):
    """How one input format writes canonical paths (for patches and overrides)."""

    def patch(self, changes: Mapping[str, Any]) -> dict[str, Any]:
        """Translate ``{canonical path: new value}`` into the input's own keys."""

    def override_lines(self, patch: Mapping[str, Any]) -> list[str]:
        """Render a patch (in input keys) as ``KEY=VALUE`` lines or command-line flags."""


@dataclass(frozen=True)
class Environment:
    """What the outcome depends on but a config does not say, as the user gave it (or left it unknown)."""

    te_version: tuple[int, int] | None = None  # Transformer Engine major.minor; None: unknown; (0, 0): absent
    nemo_rl_version: str = "main"  # a NeMo-RL release ("0.7.0") or "main" (NVIDIA-NeMo/RL@7ea279ab)
    variables: Mapping[str, Setting] = field(default_factory=dict)  # --env NAME=VALUE: the launch environment
    mcore_source: str = "default"  # how the megatron-core version was chosen: option, installed, default

    def __post_init__(self) -> None:
        object.__setattr__(self, "variables", MappingProxyType(dict(self.variables)))

    @property
    def te_absent(self) -> bool:
        return self.te_version == (0, 0)

    def te_at_least(self, version: str) -> bool | None:
        """Whether Transformer Engine is at least ``version`` ("2.10"); None when the version is unknown."""
        if self.te_version is None:
            return None
        major, minor = (int(p) for p in version.split(".")[:2])
        return self.te_version >= (major, minor)


@dataclass(frozen=True)
class CanonicalConfig:
    """One model's offload-relevant configuration, as megatron-core will see it."""

    flavor: str  # bridge | nemo-rl | megatron-lm
    version: str  # megatron-core profile label
    settings: Mapping[str, Setting]  # explicit values only; defaults come from the profile
    spelling: Spelling
    target: str | None = None  # "policy" / "value" for NeMo-RL, else None
    defaults: Mapping[str, Any] = field(default_factory=dict)  # the front end's own defaults
    unrecognised: tuple[Unrecognised, ...] = ()
    ignored: tuple[Ignored, ...] = ()
    rejected: tuple[Rejected, ...] = ()
    inputs: tuple[str, ...] = ()  # files, in the order they were applied
    environment: Environment = field(default_factory=Environment)
    model_class: str | None = None  # Bridge's model provider class (its `_target_`), when the input names it
    # What the framework does with the model: "train", "inference" (built without an optimizer, forward passes
    # only: NeMo-RL's teachers and generation model) or "unused" (never built), and why.
    role: str = "train"
    role_reason: str = ""
    duplicates: tuple[Duplicate, ...] = ()  # keys given twice; the later one decides
    refused_overrides: tuple[OverrideNote, ...] = ()  # refused at start-up; the settings are without them
    unverified_overrides: tuple[OverrideNote, ...] = ()  # applied, but their outcome depends on what is not given
    # Values the job has but no input states: a path, or a section's "model.*" for every field of it the
    # settings leave out -> why it is unknown and how to supply it. A rule that reads one cannot decide.
    unknown: Mapping[str, Unknown] = field(default_factory=dict)
    launch: str | None = None  # the launch command this config is read from ("train.sh:12"), if any
    suppressions: tuple[Any, ...] = ()  # checks.suppressions.Suppression: the inline ones of the files it was read from

    def __post_init__(self) -> None:
        object.__setattr__(self, "settings", MappingProxyType(dict(self.settings)))
        object.__setattr__(self, "defaults", MappingProxyType(dict(self.defaults)))
        object.__setattr__(self, "unknown", MappingProxyType(dict(self.unknown)))

    def unknown_at(self, path: str) -> Unknown | None:
        """Why ``path`` is unknown, when the settings leave it out and no input states it."""
        if path in self.settings:
            return None
        return self.unknown.get(path) or self.unknown.get(f"{split_path(path)[0]}.*")


def split_path(path: str) -> tuple[str, str]:
    """``"model.cpu_offloading"`` -> ``("model", "cpu_offloading")``."""
    section, _, name = path.partition(".")
    return section, name
