#!/usr/bin/env bash
# Two "hosts" on one machine for testing what crosses a network (tensor parallelism over TCP): network
# namespaces NAME-a (10.77.X.1) and NAME-b (10.77.X.2) joined by a veth pair; nothing leaves the machine.
#   scripts/netns_hosts.sh up NAME X     create (X: 0-255, the subnet's third byte)
#   scripts/netns_hosts.sh down NAME     remove
# mpirun starts its remote ranks through scripts/netns_rsh.sh (--mca plm_rsh_agent), which enters the
# namespace that holds the host's address. Needs root (CAP_NET_ADMIN) and iproute2.
set -euo pipefail
cmd=$1 name=$2
case "$cmd" in
  up)
    x=$3
    ip netns add "$name-a"
    ip netns add "$name-b"
    ip link add "$name-va" type veth peer name "$name-vb"
    ip link set "$name-va" netns "$name-a"
    ip link set "$name-vb" netns "$name-b"
    ip -n "$name-a" addr add "10.77.$x.1/24" dev "$name-va"
    ip -n "$name-b" addr add "10.77.$x.2/24" dev "$name-vb"
    for h in a b; do
      ip -n "$name-$h" link set lo up
      ip -n "$name-$h" link set "$name-v$h" up
    done
    ;;
  down)
    ip netns del "$name-a" 2>/dev/null || true  # deleting a namespace deletes its end of the veth, and the pair
    ip netns del "$name-b" 2>/dev/null || true
    ;;
  *) echo "usage: $0 up NAME X | down NAME" >&2; exit 2 ;;
esac
