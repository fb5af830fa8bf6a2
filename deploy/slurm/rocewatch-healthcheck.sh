#!/bin/sh
# slurm.conf HealthCheckProgram: runs as root on every node (slurmd). `health --slurm`
# drains this node with rocewatch's reason when it is unfit for jobs and resumes it when it
# is fit again (only a drain rocewatch itself set). Its exit status is Slurm's to ignore.
# The packages' state directory is the agent's user's: health changes the quarantine there
# as that user, and drains an unhealthy node even when it cannot.
# slurmd gives it only SLURMD_NODENAME (no SLURM_CONF): scontrol reads
# /etc/slurm/slurm.conf; export SLURM_CONF here if yours is elsewhere.
exec /usr/bin/rocewatch health --slurm --config /etc/rocewatch/rocewatch.toml
