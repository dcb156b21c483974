"""`builder render` writes launch/ and README.md, replaces only an earlier render."""

from __future__ import annotations

import subprocess

import pytest

from builder.errors import RenderError
from builder.render import render_to


def test_render_writes_and_rerenders(tmp_path):
    out = tmp_path / "r"
    paths = render_to(target="cmp170hx-x2", out=out, evidence_root=tmp_path / "no-evidence")
    assert sorted(p.relative_to(out).as_posix() for p in paths) == [
        "README.md", "launch/ENV.md", "launch/compose.yaml", "launch/qfn_stream_shutdown.py", "launch/run_qsa_int8kv.sh"
    ]
    assert subprocess.run(["bash", "-n", str(out / "launch/run_qsa_int8kv.sh")]).returncode == 0
    render_to(target="gb10", out=out, evidence_root=tmp_path / "no-evidence")
    assert "on gb10" in (out / "README.md").read_text()

    (out / "notes.txt").write_text("mine")
    with pytest.raises(RenderError, match="refusing to overwrite"):
        render_to(target="gb10", out=out)
    assert (out / "notes.txt").read_text() == "mine"
