"""attest_image on a GPU target whose base comes from the engine lock, against a fake docker client
(no daemon): one SBOM component per lock entry with its pinned sha256, the lock and patch series in
the provenance, the probe container without network, and refusals when the image does not match."""

from __future__ import annotations

import json

import pytest

from builder.bundle.attestations import present_files, read_image_record
from builder.config import load_target
from builder.constants import REPO_ROOT
from builder.errors import AttestationError
from builder.image.attest import PROVENANCE_NAME, SBOM_NAME, attest_image, require_all, verify_image
from builder.image.lock import read_lock
from builder.image.recipe import build_recipe
from builder.image.sbom import python_components
from builder.keys import generate_key_pair

TARGET = "cmp170hx-x2"  # base_source = "wheel-lock"
IMAGE_ID = "sha256:" + "7a" * 32
BASE_ID = "sha256:" + "ba" * 32
TOKEN = "ghp_FAKEcloneTOKEN0123456789"
DPKG = "bash\t5.2.15-2+b7\tamd64\nlibc6\t2.36-9+deb12u10\tamd64\n"


class FakeContainer:
    def __init__(self, out: str) -> None:
        self.out = out

    def wait(self):
        return {"StatusCode": 0}

    def logs(self, *, stdout: bool, stderr: bool) -> bytes:
        return self.out.encode() if stdout else b""

    def remove(self, force: bool = False) -> None:
        pass


class FakeImage:
    def __init__(self, image_id: str, labels: dict[str, str]) -> None:
        self.id, self.labels, self.attrs = image_id, labels, {"Created": "2026-12-04T23:40:01.123456789Z"}


class FakeClient:
    def __init__(self, images: dict[str, FakeImage]) -> None:
        self.runs: list[dict] = []
        outer = self

        class Images:
            def get(self, ref):
                from docker.errors import ImageNotFound

                if ref not in images:
                    raise ImageNotFound(ref)
                return images[ref]

        class Containers:
            def run(self, image, command, **kw):
                outer.runs.append({"image": image, "command": command, **kw})
                return FakeContainer("### qfn-attest dpkg\n" + DPKG + "### qfn-attest os\ndebian-12\n")

        self.images, self.containers = Images(), Containers()

    def info(self):
        return {"Architecture": "x86_64"}


@pytest.fixture
def cfg():
    return load_target(TARGET)


def _labels(cfg, **over) -> dict[str, str]:
    recipe = build_recipe(cfg)
    labels = {
        "org.opencontainers.image.created": "2026-12-04T23:10:00+00:00",
        "org.opencontainers.image.source": f"https://ci:{TOKEN}@github.com/o/qfn-int8kv.git",
        "org.opencontainers.image.revision": "ab" * 20 + "-dirty",
        "org.opencontainers.image.version": "0.1.0",
        "org.opencontainers.image.base.name": "qfn-int8kv-base:lock",
        "org.opencontainers.image.base.digest": BASE_ID,
        "org.qfn-int8kv.target": TARGET,
        "org.qfn-int8kv.patch-series.sha256": "5e" * 32,
        "org.qfn-int8kv.base.source": "wheel-lock",
        "org.qfn-int8kv.base.lock": recipe.base_pin,
    }
    return labels | over


@pytest.fixture
def key(tmp_path):
    generate_key_pair(private_path=tmp_path / "k.pem", public_path=tmp_path / "k.pub")
    return tmp_path / "k.pem"


def test_lock_target_attestations(cfg, key, tmp_path):
    tag = build_recipe(cfg).tag
    client = FakeClient({tag: FakeImage(IMAGE_ID, _labels(cfg))})
    out = tmp_path / "att"
    done = attest_image(cfg=cfg, sign_key=key, out_dir=out, client=client)
    lock = read_lock(REPO_ROOT / cfg.target.base_lock_path)

    sbom = json.loads((out / SBOM_NAME).read_text())
    python = python_components(sbom)
    assert done.python_packages == len(python) == len(lock.entries)
    assert {c["name"]: c["hashes"][0]["content"] for c in python} == {e.name: e.sha256 for e in lock.entries}
    assert done.debian_packages == 2

    st = json.loads((out / PROVENANCE_NAME).read_text())
    deps = {d["name"]: d for d in st["predicate"]["buildDefinition"]["resolvedDependencies"]}
    assert deps["base-lock"]["digest"] == {"sha256": lock.digest.removeprefix("sha256:")}
    assert deps["base-image"]["digest"] == {"sha256": "ba" * 32}
    assert deps["patch-series"]["digest"] == {"sha256": "5e" * 32}
    assert deps["source"] == {"name": "source", "uri": "git+https://github.com/o/qfn-int8kv.git",
                              "annotations": {"dirty": True}, "digest": {"gitCommit": "ab" * 20}}
    assert st["predicate"]["buildDefinition"]["externalParameters"]["buildArgs"]["BASE_IMAGE"] == BASE_ID
    assert st["predicate"]["runDetails"]["metadata"]["finishedOn"] == "2026-12-04T23:40:01Z"
    assert not [p.name for p in out.iterdir() if TOKEN in p.read_text()]

    [run] = client.runs
    assert run["network_mode"] == "none" and run["image"] == tag and "python" not in run["command"][0]  # the lock says it all

    checks = verify_image(image=tag, public_key=key.with_suffix(".pub"), attestations=out, client=client)
    require_all(checks, image=tag)
    # What `builder bundle --attestations` reads of it: the image record, and every file to copy.
    assert read_image_record(out).id == IMAGE_ID and sorted(present_files(out)) == sorted(p.name for p in out.iterdir())
    other = FakeClient({tag: FakeImage("sha256:" + "7b" * 32, _labels(cfg))})
    checks = verify_image(image=tag, public_key=key.with_suffix(".pub"), attestations=out, client=other)
    assert [c.name for c in checks if not c.ok] == ["provenance subject digest", "SBOM image digest"]


@pytest.mark.parametrize("label, value, message", [
    ("org.qfn-int8kv.base.lock", "docker/locks/old.txt@sha256:" + "00" * 32, "was built from lock"),
    ("org.qfn-int8kv.target", "h200", "is labelled for target 'h200'"),
])  # fmt: skip
def test_an_image_from_other_inputs_is_refused(cfg, key, tmp_path, label, value, message):
    tag = build_recipe(cfg).tag
    client = FakeClient({tag: FakeImage(IMAGE_ID, _labels(cfg, **{label: value}))})
    with pytest.raises(AttestationError, match=message):
        attest_image(cfg=cfg, sign_key=key, out_dir=tmp_path / "att", client=client)
    assert not (tmp_path / "att").exists()


def test_only_an_earlier_attestation_folder_is_replaced(cfg, key, tmp_path):
    tag = build_recipe(cfg).tag
    client = FakeClient({tag: FakeImage(IMAGE_ID, _labels(cfg))})
    out = tmp_path / "att"
    attest_image(cfg=cfg, sign_key=key, out_dir=out, client=client)
    attest_image(cfg=cfg, sign_key=key, out_dir=out, client=client)  # its own earlier output: replaced
    (out / "notes.txt").write_text("mine")
    with pytest.raises(AttestationError, match="notes.txt"):
        attest_image(cfg=cfg, sign_key=key, out_dir=out, client=client)
    assert (out / "notes.txt").read_text() == "mine"
