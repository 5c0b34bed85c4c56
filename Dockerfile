# The moonin-agent image: one venv in a slim Python, run as a fixed non-root user.
#
#   docker build -t moonin-agent:0.1.0 .
#
# Three stages, so that the image holds neither the wheels nor pip's caches nor anything a
# build needed: "build" makes wheels of the project and its dependencies, "venv" installs
# them offline into /opt/moonin-agent, and "runtime" copies only that venv.

# Every stage uses the same base, so the venv's interpreter link resolves in the runtime.
ARG PYTHON_IMAGE=python:3.12-slim

FROM ${PYTHON_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
# The distribution's sources only; each package listed in pyproject.toml is copied here (the
# fakes in sandbox/ are a distribution of their own and stay out of the image).
COPY pyproject.toml README.md ./
COPY agent/ agent/
COPY collector/ collector/
COPY kube/ kube/
COPY runtime/ runtime/
COPY scheduler/ scheduler/
COPY shipper/ shipper/
RUN pip wheel --wheel-dir /wheels .

FROM ${PYTHON_IMAGE} AS venv
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1
COPY --from=build /wheels /wheels
# No pip inside the venv: the base image's pip installs into it, offline, from the wheels.
RUN python -m venv --without-pip /opt/moonin-agent \
    && pip --python /opt/moonin-agent/bin/python install \
        --no-cache-dir --no-index --find-links /wheels moonin-agent \
    && /opt/moonin-agent/bin/moonin-agent version

FROM ${PYTHON_IMAGE} AS runtime
ARG VERSION=0.1.0
LABEL org.opencontainers.image.title="moonin-agent" \
      org.opencontainers.image.description="In-cluster agent for Moonin: discovery records and scheduled HPA scaling through a durable on-disk outbox" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.vendor="Moonin"
# The uid and gid are fixed: the Helm chart's securityContext names the same numbers.
RUN groupadd --system --gid 10001 moonin \
    && useradd --system --uid 10001 --gid 10001 --no-create-home \
        --home-dir /nonexistent --shell /usr/sbin/nologin moonin \
    && install --directory --owner=10001 --group=10001 --mode=0750 \
        /var/lib/moonin-agent /var/lib/moonin-agent/queue
COPY --from=venv /opt/moonin-agent /opt/moonin-agent
# MALLOC_ARENA_MAX: glibc gives each allocating thread an arena of its own, and the
# informer threads each keep a high-water mark; two arenas take a large cluster's warm-up
# from ~190 to ~130 MiB (agent/allocator.py). Set here, it holds from the first allocation.
ENV PATH=/opt/moonin-agent/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    MALLOC_ARENA_MAX=2 \
    QUEUE_DIR=/var/lib/moonin-agent/queue
# The outbox: a volume, so it outlives the container even without an orchestrator's mount.
VOLUME ["/var/lib/moonin-agent/queue"]
# /healthz, /readyz and /metrics (HEALTH_ADDR).
EXPOSE 8080
USER 10001:10001
WORKDIR /var/lib/moonin-agent
ENTRYPOINT ["moonin-agent"]
CMD ["run", "--role", "discovery"]
