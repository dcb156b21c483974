"""Fixtures of tests/image (and tests/serve): pinned targets and a fake checkout; the docker
daemon, base image and cpu-smoke server fixtures live in tests/conftest.py."""

from __future__ import annotations

import shutil

import pytest

from builder.config import parse_config
from builder.constants import REPO_ROOT

FAKE_DIGEST = "sha256:" + "ab" * 32


@pytest.fixture
def pinned(target_data):
    """A shipped target with its base pinned to a well-formed digest, so code runs past the pin check."""

    def load(name: str):
        data = target_data(name)
        ref = data["target"]["base_image"].split("@", 1)[0]
        repo = ref.rsplit(":", 1)[0] if "/" not in ref.rsplit(":", 1)[-1] else ref
        data["target"]["base_image"] = f"{repo}@{FAKE_DIGEST}"
        return parse_config(data, source=f"{name} (pinned for tests)")

    return load


@pytest.fixture
def fake_repo(tmp_path_factory):
    """A checkout holding the real Dockerfile and docker/, a stub builder, and optionally a patch series."""

    def make(*, series: bool):
        repo = tmp_path_factory.mktemp("repo")
        shutil.copy(REPO_ROOT / "Dockerfile", repo / "Dockerfile")
        shutil.copytree(REPO_ROOT / "docker", repo / "docker")
        (repo / "pyproject.toml").write_text("[project]\nname = 'stub'\n")
        (repo / "builder").mkdir()
        (repo / "builder" / "__init__.py").write_text("")
        if series:
            (repo / "bundle" / "patches").mkdir(parents=True)
            (repo / "bundle" / "patches" / "series").write_text("qsa-int8.diff\n")
        return repo

    return make
