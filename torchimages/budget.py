"""The size budget: no image may grow more than --max-growth (5%) over the same image in the previous release, unless
its matrix entry states why (size_growth_reason); and a variant may add only so much over its base."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .report import Report, human
from .specs import Plan

# What a variant may add over its base image: measured 190 MB (jupyter) and 10 MB (ssh) on the CPU entry, with room.
VARIANT_BUDGETS = {"jupyter": 300_000_000, "ssh": 30_000_000}
DEFAULT_MAX_GROWTH = 0.05


@dataclass(frozen=True)
class Budget:
    max_growth: float = DEFAULT_MAX_GROWTH
    previous: dict[str, Any] | None = None  # the previous release's manifest

    def check(self, plan: Plan, report: Report) -> dict[str, str]:
        """image -> why it is over its budget; an image whose entry states a reason is reported in it, not refused."""
        reasons = {spec.name: spec.size_growth_reason for spec in plan.specs}
        before = {image["image"]: image.get("size_bytes") for image in (self.previous or {}).get("images", [])}
        problems = {}
        for record in report.images:
            found = []
            old, new = before.get(record.image), record.size_bytes
            if old and new and (new - old) / old > self.max_growth:
                found.append(f"grew {(new - old) / old * 100:.1f}% over release {self.previous['release']} "
                             f"({human(old)} -> {human(new)}), above --max-growth {self.max_growth * 100:g}%")
            budget = VARIANT_BUDGETS.get(record.variant)
            if budget and record.adds_bytes and record.adds_bytes > budget:
                found.append(f"the {record.variant} variant adds {human(record.adds_bytes)} over its base, above its "
                             f"budget of {human(budget)}")
            if found and not reasons.get(record.entry):
                problems[record.image] = ("; ".join(found) + "; if intended, state size_growth_reason in its matrix "
                                          "entry")
        return problems


def parse_growth(text: str) -> float:
    """'5%' or '0.05' -> 0.05."""
    value = float(text.rstrip("%")) / (100 if text.endswith("%") else 1)
    if not 0 <= value <= 10:
        raise ValueError(text)
    return value
