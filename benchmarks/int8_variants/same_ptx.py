"""Whether two ops trees compile the int8 QSA kernel to the same PTX at every production config (CPU only).

A candidate measured on the GPU and the edit that ships may differ in comments or in source the
compiler drops (e.g. an eviction hint on a load Triton turns into cp.async); if their PTX is the
same at every (GQA, block_n, warps, splits) the dispatch can pick, the measurement holds for what
ships. The DWARF section (it names each tree's path and lines) and line directives are left out.

    python benchmarks/int8_variants/same_ptx.py TREE_A TREE_B [--arch sm_90]
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT)]

from builder.patches import aot  # noqa: E402


def _code(ptx: str) -> str:
    body = ptx.split(".section\t.debug")[0]
    return "\n".join(line for line in body.splitlines() if not line.strip().startswith((".loc", ".file", "//")))


def ptx_digests(tree: Path, *, arch: str = "sm_90", limit: int | None = None) -> dict[tuple[int, int, int, int], str]:
    """(query heads, block_n, warps, splits) -> sha256 of the int8 kernel's PTX, per production config
    (the first ``limit`` in sorted order), compiled as `builder patches aot` compiles them."""
    ops = aot._loader().load_qsa_ops(tree, capability=aot._capability(arch))
    configs = itertools.islice(aot.compiled_configs(ops, arch=arch, cache_dtypes=("int8",)), limit)
    return {
        (q_heads, block_n, warps, splits): hashlib.sha256(_code(compiled.asm["ptx"]).encode()).hexdigest()
        for (_, q_heads, _, block_n, warps, splits), compiled in configs
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tree_a", type=Path)
    parser.add_argument("tree_b", type=Path)
    parser.add_argument("--arch", default="sm_90")
    args = parser.parse_args()
    a, b = ptx_digests(args.tree_a, arch=args.arch), ptx_digests(args.tree_b, arch=args.arch)
    differ = sorted(k for k in a if a[k] != b.get(k))
    print(f"{len(a) - len(differ)} of {len(a)} production int8 configs ({args.arch}) compile to the same PTX")
    for q_heads, block_n, warps, splits in differ:
        print(f"  differs: {q_heads} query heads, {block_n}/{warps}/{splits}")
    sys.exit(1 if differ else 0)


if __name__ == "__main__":
    main()
