"""A GPU image's kernel compile report lands outside the tracked tree unless `--evidence` asks for
it: a user's `make image` leaves `git status` as it was."""

from __future__ import annotations

import subprocess

from builder.constants import KERNEL_REPORTS_DIR, REPO_ROOT
from builder.image.build import BuiltImage
from builder.image.evidence import write_image_evidence


def test_the_default_report_folder_is_ignored_by_git():
    probe = (KERNEL_REPORTS_DIR / "image-aot-h200-sm_90.json").relative_to(REPO_ROOT)
    proc = subprocess.run(["git", "check-ignore", "-q", str(probe)], cwd=REPO_ROOT, check=False)
    assert proc.returncode == 0, f"{probe} would show in git status"


def _built(report):
    return BuiltImage(tag="qfn-int8kv:h200-0.1.0", id="sha256:" + "0" * 64, labels={}, seconds=1, kernel_report=report)


def test_evidence_copies_the_report_into_the_kernels_folder(tmp_path):
    report = tmp_path / "dist" / "image-aot-h200-sm_90.json"
    report.parent.mkdir()
    report.write_text('{"kernels": 3}\n')
    written = write_image_evidence(
        built=_built(report), target="h200", base_pin="lock@sha256:" + "1" * 64, base_source="wheel-lock",
        out_dir=tmp_path / "evidence" / "images" / "h200", kernels_dir=tmp_path / "evidence" / "kernels",
    )  # fmt: skip
    copied = tmp_path / "evidence" / "kernels" / "image-aot-h200-sm_90.json"
    assert copied in written and copied.read_text() == '{"kernels": 3}\n'
    assert report.is_file()  # the build's own copy stays

