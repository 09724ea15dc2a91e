"""A training run's artifacts, read back: the workdir as a model with its trained weights.

`rubric_jax.rl.trainer.train(config, workdir)` writes

  <workdir>/config.json             the run's config (base model, tokenizer, dtype, finetune, LoRA rank / alpha /
                                    targets)
  <workdir>/checkpoints/<step>/     `Checkpointer` checkpoints whose state is {"lora": ..., "opt_state": ...}
                                    (finetune="lora") or {"params": ..., "opt_state": ...} (finetune="full")

and this module turns such a directory back into a plain model (`load_trained`): for a LoRA run, the run's base
model with the adapters of its latest (or a chosen) checkpoint folded into the kernels; for a full-parameter run,
the base's architecture holding that checkpoint's parameters (the base's weights are not read). The pieces are
public for callers that need them separately (evals fingerprints the trained arrays before loading a model).

A resume reads the workdir too: before the model loads, `check_resume` finds the checkpoint it would continue
from and refuses settings that checkpoint's arrays cannot follow (finetune mode, LoRA rank and targets), naming
the setting and both values; `check_prompts`, given the new run's data iterator, names both prompt files when the
prompt set its data position counts in changed. Both compare with what the checkpoint recorded of its run
(`run_record`, meta["run"]), or, for checkpoints from before that record, with the run's config.json.
"""

from __future__ import annotations

import glob
import json
import os
from typing import Any

import numpy as np

from rubric_jax.errors import UserError

__all__ = ["is_workdir", "run_config", "base_model_name", "latest_trained", "latest_lora", "apply_trained_lora",
           "trained_params_model", "load_trained", "ResumeError", "run_record", "check_resume", "check_prompts"]

CONFIG_FILE = "config.json"
CHECKPOINT_SUBDIR = "checkpoints"  # rubric_jax.rl.checkpoint's; not imported so is_workdir needs no orbax


def is_workdir(path: str | os.PathLike) -> bool:
    """Whether `path` looks like a training workdir: a directory holding `checkpoints/` that is not itself a
    Hugging Face checkpoint (no *.safetensors / model.safetensors.index.json at its top).

    Only the layout is checked; `run_config` and `latest_lora` say what is missing (config.json, a finished
    checkpoint) with a clear error."""
    path = os.fspath(path)
    if not os.path.isdir(os.path.join(path, CHECKPOINT_SUBDIR)):
        return False
    hf = glob.glob(os.path.join(glob.escape(path), "*.safetensors")) or os.path.exists(
        os.path.join(path, "model.safetensors.index.json"))
    return not hf


def run_config(workdir: str | os.PathLike) -> dict:
    """The run's config as the trainer saved it (`<workdir>/config.json`), as a plain dict.

    Raises FileNotFoundError naming the workdir when there is no config.json."""
    workdir = os.fspath(workdir)
    path = os.path.join(workdir, CONFIG_FILE)
    if not os.path.exists(path):
        raise FileNotFoundError(f"{workdir}: a training workdir needs the run's config.json (base model, LoRA)")
    with open(path) as f:
        return json.load(f)


def base_model_name(cfg: dict) -> str:
    """The model the run trained adapters for: config `model`, or the trainer's DEFAULT_MODEL when it is empty
    (as the trainer itself chooses)."""
    from rubric_jax.models.loading import DEFAULT_MODEL

    return cfg.get("model") or DEFAULT_MODEL


def _unwrap_values(tree):
    """A restored nnx state may keep each variable as {"value": array}: the plain nested dict of arrays."""
    if isinstance(tree, dict):
        if set(tree) == {"value"} and not isinstance(tree["value"], dict):
            return tree["value"]
        return {k: _unwrap_values(v) for k, v in tree.items()}
    return tree


def _flat(tree, prefix: str = "") -> dict[str, Any]:
    """{"a.b.c": leaf} of a nested dict."""
    if isinstance(tree, dict):
        out: dict[str, Any] = {}
        for k, v in tree.items():
            out.update(_flat(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    return {prefix: tree}


# The checkpoint key of each finetune mode's trained state (the trainer writes them; "lora" is what LoRA runs
# have always written).
STATE_KEYS = {"lora": "lora", "full": "params"}


def latest_trained(workdir: str | os.PathLike, step: int | None = None) -> tuple[str, dict[str, Any], int]:
    """(the run's finetune mode, "lora" or "full"; what checkpoint `step` (default: the newest that reads back)
    trained, the adapters or all parameters, as a pure nested dict of arrays with any {"value": ...} variable
    wrappers removed; that step).

    Creates and prunes nothing, and leaves a save in flight alone (a run may be training in the workdir); a
    checkpoint that cannot be read is set aside (renamed `<step>.damaged-<n>`, one warning line) as a resume
    would. Raises FileNotFoundError naming the workdir when it has no checkpoint, or no checkpoint for `step`
    (DamagedCheckpointError, a FileNotFoundError, when none is intact or `step` is damaged), and ValueError when
    the checkpoint holds neither."""
    from rubric_jax.rl.checkpoint import Checkpointer

    workdir = os.fspath(workdir)
    if not os.path.isdir(os.path.join(workdir, CHECKPOINT_SUBDIR)):
        raise FileNotFoundError(f"{workdir}: no checkpoint under checkpoints/")
    with Checkpointer(workdir, max_to_keep=None, read_only=True) as ckpt:
        # The optimizer state comes back too (the Checkpointer restores whole trees): dropped below.
        if step is None:
            if ckpt.latest_step() is None:
                raise FileNotFoundError(f"{workdir}: no checkpoint under checkpoints/")
            step, state, _ = ckpt.restore_newest()
        else:
            state, _ = ckpt.restore(step)
    for mode, key in STATE_KEYS.items():
        if key in state:
            return mode, _unwrap_values(state[key]), int(step)
    raise ValueError(f"{workdir}: checkpoint {step} holds neither LoRA adapters nor full parameters "
                     f"(keys: {sorted(state)})")


def latest_lora(workdir: str | os.PathLike, step: int | None = None) -> tuple[dict[str, Any], int]:
    """(the LoRA adapters of checkpoint `step` (default: the latest) as a pure nested dict of arrays, with any
    {"value": ...} variable wrappers removed, that step).

    Reads only; nothing under the workdir is created or pruned. Raises FileNotFoundError naming the workdir when
    it has no checkpoint, or no checkpoint for `step`, and ValueError for a full-parameter run's workdir."""
    mode, lora, step = latest_trained(workdir, step)
    if mode != "lora":
        raise ValueError(f"{os.fspath(workdir)}: checkpoint {step} holds no LoRA state: the run trained full "
                         f"parameters (finetune={mode!r}; read it with latest_trained or load_trained)")
    return lora, step


def apply_trained_lora(model, cfg: dict, lora: dict):
    """Wraps `model` with LoRA exactly as the trainer did (the run config's `lora` rank / alpha / targets, the
    LoRAConfig defaults for any it lacks), loads the adapter values `lora` (as `latest_lora` returns them),
    merges them into the kernels and returns the merged model (no LoRA modules left).

    Raises ValueError when the adapters do not fit the config (other targets, rank or model)."""
    from flax import nnx

    from rubric_jax.models.lora import LoRAConfig, apply_lora, merge_lora

    lcfg = cfg.get("lora") or {}
    kw: dict[str, Any] = {}
    if lcfg.get("rank") is not None:
        kw["rank"] = int(lcfg["rank"])
    if lcfg.get("alpha") is not None:
        kw["alpha"] = float(lcfg["alpha"])
    if lcfg.get("targets") is not None:
        kw["targets"] = tuple(lcfg["targets"])
    model = apply_lora(model, LoRAConfig(**kw))
    state = nnx.state(model, nnx.LoRAParam)
    lora = _unwrap_values(lora)
    # replace_by_pure_dict alone would keep fresh adapters where the checkpoint has none, and take any shape
    want = {k: tuple(np.shape(v)) for k, v in _flat(nnx.to_pure_dict(state)).items()}
    have = {k: tuple(np.shape(v)) for k, v in _flat(lora).items()}
    problems = [f"missing {k}" for k in sorted(set(want) - set(have))]
    problems += [f"unexpected {k}" for k in sorted(set(have) - set(want))]
    problems += [f"{k}: checkpoint {have[k]} vs model {want[k]}" for k in sorted(set(want) & set(have))
                 if have[k] != want[k]]
    if problems:
        raise ValueError(f"the checkpoint's LoRA parameters do not fit the run's config ({'; '.join(problems[:8])}"
                         f"{f'; and {len(problems) - 8} more' if len(problems) > 8 else ''})")
    nnx.replace_by_pure_dict(state, lora)
    nnx.update(model, state)
    merge_lora(model)
    return model


def trained_params_model(cfg: dict, params: dict, *, dtype=None):
    """A full-parameter run's model: the architecture of the run's base model (its config only; no base weights
    are read) holding `params` (as `latest_trained` returns them), cast to `dtype` (default: the run's config
    `dtype`, else float32).

    Raises ValueError when the parameters do not fit the base's architecture (names or shapes)."""
    import jax
    import jax.numpy as jnp
    from flax import nnx

    from rubric_jax.models.loading import _peek_config, resolve_checkpoint
    from rubric_jax.models.transformer import abstract_model

    dtype = jnp.dtype(dtype or cfg.get("dtype") or "float32")
    model = abstract_model(_peek_config(resolve_checkpoint(base_model_name(cfg))), dtype=dtype)
    want = {k: tuple(v.shape) for k, v in _flat(nnx.to_pure_dict(nnx.state(model, nnx.Param))).items()}
    params = _unwrap_values(params)
    have = _flat(params)
    problems = [f"missing {k}" for k in sorted(set(want) - set(have))]
    problems += [f"unexpected {k}" for k in sorted(set(have) - set(want))]
    problems += [f"{k}: checkpoint {tuple(np.shape(have[k]))} vs model {want[k]}" for k in sorted(set(want) & set(have))
                 if tuple(np.shape(have[k])) != want[k]]
    if problems:
        raise ValueError(f"the checkpoint's parameters do not fit the run's base model ({'; '.join(problems[:8])}"
                         f"{f'; and {len(problems) - 8} more' if len(problems) > 8 else ''})")
    graphdef, state = nnx.split(model)
    nnx.replace_by_pure_dict(state, jax.tree.map(lambda x: jnp.asarray(x, dtype), params))
    return nnx.merge(graphdef, state)


def load_trained(workdir: str | os.PathLike, *, dtype=None, step: int | None = None):
    """(the run's model at checkpoint `step` (default: the latest), its tokenizer, the step): the base model with
    the LoRA merged, or for a full-parameter run the checkpoint's parameters in the base's architecture.

    `dtype`: the weights' dtype (default: the run's config `dtype`, else float32). The tokenizer is the
    config's `tokenizer`, else the base model's. Errors: FileNotFoundError for a missing config.json or
    checkpoint (checked before any weights load), ValueError for trained arrays that do not fit."""
    import jax.numpy as jnp

    from rubric_jax.models.loading import load_model
    from rubric_jax.models.tokenizer import load_tokenizer

    cfg = run_config(workdir)
    mode, trained, step = latest_trained(workdir, step)
    name = base_model_name(cfg)
    if mode == "full":
        model = trained_params_model(cfg, trained, dtype=dtype)
    else:
        model = load_model(name, dtype=jnp.dtype(dtype or cfg.get("dtype") or "float32"))
        model = apply_trained_lora(model, cfg, trained)
    return model, load_tokenizer(cfg.get("tokenizer") or name), step


class ResumeError(UserError):
    """A resume with a setting the workdir's checkpoint cannot follow; the message names the setting, both
    values and the way out."""


def run_record(config) -> dict:
    """What a checkpoint records of the run that wrote it (the trainer saves it as meta["run"]): the prompt file
    as the config gave it, and the settings the saved arrays' shapes depend on."""
    return {"prompts": str(config.data.path), "finetune": str(config.finetune),
            "lora": {"rank": int(config.lora.rank), "targets": [str(t) for t in config.lora.targets]}}


def _recorded(meta: dict, workdir: str) -> dict:
    """meta["run"], or for a checkpoint from before it, the same fields from the run's config.json (written by
    the run's first start); {} when neither exists."""
    if isinstance(meta.get("run"), dict):
        return meta["run"]
    try:
        cfg = run_config(workdir)
    except (OSError, ValueError):
        return {}
    lora = cfg.get("lora") or {}
    return {"prompts": (cfg.get("data") or {}).get("path"), "finetune": cfg.get("finetune", "lora"),
            "lora": {k: lora[k] for k in ("rank", "targets") if k in lora}}


def _fmt(value) -> str:
    # a mode is quoted as the config file spells it (finetune='full'); lists and numbers read as written
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(map(str, value)) + "]"
    return repr(value) if isinstance(value, str) else str(value)


def check_resume(config, workdir: str | os.PathLike) -> int | None:
    """The step a run of `config` in `workdir` continues from: its newest intact checkpoint (damaged newer ones
    are set aside, one warning line each), or None for a fresh run. Reads that checkpoint's meta only.

    Raises ResumeError when the config changes a setting the checkpoint's arrays cannot follow (finetune,
    lora.rank, lora.targets), naming each with the checkpoint's value and this run's, and DamagedCheckpointError
    when checkpoints were set aside and none is intact."""
    from rubric_jax.rl.checkpoint import Checkpointer

    workdir = os.fspath(workdir)
    if not os.path.isdir(os.path.join(workdir, CHECKPOINT_SUBDIR)):
        return None
    with Checkpointer(workdir, max_to_keep=None, read_only=True) as ckpt:
        step = ckpt.latest_step()
        if step is None:
            return None
        saved = _recorded(ckpt.read_meta(step), workdir)
    now = run_record(config)
    changed = []
    if saved.get("finetune") and saved["finetune"] != now["finetune"]:
        changed.append(("finetune", saved["finetune"], now["finetune"]))
    elif now["finetune"] == "lora":
        was = saved.get("lora") or {}
        if "rank" in was and int(was["rank"]) != now["lora"]["rank"]:
            changed.append(("lora.rank", was["rank"], now["lora"]["rank"]))
        if "targets" in was and sorted(map(str, was["targets"])) != sorted(now["lora"]["targets"]):
            changed.append(("lora.targets", was["targets"], now["lora"]["targets"]))
    if changed:
        before = ", ".join(f"{k}={_fmt(a)}" for k, a, _ in changed)
        after = ", ".join(f"{k}={_fmt(b)}" for k, _, b in changed)
        arrays = "parameters" if saved.get("finetune", now["finetune"]) == "full" else "adapters"
        raise ResumeError(f"{workdir}: checkpoint {step} was trained with {before} and this run has {after}, which "
                          f"the saved {arrays} and optimizer state cannot follow: resume with the checkpoint's "
                          f"{' and '.join(k for k, _, _ in changed)}, or start the new setting in another workdir")
    return step


def check_prompts(workdir: str | os.PathLike, step: int, meta: dict, data_state: dict, config) -> None:
    """Raises ResumeError naming both prompt files when checkpoint `step` (its `meta`) counted its data position
    in another prompt set than the one of this run's fresh iterator (`data_state`, its `get_state()`): the two
    fingerprints alone say nothing a user can act on."""
    saved = meta.get("data") or {}
    if "records" not in saved or saved.get("records") == data_state.get("records"):
        return
    was = _recorded(meta, os.fspath(workdir)).get("prompts")
    now = str(config.data.path)
    how = (" (the same file name: the file was edited, or data.task, data.with_constraints or the pacing hold-out "
           "select other records from it)" if was == now else "")
    raise ResumeError(
        f"{os.fspath(workdir)}: checkpoint {step} was trained on the prompts of "
        f"{repr(was) if was else 'an unrecorded prompt file'} ({saved.get('num_records')} records) and this run reads "
        f"{now!r} ({data_state.get('num_records')} records), another prompt set{how}: resume with "
        f"{f'--config.data.path={was}' if was else 'the first prompt file'}, or train on the new prompts in another "
        f"workdir")
