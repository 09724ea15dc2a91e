"""A cache of judgments so that rescoring the same inputs costs nothing.

Keys hash (judge model id, prompt text fingerprint, kind, prompt, first response, second response,
criterion, mode class): presentation order is part of the key because (a, b) and (b, a) are
different judgments. Values are small numpy arrays (the verdict-token logits plus the log-mass of
the verdict tokens, or a parsed generate-mode verdict). Bounded LRU.
"""

from __future__ import annotations

import collections
import hashlib
import json

import numpy as np


def digest(*parts: str) -> str:
    h = hashlib.sha256()
    for p in parts:
        b = p.encode("utf-8", "surrogatepass")
        h.update(len(b).to_bytes(8, "little"))
        h.update(b)
    return h.hexdigest()


def criterion_digest(criterion) -> str:
    return digest(json.dumps(criterion.to_dict(), sort_keys=True))


class JudgmentCache:
    """LRU map from judgment key to a numpy array. max_entries=0 disables caching."""

    def __init__(self, max_entries: int = 1_000_000):
        self.max_entries = max_entries
        self._d: collections.OrderedDict[str, np.ndarray] = collections.OrderedDict()
        self.hits = 0
        self.misses = 0

    @staticmethod
    def key(model_id: str, prompt_fp: str, kind: str, mode_class: str, prompt_d: str, first_d: str,
            second_d: str, criterion_d: str) -> str:
        """All arguments are strings; *_d are digests from `digest` / `criterion_digest`."""
        return digest(model_id, prompt_fp, kind, mode_class, prompt_d, first_d, second_d, criterion_d)

    def get(self, key: str):
        v = self._d.get(key)
        if v is None:
            self.misses += 1
            return None
        self._d.move_to_end(key)
        self.hits += 1
        return v

    def put(self, key: str, value: np.ndarray) -> None:
        if self.max_entries <= 0:
            return
        self._d[key] = value
        self._d.move_to_end(key)
        while len(self._d) > self.max_entries:
            self._d.popitem(last=False)

    def __len__(self) -> int:
        return len(self._d)

    def __contains__(self, key: str) -> bool:
        return key in self._d

    def clear(self) -> None:
        self._d.clear()


__all__ = ["JudgmentCache", "digest", "criterion_digest"]
