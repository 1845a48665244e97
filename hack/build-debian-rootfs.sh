#!/usr/bin/env bash
# Builds a root filesystem from this machine's Debian packages, offline from
# any registry: the named packages and their Depends closure, fetched with
# apt-get download and unpacked with dpkg-deb -x (nothing is installed on
# the host and no maintainer script runs). Cached by the exact package
# versions under ~/.cache/microlet/<name>/<key>; parallel callers wait
# (flock). Prints the root filesystem's directory.
#
#   hack/build-debian-rootfs.sh NAME PACKAGE...
#
# The iptables names always point at the nf_tables backend
# (xtables-nft-multi), Debian's own default, so every image of the cluster
# programs the same tables (docs/cluster-addons.md).
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: $0 NAME PACKAGE..." >&2; exit 2; }
name=$1; shift
pkgs=("$@")
# A fresh container has no package lists: fetch them once.
if ! apt-cache policy "${pkgs[0]}" | grep -q 'Candidate: [0-9]'; then
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo=sudo
  $sudo apt-get update -qq >&2
fi
closure=$(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts \
  --no-breaks --no-replaces --no-enhances "${pkgs[@]}" | grep -v '^ ' | grep -v '^<' | sort -u)
# One apt-cache call for every candidate version (one per package took minutes).
# Virtual packages have no candidate: others in the closure provide them.
pinned=$(apt-cache policy $closure | awk '/^[^ ].*:$/ {p=substr($0, 1, length($0)-1)}
  $1 == "Candidate:" && $2 != "(none)" {print p "=" $2}')
key=$(echo "$pinned" | sha256sum | cut -c1-16)
cache="${MICROLET_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/microlet}/$name/$key"
mkdir -p "$cache"
exec 9>"$cache/.lock"
flock 9
if [ -f "$cache/rootfs/.complete" ]; then echo "$cache/rootfs"; exit 0; fi
echo "build-debian-rootfs $name: $(echo $pinned)" >&2
rm -rf "$cache/debs" "$cache/rootfs"
mkdir -p "$cache/debs" "$cache/rootfs"
(cd "$cache/debs" && apt-get download $pinned >&2)
for deb in "$cache"/debs/*.deb; do dpkg-deb -x "$deb" "$cache/rootfs"; done
rm -rf "$cache/debs"
cd "$cache/rootfs"
rm -rf usr/share/doc usr/share/man usr/share/info usr/share/locale usr/share/lintian
if [ -e usr/sbin/xtables-nft-multi ]; then
  for n in iptables iptables-save iptables-restore ip6tables ip6tables-save ip6tables-restore; do
    ln -sf xtables-nft-multi "usr/sbin/$n"
  done
fi
echo "$pinned" > .complete
echo "$cache/rootfs"
