#!/usr/bin/env bash
# Debian packages the tests use: busybox-static and
# bash-static (the conformance busybox image's sh) for test images, iptables for
# the CNI portmap plugin, curl (a conformance image), dig (bind9-dnsutils: the
# full suite's DNS specs), netcat-openbsd (the agnhost image's nc), script(1) (kubectl exec -t),
# systemd-analyze (deploy/systemd), docker-compose (deploy/compose), dbus-daemon
# (a private bus for the graceful node shutdown tests); for the cluster (docs/cluster.md):
# gcc, pkg-config and libseccomp-dev (hack/build-runc.sh's static cgo build). apt-get runs
# only when something is missing. docs/testing.md lists every host fact.
set -euo pipefail
need=()
[ -x /bin/busybox ] || command -v busybox >/dev/null 2>&1 || need+=(busybox-static)
[ -x /bin/bash-static ] || need+=(bash-static)
command -v flock >/dev/null 2>&1 || need+=(util-linux)
command -v iptables >/dev/null 2>&1 || need+=(iptables)
[ -x /usr/bin/curl ] || need+=(curl)
[ -x /usr/bin/dig ] || need+=(bind9-dnsutils)
[ -x /bin/nc.openbsd ] || need+=(netcat-openbsd)
command -v script >/dev/null 2>&1 || need+=(bsdutils)
command -v systemd-analyze >/dev/null 2>&1 || need+=(systemd)
[ -x /usr/bin/dbus-daemon ] || need+=(dbus-daemon)
command -v gcc >/dev/null 2>&1 || need+=(gcc libc6-dev)
command -v pkg-config >/dev/null 2>&1 || need+=(pkg-config)
[ -e /usr/include/seccomp.h ] || need+=(libseccomp-dev)
docker compose version >/dev/null 2>&1 || command -v docker-compose >/dev/null 2>&1 || need+=(docker-compose)
if [ ${#need[@]} -gt 0 ]; then
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo=sudo
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need[@]}"
fi
