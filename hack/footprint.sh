#!/usr/bin/env bash
# make footprint: what the whole stack costs standalone and idle. Starts
# `microlet run` (no API server) with the example manifests in a temp run
# dir, under a Docker instance label and node name of its own (so it never
# touches another stack's containers), waits until every service is SERVING
# and every pod Running, lets it settle, prints `microlet status -o wide
# --sample` (per process CPU in cores, RSS and PSS from smaps_rollup, and the
# total), stops it and removes its containers.
#   SETTLE=90 SAMPLE=30s MANIFEST_DIR=... FOOTPRINT_CONFIG=extra.yaml hack/footprint.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${BIN:-$root/bin}
settle=${SETTLE:-90}
sample=${SAMPLE:-30s}
manifests=${MANIFEST_DIR:-$root/examples/manifests}
work=$(mktemp -d /tmp/mfp.XXXXXX) # short: sockets live below it (sun_path)
instance="footprint-$$"
{
  echo "node_name: $instance"
  echo "args:"
  echo "  runtime-shim: [\"--docker-instance=$instance\"]"
  if [ -n "${FOOTPRINT_CONFIG:-}" ]; then cat "$FOOTPRINT_CONFIG"; fi
} >"$work/microlet.yaml"

"$bin/microlet" run --config "$work/microlet.yaml" --run-dir "$work/run" \
  --data-dir "$work/data" --manifest-dir "$manifests" >"$work/run.log" 2>&1 &
sup=$!
cleanup() {
  kill -TERM "$sup" 2>/dev/null && wait "$sup" || true
  ids=$(docker ps -aq --filter "label=io.microlet.instance=$instance")
  if [ -n "$ids" ]; then docker rm -f $ids >/dev/null; fi
  rm -rf "$work"
}
trap cleanup EXIT
export MICROLET_RUN_DIR="$work/run"

wait_for() { # what, seconds, command...
  local what=$1 secs=$2; shift 2
  for ((i = 0; i < secs; i++)); do
    if ! kill -0 "$sup" 2>/dev/null; then
      echo "footprint: microlet run exited; its log:" >&2; cat "$work/run.log" >&2; exit 1
    fi
    if "$@" >/dev/null 2>&1; then return 0; fi
    sleep 1
  done
  echo "footprint: no $what after ${secs}s; log: $work/run.log" >&2
  tail -20 "$work/run.log" >&2
  exit 1
}
all_running() {
  local out
  out=$("$bin/microlet" get pods 2>/dev/null) || return 1
  # A header and at least one pod, every pod Running.
  [ "$(echo "$out" | tail -n +2 | grep -c .)" -ge 1 ] && ! echo "$out" | tail -n +2 | grep -vq ' Running '
}
wait_for "healthy stack" 120 "$bin/microlet" health microlet
if compgen -G "$manifests/*.yaml" >/dev/null; then
  wait_for "running pods" 180 all_running
fi
echo "footprint: healthy; settling ${settle}s, then sampling CPU over $sample" >&2
sleep "$settle"
"$bin/microlet" status -o wide --sample "$sample"
# Where each process's PSS is: anonymous (heap, stacks, Go runtime) or
# file pages (mostly its own executable), in MiB, and the services' sum.
echo
"$bin/microlet" status -o json |
  jq -r '(.components[] | "\(.name) \(.pid)"), (.supervisor // empty | "microlet \(.pid)")' |
  while read -r name pid; do
    [ "$pid" -gt 0 ] || continue
    awk -v n="$name" '/^Pss_Anon:/ {a=$2} /^Pss_File:/ {f=$2} /^Pss:/ {p=$2}
      END {print n, a, f, p}' "/proc/$pid/smaps_rollup"
  done | awk '{printf "%-14s %9.1f %9.1f %9.1f\n", $1, $2/1024, $3/1024, $4/1024}
    $1 != "microlet" {a += $2; f += $3; p += $4}
    END {printf "%-14s %9.1f %9.1f %9.1f\n", "7 services", a/1024, f/1024, p/1024}' |
  { printf '%-14s %9s %9s %9s\n' NAME PSS_ANON PSS_FILE PSS; cat; }
"$bin/microlet" get pods
