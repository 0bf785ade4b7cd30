"""What the classic builder reads from its stream: the images a build committed, which a failed or
cancelled build removes; never the base image or the cache hits it reused."""

from __future__ import annotations

from collections import deque

import pytest

from torchimages.build.classic import ClassicBuilder
from torchimages.engine import BuildOutcome

STREAM = """\
Step 1/7 : ARG BASE_IMAGE=debian:bookworm-slim
Step 2/7 : FROM ${BASE_IMAGE} AS system
 ---> 0b1b2c3d4e5f
Step 3/7 : SHELL ["/bin/bash", "-o", "pipefail", "-c"]
 ---> Using cache
 ---> 111111111111
Step 4/7 : ENV DEBIAN_FRONTEND=noninteractive
 ---> Running in 9a9a9a9a9a9a
Removing intermediate container 9a9a9a9a9a9a
 ---> 222222222222
Step 5/7 : RUN apt-get update
 ---> Running in 8b8b8b8b8b8b
Get:1 http://deb.debian.org/debian bookworm InRelease
Removing intermediate container 8b8b8b8b8b8b
 ---> 333333333333
Step 6/7 : FROM system AS builder
 ---> 333333333333
Step 7/7 : RUN false
 ---> Running in 7c7c7c7c7c7c
"""


def test_only_the_images_the_build_committed_are_recorded() -> None:
    builder = ClassicBuilder.__new__(ClassicBuilder)  # no engine needed to read a stream
    outcome, tail, containers, events = BuildOutcome("img", "t"), deque(maxlen=20), [], []
    for line in STREAM.splitlines(keepends=True):
        builder._handle({"stream": line}, "img", outcome, tail=tail, containers=containers, emit=events.append)
    assert outcome.created == ["222222222222", "333333333333"]
    assert containers == ["9a9a9a9a9a9a", "8b8b8b8b8b8b", "7c7c7c7c7c7c"]
    assert outcome.step == "Step 7/7 : RUN false"


@pytest.mark.parametrize("answered", ["sha256:abc", "garbage", "sha256:" + "e3" * 32 + "\nmore", 42])
def test_an_image_id_the_engine_answers_that_is_no_digest_fails_the_build(answered: object) -> None:
    """The stream's image ID is the engine's answer, read as BuildKit's --iidfile is: what is not one digest is never
    tagged, tested or pushed."""
    builder = ClassicBuilder.__new__(ClassicBuilder)
    outcome = BuildOutcome("img", "t")
    builder._handle({"aux": {"ID": answered}}, "img", outcome, tail=deque(), containers=[], emit=lambda _e: None)
    assert not outcome.ok and outcome.image_id is None and "as the image ID, not a digest" in (outcome.error or "")
    assert "\n" not in (outcome.error or "")
    good = BuildOutcome("img", "t")
    builder._handle({"aux": {"ID": "sha256:" + "e3" * 32}}, "img", good, tail=deque(), containers=[],
                    emit=lambda _e: None)
    assert good.ok
