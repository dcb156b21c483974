"""The chunked transport's payload and its landing: what the GPU host gets is what the wheel, the series and the lock
say, cut into pieces that reassemble byte for byte, and anything altered is refused."""

from __future__ import annotations

import json
import random
import zipfile
from pathlib import Path

import pytest

from benchmarks.engine.transport import land, payload
from benchmarks.engine.errors import EngineHarnessError

FA_INIT = "vllm/vllm_flash_attn/__init__.py"
HC = "vllm/models/qwen4_exp/nvidia/hyperconnection.py"


def fake_wheel(path: Path) -> Path:
    """A wheel laid out like vllm==0.33.0's, with the shim anchors and tiny 'libraries'."""
    members = {
        "vllm/__init__.py": "__version__ = '0.33.0'\n",
        "vllm/config/model.json": "{}",
        FA_INIT: "x = 1\nif not (FA2_AVAILABLE or FA3_AVAILABLE):\n    raise ImportError(\n        'no fa')\n",
        HC: "class H:\n    def f(self):\n            self._use_hc_down_silu = (\n                True\n            )\n",
        "vllm/third_party/flash_linear_attention/ops/__init__.py": "OPS = 1\n",
        "vllm/third_party/deep_gemm/include/cute/arch/mma.hpp": "// header\n",
        "vllm/third_party/deep_gemm/include/cute/LICENSE": "headers' licence\n",
        "vllm/csrc/kernel.cu": "// source\n",
        "vllm/vllm-rs": "ELF",
        "vllm/_C_stable_libtorch.abi3.so": "ELF-C" * 1000,
        "vllm/_moe_C_stable_libtorch.abi3.so": "ELF-MOE" * 1000,
        "vllm/vllm_flash_attn/_vllm_fa3_C.abi3.so": "ELF-FA",
        "vllm-0.33.0.dist-info/METADATA": "Name: vllm\nVersion: 0.33.0\n",
        "vllm-0.33.0.dist-info/RECORD": "vllm/__init__.py,,\n",
    }
    with zipfile.ZipFile(path, "w") as z:
        for name, text in members.items():
            z.writestr(name, text)
    return path


def test_tree_keeps_python_and_data_drops_libraries_headers_and_record(tmp_path):
    n = payload.extract_engine_tree(wheel=fake_wheel(tmp_path / "v.whl"), dest=tmp_path / "t")
    got = sorted(str(p.relative_to(tmp_path / "t")) for p in (tmp_path / "t").rglob("*") if p.is_file())
    assert got == sorted([
        "vllm/__init__.py", "vllm/config/model.json", FA_INIT, HC,
        # the GDN layers import these Triton kernels: third_party Python must travel
        "vllm/third_party/flash_linear_attention/ops/__init__.py",
        "vllm-0.33.0.dist-info/METADATA",
    ])
    assert n == len(got)


def test_libraries_are_the_two_stable_abi_ones(tmp_path):
    libs = payload.extract_engine_libs(wheel=fake_wheel(tmp_path / "v.whl"), dest=tmp_path / "l")
    assert [p.name for p in libs] == ["_C_stable_libtorch.abi3.so", "_moe_C_stable_libtorch.abi3.so"]


def test_a_wheel_without_the_libraries_is_refused(tmp_path):
    with zipfile.ZipFile(tmp_path / "v.whl", "w") as z:
        z.writestr("vllm/__init__.py", "")
    with pytest.raises(EngineHarnessError, match="_C_stable_libtorch"):
        payload.extract_engine_libs(wheel=tmp_path / "v.whl", dest=tmp_path / "l")


def test_shims_apply_once_and_refuse_a_moved_anchor(tmp_path):
    payload.extract_engine_tree(wheel=fake_wheel(tmp_path / "v.whl"), dest=tmp_path / "t")
    payload.apply_device_shims(tmp_path / "t")
    assert "if False:  # qfn device shim" in (tmp_path / "t" / FA_INIT).read_text()
    assert "find_spec('cutlass') is not None and (" in (tmp_path / "t" / HC).read_text()
    with pytest.raises(EngineHarnessError, match="found it 0 times"):  # already applied: the anchor is gone
        payload.apply_device_shims(tmp_path / "t")


def test_shims_match_the_real_engine(engine_src, tmp_path):
    """Each anchor occurs exactly once in the pinned vllm==0.33.0 sources."""
    for shim in payload.DEVICE_SHIMS:
        assert (engine_src / shim.path).read_text().count(shim.old) == 1, shim.path


def test_tar_is_deterministic(tmp_path):
    src = tmp_path / "src"
    (src / "a").mkdir(parents=True)
    (src / "a" / "f.txt").write_text("hello")
    payload.tar_dir(src, tmp_path / "one.tar.xz", xz=True)
    (src / "a" / "f.txt").touch()  # a new mtime must not change the bytes
    payload.tar_dir(src, tmp_path / "two.tar.xz", xz=True)
    assert (tmp_path / "one.tar.xz").read_bytes() == (tmp_path / "two.tar.xz").read_bytes()


def payload_bytes(i: int) -> bytes:
    return random.Random(i).randbytes(10_000 + 3_000 * i)  # incompressible: xz keeps the size


def components(tmp_path: Path) -> list[Path]:
    out = []
    for i, name in enumerate(payload.COMPONENTS):
        src = tmp_path / f"src{i}"
        src.mkdir()
        (src / f"file{i}.bin").write_bytes(payload_bytes(i))
        payload.tar_dir(src, tmp_path / name, xz=name.endswith(".xz"))
        out.append(tmp_path / name)
    return out


def test_pieces_reassemble_byte_for_byte_and_unpack_as_they_complete(tmp_path):
    comps = components(tmp_path)
    (tmp_path / "pieces").mkdir()
    parts, pieces = payload.split_stream(components=comps, out_dir=tmp_path / "pieces", piece_bytes=20_000)
    assert len(pieces) > 2 and all(p.size <= 20_000 for p in pieces)
    assert sum(p.size for p in pieces) == sum(c.size for c in parts)
    manifest = {"components": [c.model_dump() for c in parts], "pieces": [p.model_dump() for p in pieces]}
    state = tmp_path / "state"
    # the first land carries only the first piece: only components wholly inside it unpack
    first = tmp_path / "first-land"
    first.mkdir()
    (first / pieces[0].name).write_bytes((tmp_path / "pieces" / pieces[0].name).read_bytes())
    land.land_pieces(manifest=manifest, sent=first, state=state)
    early = land.unpack_ready(manifest=manifest, state=state)
    assert early == [c.name for c in parts if c.offset + c.size <= pieces[0].size]
    land.land_pieces(manifest=manifest, sent=tmp_path / "pieces", state=state)
    rest = land.unpack_ready(manifest=manifest, state=state)
    assert early + rest == list(payload.COMPONENTS)
    for i, name in enumerate(payload.COMPONENTS):
        dest = state / land.DESTINATIONS[name] / f"file{i}.bin"
        assert dest.read_bytes() == payload_bytes(i)
    assert land.unpack_ready(manifest=manifest, state=state) == []  # nothing twice


def test_a_corrupted_piece_is_refused(tmp_path):
    comps = components(tmp_path)
    (tmp_path / "pieces").mkdir()
    parts, pieces = payload.split_stream(components=comps, out_dir=tmp_path / "pieces", piece_bytes=20_000)
    manifest = {"components": [c.model_dump() for c in parts], "pieces": [p.model_dump() for p in pieces]}
    victim = tmp_path / "pieces" / pieces[1].name
    data = bytearray(victim.read_bytes())
    data[100] ^= 0xFF
    victim.write_bytes(bytes(data))
    with pytest.raises(land.LandError, match=pieces[1].name):
        land.land_pieces(manifest=manifest, sent=tmp_path / "pieces", state=tmp_path / "state")


def test_a_component_that_does_not_match_its_sha256_is_refused(tmp_path):
    comps = components(tmp_path)
    (tmp_path / "pieces").mkdir()
    parts, pieces = payload.split_stream(components=comps, out_dir=tmp_path / "pieces", piece_bytes=1 << 20)
    manifest = {"components": [c.model_dump() for c in parts], "pieces": [p.model_dump() for p in pieces]}
    manifest["components"][0]["sha256"] = "0" * 64
    land.land_pieces(manifest=manifest, sent=tmp_path / "pieces", state=tmp_path / "state")
    with pytest.raises(land.LandError, match="tokenizer.tar.xz"):
        land.unpack_ready(manifest=manifest, state=tmp_path / "state")


def test_assemble_writes_manifest_and_pieces_atomically(tmp_path):
    wheel = fake_wheel(tmp_path / "v.whl")
    series = tmp_path / "patches"
    series.mkdir()
    (series / "series").write_text("# empty series for the fake wheel\n")
    tok = tmp_path / "tok"
    tok.mkdir()
    (tok / "tokenizer.json").write_text("{}")
    (tok / "tokenizer_config.json").write_text("{}")
    whl = tmp_path / "pkg-1.0-py3-none-any.whl"
    whl.write_bytes(b"wheel")
    out = tmp_path / "out"
    m = payload.assemble(wheel=wheel, wheel_sha256="a" * 64, patches_dir=series, series_sha256="b" * 64,
                       wheels=[whl], tokenizer_dir=tok, out=out, work=tmp_path / "work", piece_bytes=4096)
    assert [c.name for c in m.components] == list(payload.COMPONENTS)
    assert sorted(p.name for p in out.iterdir()) == sorted(["manifest.json", *(p.name for p in m.pieces)])
    assert json.loads((out / "manifest.json").read_text())["wheels"] == [whl.name]
    # the unpacked tree carries the shims
    state = tmp_path / "state"
    land.land_pieces(manifest=m.model_dump(), sent=out, state=state)
    land.unpack_ready(manifest=m.model_dump(), state=state)
    assert "qfn device shim" in (state / "engine" / FA_INIT).read_text()
    assert (state / "engine" / "vllm" / "_moe_C_stable_libtorch.abi3.so").is_file()
    assert (state / "wheels" / whl.name).read_bytes() == b"wheel"


def _tokenizer_and_empty_series(tmp_path: Path) -> tuple[Path, Path]:
    tok = tmp_path / "tok"
    tok.mkdir()
    (tok / "tokenizer.json").write_text("{}")
    (tok / "tokenizer_config.json").write_text("{}")
    series = tmp_path / "patches"
    series.mkdir()
    (series / "series").write_text("\n")
    return tok, series


def test_assemble_never_overwrites_a_folder_it_did_not_write(tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "notes.txt").write_text("mine")
    tok, series = _tokenizer_and_empty_series(tmp_path)
    with pytest.raises(EngineHarnessError, match="refusing to overwrite"):
        payload.assemble(wheel=fake_wheel(tmp_path / "v.whl"), wheel_sha256="a" * 64, patches_dir=series,
                       series_sha256="b" * 64, wheels=[], tokenizer_dir=tok, out=tmp_path / "out",
                       work=tmp_path / "work", piece_bytes=4096)
    assert (tmp_path / "out" / "notes.txt").read_text() == "mine"


def test_an_earlier_payload_is_replaced_but_not_one_a_user_added_to(tmp_path):
    tok, series = _tokenizer_and_empty_series(tmp_path)
    out = tmp_path / "out"

    def build(sha: str) -> payload.Manifest:
        return payload.assemble(wheel=fake_wheel(tmp_path / "v.whl"), wheel_sha256=sha, patches_dir=series,
                              series_sha256="b" * 64, wheels=[], tokenizer_dir=tok, out=out,
                              work=tmp_path / "work", piece_bytes=4096)

    build("a" * 64)
    assert build("c" * 64).engine_wheel_sha256 == "c" * 64  # its own earlier output: replaced
    (out / "notes.txt").write_text("mine")
    with pytest.raises(EngineHarnessError, match="does not list"):
        build("d" * 64)
    assert (out / "notes.txt").read_text() == "mine"
    assert payload.read_manifest(out / "manifest.json").engine_wheel_sha256 == "c" * 64


def test_missing_tokenizer_is_named(tmp_path):
    with pytest.raises(EngineHarnessError, match="tokenizer.json"):
        payload.assemble(wheel=tmp_path / "v.whl", wheel_sha256="", patches_dir=tmp_path, series_sha256="",
                       wheels=[], tokenizer_dir=tmp_path, out=tmp_path / "o", work=tmp_path / "w", piece_bytes=4096)


def test_graph_wheels_ride_last_and_unpack_apart(tmp_path):
    """prepare --graphs: nvidia-cutlass-dsl is one more component after the four the eager run
    needs, so those pieces and commands stay as they were, and it unpacks beside, not into, the site."""
    tok, series = _tokenizer_and_empty_series(tmp_path)
    runtime = tmp_path / "pkg-1.0-py3-none-any.whl"
    runtime.write_bytes(b"wheel")
    dsl = tmp_path / "nvidia_cutlass_dsl-4.8.0-py3-none-any.whl"
    dsl.write_bytes(b"dsl" * 3000)
    out = tmp_path / "out"
    m = payload.assemble(wheel=fake_wheel(tmp_path / "v.whl"), wheel_sha256="a" * 64, patches_dir=series,
                       series_sha256="b" * 64, wheels=[runtime], tokenizer_dir=tok, out=out,
                       work=tmp_path / "work", piece_bytes=4096, graph_wheels=[dsl])
    assert [c.name for c in m.components] == [*payload.COMPONENTS, payload.GRAPHS_COMPONENT]
    state = tmp_path / "state"
    land.land_pieces(manifest=m.model_dump(), sent=out, state=state)
    land.unpack_ready(manifest=m.model_dump(), state=state)
    assert (state / "graphs-wheels" / dsl.name).read_bytes() == dsl.read_bytes()
    assert not (state / "wheels" / dsl.name).exists()
    assert land.status(manifest=m.model_dump(), state=state)["components_total"] == 5


def fake_triton_archive(path: Path, version: str = "3.8.0") -> Path:
    """A .tar.xz laid out like benchmarks.kernels.device_triton's: the wheel's members, its sidecar beside it."""
    import io
    import tarfile

    with tarfile.open(path, "w:xz") as tar:
        for name, text in {"triton/__init__.py": f"__version__ = '{version}-carried'\n",
                           f"triton-{version}.dist-info/METADATA": f"Name: triton\nVersion: {version}\n"}.items():
            member = tarfile.TarInfo(name)
            member.size = len(text)
            tar.addfile(member, io.BytesIO(text.encode()))
    path.with_name(path.name + ".json").write_text(json.dumps({"wheel": f"triton-{version}-cp312-cp312-manylinux.whl"}))
    return path


def test_the_lock_triton_rides_last_and_unpacks_to_its_own_folder(tmp_path):
    """prepare --triton: the trimmed Triton archive is one more component after the others, so the
    eager payload's pieces stay as they were, and it lands in state/triton-lock whole."""
    tok, series = _tokenizer_and_empty_series(tmp_path)
    archive = fake_triton_archive(tmp_path / "triton.tar.xz")
    out = tmp_path / "out"
    m = payload.assemble(wheel=fake_wheel(tmp_path / "v.whl"), wheel_sha256="a" * 64, patches_dir=series,
                       series_sha256="b" * 64, wheels=[], tokenizer_dir=tok, out=out,
                       work=tmp_path / "work", piece_bytes=4096, triton_archive=archive)
    assert [c.name for c in m.components] == [*payload.COMPONENTS, payload.TRITON_COMPONENT]
    assert m.components[-1].size == archive.stat().st_size
    state = tmp_path / "state"
    land.land_pieces(manifest=m.model_dump(), sent=out, state=state)
    assert land.unpack_ready(manifest=m.model_dump(), state=state)[-1] == payload.TRITON_COMPONENT
    assert "3.8.0-carried" in (state / land.DESTINATIONS[payload.TRITON_COMPONENT] / "triton" / "__init__.py").read_text()
    assert archive.exists()  # the packed archive is the user's: assemble reads it, never moves it


def test_the_graphs_lock_pins_what_the_image_pins():
    """Graphs on the GPU host run what the image runs: cutlass-dsl 4.8.0 and the warm-up's quack,
    each at the image lock's version (docker/locks)."""
    from benchmarks.engine.transport.chunked import GRAPHS_LOCK
    from benchmarks.engine.lock import read_lock

    locked = {w.name: w.version for w in read_lock(GRAPHS_LOCK)}
    assert {"nvidia-cutlass-dsl", "nvidia-cutlass-dsl-libs-cu13", "quack-kernels"} <= set(locked)
    assert locked["nvidia-cutlass-dsl"] == "4.8.0"
    image_lock = (Path(__file__).parents[3] / "docker/locks/vllm-0.33.0-linux-amd64.txt").read_text()
    for name, version in locked.items():
        assert f"{name}=={version} " in image_lock, name
