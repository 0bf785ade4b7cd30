"""An image's unpacked size, counted from its saved layers, the same quantity on both image stores.

The classic store answers an image's size as the bytes of its unpacked layers (each layer's files, a hard link
once, as overlay2 counts a layer's diff). The containerd image store answers another quantity: inspect's `Size` is
the packed content (compressed layers: the CPU base 503 MB where the classic store says 1.41 GB), and its unpacked
snapshots are counted in disk blocks. So on that store the size is counted here, from the layers the engine saves
(`docker save`, streamed): each layer tar's regular files and symlinks, as overlay2 counts them. A layer seen
before (same blob) is not decompressed again: variants share their base's layers.
"""

from __future__ import annotations

import gzip
import io
import json
import tarfile
import threading
from collections.abc import Iterable, Iterator
from typing import IO

import zstandard

GZIP_MAGIC = b"\x1f\x8b"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


class UncountedLayer(ValueError):
    """A saved image whose layers cannot be counted (a compression this tool cannot read, no manifest.json)."""


class ChunkReader(io.RawIOBase):
    """A file over an iterable of byte chunks (the SDK's `get_image` stream)."""

    def __init__(self, chunks: Iterable[bytes]) -> None:
        self._chunks: Iterator[bytes] = iter(chunks)
        self._left = b""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        while not self._left:
            self._left = next(self._chunks, b"")
            if not self._left:
                return 0
        count = min(len(buffer), len(self._left))
        buffer[:count] = self._left[:count]
        self._left = self._left[count:]
        return count


class LayerSizes:
    """Unpacked bytes by layer blob (its path in the saved tar, which names its digest), shared by every image one
    run counts: a layer is decompressed once."""

    def __init__(self) -> None:
        self.known: dict[str, int] = {}
        self._lock = threading.Lock()

    def image_size(self, saved: Iterable[bytes]) -> int:
        """The unpacked bytes of the layers of one saved image (the first image of manifest.json)."""
        manifest: list[dict[str, object]] | None = None
        with tarfile.open(fileobj=io.BufferedReader(ChunkReader(saved), 1 << 20), mode="r|") as outer:
            for member in outer:
                if not member.isfile():
                    continue
                content = outer.extractfile(member)
                if content is None:
                    continue
                if member.name == "manifest.json":
                    manifest = json.loads(content.read())
                elif member.name not in self.known and (size := layer_bytes(content)) is not None:
                    with self._lock:
                        self.known[member.name] = size
        if not manifest or not isinstance(manifest[0].get("Layers"), list):
            raise UncountedLayer("the saved image has no manifest.json naming its layers")
        layers = [str(layer) for layer in manifest[0]["Layers"]]  # type: ignore[union-attr]
        if missing := [layer for layer in layers if layer not in self.known]:
            raise UncountedLayer(f"layers not counted (compressed in a way this tool cannot read?): {missing[:3]}")
        return sum(self.known[layer] for layer in layers)


def layer_bytes(content: IO[bytes]) -> int | None:
    """A layer tar's unpacked bytes as overlay2 counts a diff: regular files' sizes (a hard link is its own tar entry
    without bytes, so counted once) plus symlinks' targets; None when the blob is no tar (a config, a manifest)."""
    stream = io.BufferedReader(content, 1 << 20)  # type: ignore[arg-type]
    head = stream.peek(4)[:4]
    source: IO[bytes] = stream
    if head.startswith(GZIP_MAGIC):
        source = gzip.GzipFile(fileobj=stream)
    elif head.startswith(ZSTD_MAGIC):  # --compression zstd: the layers as BuildKit exported them
        source = zstandard.ZstdDecompressor().stream_reader(stream, read_across_frames=True)  # type: ignore[assignment]
    total = 0
    try:
        with tarfile.open(fileobj=source, mode="r|") as layer:
            for entry in layer:
                if entry.isreg():
                    total += entry.size
                elif entry.issym():
                    total += len(entry.linkname.encode())
    except (tarfile.TarError, EOFError, gzip.BadGzipFile, zstandard.ZstdError):
        return None
    return total
