#!/bin/bash
# MPICH hydra's remote launcher for scripts/sim_hosts.sh: hydra calls it as it would call ssh,
#   sim_hosts_launch.sh [ssh options] HOST COMMAND...
# and it runs COMMAND (a shell command line, as ssh would) in HOST's network namespace (HOST
# is the namespace's name) under a UTS namespace whose host name is HOST, and a mount namespace
# in which HOST's boot id (from $SIM_HOSTS_BOOT_IDS, written by sim_hosts.sh) replaces the
# machine's, so that UCX treats the hosts as different machines.
while [[ "${1:-}" == -* ]]; do shift; done
host="${1:?sim_hosts_launch.sh: no host given}"
shift
exec ip netns exec "$host" unshare --uts --mount /bin/sh -c \
  'mount --bind "$SIM_HOSTS_BOOT_IDS/$0" /proc/sys/kernel/random/boot_id && hostname "$0" && exec /bin/sh -c "$1"' \
  "$host" "$*"
