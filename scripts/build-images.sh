#!/usr/bin/env bash
# Build the deployment images from containers/*.Dockerfile with podman or docker (whichever is
# present; PARAGRADE_ENGINE=podman|docker chooses):
#   paragrade/server:latest      paragrade/runner-cpu:latest      paragrade/runner-gpu:latest
# Where the Dockerfiles' base (debian:bookworm-slim) is neither present nor pullable (no registry
# answers), it is made locally from Debian's package archive with mmdebstrap (minbase, as the
# official slim image) and tagged with the name the Dockerfiles expect; the script says so.
# With podman, the host's pip cache, local wheel folder (pip's find-links, e.g. the PyTorch CPU
# wheel where download.pytorch.org does not answer) and the CA bundle pip trusts are mounted into
# the build, never into a layer (containers/install.sh says how each is used).
#
# Usage: scripts/build-images.sh [IMAGE ...]     IMAGE: server, runner-cpu (default: both), runner-gpu
#        (CUDA's user space from PyPI wheels, Open MPI compiled with CUDA: ≈ 20 min the first time)
#        scripts/build-images.sh --describe        what the built images hold (Markdown)
# Env:   PARAGRADE_BUILD_IDLE=1  build at the lowest priority, on cores others leave idle (the test
#        suite builds in its own background so): nice 19 and idle-class I/O for this script and
#        what it starts, and with podman its RUN steps' containers at CPU weight 2 (a container's
#        own cgroup would otherwise weigh as much as any busy process, nice or not).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${PARAGRADE_BUILD_IDLE:-}" = 1 ]; then
  renice -n 19 -p $$ >/dev/null
  ionice -c 3 -p $$ 2>/dev/null || true
fi
BASE=docker.io/library/debian:bookworm-slim
SUITE=bookworm

log() { echo "build-images: $*" >&2; }

ENGINE=${PARAGRADE_ENGINE:-}
if [ -z "$ENGINE" ]; then
  if command -v podman >/dev/null; then ENGINE=podman
  elif command -v docker >/dev/null; then ENGINE=docker
  else log "neither podman nor docker is installed (apt-get install podman runc)"; exit 2
  fi
fi
if [ "$ENGINE" = podman ] && [ -z "${CONTAINERS_CONF:-}" ]; then
  export CONTAINERS_CONF=$PWD/containers/podman.conf
fi

describe() {
  local image
  echo "| image | size | Python | packages |"
  echo "|---|---|---|---|"
  for image in paragrade/server paragrade/runner-cpu paragrade/runner-gpu; do
    "$ENGINE" image inspect "$image:latest" >/dev/null 2>&1 || continue
    local size py pkgs
    size=$("$ENGINE" image inspect --format '{{.Size}}' "$image:latest" |
           awk '{printf "%.0f MB", $1 / 1e6}')
    py=$("$ENGINE" run --rm --no-healthcheck --entrypoint /opt/paragrade/app/bin/python "$image:latest" -V 2>/dev/null)
    pkgs=$("$ENGINE" run --rm --no-healthcheck --entrypoint sh "$image:latest" -c '
      for venv in /opt/paragrade/runtime /opt/paragrade/app; do
        [ -x $venv/bin/python ] || continue
        printf "%s (%s): " $venv "$(du -sh $venv | cut -f1)"
        $venv/bin/python -m pip list --format=freeze 2>/dev/null | grep -i -E \
          "^(numpy|numba|torch|mpi4py|mpich|dask|scikit-learn|ray|pytest|fastapi|sqlalchemy|celery|psycopg)==" |
          tr "\n" " "; echo; done' 2>/dev/null | sed 's/ *$//' | paste -sd ';' | sed 's/;/<br>/g')
    echo "| \`$image\` | $size | $py | $pkgs |"
  done
}

if [ "${1:-}" = "--describe" ]; then describe; exit 0; fi

IMAGES=("$@")
[ ${#IMAGES[@]} -gt 0 ] || IMAGES=(server runner-cpu)
for name in "${IMAGES[@]}"; do
  [ -f "containers/$name.Dockerfile" ] || { log "no containers/$name.Dockerfile"; exit 2; }
done

# The base: present, else pulled, else made from Debian's archive.
if ! "$ENGINE" image inspect "$BASE" >/dev/null 2>&1 && ! "$ENGINE" pull -q "$BASE" >/dev/null 2>&1; then
  log "$BASE cannot be pulled (no registry answers): making it with mmdebstrap from Debian's archive"
  if ! command -v mmdebstrap >/dev/null; then
    SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
    $SUDO apt-get install -y -qq mmdebstrap >/dev/null
  fi
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  # minbase without documentation, as Debian's slim images (debuerreotype's slimification).
  mmdebstrap --quiet --variant=minbase \
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
    --dpkgopt='path-include=/usr/share/doc/*/copyright' --dpkgopt='path-exclude=/usr/share/info/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' \
    "$SUITE" "$tmp/base.tar"
  "$ENGINE" import --change 'CMD ["bash"]' "$tmp/base.tar" "$BASE" >/dev/null
  log "made $BASE locally ($(du -h "$tmp/base.tar" | cut -f1) tar)"
fi

args=()
if [ "$ENGINE" = podman ]; then
  cache=$(python3 -m pip cache dir 2>/dev/null || true)
  args+=(--format docker)  # keeps HEALTHCHECK (the OCI format has none)
  [ "${PARAGRADE_BUILD_IDLE:-}" != 1 ] || args+=(--cpu-shares 2)
  [ -n "$cache" ] && mkdir -p "$cache" && args+=(--volume "$cache:/root/.cache/pip")
  wheels=${PARAGRADE_WHEELS:-$(python3 -m pip config get global.find-links 2>/dev/null || true)}
  wheels=${wheels:-${PIP_FIND_LINKS:-}}
  [ -n "$wheels" ] && [ -d "$wheels" ] && args+=(--volume "$wheels:/wheels:ro")
  cert=${PIP_CERT:-$(python3 -m pip config get global.cert 2>/dev/null || true)}
  [ -n "$cert" ] && [ -f "$cert" ] && args+=(--volume "$cert:/run/build-ca.crt:ro")
fi

rev=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
for name in "${IMAGES[@]}"; do
  t0=$(date +%s.%N)
  log "building paragrade/$name with $ENGINE"
  "$ENGINE" build "${args[@]}" --label "org.opencontainers.image.revision=$rev" \
    -f "containers/$name.Dockerfile" -t "paragrade/$name:latest" . >&2
  log "paragrade/$name built in $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.0f", b-a}') s"
done
