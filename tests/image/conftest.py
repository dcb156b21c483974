"""Targets with a pinned base (a well-formed digest), so recipe code runs past the pin check."""

from __future__ import annotations

import pytest

from builder.config import parse_config

FAKE_DIGEST = "sha256:" + "ab" * 32


@pytest.fixture
def pinned(target_data):
    def load(name: str):
        data = target_data(name)
        ref = data["target"]["base_image"].split("@", 1)[0]
        repo = ref.rsplit(":", 1)[0] if "/" not in ref.rsplit(":", 1)[-1] else ref
        data["target"]["base_image"] = f"{repo}@{FAKE_DIGEST}"
        return parse_config(data, source=f"{name} (pinned for tests)")

    return load
