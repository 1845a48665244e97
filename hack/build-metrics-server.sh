#!/usr/bin/env bash
# Builds (once, cached by version) the metrics-server of the test cluster's add-ons
# (test/cluster/addons/metrics-server); prints its path. See hack/build-addon-tool.sh.
exec "$(dirname "$0")/build-addon-tool.sh" metrics-server
