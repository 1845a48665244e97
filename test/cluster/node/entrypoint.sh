#!/bin/bash
# The microlet cluster node's init (docs/cluster.md): makes the container
# look like a host to containerd and microlet, loads the images baked into
# the node image, starts containerd, on the control-plane node also the
# control plane, then runs microlet in the foreground, joining the cluster
# with the bootstrap token in /cluster.
set -euo pipefail
log() { echo "microlet-node: $*" >&2; }
die() { log "$*"; exit 1; }

# Mounts: containers' volume mounts must propagate (mount --make-rshared
# as on a systemd host); /sys and each cgroup v1 hierarchy are read-only in
# a container that is not --privileged, and runc must write them.
mount --make-rshared /
mount -o remount,rw /sys || die "cannot remount /sys read-write: the node container needs CAP_SYS_ADMIN and --security-opt systempaths=unconfined"
mount -o remount,rw /sys/fs/cgroup
if [ "$(stat -fc %T /sys/fs/cgroup)" != cgroup2fs ]; then
  for mnt in $(awk '$5 ~ "^/sys/fs/cgroup/" && / - cgroup / {print $5}' /proc/self/mountinfo); do
    mount -o remount,rw,bind "$mnt"
  done
fi
mkdir -p /var/log /var/lib/containerd /etc/cni/net.d
# What a host has and a container lacks: the kubelet refuses to start
# without /dev/kmsg (its OOM watcher reads it; a privileged kind node has
# the host's, here the device rule lets the node make it), and a node's
# machine ID comes from /etc/machine-id.
[ -e /dev/kmsg ] || mknod -m 600 /dev/kmsg c 1 11 || log "no /dev/kmsg (mknod failed): the upstream kubelet will not start"
[ -s /etc/machine-id ] || tr -d - </proc/sys/kernel/random/uuid >/etc/machine-id
# The pods' resolver (kubelet-config.yaml's resolvConf says why).
echo "nameserver $MICROLET_NODE_IP" > /etc/kubernetes/resolv.conf
touch /run/xtables.lock
# registry.k8s.io's mirror: the cluster registry on the control-plane node
# (Cluster.RegistryHost), for images pulled with pullPolicy Always.
if [ -n "${MICROLET_CLUSTER_REGISTRY:-}" ]; then
  mkdir -p /etc/containerd/certs.d/registry.k8s.io
  printf 'server = "https://registry.k8s.io"\n\n[host."http://%s"]\n  capabilities = ["pull", "resolve"]\n' \
    "$MICROLET_CLUSTER_REGISTRY" >/etc/containerd/certs.d/registry.k8s.io/hosts.toml
fi

# containerd, restarted by this script's watchdog should it die.
(
  while true; do
    containerd --config /etc/containerd/config.toml >>/var/log/containerd.log 2>&1 || true
    log "containerd exited; restarting in 2s"
    sleep 2
  done
) &
for _ in $(seq 1 300); do
  ctr version >/dev/null 2>&1 && break
  sleep 0.2
done
ctr version >/dev/null 2>&1 || die "containerd did not answer on /run/containerd/containerd.sock within 60s; see /var/log/containerd.log: $(tail -5 /var/log/containerd.log)"

# Images baked into the node image (pause and the add-ons), as kind does.
for t in /opt/microlet/images/*.tar; do
  [ -e "$t" ] || continue
  ctr -n k8s.io images import --all-platforms --digests "$t" >/dev/null || die "import $t failed"
done

if [ "${MICROLET_CLUSTER_ROLE:-worker}" = control-plane ]; then
  microlet-cluster registry -addr "${MICROLET_CLUSTER_REGISTRY:-$MICROLET_NODE_IP:5000}" >>/var/log/registry.log 2>&1 &
  microlet-cluster controlplane -shared /cluster -ip "$MICROLET_NODE_IP" >>/var/log/controlplane.log 2>&1 &
fi
for _ in $(seq 1 900); do
  [ -s /cluster/bootstrap-kubelet.conf ] && break
  sleep 0.2
done
[ -s /cluster/bootstrap-kubelet.conf ] || die "no /cluster/bootstrap-kubelet.conf after 3 minutes: the control plane did not come up (its log: /var/log/controlplane.log on the control-plane node)"

# The node agent runs as a child, not exec'd: bash as PID 1 reaps the
# orphans (containerd's shims re-parent to PID 1 when they daemonize) and
# passes docker stop's SIGTERM on. microlet, or the upstream kubelet
# (MICROLET_NODE_AGENT=kubelet, mounted at /usr/local/bin/kubelet), from
# the same configuration file and flags.
agent=${MICROLET_NODE_AGENT:-microlet}
case "$agent" in
  microlet) cmd=(microlet run) state=/var/lib/microlet ;;
  kubelet) command -v kubelet >/dev/null || die "MICROLET_NODE_AGENT=kubelet but no /usr/local/bin/kubelet is mounted"
    cmd=(kubelet) state=/var/lib/kubelet ;;
  *) die "MICROLET_NODE_AGENT=$agent is not a node agent (microlet or kubelet)" ;;
esac
mkdir -p "$state"
# shellcheck disable=SC2086
"${cmd[@]}" --config /etc/kubernetes/kubelet-config.yaml \
  --bootstrap-kubeconfig /cluster/bootstrap-kubelet.conf --kubeconfig "$state/kubelet.conf" \
  --node-ip "$MICROLET_NODE_IP" ${MICROLET_NODE_ARGS:-} &
mpid=$!
trap 'kill -TERM "$mpid" 2>/dev/null' TERM INT
set +e
wait "$mpid"
rc=$?
# A trapped signal ends wait early: wait for microlet's own exit.
while kill -0 "$mpid" 2>/dev/null; do
  wait "$mpid"
  rc=$?
done
log "$agent exited ($rc)"
exit "$rc"
