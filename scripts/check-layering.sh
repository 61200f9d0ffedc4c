#!/bin/sh
# Dependencies point one way: core <- backend <- model <- engine <- server <- tools;
# tokenizer and template use only core. Fails on any include that points back.
set -eu
cd "$(dirname "$0")/.."
fail=0
allowed() {
    case "$1" in
    core) echo "core" ;;
    tokenizer) echo "core tokenizer" ;;
    template) echo "core template" ;;
    backend) echo "core backend" ;;
    model) echo "core backend model" ;;
    engine) echo "core backend model tokenizer template engine" ;;
    server) echo "core backend model tokenizer template engine server" ;;
    tools) echo "core backend model tokenizer template engine server tools" ;;
    esac
}
for dir in src/*/; do
    mod=$(basename "$dir")
    ok=$(allowed "$mod")
    for f in $(find "$dir" -name '*.[ch]' -o -name '*.cu' -o -name '*.cuh'); do
        grep -E '^#include "[a-z_]+/' "$f" | sed -E 's/^#include "([a-z_]+)\/.*/\1/' | while read -r dep; do
            case " $ok " in *" $dep "*) ;; *) echo "layering: $f includes $dep/ (allowed: $ok)"; exit 1 ;; esac
        done || fail=1
    done
done
[ "$fail" -eq 0 ] && echo "layering: ok"
exit "$fail"
