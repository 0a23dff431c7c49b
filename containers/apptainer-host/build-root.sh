#!/usr/bin/env bash
# Builds (once) a root file system holding Debian's apptainer, for hosts whose own release has no
# apptainer package (Debian 12: the unstable suite's 1.4.x needs a newer libc than bookworm's).
# `containers/apptainer-host/apptainer` runs apptainer from it. Prints the folder on stdout.
#
# The folder is a hash of this script: re-running is a no-op that prints the path; a change here
# builds a new one beside it. It lives outside any checkout (a fresh clone reuses it).
#   mmdebstrap --variant=minbase sid, with apptainer, squashfs-tools and squashfuse (and fuse3:
#   the SIF of an image is then mounted, not extracted at every run), plus an empty `mnt` folder
#   where each run mounts its private writable layer.
#
# Usage: containers/apptainer-host/build-root.sh [--path]   --path: print the folder, build nothing
# Env:   PARAGRADE_APPTAINER_CACHE (default /var/cache/paragrade/apptainer)
#        PARAGRADE_DEBIAN_MIRROR (default: the first Debian mirror in apt's sources)
# Exit 2: a prerequisite is missing (not root, no mmdebstrap, no mirror answers).
set -euo pipefail

CACHE=${PARAGRADE_APPTAINER_CACHE:-/var/cache/paragrade/apptainer}
KEY=$(sha256sum "${BASH_SOURCE[0]}" | cut -c1-12)
DEST="$CACHE/host-$KEY"
PACKAGES=apptainer,squashfs-tools,squashfuse,fuse3

log() { echo "apptainer-host: $*" >&2; }

if [ "${1:-}" = "--path" ] || [ -f "$DEST/.complete" ]; then
  echo "$DEST"
  exit 0
fi
[ "$(id -u)" = 0 ] || { log "building the apptainer root file system needs root"; exit 2; }
command -v mmdebstrap >/dev/null || { log "mmdebstrap is not installed (apt-get install mmdebstrap)"; exit 2; }

mirror=${PARAGRADE_DEBIAN_MIRROR:-}
if [ -z "$mirror" ]; then
  mirror=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources \
             2>/dev/null | grep -oE 'https?://[^ ]*/debian/?( |$)' | grep -v security | head -1 | tr -d ' ' || true)
fi
mirror=${mirror:-http://deb.debian.org/debian}

mkdir -p "$CACHE"
exec 9>"$CACHE/.lock"
flock 9
[ -f "$DEST/.complete" ] && { echo "$DEST"; exit 0; }

t0=$(date +%s)
rm -rf "$DEST"
mkdir -p "$DEST/mnt"
# The unstable suite's Release file is often past its Valid-Until on mirrors: accept it.
if ! mmdebstrap --quiet --variant=minbase --aptopt='Acquire::Check-Valid-Until "false"' \
    --include="$PACKAGES" sid "$DEST/root" "$mirror" >"$DEST/mmdebstrap.log" 2>&1; then
  log "mmdebstrap sid from $mirror failed (no network to the Debian mirror?):"
  tail -5 "$DEST/mmdebstrap.log" >&2
  rm -rf "$DEST"
  exit 2
fi
# pivot_root needs a mount point for the old root; apptainer copies /etc/hosts into every
# container, and minbase has none.
mkdir -p "$DEST/root/oldroot"
printf '127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n' >"$DEST/root/etc/hosts"
chmod 755 "$DEST" "$DEST/root"
touch "$DEST/.complete"
# Older builds are dead weight now (never one that a run may be using: only complete, other keys).
for old in "$CACHE"/host-*; do
  [ "$old" = "$DEST" ] || [ ! -f "$old/.complete" ] || rm -rf "$old"
done
log "built $DEST ($(chroot "$DEST/root" apptainer --version 2>/dev/null || echo apptainer)) in $(( $(date +%s) - t0 )) s"
echo "$DEST"
