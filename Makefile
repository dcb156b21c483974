# Thin wrappers over the builder CLI. Each target makes its own venv, so a fresh clone works.
TARGET ?= gb10
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: bundle test test-fast lock lock-check venv test-gpu-image checksums clean image serve stop base-image patches-check base-lock lint

# The venv is the host lock, exactly: every distribution pinned with its hashes (pip refuses any
# other file), the builder itself installed editable on top without resolving anything. pip's
# install report keeps the hash of every file it took, so the tests can hold the venv to the lock.
# The lock changes only through `make lock`, so a new PyPI release changes nothing here by itself.
LOCK ?= requirements/host.lock
$(STAMP): $(LOCK) pyproject.toml
	@$(PY) -c pass >/dev/null 2>&1 || { echo "make venv: PY=$(PY) does not run here. Nothing was installed. Fix: install CPython $(LOCK_PYTHON) and run: PY=python$(LOCK_PYTHON) make venv" >&2; exit 2; }
	@$(PY) scripts/check-host.py --lock $(LOCK) --python $(LOCK_PYTHON) --platform $(LOCK_PLATFORM)
	$(PY) -m venv --clear $(VENV)
	$(BIN)/pip install -q --require-hashes --no-deps --report $(VENV)/install-report.json -r $(LOCK)
	$(BIN)/pip install -q --no-deps --no-build-isolation -e .
	touch $@

venv: $(STAMP)

# gpu_image tests build a GPU image end to end (about an hour here): outside the 90-minute CI run,
# see evidence/images/ for their logs; `make test-gpu-image` runs them.
test: $(STAMP)
	bash scripts/host-setup.sh
	$(BIN)/python -m pytest -q -m "not gpu_image" --durations=20

# No docker daemon, no image builds, no served model: the quick loop while editing.
FAST_MARKERS ?= not docker and not slow and not gpu_image and not engine_lint
test-fast: $(STAMP)
	bash scripts/host-setup.sh --no-docker
	$(BIN)/python -m pytest -q -m "$(FAST_MARKERS)"

test-gpu-image: $(STAMP)
	bash scripts/host-setup.sh --emulation
	$(BIN)/python -m pytest -q -m gpu_image

# --- the host lock (requirements/host.lock) ---
# Resolved for the CI machine's platform and Python; torch's CPU build comes from the find-links pip
# is configured with (override: make lock FIND_LINKS=DIR). uv only resolves; pip installs.
UV_VERSION := 0.13.9
LOCK_TOOLS := .cache/lock-tools
LOCK_PYTHON ?= 3.11
LOCK_PLATFORM ?= x86_64-manylinux_2_28
FIND_LINKS ?= $(shell $(PY) -m pip config get global.find-links 2>/dev/null)
UV_COMPILE = $(LOCK_TOOLS)/bin/uv pip compile pyproject.toml requirements/build.in --extra test --extra models \
	--python-version $(LOCK_PYTHON) --python-platform $(LOCK_PLATFORM) $(addprefix --find-links ,$(FIND_LINKS)) \
	--no-emit-find-links --quiet

$(LOCK_TOOLS)/bin/uv:
	$(PY) -m venv --clear $(LOCK_TOOLS)
	$(LOCK_TOOLS)/bin/pip install -q uv==$(UV_VERSION)

# Re-resolve on purpose: the newest versions the ranges of pyproject.toml allow, with hashes.
lock: $(LOCK_TOOLS)/bin/uv
	$(UV_COMPILE) --upgrade --generate-hashes --custom-compile-command "make lock" -o $(LOCK)

# Drift seen early: the newest versions the ranges allow, in a scratch venv, against test-fast.
# Prints what differs from the lock; exits non-zero when the fast tests fail there.
CHECK_VENV := .cache/lock-check
lock-check: $(LOCK_TOOLS)/bin/uv
	mkdir -p $(CHECK_VENV)
	$(UV_COMPILE) --upgrade --no-header -o $(CHECK_VENV)/newest.txt
	$(PY) scripts/lock-diff.py $(LOCK) $(CHECK_VENV)/newest.txt
	$(PY) -m venv --clear $(CHECK_VENV)/venv
	$(CHECK_VENV)/venv/bin/pip install -q --no-deps -r $(CHECK_VENV)/newest.txt
	$(CHECK_VENV)/venv/bin/pip install -q --no-deps --no-build-isolation -e .
	touch $(CHECK_VENV)/venv/.installed
	$(MAKE) test-fast VENV=$(CHECK_VENV)/venv FAST_MARKERS="$(FAST_MARKERS) and not host_lock"

clean:
	rm -rf $(VENV) dist

# --- render, bundle, checksums (builder.render / builder.bundle) ---
OUT ?= dist/$(TARGET)
RENDER_OUT ?= dist/render/$(TARGET)
.PHONY: render

# make bundle TARGET=T [SIGN_KEY=FILE [SIGN_PUBLIC_KEY=FILE.pub]] [ATTESTATIONS=DIR]: with SIGN_KEY the bundle
# names the key's id (its public key, default SIGN_KEY.pub) and is signed once built (model.sig).
# The commands are not echoed: the key's path stays out of the output (the builder prints its key id).
SIGN_PUBLIC_KEY ?= $(if $(SIGN_KEY),$(SIGN_KEY).pub)
bundle: $(STAMP)
	@$(BIN)/python -m builder bundle --target $(TARGET) --out $(OUT) $(if $(ATTESTATIONS),--attestations $(ATTESTATIONS)) $(if $(SIGN_PUBLIC_KEY),--public-key $(SIGN_PUBLIC_KEY))
	@$(if $(SIGN_KEY),$(BIN)/python -m builder sign $(OUT) --key $(SIGN_KEY))

render: $(STAMP)
	$(BIN)/python -m builder render --target $(TARGET) --out $(RENDER_OUT)

.PHONY: plan
plan: $(STAMP)
	$(BIN)/python -m builder plan --target $(TARGET)

# Rerun whenever bundle/, evidence/, Dockerfile or docker/ change: the tests check the file.
checksums: $(STAMP)
	$(BIN)/python -m builder checksums

# Publish the bundle of $(TARGET) to the Hub: a dry run that prints the plan unless YES=1.
# make publish TARGET=gb10 REPO=org/name PUBLIC_KEY=FILE.pub [YES=1] [PUBLISH_ARGS="--revision b --tag t --private --allow-failed-gates --allow-unsigned"]
.PHONY: publish
publish: $(STAMP)
	@test -n "$(REPO)" || { echo "make publish: set REPO=org/name" >&2; exit 2; }
	$(BIN)/builder publish $(OUT) --repo $(REPO) $(if $(PUBLIC_KEY),--public-key $(PUBLIC_KEY)) $(if $(YES),--yes) $(PUBLISH_ARGS)

# --- image / serve ---
# pip inside the image build trusts this CA bundle (TLS-intercepting proxies); it is not kept in the image.
CA_BUNDLE ?= $(wildcard /etc/ssl/certs/ca-certificates.crt)

# The CPU targets' base is built here (debootstrap -> docker import -> local registry). Its digest is
# machine-local, so a copy of the target pinned to it lives under .cache/ (the checkout stays clean);
# other targets' bases are pulled and pinned by hand (`builder pin --target T`).
CPU_TARGETS := cpu-smoke cpu-smoke-x2
PINNED_CPU := .cache/targets/$(TARGET).toml
TARGET_ARG = $(if $(filter $(CPU_TARGETS),$(TARGET)),$(PINNED_CPU),$(TARGET))

base-image:
	bash scripts/host-setup.sh
	bash scripts/build-base-image.sh --if-missing

# GPU targets: the base comes from target.base_source (the pinned upstream image, or the engine lock
# in docker/locks/ built into a local base here); arm64 (gb10) on an x86_64 host runs under QEMU.
# SIGN_KEY=FILE also writes the image's signed SBOM and provenance to dist/images/<target>/ (docs/images.md);
# the command is then not echoed, so the key's path stays out of the output (attest prints its key id).
ARM64_TARGETS ?= gb10
image: $(STAMP)
	$(if $(filter $(CPU_TARGETS),$(TARGET)),$(MAKE) base-image && mkdir -p $(dir $(PINNED_CPU)) \
	  && cp targets/$(TARGET).toml $(PINNED_CPU) && $(BIN)/python -m builder pin --target $(PINNED_CPU))
	$(if $(filter $(ARM64_TARGETS),$(TARGET)),bash scripts/host-setup.sh --emulation)
	$(if $(SIGN_KEY),@)$(BIN)/python -m builder image --target $(TARGET_ARG) $(if $(CA_BUNDLE),--ca-bundle $(CA_BUNDLE)) $(if $(SIGN_KEY),--sign-key $(SIGN_KEY)) $(IMAGE_ARGS)

# Re-resolve the engine lock of one platform (then `builder pin --target T` for the targets using it).
PLATFORM ?= linux/amd64
base-lock: $(STAMP)
	bash scripts/host-setup.sh $(if $(filter linux/arm64,$(PLATFORM)),--emulation)
	$(BIN)/python -m builder base lock --platform $(PLATFORM) $(if $(CA_BUNDLE),--ca-bundle $(CA_BUNDLE))

# Every claim of evidence/claims.toml against its files; README's claims table from the ledger.
.PHONY: evidence-check evidence-table
evidence-check: $(STAMP)
	$(BIN)/builder evidence check

evidence-table: $(STAMP)
	$(BIN)/builder evidence table --write

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
# 127.0.0.1; a CPU target reads the pinned copy `make image` wrote, the config that was served).
# Evidence goes to evidence/$(TARGET)/. `make gates` fails when a required gate fails.
.PHONY: bench gates
bench: $(STAMP)
	$(BIN)/pip install -q -e '.[plot]'
	$(BIN)/builder bench --target $(TARGET_ARG) $(if $(URL),--url $(URL)) $(BENCH_ARGS)

gates: $(STAMP)
	$(BIN)/builder gates --target $(TARGET_ARG) $(if $(URL),--url $(URL)) $(GATES_ARGS)
