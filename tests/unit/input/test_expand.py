"""The `matrix` block expands like a GitHub Actions job matrix."""

from __future__ import annotations

from torchimages.input.matrix import expand

from ..conftest import plan_of


def test_product_of_axes() -> None:
    combos = expand({"torch": ["2.8", "2.9"], "python": ["3.11", "3.12"]})
    assert combos == [
        {"torch": "2.8", "python": "3.11"}, {"torch": "2.8", "python": "3.12"},
        {"torch": "2.9", "python": "3.11"}, {"torch": "2.9", "python": "3.12"},
    ]


def test_exclude_removes_combinations_matching_all_its_keys() -> None:
    combos = expand({"torch": ["2.8", "2.9"], "python": ["3.11", "3.12"],
                     "exclude": [{"torch": "2.8", "python": "3.12"}]})
    assert {"torch": "2.8", "python": "3.12"} not in combos
    assert len(combos) == 3


def test_partial_exclude_removes_every_match() -> None:
    combos = expand({"torch": ["2.8", "2.9"], "python": ["3.11", "3.12"], "exclude": [{"torch": "2.8"}]})
    assert combos == [{"torch": "2.9", "python": "3.11"}, {"torch": "2.9", "python": "3.12"}]


def test_include_adds_keys_to_matching_combinations() -> None:
    combos = expand({"torch": ["2.8", "2.9"], "python": ["3.11"],
                     "include": [{"torch": "2.9", "variants": ["jupyter"]}]})
    assert combos == [{"torch": "2.8", "python": "3.11"},
                      {"torch": "2.9", "python": "3.11", "variants": ["jupyter"]}]


def test_include_adds_extra_key_to_all_combinations_when_it_sets_no_axis() -> None:
    combos = expand({"torch": ["2.8", "2.9"], "include": [{"flavor": "cuda"}]})
    assert all(c["flavor"] == "cuda" for c in combos) and len(combos) == 2


def test_include_that_would_overwrite_an_axis_value_becomes_a_new_combination() -> None:
    combos = expand({"torch": ["2.8"], "python": ["3.11"], "include": [{"torch": "2.9", "python": "3.12"}]})
    assert combos == [{"torch": "2.8", "python": "3.11"}, {"torch": "2.9", "python": "3.12"}]


def test_added_values_can_be_overwritten_by_later_includes() -> None:
    combos = expand({"torch": ["2.9"], "include": [{"pip": ["a"]}, {"pip": ["b"]}]})
    assert combos == [{"torch": "2.9", "pip": ["b"]}]


def test_exclude_applies_before_include() -> None:
    combos = expand({"torch": ["2.8"], "exclude": [{"torch": "2.8"}], "include": [{"torch": "2.8", "python": "3.11"}]})
    assert combos == [{"torch": "2.8", "python": "3.11"}]


def test_only_include_gives_one_combination_each() -> None:
    assert expand({"include": [{"torch": "2.8"}, {"torch": "2.9"}]}) == [{"torch": "2.8"}, {"torch": "2.9"}]


def test_matrix_block_and_images_list_both_become_specs() -> None:
    plan = plan_of("""
        registry: registry.example.com/ml/pytorch
        images:
          - {flavor: cpu, torch: "2.13.0", python: "3.11"}
        matrix:
          flavor: [cuda]
          torch: ["2.8", "2.9"]
          cuda: ["12.8"]
          python: ["3.12"]
          exclude: [{torch: "2.8"}]
          include: [{torch: "2.9", variants: [ssh]}]
    """)
    assert [s.name for s in plan.specs] == ["torch2.13.0-cpu-py3.11", "torch2.9.1-cu128-cudnn9.10-py3.12"]
    assert plan.specs[1].variants == ("ssh",)
    assert plan.specs[1].torch == "2.9.1", "a short version means the newest known patch"
