#!/usr/bin/env bash
# One-time (idempotent) set-up on a fresh Debian machine: system packages, the project's venv,
# and the sandbox's Python runtime. Re-running is cheap: each step is skipped when its stamp matches.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
RUNTIME=${PARAGRADE_RUNTIME_DIR:-/opt/paragrade/runtime}
VENV=${PARAGRADE_VENV:-$ROOT/.venv}
SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"

need_apt=()
command -v bwrap >/dev/null || need_apt+=(bubblewrap)
[ -x /usr/bin/python3 ] || need_apt+=(python3)
/usr/bin/python3 -c 'import ensurepip' 2>/dev/null || need_apt+=(python3-venv)
command -v setpriv >/dev/null || need_apt+=(util-linux)
# The docker backend's tests drive podman's Docker API (crun fails on our hosts: runc); their
# image is built lazily by the tests (containers/build-test-image.sh), not here.
command -v podman >/dev/null || need_apt+=(podman runc)
# The compose stack in the images test reaches the host's PostgreSQL and Redis through slirp4netns.
command -v slirp4netns >/dev/null || need_apt+=(slirp4netns)
# The images test makes the images' Debian base from the package archive where no registry answers.
# The apptainer tests make with it a root file system holding Debian unstable's apptainer (this
# release has none; containers/apptainer-host), and their image from the podman-built runner image:
# both once, by the tests, cached in /var/cache/paragrade/apptainer.
command -v mmdebstrap >/dev/null || need_apt+=(mmdebstrap)
# docker-compose 1.29 validates docker-compose.yml without an engine; the queue's fault tests
# start a Redis of their own (the platform itself needs none: its default broker is embedded).
command -v docker-compose >/dev/null || need_apt+=(docker-compose)
command -v redis-server >/dev/null || need_apt+=(redis-server)
# The SLURM backend's tests start a private single-node cluster (tests/slurm_cluster.py).
command -v slurmd >/dev/null || need_apt+=(slurm-wlm)
command -v munged >/dev/null || need_apt+=(munge)
# Multi-node MPI: per-run network namespaces joined by VXLAN, each with an nftables firewall
# (runners/nodes/overlay.py); the tests stand two nodes up on this host.
command -v ip >/dev/null || need_apt+=(iproute2)
command -v nft >/dev/null || need_apt+=(nftables)
# The browser tests drive Debian's Chromium through Playwright (no browser download from a CDN).
[ -x /usr/bin/chromium ] || need_apt+=(chromium)
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "setup: installing Debian packages: ${need_apt[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}"
fi

stamp() { sha256sum "$@" | sha256sum | cut -c1-16; }

# The two environments below are built side by side (pip spends much of its time unpacking
# and compiling, one core each); each is skipped when its stamp matches.
jobs=()

# The project's own environment (trusted side: CLI, grader, server, tests).
want=$(stamp pyproject.toml)
if [ ! -f "$VENV/.paragrade-stamp" ] || [ "$(cat "$VENV/.paragrade-stamp")" != "$want" ]; then
  echo "setup: building $VENV"
  ( python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q --upgrade pip
    "$VENV/bin/pip" install -q -e ".[dev]"
    echo "$want" > "$VENV/.paragrade-stamp" ) &
  jobs+=($!)
fi

# The sandbox's runtime: Debian's Python (readable by the unprivileged sandbox user, unlike a
# pyenv under /root), world-readable, never writable by submissions.
# CPU nodes pin every package (runners/runtime-lock.txt, shared with the runner-cpu image); GPU
# nodes add the GPU set, whose NumPy bound the lock does not know.
reqs=(-r runners/runtime-requirements.txt)
if command -v nvidia-smi >/dev/null; then
  reqs+=(-r runners/runtime-requirements-gpu.txt)
else
  reqs+=(-c runners/runtime-lock.txt)
fi
want=$(stamp runners/runtime-requirements*.txt runners/runtime-lock.txt)
if [ ! -f "$RUNTIME/.paragrade-stamp" ] || [ "$(cat "$RUNTIME/.paragrade-stamp")" != "$want" ]; then
  echo "setup: building the sandbox runtime in $RUNTIME (numpy, numba, mpi4py+MPICH, torch CPU, pytest)"
  ( $SUDO mkdir -p "$RUNTIME"
    $SUDO /usr/bin/python3 -m venv "$RUNTIME"
    $SUDO "$RUNTIME/bin/pip" install -q --upgrade pip
    $SUDO "$RUNTIME/bin/pip" install -q "${reqs[@]}"
    $SUDO chmod -R a+rX "$RUNTIME"
    echo "$want" | $SUDO tee "$RUNTIME/.paragrade-stamp" >/dev/null ) &
  jobs+=($!)
fi
for job in "${jobs[@]}"; do
  wait "$job" || { echo "setup: building an environment failed (see pip's output above)" >&2; exit 1; }
done

# The guide: docs/ and mkdocs.yml built into site/ (for the server to serve), with the
# venv's MkDocs; skipped when none of its sources changed. A page that fails the strict build
# leaves the last good site in place and does not stop the start (tests/test_docs.py fails on it).
want=$(stamp mkdocs.yml $(find -L docs -type f | sort))
if [ ! -f site/.paragrade-stamp ] || [ "$(cat site/.paragrade-stamp)" != "$want" ]; then
  if [ ! -x "$VENV/bin/mkdocs" ]; then
    echo "setup: $VENV has no mkdocs (pip install -e '.[dev]'): the guide is not built" >&2
  elif out=$("$VENV/bin/mkdocs" build --quiet --site-dir "$ROOT/build/site.new" 2>&1); then
    rm -rf site && mv build/site.new site && echo "$want" > site/.paragrade-stamp
  else
    echo "setup: the guide did not build; site/ keeps the last one:" >&2
    echo "$out" >&2
    rm -rf build/site.new
  fi
fi
