"""Shapes that do not recompile: length ladders, the rollout batch layout, padding figures, the compile cache.

Every distinct array shape a jitted function sees is one more XLA compilation (minutes for a 4B model on an
accelerator). The trainer therefore never hands a data-dependent length to a jitted function; it rounds it up
to a rung of a short ladder derived from the config:

    ladder(max_len) = {ceil(k * max_len / 4) rounded up to a multiple of 8 : k = 1, 2, 3} + {max_len}

    max_len = 1024 -> (256, 512, 768, 1024)      max_len = 768 -> (192, 384, 576, 768)
    max_len = 128  -> (32, 64, 96, 128)          max_len = 16  -> (8, 16)

At most 4 rungs, so at most 4 programs per jitted function. Evenly spaced rungs (rather than powers of two)
bound the padding of a length in the upper three quarters of the budget, where RL completion lengths live,
by 1/2, 1/3 and 1/4 of the padded width. Lower rungs are multiples of 8 (the f32 sublane tile on TPU,
tensor-core friendly on GPU; at paper scale they are multiples of 128 anyway). The top rung is the budget
itself: the sampler emits exactly max_completion_len columns and prompts are truncated to max_prompt_len.

Layout of a step (`ShapePlan`):
  prompt width      one rung for the whole run: the prompt ladder's rung of the longest (truncated) prompt of
                    the dataset, found once at setup (config prompt_width="longest"), or the top rung whatever
                    the data ("max": runs on different datasets then share programs). The sampler and the
                    update both use it, so the sampler compiles once and the update's shapes vary in the
                    completion width only.
  completion width  per step: the completion ladder's rung of the step's longest completion. The sampled
                    completion columns are trimmed to it before the update (and the exploration bonus).

Trimming changes no loss: the dropped columns are padding (mask 0) after every completion's end, attention is
causal so the kept positions see the same context, and the dr_grpo denominator uses the configured
max_completion_len (LossConfig), not the batch width. Extra left padding of the prompt is masked and positions
count real tokens only, so it changes nothing either.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
from typing import Iterator, Sequence

import numpy as np

from rubric_jax.padding import round_up
from rubric_jax.rl.policy import RolloutBatch

log = logging.getLogger(__name__)

__all__ = ["ladder", "rung", "ShapePlan", "fit_rollout_batch", "padding_metrics", "padding_counts", "JudgePadding",
           "configure_compilation_cache", "compilation_cache", "CACHE_SUBDIR"]

RUNGS = 4
MULTIPLE = 8
CACHE_SUBDIR = "jax_cache"


def ladder(max_len: int, rungs: int = RUNGS, multiple: int = MULTIPLE) -> tuple[int, ...]:
    """The increasing widths a length up to `max_len` is padded to (at most `rungs` of them; see module doc)."""
    max_len, rungs, multiple = int(max_len), int(rungs), int(multiple)
    if max_len < 1 or rungs < 1 or multiple < 1:
        raise ValueError(f"ladder needs max_len, rungs, multiple >= 1, got {max_len}, {rungs}, {multiple}")
    widths = {max_len}
    for k in range(1, rungs):
        w = -(-k * max_len // rungs)  # ceil(k * max_len / rungs)
        w = round_up(w, multiple)
        widths.add(min(w, max_len))
    return tuple(sorted(widths))


def rung(widths: Sequence[int], n: int) -> int:
    """The smallest width >= n (a length of 0 takes the smallest width)."""
    for w in widths:
        if w >= n:
            return int(w)
    raise ValueError(f"length {n} exceeds the largest width {widths[-1]}")


PROMPT_WIDTHS = ("longest", "max")  # config.prompt_width


@dataclasses.dataclass(frozen=True)
class ShapePlan:
    """The ladders of one run and its fixed prompt width."""

    prompt_ladder: tuple[int, ...]
    completion_ladder: tuple[int, ...]
    prompt_width: int

    @classmethod
    def build(cls, max_prompt_len: int, max_completion_len: int, prompt_lengths: Sequence[int] = (),
              width: str = "longest") -> "ShapePlan":
        """`prompt_lengths`: the encoded (already truncated) lengths of every prompt the run can draw.
        `width`: "longest" (the rung of the longest of them) or "max" (the top rung, whatever the data)."""
        if width not in PROMPT_WIDTHS:
            raise ValueError(f"prompt width must be 'longest' or 'max', got {width!r}")
        prompts = ladder(max_prompt_len)
        longest = max(prompt_lengths, default=max_prompt_len) if width == "longest" else max_prompt_len
        return cls(prompts, ladder(max_completion_len), rung(prompts, longest))

    def completion_width(self, longest_completion: int) -> int:
        return rung(self.completion_ladder, longest_completion)


def fit_rollout_batch(out, adv_b: np.ndarray, *, prompt_width: int | None = None,
                      completion_width: int | None = None, pad_id: int = 0) -> RolloutBatch:
    """The update's batch from a SampleOutput: row b*G + g is sample g of prompt b.

    prompt_width: left-pads the prompt columns to this width (None: the sampler's width; never narrower
    than it). completion_width: keeps this many completion columns, trimming padding after the longest
    completion or right-padding (None: the sampler's max_new_tokens columns).
    """
    g = out.num_samples
    prompt = np.repeat(out.prompt_tokens, g, axis=0)
    pmask = np.repeat(out.prompt_mask, g, axis=0)
    tokens, cmask, logp = out.tokens, out.completion_mask(), np.asarray(out.logprobs, np.float32)
    if prompt_width is not None and prompt_width != prompt.shape[1]:
        extra = prompt_width - prompt.shape[1]
        if extra < 0:
            if pmask[:, :-extra].any():
                raise ValueError(f"prompt width {prompt_width} would cut real prompt tokens")
            prompt, pmask = prompt[:, -extra:], pmask[:, -extra:]
        else:
            prompt = np.concatenate([np.full((prompt.shape[0], extra), pad_id, prompt.dtype), prompt], axis=1)
            pmask = np.concatenate([np.zeros((pmask.shape[0], extra), bool), pmask], axis=1)
    if completion_width is not None and completion_width != tokens.shape[1]:
        longest = int(np.max(out.lengths, initial=0))
        if completion_width < longest:
            raise ValueError(f"completion width {completion_width} is shorter than the longest completion "
                             f"({longest} tokens)")
        extra = completion_width - tokens.shape[1]
        if extra < 0:
            tokens, cmask, logp = tokens[:, :completion_width], cmask[:, :completion_width], logp[:, :completion_width]
        else:
            tokens = np.concatenate([tokens, np.full((tokens.shape[0], extra), pad_id, tokens.dtype)], axis=1)
            cmask = np.concatenate([cmask, np.zeros((cmask.shape[0], extra), bool)], axis=1)
            logp = np.concatenate([logp, np.zeros((logp.shape[0], extra), np.float32)], axis=1)
    return RolloutBatch(tokens_bt=np.concatenate([prompt, tokens], axis=1).astype(np.int32),
                        mask_bt=np.concatenate([pmask, cmask], axis=1), prompt_len=prompt.shape[1],
                        completion_mask_bt=cmask, adv_b=np.asarray(adv_b, np.float32), sample_logp_bt=logp)


def _frac(real, padded) -> float:
    return float(real) / float(padded) if padded else 1.0


def padding_counts(out, batch: RolloutBatch) -> dict[str, np.ndarray]:
    """(real, total) token counts of the sampler input and update batch, and the widths, each as a (1, 2)
    array: rows of several processes concatenate, and `padding_metrics` sums them."""
    cm = batch.completion_mask_bt
    pair = lambda a, b: np.asarray([[a, b]], np.int64)
    return {"prompt": pair(np.sum(out.prompt_mask), np.size(out.prompt_mask)),
            "completion": pair(np.sum(cm), np.size(cm)),
            "update": pair(np.sum(batch.mask_bt), np.size(batch.mask_bt)),
            "widths": pair(batch.prompt_len, cm.shape[1])}


def padding_metrics(out, batch: RolloutBatch | None = None) -> dict[str, float]:
    """Real / padded token fractions of the step's sampler input and update batch, and the widths used.

    pad/prompt_real_frac      real prompt tokens / (prompts x prompt width)        (prefill and update)
    pad/completion_real_frac  real completion tokens / (rollouts x completion width) (update, after trimming)
    pad/update_real_frac      real tokens / all tokens of the update batch
    shape/prompt_width, shape/completion_width

    Called as padding_metrics(out, batch), or padding_metrics(counts) with `padding_counts` rows (pooled).
    """
    counts = out if batch is None else padding_counts(out, batch)
    total = {k: v.sum(axis=0) for k, v in counts.items()}
    return {
        "pad/prompt_real_frac": _frac(*total["prompt"]),
        "pad/completion_real_frac": _frac(*total["completion"]),
        "pad/update_real_frac": _frac(*total["update"]),
        "shape/prompt_width": float(counts["widths"][0, 0]),
        "shape/completion_width": float(counts["widths"][0, 1]),
    }


def _judge_counters(judge) -> tuple[int, int, int]:
    stats = getattr(judge, "stats", None)
    return (int(getattr(stats, "real_tokens", 0)), int(getattr(stats, "padded_tokens", 0)),
            int(getattr(stats, "cache_hits", 0)))


class JudgePadding:
    """Reads the judge's running JudgeStats around a phase; `metrics()` gives the phase's figures.

    They are named time/...: the judge's packing depends on the backend (tokens per call) and it skips
    judgments served from its in-memory cache, so a resumed run or another machine can differ.
    """

    def __init__(self, judge):
        self.judge = judge
        self.before = self.after = (0, 0, 0)

    def __enter__(self):
        self.before = _judge_counters(self.judge)
        return self

    def __exit__(self, *exc):
        self.after = _judge_counters(self.judge)

    def metrics(self) -> dict[str, float]:
        real, padded, hits = (a - b for a, b in zip(self.after, self.before))
        return {"time/judge_real_frac": _frac(real, padded), "time/judge_padded_tokens": float(padded),
                "time/judge_cache_hits": float(hits)}


# ---------------------------------------------------------------------------------------------------------------
# persistent compilation cache
# ---------------------------------------------------------------------------------------------------------------

_ours: str | None = None  # the directory this module last configured (vs. one the user gave JAX)
_CACHE_KEYS = ("jax_compilation_cache_dir", "jax_persistent_cache_min_compile_time_secs",
               "jax_persistent_cache_min_entry_size_bytes")


@contextlib.contextmanager
def compilation_cache(setting: str | None, workdir: str) -> Iterator[str | None]:
    """`configure_compilation_cache` for the duration of a block (a training run); JAX's previous settings
    are restored after it, so a run does not leave its cache directory set in the calling process."""
    import jax
    from jax.experimental.compilation_cache import compilation_cache as cc

    global _ours
    saved, saved_ours = {k: getattr(jax.config, k) for k in _CACHE_KEYS}, _ours
    try:
        yield configure_compilation_cache(setting, workdir)
    finally:
        changed = jax.config.jax_compilation_cache_dir != saved["jax_compilation_cache_dir"]
        for k, v in saved.items():
            jax.config.update(k, v)
        if changed:
            cc.reset_cache()
        _ours = saved_ours


def configure_compilation_cache(setting: str | None, workdir: str) -> str | None:
    """Points JAX's persistent compilation cache at a directory; returns it (None: disabled).

    setting ''   -> the directory JAX was given (JAX_COMPILATION_CACHE_DIR or jax.config), else
                    <workdir>/jax_cache: a resumed run reuses the compiled programs of the run before it.
            'none' -> no persistent cache.
            a path -> that directory.
    Programs of any compile time and size are cached unless JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS /
    JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES say otherwise. Call before the first compilation of the run;
    switching directories within a process resets JAX's cache handle so the new one takes effect.
    """
    import jax
    from jax.experimental.compilation_cache import compilation_cache as cc

    global _ours
    setting = (setting or "").strip()
    current = jax.config.jax_compilation_cache_dir
    if setting.lower() == "none":
        path = None
    elif setting:
        path = os.path.abspath(os.path.expanduser(setting))
    elif current and current != _ours:
        path = current  # given by the user (environment or jax.config): theirs wins over the default
    else:
        path = os.path.abspath(os.path.join(workdir, CACHE_SUBDIR))
    users = setting == "" and path is not None and path == current and current != _ours
    if path is not None:
        os.makedirs(path, exist_ok=True)
        if "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS" not in os.environ:
            jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
        if "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES" not in os.environ:
            jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
    if path != current:
        jax.config.update("jax_compilation_cache_dir", path)
        cc.reset_cache()  # JAX opens its cache once; make it reopen at the new path
    if not users:
        _ours = path
    log.info("persistent compilation cache: %s", path or "off")
    return path
