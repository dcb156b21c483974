"""Add-on locks (Ray over the engine lock): resolved with every engine pin as a constraint, holding
only what the engine lock lacks; refused when a pin would move, when their bytes changed since they
were pinned, or when resolved over another engine lock; pinned by `builder pin`; carried by the
recipe, the labels, the SBOM and the provenance."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import tomlkit
from rich.console import Console

from builder.config import parse_config
from builder.constants import LOCKS_DIR, REPO_ROOT
from builder.errors import ImagePinError, LockError
from builder.image import base as base_mod
from builder.image.base import (
    LABEL_ADDON_LOCK,
    addon_base_tag,
    addon_labels,
    base_tag,
    load_pinned_addons,
    resolve_addon_lock,
)
from builder.image.labels import image_labels
from builder.image.lock import (
    addon_wheels,
    constraints_text,
    parse_addon,
    pip_conflict,
    read_lock,
    render_lock,
)
from builder.image.pin import pin_target
from builder.image.provenance import ProvenanceInputs, SourceCommit, provenance_statement
from builder.image.recipe import build_recipe
from builder.image.sbom import build_sbom, packages_from_lock

ENGINE_LOCKS = {arch: LOCKS_DIR / f"vllm-0.33.0-linux-{arch}.txt" for arch in ("amd64", "arm64")}
RAY_LOCKS = {arch: LOCKS_DIR / f"ray-2.60.0-linux-{arch}.txt" for arch in ("amd64", "arm64")}
ARCH_TAGS = {"amd64": "x86_64", "arm64": "aarch64"}
IMAGE_ID = "sha256:" + "cd" * 32

#: What pip 23.0.1 prints when a requirement cannot be met within the constraints.
PIP_CONFLICT = """\
Collecting ray==2.60.0
  Downloading ray-2.60.0-cp311-cp311-manylinux2014_aarch64.whl (78.3 MB)
ERROR: Cannot install ray==2.60.0 because these package versions have conflicting dependencies.

The conflict is caused by:
    ray 2.60.0 depends on protobuf<7
    The user requested (constraint) protobuf==7.36.2

To fix this you could try to:
1. loosen the range of package versions you've specified
2. remove package versions to allow pip attempt to solve the dependency conflict

ERROR: ResolutionImpossible: for help visit https://pip.pypa.io/en/latest/topics/dependency-resolution/#dealing-with-dependency-conflicts
""".splitlines()


def _wheels(folder: Path, names: list[str]) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for name in names:
        (folder / name).write_bytes(name.encode())  # any bytes: the lock hashes the file
        out.append(folder / name)
    return out


@pytest.fixture
def engine_lock(tmp_path) -> Path:
    """A small engine lock of linux/arm64: the pins an add-on must keep."""
    wheels = _wheels(tmp_path / "engine-wheels", [
        "requests-2.34.2-py3-none-any.whl", "protobuf-7.36.2-cp310-abi3-manylinux2014_aarch64.whl",
        "vllm-0.33.0-cp38-abi3-manylinux_2_28_aarch64.whl",
    ])  # fmt: skip
    path = tmp_path / "locks" / "vllm-0.33.0-linux-arm64.txt"
    path.parent.mkdir()
    path.write_text(render_lock(engine="vllm==0.33.0", platform="linux/arm64", python="3.11.2", os_base="debian",
                                resolved_by="pip", wheels=wheels))
    return path


def test_parse_addon_needs_one_exact_version():
    assert parse_addon("ray==2.60.0") == ("ray==2.60.0", "ray-2.60.0")
    assert parse_addon("Ray[cgraph]==2.60.0") == ("ray[cgraph]==2.60.0", "ray-cgraph-2.60.0")
    for spec in ("ray", "ray>=2.60", "ray==2.*", "ray==2.60.0; python_version > '3'", "not a requirement!"):
        with pytest.raises(LockError):
            parse_addon(spec)


def test_resolution_keeps_the_engine_pins_and_locks_only_what_is_added(engine_lock, tmp_path):
    engine = read_lock(engine_lock)
    assert constraints_text(engine).splitlines() == ["protobuf==7.36.2", "requests==2.34.2", "vllm==0.33.0"]
    resolved = _wheels(tmp_path / "resolved", [
        "ray-2.60.0-cp311-cp311-manylinux2014_aarch64.whl", "requests-2.34.2-py3-none-any.whl",
        "msgpack-1.2.4-cp311-cp311-manylinux2014_aarch64.whl", "protobuf-7.36.2-cp310-abi3-manylinux2014_aarch64.whl",
    ])  # fmt: skip
    added = addon_wheels(engine, resolved, addon="ray==2.60.0")
    assert sorted(p.name.split("-")[0] for p in added) == ["msgpack", "ray"]


def test_a_resolution_that_moves_an_engine_pin_is_refused(engine_lock, tmp_path):
    resolved = _wheels(tmp_path / "resolved", ["ray-2.60.0-cp311-cp311-manylinux2014_aarch64.whl",
                                               "requests-2.35.0-py3-none-any.whl"])
    with pytest.raises(LockError) as err:
        addon_wheels(read_lock(engine_lock), resolved, addon="ray==2.60.0")
    assert "requests 2.34.2 -> 2.35.0" in err.value.message
    assert "builder base lock" in err.value.hint and "--addon" in err.value.hint


def test_an_addon_the_engine_already_holds_is_refused(engine_lock, tmp_path):
    resolved = _wheels(tmp_path / "resolved", ["requests-2.34.2-py3-none-any.whl"])
    with pytest.raises(LockError, match="adds nothing"):
        addon_wheels(read_lock(engine_lock), resolved, addon="requests==2.34.2")


def test_pip_conflict_names_its_causes_and_nothing_else_is_one():
    assert pip_conflict(PIP_CONFLICT) == ["ray 2.60.0 depends on protobuf<7", "The user requested (constraint) protobuf==7.36.2"]
    assert pip_conflict(["ERROR: Could not install packages due to an OSError: connection reset"]) is None


class _FakeDocker:
    """Stands in for the OS base container: 'pip download' drops the given wheels into /wheels and
    prints what pip prints, or fails with pip's output (the caller's refusal turns that into its error)."""

    def __init__(self, monkeypatch, *, wheels: list[str], fail_with: list[str] | None = None):
        self.seen: dict[str, str] = {}
        self.script = ""
        monkeypatch.setattr(base_mod, "docker_client", lambda **_: object())
        monkeypatch.setattr(base_mod, "emulation_needed", lambda client, arch: False)
        monkeypatch.setattr(base_mod, "ensure_os_base", lambda **_: "os-base")

        def run(*, mounts, script, refusal=None, **_):
            self.script = script
            for host, m in mounts.items():
                if m["bind"].startswith("/in/"):
                    self.seen[m["bind"]] = Path(host).read_text()
            if fail_with is not None:
                raise refusal(fail_with)
            dest = next(Path(h) for h, m in mounts.items() if m["bind"] == "/wheels")
            _wheels(dest, wheels)
            return _Container(), ["QFN-PYTHON 3.11.2", "pip 23.0.1 from /tmp/resolver (python 3.11)"]

        monkeypatch.setattr(base_mod, "_run", run)


class _Container:
    def remove(self, force: bool = False) -> None:
        pass


def test_resolve_addon_lock_writes_an_addon_lock_naming_its_engine_lock(engine_lock, tmp_path, monkeypatch):
    fake = _FakeDocker(monkeypatch, wheels=["ray-2.60.0-cp311-cp311-manylinux2014_aarch64.whl",
                                            "requests-2.34.2-py3-none-any.whl"])
    out = resolve_addon_lock(arch="arm64", ca_bundle=None, console=Console(quiet=True), addon="ray==2.60.0",
                             engine_lock=engine_lock, locks_dir=tmp_path / "out", wheel_cache=tmp_path / "cache")
    assert out == tmp_path / "out" / "ray-2.60.0-linux-arm64.txt"
    engine = read_lock(engine_lock)
    assert fake.seen["/in/engine-pins.txt"] == constraints_text(engine)  # every engine pin a constraint
    assert "-c /in/engine-pins.txt ray==2.60.0" in fake.script
    lock = read_lock(out)
    assert (lock.addon, lock.engine, lock.platform, lock.python) == ("ray==2.60.0", "vllm==0.33.0", "linux/arm64", "3.11.2")
    assert lock.engine_lock == f"{engine_lock.name}@{engine.digest}"
    assert [e.name for e in lock.entries] == ["ray"]  # requests is the engine's
    assert (tmp_path / "cache" / "arm64" / "ray-2.60.0-cp311-cp311-manylinux2014_aarch64.whl").is_file()


def test_resolve_addon_lock_refuses_a_conflict_with_an_engine_pin(engine_lock, tmp_path, monkeypatch):
    _FakeDocker(monkeypatch, wheels=[], fail_with=PIP_CONFLICT)
    with pytest.raises(LockError) as err:
        resolve_addon_lock(arch="arm64", ca_bundle=None, console=Console(quiet=True), addon="ray==2.60.0",
                           engine_lock=engine_lock, locks_dir=tmp_path / "out", wheel_cache=tmp_path / "cache")
    assert "without moving a pin" in err.value.message and "protobuf==7.36.2" in err.value.message
    assert "--addon" in err.value.hint
    assert not (tmp_path / "out").exists()


def test_an_addon_is_resolved_over_an_engine_lock_of_its_platform(engine_lock, tmp_path):
    with pytest.raises(LockError, match="not linux/amd64"):
        resolve_addon_lock(arch="amd64", ca_bundle=None, console=Console(quiet=True), addon="ray==2.60.0",
                           engine_lock=engine_lock, locks_dir=tmp_path / "out")


# --- the shipped add-on locks ---------------------------------------------------------------


@pytest.mark.parametrize("arch", ["amd64", "arm64"])
def test_shipped_ray_lock_adds_to_the_shipped_engine_lock_without_moving_a_pin(arch):
    engine, ray = read_lock(ENGINE_LOCKS[arch]), read_lock(RAY_LOCKS[arch])
    assert ray.addon == "ray==2.60.0" and ray.platform == engine.platform == f"linux/{arch}"
    assert ray.engine_lock == f"docker/locks/{ENGINE_LOCKS[arch].name}@{engine.digest}"
    assert ray.entry("ray").version == "2.60.0"
    assert not {e.name.lower() for e in ray.entries} & {e.name.lower() for e in engine.entries}
    for e in ray.entries:
        assert "any" in e.filename or ARCH_TAGS[arch] in e.filename, e.filename
    assert load_pinned_addons(pins=[f"docker/locks/{RAY_LOCKS[arch].name}@{ray.digest}"], engine=engine) == (ray,)


# --- pinned add-ons: bytes, engine lock, overlap ------------------------------------------------


@pytest.fixture
def repo(tmp_path, engine_lock):
    """A checkout with the small engine lock and a ray add-on lock over it, in docker/locks/."""
    root = tmp_path / "repo"
    locks = root / "docker" / "locks"
    locks.mkdir(parents=True)
    shutil.copy(engine_lock, locks / engine_lock.name)
    engine = read_lock(locks / engine_lock.name)
    _addon(locks / "ray-2.60.0-linux-arm64.txt", engine, ["ray-2.60.0-cp311-cp311-manylinux2014_aarch64.whl"], tmp_path)
    return root


def _addon(path: Path, engine, wheels: list[str], tmp_path: Path, *, over: str | None = None) -> Path:
    path.write_text(render_lock(
        engine="vllm==0.33.0", platform="linux/arm64", python="3.11.2", os_base="debian", resolved_by="pip",
        wheels=_wheels(tmp_path / path.stem, wheels), addon="ray==2.60.0",
        engine_lock=over or f"docker/locks/{engine.path.name}@{engine.digest}",
    ))  # fmt: skip
    return path


def test_an_edited_addon_lock_is_refused(repo):
    engine = read_lock(repo / "docker/locks/vllm-0.33.0-linux-arm64.txt")
    addon = repo / "docker/locks/ray-2.60.0-linux-arm64.txt"
    pin = f"docker/locks/{addon.name}@{read_lock(addon).digest}"
    assert [a.addon for a in load_pinned_addons(pins=[pin], engine=engine, repo_root=repo)] == ["ray==2.60.0"]
    addon.write_text(addon.read_text() + "\n")
    with pytest.raises(LockError) as err:
        load_pinned_addons(pins=[pin], engine=engine, repo_root=repo)
    assert err.value.message.startswith("add-on lock") and "builder pin" in err.value.hint


def test_an_addon_resolved_over_another_engine_lock_is_refused(repo, tmp_path):
    engine = read_lock(repo / "docker/locks/vllm-0.33.0-linux-arm64.txt")
    other = _addon(repo / "docker/locks/ray-2.60.0-linux-arm64.txt", engine, ["ray-2.60.0-cp311-none-any.whl"], tmp_path,
                   over="docker/locks/vllm-0.33.0-linux-arm64.txt@sha256:" + "0" * 64)
    with pytest.raises(LockError) as err:
        load_pinned_addons(pins=[f"docker/locks/{other.name}@{read_lock(other).digest}"], engine=engine, repo_root=repo)
    assert "resolved over the engine lock" in err.value.message and "--addon ray==2.60.0" in err.value.hint


def test_an_addon_that_would_replace_an_engine_pin_is_refused(repo, tmp_path):
    engine = read_lock(repo / "docker/locks/vllm-0.33.0-linux-arm64.txt")
    bad = _addon(repo / "docker/locks/ray-2.60.0-linux-arm64.txt", engine,
                 ["ray-2.60.0-cp311-none-any.whl", "requests-2.35.0-py3-none-any.whl"], tmp_path)
    with pytest.raises(LockError, match="already pins"):
        load_pinned_addons(pins=[f"docker/locks/{bad.name}@{read_lock(bad).digest}"], engine=engine, repo_root=repo)


def test_an_engine_lock_is_no_addon(repo):
    engine = read_lock(repo / "docker/locks/vllm-0.33.0-linux-arm64.txt")
    with pytest.raises(LockError, match="not an add-on lock"):
        load_pinned_addons(pins=[f"docker/locks/{engine.path.name}@{engine.digest}"], engine=engine, repo_root=repo)


# --- builder pin ---------------------------------------------------------------------------------


def _target_file(repo: Path, target_data, addons: list[str]) -> Path:
    data = target_data("gb10")
    data["target"]["base_lock"] = "docker/locks/vllm-0.33.0-linux-arm64.txt"
    data["target"]["addon_locks"] = addons
    path = repo / "targets" / "gb10-x2.toml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(tomlkit.dumps(data))
    return path


def test_pin_writes_the_addon_lock_digests(repo, target_data):
    path = _target_file(repo, target_data, ["docker/locks/ray-2.60.0-linux-arm64.txt"])
    pin_target(target=str(path), targets_dir=path.parent, repo_root=repo)
    pinned = tomlkit.parse(path.read_text()).unwrap()["target"]
    addon = read_lock(repo / "docker/locks/ray-2.60.0-linux-arm64.txt")
    assert pinned["addon_locks"] == [f"docker/locks/ray-2.60.0-linux-arm64.txt@{addon.digest}"]
    # A changed add-on lock gets its new digest on the next pin.
    (repo / "docker/locks/ray-2.60.0-linux-arm64.txt").write_text(addon.path.read_text() + "\n")
    pin_target(target=str(path), targets_dir=path.parent, repo_root=repo)
    again = tomlkit.parse(path.read_text()).unwrap()["target"]["addon_locks"][0]
    assert again == f"docker/locks/ray-2.60.0-linux-arm64.txt@{read_lock(addon.path).digest}" != pinned["addon_locks"][0]


def test_pin_refuses_an_addon_over_another_engine_lock(repo, target_data, tmp_path):
    engine = read_lock(repo / "docker/locks/vllm-0.33.0-linux-arm64.txt")
    _addon(repo / "docker/locks/ray-2.60.0-linux-arm64.txt", engine, ["ray-2.60.0-cp311-none-any.whl"], tmp_path,
           over="docker/locks/vllm-0.33.0-linux-arm64.txt@sha256:" + "0" * 64)
    path = _target_file(repo, target_data, ["docker/locks/ray-2.60.0-linux-arm64.txt"])
    before = path.read_text()
    with pytest.raises(ImagePinError) as err:
        pin_target(target=str(path), targets_dir=path.parent, repo_root=repo)
    assert "target.addon_locks[0]" in err.value.message and "--addon ray==2.60.0" in err.value.hint
    assert path.read_text() == before


def test_pin_refuses_a_missing_addon_lock(repo, target_data):
    path = _target_file(repo, target_data, ["docker/locks/ray-9.9.9-linux-arm64.txt"])
    with pytest.raises(ImagePinError, match="not a file of the repository"):
        pin_target(target=str(path), targets_dir=path.parent, repo_root=repo)


# --- recipe, build args, labels, SBOM, provenance ----------------------------------------------------


def _ray_pin() -> str:
    return f"docker/locks/{RAY_LOCKS['arm64'].name}@{read_lock(RAY_LOCKS['arm64']).digest}"


@pytest.fixture
def with_ray(target_data):
    data = target_data("gb10")
    data["target"]["addon_locks"] = [_ray_pin()]
    return parse_config(data, source="gb10 with ray")


def test_recipe_build_args_and_labels_carry_the_addon(with_ray):
    recipe = build_recipe(with_ray).with_base(image_id=IMAGE_ID, name="qfn-int8kv-base:x")
    assert recipe.addon_pins == (_ray_pin(),)
    assert recipe.buildargs["ADDON_LOCKS"] == _ray_pin()
    labels = image_labels(cfg=with_ray, recipe=recipe)
    assert labels[f"{LABEL_ADDON_LOCK}.ray-2.60.0"] == _ray_pin()
    assert labels["org.qfn-int8kv.base.lock"] == with_ray.target.base_lock


def test_a_target_without_addons_builds_as_before(target_data):
    cfg = parse_config(target_data("gb10"), source="gb10")
    recipe = build_recipe(cfg).with_base(image_id=IMAGE_ID, name="qfn-int8kv-base:x")
    assert recipe.addon_pins == ()
    assert set(recipe.buildargs) == {"BASE_IMAGE", "ENGINE_SPEC", "ENGINE_PYTHON", "ENGINE_DIR", "ENGINE_REMOVE",
                                     "VLLM_VERSION", "APPLY_PATCHES", "KERNEL_ARCH"}
    assert not [k for k in image_labels(cfg=cfg, recipe=recipe) if k.startswith(LABEL_ADDON_LOCK)]


def test_the_dockerfile_declares_and_records_addon_locks():
    dockerfile = (REPO_ROOT / "Dockerfile").read_text()
    stage1 = dockerfile.split("AS engine", 1)[1].split("\nFROM ", 1)[0]
    assert 'ARG ADDON_LOCKS=""' in stage1 and '"${ADDON_LOCKS}"' in stage1


def test_addon_base_has_its_own_tag_and_one_label_per_addon():
    engine, ray = read_lock(ENGINE_LOCKS["arm64"]), read_lock(RAY_LOCKS["arm64"])
    tag = addon_base_tag(engine, (ray,))
    assert tag.startswith(base_tag(engine) + "-addons-") and len(tag.split(":", 1)[1]) <= 128
    assert addon_labels([_ray_pin()]) == {f"{LABEL_ADDON_LOCK}.ray-2.60.0": _ray_pin()}


def test_sbom_lists_the_addon_packages_with_their_hashes_and_lock():
    engine, ray = read_lock(ENGINE_LOCKS["arm64"]), read_lock(RAY_LOCKS["arm64"])
    python = packages_from_lock(engine) + packages_from_lock(ray, source=_ray_pin())
    doc = json.loads(build_sbom(image_tag="qfn-int8kv:gb10-x2-1", image_id=IMAGE_ID, python=python,
                                python_source="docker/locks/vllm-0.33.0-linux-arm64.txt@x", debs=[]))
    by_name = {c["name"]: c for c in doc["components"]}
    assert by_name["ray"]["hashes"] == [{"alg": "SHA-256", "content": ray.entry("ray").sha256}]
    assert {"name": "qfn-int8kv:source", "value": _ray_pin()} in by_name["ray"]["properties"]
    assert {"name": "qfn-int8kv:source", "value": "docker/locks/vllm-0.33.0-linux-arm64.txt@x"} in by_name["torch"]["properties"]
    assert len(doc["components"]) == len(engine.entries) + len(ray.entries)


def test_provenance_names_each_addon_lock_by_digest(with_ray):
    recipe = build_recipe(with_ray).with_base(image_id=IMAGE_ID, name="qfn-int8kv-base:x")
    statement = provenance_statement(ProvenanceInputs(
        image_tag="qfn-int8kv:gb10-x2-1", image_id=IMAGE_ID, target="gb10-x2", platform="linux/arm64",
        build_args=recipe.buildargs, emulated=False, base_source="wheel-lock", base_pin=recipe.base_pin,
        base_image=IMAGE_ID, addon_pins=recipe.addon_pins, patch_series_sha256=None, builder_version="1",
        source=SourceCommit(uri="unknown", commit="unknown", dirty=False), started_on="", finished_on="",
    ))  # fmt: skip
    deps = statement["predicate"]["buildDefinition"]["resolvedDependencies"]
    addon = [d for d in deps if d["name"] == "addon-lock"]
    assert addon == [{"name": "addon-lock", "uri": f"docker/locks/{RAY_LOCKS['arm64'].name}",
                      "digest": {"sha256": read_lock(RAY_LOCKS["arm64"]).digest.split(":", 1)[1]}}]
    assert statement["predicate"]["buildDefinition"]["externalParameters"]["buildArgs"]["ADDON_LOCKS"] == _ray_pin()


# --- attestations of an image with an add-on -------------------------------------------------------


@pytest.fixture
def lock_target_with_ray(target_data):
    from tests.image.test_attest_lock_target import TARGET

    data = target_data(TARGET)  # linux/amd64, base_source = wheel-lock
    data["target"]["addon_locks"] = [f"docker/locks/{RAY_LOCKS['amd64'].name}@{read_lock(RAY_LOCKS['amd64']).digest}"]
    return parse_config(data, source=f"{TARGET} with ray")


def test_attestations_list_the_addon_packages_and_lock(lock_target_with_ray, tmp_path):
    from builder.image.attest import PROVENANCE_NAME, SBOM_NAME, attest_image
    from builder.image.sbom import python_components
    from builder.keys import generate_key_pair
    from tests.image.test_attest_lock_target import IMAGE_ID as ATTESTED_ID
    from tests.image.test_attest_lock_target import FakeClient, FakeImage, _labels

    cfg = lock_target_with_ray
    pin = cfg.target.addon_locks[0]
    generate_key_pair(private_path=tmp_path / "k.pem", public_path=tmp_path / "k.pub")
    tag = build_recipe(cfg).tag
    labelled = _labels(cfg) | addon_labels([pin])
    done = attest_image(cfg=cfg, sign_key=tmp_path / "k.pem", out_dir=tmp_path / "att",
                        client=FakeClient({tag: FakeImage(ATTESTED_ID, labelled)}))
    engine, ray = read_lock(REPO_ROOT / cfg.target.base_lock_path), read_lock(RAY_LOCKS["amd64"])
    python = {c["name"]: c for c in python_components(json.loads((tmp_path / "att" / SBOM_NAME).read_text()))}
    assert done.python_packages == len(python) == len(engine.entries) + len(ray.entries)
    assert python["ray"]["hashes"][0]["content"] == ray.entry("ray").sha256
    assert {"name": "qfn-int8kv:source", "value": pin} in python["msgpack"]["properties"]
    assert done.python_source == f"{cfg.target.base_lock} + {pin}"
    statement = json.loads((tmp_path / "att" / PROVENANCE_NAME).read_text())
    deps = [d for d in statement["predicate"]["buildDefinition"]["resolvedDependencies"] if d["name"] == "addon-lock"]
    assert deps == [{"name": "addon-lock", "uri": pin.split("@", 1)[0], "digest": {"sha256": ray.digest.split(":", 1)[1]}}]

    # An image built without the add-on (or with another) is not the target's image.
    from builder.errors import AttestationError

    for labels in (_labels(cfg), _labels(cfg) | {f"{LABEL_ADDON_LOCK}.ray-2.60.0": pin.replace(pin[-8:], "0" * 8)}):
        with pytest.raises(AttestationError, match="add-on locks"):
            attest_image(cfg=cfg, sign_key=tmp_path / "k.pem", out_dir=tmp_path / "att2",
                         client=FakeClient({tag: FakeImage(ATTESTED_ID, labels)}))
