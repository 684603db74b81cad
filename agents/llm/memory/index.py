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


def _hash(text: str) -> tuple[np.ndarray, np.ndarray]:
    """Sorted hashed feature ids of `text` and their sublinear term frequencies (1 + ln tf)."""
    counts: dict[int, int] = {}
    for token, tf in Counter(TOKEN.findall(text.lower())).items():
        f = _feature(token)
        counts[f] = counts.get(f, 0) + tf  # a collision adds up, as in a hashing vectorizer
    ids = np.fromiter(counts, dtype=np.int64, count=len(counts))
    order = np.argsort(ids)
    return ids[order], 1.0 + np.log(np.fromiter(counts.values(), dtype=float, count=len(counts))[order])


class TfidfIndex:
    """Documents by key (any hashable), ranked by TF-IDF cosine similarity to a query."""

    def __init__(self):
        self.rows: dict = {}  # key -> (feature ids, sublinear tf), in insertion order
        self.df = np.zeros(N_FEATURES, dtype=np.int32)  # stored documents per feature (pages untouched stay free)
        self._stacked = None  # (ids, tf, row of each entry) of all rows, rebuilt lazily after a change

    def __len__(self) -> int:
        return len(self.rows)

    def add(self, key, text: str) -> None:
        if key in self.rows:
            self.remove(key)
        ids, tf = _hash(text)
        self.rows[key] = (ids, tf)
        self.df[ids] += 1  # ids are unique within a row
        self._stacked = None

    def remove(self, key) -> None:
        row = self.rows.pop(key, None)
        if row is not None:
            self.df[row[0]] -= 1
            self._stacked = None

    def keys(self) -> list:
        return list(self.rows)

    def rank(self, query: str, k: int) -> list[tuple[object, float]]:
        """Keys and cosine similarities of the `k` stored documents most similar to `query`
        (ties: the earlier added first)."""
        if not self.rows or k <= 0:
            return []
        if self._stacked is None:
            rows = list(self.rows.values())
            self._stacked = (np.concatenate([r[0] for r in rows]), np.concatenate([r[1] for r in rows]),
                             np.repeat(np.arange(len(rows)), [len(r[0]) for r in rows]))
        ids, tf, owner = self._stacked
        qids, qtf = _hash(query)
        if not len(ids) and not len(qids):  # no word anywhere (a refit would have no vocabulary)
            return []
        # smooth IDF over the store plus the query, as TfidfVectorizer fitted on [*docs, query]
        n = len(self.rows) + 1
        pos = np.minimum(np.searchsorted(qids, ids), max(len(qids) - 1, 0))
        in_query = (qids[pos] == ids) if len(qids) else np.zeros(len(ids), dtype=bool)
        w = tf * (np.log((1.0 + n) / (1.0 + self.df[ids] + in_query)) + 1.0)
        qw = qtf * (np.log((1.0 + n) / (2.0 + self.df[qids])) + 1.0)
        norms = np.sqrt(np.bincount(owner, weights=w * w, minlength=len(self.rows)))
        dots = np.bincount(owner, weights=np.where(in_query, w * qw[pos] if len(qids) else 0.0, 0.0),
                           minlength=len(self.rows))
        qnorm = np.linalg.norm(qw) or 1.0  # a query without words is alike to nothing
        sims = dots / (np.where(norms == 0, 1.0, norms) * qnorm)
        keys = list(self.rows)
        return [(keys[i], s) for i, s in _top(sims, k)]
