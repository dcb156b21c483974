# Thin wrappers over the builder CLI. Each target makes its own venv, so a fresh clone works.
TARGET ?= gb10
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: bundle test checksums clean

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test,models]'
	touch $@

venv: $(STAMP)

test: $(STAMP)
	bash scripts/host-setup.sh
	$(BIN)/python -m pytest -q

clean:
	rm -rf $(VENV) dist
