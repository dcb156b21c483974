#!/usr/bin/env bash
# The GPU runs behind evidence/kernels/, one step per argument, on a machine with the GPU:
#   benchmarks/kernels/evidence.sh PATCHED UPSTREAM OUT STEP [STEP ...]   (from the repo root)
#   PATCHED: vllm 0.33.0 QSA sources with the series applied (builder patches apply --to DIR)
#   UPSTREAM: the same sources unpatched; OUT: where the logs and JSON go
#   QFN_QSA_SMOLLM2_KV: real SmolLM2 K/V/Q for the window tests and accuracy
#     (python -m benchmarks.kernels.capture_smollm2_kv --num-layers 4 --out .dev/smollm2_kv.pt, on a CPU machine)
#   QFN_QSA_TRITON_ARCHIVE: run every step under the images' Triton (benchmarks.kernels.device_triton packs the
#     engine lock's pin), not the machine's own; unpacked once per archive into /tmp/qfn-triton-<sha256>
#     (a later run on the same machine finds it there: QFN_QSA_TRITON_DIR=that folder, no archive)
#   QFN_QSA_OLD_TREE: for mutation-window, a tree with the int8 kernel that carried the V bias
#     across a whole split (the series of commit ed7f111 applied: git show ed7f111:bundle/patches/qsa-int8.diff)
#
# The current kernel evidence comes from, under QFN_QSA_TRITON_ARCHIVE:
#   grid-sweep tests grid grid-engine memcheck store-bench accuracy prepare-write ncu-grid ncu-prefill ncu-selection
# grid-sweep rewrites _SM90_INT8_TABLE in PATCHED (benchmarks.kernels.int8_table); run
# `builder patches refresh --from PATCHED` afterwards to carry it into the diff.
# Afterwards, on any machine: python -m benchmarks.kernels.grid_report --grid OUT/qsa-grid-h200.json --out OUT \
#   --ncu OUT/qsa-grid-ncu-h200.json [OUT/qsa-grid-ncu-prefill-h200.json] [--baseline OLD.json]
set -euo pipefail
E=$1 U=$2 OUT=$3
shift 3
mkdir -p "$OUT"
if [ -n "${QFN_QSA_TRITON_ARCHIVE:-}" ]; then
  QFN_QSA_TRITON_DIR=/tmp/qfn-triton-$(sha256sum "$QFN_QSA_TRITON_ARCHIVE" | cut -c1-16)
  if [ ! -f "$QFN_QSA_TRITON_DIR/triton/__init__.py" ]; then
    rm -rf "$QFN_QSA_TRITON_DIR.part" && mkdir -p "$QFN_QSA_TRITON_DIR.part"
    xz -dc "$QFN_QSA_TRITON_ARCHIVE" | tar xf - -C "$QFN_QSA_TRITON_DIR.part"
    mv "$QFN_QSA_TRITON_DIR.part" "$QFN_QSA_TRITON_DIR"
  fi
fi
if [ -n "${QFN_QSA_TRITON_DIR:-}" ]; then
  # In-tree backends only: entry-point discovery would also find the machine's own Triton's backends.
  export PYTHONPATH=$QFN_QSA_TRITON_DIR${PYTHONPATH:+:$PYTHONPATH} TRITON_BACKENDS_IN_TREE=1
  export TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-$QFN_QSA_TRITON_DIR.cache}
fi
# The series' helpers (bundle/patches) import each other by plain name, as a bundle ships them: the
# scripts and GPU tests find them on this path (the host has no install of the builder).
export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$PWD/bundle/patches
python -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, triton.__file__)" \
  > "$OUT/versions-triton.txt"
export QFN_QSA_PATCHED_TREE=$E QFN_QSA_UPSTREAM_TREE=$U PYTHONUNBUFFERED=1
export QFN_QSA_SMOLLM2_KV=${QFN_QSA_SMOLLM2_KV:-.dev/smollm2_kv.pt}
QSA_OPS=vllm/models/qwen4_exp/nvidia/ops/qsa.py
SHARDS=13

ncu_points() {  # ncu_points TXT JSON "POINT;POINT" [SELECTION]: fp8 and int8 counters, one cold launch each, and their table
  ncu --clock-control none --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section Occupancy \
    -k regex:sparse_paged python -m benchmarks.kernels.grid_ncu --engine "$E" --upstream "$U" --points "$3" \
    --selection "${4:-uniform}" > "$OUT/$1" 2>&1
  local table
  table=$(mktemp -d)
  python -m benchmarks.kernels.grid_ncu --table "$OUT/$1" --out "$table"
  mv "$table/qsa-grid-ncu-h200.json" "$OUT/$2"
}

compile_shards() {  # fill Triton's on-disk cache from $SHARDS processes; compiling dominates these runs
  for i in $(seq 0 $((SHARDS - 1))); do
    python -m benchmarks.kernels.grid --engine "$E" --upstream "$U" --out "$(mktemp -d)" "$@" --compile-shard "$i/$SHARDS" > /dev/null 2>&1 &
  done
  wait
}

for step in "$@"; do
  case $step in
    tests)
      # The whole suite in one log, the SmolLM2 window cases included: without their input they fail, so refuse first.
      [ -f "$QFN_QSA_SMOLLM2_KV" ] || { echo "tests: no SmolLM2 K/V at $QFN_QSA_SMOLLM2_KV (capture_smollm2_kv, above)" >&2; exit 2; }
      # loadgroup: the window tests of one width share a worker and its compiled kernels.
      python -m pytest -n 12 --dist loadgroup -v -rA -p no:cacheprovider tests/gpu/test_qsa_int8.py > "$OUT/int8_gpu_tests-h200.log" 2>&1 ;;
    mutation-window)
      # The window tests and the tightened edge-case bound must fail on the kernel that
      # carried the +1152 V bias across a whole split.
      if QFN_QSA_PATCHED_TREE=$QFN_QSA_OLD_TREE python -m pytest -n 4 --dist loadgroup -v -rA -p no:cacheprovider tests/gpu/test_qsa_int8.py \
          -k "(window_and_table_entry and flat and (w2051 or w4099 or w8192)) or (smollm2 and w4099) or (edge_cases and int8 and nosplit and page64-w2051)" \
          > "$OUT/int8_unit_test-mutation-window-bias-h200.log" 2>&1; then
        echo "mutation survived: the window tests passed on the pre-issue-13 kernel" >&2; exit 1
      fi ;;
    grid-sweep)
      compile_shards --sweep
      # QFN_QSA_SELECTION: the rows the sweep tunes on (grid --selection; engine unless set).
      python -m benchmarks.kernels.grid --engine "$E" --upstream "$U" --out "$OUT" --sweep --reps 10 \
        --selection "${QFN_QSA_SELECTION:-engine}" > "$OUT/qsa-int8-grid-sweep-h200.txt" 2>&1
      python -m benchmarks.kernels.int8_table --sweep "$OUT/qsa-int8-grid-sweep.json" --qsa "$E/$QSA_OPS" --out "$OUT" >> "$OUT/qsa-int8-grid-sweep-h200.txt"
      mv "$OUT/qsa-int8-grid-sweep.json" "$OUT/qsa-int8-grid-sweep-h200.json"
      mv "$OUT/qsa-int8-table.json" "$OUT/qsa-int8-table-h200.json" ;;
    grid)
      compile_shards
      python -m benchmarks.kernels.grid --engine "$E" --upstream "$U" --out "$OUT" --reps 15 > "$OUT/qsa-grid-h200.log" 2>&1
      python -m benchmarks.kernels.grid_report --grid "$OUT/qsa-grid-h200.json" --out "$OUT" > /dev/null ;;
    expand-check)
      # The engine's expand_qsa_block_indices against the contract expansion of tests/benchmarks/kernels/test_grid.py,
      # on the grid's own draws (grid.engine_selection with each), at 30 small cases.
      python - > "$OUT/qsa-grid-engine-expand-crosscheck-h200.txt" 2>&1 <<PY
import torch
from pathlib import Path
from builder.patches.ops_loader import OPS_RELPATH, load_file_as, load_qsa_ops
load_qsa_ops(Path("$E"))
ix = load_file_as(Path("$U") / OPS_RELPATH / "qsa_indexer.py", "qsa_upstream_indexer")
from benchmarks.kernels import grid
from tests.benchmarks.kernels.test_grid import ContractExpand
n = 0
for ctx in (64, 4096, 32768):
    for label, req, rpr, prefill in (("decode 3x5", 3, 5, False), ("prefill 300", 1, 300, True)):
        for width in grid.WIDTHS:
            for shared in (False, True):
                p = grid.Point(ctx, label, req, rpr, prefill, width, 24, 2)
                if rpr > ctx: continue
                got = grid.engine_selection(ix, p, torch.Generator(device="cuda").manual_seed(n), shared=shared)
                want = grid.engine_selection(ContractExpand(), p, torch.Generator(device="cuda").manual_seed(n), shared=shared)
                same = torch.equal(got.cpu(), want.cpu())
                print(f"ctx {ctx} {label} w{width} shared={shared}: engine kernel == contract: {same}")
                assert same
                n += 1
print(f"{n} cases: the engine's expand_qsa_block_indices matches the test's contract expansion")
PY
      ;;
    grid-engine)
      # The grid again with what the engine's indexer hands the kernel (grid --selection): rows
      # drawn independently, then a request's rows ranking blocks alike; each against this run's uniform
      # grid (run `grid` first in the same call, so the ratios are not two calls' drift).
      compile_shards
      for selection in engine engine-shared; do
        python -m benchmarks.kernels.grid --engine "$E" --upstream "$U" --out "$OUT" --reps 15 --selection "$selection" \
          > "$OUT/qsa-grid-$selection-h200.log" 2>&1
        python -m benchmarks.kernels.grid_report --grid "$OUT/qsa-grid-$selection-h200.json" --out "$OUT" \
          --baseline "$OUT/qsa-grid-h200.json" > /dev/null
      done ;;
    store-bench)
      python -m benchmarks.kernels.store_write --engine "$E" --out "$OUT" > "$OUT/qsa-int8-store-h200.txt" 2>&1 ;;
    prepare-write)
      # The write the engine runs: qsa_prepare's one launch with a bf16, fp8 and int8 main cache.
      python -m benchmarks.kernels.prepare_write --engine "$E" --out "$OUT" > "$OUT/qsa-int8-prepare-write-h200.txt" 2>&1 ;;
    store-sweep)
      # Every (tokens per program, warps) at every write size: where _store_int8_launch comes from.
      python -m benchmarks.kernels.store_write --engine "$E" --out "$OUT" --sweep --reps 10 > "$OUT/qsa-int8-store-sweep-h200.txt" 2>&1 ;;
    ncu-grid)
      # Counters at representative grid misses (and one met point).
      points="ctx32K decode 64x5 w2051 24/2;ctx128K decode 64x5 w4099 24/2;ctx128K decode 256x5 w4099 12/1;ctx128K decode 64x5 w1024 24/2"
      points+=";ctx32K prefill 512 w4099 12/1;ctx128K prefill 2048 w2051 24/2;ctx256K decode 1x5 w2051 24/2;ctx4K decode 8x5 w4099 24/2"
      ncu_points ncu-grid-misses-h200.txt qsa-grid-ncu-h200.json "$points" ;;
    ncu-prefill)
      # Prefill misses at 32K-256K and one met 4K point: which limiter holds at which context.
      points="ctx32K prefill 512 w2051 24/2;ctx32K prefill 2048 w2051 24/2;ctx128K prefill 512 w4099 24/2;ctx256K prefill 512 w2051 12/1"
      points+=";ctx256K prefill 2048 w4099 24/2;ctx4K prefill 2048 w2051 12/1"
      ncu_points ncu-grid-prefill-h200.txt qsa-grid-ncu-prefill-h200.json "$points" ;;
    ncu-selection)
      # The same four points under uniform and engine selections: what the indexer's runs of 4 tokens change.
      points="ctx32K prefill 512 w2051 24/2;ctx256K prefill 2048 w4099 24/2;ctx32K decode 64x5 w2051 24/2"
      points+=";ctx128K decode 256x5 w4099 12/1"
      for selection in uniform engine; do
        ncu_points "ncu-selection-$selection-h200.txt" "qsa-grid-ncu-selection-$selection-h200.json" "$points" "$selection"
      done ;;
    memcheck)
      compute-sanitizer --tool memcheck python -m pytest -p no:cacheprovider tests/gpu/test_qsa_int8.py \
        -k "memcheck or quantize_on_write" -s > "$OUT/int8_unit_test-memcheck-h200.log" 2>&1
      compute-sanitizer --tool racecheck python -m pytest -p no:cacheprovider tests/gpu/test_qsa_int8.py \
        -k memcheck -s > "$OUT/int8_unit_test-racecheck-h200.log" 2>&1 ;;
    mutation)
      # The bias-fold test must fail on a kernel that sums Q in fp16.
      python -m pytest -p no:cacheprovider tests/gpu/test_qsa_int8.py -k bias_fold -s \
        | grep -E "rel_rms|passed|failed" > "$OUT/int8_unit_test-bias-fold-h200.txt"
      mutant=$(mktemp -d)
      cp -r "$E/." "$mutant"
      sed -i 's/tl.sum(query_lo.to(tl.float32), axis=1) + tl.sum(query_hi.to(tl.float32), axis=1)/(tl.sum(query_lo, axis=1) + tl.sum(query_hi, axis=1)).to(tl.float32)/' "$mutant/$QSA_OPS"
      grep -q "tl.sum(query_lo, axis=1)" "$mutant/$QSA_OPS"
      if QFN_QSA_PATCHED_TREE=$mutant python -m pytest -p no:cacheprovider tests/gpu/test_qsa_int8.py \
          -k "bias_fold or (edge_cases and int8 and page64-w2051)" -s > "$OUT/int8_unit_test-mutation-fp16-qsum-h200.log" 2>&1; then
        echo "mutation survived: the bias-fold test did not fail" >&2; exit 1
      fi
      rm -rf "$mutant" ;;
    accuracy)
      python -m benchmarks.kernels.accuracy --engine "$E" --smollm2 "$QFN_QSA_SMOLLM2_KV" --out "$OUT" > "$OUT/qsa-int8-accuracy.txt" 2>&1 ;;
    *) echo "unknown step $step" >&2; exit 2 ;;
  esac
  echo "$step done"
done
