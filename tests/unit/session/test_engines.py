"""What the session removes from an engine comes off in an order the engine accepts: a child before its parent, though
a pulled image and the steps built on it share one creation time (tests/session/engines.py)."""

from __future__ import annotations

import random

from tests.session.engines import deepest_first


def test_each_image_goes_before_its_parent_whatever_the_listing_order() -> None:
    # a pulled image (no parent), three LABEL steps on it, a second branch, and an image whose parent is not listed
    parents = {"pulled": "", "label-1": "pulled", "label-2": "label-1", "label-3": "label-2", "branch": "label-1",
               "orphan": "sha256:kept-elsewhere"}
    images = [{"Id": image, "ParentId": parent, "Created": 1796503000} for image, parent in parents.items()]
    for seed in range(20):
        random.Random(seed).shuffle(images)
        order = deepest_first(images)
        assert sorted(order) == sorted(parents)
        for image, parent in parents.items():
            if parent in parents:
                assert order.index(image) < order.index(parent), (image, parent, order)
