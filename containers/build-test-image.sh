#!/usr/bin/env bash
# Builds (once) the small OCI image that the Docker backend's tests run sandboxes in, and prints
# its name on stdout. TEST IMAGE ONLY: the real runner images (CPU / CUDA, full runtime) are built
# elsewhere.
#
# No registry is reachable on our machines, so nothing is pulled: the root filesystem is assembled
# from this host's own Debian files and imported with `podman import`.
#   /usr/bin/python3.11, its standard library (no tests, tkinter, idle, build config) and exactly the
#   shared libraries that it, its extension modules and numpy link against (found with ldd);
#   /opt/paragrade/runtime: a venv (pyvenv.cfg, bin/python -> /usr/bin/python3.11) whose
#   site-packages holds numpy only, copied from the host's runtime (or, where that has none, from
#   /usr/bin/python3.11's own numpy);
#   /etc/passwd and /etc/group naming root and nobody (65534), /bin/sh (dash), and empty mount points
#   (/sub, /data, /opt/paragrade/harness, /run/paragrade, /tmp).
# About 110 MB; builds in a few seconds. The tag is a hash of this script, the Python binary and
# the numpy version, so a rebuild happens only when one of them changes; re-running is a no-op
# that just prints the name.
#
# Usage: containers/build-test-image.sh [--force]
# Env:   PARAGRADE_RUNTIME_DIR (default /opt/paragrade/runtime): where the image's venv lives (and
#        where the host's numpy is taken from); PARAGRADE_TEST_IMAGE_REPO (default
#        localhost/paragrade/test-runner); CONTAINERS_CONF is honoured when set.
set -euo pipefail

RUNTIME=${PARAGRADE_RUNTIME_DIR:-/opt/paragrade/runtime}
REPO=${PARAGRADE_TEST_IMAGE_REPO:-localhost/paragrade/test-runner}
PY=/usr/bin/python3.11
FORCE=0
[ "${1:-}" = "--force" ] && FORCE=1

log() { echo "build-test-image: $*" >&2; }

command -v podman >/dev/null || { log "podman is not installed (apt-get install podman runc)"; exit 2; }
[ -x "$PY" ] || { log "$PY is missing (apt-get install python3)"; exit 2; }

# Where numpy comes from: the host runtime's site-packages, else any Python 3.11 that has it.
SITE="$RUNTIME/lib/python3.11/site-packages"
if [ ! -d "$SITE/numpy" ]; then
  SITE=$("$PY" -c 'import numpy, os; print(os.path.dirname(os.path.dirname(numpy.__file__)))' \
         2>/dev/null || true)
fi
[ -n "$SITE" ] && [ -d "$SITE/numpy" ] || { log "no numpy for python3.11 found (run scripts/setup.sh)"; exit 2; }
NUMPY_DIST=$(cd "$SITE" && ls -d numpy-*.dist-info | head -1)

TAG=$( { cat "${BASH_SOURCE[0]}" "$PY" | sha256sum; echo "$RUNTIME $NUMPY_DIST"; } | sha256sum | cut -c1-12)
IMAGE="$REPO:$TAG"

if [ "$FORCE" = 0 ] && podman image exists "$IMAGE"; then
  echo "$IMAGE"
  exit 0
fi
# Two test runs starting at once: one builds, the other waits and then finds the image.
exec 9>"${TMPDIR:-/tmp}/paragrade-test-image.lock"
flock 9
if [ "$FORCE" = 0 ] && podman image exists "$IMAGE"; then
  echo "$IMAGE"
  exit 0
fi

t0=$(date +%s.%N)
WORK=$(mktemp -d /tmp/paragrade-image.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
R="$WORK/rootfs"
mkdir -p "$R"/usr/{bin,lib/x86_64-linux-gnu,lib64} "$R"/{etc,dev,proc,sys,tmp,run,sub,data,root}
ln -s usr/bin "$R/bin"; ln -s usr/lib "$R/lib"; ln -s usr/lib64 "$R/lib64"; ln -s usr/bin "$R/sbin"
chmod 1777 "$R/tmp"; chmod 700 "$R/root"

# Python and its standard library.
cp -a "$PY" "$R/usr/bin/"
ln -s python3.11 "$R/usr/bin/python3"
cp -a /usr/bin/dash "$R/usr/bin/"; ln -s dash "$R/usr/bin/sh"
tar -C /usr/lib -c \
  --exclude='python3.11/test' --exclude='python3.11/idlelib' --exclude='python3.11/tkinter' \
  --exclude='python3.11/turtledemo' --exclude='python3.11/lib2to3' --exclude='python3.11/ensurepip' \
  --exclude='python3.11/config-3.11-*' --exclude='python3.11/dist-packages' \
  --exclude='python3.11/lib-dynload/_test*' --exclude='python3.11/lib-dynload/xx*' \
  --exclude='python3.11/lib-dynload/_tkinter*' python3.11 | tar -C "$R/usr/lib" -x

# The venv at the runtime path, with numpy only.
V="$R$RUNTIME"
mkdir -p "$V/bin" "$V/lib/python3.11/site-packages" "$R/opt/paragrade/harness" "$R/run/paragrade"
ln -s lib "$V/lib64"
ln -s /usr/bin/python3.11 "$V/bin/python"
ln -s python "$V/bin/python3"; ln -s python "$V/bin/python3.11"
printf 'home = /usr/bin\ninclude-system-site-packages = false\nversion = %s\nexecutable = %s\n' \
  "$("$PY" -c 'import platform; print(platform.python_version())')" "$PY" > "$V/pyvenv.cfg"
cp -a "$SITE/numpy" "$SITE/$NUMPY_DIST" "$V/lib/python3.11/site-packages/"
[ -d "$SITE/numpy.libs" ] && cp -a "$SITE/numpy.libs" "$V/lib/python3.11/site-packages/"
find "$V" -name tests -type d -prune -exec rm -rf {} +

# Every shared library that python, its extension modules and numpy's need, at the same path.
{ echo "$PY"; echo /usr/bin/dash
  find "$R/usr/lib/python3.11/lib-dynload" "$V" -name '*.so*' -type f; } |
  xargs -r ldd 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// && $1 !~ /:$/ {print $1}' |
  sort -u | while read -r lib; do
    case "$lib" in "$R"*) continue ;; esac  # numpy.libs: already in place (found via RPATH)
    real=$(readlink -f "$lib")
    dest="$R$(dirname "$lib")"
    mkdir -p "$dest"
    [ -e "$dest/$(basename "$lib")" ] || cp -L "$real" "$dest/$(basename "$lib")"
  done

printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n' \
  > "$R/etc/passwd"
printf 'root:x:0:\nnogroup:x:65534:\n' > "$R/etc/group"
touch "$R/etc/hosts" "$R/etc/resolv.conf" "$R/etc/hostname"
chmod -R a+rX "$R"

# Fail here, not in a test, when the tree is not self-contained (chroot needs root).
if [ "$(id -u)" = 0 ] && ! chroot "$R" "$RUNTIME/bin/python" -I -c 'import numpy, json, socket, struct, base64' 2>"$WORK/err"; then
  log "the assembled root filesystem cannot run python with numpy:"; cat "$WORK/err" >&2; exit 1
fi

tar --numeric-owner --owner=0 --group=0 -C "$R" -cf "$WORK/rootfs.tar" .
podman import --quiet \
  --change "ENV PATH=$RUNTIME/bin:/usr/bin:/bin" --change 'WORKDIR /' \
  --message "paragrade test image (python3.11 + numpy)" "$WORK/rootfs.tar" "$IMAGE" >/dev/null
# Older builds of this image are dead weight now.
podman images --format '{{.Repository}}:{{.Tag}}' | grep "^$REPO:" | grep -vx "$IMAGE" |
  xargs -r podman rmi --force >/dev/null 2>&1 || true

size=$(du -sh "$WORK/rootfs.tar" | cut -f1)
log "built $IMAGE ($size tar) in $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}') s"
echo "$IMAGE"
