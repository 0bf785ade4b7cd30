"""The layout's rules, read from the code (docs/layout.md states them): the pipeline's packages import one way, work
modules never reach for a stage, one seam to the engine, and every module is listed on docs/layout.md."""

from __future__ import annotations

import ast
from pathlib import Path

from .conftest import ROOT

PACKAGE = ROOT / "torchimages"
PIPELINE = ("input", "build", "verify", "publish")  # the order data flows in
ORCHESTRATION = {"cli", "options", "release"}  # the top modules that run the stages; everything else at the top is shared
# The one seam to the engine (torchimages/engine.py): only these use the SDK's client. The classic builder is the
# SDK's build API; containers are started, exec'd and removed through it.
SEAM = {"engine.py", "build/classic.py", "containers.py"}
# Reading the docker config's credentials as the docker CLI does (credential helpers): no engine involved.
CREDENTIALS = {"registry.py": {"docker.auth", "docker.errors"}}


def modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if p.name != "__init__.py")


def name_of(path: Path) -> str:
    """torchimages/build/stage.py -> build.stage; torchimages/report.py -> report."""
    return ".".join(path.relative_to(PACKAGE).with_suffix("").parts)


def imports(path: Path) -> set[str]:
    """The package's modules `path` imports (dotted under torchimages), at the top or inside a function."""
    package = name_of(path).rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.ImportFrom) or node.level == 0:
            continue
        base = package.split(".") if package else []
        base = base[: len(base) - (node.level - 1)] if node.level > 1 else base
        prefix = ".".join([*base, *(node.module.split(".") if node.module else [])])
        found.add(prefix)  # `from .x import y`: the module x, or the package x with its module y
        found |= {f"{prefix}.{alias.name}".strip(".") for alias in node.names}
    return {name for name in found if (PACKAGE / f"{name.replace('.', '/')}.py").is_file()}


def layer(module: str) -> int:
    """0: the shared top modules; 1-4: the pipeline's packages in order; 5: the orchestration."""
    if module in ORCHESTRATION:
        return 5
    top = module.split(".", maxsplit=1)[0]
    return PIPELINE.index(top) + 1 if top in PIPELINE else 0


def is_stage(module: str) -> bool:
    return module.rsplit(".", 1)[-1].endswith("stage")


def test_the_pipeline_imports_one_way() -> None:
    """A package imports from the shared top modules, from itself and from the packages before it, never after;
    the shared top modules import from input only (the value grammar, the specs), never from a later stage."""
    backwards = []
    for path in modules():
        module = name_of(path)
        limit = layer(module) or 1  # a shared top module may use input's grammar and specs
        backwards += [f"{module} -> {target}" for target in imports(path) if layer(target) > limit]
    assert not backwards, f"against the pipeline's direction: {backwards}"


def test_only_stages_and_orchestration_import_a_stage() -> None:
    """A work module does one thing for one image (or one file) against one outside part and knows no stage; a stage
    module (build/stage.py, verify/smokestage.py, ...) runs work modules over a plan's images, emits their events and
    records them in the report."""
    reaching = [f"{name_of(path)} -> {target}" for path in modules() for target in imports(path)
                if is_stage(target) and not is_stage(name_of(path)) and name_of(path) not in ORCHESTRATION]
    assert not reaching, f"a work module imports a stage: {reaching}"
    stages = sorted(name_of(path) for path in modules() if is_stage(name_of(path)))
    assert stages == ["build.stage", "publish.promotestage", "publish.pushstage", "verify.auditstage", "verify.benchstage",
                      "verify.smokestage"]


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
    seam = {PACKAGE / name for name in SEAM}
    past = {str(path.relative_to(PACKAGE)): uses for path in modules() if path not in seam
            and (uses := sdk_uses(path) - CREDENTIALS.get(str(path.relative_to(PACKAGE)), set()))}
    assert not past, f"past the engine seam (torchimages/engine.py): {past}"
    assert all(sdk_uses(path) for path in seam), "a seam module no longer uses the SDK: update SEAM"


def test_the_layout_page_lists_every_module() -> None:
    layout = (ROOT / "docs" / "layout.md").read_text()
    missing = [str(p.relative_to(PACKAGE)) for p in modules() if f"`{p.relative_to(PACKAGE)}`" not in layout]
    assert not missing, f"docs/layout.md does not list: {missing}"


def cycle_from(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle of `graph` (module -> the modules it imports, at the top or inside a function), or None."""
    done: set[str] = set()

    def visit(module: str, path: list[str]) -> list[str] | None:
        if module in path:
            return [*path[path.index(module):], module]
        if module in done:
            return None
        for target in sorted(graph.get(module, ())):
            if found := visit(target, [*path, module]):
                return found
        done.add(module)
        return None

    return next((found for module in sorted(graph) if (found := visit(module, []))), None)


def test_no_module_imports_itself_through_others() -> None:
    """An import circle held open by a lazy import (inside a function) is still a circle: the modules cannot be read,
    tested or moved one at a time."""
    graph = {name_of(path): imports(path) - {name_of(path)} for path in modules()}
    assert cycle_from(graph) is None, f"import circle: {' -> '.join(cycle_from(graph) or [])}"
    assert cycle_from({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]  # the search itself finds one


def value_rules(path: Path) -> list[str]:
    """Module-level functions that judge one text value (`def x_problem(value: str) -> str | None`)."""
    rules = []
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.FunctionDef) and node.name.endswith("_problem") and node.args.args:
            hint = node.args.args[0].annotation
            if isinstance(hint, ast.Name) and hint.id in ("str", "object"):
                rules.append(f"{path.relative_to(PACKAGE)}: {node.name}")
    return rules


def test_every_value_rule_lives_in_the_grammar() -> None:
    """One grammar (torchimages/input/grammar.py) for every reader: a rule for a kind of value defined beside one file
    kind's reader is the rule the next file kind forgets. The release tag's rule is not copied into a script either:
    scripts ask the code (python -m torchimages.input.grammar release TAG)."""
    grammar = PACKAGE / "input" / "grammar.py"
    elsewhere = [rule for path in modules() if path != grammar for rule in value_rules(path)]
    assert not elsewhere, f"value rules outside input/grammar.py: {elsewhere}"
    assert len(value_rules(grammar)) > 20
    copied = [str(p.relative_to(ROOT)) for p in (ROOT / "scripts").iterdir() if "[A-Za-z0-9_][A-Za-z0-9_.-]" in p.read_text()]
    assert not copied, f"the release tag's pattern copied into {copied}"
