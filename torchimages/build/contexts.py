"""Where a build's context is staged: the same folder for an image at every build, so BuildKit sends only what changed.

BuildKit keeps the last context it received from a folder (its client keys the transfer by the folder's path) and asks
only for files whose name, size, mode or time differ. A context staged in a new temporary folder each build was sent
whole: the CUDA entry's 2.9 GB wheelhouse at every build, also when every step came from the cache (issue 32; a 1.5 GB
context: 8.1 s from a new folder, 0.3 s from the same folder filled again with the same hard links). The folder is
emptied after the build, since the engine holds its own copy: the wheels are hard links (or copies that keep their
times) and fill it again unchanged.

A second build of the same image on this machine at the same time (another checkout shares nothing: the folder is in
this one's .cache) takes a temporary folder, as before.
"""

from __future__ import annotations

import fcntl
import re
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ..settings import SETTINGS

STAGING = SETTINGS.root / ".cache" / "contexts"


@contextmanager
def staged(image: str, root: Path = STAGING) -> Iterator[Path]:
    """An empty folder `<root>/<image>/context` for the build, held alone while the build runs, emptied after it; a
    temporary one when another build holds it."""
    folder = root / re.sub(r"[^A-Za-z0-9_.-]", "_", image)
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / ".lock").open("w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            with tempfile.TemporaryDirectory(prefix=f"ctx-{image}-") as tmp:
                yield Path(tmp) / "context"
            return
        context = folder / "context"
        shutil.rmtree(context, ignore_errors=True)  # what a killed build left
        try:
            yield context
        finally:
            shutil.rmtree(context, ignore_errors=True)
