"""The card's quick start installs a verifier that works: upstream's model-signing at the host lock's
version, with the pyOpenSSL it imports without declaring, and that install verifies a signed bundle."""

from __future__ import annotations

import re
import subprocess
import venv
from pathlib import Path

import pytest

from builder.constants import CARD_NAME, CARD_VERIFY_PACKAGES, REPO_ROOT, SIGNATURE_NAME

LOCK = REPO_ROOT / "requirements" / "host.lock"


def _card_install(bundle: Path) -> list[str]:
    card = (bundle / CARD_NAME).read_text()
    lines = re.findall(r"^pip install (.+)$", card, flags=re.M)
    assert len(lines) == 1, lines
    return lines[0].split()


def test_the_cards_pins_are_the_host_locks(signed):
    pinned = dict(re.findall(r"^([a-z0-9][a-z0-9._-]*)==([^\s\\;]+)", LOCK.read_text(), flags=re.M))
    install = _card_install(signed)
    assert [arg.split("==")[0] for arg in install] == list(CARD_VERIFY_PACKAGES)
    for arg in install:
        name, version = arg.split("==")
        assert pinned.get(name) == version, f"{arg}: the host lock pins {name}=={pinned.get(name)}"


@pytest.mark.slow
def test_exactly_the_cards_install_verifies_a_signed_bundle_and_refuses_a_changed_one(signed, keys, tmp_path):
    """A clean venv with only what the card installs (no host lock around it) runs upstream's CLI."""
    env_dir = tmp_path / "verifier"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *_card_install(signed)],
                   check=True, timeout=600)  # fmt: skip
    public = keys[0].public
    verify = [str(env_dir / "bin" / "model_signing"), "verify", "key", str(signed),
              "--signature", str(signed / SIGNATURE_NAME), "--public_key", str(public)]  # fmt: skip
    done = subprocess.run(verify, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Verification succeeded" in done.stdout
    (signed / "launch" / "ENV.md").write_text("# Environment\nexport EVIL=1\n")
    done = subprocess.run(verify, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode != 0 and "Verification succeeded" not in done.stdout
