# Thin wrappers over the builder CLI. Each target makes its own venv, so a fresh clone works.
TARGET ?= gb10
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: bundle test checksums clean patches-check

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]'
	touch $@

venv: $(STAMP)

test: $(STAMP)
	bash scripts/host-setup.sh
	$(BIN)/python -m pytest -q

clean:
	rm -rf $(VENV) dist

# Dry-run the INT8 QSA patch series against the pinned vllm==0.33.0 wheel (downloaded once, cached).
patches-check: $(STAMP)
	$(BIN)/python -m builder patches check
