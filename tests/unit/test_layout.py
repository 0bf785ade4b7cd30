"""The layout's rules, read from the code: one seam to the engine, and every module listed on docs/layout.md."""

from __future__ import annotations

import ast
from pathlib import Path

from .conftest import ROOT

PACKAGE = ROOT / "torchimages"
# The one seam to the engine (torchimages.engine): only these use the SDK's client. The classic builder is the
# SDK's build API; containers are started, exec'd and removed through it.
SEAM = {"engine.py", "containers.py", "classic.py"}
# Reading the docker config's credentials as the docker CLI does (credential helpers): no engine involved.
CREDENTIALS = {"registry.py": {"docker.auth", "docker.errors"}}


def modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if p.name != "__init__.py")


def sdk_uses(path: Path) -> set[str]:
    """The Docker SDK modules `path` imports, and `.api` if it reaches for an engine's SDK client."""
    uses: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            uses |= {a.name for a in node.names if a.name == "docker" or a.name.startswith("docker.")}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "docker":
            uses.add(str(node.module))
        elif isinstance(node, ast.Attribute) and node.attr == "api":
            uses.add(".api")
    return uses


def test_only_the_seam_reaches_the_docker_sdk() -> None:
    past = {path.name: uses for path in modules() if path.name not in SEAM
            and (uses := sdk_uses(path) - CREDENTIALS.get(path.name, set()))}
    assert not past, f"past the engine seam (torchimages.engine): {past}"
    assert all(sdk_uses(PACKAGE / name) for name in SEAM), "a seam module no longer uses the SDK: update SEAM"


def test_the_layout_page_lists_every_module() -> None:
    layout = (ROOT / "docs" / "layout.md").read_text()
    missing = [str(p.relative_to(ROOT)) for p in modules() if f"`{p.relative_to(ROOT)}`" not in layout
               and f"`{p.name}`" not in layout]
    assert not missing, f"docs/layout.md does not list: {missing}"
