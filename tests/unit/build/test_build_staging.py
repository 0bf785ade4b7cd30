"""What a build does before the builder runs, so that an unchanged build moves little: the context is
staged in the same folder for an image each time (BuildKit then sends only changed files) and a large file's digest
is read once per change (digests.py). What the engine then sends is measured in tests/integration/build/test_buildkit.py
and benchmarks/layers_bench.py."""

from __future__ import annotations

import hashlib
import json
import os
import threading
from pathlib import Path

from torchimages.build import contexts, digests
from torchimages.build.cache import content_digest
from torchimages.build.digests import DigestMemo

PARENT = "sha256:" + "1" * 64
BIG = digests.KEPT_FROM + 1


def write(path: Path, content: bytes, mtime_ns: int | None = None) -> None:
    path.write_bytes(content)
    if mtime_ns is not None:
        os.utime(path, ns=(mtime_ns, mtime_ns))


def test_a_large_files_digest_is_kept_by_inode_size_and_time(tmp_path: Path) -> None:
    wheel, memo_file = tmp_path / "torch.whl", tmp_path / "memo.json"
    write(wheel, b"a" * BIG)
    first = DigestMemo(memo_file)
    assert first.sha256(wheel) == hashlib.sha256(b"a" * BIG).hexdigest()
    first.save()
    # Rewritten in place with the same size and its old time: the kept digest answers (the file is not read again) ...
    mtime = wheel.stat().st_mtime_ns
    write(wheel, b"b" * BIG, mtime)
    assert DigestMemo(memo_file).sha256(wheel) == hashlib.sha256(b"a" * BIG).hexdigest()
    # ... and a new time, as any write gives, is a new file
    write(wheel, b"b" * BIG, mtime + 1)
    assert DigestMemo(memo_file).sha256(wheel) == hashlib.sha256(b"b" * BIG).hexdigest()


def test_small_files_are_read_every_time(tmp_path: Path) -> None:
    dockerfile, memo_file = tmp_path / "Dockerfile", tmp_path / "memo.json"
    write(dockerfile, b"FROM a\n")
    memo = DigestMemo(memo_file)
    memo.sha256(dockerfile)
    memo.save()
    write(dockerfile, b"FROM b\n", dockerfile.stat().st_mtime_ns)
    assert DigestMemo(memo_file).sha256(dockerfile) == hashlib.sha256(b"FROM b\n").hexdigest()
    assert not memo_file.exists(), "nothing large was read: nothing to keep"


def test_a_memo_file_that_is_not_a_table_of_digests_is_not_believed(tmp_path: Path) -> None:
    wheel, memo_file = tmp_path / "torch.whl", tmp_path / "memo.json"
    write(wheel, b"c" * BIG)
    stat = wheel.stat()
    key = f"{stat.st_dev}:{stat.st_ino}:{stat.st_size}:{stat.st_mtime_ns}"
    right = hashlib.sha256(b"c" * BIG).hexdigest()
    for text in ("not json", "[1, 2]", json.dumps({key: "0" * 63}), json.dumps({key: 42}), json.dumps({key: "Z" * 64}),
                 "\udcff".encode("utf-8", "surrogatepass").decode("latin-1")):
        memo_file.write_text(text, encoding="latin-1")
        assert DigestMemo(memo_file).sha256(wheel) == right, text
    memo_file.write_text(json.dumps({key: "f" * 64}))  # a well-formed entry is believed: it is this machine's own file
    assert DigestMemo(memo_file).sha256(wheel) == "f" * 64


def test_the_content_digest_is_the_same_with_the_memo(tmp_path: Path) -> None:
    context = tmp_path / "context"
    (context / "build-config" / "wheelhouse").mkdir(parents=True)
    write(context / "Dockerfile", b"FROM debian\nRUN true\n")
    write(context / "build-config" / "wheelhouse" / "torch-2-py3-none-any.whl", b"d" * BIG)
    memo = DigestMemo(tmp_path / "memo.json")
    assert content_digest(context, {}, PARENT, memo) == content_digest(context, {}, PARENT)
    memo.save()
    assert content_digest(context, {}, PARENT, DigestMemo(tmp_path / "memo.json")) == content_digest(context, {}, PARENT)


def test_builds_side_by_side_keep_every_digest(tmp_path: Path) -> None:
    memo_file = tmp_path / "memo.json"
    wheels = [tmp_path / f"w{i}.whl" for i in range(6)]
    for i, wheel in enumerate(wheels):
        write(wheel, bytes([i]) * BIG)

    def learn(wheel: Path) -> None:
        memo = DigestMemo(memo_file)
        memo.sha256(wheel)
        memo.save()

    threads = [threading.Thread(target=learn, args=(wheel,)) for wheel in wheels]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(json.loads(memo_file.read_text())) == len(wheels)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("memo.json.")] == [], "a partial table was left"


def test_an_image_is_staged_in_the_same_folder_each_build_and_it_is_emptied_after(tmp_path: Path) -> None:
    seen = []
    for _ in range(2):
        with contexts.staged("torch2.13.0-cpu-py3.11", tmp_path) as context:
            assert not context.exists(), "copy_context makes the folder"
            context.mkdir()
            (context / "Dockerfile").write_text("FROM debian\n")
            seen.append(context)
        assert not context.exists()
    assert seen[0] == seen[1] == tmp_path / "torch2.13.0-cpu-py3.11" / "context"


def test_what_a_killed_build_left_is_removed_first(tmp_path: Path) -> None:
    left = tmp_path / "img" / "context"
    left.mkdir(parents=True)
    (left / "stale.whl").write_text("x")
    with contexts.staged("img", tmp_path) as context:
        assert context == left and not context.exists()


def test_a_second_build_of_the_image_at_the_same_time_gets_a_folder_of_its_own(tmp_path: Path) -> None:
    with contexts.staged("img", tmp_path) as first:
        first.mkdir()
        (first / "Dockerfile").write_text("FROM debian\n")
        with contexts.staged("img", tmp_path) as second:
            assert second != first and not second.is_relative_to(tmp_path)
            second.mkdir()
        assert (first / "Dockerfile").read_text() == "FROM debian\n", "the second build touched the first one's context"
