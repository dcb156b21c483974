"""The QSA kernels of the patch series on a GPU, and the CPU scripts that tabulate, tune and feed them.

The scripts that load the series import its helpers (bundle/patches/qsa_*.py) by plain name, as the
bundles ship them: run those with bundle/patches on PYTHONPATH (evidence.sh and pytest put it there)."""
