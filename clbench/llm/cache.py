"""On-disk response cache keyed by the full request, so a re-run or resumed run does not pay twice.

The key is the SHA-256 of the canonical JSON of everything that shapes the reply (model,
messages, tools, sampling parameters) plus the agent's seed, so rollouts that sample at
temperature > 0 do not share replies. The endpoint URL is not part of the key: the same model
behind a new port or gateway still hits. One JSON file per entry, written atomically, so
concurrent workers can share a cache directory.
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path


def request_key(request: dict) -> str:
    canonical = json.dumps(request, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


class ResponseCache:
    def __init__(self, directory: str | Path):
        self.dir = Path(directory).expanduser()
        self.dir.mkdir(parents=True, exist_ok=True)

    def _path(self, key: str) -> Path:
        return self.dir / key[:2] / f"{key}.json"

    def get(self, key: str) -> dict | None:
        try:
            return json.loads(self._path(key).read_text())
        except FileNotFoundError:
            return None
        except (json.JSONDecodeError, UnicodeDecodeError):  # a torn entry is a miss, rewritten later
            return None

    def put(self, key: str, value: dict) -> None:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(value, ensure_ascii=False))
        os.replace(tmp, path)

    def __len__(self) -> int:
        return sum(1 for _ in self.dir.glob("*/*.json"))
