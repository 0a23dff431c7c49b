# paragrade CPU/MPI runner: the runner process AND the image its docker backend starts sandboxes
# from (network none, read-only root, nobody). Build from the repo root:
#   docker build -f containers/runner-cpu.Dockerfile -t paragrade/runner-cpu .
# (scripts/build-images.sh does this with podman or docker, making the base where none is pulled.)
# Layers go from the slowest and stablest to the source: a source change rebuilds the last only.
# The first four steps are server.Dockerfile's, word for word: the engine builds them once.
FROM debian:bookworm-slim
COPY containers/install.sh /src/containers/install.sh
RUN /src/containers/install.sh system
COPY pyproject.toml /src/pyproject.toml
RUN /src/containers/install.sh app-deps
LABEL org.opencontainers.image.title="paragrade runner (cpu, mpi)" \
      io.paragrade.role="runner" \
      io.paragrade.queues="cpu,mpi" \
      io.paragrade.protocol="10" \
      io.paragrade.runtime="/opt/paragrade/runtime" \
      io.paragrade.mpi="mpich (PyPI wheel)"
COPY runners/runtime-requirements.txt runners/runtime-requirements-ray.txt runners/runtime-lock.txt /src/runners/
RUN /src/containers/install.sh runtime cpu
COPY . /src
RUN /src/containers/install.sh app
ENV PARAGRADE_RUNTIME_DIR=/opt/paragrade/runtime PARAGRADE_ASSIGNMENTS_DIR=/src/assignments
ENTRYPOINT ["paragrade"]
CMD ["runner", "--queues", "cpu,mpi", "--backend", "docker"]
