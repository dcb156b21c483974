# Thin wrappers over the builder CLI. Each target makes its own venv, so a fresh clone works.
TARGET ?= gb10
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: bundle test test-gpu-image checksums clean image serve stop base-image patches-check base-lock lint

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test,models]'
	touch $@

venv: $(STAMP)

# gpu_image tests build a GPU image end to end (about an hour here): outside the 90-minute CI run,
# see evidence/images/ for their logs; `make test-gpu-image` runs them.
test: $(STAMP)
	bash scripts/host-setup.sh
	$(BIN)/python -m pytest -q -m "not gpu_image"

test-gpu-image: $(STAMP)
	bash scripts/host-setup.sh --emulation
	$(BIN)/python -m pytest -q -m gpu_image

clean:
	rm -rf $(VENV) dist

# --- render, bundle, checksums (builder.render / builder.bundle) ---
OUT ?= dist/$(TARGET)
RENDER_OUT ?= dist/render/$(TARGET)
.PHONY: render

bundle: $(STAMP)
	$(BIN)/python -m builder bundle --target $(TARGET) --out $(OUT)

render: $(STAMP)
	$(BIN)/python -m builder render --target $(TARGET) --out $(RENDER_OUT)

.PHONY: plan
plan: $(STAMP)
	$(BIN)/python -m builder plan --target $(TARGET)

# Rerun whenever bundle/, evidence/, Dockerfile or docker/ change: the tests check the file.
checksums: $(STAMP)
	$(BIN)/python -m builder checksums

# Publish the bundle of $(TARGET) to the Hub: a dry run that prints the plan unless YES=1.
# make publish TARGET=gb10 REPO=org/name [YES=1] [PUBLISH_ARGS="--revision b --tag t --private --allow-failed-gates"]
.PHONY: publish
publish: $(STAMP)
	@test -n "$(REPO)" || { echo "make publish: set REPO=org/name" >&2; exit 2; }
	$(BIN)/builder publish $(OUT) --repo $(REPO) $(if $(YES),--yes) $(PUBLISH_ARGS)

# --- image / serve (issue 5) ---
# pip inside the image build trusts this CA bundle (TLS-intercepting proxies); it is not kept in the image.
CA_BUNDLE ?= $(wildcard /etc/ssl/certs/ca-certificates.crt)

# cpu-smoke's base is built here (debootstrap -> docker import -> local registry). Its digest is
# machine-local, so a copy of the target pinned to it lives under .cache/ (the checkout stays clean);
# other targets' bases are pulled and pinned by hand (`builder pin --target T`).
PINNED_CPU_SMOKE := .cache/targets/cpu-smoke.toml
TARGET_ARG = $(if $(filter cpu-smoke,$(TARGET)),$(PINNED_CPU_SMOKE),$(TARGET))

base-image:
	bash scripts/host-setup.sh
	bash scripts/build-base-image.sh --if-missing

# GPU targets: the base comes from target.base_source (the pinned upstream image, or the engine lock
# in docker/locks/ built into a local base here); arm64 (gb10) on an x86_64 host runs under QEMU.
ARM64_TARGETS ?= gb10
image: $(STAMP)
	$(if $(filter cpu-smoke,$(TARGET)),$(MAKE) base-image && mkdir -p $(dir $(PINNED_CPU_SMOKE)) \
	  && cp targets/cpu-smoke.toml $(PINNED_CPU_SMOKE) && $(BIN)/python -m builder pin --target $(PINNED_CPU_SMOKE))
	$(if $(filter $(ARM64_TARGETS),$(TARGET)),bash scripts/host-setup.sh --emulation)
	$(BIN)/python -m builder image --target $(TARGET_ARG) $(if $(CA_BUNDLE),--ca-bundle $(CA_BUNDLE)) $(IMAGE_ARGS)

# Re-resolve the engine lock of one platform (then `builder pin --target T` for the targets using it).
PLATFORM ?= linux/amd64
base-lock: $(STAMP)
	bash scripts/host-setup.sh $(if $(filter linux/arm64,$(PLATFORM)),--emulation)
	$(BIN)/python -m builder base lock --platform $(PLATFORM) $(if $(CA_BUNDLE),--ca-bundle $(CA_BUNDLE))

# The launch lint without an image (vllm==0.33.0 without CUDA in a cached venv).
lint: $(STAMP)
	$(BIN)/python -m builder lint --target $(TARGET)

# PORT (host port) and NAME (container name) are optional; SERVE_ARGS passes anything else,
# e.g. SERVE_ARGS="--log-level debug -- --max-num-seqs 8".
SERVE_FLAGS = $(if $(PORT),--port $(PORT)) $(if $(NAME),--name $(NAME))
serve: $(STAMP)
	$(BIN)/python -m builder serve --target $(TARGET_ARG) $(SERVE_FLAGS) $(SERVE_ARGS)

# Stops and removes what `make serve` started (only NAME when given).
stop: $(STAMP)
	$(BIN)/python -m builder serve --target $(TARGET_ARG) --stop $(if $(NAME),--name $(NAME))

# Dry-run the INT8 QSA patch series against the pinned vllm==0.33.0 wheel (downloaded once, cached).
patches-check: $(STAMP)
	$(BIN)/python -m builder patches check

# Benchmark and quality gates against a live server of $(TARGET) (default URL: the target's port on
# 127.0.0.1; cpu-smoke reads the pinned copy `make image` wrote, the config that was served).
# Evidence goes to evidence/$(TARGET)/. `make gates` fails when a required gate fails.
.PHONY: bench gates
bench: $(STAMP)
	$(BIN)/pip install -q -e '.[plot]'
	$(BIN)/builder bench --target $(TARGET_ARG) $(if $(URL),--url $(URL)) $(BENCH_ARGS)

gates: $(STAMP)
	$(BIN)/builder gates --target $(TARGET_ARG) $(if $(URL),--url $(URL)) $(GATES_ARGS)
