"""docs/inputs.md lists every input: the code is walked for each read of a file, an environment variable and the network
(in the package, and in the programs every image carries), and a read the table does not list fails here, so the next
feature's new file cannot skip the readers. Each test the table names as the one that feeds that input hostile values
must exist."""

from __future__ import annotations

import ast
import re

from .conftest import ROOT

TABLE = ROOT / "docs" / "inputs.md"
# The package, and the programs each image carries (image-doctor and the rules it shares with `build.py fit`).
PROGRAMS = (*sorted((ROOT / "torchimages").rglob("*.py")), ROOT / "templates" / "files" / "gpurules.py",
            ROOT / "templates" / "files" / "image-doctor")
FILE_METHODS = {"read_text", "read_bytes"}
HTTP_CALLS = {"get", "request", "post", "put", "head", "urlopen"}


def read_kind(call: ast.Call) -> str | None:
    """'file', 'env' or 'http' for a call that reads one, else None."""
    func = call.func
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
    owner = ast.unparse(func.value) if isinstance(func, ast.Attribute) else ""
    writes = any(isinstance(a, ast.Constant) and isinstance(a.value, str) and set(a.value) & set("wax") for a in call.args)
    if name in FILE_METHODS or (name == "open" and not writes and owner != "tarfile"):
        return "file"
    if (name, owner) in {("load", "json"), ("load", "yaml"), ("safe_load", "yaml")}:
        return "file"
    if (name, owner) in {("get", "os.environ"), ("getenv", "os")}:
        return "env"
    if name in HTTP_CALLS and ("session" in owner or owner in ("requests", "urllib.request")):
        return "http"
    return None


def literal(node: ast.expr | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def reads(source: str, where: str) -> set[tuple[str, str]]:
    """(kind, key) of every read in `source`: an environment variable by its name where the code names it, anything
    else by WHERE:FUNCTION (the function that reads it, with its class)."""
    found: set[tuple[str, str]] = set()

    def visit(node: ast.AST, scope: tuple[str, ...]) -> None:
        for child in ast.iter_child_nodes(node):
            inner = (*scope, child.name) if isinstance(child, ast.FunctionDef | ast.ClassDef) else scope
            key = f"{where}:{'.'.join(scope) or '<module>'}"
            if isinstance(child, ast.Call) and (kind := read_kind(child)):
                name = literal(child.args[0]) if kind == "env" and child.args else None
                found.add((kind, name or key))
            if isinstance(child, ast.Call):
                found.update(("env", literal(k.value) or key) for k in child.keywords if k.arg == "envvar")
            if isinstance(child, ast.Subscript) and ast.unparse(child.value) == "os.environ" and isinstance(child.ctx, ast.Load):
                found.add(("env", literal(child.slice) or key))
            visit(child, inner)

    visit(ast.parse(source), ())
    return found


def every_read() -> set[tuple[str, str]]:
    return {read for path in PROGRAMS for read in reads(path.read_text(), str(path.relative_to(ROOT)))}


def test_every_read_of_a_file_a_variable_or_the_network_is_in_the_inputs_table() -> None:
    table = TABLE.read_text()
    missing = sorted(f"{kind}: {key}" for kind, key in every_read() if f"`{key}`" not in table)
    assert not missing, f"docs/inputs.md does not list these reads (add a row: reader, checks, hostile-value test): {missing}"


def test_the_walk_sees_each_kind_of_read() -> None:
    """The walker itself: a module with one read of each kind, and writes it must not count."""
    source = '''
import json, os, requests, urllib.request
X = os.environ["HOME_X"]
class Reader:
    def read(self, path, session, key):
        data = json.load(path.open())
        text = path.read_text() + os.environ.get("VAR_Y", "") + os.environ[key]
        session.get("https://example.com")
        path.open("w").write(text)
        urllib.request.urlopen("http://x")
def option():
    return click.option("--z", envvar="VAR_Z")
'''
    assert reads(source, "m.py") == {("env", "HOME_X"), ("file", "m.py:Reader.read"), ("env", "VAR_Y"),
                                     ("env", "m.py:Reader.read"), ("http", "m.py:Reader.read"), ("env", "VAR_Z")}


def test_every_test_the_table_names_exists() -> None:
    named = re.findall(r"`(tests/[\w/]+\.py)::(\w+)`", TABLE.read_text())
    assert len(named) > 20
    absent = [f"{module}::{test}" for module, test in named
              if not (ROOT / module).is_file() or f"def {test}(" not in (ROOT / module).read_text()]
    assert not absent, f"docs/inputs.md names tests that do not exist: {absent}"
