#!/usr/bin/env bash
# Installs the microlet systemd units and binaries.
#
#   deploy/systemd/install.sh [--root DIR] [--bin DIR]
#
# --bin is where `make build` put the static binaries (default: bin/ of the
# repository); --root installs into another tree (used by the tests and for
# building a node image). Run `systemctl daemon-reload && systemctl enable
# --now microlet.target` afterwards on a live system.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=""
bin="$here/../../bin"
while [ $# -gt 0 ]; do
  case "$1" in
    --root) root="$2"; shift 2 ;;
    --bin) bin="$2"; shift 2 ;;
    *) echo "install.sh: unknown argument $1 (want --root DIR, --bin DIR)" >&2; exit 2 ;;
  esac
done
services="podconfig statusd cloudsyncd runtime-shim nodestatusd nodeapi podsyncd"
for s in $services; do
  [ -x "$bin/$s" ] || { echo "install.sh: $bin/$s missing; run make build first" >&2; exit 1; }
done
install -d "$root/usr/local/libexec/microlet" "$root/usr/local/bin" "$root/etc/systemd/system" "$root/etc/microlet/manifests"
for s in $services; do
  install -m 0755 "$bin/$s" "$root/usr/local/libexec/microlet/$s"
  install -m 0644 "$here/microlet-$s.service" "$here/microlet-$s.socket" "$root/etc/systemd/system/"
done
# The CLI (`microlet status`, `microlet health`) is no part of the units.
if [ -x "$bin/microlet" ]; then
  install -m 0755 "$bin/microlet" "$root/usr/local/bin/microlet"
else
  echo "install.sh: $bin/microlet missing; the units work without the CLI" >&2
fi
# The node credential's owner when joining with a bootstrap token; it runs the CLI.
install -m 0644 "$here/microlet-credentials.service" "$root/etc/systemd/system/"
install -m 0644 "$here/microlet.target" "$root/etc/systemd/system/"
# Never overwrite the node's own settings.
[ -e "$root/etc/microlet/microlet.env" ] || install -m 0644 "$here/microlet.env" "$root/etc/microlet/microlet.env"
echo "installed into ${root:-/}"
