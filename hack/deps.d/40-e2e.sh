#!/usr/bin/env bash
# Builds (once, cached by version) Kubernetes' e2e suite and the programs of
# its agnhost and nonewprivs test images from test/conformance/upstream: the
# conformance subset in `make test` runs them, `make conformance` runs the
# whole selection. The agnhost image also gets the host's curl.
set -euo pipefail
"$(dirname "$0")/../build-e2e.sh" e2e.test >/dev/null
"$(dirname "$0")/../build-e2e.sh" agnhost >/dev/null
"$(dirname "$0")/../build-e2e.sh" nonewprivs >/dev/null
if ! [ -x /usr/bin/curl ]; then
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo=sudo
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq curl
fi
