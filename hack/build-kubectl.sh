#!/usr/bin/env bash
# Builds (once, cached by version) kubectl of the control plane's release;
# prints its path. See hack/build-k8s.sh.
exec "$(dirname "$0")/build-k8s.sh" kubectl
