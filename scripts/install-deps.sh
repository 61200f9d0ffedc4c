#!/bin/sh
# Installs the Debian packages vllm.c builds and tests with. Idempotent: when
# everything is present it only runs dpkg-query and exits.
set -eu

PACKAGES="build-essential cmake pkg-config clang libclang-rt-14-dev \
libjansson-dev libpcre2-dev libutf8proc-dev libmicrohttpd-dev libopenblas-dev nettle-dev \
curl libcurl4-openssl-dev"
# Node.js may come from elsewhere (it ships npm itself, which conflicts with
# Debian's npm package), so ask for it only when the commands are missing.
command -v node >/dev/null 2>&1 || PACKAGES="$PACKAGES nodejs"
command -v npm >/dev/null 2>&1 || PACKAGES="$PACKAGES npm"

missing=""
for p in $PACKAGES; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        missing="$missing $p"
    fi
done
[ -z "$missing" ] && exit 0

echo "install-deps: installing:$missing"
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
# shellcheck disable=SC2086
$SUDO apt-get install -y -qq --no-install-recommends $missing
