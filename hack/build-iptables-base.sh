#!/usr/bin/env bash
# Builds the iptables base root filesystem of the kube-proxy and podnet
# images, like upstream's distroless-iptables but from this machine's
# Debian packages: iptables, conntrack and their Depends closure, fetched
# with apt-get download and unpacked with dpkg-deb -x (nothing installed on
# the host). The iptables names point at the nf_tables backend
# (xtables-nft-multi), the backend of Debian's own iptables, so the node
# image, kube-proxy and podnet all program the same tables. Cached by the
# exact package versions; parallel callers wait (flock). Prints the root
# filesystem's directory.
set -euo pipefail
pkgs=(iptables conntrack)
# A fresh container has no package lists: fetch them once.
if ! apt-cache policy iptables | grep -q 'Candidate: [0-9]'; then
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo=sudo
  $sudo apt-get update -qq >&2
fi
closure=$(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts \
  --no-breaks --no-replaces --no-enhances "${pkgs[@]}" | grep -v '^ ' | grep -v '^<' | sort -u)
pinned=$(for p in $closure; do echo "$p=$(apt-cache policy "$p" | sed -nE 's/^[[:space:]]*Candidate: (.*)/\1/p')"; done)
key=$(echo "$pinned" | sha256sum | cut -c1-16)
cache="${MICROLET_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/microlet}/iptables-base/$key"
mkdir -p "$cache"
exec 9>"$cache/.lock"
flock 9
if [ -f "$cache/rootfs/.complete" ]; then echo "$cache/rootfs"; exit 0; fi
echo "build-iptables-base: $(echo $pinned)" >&2
rm -rf "$cache/debs" "$cache/rootfs"
mkdir -p "$cache/debs" "$cache/rootfs"
(cd "$cache/debs" && apt-get download $pinned >&2)
for deb in "$cache"/debs/*.deb; do dpkg-deb -x "$deb" "$cache/rootfs"; done
cd "$cache/rootfs"
rm -rf usr/share/doc usr/share/man usr/share/info usr/share/locale usr/share/lintian
for n in iptables iptables-save iptables-restore ip6tables ip6tables-save ip6tables-restore; do
  ln -sf xtables-nft-multi "usr/sbin/$n"
done
echo "$pinned" > .complete
echo "$cache/rootfs"
