"""Checks a training config before anything heavy happens.

A paper-scale run loads a multi-GB checkpoint, compiles for minutes and samples for more before the first
judge call; a typo such as `loss.aggregation=token-mean` or `group_size=0` must not wait for that. `check`
runs once, where a config enters (`python -m rubric_jax.main` before anything else; `train` or `setup.build`
when called with a plain ConfigDict), and hands back a `Checked` config, frozen, that everything below reads
without checking again. It raises `ConfigError` naming the field (`config.loss.aggregation`),
what it holds and what is allowed (and the closest allowed name to a misspelled one). It checks values, and
that the files they name exist; reading the files is the loaders' job (they name the file and line), and
`rubric_jax.rl.setup.build` reads the prompt file and rubrics before it loads the model. `check_workdir`
(called by `python -m rubric_jax.main` before training) finds an unwritable workdir, and `check_records` a
prompt file's records that name a rubric that is not there, also before the model loads.

Where a component's own dataclass already validates its section (JudgeConfig, LoRAConfig, DynamicConfig), the
section is built here from the config, so there is one rule per field; the reward method reads config.reward
(`Method.reward_section`) and checks its own sections (`Method.validate`: rubric_jax.rl.plugins).
"""

from __future__ import annotations

import logging
import os
import tempfile
from collections.abc import Mapping
from typing import Any

from rubric_jax.config_checks import ConfigError  # noqa: F401 (preflight.ConfigError, as callers name it)
from rubric_jax.config_checks import apply_renames
from rubric_jax.config_checks import choice as _choice, fail as _fail
from rubric_jax.config_checks import integer as _int, number as _num, section as _section
from rubric_jax.errors import did_you_mean
from rubric_jax.rewards.group import ADVANTAGE_KINDS
from rubric_jax.rewards.shaping import NORMALISE
from rubric_jax.rl.losses import AGGREGATIONS, IMPORTANCE, OBJECTIVES, LossConfig
from rubric_jax.rl.policy import FINETUNE_MODES
from rubric_jax.rl.shapes import PROMPT_WIDTHS

DTYPES = ("float32", "bfloat16", "float16")
RUBRIC_SOURCES = ("config", "record", "task")
SCHEDULES = ("cosine", "constant")
KL_KINDS = ("k1", "k3")
REMATS = ("none", "full", "dots_saveable", "auto")
ATTENTIONS = ("plain", "xla", "cudnn", "chunked", "auto")


class Checked(Mapping):
    """A config that passed `check`, as the run reads it: `.config`, the config frozen (a FrozenConfigDict: no
    part of the run can change a setting after it was checked), and the sections' objects `check` built from it
    ("reward", "judge", "lora", "loss", "dynamic": checked["reward"]), the ones the run then uses
    (rubric_jax.rl.setup.build). Made only by `check`; `check` hands one it is given back unchanged, so a config
    is checked once however many entry points (main.run, trainer.train, setup.build) it passes through."""

    def __init__(self, config, sections: dict[str, Any]):
        from ml_collections import FrozenConfigDict  # noqa: PLC0415

        self.config = FrozenConfigDict(config)
        self._sections = dict(sections)

    def __getitem__(self, name: str):
        return self._sections[name]

    def __iter__(self):
        return iter(self._sections)

    def __len__(self) -> int:
        return len(self._sections)


def check(config) -> Checked:
    """Raises ConfigError for the first value of `config` that cannot run (see the module docstring); returns it
    `Checked`: frozen, with the sections' objects built from it in this one place. A `Checked` config is returned
    as it is (nothing is checked twice). A value under a renamed field's old name is moved to the new one
    first, with a deprecation warning."""
    if isinstance(config, Checked):
        return config
    for note in apply_renames(config):
        logging.getLogger(__name__).warning(note)
    for field in ("steps", "prompts_per_step", "max_prompt_len", "max_completion_len", "seed"):
        _int(config, field, 0 if field == "seed" else 1)
    _int(config, "group_size", 2, " (a group needs two rollouts to compare; advantages of a group of 1 are 0)")
    _choice(config, "dtype", DTYPES)
    _choice(config, "finetune", FINETUNE_MODES)
    _choice(config, "rubric_source", RUBRIC_SOURCES)
    _choice(config, "prompt_width", PROMPT_WIDTHS)
    if config.finetune == "full" and config.dtype != "float32":
        # no float32 master copy: at RARE's lr 1e-6 most bfloat16 updates round back to the old weight
        _fail("dtype", config.dtype, "finetune='full' trains the weights in this dtype, where small updates are "
                                     "lost to rounding; set --config.dtype=float32")

    _num(config, "sampling.temperature", lambda v: v > 0, "must be > 0")
    _int(config, "sampling.top_k", 0, " (0 = no top-k filter)")
    _num(config, "sampling.top_p", lambda v: 0 < v <= 1, "must be in (0, 1]")
    _num(config, "sampling.min_p", lambda v: 0 <= v < 1, "must be in [0, 1)")

    _num(config, "optim.lr", lambda v: v > 0, "must be > 0")
    _int(config, "optim.warmup_steps", 0)
    _choice(config, "optim.schedule", SCHEDULES)
    _num(config, "optim.weight_decay", lambda v: v >= 0, "must be >= 0")
    _num(config, "optim.max_grad_norm", lambda v: v >= 0, "must be >= 0 (0 = no clipping)")

    _choice(config, "loss.advantage", ADVANTAGE_KINDS)
    _choice(config, "loss.aggregation", AGGREGATIONS)
    _num(config, "loss.eps_low", lambda v: 0 <= v <= 1, "must be in [0, 1] (1: no lower clip, ratios are >= 0)")
    _num(config, "loss.eps_high", lambda v: v >= 0, "must be >= 0")
    _num(config, "loss.dual_clip", lambda v: v == 0 or v > 1, "must be 0 (off) or > 1")
    _num(config, "loss.kl_coef", lambda v: v >= 0, "must be >= 0")
    _choice(config, "loss.kl_kind", KL_KINDS)
    _choice(config, "loss.importance", IMPORTANCE)
    _choice(config, "loss.objective", OBJECTIVES)
    _int(config, "loss.num_iterations", 1)
    _int(config, "loss.micro_batch_size", 1)
    _int(config, "loss.max_bad_steps", 0)

    _choice(config, "forward.remat", REMATS)
    _choice(config, "forward.attention", ATTENTIONS)
    _int(config, "forward.attention_chunk", 1)
    _num(config, "forward.memory_fraction", lambda v: 0 < v <= 1, "must be in (0, 1]")
    _int(config, "judge.max_response_tokens", 1)
    _checkpoint("model", config.model, "'' = the embedded default")
    _judge_model(config)
    _rubric_name("rubric", config.rubric)
    _int(config, "checkpoint.every", 1)
    _int(config, "checkpoint.keep", 1)
    mesh_axes(config.mesh)
    sections = _sections(config)
    if config.data.path and not os.path.exists(config.data.path):
        from rubric_jax.data.jsonl import BUNDLED  # noqa: PLC0415
        if config.data.path not in BUNDLED:
            _fail("data.path", config.data.path, f"no such file, and not a bundled set {tuple(BUNDLED)}")
    return Checked(config, sections)


def _judge_model(config) -> None:
    """judge.model names a checkpoint the loaders can open (or is "", self-judging); judge.dtype a dtype, and
    only where there is a second model to hold in it."""
    _choice(config, "judge.dtype", ("",) + DTYPES)
    name = config.judge.model
    if not name:
        if config.judge.dtype not in ("", config.dtype):
            _fail("judge.dtype", config.judge.dtype, f"the self-judge (judge.model='') reads the policy's own base "
                                                     f"weights, in config.dtype={config.dtype!r}; give a judge.model "
                                                     f"to judge in another dtype, or leave judge.dtype empty")
        return
    _checkpoint("judge.model", name, "'' = the policy judges itself")


def _checkpoint(field: str, name, empty: str) -> None:
    """A model field names a checkpoint directory, a .gguf file or an embedded model ("" allowed: `empty`)."""
    if name == "":
        return
    if not isinstance(name, str):
        _fail(field, name, f"must be a checkpoint path or an embedded model name ({empty})")
    if os.path.exists(name):
        if not (os.path.isdir(name) or name.endswith(".gguf")):
            _fail(field, name, "a file that is not a .gguf checkpoint (give a Hugging Face checkpoint "
                               "directory, a .gguf file or an embedded model name)")
        return
    # the loaders' own table of embedded names (imported here: the module loads JAX)
    from rubric_jax.models.loading import _ALIASES, EMBEDDED, is_embedded  # noqa: PLC0415
    if not is_embedded(name):
        names = sorted(EMBEDDED) + sorted(_ALIASES)
        _fail(field, name, f"no such checkpoint path, and not an embedded model name {tuple(names)} ({empty})"
                           + did_you_mean(name, names))


def rubric_problem(name: str) -> str | None:
    """Why `name` (a rubric field: a built-in rubric's name or a JSON file's path) cannot load, or None. The
    file's contents are the loader's to judge (`rubric_jax.rubrics.load_rubric`)."""
    from rubric_jax.rubrics import builtin_rubric_names  # noqa: PLC0415

    names = builtin_rubric_names()
    if name in names or os.path.isfile(name):
        return None
    return f"no such rubric file, and not a built-in rubric {names}" + did_you_mean(name, names)


def _rubric_name(field: str, name) -> None:
    if name == "":
        return
    if not isinstance(name, str):
        _fail(field, name, "must be a built-in rubric's name or a rubric JSON file's path")
    problem = rubric_problem(name)
    if problem:
        _fail(field, name, problem)


def check_records(config, records, source: str) -> None:
    """Raises DataError for the first record of `source` whose own rubric (rubric_source='record': its
    "rubric" name; 'task': its task's rubric) is neither a built-in rubric nor a file. Runs before the model
    loads, where the rubric store would otherwise find it after."""
    from rubric_jax.data.jsonl import DataError  # noqa: PLC0415

    if config.rubric_source == "config":
        return
    for r in records:
        name = r.rubric if config.rubric_source == "record" else r.task
        if isinstance(name, str) and name:
            problem = rubric_problem(name)
            if problem:
                key = '"rubric"' if config.rubric_source == "record" else '"task" (rubric_source=\'task\')'
                raise DataError(f"{source}: record {r.id!r}: {key} {name!r}: {problem}")


def check_workdir(workdir: str) -> None:
    """Raises ConfigError when `workdir`, or its checkpoints folder if it exists, cannot be created or written
    (a temporary file is made and removed in each): otherwise the first save finds it, after the model loaded
    and a step ran."""
    from rubric_jax.rl.workdir import CHECKPOINT_SUBDIR  # noqa: PLC0415

    for d in (workdir, os.path.join(workdir, CHECKPOINT_SUBDIR)):
        if d != workdir and not os.path.isdir(d):
            continue  # made later inside a workdir found writable
        try:
            os.makedirs(d, exist_ok=True)
            with tempfile.TemporaryFile(dir=d, prefix=".rubric_jax_write_check_"):
                pass
        except OSError as e:
            raise ConfigError(f"--workdir={workdir!r}: cannot write to {d} ({e.strerror or e}); give a "
                              f"directory this user can write") from None


def mesh_axes(spec: str) -> list[tuple[str, int]]:
    """config.mesh "fsdp:2,tensor:4" -> [("fsdp", 2), ("tensor", 4)] ("" -> []); the one parser of the setting
    (`check` runs it before anything loads, rubric_jax.rl.setup.parse_mesh builds the mesh from it)."""
    if not spec:
        return []
    try:
        axes = [(k.strip(), int(v)) for k, v in (part.split(":") for part in spec.split(","))]
    except ValueError:
        _fail("mesh", spec, "must look like 'data:2,tensor:4' (axes data, fsdp, tensor)")
    unknown = sorted({k for k, _ in axes} - {"data", "fsdp", "tensor"})
    if unknown or any(n < 1 for _, n in axes):
        _fail("mesh", spec, "axes are data, fsdp and tensor, each of size >= 1")
    return axes


def _sections(config) -> dict[str, Any]:
    # Imported here: these modules pull in JAX programs that `check` itself does not need.
    from rubric_jax.judge.common import COMPARISONS, comparison_problem, judge_config  # noqa: PLC0415
    from rubric_jax.judge.pairings import PAIRINGS  # noqa: PLC0415
    from rubric_jax.models.lora import LoRAConfig  # noqa: PLC0415
    from rubric_jax.rl import plugins  # noqa: PLC0415
    from rubric_jax.rl.dynamic import DynamicConfig  # noqa: PLC0415

    _choice(config, "reward.method", plugins.method_choices())
    _choice(config, "reward.normalise", NORMALISE)
    method = plugins.get(plugins.method_name(config))
    out = {"reward": _section(config, "reward", lambda: method.reward_section(config, plugins.term_keys()))}
    for cls in plugins.active_terms(config):
        cls.validate(config)
    _choice(config, "judge.comparison", COMPARISONS)
    _choice(config, "judge.pairing", PAIRINGS)
    out["judge"] = _section(config, "judge", lambda: judge_config(config))
    problem = comparison_problem(config, method.compares_in_group(config))
    if problem:
        _fail("judge.comparison", config.judge.comparison, problem)
    out["lora"] = _section(config, "lora", lambda: LoRAConfig(
        rank=config.lora.rank, alpha=config.lora.alpha, dropout=config.lora.dropout,
        targets=tuple(config.lora.targets)))
    out["loss"] = LossConfig(aggregation=config.loss.aggregation, eps_low=config.loss.eps_low,
                             eps_high=config.loss.eps_high, dual_clip=config.loss.dual_clip or None,
                             kl_coef=config.loss.kl_coef, kl_kind=config.loss.kl_kind,
                             max_completion_len=config.max_completion_len, importance=config.loss.importance,
                             objective=config.loss.objective, mask_truncated=bool(config.loss.mask_truncated))  # each field checked in `check`
    out["dynamic"] = _section(config, "dynamic", lambda: DynamicConfig(**config.dynamic.to_dict()))
    # the reward method's own section (rubric_jax.rl.plugins.Method.validate)
    method.validate(config)
    if config.reward.normalise != "sum" and not method.sums_criteria:
        _fail("reward.normalise", config.reward.normalise, f"reward.method={config.reward.method!r} does not sum "
              "per-criterion rewards: per_criterion applies to pairwise, absolute and rlmr")
    return out
