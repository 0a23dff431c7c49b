#!/bin/sh
# SLURM Epilog for paragrade's multi-node MPI jobs (slurm.conf: Epilog=…/epilog.sh): removes the
# job's network namespace on this node (its overlay device and firewall go with it).
[ -r /etc/paragrade/slurm.env ] && . /etc/paragrade/slurm.env
exec "${PARAGRADE_PYTHON:-/opt/paragrade/venv/bin/python}" -m paragrade.cli node-network down
