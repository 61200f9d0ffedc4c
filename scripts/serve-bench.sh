#!/bin/bash
# Starts `vllmc serve` on a model, reports the time until /health answers 200
# (the start-up time), runs `vllmc bench serve` against it and stops the
# server. Works on either device; the GPU check uses it for the start-up and
# serving figures.
#
#   scripts/serve-bench.sh VLLMC MODEL DEVICE PORT [bench serve options...]
#
# With no bench serve options it only measures start-up. The server's log is
# written to $SERVE_LOG (default: serve-PORT.log in the current folder).
set -u
if [ $# -lt 4 ]; then
    echo "usage: $0 VLLMC MODEL DEVICE PORT [bench serve options...]" >&2
    exit 2
fi
VLLMC=$1 MODEL=$2 DEVICE=$3 PORT=$4
shift 4
LOG=${SERVE_LOG:-serve-$PORT.log}

now_ms() { echo $(($(date +%s%N) / 1000000)); }

# One GET /health through bash's /dev/tcp: no client needs to be installed.
health_ok() {
    { exec 3<>"/dev/tcp/127.0.0.1/$PORT"; } 2>/dev/null || return 1
    printf 'GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' >&3
    local status
    read -r -t 5 status <&3
    exec 3<&- 3>&-
    case "$status" in "HTTP/1."?" 200"*) return 0 ;; esac
    return 1
}

t0=$(now_ms)
"$VLLMC" serve "$MODEL" --device "$DEVICE" --host 127.0.0.1 --port "$PORT" >"$LOG" 2>&1 &
pid=$!
stop() { kill -TERM "$pid" 2>/dev/null && wait "$pid" 2>/dev/null; }
trap stop EXIT
until health_ok; do
    if ! kill -0 "$pid" 2>/dev/null; then
        echo "serve-bench: the server exited before /health answered; its log:" >&2
        tail -n 20 "$LOG" >&2
        exit 1
    fi
    if [ $(($(now_ms) - t0)) -gt 300000 ]; then
        echo "serve-bench: no ready /health after 300 s" >&2
        exit 1
    fi
    sleep 0.05
done
t1=$(now_ms)
ms=$((t1 - t0))
printf 'startup: %s on %s: %d.%03d s from `vllmc serve` to a ready /health\n' \
    "$(basename "$MODEL")" "$DEVICE" $((ms / 1000)) $((ms % 1000))
grep -m3 -i "loading\|loaded\|kv cache" "$LOG" | sed 's/^/  serve log: /'
[ $# -eq 0 ] && exit 0
"$VLLMC" bench serve --host 127.0.0.1 --port "$PORT" --disable-tqdm "$@"
