"""The builder's stages import only stages to their left, in the order data flows:
config -> plan -> launch -> image -> serve -> measure -> bundle -> publish (the CLI on top)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from builder.constants import PACKAGE_DIR

#: Importable from anywhere: one place for names, errors, hashing, atomic writes, the evidence ledger, redaction and signing keys.
SHARED = {"__init__", "constants", "errors", "hashing", "atomic", "checksums", "evidence", "redact", "keys"}
#: The one stage module a shared one may import: redact takes the API-key rule from the streaming
#: client, which ships alone in bundles (so it must hold the rule) and imports nothing of the builder.
SHARED_TAKES_FROM = {"redact": {"builder.measure.client"}}
#: Left to right. The patch series is data every stage may read; the model conversion prepares
#: what serve runs; selfcheck, the in-container check, is what image bakes in.
STAGES = ("patches", "config", "plan", "launch", "selfcheck", "image", "models", "serve", "measure", "bundle", "publish",
          "cli", "__main__")


def stage_of(module: str) -> str:
    """builder.x.y -> x (the top-level module or package under builder)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def imports_of(path: Path) -> set[str]:
    """The builder modules a file imports (absolute imports; the package uses no relative ones)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.split(".")[0] == "builder"}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "builder":
            found.add(node.module)
            if node.module == "builder":  # `from builder import x`: x may be a stage
                found |= {f"builder.{a.name}" for a in node.names if a.name in STAGES or a.name in SHARED}
        elif isinstance(node, ast.ImportFrom) and node.level:
            raise AssertionError(f"{path}: relative import; the layer check reads absolute ones only")
    return found


def upward_imports(package: Path) -> list[str]:
    wrong = []
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package.parent).with_suffix("")
        here = stage_of(".".join(rel.parts))
        if here in SHARED:
            bad = {m for m in imports_of(path) if stage_of(m) not in SHARED and m not in SHARED_TAKES_FROM.get(here, ())}
            wrong += [f"{rel}: the shared module {here} imports {m}" for m in sorted(bad)]
            continue
        assert here in STAGES, f"{rel}: builder/{here} is in no stage; add it to STAGES in its place"
        for m in sorted(imports_of(path)):
            there = stage_of(m)
            assert there in SHARED or there in STAGES, f"{rel} imports {m}, in no stage"
            if there not in SHARED and STAGES.index(there) > STAGES.index(here):
                wrong.append(f"{rel} ({here}) imports {m} ({there}), a later stage")
    return wrong


def test_what_a_shared_module_takes_from_a_stage_imports_nothing_of_the_builder():
    """Else importing the shared module would pull that stage's own imports into every stage."""
    for modules in SHARED_TAKES_FROM.values():
        for module in modules:
            path = PACKAGE_DIR.joinpath(*module.split(".")[1:]).with_suffix(".py")
            assert imports_of(path) == set(), f"{module} imports {sorted(imports_of(path))}"


def test_no_stage_imports_a_later_one():
    wrong = upward_imports(PACKAGE_DIR)
    assert not wrong, "imports running back up the pipeline:\n" + "\n".join(wrong)


@pytest.mark.parametrize(("where", "line"), [
    ("launch/render.py", "from builder.bundle.card import render_card\n"),
    ("config/models.py", "import builder.serve\n"),
    ("constants.py", "from builder import measure\n"),
    ("redact.py", "from builder.measure.evidence import write_json_atomic\n"),
])
def test_an_import_back_up_is_caught(tmp_path, where, line):
    """Mutants of a copy of the package: each adds one import running back up."""
    import shutil

    copy = tmp_path / "builder"
    shutil.copytree(PACKAGE_DIR, copy, ignore=shutil.ignore_patterns("__pycache__"))
    assert upward_imports(copy) == []
    target = copy / where
    target.write_text(line + target.read_text())
    assert len(upward_imports(copy)) == 1
