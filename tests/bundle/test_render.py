"""`builder render` writes launch/, README.md and their CHECKSUMS.sha256, and replaces only an
earlier render it can prove it wrote."""

from __future__ import annotations

import subprocess
import sys

import pytest

from builder.constants import REPO_ROOT
from builder.errors import RenderError
from builder.bundle.render import render_to

RENDERED = [
    "CHECKSUMS.sha256", "README.md", "launch/ENV.md", "launch/compose.yaml", "launch/k8s/deployment.yaml",
    "launch/k8s/service.yaml", "launch/qfn_stream_shutdown.py",
    "launch/run_qsa_int8kv.sh",
]


def _tree(root):
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())


def test_render_writes_and_rerenders(tmp_path):
    out = tmp_path / "r"
    paths = render_to(target="cmp170hx-x2", out=out, evidence_root=tmp_path / "no-evidence")
    assert sorted(p.relative_to(out).as_posix() for p in paths) == RENDERED == _tree(out)
    assert subprocess.run(["bash", "-n", str(out / "launch/run_qsa_int8kv.sh")]).returncode == 0
    check = subprocess.run(["sha256sum", "-c", "--strict", "CHECKSUMS.sha256"], cwd=out, capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    render_to(target="gb10", out=out, evidence_root=tmp_path / "no-evidence")
    assert "on gb10" in (out / "README.md").read_text()
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


@pytest.mark.parametrize(
    ("change", "named"),
    [
        (lambda r: (r / "notes.txt").write_text("mine"), "does not list: notes.txt"),
        (lambda r: (r / "README.md").write_text("# my own notes\n"), "changed since it was written: README.md"),
        (lambda r: (r / "launch/local.sh").write_text("echo mine\n"), "does not list: launch/local.sh"),
    ],
    ids=["added-file", "edited-card", "added-script"],
)
def test_rerender_refuses_a_render_the_user_added_to_or_changed(tmp_path, change, named):
    out = tmp_path / "r"
    render_to(target="gb10", out=out, evidence_root=tmp_path / "no-evidence")
    change(out)
    before = {rel: (out / rel).read_bytes() for rel in _tree(out)}
    with pytest.raises(RenderError, match="refusing to replace it") as err:
        render_to(target="gb10", out=out)
    assert named in err.value.message
    assert {rel: (out / rel).read_bytes() for rel in _tree(out)} == before


def test_a_users_docs_folder_is_never_taken_for_a_render(tmp_path):
    """The issue's case: a folder holding only README.md (and launch/) used to count as an earlier render."""
    docs = tmp_path / "docs"
    (docs / "launch").mkdir(parents=True)
    (docs / "README.md").write_text("# My project\n")
    (docs / "launch" / "notes.md").write_text("how I launch it\n")
    with pytest.raises(RenderError, match="README.md") as err:
        render_to(target="gb10", out=docs)
    assert "no CHECKSUMS.sha256" in err.value.message
    assert (docs / "README.md").read_text() == "# My project\n"
    assert (docs / "launch" / "notes.md").read_text() == "how I launch it\n"


def test_render_does_not_replace_a_bundle(tmp_path):
    bundle = tmp_path / "b"
    subprocess.run([sys.executable, "-m", "builder", "bundle", "--target", "gb10", "--out", str(bundle)], check=True,
                   capture_output=True)
    with pytest.raises(RenderError, match="is not a render output"):
        render_to(target="gb10", out=bundle)
    assert (bundle / "bundle.json").is_file()


@pytest.mark.parametrize("rel", ["bundle/launch/out", "bundle", "targets/r", "evidence/cpu-smoke/r", "builder/launch/out"])
def test_out_inside_the_sources_is_refused(rel):
    out = REPO_ROOT / rel
    existed = out.exists()
    with pytest.raises(RenderError, match="refusing to write there"):
        render_to(target="gb10", out=out)
    assert out.exists() == existed


def test_a_path_component_that_is_a_file_is_a_clear_error(tmp_path, run_cli):
    (tmp_path / "notes.txt").write_text("mine")
    code, _, err = run_cli("render", "--target", "gb10", "--out", str(tmp_path / "notes.txt" / "r"))
    assert code == RenderError.exit_code == 3, err
    assert "is a file, not a folder" in " ".join(err.split()) and (tmp_path / "notes.txt").read_text() == "mine"
