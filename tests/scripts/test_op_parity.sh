#!/bin/sh
# Every CPU op provider against cpu-ref (NMSE bars per dtype); fails on any
# mismatch and when no fast provider was checked at all.
set -eu
out=$("$1" op-parity --device cpu)
echo "$out"
echo "$out" | grep -q "provider=" || { echo "no provider was checked"; exit 1; }
