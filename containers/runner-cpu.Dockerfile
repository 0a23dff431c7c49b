# paragrade CPU/MPI runner: the runner process AND the sandbox image its docker backend starts
# (network none, read-only root, nobody). Build from the repo root:
#   docker build -f containers/runner-cpu.Dockerfile -t paragrade/runner-cpu .
FROM python:3.11-slim-bookworm
LABEL org.opencontainers.image.title="paragrade runner (cpu, mpi)" \
      io.paragrade.role="runner" \
      io.paragrade.queues="cpu,mpi" \
      io.paragrade.protocol="2" \
      io.paragrade.runtime="/opt/paragrade/runtime" \
      io.paragrade.mpi="mpich (PyPI wheel)"
ENV PYTHON=python3.11 SRC=/src
COPY . /src
RUN /src/containers/install.sh cpu && mkdir -p /sub /data /opt/paragrade/harness /run/paragrade
ENV PARAGRADE_RUNTIME_DIR=/opt/paragrade/runtime
ENTRYPOINT ["paragrade"]
CMD ["runner", "--queues", "cpu,mpi", "--backend", "docker"]
