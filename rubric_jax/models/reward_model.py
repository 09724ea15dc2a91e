"""A Hugging Face sequence-classification reward model, run through our own Transformer forward.

What it is for: RLMR mixes a writing-quality reward with a hard-constraint verifier, and the writing
reward can come either from a judge prompted with rubrics or, option (b), from a trained reward
model. This module is option (b): a Qwen3 or Llama backbone with a linear score head, as saved by
transformers' `Qwen3ForSequenceClassification` / `LlamaForSequenceClassification` (backbone tensors
under "model.", the head as `score.weight` of shape (num_labels, hidden), no bias).

How the score is read: the backbone's final normed hidden state at each row's last real token (the
last position where `mask_bt` is True) goes through the head, in float32. transformers instead finds
"the rightmost token whose id is not pad_token_id" (or position -1 when the config has no pad id).
With either padding side the two agree unless a real sequence itself ends in tokens equal to
pad_token_id (checkpoints that reuse EOS as pad): transformers then reads an earlier token, and a
model trained through its head learned to read there, so `score_texts` warns when it sees such rows.
Positions come from the mask too (the model's cumulative-mask positions), so a left-padded row is
scored as that row alone. (transformers, given no position_ids, starts a left-padded row's positions
at its pad count; rotary attention only sees position differences, so that changes rounding only.)

Parity: on tiny random float32 checkpoints our scores equal transformers' logits within 1e-4
(tests/test_reward_model.py; observed ~1e-6 on O(1) scores), for right-padded batches and for
left-padded rows against each row run alone; the backbone alone matches transformers to ~5e-7
(tests/test_model.py).

The score column: a one-label head gives the reward in column 0. A head with several labels (e.g.
one per attribute) has no single reward; the caller names the column with `label=` (an index or a
name from config.json's id2label).

Text in: `score_texts` renders each (prompt, response) with the checkpoint's chat template (user turn,
assistant turn), as reward models are trained, and cuts an over-long exchange at the response's end
while keeping the template's closing tokens; `encode_exchange` says exactly what is kept.
"""

from __future__ import annotations

import functools
import json
import logging
import os
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from rubric_jax.models.config import ModelConfig
from rubric_jax.models.loading import CheckpointError, _safetensors_files, assign_hf_tensors, resolve_checkpoint
from rubric_jax.models.transformer import Transformer, abstract_model
from rubric_jax.padding import pow2

log = logging.getLogger(__name__)

SCORE_TENSOR = "score.weight"


class RewardModel(nnx.Module):
    """Backbone Transformer plus a bias-free linear score head: (tokens, mask) -> (B, num_labels) f32."""

    def __init__(self, backbone: Transformer, score_weight, *, labels: Sequence[str] | None = None,
                 pad_token_id: int | None = None, name: str = ""):
        w = jnp.asarray(score_weight)
        if w.ndim != 2 or w.shape[1] != backbone.cfg.hidden_size:
            raise CheckpointError(f"tensor {SCORE_TENSOR!r} has shape {tuple(w.shape)}, expected "
                                  f"(num_labels, {backbone.cfg.hidden_size})")
        self.backbone = backbone
        # HF layout (num_labels, hidden): the same array as score.weight, so exports need no transpose.
        self.score = nnx.Param(w, axes=(None, "embed"))
        n = int(w.shape[0])
        self.labels: tuple[str, ...] = tuple(labels) if labels is not None else tuple(f"LABEL_{i}" for i in range(n))
        if len(self.labels) != n:
            raise CheckpointError(f"config.json names {len(self.labels)} labels {list(self.labels)} but "
                                  f"{SCORE_TENSOR!r} has {n} rows")
        self.pad_token_id = pad_token_id
        self.name = name

    @property
    def num_labels(self) -> int:
        return len(self.labels)

    def __call__(self, tokens_bt, mask_bt=None) -> jax.Array:
        """Scores (B, num_labels) float32, read at each row's last real token (mask True = real).

        Padding may sit on either side (or both). A row with no real token reads position 0: its
        score means nothing and callers must not use it."""
        tokens_bt = jnp.asarray(tokens_bt, jnp.int32)
        b, t = tokens_bt.shape
        mask_bt = jnp.ones((b, t), bool) if mask_bt is None else jnp.asarray(mask_bt, bool)
        hidden_btd, _ = self.backbone(tokens_bt, mask_bt=mask_bt, return_hidden=True)
        last_b = last_real_index(mask_bt)
        h_bd = jnp.take_along_axis(hidden_btd, last_b[:, None, None], axis=1)[:, 0]
        # Only B vectors reach the head, so doing it in f32 costs nothing even for a bf16 backbone.
        w = self.score[...].astype(jnp.float32)
        return jnp.dot(h_bd.astype(jnp.float32), w.T, preferred_element_type=jnp.float32)

    def reward_column(self, label: int | str | None = None) -> int:
        """Which score column is the reward: 0 for a one-label head, else the `label` the caller names."""
        if label is None:
            if self.num_labels == 1:
                return 0
            raise ValueError(f"reward model {self.name!r} has {self.num_labels} labels {list(self.labels)}: "
                             f"pass label= (an index or one of these names) to say which column is the reward")
        if isinstance(label, str):
            if label not in self.labels:
                raise ValueError(f"label {label!r} is not one of {list(self.labels)}")
            return self.labels.index(label)
        idx = int(label)
        if not 0 <= idx < self.num_labels:
            raise ValueError(f"label index {idx} is out of range for {self.num_labels} labels {list(self.labels)}")
        return idx


def last_real_index(mask_bt) -> jax.Array:
    """(B,) int32: the index of the last True in each row of the mask (0 for an all-False row)."""
    t = mask_bt.shape[-1]
    idx = jnp.where(mask_bt, jnp.arange(t, dtype=jnp.int32)[None, :], -1)
    return jnp.maximum(idx.max(axis=-1), 0).astype(jnp.int32)


# ---------------------------------------------------------------------------------------------
# Loading.

def load_reward_model(path: str, *, dtype=jnp.float32, mesh=None, rules=None):
    """Loads a Qwen3/Llama sequence-classification checkpoint directory: (RewardModel, Tokenizer).

    The backbone tensors (model.*) go through the same name/shape-checked assignment as causal LMs
    (a missing one is named); `score.weight` becomes the head. With `mesh`, backbone weights are placed
    on their shardings as they are read and the (small) head is replicated.
    """
    from safetensors import safe_open

    from rubric_jax.models.tokenizer import load_tokenizer

    path = resolve_checkpoint(path)
    if not os.path.isdir(path):
        raise ValueError(f"{path}: a reward model is a checkpoint directory (config.json + *.safetensors); "
                         f"GGUF files carry no score head")
    config_path = os.path.join(path, "config.json")
    if not os.path.exists(config_path):
        raise FileNotFoundError(f"{config_path} not found")
    with open(config_path) as f:
        hf_cfg = json.load(f)
    archs = hf_cfg.get("architectures") or []

    handles, location = {}, {}
    for file in _safetensors_files(path):
        h = safe_open(file, framework="flax")
        handles[file] = h
        for k in h.keys():
            location[k] = file
    if SCORE_TENSOR not in location:
        raise CheckpointError(
            f"{path} is not a sequence-classification checkpoint: it has no {SCORE_TENSOR!r} tensor "
            f"(config.json architectures: {archs or 'not given'}); a reward model is saved by "
            f"Qwen3ForSequenceClassification or LlamaForSequenceClassification")
    if "score.bias" in location:
        raise CheckpointError(f"{path} has a 'score.bias' tensor; the Qwen3/Llama score head has no bias")

    # A reward model has no LM head. Declaring the embeddings tied keeps the backbone from expecting
    # lm_head.weight; its `logits` are therefore meaningless and the reward model never calls them.
    cfg = ModelConfig.from_hf_dict(hf_cfg, name=os.path.basename(os.path.abspath(path))).replace(
        tie_word_embeddings=True)
    shardings = None
    if mesh is not None:
        from rubric_jax.models.sharding import DEFAULT_RULES, state_shardings

        shardings = state_shardings(nnx.state(abstract_model(cfg, dtype=dtype)), mesh, rules or DEFAULT_RULES)
    backbone_names = [n for n in location if n != SCORE_TENSOR]
    backbone = assign_hf_tensors(cfg, lambda n: handles[location[n]].get_tensor(n), backbone_names,
                                 dtype=dtype, shardings=shardings)

    score = np.asarray(handles[location[SCORE_TENSOR]].get_tensor(SCORE_TENSOR), dtype=np.float32)
    if mesh is not None:
        from jax.sharding import NamedSharding, PartitionSpec

        score = jax.device_put(score.astype(dtype), NamedSharding(mesh, PartitionSpec()))
    else:
        score = jnp.asarray(score, dtype=dtype)
    labels = _labels(hf_cfg, int(score.shape[0]) if score.ndim == 2 else None)
    pad = hf_cfg.get("pad_token_id")
    rm = RewardModel(backbone, score, labels=labels, pad_token_id=int(pad) if pad is not None else None,
                     name=cfg.name)
    tokenizer = load_tokenizer(path)
    log.info("loaded reward model %s (%s, %s, %d layers, %d label(s) %s)", path, archs, cfg.arch, cfg.num_layers,
             rm.num_labels, list(rm.labels))
    return rm, tokenizer


def _labels(hf_cfg: dict, n_rows: int | None) -> tuple[str, ...] | None:
    """Label names in column order from id2label; None (generic names) when the config has none."""
    id2label = hf_cfg.get("id2label")
    if not id2label:
        return None
    names = {int(k): str(v) for k, v in id2label.items()}
    if sorted(names) != list(range(len(names))):
        raise CheckpointError(f"config.json id2label keys {sorted(names)} are not 0..{len(names) - 1}")
    if n_rows is not None and len(names) != n_rows:
        raise CheckpointError(f"config.json id2label names {len(names)} labels but {SCORE_TENSOR!r} has "
                              f"{n_rows} rows")
    return tuple(names[i] for i in range(len(names)))


# ---------------------------------------------------------------------------------------------
# Scoring text.

def encode_exchange(tokenizer, prompt: str, response: str, *, max_len: int = 2048,
                    system: str | None = None) -> tuple[list[int], bool]:
    """Token ids of the chat-templated exchange (prompt as the user turn, response as the assistant
    turn, as reward models are trained on), at most max_len long; and whether anything was cut.

    Truncation keeps the template's frame whole, in particular the tokens that close the assistant
    turn, because the score is read at the last token and the head was trained to read it there.
    Within the frame the response loses its end first (the usual choice when training reward models),
    but keeps at least half of max_len; only then does the prompt lose its end (its start, which
    usually carries the instruction, stays). Set max_len above prompt + generation length to never cut.
    """
    text = tokenizer.chat([{"role": "user", "content": prompt}, {"role": "assistant", "content": response}],
                          system=system, add_generation_prompt=False)
    enc = tokenizer.hf(text, add_special_tokens=False, return_offsets_mapping=True)
    ids = list(enc["input_ids"])
    if len(ids) <= max_len:
        return ids, False
    starts = np.asarray([s for s, _ in enc["offset_mapping"]])
    r_span = _find(text, response, len(text))
    if r_span is None:
        raise ValueError(f"the exchange is {len(ids)} tokens (max_len={max_len}) and the response could not "
                         f"be located in the chat-templated text to truncate it")
    p_span = _find(text, prompt, r_span[0]) or (r_span[0], r_span[0])

    def token_range(span):
        # A token belongs to the span its first character falls in; a token straddling the span's
        # start stays with the frame before it.
        return int(np.searchsorted(starts, span[0], "left")), int(np.searchsorted(starts, span[1], "left"))

    p0, p1 = token_range(p_span)
    r0, r1 = token_range(r_span)
    n_prompt, n_resp = p1 - p0, r1 - r0
    excess = len(ids) - max_len
    keep_resp = max(n_resp - excess, min(n_resp, max_len // 2))
    excess -= n_resp - keep_resp
    keep_prompt = n_prompt
    if excess > 0:
        keep_prompt = n_prompt - excess
        if keep_prompt < 0:  # the frame plus a half-window response still does not fit
            keep_resp += keep_prompt
            keep_prompt = 0
    if keep_resp < 0:
        raise ValueError(f"the chat template alone is {len(ids) - n_prompt - n_resp} tokens, over max_len={max_len}")
    out = ids[:p0 + keep_prompt] + ids[p1:r0 + keep_resp] + ids[r1:]
    assert len(out) == max_len, (len(out), max_len)
    return out, True


def _find(text: str, piece: str, end: int) -> tuple[int, int] | None:
    """Character span of the last occurrence of `piece` (or of it stripped, as templates often trim
    content) in text[:end]; None when absent or empty."""
    for p in (piece, piece.strip()):
        if p:
            i = text.rfind(p, 0, end)
            if i >= 0:
                return i, i + len(p)
    return None


def length_bucket(n: int, max_len: int, smallest: int = 32) -> int:
    """Padded length for a row of n tokens: the next power of two (at least `smallest`), capped at
    max_len, so a whole run compiles one program per bucket."""
    return min(smallest * pow2(-(-n // smallest)), max_len)


@functools.partial(jax.jit, static_argnames=("graphdef",))
def _scores(graphdef, state, tokens_bt, mask_bt):
    return nnx.merge(graphdef, state)(tokens_bt, mask_bt)


def score_texts(rm: RewardModel, tokenizer, prompts: Sequence[str], responses: Sequence[str], *,
                batch_size: int = 8, max_len: int = 2048, label: int | str | None = None,
                system: str | None = None) -> np.ndarray:
    """Reward of each (prompt, response) pair: float32 (N,), in input order.

    Rows are sorted by length so a batch holds similar lengths, right padded to a length bucket, and
    every batch has exactly `batch_size` rows (filler rows are discarded), so the number of compiled
    programs is the number of buckets used. See `encode_exchange` for the template and truncation.
    On a mesh, call this inside `use_mesh(mesh)` so the forward's sharding annotations apply.
    """
    if len(prompts) != len(responses):
        raise ValueError(f"{len(prompts)} prompts but {len(responses)} responses")
    if batch_size < 1 or max_len < 1:
        raise ValueError(f"batch_size and max_len must be >= 1, got {batch_size}, {max_len}")
    col = rm.reward_column(label)
    n = len(prompts)
    if n == 0:
        return np.zeros((0,), np.float32)
    rows, cut = [], 0
    for p, r in zip(prompts, responses):
        ids, was_cut = encode_exchange(tokenizer, p, r, max_len=max_len, system=system)
        rows.append(ids)
        cut += was_cut
    if cut:
        log.warning("reward model: %d of %d exchanges were over max_len=%d tokens and were truncated", cut, n, max_len)
    if rm.pad_token_id is not None:
        ends_in_pad = sum(1 for ids in rows if ids and ids[-1] == rm.pad_token_id)
        if ends_in_pad:
            log.warning("reward model: %d exchanges end in the pad token id %d; transformers would read their "
                        "score at an earlier token, this model reads it at the last real token", ends_in_pad,
                        rm.pad_token_id)
    pad_id = rm.pad_token_id if rm.pad_token_id is not None else tokenizer.pad_id
    graphdef, state = nnx.split(rm)
    order = sorted(range(n), key=lambda i: len(rows[i]))
    out = np.zeros((n,), np.float32)
    for start in range(0, n, batch_size):
        idx = order[start:start + batch_size]
        t = length_bucket(max(len(rows[i]) for i in idx), max_len)
        tokens = np.full((batch_size, t), pad_id, np.int32)
        mask = np.zeros((batch_size, t), bool)
        for j, i in enumerate(idx):
            tokens[j, :len(rows[i])] = rows[i]
            mask[j, :len(rows[i])] = True
        scores = np.asarray(_scores(graphdef, state, jnp.asarray(tokens), jnp.asarray(mask)))
        out[idx] = scores[:len(idx), col]
    return out


__all__ = ["RewardModel", "load_reward_model", "score_texts", "encode_exchange", "last_real_index",
           "length_bucket"]
