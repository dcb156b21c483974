"""The chunked transport: the engine, its wheels and the tokenizer cut into pieces, one per command of a
remote runner that sends a bounded number of bytes with each command, runs each for a bounded time and
returns a few files of bounded size. Those three bounds are parameters (`ChunkedSender`,
`ChunkedTransport`), today's runner's values their defaults.

Here (`ChunkedSender.prepare`, via `python -m benchmarks.engine prepare`): the repo files the driver
imports (DIR/run), the payload in pieces with its manifest (DIR/pieces, payload.py) and DIR/commands.json,
the commands to run on the GPU host in order, each with the paths it sends. There, from DIR/run:

  python3 -m benchmarks.engine.transport.chunked land    --pieces ../pieces --state STATE
  python3 -m benchmarks.engine.transport.chunked measure --pieces ../pieces --state STATE --out $OUT ...

`land` checks and lands the pieces a command sent (land.py), unpacks what they complete, installs the
locked wheels into STATE/site and starts the model generator in its own session, so it runs on while the
machine stays warm. `measure` lands the rest and runs `driver.measure`; results go back as
$OUT/summary.json, $OUT/results.tar.gz and $OUT/triton-cache.tar.xz (when it fits), so a fresh
machine's servers can start from the compiled kernels.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

from benchmarks.engine import driver
from benchmarks.engine import servers as sv
from benchmarks.engine.errors import EngineHarnessError
from benchmarks.engine.phases import error_text
from benchmarks.engine.transport import TRITON_CACHE, Transport
from benchmarks.engine.transport import land as landing
from builder.constants import LAUNCH_MIDDLEWARE_NAME, LAUNCH_TEMPLATES_DIR, PATCHES_DIR, REPO_ROOT

#: The module the GPU host runs, from the copied repo tree's root.
HOST_MODULE = "benchmarks.engine.transport.chunked"
MANIFEST = "manifest.json"
#: Today's remote runner: what one command may send and run for, and the largest file it returns
#: (16 MiB; 1 MiB kept spare).
COMMAND_BYTES = 64 << 20
COMMAND_S = 600
RETURN_BYTES = 15 << 20
#: What a command sends besides the checkout, run tree and piece: the manifest and slack.
COMMAND_MARGIN = 1 << 20
#: The smallest piece worth a command.
MIN_PIECE_BYTES = 8 << 20
#: The measuring command runs this much longer than its budget: stopping servers, packing results.
MEASURE_SLACK_S = 90
LAND_S = 240
DEFAULT_STATE = "/tmp/qfn-engine"
#: The runner's device kind each --layout needs.
LAYOUT_KINDS = {"tp1": "nvidia-h200", "tp2-ep": "nvidia-h200-x2"}

WHEELS_DIR = REPO_ROOT / ".cache" / "engine-wheels"
#: nvidia-cutlass-dsl for CUDA graphs, sent only with --graphs.
GRAPHS_LOCK = Path(__file__).resolve().parents[1] / "graphs.lock"
#: The --middleware module the launch plan names; the launch script puts its folder on PYTHONPATH.
LAUNCH_MIDDLEWARE_SRC = str((LAUNCH_TEMPLATES_DIR / Path(LAUNCH_MIDDLEWARE_NAME).name).relative_to(REPO_ROOT))
#: What the driver imports from the repo (copied into DIR/run).
RUN_FILES = ("builder", LAUNCH_MIDDLEWARE_SRC, str(PATCHES_DIR.relative_to(REPO_ROOT)),
             "targets", "benchmarks/__init__.py", "benchmarks/engine")
#: Where the measuring command finds a Triton cache sent with it.
CACHE_DIR = "caches"
CACHE_ARCHIVE = "triton-cache.tar.xz"
#: Where `land` installs the graphs-wheels component (nvidia-cutlass-dsl), apart from state/site.
GRAPHS_SITE = "site-graphs"


# ---------------------------------------------------------------------------------------------
# here: the run tree, the pieces, the commands


def copy_run_tree(dest: Path) -> None:
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.lock")
    for rel in RUN_FILES:
        src = REPO_ROOT / rel
        if src.is_dir():
            shutil.copytree(src, dest / rel, ignore=ignore)
        elif src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)


def _earlier_run_tree(dest: Path) -> str | None:
    """None when `dest` holds only what copy_run_tree writes (RUN_FILES' top-level names)."""
    extra = sorted({p.name for p in dest.iterdir()} - {rel.split("/", 1)[0] for rel in RUN_FILES})
    return f"holds {', '.join(extra[:5])}, which copy_run_tree does not write" if extra else None


def travelling_bytes(root: Path) -> int:
    """The checkout's files every command to the GPU host sends: tracked, and untracked but not ignored."""
    names = subprocess.run(["git", "-C", str(root), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                           capture_output=True, check=True).stdout.decode().split("\0")
    return sum((root / n).stat().st_size for n in names if n and (root / n).is_file())


def tree_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) if path.is_dir() else path.stat().st_size


def check_triton_archive(archive: Path) -> str:
    """The archive's wheel name, after checking device_triton packed it from the engine lock's pin."""
    from benchmarks.kernels.device_triton import LOCK, lock_pin

    sidecar = archive.with_name(archive.name + ".json")
    pack_it = f"python -m benchmarks.kernels.device_triton --out {archive}"
    if not archive.is_file() or not sidecar.is_file():
        raise EngineHarnessError(f"--triton {archive}: no such archive with its {sidecar.name} beside it",
                                 hint=f"pack it: {pack_it}")
    wheel = json.loads(sidecar.read_text())["wheel"]
    pin = lock_pin(LOCK)
    if not wheel.startswith(f"triton-{pin}-"):
        raise EngineHarnessError(f"--triton {archive} was packed from {wheel}; the engine lock pins triton {pin}",
                                 hint=f"pack it again: {pack_it}")
    return wheel


class ChunkedSender:
    """The CPU side: a run tree, the payload in pieces, and the commands that land and measure them.

    command_bytes: what one command may send, the checkout included (it travels with every command);
    command_s: how long one command may run; return_bytes: the largest file that comes back;
    piece_bytes: the piece size (None: whatever a command has left beside the checkout and run tree).
    """

    def __init__(self, *, command_bytes: int = COMMAND_BYTES, command_s: int = COMMAND_S,
                 return_bytes: int = RETURN_BYTES, piece_bytes: int | None = None, state: str = DEFAULT_STATE) -> None:
        if command_s <= MEASURE_SLACK_S or command_s < LAND_S:
            raise EngineHarnessError(f"a command of {command_s} s cannot land a piece ({LAND_S} s) or measure "
                                     f"(its budget + {MEASURE_SLACK_S} s)", hint="give the runner's real limit")
        self.command_bytes, self.command_s, self.return_bytes = command_bytes, command_s, return_bytes
        self.piece_bytes, self.state = piece_bytes, state

    @property
    def max_budget_s(self) -> int:
        """The longest measuring budget one command holds."""
        return self.command_s - MEASURE_SLACK_S

    def room(self, repo_root: Path, run_tree: Path) -> int:
        """The bytes a command has left for a piece beside the checkout and the run tree."""
        return self.command_bytes - COMMAND_MARGIN - travelling_bytes(repo_root) - tree_bytes(run_tree)

    def piece_size(self, room: int) -> int:
        size = room if self.piece_bytes is None else self.piece_bytes
        if size > room or size < MIN_PIECE_BYTES:
            raise EngineHarnessError(
                f"a piece of {size >> 20} MiB does not fit a command to the GPU host: the checkout and run tree "
                f"leave {room >> 20} MiB of its {self.command_bytes >> 20} MiB",
                hint="leave --piece-mib out (it then takes what is left), or send less in the checkout "
                     "(it travels with every command)")
        return size

    def commands(self, *, repo_rel: str, pieces: list[str], budget_s: int, layout: str = "tp1",
                 graphs: bool = False, triton_cache: bool = False, measure_args: tuple[str, ...] = ()) -> list[dict]:
        """One command per piece; the last one also measures, with measure_args (--phases, --bench-cells,
        --bench-repeats) added. Each runs from the run tree's root, so `python3 -m` finds the harness;
        `send` lists the paths, relative to the checkout's root, the remote runner sends with it, and
        `kind` the machine it must ask for."""
        if not 0 < budget_s <= self.max_budget_s:
            raise EngineHarnessError(f"a measuring budget of {budget_s} s does not fit one command",
                                     hint=f"give 1..{self.max_budget_s} s (the command runs {MEASURE_SLACK_S} s "
                                          f"longer; one may run {self.command_s} s)")
        run, sent, caches = f"{repo_rel}/run", f"{repo_rel}/pieces", f"{repo_rel}/{CACHE_DIR}"
        host = f"cd {run} && python3 -m {HOST_MODULE}"
        where = f"--pieces ../pieces --state {self.state}"
        calls = []
        for i, piece in enumerate(pieces):
            last = i == len(pieces) - 1
            cmd = (
                f"set -o pipefail; cd {run} && PYTHONUNBUFFERED=1 python3 -m {HOST_MODULE} measure {where} "
                f"--out $OUT --return-mib {self.return_bytes >> 20} --budget-s {budget_s} --layout {layout}"
                f"{' --graphs' if graphs else ''}"
                f"{f' --triton-cache ../{CACHE_DIR}/{CACHE_ARCHIVE}' if triton_cache else ''}"
                f"{''.join(' ' + shlex.quote(a) for a in measure_args)} 2>&1 | tee $OUT/driver.log"
                if last else f"{host} land {where}"
            )
            send = [run, f"{sent}/{MANIFEST}", f"{sent}/{piece}", *([caches] if last and triton_cache else [])]
            calls.append({"send": send, "command": cmd, "timeout_s": budget_s + MEASURE_SLACK_S if last else LAND_S,
                          "kind": LAYOUT_KINDS[layout]})
        return calls

    def prepare(self, *, out: Path, repo_root: Path, budget_s: int, layout: str = "tp1", graphs: bool = False,
                triton_cache: Path | None = None, measure_args: tuple[str, ...] = (),
                triton: Path | None = None) -> dict:
        """DIR/run, DIR/pieces (manifest + pieces), DIR/caches and DIR/commands.json, with DIR = out."""
        from benchmarks.engine.lock import fetch_wheels
        from benchmarks.engine.transport.payload import assemble
        from builder.atomic import replace_dir
        from builder.hashing import sha256_file
        from builder.models.smollm2 import prepare_smollm2
        from builder.patches.engine import fetch_engine

        if triton_cache is not None and not triton_cache.is_file():
            raise EngineHarnessError(f"--triton-cache {triton_cache}: no such file",
                                     hint=f"give the {CACHE_ARCHIVE} an earlier measure wrote to $OUT")
        cache_bytes = triton_cache.stat().st_size if triton_cache is not None else 0
        if triton is not None:
            check_triton_archive(triton)
        with replace_dir(out / "run", replaceable=_earlier_run_tree, what="run tree", error=EngineHarnessError) as run:
            copy_run_tree(run)
        room = self.room(repo_root, out / "run")
        piece_bytes = self.piece_size(room)
        engine = fetch_engine()
        tokenizer = prepare_smollm2().path
        wheels = fetch_wheels(dest=WHEELS_DIR)
        graph_wheels = fetch_wheels(dest=WHEELS_DIR / "graphs", lock=GRAPHS_LOCK) if graphs else []
        manifest = assemble(
            wheel=engine.wheel, wheel_sha256=engine.wheel_sha256, patches_dir=PATCHES_DIR,
            series_sha256=sha256_file(PATCHES_DIR / "series"), wheels=wheels, tokenizer_dir=tokenizer,
            out=out / "pieces", work=WHEELS_DIR.parent / "engine-pieces", piece_bytes=piece_bytes,
            graph_wheels=graph_wheels, triton_archive=triton,
        )
        if triton_cache is not None:
            if manifest.pieces[-1].size + cache_bytes > room:
                raise EngineHarnessError(
                    f"--triton-cache {triton_cache} ({cache_bytes >> 20} MiB) and the last piece "
                    f"({manifest.pieces[-1].size >> 20} MiB) do not fit the measuring command ({room >> 20} MiB)",
                    hint="start without the cache (the servers compile again), or shrink the cache")
            (out / CACHE_DIR).mkdir(exist_ok=True)
            shutil.copy2(triton_cache, out / CACHE_DIR / CACHE_ARCHIVE)
        else:
            (out / CACHE_DIR / CACHE_ARCHIVE).unlink(missing_ok=True)
        calls = self.commands(repo_rel=str(out.relative_to(repo_root)), pieces=[p.name for p in manifest.pieces],
                              budget_s=budget_s, layout=layout, graphs=graphs, triton_cache=triton_cache is not None,
                              measure_args=measure_args)
        (out / "commands.json").write_text(json.dumps(calls, indent=2) + "\n")
        return {"pieces": [(p.name, p.size) for p in manifest.pieces], "commands": calls}


# ---------------------------------------------------------------------------------------------
# there: land, install, measure


def site_paths(python: str, site_dir: Path) -> list[str]:
    """site_dir and what its .pth files add. A PYTHONPATH entry skips .pth files, and
    nvidia-cutlass-dsl puts `cutlass` on the path only through one, an `import` line (without it every
    graphs server dies on No module named 'cutlass'); so site.py runs it, in a throwaway interpreter."""
    code = ("import site, sys; before = set(sys.path); site.addsitedir(sys.argv[1]); "
            "print('\\n'.join(p for p in sys.path if p not in before))")
    out = subprocess.run([python, "-S", "-c", code, str(site_dir)], capture_output=True, text=True, check=True)
    added = [p for p in out.stdout.splitlines() if p]
    return [str(site_dir), *(p for p in added if p != str(site_dir))]


class ChunkedTransport(Transport):
    """The GPU host's side: STATE holds the landed pieces, what they unpack to, the installed site, the
    model and Triton's cache; `out` is what the runner returns, at most `return_bytes` a file."""

    name = "chunked"

    def __init__(self, *, pieces: Path, state: Path, out: Path, return_bytes: int = RETURN_BYTES,
                 triton_cache: Path | None = None, python: str = sys.executable) -> None:
        self.pieces, self.state, self.out = pieces, state.absolute(), out
        self.return_bytes, self.triton_cache, self.python = return_bytes, triton_cache, python
        self.tokenizer = self.state / "tokenizer"

    @property
    def _lock_triton(self) -> Path | None:
        """Where the engine lock's Triton landed, when it was sent."""
        folder = self.state / landing.DESTINATIONS["triton.tar.xz"]
        return folder if (folder / "triton" / "__init__.py").is_file() else None

    def python_paths(self, *, graphs: bool = False) -> list[str]:
        paths = [*(site_paths(self.python, self.state / GRAPHS_SITE) if graphs else []),
                 str(self.state / "site"), str(self.state / "engine")]
        if self._lock_triton:
            paths.insert(0, str(self._lock_triton))  # the lock's Triton before the host's own, as the images run it
        return paths

    def extra_env(self) -> dict[str, str]:
        # The trimmed lock Triton registers the NVIDIA backend in-tree (no entry points).
        return {"TRITON_BACKENDS_IN_TREE": "1"} if self._lock_triton else {}

    def sees_site(self) -> bool:
        """Whether this interpreter imports from state/site (PYTHONPATH put it there)."""
        return str(self.state / "site") in sys.path

    def install_wheels(self, *, wheels_dir: str = "wheels", site: str = "site") -> bool:
        """Install the landed wheels into state/site once; the stamp names them. A state whose site was
        installed from other wheels is refused: a new wheels.tar unpacks beside the old wheels, and a
        skipped install would serve the old packages without a word."""
        stamp = self.state / site / ".installed"
        wheels = sorted((self.state / wheels_dir).glob("*.whl"))
        names = "".join(f"{w.name}\n" for w in wheels)
        if stamp.is_file():
            if stamp.read_text() != names:
                raise RuntimeError(f"{self.state / site} was installed from other wheels than {self.state / wheels_dir} "
                                   "holds now (another payload landed on this state): measure with a fresh --state")
            return True
        if not wheels:
            return False
        cmd = [self.python, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
               "--no-cache-dir", "--upgrade", "--target", str(self.state / site), *map(str, wheels)]
        subprocess.run(cmd, check=True)
        stamp.parent.mkdir(parents=True, exist_ok=True)
        stamp.write_text(names)
        return True

    def land(self) -> dict:
        """Land the pieces this command sent, unpack what they complete, install, start the model."""
        manifest = landing.read_manifest(self.pieces / MANIFEST)
        self.state.mkdir(parents=True, exist_ok=True)
        got = landing.land_pieces(manifest=manifest, sent=self.pieces, state=self.state)
        unpacked = landing.unpack_ready(manifest=manifest, state=self.state)
        sv.log(f"landed {got}, unpacked {unpacked}")
        if self.install_wheels() and (self.tokenizer / "tokenizer.json").is_file():
            sv.start_model(self)
        self.install_wheels(wheels_dir=landing.DESTINATIONS["graphs-wheels.tar"], site=GRAPHS_SITE)
        return landing.status(manifest=manifest, state=self.state)

    def ready(self, summary: dict, *, graphs: bool = False) -> None:
        status = summary["land"] = self.land()
        summary["triton_cache"] = {}
        if (len(status["pieces_landed"]) != status["pieces_total"]
                or len(status["components_unpacked"]) != status["components_total"]):
            raise RuntimeError(f"pieces incomplete: {status}")
        summary["triton_cache"]["restored_files"] = self.restore_cache()
        if graphs and not (self.state / GRAPHS_SITE / ".installed").is_file():
            raise RuntimeError("--graphs needs nvidia-cutlass-dsl among the pieces: run `prepare --graphs`")

    def results_dir(self) -> Path:
        """state/results, empty: an earlier measure's on this warm machine moves to results-N beside it
        (its files would otherwise go back again inside this run's results.tar.gz)."""
        work = self.state / "results"
        if work.exists():
            n = 1
            while (self.state / f"results-{n}").exists():
                n += 1
            work.rename(self.state / f"results-{n}")
        work.mkdir(parents=True)
        return work

    def deliver(self, work: Path, summary: dict) -> None:
        """summary.json and everything in results.tar.gz: the runner returns a few files, not a tree."""
        text = json.dumps(summary, indent=2, default=str)
        (work / "summary.json").write_text(text)
        (self.out / "summary.json").write_text(text)
        tmp = self.out / "results.tar.gz.part"
        with tarfile.open(tmp, "w:gz") as tar:
            tar.add(work, arcname="results")
        tmp.rename(self.out / "results.tar.gz")

    def finish(self, servers: dict, summary: dict) -> None:
        sv.keep_tails(servers)  # a whole log of three servers would not come back
        try:
            summary.setdefault("triton_cache", {})["saved"] = self.save_cache()
        except (OSError, subprocess.CalledProcessError) as exc:
            summary.setdefault("triton_cache", {})["saved"] = {"error": error_text(exc)}

    def restore_cache(self) -> int:
        """Unpack a Triton cache sent with this command into a machine that has none; its file count."""
        archive, dest = self.triton_cache, self.state / TRITON_CACHE
        if archive is None or not archive.is_file() or dest.exists():
            return 0
        with tarfile.open(archive) as tar:
            tar.extractall(self.state, filter="data")
        return sum(1 for f in dest.rglob("*") if f.is_file())

    def save_cache(self) -> dict:
        """The machine's Triton cache as $OUT/triton-cache.tar.xz, when it is no larger than return_bytes."""
        src = self.state / TRITON_CACHE
        files = sum(1 for f in src.rglob("*") if f.is_file()) if src.is_dir() else 0
        if not files:
            return {"files": 0}
        tmp = self.out / (CACHE_ARCHIVE + ".part")
        if shutil.which("tar") and shutil.which("xz"):  # all cores
            subprocess.run(["tar", "-C", str(self.state), "-cJf", str(tmp), TRITON_CACHE], check=True,
                           env={**os.environ, "XZ_OPT": "-T0 -6"})
        else:  # one core, but nothing the machine may lack
            with tarfile.open(tmp, "w:xz", preset=3) as tar:
                tar.add(src, arcname=TRITON_CACHE)
        size = tmp.stat().st_size
        if size > self.return_bytes:
            tmp.unlink()
            return {"files": files, "bytes": size, "returned": False}
        tmp.rename(self.out / CACHE_ARCHIVE)
        return {"files": files, "bytes": size, "returned": True}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(prog=f"python3 -m {HOST_MODULE}", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    land_p = sub.add_parser("land", help="land the pieces this command sent, install, start the model")
    meas = sub.add_parser("measure", help="land the rest, serve and measure; results to --out")
    for q in (land_p, meas):
        q.add_argument("--pieces", type=Path, required=True, help=f"the folder holding {MANIFEST} and the pieces sent")
        q.add_argument("--state", type=Path, default=Path(DEFAULT_STATE), help="kept between commands while the machine stays warm")
    meas.add_argument("--out", type=Path, required=True, help="what the runner returns ($OUT)")
    meas.add_argument("--return-mib", type=int, default=RETURN_BYTES >> 20,
                      help=f"the largest file the runner returns, MiB (default {RETURN_BYTES >> 20})")
    meas.add_argument("--triton-cache", type=Path,
                      help=f"a {CACHE_ARCHIVE} an earlier measure returned (unpacked if the machine has no cache)")
    driver.add_measure_options(meas, budget_s=COMMAND_S - MEASURE_SLACK_S)
    args = p.parse_args(argv)
    if not (args.pieces / MANIFEST).is_file():
        p.error(f"--pieces {args.pieces} has no {MANIFEST}")
    if args.command == "land":
        t = ChunkedTransport(pieces=args.pieces, state=args.state, out=Path("."))
        print(json.dumps(t.land()))
        return 0
    options = driver.measure_options(meas, args)
    args.out.mkdir(parents=True, exist_ok=True)
    t = ChunkedTransport(pieces=args.pieces, state=args.state, out=args.out, return_bytes=args.return_mib << 20,
                         triton_cache=args.triton_cache)
    if not t.sees_site():
        # The driver needs the landed packages (pydantic, httpx, ...): land, then run again with them on
        # PYTHONPATH, the one way this interpreter imports them the way the servers will.
        t.land()
        os.execve(t.python, [t.python, "-m", HOST_MODULE, *argv], t.env())
    return driver.measure(t, **options)


if __name__ == "__main__":
    sys.exit(main())
