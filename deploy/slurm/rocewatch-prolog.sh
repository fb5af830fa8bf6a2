#!/bin/sh
# slurm.conf Prolog: runs as root on each node of a job before its first task. A non-zero
# exit makes Slurm requeue the job and drain the node; `health --slurm` drains it first,
# with the finding as the reason ("rocewatch: mlx5_1/1 ens1f1np1: port DOWN ...").
/usr/bin/rocewatch health --slurm --config /etc/rocewatch/rocewatch.toml >/dev/null
case $? in
  0) exit 0 ;;
  1) exit 1 ;;              # unhealthy: the job does not start here
  *) exit 0 ;;              # cannot tell: let the job start; the health check says why
esac
