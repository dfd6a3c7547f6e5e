"""The package's shape: layers without import cycles, kernel knowledge only in specs,
hardware numbers only in the device model."""
import ast
import re
from pathlib import Path

import pytest

import helpers

PKG = Path(helpers.__file__).parent
# A module may import from its own layer and the layers before it, never after.
LAYERS = ["settings", "hardware", "shapes", "tables", "runtime", "models", "measure", "figures", "publish",
          "__init__", "__main__"]


def modules() -> dict[str, Path]:
    out = {}
    for path in PKG.rglob("*.py"):
        rel = path.relative_to(PKG).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__" and len(parts) > 1:
            parts = parts[:-1]
        out["helpers." + ".".join(parts) if parts != ["__init__"] else "helpers"] = path
    return out


def imports_of(name: str, path: Path) -> set[str]:
    """Every helpers module ``name`` imports, at any depth of the file (functions included)."""
    tree = ast.parse(path.read_text())
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.startswith("helpers"):
                known = modules()
                for alias in node.names:
                    sub = f"{target}.{alias.name}"
                    found.add(sub if sub in known else target)
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("helpers")}
    return found


def graph() -> dict[str, set[str]]:
    mods = modules()
    return {m: {i for i in imports_of(m, p) if i in mods and i != m} for m, p in mods.items()}


def layer(name: str) -> int:
    parts = name.split(".")
    return LAYERS.index(parts[1] if len(parts) > 1 else "__init__")


def test_no_import_cycle():
    g = graph()
    state: dict = {}

    def visit(m, stack):
        state[m] = "open"
        for n in sorted(g[m]):
            if state.get(n) == "open":
                raise AssertionError("import cycle: " + " -> ".join(stack[stack.index(n):] + [n]))
            if n not in state:
                visit(n, stack + [n])
        state[m] = "done"

    for m in sorted(g):
        if m not in state:
            visit(m, [m])


def test_layers_import_only_downwards():
    bad = [f"{m} imports {n}" for m, deps in graph().items() for n in deps
           if m not in ("helpers", "helpers.__main__") and layer(n) > layer(m)]
    assert not bad, bad


def test_no_registration_by_side_effect():
    text = "\n".join(p.read_text() for p in PKG.rglob("*.py"))
    assert "pkgutil" not in text and "import_module" not in text


def code_lines(path: Path):
    for n, line in enumerate(path.read_text().splitlines(), 1):
        stripped = line.split("#", 1)[0]
        if stripped.strip():
            yield n, stripped


KERNEL_NAMES = None


def test_no_kernel_name_branches_outside_the_specs():
    from helpers.runtime.specs import ALL

    names = "|".join(re.escape(s.name) for s in ALL)
    pattern = re.compile(rf"""(==|!=|\bin\b)\s*\(?["']({names})["']|["']({names})["']\s*(==|!=)""")
    bad = [f"{p.relative_to(PKG)}:{n}: {line.strip()}" for p in PKG.rglob("*.py")
           if "specs" not in p.parts for n, line in code_lines(p) if pattern.search(line)]
    assert not bad, bad


# Numbers that are hardware facts: SM counts, clocks, register file, shared-memory sizes.
HARDWARE_NUMBERS = re.compile(r"(?<![\w.])(132|1\.98|1980|65536|65535|49152|48 \* 1024|228 \* 1024|227 \* 1024"
                              r"|163 \* 1024|99 \* 1024|255)(?![\w.])")


def test_hardware_numbers_live_only_in_the_device_model():
    bad = [f"{p.relative_to(PKG)}:{n}: {line.strip()}" for p in PKG.rglob("*.py")
           if p.name != "hardware.py" for n, line in code_lines(p) if HARDWARE_NUMBERS.search(line)]
    assert not bad, bad


@pytest.mark.parametrize("name", sorted(modules()))
def test_every_module_imports(name):
    __import__(name)


def test_no_module_defines_a_name_twice():
    # a second `def f` in a module silently replaces the first, and every caller of the first breaks
    twice = []
    for path in sorted(PKG.rglob("*.py")):
        seen = set()
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                if node.name in seen:
                    twice.append(f"{path.relative_to(PKG)}: {node.name}")
                seen.add(node.name)
    assert not twice, twice
