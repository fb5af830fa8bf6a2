#!/bin/sh
# slurm.conf HealthCheckProgram: runs as root on every node (slurmd). `health --slurm`
# drains this node with rocewatch's reason when it is unfit for jobs and resumes it when it
# is fit again (only a drain rocewatch itself set). Its exit status is Slurm's to ignore.
exec /usr/bin/rocewatch health --slurm --config /etc/rocewatch/rocewatch.toml
