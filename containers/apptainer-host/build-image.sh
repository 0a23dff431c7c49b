#!/usr/bin/env bash
# Builds (once) the CPU/MPI runner's apptainer image from the runner-cpu OCI image (the same
# recipe as the Docker runner: containers/runner-cpu.Dockerfile, built by scripts/build-images.sh
# with podman), as a sandbox folder, and prints that folder on stdout: the value of
# PARAGRADE_APPTAINER_IMAGE. --sif also makes runner-cpu.sif beside it (to measure, or to copy
# to nodes; while it builds the folder belongs to the sandbox user: not while grading).
#
# A sandbox folder, not a SIF, by default: without a setuid install or a usable squashfuse, every
# run of a SIF first extracts the whole image (2.5 GB here) to a temporary folder.
#
# The folder's name is a hash of what the sandbox's side of the image is made from (the
# Dockerfile, install.sh, the runtime's requirements and lock, this script, the apptainer root
# file system): a source change elsewhere reuses it, so a fresh clone of the
# repository grades at once. It lives outside any checkout, owned by root, read-only to the
# sandbox user. Runs apptainer through containers/apptainer-host/apptainer, or the binary named
# by PARAGRADE_APPTAINER_BIN.
#
# Usage: containers/apptainer-host/build-image.sh [--sif] [--path]
# Env:   PARAGRADE_APPTAINER_CACHE (default /var/cache/paragrade/apptainer)
# Exit 2: a prerequisite is missing (not root, no podman, no apptainer root file system).
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
CACHE=${PARAGRADE_APPTAINER_CACHE:-/var/cache/paragrade/apptainer}
BIN=${PARAGRADE_APPTAINER_BIN:-$HERE/apptainer}
SIF=0 PATH_ONLY=0
for arg in "$@"; do
  case "$arg" in
    --sif) SIF=1 ;;
    --path) PATH_ONLY=1 ;;
    *) echo "usage: $0 [--sif] [--path]" >&2; exit 64 ;;
  esac
done

log() { echo "apptainer-image: $*" >&2; }
# paragrade's wrapper binds the host paths a build writes to into its root file system.
wrap=()
head -c 512 "$BIN" 2>/dev/null | grep -q paragrade-apptainer-host && wrap=(--host-path "$CACHE")

root=$("$HERE/build-root.sh" --path)
KEY=$( { cd "$REPO" && cat containers/runner-cpu.Dockerfile containers/install.sh \
           runners/runtime-requirements*.txt runners/runtime-lock.txt "$HERE/build-image.sh";
         echo "$root"; } | sha256sum | cut -c1-12)
DEST="$CACHE/runner-cpu-$KEY"
done_already() { [ -f "$DEST/.complete" ] && { [ "$SIF" = 0 ] || [ -f "$DEST/runner-cpu.sif" ]; }; }

if [ "$PATH_ONLY" = 1 ] || done_already; then
  echo "$DEST/sandbox"
  exit 0
fi
[ "$(id -u)" = 0 ] || { log "building the image needs root"; exit 2; }
"$HERE/build-root.sh" >/dev/null || exit 2
command -v podman >/dev/null || { log "podman is not installed (apt-get install podman runc)"; exit 2; }
export CONTAINERS_CONF=${CONTAINERS_CONF:-$REPO/containers/podman.conf}

mkdir -p "$CACHE"
exec 9>"$CACHE/.image.lock"
flock 9
done_already && { echo "$DEST/sandbox"; exit 0; }

t0=$(date +%s)
# Reuses every cached layer: seconds where the runner image was built before, minutes from nothing.
if ! (cd "$REPO" && bash scripts/build-images.sh runner-cpu) >&2; then
  log "scripts/build-images.sh runner-cpu failed"; exit 1
fi
if [ ! -f "$DEST/.complete" ]; then
  rm -rf "$DEST"
  mkdir -p "$DEST/out"
  chmod 755 "$DEST"
  # apptainer runs as the sandbox user: the archive readable, the destination its own until done.
  podman save --quiet --format oci-archive -o "$DEST/runner-cpu.tar" localhost/paragrade/runner-cpu:latest
  chmod 644 "$DEST/runner-cpu.tar"
  mkdir "$DEST/out/tmp"
  chown -R 65534:65534 "$DEST/out"
  APPTAINER_TMPDIR="$DEST/out/tmp" "$BIN" "${wrap[@]}" --quiet build --sandbox "$DEST/out/sandbox" \
    "oci-archive://$DEST/runner-cpu.tar" 2>&1 | grep -v 'warn rootless' >&2 || true
  rm -f "$DEST/runner-cpu.tar"
  [ -x "$DEST/out/sandbox/opt/paragrade/runtime/bin/python" ] || { log "apptainer build failed"; exit 1; }
  # A sandbox sees the system and the runtime only. The runner's source and venv hold every
  # assignment's hidden tests; shadow files and /home are nobody's business in a grading.
  (cd "$DEST/out/sandbox" && rm -rf src opt/paragrade/app etc/shadow etc/gshadow home root/* &&
   mkdir -m 700 -p root)
  # The image's environment is the runner's (PARAGRADE_* settings): a run gets the session's.
  printf '#!/bin/sh\nexport PATH="/usr/local/bin:/usr/bin:/bin"\n' \
    >"$DEST/out/sandbox/.singularity.d/env/10-docker2singularity.sh"
  mv "$DEST/out/sandbox" "$DEST/sandbox"
  chown -R 0:0 "$DEST/sandbox"
  touch "$DEST/.complete"
fi
if [ "$SIF" = 1 ] && [ ! -f "$DEST/runner-cpu.sif" ]; then
  # mksquashfs reads every file, as the sandbox user: the folder is its own meanwhile.
  mkdir -p "$DEST/out/tmp"
  chown -R 65534:65534 "$DEST/out" "$DEST/sandbox"
  APPTAINER_TMPDIR="$DEST/out/tmp" "$BIN" "${wrap[@]}" --quiet build "$DEST/out/runner-cpu.sif" \
    "$DEST/sandbox" >&2 || true
  chown -R 0:0 "$DEST/sandbox"
  [ -f "$DEST/out/runner-cpu.sif" ] || { log "apptainer build of the SIF failed"; exit 1; }
  mv "$DEST/out/runner-cpu.sif" "$DEST/runner-cpu.sif"
  chown 0:0 "$DEST/runner-cpu.sif"
fi
rm -rf "$DEST/out/tmp"
rmdir "$DEST/out" 2>/dev/null || true
for old in "$CACHE"/runner-cpu-*; do
  [ "$old" = "$DEST" ] || [ ! -f "$old/.complete" ] || rm -rf "$old"
done
log "built $DEST in $(( $(date +%s) - t0 )) s"
echo "$DEST/sandbox"
