"""An image's size is its unpacked layers' bytes on both image stores: the classic store answers it; on the
containerd store (whose `Size` is the packed content) it is counted from the saved layers (torchimages.unpacked).
The real engines' answers for one image are compared in tests/integration/build/test_current_engine.py."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import tarfile

import pytest
import zstandard

from tests.unit.fake_engine import FakeEngine
from torchimages.engine import CLASSIC_STORE, CONTAINERD_STORE
from torchimages.unpacked import ZSTD_MAGIC, LayerSizes

CONTAINERD = [["driver-type", "io.containerd.snapshotter.v1"]]


def layer(files: dict[str, bytes], *, links: dict[str, str] | None = None, symlinks: dict[str, str] | None = None,
          whiteouts: tuple[str, ...] = ()) -> bytes:
    """A layer tar: a folder, regular files, hard links (a tar entry with no bytes), symlinks, whiteouts."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        folder = tarfile.TarInfo("usr")
        folder.type = tarfile.DIRTYPE
        tar.addfile(folder)
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        for name, target in (links or {}).items():
            info = tarfile.TarInfo(name)
            info.type, info.linkname = tarfile.LNKTYPE, target
            tar.addfile(info)
        for name, target in (symlinks or {}).items():
            info = tarfile.TarInfo(name)
            info.type, info.linkname = tarfile.SYMTYPE, target
            tar.addfile(info)
        for name in whiteouts:
            tar.addfile(tarfile.TarInfo(name))
    return out.getvalue()


def saved(layers: list[bytes], *, oci: bool, stored: dict[int, bytes] | None = None) -> bytes:
    """What `docker save` streams: the classic store's layout (ID/layer.tar, plain tars) or the containerd store's
    (OCI blobs, gzip-compressed as BuildKit exports them), each with its manifest.json. `stored`: other bytes under
    the name of the layer at that index."""
    blobs: dict[str, bytes] = {}
    for index, data in enumerate(layers):
        blob = gzip.compress(data, mtime=0) if oci else data
        name = f"blobs/sha256/{hashlib.sha256(blob).hexdigest()}" if oci else f"{hashlib.sha256(data).hexdigest()}/layer.tar"
        blobs[name] = (stored or {}).get(index, blob)
    config = json.dumps({"architecture": "amd64", "os": "linux"}).encode()
    blobs["blobs/sha256/config" if oci else "config.json"] = config
    blobs["manifest.json"] = json.dumps([{"Config": "config.json", "Layers": list(blobs)[:len(layers)]}]).encode()
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for name, data in blobs.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


BASE = layer({"usr/a": b"x" * 1000, "usr/b": b"y" * 24}, links={"usr/a-again": "usr/a"},
             symlinks={"usr/c": "usr/a"})  # 1000 + 24 + len("usr/a"); the hard link once
TOP = layer({"usr/d": b"z" * 300}, whiteouts=("usr/.wh.b",))
BASE_BYTES, TOP_BYTES = 1029, 300


@pytest.mark.parametrize("oci", [False, True], ids=["classic layout", "OCI layout, gzip"])
def test_the_unpacked_bytes_are_the_files_and_symlinks_a_hard_link_once(oci: bool) -> None:
    assert LayerSizes().image_size([saved([BASE, TOP], oci=oci)]) == BASE_BYTES + TOP_BYTES


def test_on_the_containerd_store_the_size_is_counted_not_the_packed_content() -> None:
    fake = FakeEngine(driver_status=CONTAINERD, saved={"img:1": saved([BASE, TOP], oci=True)},
                      images={"img:1": {"Id": "sha256:index", "Size": 77, "RootFS": {"Layers": ["l1", "l2"]}}})
    engine = fake.engine
    assert engine.store() == CONTAINERD_STORE
    assert engine.image_info("img:1") == {"id": "sha256:index", "size": BASE_BYTES + TOP_BYTES, "layers": 2}
    assert engine.image_size("img:1") == BASE_BYTES + TOP_BYTES


def test_on_the_classic_store_the_engine_answers_the_size() -> None:
    fake = FakeEngine(images={"img:1": {"Id": "sha256:config", "Size": 1329, "RootFS": {"Layers": ["l1", "l2"]}}})
    engine = fake.engine
    assert engine.store() == CLASSIC_STORE
    assert engine.image_info("img:1")["size"] == 1329  # nothing saved: the classic store is never asked to save


def test_a_layer_shared_with_an_image_counted_before_is_not_read_again() -> None:
    sizes = LayerSizes()
    assert sizes.image_size([saved([BASE], oci=True)]) == BASE_BYTES
    # Under the base layer's name, other bytes: read again, they would count 300
    variant = saved([BASE, TOP], oci=True, stored={0: gzip.compress(TOP, mtime=0)})
    assert sizes.image_size([variant[i:i + 100] for i in range(0, len(variant), 100)]) == BASE_BYTES + TOP_BYTES


def test_a_zstd_layer_counts_as_the_same_layer_gzipped() -> None:
    """--compression zstd: BuildKit exports every layer zstd-compressed into the containerd store; the size is the
    unpacked bytes, the same as the gzip layer's or the uncompressed one's."""
    for stored in ({0: zstandard.ZstdCompressor().compress(BASE)}, {0: gzip.compress(BASE, mtime=0)}, {}):
        assert LayerSizes().image_size([saved([BASE], oci=True, stored=stored)]) == BASE_BYTES, stored


def test_a_layer_that_cannot_be_counted_gives_no_size_rather_than_a_wrong_one() -> None:
    zstd = ZSTD_MAGIC + b"\0" * 600
    fake = FakeEngine(driver_status=CONTAINERD, saved={"img:1": saved([zstd], oci=False)},
                      images={"img:1": {"Id": "sha256:index", "Size": 77, "RootFS": {"Layers": ["l1"]}}})
    assert fake.engine.image_info("img:1")["size"] is None
