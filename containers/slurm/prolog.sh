#!/bin/sh
# SLURM Prolog for paragrade's multi-node MPI jobs (slurm.conf: Prolog=…/prolog.sh and
# PrologFlags=Alloc, so that it runs on every node of an allocation when it starts).
#
# Runs as root: makes the job's network namespace on this node and its end of the job's VXLAN
# overlay (runners/nodes/overlay.py), which only root can do. Jobs on one node get nothing. A failure
# here drains the node (SLURM's rule), so it only fails where the node cannot serve such a job.
#
# PARAGRADE_PYTHON: the Python with paragrade installed on the node (site-wide, e.g. in
# /etc/paragrade/slurm.env, which this script reads when it exists).
[ -r /etc/paragrade/slurm.env ] && . /etc/paragrade/slurm.env
exec "${PARAGRADE_PYTHON:-/opt/paragrade/venv/bin/python}" -m paragrade.cli node-network up
