"""Grain pipeline over prompt records: seeded shuffle -> repeat (re-shuffled per epoch) -> batch -> shard.

    ds = PromptDataset(load_jsonl("creative_writing"), prompts_per_step=8, seed=0)
    it = ds.iterator()
    batch = next(it)                # list[PromptRecord], len 8 (this shard's part, see below)
    state = it.get_state()          # plain dict, json.dumps-able; goes into the checkpoint
    ...
    it = ds.iterator(); it.set_state(state)   # continues with exactly the batches that would have followed

Batches are lists of `PromptRecord` (prompts are strings; tokenization is the trainer's job). The stream
is infinite: grain's shuffle uses a different permutation in every epoch, and batches run across epoch
boundaries without dropping anything, so a batch that straddles a boundary can repeat a prompt (rarely,
and only when the set is tiny). Every record is seen once per epoch.

Multi-host: give each process `shard_index=jax.process_index(), shard_count=jax.process_count()`.
There is one global stream of batches of `prompts_per_step` records, the same whatever the number of
shards; shard i takes the contiguous slice [i*b, (i+1)*b) of every global batch, b = prompts_per_step //
shard_count (it must divide evenly). So the shards' batches, concatenated in shard order, are exactly the
one-shard batch of that step, and `global_offset` (= i*b) is the global index of this shard's first
prompt within the step's batch (for per-prompt randomness that does not depend on the split).

The iterator state is grain's own dataset-iterator state (``{"next_index": n}``, the number of global
batches taken) plus the settings it is only valid for (records, seed, shuffle, prompts_per_step); it is
the same on every shard and does not record the shard, so a state saved with one shard count restores
with another and continues the same global stream. `set_state` refuses a state taken from a pipeline
with other records or settings.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence
from typing import Any

import grain

from rubric_jax.data.jsonl import DataError, PromptRecord

STATE_VERSION = 2  # 1: per-shard strided streams (state recorded batch_size and the shard)


def _fingerprint(records: Sequence[PromptRecord]) -> str:
    """A short hash of the record ids in order: detects restoring a state onto a different prompt set."""
    h = hashlib.sha256()
    for r in records:
        h.update(r.id.encode("utf-8"))
        h.update(b"\0")
    return h.hexdigest()[:16]


class PromptDataset:
    """Seeded, infinitely repeating batches of prompt records, as a grain dataset; optionally one
    contiguous shard of every global batch."""

    def __init__(
        self,
        records: Sequence[PromptRecord],
        prompts_per_step: int,
        *,
        seed: int = 0,
        shuffle: bool = True,
        shard_index: int = 0,
        shard_count: int = 1,
    ):
        records = list(records)
        if not records:
            raise DataError("PromptDataset: no records")
        if shard_count < 1 or not 0 <= shard_index < shard_count:
            raise ValueError(f"shard_index={shard_index} must be in [0, shard_count={shard_count})")
        if prompts_per_step < 1 or prompts_per_step % shard_count:
            raise ValueError(
                f"prompts_per_step={prompts_per_step} must be a positive multiple of shard_count={shard_count}"
            )
        self.records = records
        self.prompts_per_step = prompts_per_step
        self.batch_size = prompts_per_step // shard_count  # prompts this shard yields per step
        self.seed = int(seed)
        self.shuffle = bool(shuffle)
        self.shard_index = shard_index
        self.shard_count = shard_count

        ds = grain.MapDataset.source(records)
        if self.shuffle:
            ds = ds.shuffle(seed=self.seed)
        # "Forever" as a finite count: grain's repeat(None) has length sys.maxsize, which batches of one prompt
        # keep and its prefetching iterator cannot take as a length (OverflowError); 2**62 prompts is as endless.
        ds = ds.repeat(max(1, 2 ** 62 // len(records)))
        self._global: grain.MapDataset = ds.batch(prompts_per_step, batch_fn=list)
        lo, hi = self.global_offset, self.global_offset + self.batch_size
        self._dataset = self._global if shard_count == 1 else self._global.map(lambda batch: batch[lo:hi])
        # No shard in the settings: every shard walks the same global stream, so a state is portable
        # across shard counts.
        self._settings = {
            "version": STATE_VERSION,
            "records": _fingerprint(records),
            "num_records": len(records),
            "seed": self.seed,
            "shuffle": self.shuffle,
            "prompts_per_step": prompts_per_step,
        }

    @property
    def global_offset(self) -> int:
        """Global index, within each step's batch of `prompts_per_step`, of this shard's first prompt."""
        return self.shard_index * self.batch_size

    @property
    def dataset(self) -> grain.MapDataset:
        """This shard's batches as a grain MapDataset (random access: ds[step] is this shard's part of the
        batch of that step)."""
        return self._dataset

    @property
    def global_dataset(self) -> grain.MapDataset:
        """The global batches (all shards' parts concatenated), the same on every shard."""
        return self._global

    def iterator(self) -> PromptIterator:
        return PromptIterator(self)

    def __iter__(self) -> Iterator[list[PromptRecord]]:
        return self.iterator()


class PromptIterator:
    """Iterator of batches with a JSON-serialisable, restorable position."""

    def __init__(self, dataset: PromptDataset):
        self._ds = dataset
        # No worker threads: element lookup is a list index, and threads only add nondeterminism in timing.
        read = grain.ReadOptions(num_threads=0, prefetch_buffer_size=0)
        self._it = iter(dataset.dataset.to_iter_dataset(read))

    def __iter__(self) -> PromptIterator:
        return self

    def __next__(self) -> list[PromptRecord]:
        return next(self._it)

    @property
    def step(self) -> int:
        """Number of batches taken so far."""
        return int(self._it.get_state()["next_index"])

    @property
    def epoch(self) -> int:
        """Completed passes over the records by the global stream (global records consumed // records)."""
        return self.step * self._ds.prompts_per_step // len(self._ds.records)

    def get_state(self) -> dict[str, Any]:
        """Plain-JSON state: grain's iterator state plus the settings it belongs to (the same on every shard)."""
        return {**self._ds._settings, "grain": dict(self._it.get_state())}

    def set_state(self, state: dict[str, Any]) -> None:
        """Restore a state from `get_state` (possibly after a json round trip)."""
        if not isinstance(state, dict) or "grain" not in state:
            raise DataError(f"not a prompt-iterator state: {state!r:.200}")
        state = _upgrade(state)
        for key, want in self._ds._settings.items():
            got = state.get(key)
            if got != want:
                raise DataError(
                    f"prompt-iterator state does not match this pipeline: {key} is {got!r} in the state "
                    f"but {want!r} here"
                )
        self._it.set_state(dict(state["grain"]))


def _upgrade(state: dict[str, Any]) -> dict[str, Any]:
    """A version-1 state of a one-shard pipeline walked the stream that version 2 calls global (same
    shuffle, repeat and batches): restore it as such. Version-1 states of several shards cannot be."""
    if state.get("version") != 1 or state.get("shard_count") != 1 or state.get("shard_index") != 0:
        return state
    old = dict(state)
    batch_size = old.pop("batch_size", None)
    old.pop("shard_index")
    old.pop("shard_count")
    return {**old, "version": STATE_VERSION, "prompts_per_step": batch_size}
