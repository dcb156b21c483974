"""User text (paths, file names, names from configs, evidence and servers) is printed literally,
never parsed as rich markup: `[/x]` once crashed the error printer, `[gb10]` vanished from a path."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from datetime import datetime, timezone

import pytest
from rich.console import Console

from builder.constants import REPO_ROOT
from builder.errors import MalformedManifest
from builder.measure.evidence import GateEvidence
from builder.measure.gates import gate_table
from builder.publish import PublishRequest, publish
from tests.publish.conftest import gate_file, make_bundle, write_checksums

MARKUP = ["x[/x]y", "[bold]d", "a\\[b]", "rel[gb10]"]


@pytest.mark.parametrize("arg", MARKUP)
def test_error_printer_prints_the_message_literally(tmp_path, run_cli, arg, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, _, err = run_cli("verify", arg)
    assert code == MalformedManifest.exit_code
    assert f"error: {arg} has no CHECKSUMS.sha256" in err


def test_bundle_prints_its_out_path_literally(tmp_path, run_cli, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out, _ = run_cli("bundle", "--target", "gb10", "--out", "rel[gb10]")
    assert code == 0, out
    assert "bundle rel[gb10]: " in out and "check it: python -m builder verify rel[gb10]" in out
    code, out, _ = run_cli("verify", "rel[gb10]")
    assert code == 0 and "ok rel[gb10]: " in out


def test_verify_table_shows_file_names_literally(tmp_path, run_cli, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert run_cli("bundle", "--target", "gb10", "--out", "b")[0] == 0
    (tmp_path / "b" / "[red]x.json").write_text("{}")
    code, out, _ = run_cli("verify", "b")
    assert code == 11 and "[red]x.json" in out


def test_render_prints_paths_literally(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "builder", "render", "--target", "gb10", "--out", "r[/x]"],
        cwd=tmp_path, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
    )
    assert proc.returncode == 0, proc.stderr
    assert "wrote r[/x]/README.md" in proc.stdout


def test_publish_plan_shows_file_names_and_gate_summaries_literally(tmp_path):
    bundle = make_bundle(tmp_path / "b", gates={"needle": {**gate_file("needle"), "summary": "HIT [/INST] [bold]x"}})
    (bundle / "evidence" / "[red]notes.md").write_text("mine\n")
    write_checksums(bundle)
    out = io.StringIO()
    publish(request=PublishRequest.parse(bundle_dir=bundle, repo="qfn/release", allow_unsigned=True), console=Console(file=out, width=300))
    text = out.getvalue()
    assert "evidence/[red]notes.md" in text and "HIT [/INST] [bold]x" in text


def test_gate_table_shows_model_text_literally():
    ev = GateEvidence(gate="battery", required=True, verdict="fail", summary="answered '[/INST]' 2/10",
                      created=datetime(2026, 1, 1, tzinfo=timezone.utc))
    out = io.StringIO()
    Console(file=out, width=200).print(gate_table([ev]))
    assert "answered '[/INST]' 2/10" in out.getvalue()
