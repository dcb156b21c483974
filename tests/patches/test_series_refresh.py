"""Series parsing, refresh round trip and failure reporting on a small synthetic engine tree."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from builder.errors import PatchError
from builder.patches.apply import FileStatus, apply_series, check_series
from builder.patches.refresh import diff_file, refresh_series
from builder.hashing import sha256_file
from builder.patches.series import load_series, parse_patch, render_patch

MOD = "vllm/pkg/mod.py"
NEW = "vllm/pkg/added.py"


@pytest.fixture()
def trees(tmp_path: Path):
    pristine = tmp_path / "pristine"
    (pristine / "vllm/pkg").mkdir(parents=True)
    (pristine / MOD).write_text("".join(f"x{i} = {i}\n" for i in range(40)))
    edited = tmp_path / "edited"
    shutil.copytree(pristine, edited)
    text = (edited / MOD).read_text().replace("x5 = 5\n", "x5 = 55\n").replace("x30 = 30\n", "x30 = 30\nx30b = 1\n")
    (edited / MOD).write_text(text)
    (edited / NEW).write_text("ADDED = True\n")
    patches = tmp_path / "patches"
    patches.mkdir()
    (patches / "series").write_text("# comment\n\none.diff\n")
    files = [
        (MOD, sha256_file(pristine / MOD), diff_file(path=MOD, old=pristine / MOD, new=edited / MOD)),
        (NEW, "new", diff_file(path=NEW, old=None, new=edited / NEW)),
    ]
    (patches / "one.diff").write_text(render_patch(name="one", engine_version="0.33.0", description=["what it does"], files=files))
    return pristine, edited, patches


def test_parse_records_version_shas_and_sections(trees):
    pristine, _, patches = trees
    (patch,) = load_series(patches)
    assert patch.name == "one" and patch.engine_version == "0.33.0" and patch.description == ["what it does"]
    by_path = {f.path: f for f in patch.files}
    assert by_path[MOD].upstream_sha256 == sha256_file(pristine / MOD)
    assert by_path[NEW].upstream_sha256 == "new"
    assert by_path[NEW].section.startswith("--- /dev/null\n+++ b/vllm/pkg/added.py")


def test_check_apply_then_already_applied(trees, tmp_path):
    pristine, edited, patches = trees
    target = tmp_path / "target"
    shutil.copytree(pristine, target)
    assert {r.status for r in check_series(target=target, patches_dir=patches).results} == {FileStatus.CLEAN}
    report = apply_series(target=target, patches_dir=patches)
    assert sorted(report.applied) == sorted([f"one:{MOD}", f"one:{NEW}"])
    assert (target / MOD).read_text() == (edited / MOD).read_text()
    assert (target / NEW).read_text() == "ADDED = True\n"
    assert {r.status for r in check_series(target=target, patches_dir=patches).results} == {FileStatus.ALREADY}


def test_failing_hunk_is_named_and_nothing_is_written(trees, tmp_path):
    pristine, _, patches = trees
    target = tmp_path / "target"
    shutil.copytree(pristine, target)
    (target / MOD).write_text((target / MOD).read_text().replace("x29 = 29\n", "x29 = -29\n"))
    before = (target / MOD).read_text()
    report = check_series(target=target, patches_dir=patches)
    (bad,) = [r for r in report.results if r.status == FileStatus.FAILS]
    assert bad.path == MOD and "hunk #2 (@@ -29,6 +29,7 @@) failed at line 29" in bad.detail and not bad.upstream_matches
    with pytest.raises(PatchError, match=r"vllm/pkg/mod.py: hunk #2"):
        apply_series(target=target, patches_dir=patches)
    assert (target / MOD).read_text() == before and not (target / NEW).exists()


def test_applies_with_offset_when_upstream_sha_differs(trees, tmp_path):
    pristine, _, patches = trees
    target = tmp_path / "target"
    shutil.copytree(pristine, target)
    (target / MOD).write_text("# a new first line\n" + (target / MOD).read_text())
    (mod,) = [r for r in check_series(target=target, patches_dir=patches).results if r.path == MOD]
    assert mod.status == FileStatus.CLEAN and not mod.upstream_matches and "differs" in mod.detail


def test_byte_compile_failure_names_the_file(trees, tmp_path):
    pristine, edited, patches = trees
    (edited / MOD).write_text((edited / MOD).read_text() + "def broken(:\n")
    refresh_series(edited=edited, pristine=pristine, patches_dir=patches)
    target = tmp_path / "target"
    shutil.copytree(pristine, target)
    with pytest.raises(PatchError, match="mod.py does not byte-compile"):
        apply_series(target=target, patches_dir=patches)


def test_refresh_round_trip_and_add(trees):
    pristine, edited, patches = trees
    first = refresh_series(edited=edited, pristine=pristine, patches_dir=patches)
    assert first.unchanged == [patches / "one.diff"]
    (edited / "vllm/pkg/other.py").write_text("X = 1\n")
    (edited / MOD).write_text((edited / MOD).read_text() + "tail = 1\n")
    second = refresh_series(edited=edited, pristine=pristine, patches_dir=patches, add=["one:vllm/pkg/other.py"])
    assert second.written == [patches / "one.diff"]
    patch = parse_patch(patches / "one.diff")
    assert [f.path for f in patch.files] == [MOD, NEW, "vllm/pkg/other.py"]
    assert "+tail = 1" in patch.files[0].section


def test_refresh_rejects_bad_add(trees):
    pristine, edited, patches = trees
    with pytest.raises(PatchError, match="not PATCH:PATH"):
        refresh_series(edited=edited, pristine=pristine, patches_dir=patches, add=["nocolon"])
    with pytest.raises(PatchError, match="unknown patches"):
        refresh_series(edited=edited, pristine=pristine, patches_dir=patches, add=["two:x.py"])


def test_header_must_match_sections(trees):
    _, _, patches = trees
    text = (patches / "one.diff").read_text()
    (patches / "one.diff").write_text(text.replace(f"# file: {NEW} sha256=new\n", ""))
    with pytest.raises(PatchError, match="header files"):
        load_series(patches)
    (patches / "one.diff").write_text(text.replace("# engine: vllm==0.33.0\n", ""))
    with pytest.raises(PatchError, match="header lacks"):
        load_series(patches)


def test_series_names_a_missing_diff(trees):
    _, _, patches = trees
    (patches / "series").write_text("one.diff\nmissing.diff\n")
    with pytest.raises(PatchError, match="missing.diff"):
        load_series(patches)
