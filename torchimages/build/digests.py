"""The sha256 of a build context's files, each large file read once per change instead of once per build.

Every build hashes its context for the content digest (cache.content_digest). The CUDA entry's context holds a 2.9 GB
wheelhouse: reading it took seconds of every build, also of one where every step came from the cache. A context's
wheels are hard links to the wheelhouse's files, so a file is known by its file system, inode, size and modification
time (as make and rsync know files): the digest of a large file is kept under that key in .cache/file-digests.json.
A file rewritten in place with the same size and its old time restored is not noticed: the wheelhouse is written
by pip download and make-wheelhouse.sh, which write new files. The file is input like any other: an entry that is not
a digest, or a file that is not such a table, is ignored (the file is read again).
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

from ..files import sha256_of
from ..input.grammar import pattern, sha256_problem
from ..settings import SETTINGS

MEMO = SETTINGS.root / ".cache" / "file-digests.json"
KEPT_FROM = 1 << 20  # smaller files are read each time: rendered files change, and reading them costs nothing
MEMO_KEY = pattern(r"[0-9]+:[0-9]+:[0-9]+:[0-9]+")  # device:inode:size:mtime_ns
_WRITING = threading.Lock()  # builds side by side save the table one at a time


class DigestMemo:
    """Digests of large files by (device, inode, size, modification time); `save` adds what this one learned."""

    def __init__(self, path: Path = MEMO) -> None:
        self.path = path
        self.known = read_table(path)
        self.learned: dict[str, str] = {}

    def sha256(self, path: Path) -> str:
        stat = path.stat()
        if stat.st_size < KEPT_FROM:
            return sha256_of(path)
        key = f"{stat.st_dev}:{stat.st_ino}:{stat.st_size}:{stat.st_mtime_ns}"
        found = self.learned.get(key) or self.known.get(key)
        if found is None:
            found = self.learned[key] = sha256_of(path)
        return found

    def save(self) -> None:
        """Merge what was learned into the table on disk (written whole, then renamed: a reader never sees half)."""
        if not self.learned:
            return
        with _WRITING:
            table = {**read_table(self.path), **self.learned}
            self.path.parent.mkdir(parents=True, exist_ok=True)
            partial = self.path.with_name(f"{self.path.name}.{os.getpid()}.{threading.get_ident()}")
            partial.write_text(json.dumps(table, sort_keys=True))
            partial.replace(self.path)


def read_table(path: Path) -> dict[str, str]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        return {}
    if not isinstance(data, dict):
        return {}
    # A file this tool wrote is still input: an entry whose key or digest the grammar refuses is read as unknown.
    return {key: value for key, value in data.items()
            if MEMO_KEY.fullmatch(key) and isinstance(value, str) and not sha256_problem(value)}
