"""Benchmarks, one package per thing measured. Each script runs from the repo root as
`python -m benchmarks.PACKAGE.SCRIPT` (benchmarks/README.md)."""
