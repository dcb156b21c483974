"""tests/image: a fake checkout for build tests; shared docker and target fixtures live in tests/conftest.py."""

from __future__ import annotations

import shutil

import pytest

from builder.constants import REPO_ROOT


@pytest.fixture
def fake_repo(tmp_path_factory):
    """A checkout holding the real Dockerfile, docker/ and targets/, a stub builder, and optionally a patch series."""

    def make(*, series: bool):
        repo = tmp_path_factory.mktemp("repo")
        shutil.copy(REPO_ROOT / "Dockerfile", repo / "Dockerfile")
        shutil.copytree(REPO_ROOT / "docker", repo / "docker")
        (repo / "pyproject.toml").write_text("[project]\nname = 'stub'\n")
        (repo / "builder").mkdir()
        (repo / "builder" / "__init__.py").write_text("")
        shutil.copytree(REPO_ROOT / "targets", repo / "targets")
        if series:
            (repo / "bundle" / "patches").mkdir(parents=True)
            (repo / "bundle" / "patches" / "series").write_text("qsa-int8.diff\n")
        return repo

    return make
