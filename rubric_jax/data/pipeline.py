"""Grain pipeline over prompt records: shard -> seeded shuffle -> repeat (re-shuffled per epoch) -> batch.

    ds = PromptDataset(load_jsonl("creative_writing"), prompts_per_step=8, seed=0)
    it = ds.iterator()
    batch = next(it)                # list[PromptRecord], len 8 (per shard, see below)
    state = it.get_state()          # plain dict, json.dumps-able; goes into the checkpoint
    ...
    it = ds.iterator(); it.set_state(state)   # continues with exactly the batches that would have followed

Batches are lists of `PromptRecord` (prompts are strings; tokenization is the trainer's job). The stream
is infinite: grain's shuffle uses a different permutation in every epoch, and batches run across epoch
boundaries without dropping anything, so a batch that straddles a boundary can repeat a prompt (rarely,
and only when the set is tiny). Every record is seen once per epoch.

Multi-host: give each process `shard_index=jax.process_index(), shard_count=jax.process_count()`.
Shards are disjoint strided slices (record i goes to shard i % shard_count) that together cover all
records; `prompts_per_step` is the global number of prompts per step and each shard yields
`prompts_per_step // shard_count` of them (it must divide evenly).

The iterator state is grain's own dataset-iterator state (``{"next_index": n}``) plus the settings it is
only valid for; `set_state` refuses a state taken from a pipeline with other records or settings.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence
from typing import Any

import grain

from rubric_jax.data.jsonl import DataError, PromptRecord

STATE_VERSION = 1


def _fingerprint(records: Sequence[PromptRecord]) -> str:
    """A short hash of the record ids in order: detects restoring a state onto a different prompt set."""
    h = hashlib.sha256()
    for r in records:
        h.update(r.id.encode("utf-8"))
        h.update(b"\0")
    return h.hexdigest()[:16]


class PromptDataset:
    """Seeded, sharded, infinitely repeating batches of prompt records, as a grain dataset."""

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
        if len(records) < shard_count:
            raise DataError(f"PromptDataset: {len(records)} records cannot fill {shard_count} shards")
        self.records = records
        self.prompts_per_step = prompts_per_step
        self.batch_size = prompts_per_step // shard_count
        self.seed = int(seed)
        self.shuffle = bool(shuffle)
        self.shard_index = shard_index
        self.shard_count = shard_count

        ds = grain.MapDataset.source(records)
        if shard_count > 1:
            ds = ds[shard_index::shard_count]
        self.shard_size = len(ds)
        if self.shuffle:
            ds = ds.shuffle(seed=self.seed)
        ds = ds.repeat(None)
        self._dataset: grain.MapDataset = ds.batch(self.batch_size, batch_fn=list)
        self._settings = {
            "version": STATE_VERSION,
            "records": _fingerprint(records),
            "num_records": len(records),
            "seed": self.seed,
            "shuffle": self.shuffle,
            "batch_size": self.batch_size,
            "shard_index": shard_index,
            "shard_count": shard_count,
        }

    @property
    def dataset(self) -> grain.MapDataset:
        """The underlying grain MapDataset of batches (random access: ds[step] is the batch of that step)."""
        return self._dataset

    def shard_records(self) -> list[PromptRecord]:
        """The records of this shard, unshuffled."""
        return self.records[self.shard_index :: self.shard_count]

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
        """Completed passes over this shard (records consumed // shard size)."""
        return self.step * self._ds.batch_size // self._ds.shard_size

    def get_state(self) -> dict[str, Any]:
        """Plain-JSON state: grain's iterator state plus the settings it belongs to."""
        return {**self._ds._settings, "grain": dict(self._it.get_state())}

    def set_state(self, state: dict[str, Any]) -> None:
        """Restore a state from `get_state` (possibly after a json round trip)."""
        if not isinstance(state, dict) or "grain" not in state:
            raise DataError(f"not a prompt-iterator state: {state!r:.200}")
        for key, want in self._ds._settings.items():
            got = state.get(key)
            if got != want:
                raise DataError(
                    f"prompt-iterator state does not match this pipeline: {key} is {got!r} in the state "
                    f"but {want!r} here"
                )
        self._it.set_state(dict(state["grain"]))
