"""An incremental TF-IDF index over a bounded store: adding or evicting a document costs that document.

`base.tfidf_rank` refits scikit-learn's `TfidfVectorizer(sublinear_tf=True)` over every document
for every query, so a store that grows makes each query cost more, and a run of n instances cost
O(n^2). `TfidfIndex` gives the same ranking without a refit: each document is hashed once into
sparse term counts when it is added (the tokens of `TfidfVectorizer`, hashed with CRC-32), the
document frequencies are kept as counts that an add raises and an evict lowers, and a query weights the stored rows with the current IDF (the query counted as one more
document, as the refit did). Scores equal the refit's up to hash collisions (2**20 features).
A query still reads every stored row, so its cost is bounded by the store's bound, which each
memory that uses the index states.
"""
from __future__ import annotations

import re
import zlib
from collections import Counter
from functools import lru_cache

import numpy as np

from clbench.agents.llm.memory.base import _top

N_FEATURES = 1 << 20
TOKEN = re.compile(r"(?u)\b\w\w+\b")  # TfidfVectorizer's default tokens (lowercased)


@lru_cache(maxsize=1 << 16)
def _feature(token: str) -> int:
    return zlib.crc32(token.encode()) % N_FEATURES


def features(text: str) -> dict[int, int]:
    """Hashed feature id -> term count of `text`. Texts joined by a non-word character (e.g. a
    newline) have the sum of their counts, so a query that contains a filed text can reuse them."""
    counts: dict[int, int] = {}
    for token, tf in Counter(TOKEN.findall(text.lower())).items():
        f = _feature(token)
        counts[f] = counts.get(f, 0) + tf  # a collision adds up, as in a hashing vectorizer
    return counts


def joined(*parts: dict[int, int]) -> dict[int, int]:
    """`features` of texts joined by newlines, from theirs."""
    out = dict(parts[0])
    for part in parts[1:]:
        for f, tf in part.items():
            out[f] = out.get(f, 0) + tf
    return out


def _hash(text: str | dict[int, int]) -> tuple[np.ndarray, np.ndarray]:
    """Sorted hashed feature ids of `text` (or of its `features`) and their sublinear term
    frequencies (1 + ln tf)."""
    counts = features(text) if isinstance(text, str) else text
    ids = np.fromiter(counts, dtype=np.int64, count=len(counts))
    order = np.argsort(ids)
    return ids[order], 1.0 + np.log(np.fromiter(counts.values(), dtype=float, count=len(counts))[order])


class TfidfIndex:
    """Documents by key (any hashable), ranked by TF-IDF cosine similarity to a query.

    The stored rows live in flat arrays, one slot per document in the order added; a removal marks
    its slot dead, and the arrays are compacted once the dead outnumber the live, so adding and
    removing cost the document (amortized), not the store."""

    def __init__(self):
        self.rows: dict = {}  # key -> (feature ids, sublinear tf), in insertion order
        self.df = np.zeros(N_FEATURES, dtype=np.int32)  # stored documents per feature (pages untouched stay free)
        self._slot: dict = {}  # key -> its slot
        self._keys: list = []  # slot -> key, None once removed
        self._ids = np.zeros(0, dtype=np.int64)  # all slots' entries: feature, tf, slot
        self._tf = np.zeros(0)
        self._owner = np.zeros(0, dtype=np.int64)
        self._pending: list = []  # (slot, ids, tf) added since the arrays were last extended
        self._query: np.ndarray | None = None  # scratch for rank: untouched pages stay free

    def __len__(self) -> int:
        return len(self.rows)

    def add(self, key, text: str | dict[int, int]) -> None:
        """File `text` (or its `features`) under `key`."""
        if key in self.rows:
            self.remove(key)
        ids, tf = _hash(text)
        self.rows[key] = (ids, tf)
        self.df[ids] += 1  # ids are unique within a row
        self._slot[key] = len(self._keys)
        self._keys.append(key)
        self._pending.append((self._slot[key], ids, tf))

    def remove(self, key) -> None:
        row = self.rows.pop(key, None)
        if row is None:
            return
        self.df[row[0]] -= 1
        self._keys[self._slot.pop(key)] = None
        if len(self._keys) > 2 * len(self.rows) + 8:  # mostly dead: start the arrays afresh
            self._keys, self._slot = list(self.rows), {k: i for i, k in enumerate(self.rows)}
            self._ids, self._tf, self._owner = np.zeros(0, dtype=np.int64), np.zeros(0), np.zeros(0, dtype=np.int64)
            self._pending = [(i, *self.rows[k]) for i, k in enumerate(self.rows)]

    def keys(self) -> list:
        return list(self.rows)

    def _arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        if self._pending:
            self._ids = np.concatenate([self._ids, *(p[1] for p in self._pending)])
            self._tf = np.concatenate([self._tf, *(p[2] for p in self._pending)])
            self._owner = np.concatenate([self._owner, *(np.full(len(p[1]), p[0]) for p in self._pending)])
            self._pending = []
        return self._ids, self._tf, self._owner

    def rank(self, query: str | dict[int, int], k: int) -> list[tuple[object, float]]:
        """Keys and cosine similarities of the `k` stored documents most similar to `query` (or
        to its `features`; ties: the earlier added first)."""
        if not self.rows or k <= 0:
            return []
        ids, tf, owner = self._arrays()
        qids, qtf = _hash(query)
        if not len(qids) and not self.df[ids].any():  # no word anywhere (a refit would have no vocabulary)
            return []
        # smooth IDF over the store plus the query, as TfidfVectorizer fitted on [*docs, query]; it
        # depends on a feature's document count only: a table over the counts, not a log per entry
        n = len(self.rows) + 1
        idf = np.log((1.0 + n) / (1.0 + np.arange(n + 2))) + 1.0
        qw = qtf * idf[self.df[qids] + 1]
        if self._query is None:  # the query's weights by feature, zero elsewhere (reset after each query)
            self._query = np.zeros(N_FEATURES)
        self._query[qids] = qw
        try:
            shared = self._query[ids]  # > 0 exactly where a stored entry's feature is in the query
        finally:
            self._query[qids] = 0.0
        w = tf * idf[self.df[ids] + (shared > 0)]
        slots = len(self._keys)
        norms = np.sqrt(np.bincount(owner, weights=w * w, minlength=slots))
        dots = np.bincount(owner, weights=w * shared, minlength=slots)
        qnorm = np.linalg.norm(qw) or 1.0  # a query without words is alike to nothing
        sims = dots / (np.where(norms == 0, 1.0, norms) * qnorm)
        sims[[i for i, key in enumerate(self._keys) if key is None]] = -np.inf  # removed slots
        return [(self._keys[i], s) for i, s in _top(sims, min(k, len(self.rows)))]
