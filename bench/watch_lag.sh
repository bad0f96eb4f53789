#!/usr/bin/env bash
# The watch benchmark of issue 29 (docs/watch.md): a 640x480, 25 fps stream sent in real time
# (ffmpeg -re) over UDP/MPEG-TS for DURATION seconds (default 180) to `tubelet watch` with the
# shipped model; reports the lag's p50/p99/max, windows written and skipped, and the peak RSS of
# watch measured in the same run (GNU time), with the CPU named. Target: p99 lag below one stride,
# and RSS flat (sampled from /proc every 10 s).
# usage: bench/watch_lag.sh [build/tubelet] [DURATION] [MODEL]     (results on stdout)
set -eu
bin=${1:-build/tubelet}
duration=${2:-180}
model=${3:-models/motion-vivit}
window=${WINDOW:-2} stride=${STRIDE:-0.5}
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$tmp"' EXIT
command -v /usr/bin/time >/dev/null || { echo "needs GNU time (apt-get install time)"; exit 1; }
port=$((20000 + RANDOM % 40000))

# the source: the example clips concatenated, looped, scaled to 640x480 at 25 fps (H.264, a
# keyframe every second so that a receiver can join), encoded once before the run
for f in "$model"/examples/*.mp4; do echo "file '$PWD/$f'"; done >"$tmp/list.txt"
ffmpeg -v error -f concat -safe 0 -i "$tmp/list.txt" -vf scale=640:480,fps=25 \
    -c:v libx264 -preset veryfast -g 25 -bf 0 -f mpegts "$tmp/base.ts"

/usr/bin/time -f '%M' -o "$tmp/rss" "$bin" watch "udp://127.0.0.1:$port" --model "$model" \
    --window "$window" --stride "$stride" --top 1 --timeout 5 >"$tmp/out" 2>"$tmp/err" &
wpid=$!
sleep 2   # watch binds its port
ffmpeg -v error -re -stream_loop -1 -i "$tmp/base.ts" -t "$duration" -c copy -f mpegts \
    "udp://127.0.0.1:$port?pkt_size=1316" &
spid=$!
# RSS of watch every 10 s (the process under GNU time is its child)
wchild=$(pgrep -P $wpid | head -n 1 || true)
while kill -0 $spid 2>/dev/null; do
    [ -n "$wchild" ] && awk '/VmRSS/ { print $2 }' "/proc/$wchild/status" 2>/dev/null >>"$tmp/rss_series"
    sleep 10
done
wait $spid || true
wait $wpid || true

lags=$(grep -o '"lag_ms": [0-9.]*' "$tmp/out" | awk '{ print $2 }' | sort -n)
n=$(printf '%s\n' "$lags" | grep -c . || true)
pct() { printf '%s\n' "$lags" | awk -v p="$1" -v n="$n" 'NR == int((n - 1) * p) + 1 { print; exit }'; }
skipped=$(grep -o '"skipped": [0-9]*' "$tmp/out" | awk '{ s += $2 } END { print s + 0 }')
echo "CPU: $(awk -F': ' '/model name/ { print $2; exit }' /proc/cpuinfo), $(nproc) cores"
echo "stream: 640x480 25 fps, ${duration} s over UDP; window ${window} s, stride ${stride} s; model $model"
echo "windows written: $n, skipped: $skipped"
echo "lag ms: p50 $(pct 0.5), p99 $(pct 0.99), max $(pct 1)"
echo "peak RSS: $(( $(cat "$tmp/rss") / 1024 )) MB; RSS every 10 s (kB): $(tr '\n' ' ' <"$tmp/rss_series" 2>/dev/null)"
tail -n 1 "$tmp/err"
