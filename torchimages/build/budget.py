"""The size budget: no image may grow more than --max-growth (5%) over the same image in the previous release, unless
its matrix entry states why (size_growth_reason); and a variant may add only so much over its base."""

from __future__ import annotations

from dataclasses import dataclass

from ..input.specs import Plan
from ..manifest import ReleaseManifest
from ..report import Report, human

# What a variant may add over its base image: measured 190 MB (jupyter) and 10 MB (ssh) on the CPU entry, and 272 MB
# (devel: nvcc, cicc, the headers and ninja from PyPI) on the cu130 entry, with room.
VARIANT_BUDGETS = {"jupyter": 300_000_000, "ssh": 30_000_000, "devel": 400_000_000}
DEFAULT_MAX_GROWTH = 0.05


@dataclass(frozen=True)
class Budget:
    max_growth: float = DEFAULT_MAX_GROWTH
    previous: ReleaseManifest | None = None

    def check(self, plan: Plan, report: Report) -> dict[str, str]:
        """image -> why it is over its budget; an image whose entry states a reason is reported in it, not refused."""
        reasons = {spec.name: spec.size_growth_reason for spec in plan.specs}
        before = {item.image: item.size_bytes for item in self.previous.images} if self.previous else {}
        since = self.previous.release if self.previous else ""
        problems = {}
        for record in report.images:
            found = []
            old, new = before.get(record.image), record.size_bytes
            if old and new and (new - old) / old > self.max_growth:
                found.append(f"grew {(new - old) / old * 100:.1f}% over release {since} "
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
    """'5%' or '0.05' -> 0.05. A bare number above 1 is refused, not read as a share: '5' could mean 5 % or 500 %."""
    percent = text.strip().endswith("%")
    value = float(text.strip().removesuffix("%")) / (100 if percent else 1)
    if not 0 <= value <= (10 if percent else 1):  # NaN compares false: refused too
        raise ValueError(text)
    return value
