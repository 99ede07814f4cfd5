#!/bin/bash
# Simulated hosts on one machine: runs an MPI program on N hosts made of Linux network
# namespaces, as if on N machines.
#
#   scripts/sim_hosts.sh [--hosts N] [--ranks-per-host K] [--rate 1gbit] [--delay 100us]
#                        [--state-file FILE] -- PROGRAM [ARGS...]
#
# Each host is a network namespace with its own address (10.77.0.<i+1>/24 on eth0, a veth
# pair to a bridge in a switch namespace) and its own host name (a UTS namespace per process,
# so MPI_Get_processor_name differs per host and tandem's intra/inter ranks see N hosts).
# MPICH's mpiexec runs on host 0; it starts host i's ranks inside host i's namespaces through
# scripts/sim_hosts_launch.sh (hydra's ssh launcher, pointed at that script), and they connect
# over the simulated network. Each host also has its own boot id (a file bind-mounted over
# /proc/sys/kernel/random/boot_id in a mount namespace per process): UCX, under MPICH, decides
# by the boot id whether a peer shares its machine, so within a host it uses shared memory, as
# on a real machine, and between hosts TCP on eth0 (UCX_NET_DEVICES=eth0), so that no byte
# between hosts bypasses the simulated network.
#   --rate R    each host's link sends at most R (tc tbf on eth0): "1gbit", "100mbit".
#   --delay D   one-way delay on each host's link (tc netem, where the kernel has it; an error
#               naming the missing qdisc where it has not).
#   --state-file F  written once the hosts are up: "prefix=<P>" and one "host<i>=<namespace>"
#               line per host (a test that kills a host reads it).
# PROGRAM sees SIM_HOSTS_PREFIX, SIM_HOSTS_PER_HOST and the usual MPI environment. Exit status: mpiexec's; 77
# (with the reason on stderr) where network namespaces cannot be made here (not root, or a
# sandbox without CAP_SYS_ADMIN).
#
# Everything it makes is removed when it exits, also on failure, SIGINT or SIGTERM: every
# process in the hosts' namespaces (those still there 2 s after mpiexec exited are named on
# stderr as "processes left behind"), the namespaces (and with them the veth pairs and the
# bridge). A run killed with SIGKILL leaves them behind; the next run removes those of any
# sim_hosts.sh that is no longer running (they are named after its process id).
set -u

hosts=2
per_host=2
rate=""
delay=""
state_file=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --hosts) hosts="$2"; shift 2 ;;
    --ranks-per-host) per_host="$2"; shift 2 ;;
    --rate) rate="$2"; shift 2 ;;
    --delay) delay="$2"; shift 2 ;;
    --state-file) state_file="$2"; shift 2 ;;
    --) shift; break ;;
    *) echo "sim_hosts.sh: unknown option '$1' (see the top of $0)" >&2; exit 2 ;;
  esac
done
if [[ $# -eq 0 ]]; then echo "sim_hosts.sh: no program given (sim_hosts.sh [options] -- PROGRAM ARGS)" >&2; exit 2; fi
if ! [[ "$hosts" =~ ^[0-9]+$ && "$hosts" -ge 1 && "$hosts" -le 200 ]]; then
  echo "sim_hosts.sh: --hosts must be 1 to 200, not '$hosts'" >&2; exit 2
fi
if ! [[ "$per_host" =~ ^[0-9]+$ && "$per_host" -ge 1 ]]; then
  echo "sim_hosts.sh: --ranks-per-host must be a positive integer, not '$per_host'" >&2; exit 2
fi

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
launcher="$here/sim_hosts_launch.sh"
mpiexec="${MPIEXEC:-/usr/bin/mpiexec.mpich}"
# Names: tds<pid>sw (the switch), tds<pid>h<i> (host i); veth ends tds<pid>h<i>a/b (<= 15 chars).
prefix="tds$$"

remove_namespace() {  # kills every process in it, then deletes it (and the links inside)
  local ns="$1" pids
  pids="$(ip netns pids "$ns" 2>/dev/null)"
  if [[ -n "$pids" ]]; then
    kill -KILL $pids 2>/dev/null
    for _ in 1 2 3 4 5 6 7 8 9 10; do
      [[ -z "$(ip netns pids "$ns" 2>/dev/null)" ]] && break
      sleep 0.1
    done
  fi
  ip netns del "$ns" 2>/dev/null
}

# Leftovers of runs that were killed outright.
for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E '^tds[0-9]+(sw|h[0-9]+)$'); do
  owner="${ns#tds}"; owner="${owner%%[sh]*}"
  if ! kill -0 "$owner" 2>/dev/null; then remove_namespace "$ns"; fi
done

namespace_pids() {  # every process in the hosts' namespaces
  for ((i = 0; i < hosts; ++i)); do ip netns pids "${prefix}h$i" 2>/dev/null; done
}

cleanup() {
  trap - EXIT INT TERM HUP
  if [[ -n "${mpiexec_pid:-}" ]]; then
    kill -TERM "$mpiexec_pid" 2>/dev/null
  elif [[ -n "${mpiexec_done:-}" ]]; then
    # mpiexec has exited: its processes on every host should follow within moments (as on real
    # hosts, where nobody would clean up after them). Those that do not are reported.
    for _ in $(seq 20); do [[ -z "$(namespace_pids)" ]] && break; sleep 0.1; done
    left="$(namespace_pids)"
    if [[ -n "$left" ]]; then
      echo "sim_hosts.sh: processes left behind 2 s after mpiexec exited (now killed):" >&2
      ps -o pid,args -p $left >&2
    fi
  fi
  for ((i = 0; i < hosts; ++i)); do remove_namespace "${prefix}h$i"; done
  remove_namespace "${prefix}sw"
}
trap cleanup EXIT
trap 'exit 143' TERM
trap 'exit 130' INT
trap 'exit 129' HUP

if ! ip netns add "${prefix}sw" 2>/tmp/sim_hosts.$$.err; then
  echo "sim_hosts.sh: cannot make network namespaces here ($(cat /tmp/sim_hosts.$$.err); needs root with CAP_SYS_ADMIN and CAP_NET_ADMIN)" >&2
  rm -f /tmp/sim_hosts.$$.err
  exit 77
fi
rm -f /tmp/sim_hosts.$$.err

fail() { echo "sim_hosts.sh: $*" >&2; exit 1; }
ip -n "${prefix}sw" link add br0 type bridge || fail "cannot make the bridge"
ip -n "${prefix}sw" link set br0 up || fail "cannot bring the bridge up"
for ((i = 0; i < hosts; ++i)); do
  ns="${prefix}h$i"
  ip netns add "$ns" || fail "cannot make namespace $ns"
  ip -n "$ns" link add "${ns}a" type veth peer name "${ns}b" netns "${prefix}sw" || fail "cannot make the veth pair of $ns"
  ip -n "$ns" link set "${ns}a" name eth0 || fail "cannot name $ns's link eth0"
  ip -n "$ns" addr add "10.77.0.$((i + 1))/24" dev eth0 || fail "cannot give $ns its address"
  ip -n "$ns" link set eth0 up && ip -n "$ns" link set lo up || fail "cannot bring $ns's links up"
  ip -n "${prefix}sw" link set "${ns}b" master br0 up || fail "cannot attach $ns to the bridge"
  if [[ -n "$delay" ]]; then
    ip netns exec "$ns" tc qdisc add dev eth0 root netem delay "$delay" ${rate:+rate "$rate"} limit 100000 2>/dev/null ||
      fail "--delay $delay: this kernel has no netem qdisc (sch_netem) to delay packets with; --rate alone works (tc tbf)"
  elif [[ -n "$rate" ]]; then
    # burst: a few TCP segments at once; latency: how long a packet may queue before it is
    # dropped (generous, so that TCP sees a slow link rather than a lossy one).
    ip netns exec "$ns" tc qdisc add dev eth0 root tbf rate "$rate" burst 1mb latency 100ms ||
      fail "--rate $rate: tc tbf refused it"
  fi
done

hostfile="$(mktemp)"
for ((i = 0; i < hosts; ++i)); do echo "${prefix}h$i:$per_host"; done > "$hostfile"
if [[ -n "$state_file" ]]; then
  { echo "prefix=$prefix"; for ((i = 0; i < hosts; ++i)); do echo "host$i=${prefix}h$i"; done; } > "$state_file"
fi

export SIM_HOSTS_PREFIX="$prefix" SIM_HOSTS_PER_HOST="$per_host"
# A hang of MPI_Finalize over TCP (comm/transport/mpi_env.cc) costs this much, not 10 s.
export TANDEM_FINALIZE_GRACE="${TANDEM_FINALIZE_GRACE:-3}"
export UCX_NET_DEVICES="${UCX_NET_DEVICES:-eth0}"
# One boot id per host (see the top); the launcher finds them here.
SIM_HOSTS_BOOT_IDS="$(mktemp -d)"
export SIM_HOSTS_BOOT_IDS
for ((i = 0; i < hosts; ++i)); do cat /proc/sys/kernel/random/uuid > "$SIM_HOSTS_BOOT_IDS/${prefix}h$i"; done
ip netns exec "${prefix}h0" unshare --uts --mount /bin/sh -c \
  'mount --bind "$SIM_HOSTS_BOOT_IDS/$0" /proc/sys/kernel/random/boot_id && hostname "$0" && exec "$@"' "${prefix}h0" \
  "$mpiexec" -iface eth0 -launcher ssh -launcher-exec "$launcher" -f "$hostfile" -n "$((hosts * per_host))" \
  "$@" &
mpiexec_pid=$!
wait "$mpiexec_pid"
status=$?
mpiexec_pid=""
mpiexec_done=1
rm -rf "$hostfile" "$SIM_HOSTS_BOOT_IDS"
exit "$status"
