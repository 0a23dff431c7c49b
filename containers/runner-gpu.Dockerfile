# paragrade GPU runner: CUDA, CuPy, numba, torch (CUDA build) and CUDA-aware Open MPI + mpi4py.
# Build from the repo root (needs network; the GPU is only needed to run it):
#   docker build -f containers/runner-gpu.Dockerfile -t paragrade/runner-gpu .
ARG CUDA=12.8.1
ARG OMPI=5.0.7

# Open MPI built with CUDA support (device buffers go straight into MPI calls).
FROM nvidia/cuda:${CUDA}-devel-ubuntu22.04 AS mpi
ARG OMPI
RUN apt-get update && apt-get install -y --no-install-recommends curl ca-certificates bzip2 \
        build-essential && rm -rf /var/lib/apt/lists/* \
    && curl -fsSL https://download.open-mpi.org/release/open-mpi/v${OMPI%.*}/openmpi-${OMPI}.tar.bz2 \
       | tar -xj -C /tmp \
    && cd /tmp/openmpi-${OMPI} \
    && ./configure --prefix=/opt/openmpi --with-cuda=/usr/local/cuda --disable-mpi-fortran \
    && make -j"$(nproc)" install && rm -rf /tmp/openmpi-${OMPI}

FROM nvidia/cuda:${CUDA}-devel-ubuntu22.04
LABEL org.opencontainers.image.title="paragrade runner (gpu)" \
      io.paragrade.role="runner" \
      io.paragrade.queues="gpu" \
      io.paragrade.protocol="4" \
      io.paragrade.runtime="/opt/paragrade/runtime" \
      io.paragrade.mpi="openmpi (CUDA-aware)"
COPY --from=mpi /opt/openmpi /opt/openmpi
# CUDA_HOME and libnvvm's folder: numba-cuda compiles kernels with it (PARAGRADE_GPU_ENV passes
# both into GPU sandboxes).
ENV PATH=/opt/openmpi/bin:$PATH LD_LIBRARY_PATH=/opt/openmpi/lib:/usr/local/cuda/nvvm/lib64 \
    CUDA_HOME=/usr/local/cuda \
    MPI_PREFIX=/opt/openmpi PYTHON=python3.11 SRC=/src \
    OMPI_MCA_opal_cuda_support=true NVIDIA_VISIBLE_DEVICES=all
# The phases of runner-cpu.Dockerfile, slowest first.
COPY containers/install.sh /src/containers/install.sh
RUN /src/containers/install.sh system gpu
COPY pyproject.toml /src/pyproject.toml
RUN /src/containers/install.sh app-deps gpu
COPY runners/runtime-requirements.txt runners/runtime-requirements-gpu.txt /src/runners/
RUN /src/containers/install.sh runtime gpu
COPY . /src
RUN /src/containers/install.sh app gpu
ENV PARAGRADE_RUNTIME_DIR=/opt/paragrade/runtime PARAGRADE_ASSIGNMENTS_DIR=/src/assignments
ENTRYPOINT ["paragrade"]
CMD ["runner", "--queues", "gpu", "--backend", "docker"]
