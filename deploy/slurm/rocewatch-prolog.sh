#!/bin/sh
# slurm.conf Prolog: runs as root on each node of a job before its first task. A non-zero
# exit makes Slurm requeue the job (and hold it, unless SchedulerParameters has
# nohold_on_prolog_fail) and drain the node; `health --slurm` drains it first, with the
# finding as the reason ("rocewatch: mlx5_1/1 ens1f1np1: port DOWN ..."), which Slurm
# keeps (it sets "Prolog error" only on a node not already drained).
/usr/bin/rocewatch health --slurm --config /etc/rocewatch/rocewatch.toml >/dev/null
case $? in
  0) exit 0 ;;
  1) exit 1 ;;              # unhealthy: the job does not start here
  *) logger -t rocewatch "prolog: health cannot tell on $(hostname): the job starts"
     exit 0 ;;              # cannot tell (a state not readable, a configuration that
                            # does not load): the job starts, said in syslog, rather than a
                            # configuration typo draining the fleet
esac
