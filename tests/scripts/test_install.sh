#!/bin/sh
# make install's layout: install into a temporary prefix, build the example
# program against the installed header and library through pkg-config alone,
# and run it on the bundled model.
# Usage: test_install.sh PATH_TO_VLLMC (the build folder is its directory)
set -eu
build=$(dirname "$1")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
for f in bin/vllmc include/vllmc.h lib/libvllmc.so lib/pkgconfig/vllmc.pc \
    share/vllmc/models/stories260K.gguf; do
    [ -e "$tmp/prefix/$f" ] || { echo "FAIL: $f not installed"; exit 1; }
done
export PKG_CONFIG_PATH="$tmp/prefix/lib/pkgconfig"
# A sanitizer build installs an instrumented library: the program must link
# the same runtime first.
san=$(sed -n 's/^VLLMC_SANITIZE:STRING=//p' "$build/CMakeCache.txt")
# shellcheck disable=SC2046
cc -std=c11 -Wall -Werror ${san:+-fsanitize=$san} examples/simple.c \
    $(pkg-config --cflags --libs vllmc) -o "$tmp/simple"
LD_LIBRARY_PATH="$tmp/prefix/lib" "$tmp/simple" "$tmp/prefix/share/vllmc/models/stories260K.gguf" \
    >"$tmp/out" 2>"$tmp/err" || { cat "$tmp/err"; echo "FAIL: example did not run"; exit 1; }
grep -q "there was a little girl named Lily" "$tmp/out" ||
    { echo "FAIL: unexpected output:"; cat "$tmp/out"; exit 1; }
echo "ok   installed library, header and pkg-config file build and run the example"
