"""The local transport: an environment that already has the patched vLLM, on a machine with the GPU.

Nothing is cut, sent or landed: the servers and the model generator run with --python (a venv with
vllm==0.33.0 and this release's patch series installed, or the built image's python), with the
--pythonpath folders in front of its own packages; the state (model, Triton's cache) stays in --state
between runs; results are written straight to --out. `python -m benchmarks.engine run` is its command;
`check` refuses, before anything starts, a python without that vLLM or a machine without a GPU.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from benchmarks.engine import servers as sv
from benchmarks.engine.errors import EngineHarnessError
from benchmarks.engine.transport import Transport
from builder.constants import ENGINE_UPSTREAM_VERSION, REPO_ROOT

DEFAULT_STATE = REPO_ROOT / ".cache" / "engine-local"
#: Importing vLLM or torch the first time on a cold disk takes a while; a hang is still a refusal.
PROBE_TIMEOUT_S = 300


class LocalTransport(Transport):
    name = "local"

    def __init__(self, *, out: Path, python: str = sys.executable, state: Path = DEFAULT_STATE,
                 tokenizer: Path | None = None, pythonpath: tuple[Path, ...] = ()) -> None:
        self.out, self.python, self.state = out.absolute(), str(python), state.absolute()
        self.pythonpath = tuple(p.absolute() for p in pythonpath)
        self.tokenizer = tokenizer  # None: SmolLM2's (builder.models.smollm2), made when the model is
        self.checked: dict | None = None

    def python_paths(self, *, graphs: bool = False) -> list[str]:
        return [str(p) for p in self.pythonpath]

    def _probe(self, code: str) -> subprocess.CompletedProcess:
        try:
            return subprocess.run([self.python, "-c", code], env=self.env(), capture_output=True, text=True,
                                  timeout=PROBE_TIMEOUT_S, cwd=self.state if self.state.is_dir() else None)
        except (FileNotFoundError, PermissionError) as exc:
            raise EngineHarnessError(f"--python {self.python}: cannot run it ({exc.strerror})",
                                     hint="give the python of a venv with the patched vllm installed, "
                                          "e.g. --python VENV/bin/python") from exc
        except subprocess.TimeoutExpired as exc:
            raise EngineHarnessError(f"--python {self.python}: `{code}` did not finish in {PROBE_TIMEOUT_S} s",
                                     hint="check that python starts and imports vllm and torch by hand") from exc

    def check(self, *, layout: str = "tp1") -> dict:
        """The python's vLLM and the GPUs it sees; EngineHarnessError naming the option to change when
        the vLLM is missing or another version, or the layout's GPUs are not there."""
        done = self._probe("import vllm; print(vllm.__version__); print(vllm.__file__)")
        if done.returncode != 0:
            cause = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
            raise EngineHarnessError(
                f"--python {self.python} cannot import vllm: {cause}",
                hint=f"give --python the interpreter of a venv with the patched vllm=={ENGINE_UPSTREAM_VERSION} "
                     "installed (or the built image's python), or put a patched vllm tree in front with --pythonpath DIR")
        version, where = (done.stdout.strip().splitlines() + ["", ""])[:2]
        if version != ENGINE_UPSTREAM_VERSION:
            raise EngineHarnessError(
                f"--python {self.python} imports vllm {version} from {where}; the harness serves "
                f"vllm=={ENGINE_UPSTREAM_VERSION} with this release's patch series",
                hint=f"give --python a venv with the patched vllm=={ENGINE_UPSTREAM_VERSION}, or put its tree "
                     "in front with --pythonpath DIR")
        if shutil.which("nvidia-smi", path=self.env().get("PATH")) is None:
            raise EngineHarnessError(
                "no GPU here: nvidia-smi is not on PATH",
                hint="run on a machine with an NVIDIA GPU and its driver, or measure on a remote GPU host "
                     "with `python -m benchmarks.engine prepare`")
        done = self._probe("import json, torch; print(json.dumps([torch.cuda.is_available(), torch.cuda.device_count()]))")
        if done.returncode != 0:
            cause = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
            raise EngineHarnessError(f"--python {self.python} cannot import torch: {cause}",
                                     hint="give --python the venv vllm was installed into (it brings torch)")
        available, count = json.loads(done.stdout.strip().splitlines()[-1])
        if not available:
            raise EngineHarnessError(
                f"--python {self.python}: torch.cuda.is_available() is False",
                hint="give --python a venv with a CUDA build of torch, and make the GPU visible to it "
                     "(CUDA_VISIBLE_DEVICES, the driver: nvidia-smi shows it)")
        if count < (needed := sv.layout_gpus(layout)):
            raise EngineHarnessError(f"--layout {layout} needs {needed} GPUs; --python {self.python} "
                                     f"sees {count}", hint="leave --layout out (tp1, one GPU), or run where there are more")
        self.checked = {"python": self.python, "vllm": version, "vllm_file": where, "gpus": count}
        return self.checked

    def ready(self, summary: dict, *, graphs: bool = False) -> None:
        summary["local"] = self.checked or self.check(layout=summary.get("layout", "tp1"))
        self.state.mkdir(parents=True, exist_ok=True)
        if self.tokenizer is None and not sv.model_ready(self.state):
            from builder.models.smollm2 import prepare_smollm2

            self.tokenizer = prepare_smollm2().path

    def check_out(self) -> None:
        if self.out.exists() and (not self.out.is_dir() or any(self.out.iterdir())):
            raise EngineHarnessError(f"--out {self.out} holds files already",
                                     hint="give a new or empty folder: one run's results are not mixed with another's")

    def results_dir(self) -> Path:
        self.check_out()
        self.out.mkdir(parents=True, exist_ok=True)
        return self.out

    def deliver(self, work: Path, summary: dict) -> None:
        (work / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
