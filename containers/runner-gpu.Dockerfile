# paragrade GPU runner: CuPy, numba-cuda, CUDA-aware Open MPI + mpi4py, on the CPU runner's Debian.
# Build from the repo root (needs network to Debian's archive and PyPI; a GPU only to run it):
#   docker build -f containers/runner-gpu.Dockerfile -t paragrade/runner-gpu .
# (scripts/build-images.sh runner-gpu does this with podman or docker, making the base where none
# is pulled.) No CUDA base image: CUDA's user-space libraries come as NVIDIA's PyPI wheels (CuPy's
# and numba-cuda's dependencies), and the driver (libcuda, /dev/nvidia*) comes from the node at
# run time (`--gpus` / apptainer `--nv`). So the image builds wherever Debian and PyPI answer.
ARG OMPI=5.0.7
# Open MPI's release tarball as Debian's archive keeps it (default: the OMPI release in Debian's
# pool; the hash is Debian's): it answers wherever the base's packages do. Upstream's works too:
# --build-arg OMPI_URL=https://download.open-mpi.org/release/open-mpi/v5.0/openmpi-5.0.7.tar.bz2
# --build-arg OMPI_SHA256=<its hash>.
ARG OMPI_URL=
ARG OMPI_SHA256=97f10c04e9b9a1771db3fd005009e4c07afa3ce739f940e41eb0fc7397cb9473

# Open MPI built with CUDA support (device buffers go straight into MPI calls). It compiles against
# cuda.h from NVIDIA's CUDA runtime wheel and links its CUDA components against a libcuda stub made
# from that header (every cu* function, by its plain name and by the versioned one cuda.h's macros
# turn it into, as the driver exports both): they are loadable modules that open the node's
# libcuda.so.1 at run time (on a node without a driver they stay unloaded and MPI runs on the
# host, as on a CPU node).
FROM debian:bookworm-slim AS mpi
ARG OMPI OMPI_URL OMPI_SHA256
# cuda.h of the CUDA release the runtime's wheels carry (cuda-toolkit 12.9 today).
ARG CUDA_HEADERS=12.9.79
# zlib: PMIx compresses large launch messages with it (and warns at every mpiexec without it).
RUN apt-get update && apt-get install -y --no-install-recommends build-essential ca-certificates \
        curl xz-utils bzip2 file perl python3-venv zlib1g-dev && rm -rf /var/lib/apt/lists/*
RUN test ! -f /run/build-ca.crt || export PIP_CERT=/run/build-ca.crt; \
    python3 -m venv /tmp/pip && /tmp/pip/bin/pip download -q --no-deps -d /tmp/wheel \
        "nvidia-cuda-runtime-cu12==${CUDA_HEADERS}" \
    && python3 -m zipfile -e /tmp/wheel/*.whl /tmp/wheel/x \
    && mkdir -p /opt/cuda/lib64/stubs && cp -r /tmp/wheel/x/nvidia/cuda_runtime/include /opt/cuda/ \
    && { printf '#include <cuda.h>\n' | gcc -E -P -I/opt/cuda/include -; cat /opt/cuda/include/cuda.h; } \
       | tr '\n' ' ' \
       | grep -oE '\bcu[A-Z][A-Za-z0-9_]*[[:space:]]*\(' | tr -d ' (' | sort -u \
       | sed 's/.*/int &(void) { return 999; }/' > /tmp/stub.c \
    && gcc -shared -fPIC -Wl,-soname,libcuda.so.1 -o /opt/cuda/lib64/stubs/libcuda.so /tmp/stub.c \
    && rm -rf /tmp/pip /tmp/wheel /tmp/stub.c
RUN curl -fsSL -o /tmp/openmpi.tar \
        "${OMPI_URL:-http://deb.debian.org/debian/pool/main/o/openmpi/openmpi_${OMPI}.orig.tar.xz}" \
    && echo "${OMPI_SHA256}  /tmp/openmpi.tar" | sha256sum -c - \
    && mkdir /tmp/openmpi && tar -xf /tmp/openmpi.tar -C /tmp/openmpi --strip-components=1 \
    && cd /tmp/openmpi \
    && ./configure --prefix=/opt/openmpi --with-cuda=/opt/cuda \
        --with-cuda-libdir=/opt/cuda/lib64/stubs --disable-mpi-fortran --disable-oshmem \
        --disable-io-romio > /tmp/configure.log \
    && make -j"$(nproc)" install > /tmp/make.log \
    && cd / && rm -rf /tmp/openmpi /tmp/openmpi.tar
# Session directories, and the shared-memory pools in them (CUDA's: 128 MB), in /dev/shm: apptainer
# gives a container's /tmp 64 MiB (sessiondir max size), too small for them. A file, not the
# environment: a sandbox gets the session's environment only.
RUN echo 'prte_tmpdir_base = /dev/shm' >> /opt/openmpi/etc/prte-mca-params.conf
# Built with CUDA support, its CUDA components loadable modules (not in libmpi, which must load
# on nodes without a driver).
RUN /opt/openmpi/bin/ompi_info --parsable --all | grep built_with_cuda_support:value \
    && /opt/openmpi/bin/ompi_info --parsable --all | grep -q 'built_with_cuda_support:value:true' \
    && ls /opt/openmpi/lib/openmpi/mca_accelerator_cuda.so \
    && ! ldd /opt/openmpi/lib/libmpi.so | grep -q libcuda

FROM debian:bookworm-slim
LABEL org.opencontainers.image.title="paragrade runner (gpu)" \
      io.paragrade.role="runner" \
      io.paragrade.queues="gpu" \
      io.paragrade.protocol="10" \
      io.paragrade.runtime="/opt/paragrade/runtime" \
      io.paragrade.mpi="openmpi (CUDA-aware)"
COPY --from=mpi /opt/openmpi /opt/openmpi
# No CUDA_HOME: numba-cuda finds libnvvm in its wheels (PARAGRADE_GPU_ENV passes the variables
# the runner has into GPU sandboxes; LD_LIBRARY_PATH finds Open MPI).
ENV PATH=/opt/openmpi/bin:$PATH LD_LIBRARY_PATH=/opt/openmpi/lib \
    MPI_PREFIX=/opt/openmpi SRC=/src NVIDIA_VISIBLE_DEVICES=all
# The phases of runner-cpu.Dockerfile, slowest first.
COPY containers/install.sh /src/containers/install.sh
RUN /src/containers/install.sh system gpu
COPY pyproject.toml /src/pyproject.toml
RUN /src/containers/install.sh app-deps gpu
# torch: the CPU build by default (what the CPU runner has); TORCH=cuda installs PyPI's CUDA build
# instead (several GB more; install.sh says why it is not the default).
ARG TORCH=cpu
COPY runners/runtime-requirements.txt runners/runtime-lock.txt runners/runtime-requirements-gpu.txt /src/runners/
RUN /src/containers/install.sh runtime gpu
COPY . /src
RUN /src/containers/install.sh app gpu
ENV PARAGRADE_RUNTIME_DIR=/opt/paragrade/runtime PARAGRADE_ASSIGNMENTS_DIR=/src/assignments
ENTRYPOINT ["paragrade"]
CMD ["runner", "--queues", "gpu", "--backend", "docker"]
