"""A real lock base with an add-on, from two tiny hand-made wheels: the add-on lock goes into the engine
venv in a layer of its own over the engine base, is labelled by its pin, and is reused by digest; an
add-on whose requirement the engine lock does not meet fails the build (pip check)."""

from __future__ import annotations

import base64
import hashlib
import shutil
import zipfile
from pathlib import Path

import pytest
from rich.console import Console

from builder.constants import REPO_ROOT
from builder.errors import DockerError
from builder.image import base as base_mod
from builder.image.base import (
    LABEL_ADDON_LOCK,
    LABEL_ADDONS_DIGEST,
    LABEL_LOCK_DIGEST,
    addon_base_tag,
    base_tag,
    ensure_lock_base,
    load_pinned_addons,
)
from builder.image.daemon import daemon_arch
from builder.image.lock import read_lock, render_lock

pytestmark = [pytest.mark.docker, pytest.mark.timeout(600)]


def _wheel(folder: Path, name: str, version: str, requires: tuple[str, ...] = ()) -> Path:
    """A pure-Python wheel holding the module ``name``."""
    dist = f"{name}-{version}.dist-info"
    files = {
        f"{name}/__init__.py": f"VERSION = {version!r}\n",
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
        + "".join(f"Requires-Dist: {r}\n" for r in requires),
        f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join(
        f"{path},sha256={base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b'=').decode()},{len(text.encode())}\n"
        for path, text in files.items()
    ) + f"{dist}/RECORD,,\n"
    out = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(out, "w") as zf:
        for path, text in {**files, f"{dist}/RECORD": record}.items():
            zf.writestr(path, text)
    return out


@pytest.fixture
def locks(tmp_path, docker_client, base_image, monkeypatch):
    """A checkout with an engine lock (one wheel) and two add-on locks over it, the wheels in the cache,
    and the CPU OS base standing in for the GPU one (both have python3 and venv)."""
    arch = daemon_arch(docker_client)
    repo, cache = tmp_path / "repo", tmp_path / "cache"
    (repo / "docker" / "locks").mkdir(parents=True)
    shutil.copy(REPO_ROOT / "docker" / "install-lock", repo / "docker" / "install-lock")
    (cache / arch).mkdir(parents=True)
    built = tmp_path / "built"
    built.mkdir()

    def lock(path: str, wheels: list[Path], **addon) -> Path:
        out = repo / path
        out.write_text(render_lock(engine="vllm==0.33.0", platform=f"linux/{arch}", python="3.11.2",
                                   os_base="tests", resolved_by="tests", wheels=wheels, **addon))
        for w in wheels:
            shutil.copy(w, cache / arch / w.name)
        return out

    engine_path = lock(f"docker/locks/vllm-0.33.0-linux-{arch}.txt", [_wheel(built, "qfnengine", "1.0")])
    engine = read_lock(engine_path)
    over = {"engine_lock": f"docker/locks/{engine_path.name}@{engine.digest}"}
    good = lock(f"docker/locks/qfnaddon-1.0-linux-{arch}.txt",
                [_wheel(built, "qfnaddon", "1.0", ("qfnengine==1.0",))], addon="qfnaddon==1.0", **over)
    bad = lock(f"docker/locks/qfnbroken-1.0-linux-{arch}.txt",
               [_wheel(built, "qfnbroken", "1.0", ("qfnmissing",))], addon="qfnbroken==1.0", **over)
    monkeypatch.setattr(base_mod, "ensure_os_base", lambda **_: base_image)
    made: list[str] = []
    yield repo, cache, engine, {"good": good, "bad": bad}, made
    for tag in [*made, base_tag(engine)]:
        try:
            docker_client.images.remove(tag, force=True)
        except Exception:  # noqa: BLE001 - already gone
            pass


def test_an_addon_lock_installs_over_the_engine_venv_in_its_own_layer(locks, docker_client):
    repo, cache, engine, paths, made = locks
    pins = [f"docker/locks/{paths['good'].name}@{read_lock(paths['good']).digest}"]
    addons = load_pinned_addons(pins=pins, engine=engine, repo_root=repo)
    console = Console(quiet=True)
    built = ensure_lock_base(lock=engine, addons=addons, ca_bundle=None, console=console, wheel_cache=cache, repo_root=repo)
    made.append(built.tag)
    assert built.built and built.tag == addon_base_tag(engine, addons) and built.addon_pins == tuple(pins)
    image = docker_client.images.get(built.id)
    labels = image.labels
    assert labels[LABEL_LOCK_DIGEST] == engine.digest  # the engine base's labels stay
    assert labels[f"{LABEL_ADDON_LOCK}.qfnaddon-1.0"] == pins[0]
    assert labels[LABEL_ADDONS_DIGEST].startswith("sha256:")
    engine_base = docker_client.images.get(base_tag(engine))
    assert image.attrs["RootFS"]["Layers"][:-1] == engine_base.attrs["RootFS"]["Layers"]  # one layer over it
    out = docker_client.containers.run(built.id, ["sh", "-c", "python3 -c 'import qfnaddon, qfnengine; print(qfnaddon.VERSION, qfnengine.VERSION)'"
                                                  " && pip check"], remove=True, network_mode="none")
    assert out.decode().splitlines()[0] == "1.0 1.0"
    again = ensure_lock_base(lock=engine, addons=addons, ca_bundle=None, console=console, wheel_cache=cache, repo_root=repo)
    assert not again.built and again.id == built.id


def test_an_addon_the_engine_venv_cannot_satisfy_fails_the_base(locks, docker_client):
    repo, cache, engine, paths, made = locks
    pins = [f"docker/locks/{paths['bad'].name}@{read_lock(paths['bad']).digest}"]
    addons = load_pinned_addons(pins=pins, engine=engine, repo_root=repo)
    made.append(addon_base_tag(engine, addons))
    with pytest.raises(DockerError) as err:
        ensure_lock_base(lock=engine, addons=addons, ca_bundle=None, console=Console(quiet=True), wheel_cache=cache, repo_root=repo)
    assert "qfnmissing" in err.value.message
