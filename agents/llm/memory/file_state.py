"""`file-state`: facts written to files in a per-agent directory and read back on demand."""
from __future__ import annotations

import re
import shutil
import tempfile
import weakref
from pathlib import Path

from clbench.actions import tool_schema
from clbench.agents.llm.memory.base import Episode, Memory, keep_share

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"
READ_TOOL = "read_memory_file"
INSTRUCTIONS = (
    "You keep memory files in a directory of your own. At the start of every later instance you see the list of "
    "files and can read any of them with the {tool} tool. From the instance that just finished, update your "
    "files: write (replace) or append facts, values, strategies and mistakes worth keeping, or delete stale files. "
    "Use a few well-named files (at most {max_files}, {chars} characters each). Reply with JSON: "
    '{{"files": [{{"name": "facts.md", "mode": "append", "content": "..."}}, ...]}} (mode: write, append or delete)'
)


class FileStateMemory(Memory):
    """The model's files live in `directory` (a fresh temporary directory per agent by default,
    removed with the agent, so a stateless instance starts with none). The prompt lists the
    files; their contents enter the context only when the model reads one with the tool."""

    name = "file-state"
    description = "facts written to files in a per-agent directory after each instance, read back on demand with a tool"

    def __init__(self, model, directory: str | None = None, max_files: int = 20, max_file_chars: int = 8000, **options):
        super().__init__(model, **options)
        if max_files < 1 or max_file_chars < 1:
            raise ValueError("max_files and max_file_chars must be >= 1")
        self.dir = Path(directory or tempfile.mkdtemp(prefix="clbench-file-state-"))
        self.dir.mkdir(parents=True, exist_ok=True)
        if not directory:  # an own directory goes with the agent
            weakref.finalize(self, shutil.rmtree, str(self.dir), ignore_errors=True)
        self.max_files, self.max_file_chars = int(max_files), int(max_file_chars)
        self.schema = {"type": "object", "required": ["files"], "properties": {"files": {
            "type": "array", "maxItems": self.max_files, "items": {
                "type": "object", "required": ["name", "mode"],
                "properties": {"name": {"type": "string", "pattern": NAME_PATTERN},
                               "mode": {"enum": ["write", "append", "delete"]},
                               "content": {"type": "string"}}}}}}

    def files(self) -> dict[str, str]:
        return {p.name: p.read_text() for p in sorted(self.dir.iterdir()) if p.is_file()}

    def context(self, observation: str) -> str:
        files = self.files()
        if not files:
            return ""
        listing = "\n".join(f"- {name} ({len(text)} chars): {text.splitlines()[0][:80] if text else ''}"
                            for name, text in files.items())
        return f"Your memory files (read one with the {READ_TOOL} tool before acting if it helps):\n{listing}"

    def tools(self) -> list[dict]:
        if not any(self.dir.iterdir()):
            return []
        return [tool_schema(READ_TOOL, "Read one of your memory files (does not use up a step).",
                            {"name": {"type": "string", "description": "file name from the list"}})]

    def call_tool(self, name: str, arguments: dict) -> str:
        if name != READ_TOOL:
            raise KeyError(name)
        files = self.files()
        fname = str(arguments.get("name", ""))
        if fname not in files:
            return f"No memory file {fname!r}; files: {', '.join(files) or 'none'}"
        return files[fname]

    def update(self, episode: Episode) -> None:
        out = self.model.ask_json("file-state", INSTRUCTIONS.format(tool=READ_TOOL, max_files=self.max_files,
                                                                    chars=self.max_file_chars),
                                  f"Current files:\n{self._dump()}\n\nThe instance:\n"
                                  f"{episode.text(self.episode_chars)}", self.schema)
        for op in (out or {}).get("files", []):
            path = self.dir / op["name"]
            if op["mode"] == "delete":
                path.unlink(missing_ok=True)
                continue
            if not path.exists() and len(self.files()) >= self.max_files:
                continue  # full: a new file is refused, existing ones can still change
            old = path.read_text() if op["mode"] == "append" and path.exists() else ""
            text = (old + ("\n" if old else "") + op.get("content", "")).strip()
            path.write_text(text[-self.max_file_chars:])  # over the cap, the newest text stays

    def forget(self, fraction, rng) -> None:
        names = list(self.files())
        for name in set(names) - set(keep_share(names, fraction, rng)):
            (self.dir / name).unlink()

    def _dump(self, chars: int = 2000) -> str:
        files = self.files()
        return "\n\n".join(f"--- {name} ---\n{text[:chars]}" + (" [...]" if len(text) > chars else "")
                             for name, text in files.items()) or "(none)"

    def state_dict(self) -> dict:
        return {"files": self.files()}

    def load_state_dict(self, state: dict) -> None:
        for p in self.dir.iterdir():
            if p.is_file():
                p.unlink()
        for name, text in state["files"].items():
            if not re.fullmatch(NAME_PATTERN, name):
                raise ValueError(f"bad memory file name {name!r} in state")
            (self.dir / name).write_text(text)
