"""`builder publish` checks --repo, --revision, --tag and --timeout before reading the bundle or
contacting the Hub: the Hub refused a bad tag only when it was created, after the commit landed."""

from __future__ import annotations

import pytest

from builder import constants
from builder.errors import PublishError
from tests.publish.conftest import FAKE_TOKEN, make_bundle


@pytest.fixture
def hub_listener(listener, monkeypatch):
    import huggingface_hub.constants as hf_constants

    monkeypatch.setattr(hf_constants, "ENDPOINT", listener.url)
    monkeypatch.setenv(constants.ENV_HF_TOKEN, FAKE_TOKEN)
    return listener


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--tag", "v 1"], "--tag: "),
        (["--tag", "v1..2"], "--tag: "),
        (["--tag", "release.lock"], "--tag: "),
        (["--revision", "feature/"], "--revision: "),
        (["--revision", "a~1"], "--revision: "),
        (["--repo", "no-slash"], "--repo: "),
        (["--timeout", "0"], "--timeout: "),
    ],
)
def test_bad_publish_options_contact_nothing(args, named, hub_listener, run_cli, tmp_path):
    bundle = make_bundle(tmp_path / "gb10")
    code, out, err = run_cli("publish", str(bundle), "--repo", "qfn/release", "--yes", *args)
    assert code == PublishError.exit_code, out + err
    assert err.startswith(f"error: {named}") and "fix:" in err
    assert hub_listener.seen() == 0


def test_a_bad_tag_is_refused_before_the_bundle_is_read(hub_listener, run_cli, tmp_path):
    code, out, err = run_cli("publish", str(tmp_path / "no-bundle"), "--repo", "qfn/release", "--tag", "a b")
    assert code == PublishError.exit_code and err.startswith("error: --tag"), out + err
