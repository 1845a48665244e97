#!/usr/bin/env bash
# Builds the iptables base root filesystem of the kube-proxy and podnet
# images, like upstream's distroless-iptables but from this machine's
# Debian packages: iptables, conntrack and their Depends closure
# (hack/build-debian-rootfs.sh). Prints the root filesystem's directory.
set -euo pipefail
exec "$(dirname "$0")/build-debian-rootfs.sh" iptables-base iptables conntrack
