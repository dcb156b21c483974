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
	$(BIN)/pip install -q -e '.[test]'
	touch $@

venv: $(STAMP)

test: $(STAMP)
	bash scripts/host-setup.sh
	$(BIN)/python -m pytest -q

clean:
	rm -rf $(VENV) dist

# Benchmark and quality gates against a live server of $(TARGET) (default URL: the target's port on
# 127.0.0.1). Evidence goes to evidence/$(TARGET)/. `make gates` fails when a required gate fails.
.PHONY: bench gates
bench: $(STAMP)
	$(BIN)/pip install -q -e '.[plot]'
	$(BIN)/builder bench --target $(TARGET) $(if $(URL),--url $(URL)) $(BENCH_ARGS)

gates: $(STAMP)
	$(BIN)/builder gates --target $(TARGET) $(if $(URL),--url $(URL)) $(GATES_ARGS)
