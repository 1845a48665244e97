#!/usr/bin/env bash
# Builds (once, cached by version) the coredns of the test cluster's add-ons
# (test/cluster/addons/coredns); prints its path. See hack/build-addon-tool.sh.
exec "$(dirname "$0")/build-addon-tool.sh" coredns
