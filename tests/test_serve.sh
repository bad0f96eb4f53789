#!/usr/bin/env bash
# End-to-end tests of tubelet serve on 127.0.0.1 and an ephemeral port: the shipped model
# (models/motion-vivit) and its example clips against `tubelet classify --json`, bad requests,
# bad clients (a huge Content-Length, a stalled body), the API key, CORS, a full queue and the
# SIGTERM drain, and the page at / in headless Chromium (tests/serve_page.sh). curl, bash's
# /dev/tcp, awk and chromium; every wait is bounded in count and time.
# usage: tests/test_serve.sh [build/tubelet]      prints "N passed, M failed" last
set -u
bin=${1:-build/tubelet}
cd "$(dirname "$0")/.."
M=models/motion-vivit
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }
finish() { echo "$pass passed, $fail failed"; [ $fail -eq 0 ]; exit $?; }
command -v curl >/dev/null || { bad "curl is needed (scripts/install-deps.sh)"; finish; }
[ -x "$bin" ] || { bad "no executable $bin"; finish; }
tmp=$(mktemp -d)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
    rm -rf "$tmp"
}
trap cleanup EXIT
clips=($M/examples/*.mp4)
[ ${#clips[@]} -ge 4 ] || { bad "no example clips in $M/examples"; finish; }

# start NAME ARGS...: a server in the background; sets $pid and $url once /health says ok
start() {
    local name=$1; shift
    "$bin" serve --model $M --port 0 "$@" >"$tmp/$name.log" 2>&1 &
    pid=$!
    pids+=($pid)
    local port="" i
    for i in $(seq 300); do # 30 s at most
        port=$(sed -n 's|^listening on http://127.0.0.1:\([0-9]*\)/.*|\1|p' "$tmp/$name.log" 2>/dev/null)
        [ -n "$port" ] && curl -s -m 5 "http://127.0.0.1:$port/health" 2>/dev/null | grep -q '"ok"' && break
        kill -0 $pid 2>/dev/null || break
        sleep 0.1
    done
    url="http://127.0.0.1:$port"
    curl -s -m 5 "$url/health" | grep -q '"ok"' && return 0
    bad "$name did not start: $(cat "$tmp/$name.log")"
    finish
}

# stop_server: SIGTERM, then its exit status in $rc (after 60 s: SIGKILL, rc 137)
stop_server() {
    kill -TERM $pid
    local i
    for i in $(seq 600); do kill -0 $pid 2>/dev/null || break; sleep 0.1; done
    kill -0 $pid 2>/dev/null && kill -9 $pid
    wait $pid
    rc=$?
}

# post FILE QUERY [CONTENT-TYPE]: the status on the first line of $tmp/resp.head, body in $tmp/resp
post() {
    curl -s -m 60 -o "$tmp/resp" -w '%{http_code}' -H "Content-Type: ${3:-video/mp4}" -H 'Expect:' \
        --data-binary @"$1" "$url/v1/classify$2"
}

# expect_error NAME STATUS WORD: the last answer had STATUS and a JSON error containing WORD
expect_error() {
    if [ "$code" = "$2" ] && grep -q "^{\"error\": \".*$3" "$tmp/resp"; then ok
    else bad "$1: want $2 and an error naming '$3', got $code: $(head -c 300 "$tmp/resp")"; fi
}

# same_top A B: the same labels in the same order, scores within 2e-6 (inside a batch, the
# logits may differ from a batch of one by rounding)
same_top() {
    awk -v a="$(grep -o '"label": "[^"]*", "score": [0-9.]*' "$1" | tr '\n' ' ')" \
        -v b="$(grep -o '"label": "[^"]*", "score": [0-9.]*' "$2" | tr '\n' ' ')" 'BEGIN {
        na = split(a, x, "\"score\": "); nb = split(b, y, "\"score\": ")
        if (na != nb || na < 2) exit 1
        for (i = 1; i <= na; i++) {
            if (i > 1) { d = x[i] - y[i]; if (d > 2e-6 || d < -2e-6) exit 1 }
            lx = x[i]; sub(/^[0-9.]* */, "", lx); ly = y[i]; sub(/^[0-9.]* */, "", ly)
            if (lx != ly) exit 1
        }
    }'
}

# ---------------------------------------------------------------------------------------------
# the references: tubelet classify --json, one clip per run
# ---------------------------------------------------------------------------------------------
for i in "${!clips[@]}"; do
    "$bin" classify --model $M "${clips[$i]}" --json >"$tmp/ref$i.json" 2>/dev/null ||
        bad "classify ${clips[$i]}"
done

X=tests/fixtures/xclip/p16_f8 # a zero-shot model, served beside the shipped one
start main --model xclip=$X --max-batch 4 --max-wait-ms 20 --queue 12 --timeout 2 --max-body 1

# ---------------------------------------------------------------------------------------------
# health, models, metrics
# ---------------------------------------------------------------------------------------------
[ "$(curl -s -m 5 "$url/health")" = '{"status": "ok"}' ] && ok || bad "/health body"
curl -s -m 5 "$url/v1/models" >"$tmp/models"
grep -q '"name": "motion-vivit", "family": "vivit"' "$tmp/models" &&
    grep -q '"input": {"frames": 8, "channels": 3, "height": 64, "width": 64}, "precision": "fp32"' "$tmp/models" &&
    grep -q '"labels": \["move_right", "move_left", "move_down", "move_up"\]' "$tmp/models" &&
    ok || bad "/v1/models: $(cat "$tmp/models")"

# ---------------------------------------------------------------------------------------------
# good requests, one at a time (a batch of one: the very logits of classify), raw and multipart
# ---------------------------------------------------------------------------------------------
for i in "${!clips[@]}"; do
    c=${clips[$i]}
    code=$(post "$c" "?name=$c")
    { echo -n "["; tr -d '\n' <"$tmp/resp"; echo "]"; } >"$tmp/got"
    [ "$code" = 200 ] && cmp -s "$tmp/got" "$tmp/ref$i.json" && ok ||
        bad "raw $c: $code $(cat "$tmp/got") vs $(cat "$tmp/ref$i.json")"
done
c=${clips[1]}
code=$(curl -s -m 60 -o "$tmp/resp" -w '%{http_code}' -F "video=@$c" -F "name=$c" -F top=5 "$url/v1/classify")
{ echo -n "["; tr -d '\n' <"$tmp/resp"; echo "]"; } >"$tmp/got"
[ "$code" = 200 ] && cmp -s "$tmp/got" "$tmp/ref1.json" && ok || bad "multipart $c: $code $(cat "$tmp/got")"
code=$(curl -s -m 60 -o "$tmp/resp" -w '%{http_code}' -F "video=@$c;type=video/mp4" -F top=2 "$url/v1/classify")
[ "$code" = 200 ] && [ "$(grep -o '"label"' "$tmp/resp" | wc -l)" = 2 ] &&
    grep -q "^{\"video\": \"$(basename "$c")\"" "$tmp/resp" && ok || bad "multipart top=2: $code $(cat "$tmp/resp")"
code=$(post "${clips[2]}" "?top=1&clips=2&crops=3&sampling=uniform&name=${clips[2]}")
[ "$code" = 200 ] && [ "$(grep -o '"label"' "$tmp/resp" | wc -l)" = 1 ] && ok || bad "clips=2 crops=3: $code $(cat "$tmp/resp")"
"$bin" classify --model $M "${clips[2]}" --json --top 1 --clips 2 --crops 3 --sampling uniform 2>/dev/null >"$tmp/ref_views"
{ echo -n "["; tr -d '\n' <"$tmp/resp"; echo "]"; } >"$tmp/got"
cmp -s "$tmp/got" "$tmp/ref_views" && ok || bad "6 views: $(cat "$tmp/got") vs $(cat "$tmp/ref_views")"

# ---------------------------------------------------------------------------------------------
# bad requests: a 4xx with a JSON error each, and the server goes on
# ---------------------------------------------------------------------------------------------
head -c 2000 "${clips[0]}" >"$tmp/truncated.mp4"
code=$(post "$tmp/truncated.mp4" ""); expect_error truncated 422 "video"
printf 'not a video at all\n%.0s' $(seq 50) >"$tmp/text.mp4"
code=$(post "$tmp/text.mp4" ""); expect_error "non-video" 422 "video"
code=$(post "${clips[0]}" "" text/plain); expect_error "text/plain" 415 "Content-Type"
code=$(post "${clips[0]}" "" application/json); expect_error "application/json" 415 "Content-Type"
code=$(post "${clips[0]}" "?model=nope"); expect_error "unknown model" 404 "unknown model 'nope'"
code=$(post "${clips[0]}" "?top=0"); expect_error "top=0" 400 "top"
code=$(post "${clips[0]}" "?top=abc"); expect_error "top=abc" 400 "top"
code=$(post "${clips[0]}" "?crops=2"); expect_error "crops=2" 400 "crops"
code=$(post "${clips[0]}" "?clips=1000"); expect_error "clips=1000" 400 "clips"
code=$(post "${clips[0]}" "?sampling=bogus"); expect_error "sampling" 400 "sampling"
code=$(post "${clips[0]}" "?colour=red"); expect_error "unknown parameter" 400 "unknown parameter 'colour'"
code=$(curl -s -m 10 -o "$tmp/resp" -w '%{http_code}' -F top=2 "$url/v1/classify"); expect_error "no video field" 400 "video"
code=$(curl -s -m 10 -o "$tmp/resp" -w '%{http_code}' -F video=@"${clips[0]}" -F top=-3 "$url/v1/classify"); expect_error "multipart top=-3" 400 "top"
code=$(curl -s -m 10 -o "$tmp/resp" -w '%{http_code}' -H 'Content-Type: video/mp4' --data-binary '' "$url/v1/classify"); expect_error "empty body" 400 "no video"
# a part whose Content-Disposition names no field (libmicrohttpd hands it over with no key: the
# server crashed on it before, found by tests/fuzz_serve.c)
printf -- '--bb\r\nContent-Disposition: form-data; filename="a.mp4"\r\n\r\nabc\r\n--bb--\r\n' >"$tmp/noname.body"
code=$(curl -s -m 10 -o "$tmp/resp" -w '%{http_code}' -H 'Content-Type: multipart/form-data; boundary=bb' \
    --data-binary @"$tmp/noname.body" "$url/v1/classify"); expect_error "a multipart part without a name" 400 "without a field name"
code=$(curl -s -m 10 -o "$tmp/resp" -w '%{http_code}' "$url/v1/classify"); expect_error "GET classify" 405 "POST"
code=$(curl -s -m 10 -o "$tmp/resp" -w '%{http_code}' "$url/nothing"); expect_error "unknown path" 404 "no endpoint"
head -c 1500000 /dev/zero >"$tmp/big.bin"
code=$(post "$tmp/big.bin" ""); expect_error "body over --max-body" 413 "max-body"
# a chunked body (no Content-Length) over --max-body: refused, what comes after it dropped
resp=$(timeout 20 bash -c 'exec 3<>/dev/tcp/127.0.0.1/$1
    printf "POST /v1/classify HTTP/1.1\r\nHost: t\r\nContent-Type: video/mp4\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n%x\r\n" 1100000 >&3
    head -c 1100000 /dev/zero >&3
    printf "\r\n0\r\n\r\n" >&3
    cat <&3' _ "${url##*:}")
case "$resp" in "HTTP/1.1 413"*'"error": "the video is larger than --max-body'*) ok ;;
    *) bad "chunked body over --max-body: '$(echo "$resp" | head -c 300)'" ;; esac

# a claimed Content-Length of 10 GB: refused from the headers, before any body
resp=$(timeout 20 bash -c 'exec 3<>/dev/tcp/127.0.0.1/$1
    printf "POST /v1/classify HTTP/1.1\r\nHost: t\r\nContent-Type: video/mp4\r\nContent-Length: 10737418240\r\nConnection: close\r\n\r\n" >&3
    cat <&3' _ "${url##*:}")
case "$resp" in "HTTP/1.1 413"*'"error": "Content-Length 10737418240 is above --max-body'*) ok ;;
    *) bad "10 GB Content-Length: '$(echo "$resp" | head -c 300)'" ;; esac

# a stalled client (headers and 100 of 100000 bytes, then nothing) is closed by --timeout 2,
# and the server answers others meanwhile
timeout 30 bash -c 'exec 3<>/dev/tcp/127.0.0.1/$1
    printf "POST /v1/classify HTTP/1.1\r\nHost: t\r\nContent-Type: video/mp4\r\nContent-Length: 100000\r\n\r\n" >&3
    head -c 100 /dev/zero >&3
    cat <&3 >/dev/null' _ "${url##*:}" &
stall=$!
[ "$(curl -s -m 10 "$url/health")" = '{"status": "ok"}' ] && ok || bad "/health beside a stalled client"
wait $stall
[ $? -ne 124 ] && ok || bad "a stalled client was not timed out"

# HTTP correctness (issue 39). raw REQUEST [MORE]: what the server answers to REQUEST (printf
# escapes), and to MORE sent 0.3 s later on the same connection, until it closes the connection
# (a hang is cut at 5 s). MORE comes late so that a server that closed sees none of it: a close
# with unread bytes resets the connection, and the client may lose the answer.
raw() {
    timeout 5 bash -c 'trap "" PIPE; exec 3<>/dev/tcp/127.0.0.1/$1; printf "$2" >&3
        [ -n "$3" ] && sleep 0.3 && printf "$3" >&3 2>/dev/null; cat <&3' _ "${url##*:}" "$1" "${2:-}"
}
# framing that two parsers could read two ways (RFC 9112 6.3): 400, the connection closed, and
# what follows is not run as a second request
resp=$(raw 'POST /v1/classify HTTP/1.1\r\nHost: t\r\nContent-Type: video/mp4\r\nContent-Length: 5\r\nContent-Length: 60\r\n\r\nabcde' 'GET /health HTTP/1.1\r\nHost: t\r\n\r\n')
case "$resp" in "HTTP/1.1 400"*[Cc]"onnection: close"*'two different Content-Length'*) [[ "$resp" != *"HTTP/1.1 200"* ]] && ok || bad "two Content-Lengths ran a second request: $resp" ;;
    *) bad "two Content-Lengths: '$(echo "$resp" | head -c 300)'" ;; esac
resp=$(raw 'POST /v1/classify HTTP/1.1\r\nHost: t\r\nContent-Type: video/mp4\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n' '5\r\nabcde\r\n0\r\n\r\nGET /health HTTP/1.1\r\nHost: t\r\n\r\n')
case "$resp" in "HTTP/1.1 400"*[Cc]"onnection: close"*'Content-Length and Transfer-Encoding'*) [[ "$resp" != *"HTTP/1.1 200"* ]] && ok || bad "CL + chunked ran a second request" ;;
    *) bad "Content-Length with chunked: '$(echo "$resp" | head -c 300)'" ;; esac
t0=$(date +%s%N)
resp=$(raw 'POST /v1/classify HTTP/1.1\r\nHost: t\r\nContent-Type: video/mp4\r\nTransfer-Encoding: gzip\r\n\r\nabcde')
ms=$((($(date +%s%N) - t0) / 1000000))
case "$resp" in "HTTP/1.1 501"*'only chunked'*) [ $ms -lt 2000 ] && ok || bad "Transfer-Encoding: gzip answered after $ms ms" ;;
    *) bad "Transfer-Encoding: gzip: '$(echo "$resp" | head -c 300)'" ;; esac
# every answer is valid UTF-8: a name's raw bytes and a path's become U+FFFD
code=$(post "${clips[0]}" "?name=%FF%FE")
[ "$code" = 200 ] && iconv -f UTF-8 -t UTF-8 "$tmp/resp" >/dev/null 2>&1 && grep -q '^{"video": "\\ufffd\\ufffd"' "$tmp/resp" &&
    ok || bad "name=%FF%FE: $code $(head -c 200 "$tmp/resp" | od -c | head -3)"
code=$(curl -s -m 10 -o "$tmp/resp" -w '%{http_code}' "$url/a%FFb")
[ "$code" = 404 ] && iconv -f UTF-8 -t UTF-8 "$tmp/resp" >/dev/null 2>&1 && grep -q 'no endpoint /a\\ufffdb' "$tmp/resp" &&
    ok || bad "GET /%FF: $code $(head -c 200 "$tmp/resp" | od -c | head -3)"
cp "${clips[0]}" "$tmp/$(printf 'n\xff').mp4"
code=$(curl -s -m 60 -o "$tmp/resp" -w '%{http_code}' -F "video=@$tmp/$(printf 'n\xff').mp4" "$url/v1/classify")
[ "$code" = 200 ] && iconv -f UTF-8 -t UTF-8 "$tmp/resp" >/dev/null 2>&1 && ok || bad "a raw 0xFF file name: $code"
# many query parameters: a 414 that arrives (no answer at all before: libmicrohttpd's pool was full)
q=$(for i in $(seq 2000); do printf 'top=1&'; done)
code=$(curl -s -m 5 -o "$tmp/resp" -w '%{http_code}' -H 'Content-Type: video/mp4' --data-binary @"${clips[0]}" "$url/v1/classify?$q")
expect_error "2000 query parameters" 414 "at most 64 query parameters"
q=$(for i in $(seq 63); do printf 'top=1&'; done)
code=$(post "${clips[0]}" "?$q"); [ "$code" = 200 ] && ok || bad "63 query parameters: $code"
# refused rather than joined, ignored or read loosely
code=$(curl -s -m 60 -o "$tmp/resp" -w '%{http_code}' -F "video=@${clips[0]}" -F "video=@${clips[1]}" "$url/v1/classify")
expect_error "two video fields" 400 "two multipart fields 'video'"
code=$(curl -s -m 60 -o "$tmp/resp" -w '%{http_code}' -F "video=@${clips[0]}" -F labels=a,b "$url/v1/features")
expect_error "labels to /v1/features" 400 "no labels or template"
code=$(post "${clips[0]}" "?top=%20%205"); expect_error "top=%20%205" 400 "parameter top"
code=$(post "${clips[0]}" "?top=+5"); expect_error "top=+5" 400 "parameter top"
code=$(curl -s -m 60 -o "$tmp/resp" -w '%{http_code}' -F "file=@${clips[0]}" "$url/v1/classify")
expect_error "the field 'file'" 400 "unknown field 'file': send the video as the field 'video'"
# the page may not be framed by another site
curl -s -m 10 -D "$tmp/head" -o /dev/null "$url/"
grep -qi "^Content-Security-Policy: .*frame-ancestors 'none'" "$tmp/head" && grep -qi '^X-Frame-Options: DENY' "$tmp/head" &&
    ok || bad "the page's framing headers: $(cat "$tmp/head")"
# GETs keep the connection alive, as POSTs do (the second request reuses the first's connection)
[ "$(curl -s -m 10 -o /dev/null -w '%{num_connects}\n' "$url/health" -o /dev/null "$url/v1/models" | tr '\n' ' ')" = "1 0 " ] &&
    ok || bad "GET keep-alive: a new connection for the second GET"
# a port in use: one plain message, nothing from libmicrohttpd, before any model is loaded
"$bin" serve --model $M --port "${url##*:}" >/dev/null 2>"$tmp/err"; rc=$?
[ $rc = 1 ] && grep -q "port ${url##*:} on 127.0.0.1 is in use" "$tmp/err" && ! grep -qi "bind\|serving\|listening" "$tmp/err" &&
    ok || bad "a port in use: $rc $(cat "$tmp/err")"

# after all of that: still serving, with the same answers
code=$(post "${clips[3]}" "?name=${clips[3]}")
{ echo -n "["; tr -d '\n' <"$tmp/resp"; echo "]"; } >"$tmp/got"
[ "$code" = 200 ] && cmp -s "$tmp/got" "$tmp/ref3.json" && ok || bad "after the bad requests: $code $(cat "$tmp/got")"

# ---------------------------------------------------------------------------------------------
# concurrency 8: good and bad requests at once; each good one as classify (within 2e-6 inside a
# batch), each bad one a 4xx
# ---------------------------------------------------------------------------------------------
n_req=${SERVE_REQUESTS:-48}
for r in $(seq 0 $((n_req - 1))); do
    i=$((r % ${#clips[@]}))
    if [ $((r % 6)) = 5 ]; then echo "$r bad $tmp/truncated.mp4"; else echo "$r $i ${clips[$i]}"; fi
done >"$tmp/jobs"
xargs -P 8 -L 1 bash -c 'curl -s -m 120 -o "$0/out$1" -w "%{http_code}" -H "Content-Type: video/mp4" \
    --data-binary @"$3" "$4/v1/classify" >"$0/code$1"' "$tmp" <<<"$(sed "s|\$| $url|" "$tmp/jobs")"
while read -r r i c; do
    code=$(cat "$tmp/code$r" 2>/dev/null)
    if [ "$i" = bad ]; then
        [ "$code" = 422 ] && ok || bad "concurrent bad request $r: $code"
    else
        [ "$code" = 200 ] && same_top "$tmp/out$r" "$tmp/ref$i.json" && ok ||
            bad "concurrent request $r ($c): $code $(cat "$tmp/out$r" 2>/dev/null) vs $(cat "$tmp/ref$i.json")"
    fi
done <"$tmp/jobs"

# the page at /: the file compiled in; then, in headless Chromium (tests/serve_page.sh), the page
# lists the models, takes a clip in its file input, and shows classify's labels in classify's
# order and a timeline plot; its screenshot goes to $SERVE_PAGE_PNG (default: the temporary dir)
code=$(curl -s -m 10 -o "$tmp/page" -w '%{http_code}' "$url/")
[ "$code" = 200 ] && cmp -s "$tmp/page" src/serve/page.html && ok || bad "GET /: $code"
if command -v chromium >/dev/null; then
    png=${SERVE_PAGE_PNG:-$tmp/page.png}
    want=$(grep -o '"label": "[^"]*"' "$tmp/ref0.json" | cut -d'"' -f4)
    if shown=$(timeout 120 tests/serve_page.sh "$url" "${clips[0]}" "$png" 2>"$tmp/page.err"); then
        [ -n "$want" ] && [ "$shown" = "$want" ] && ok ||
            bad "the page shows the labels '$(echo $shown)', classify '$(echo $want)'"
        # a PNG of 960 pixels by at least 400 (its IHDR: width and height, big-endian)
        size=$(od -An -tu1 -j16 -N8 "$png" | awk '{print $1*16777216+$2*65536+$3*256+$4, $5*16777216+$6*65536+$7*256+$8}')
        [ "${size% *}" = 960 ] && [ "${size#* }" -ge 400 ] && ok || bad "the screenshot $png: $size"
    else
        bad "the page in chromium: $(cat "$tmp/page.err")"
    fi
else
    echo "note: no chromium here (scripts/install-deps.sh installs it): the page is not loaded in a browser"
fi

# POST /v1/features: the very bytes of `tubelet features -o X.npy` (Accept: application/x-npy),
# for each pooling; JSON otherwise
for pool in cls mean none; do
    "$bin" features --model $M "${clips[5]}" -o "$tmp/ref_$pool.npy" --pool $pool 2>/dev/null || bad "features --pool $pool"
    code=$(curl -s -m 60 -o "$tmp/feat.npy" -w '%{http_code}' -H 'Accept: application/x-npy' \
        -F video=@"${clips[5]}" -F pool=$pool "$url/v1/features")
    [ "$code" = 200 ] && cmp -s "$tmp/feat.npy" "$tmp/ref_$pool.npy" && ok || bad "features pool=$pool: $code"
done
code=$(curl -s -m 60 -o "$tmp/resp" -w '%{http_code}' -H 'Content-Type: video/mp4' --data-binary @"${clips[5]}" "$url/v1/features")
[ "$code" = 200 ] && grep -q '^{"video": "video", "pool": "cls", "shape": \[1, 96\], "features": \[-\?[0-9]' "$tmp/resp" &&
    [ "$(grep -o ', ' "$tmp/resp" | wc -l)" = $((4 + 95)) ] && ok || bad "features as JSON: $code $(head -c 300 "$tmp/resp")"
code=$(curl -s -m 60 -o "$tmp/resp" -w '%{http_code}' -H 'Content-Type: video/mp4' --data-binary @"${clips[5]}" "$url/v1/features?clips=2")
expect_error "features clips=2" 400 "one view"
code=$(curl -s -m 60 -o "$tmp/resp" -w '%{http_code}' -H 'Content-Type: video/mp4' --data-binary @"${clips[5]}" "$url/v1/features?pool=max")
expect_error "features pool=max" 400 "pool"

# POST /v1/timeline: the windows of `tubelet timeline --json` (which packs its weights: scores
# within 2e-6), the same starts and ends
if command -v ffmpeg >/dev/null; then
    for c in "${clips[@]}"; do echo "file '$PWD/$c'"; done >"$tmp/list.txt"
    ffmpeg -v error -f concat -safe 0 -i "$tmp/list.txt" -c copy "$tmp/long.mp4" || bad "ffmpeg concat"
    "$bin" timeline --model $M "$tmp/long.mp4" --json --window 1 --stride 0.5 --top 2 >"$tmp/ref_tl" 2>/dev/null
    code=$(curl -s -m 60 -o "$tmp/resp" -w '%{http_code}' -H 'Content-Type: video/mp4' \
        --data-binary @"$tmp/long.mp4" "$url/v1/timeline?window=1&step=0.5s&top=2")
    [ "$code" = 200 ] && [ "$(grep -o '"start": [0-9.]*, "end": [0-9.]*' "$tmp/resp")" = \
        "$(grep -o '"start": [0-9.]*, "end": [0-9.]*' "$tmp/ref_tl")" ] &&
        [ "$(grep -o '"start"' "$tmp/ref_tl" | wc -l)" -gt 10 ] && same_top "$tmp/resp" "$tmp/ref_tl" && ok ||
        bad "timeline: $code $(head -c 400 "$tmp/resp") vs $(head -c 400 "$tmp/ref_tl")"
    code=$(curl -s -m 60 -o "$tmp/resp" -w '%{http_code}' -H 'Content-Type: video/mp4' \
        --data-binary @"$tmp/long.mp4" "$url/v1/timeline?window=-1")
    expect_error "timeline window=-1" 400 "window"
    code=$(curl -s -m 60 -o "$tmp/resp" -w '%{http_code}' -H 'Content-Type: video/mp4' \
        --data-binary @"$tmp/truncated.mp4" "$url/v1/timeline")
    [ "$code" = 422 ] && ok || bad "timeline of a truncated video: $code $(cat "$tmp/resp")"
else
    bad "the ffmpeg CLI is needed (scripts/install-deps.sh)"
fi

# the metrics count what happened
curl -s -m 10 "$url/metrics" >"$tmp/metrics"
grep -q '^tubelet_requests_total{endpoint="classify",code="200"} [0-9]' "$tmp/metrics" &&
    grep -q '^tubelet_requests_total{endpoint="classify",code="413"} 3$' "$tmp/metrics" &&
    grep -q '^tubelet_batch_size_count [1-9]' "$tmp/metrics" &&
    grep -q '^tubelet_request_duration_seconds_bucket{le="+Inf"} [1-9]' "$tmp/metrics" &&
    grep -q '^tubelet_queue_depth 0$' "$tmp/metrics" &&
    grep -q '^tubelet_clips_total [1-9]' "$tmp/metrics" &&
    grep -q '^tubelet_model_seconds_total [0-9.]*$' "$tmp/metrics" && ok ||
    bad "metrics: $(cat "$tmp/metrics")"

# ---------------------------------------------------------------------------------------------
# a zero-shot model (X-CLIP): labels and template, as `classify --labels`; the label sets'
# cache gives the same bytes again; the refusals
# ---------------------------------------------------------------------------------------------
grep -q '"name": "xclip", "family": "[^"]*", .*"labels": \[\], "zero_shot": true}' "$tmp/models" &&
    grep -q '"labels": \["move_right", "move_left", "move_down", "move_up"\], "zero_shot": false' "$tmp/models" &&
    ok || bad "/v1/models zero_shot: $(cat "$tmp/models")"
zc=$tmp/c64.mp4
ffmpeg -v error -f lavfi -i testsrc=size=64x48:rate=25 -frames:v 64 -pix_fmt yuv420p $zc ||
    bad "ffmpeg could not make the clip"
"$bin" classify --model $X --labels "cat, falling,forklift" --template "a video of {}" --top 3 \
    --json $zc >"$tmp/zref.json" 2>/dev/null || bad "classify --labels $zc"
zq="?model=xclip&top=3&name=$zc&labels=cat,%20falling,forklift&template=a%20video%20of%20%7B%7D"
for round in first cached; do
    code=$(post $zc "$zq")
    { echo -n "["; tr -d '\n' <"$tmp/resp"; echo "]"; } >"$tmp/got"
    [ "$code" = 200 ] && cmp -s "$tmp/got" "$tmp/zref.json" && ok ||
        bad "zero-shot classify ($round): $code $(cat "$tmp/got") vs $(cat "$tmp/zref.json")"
done
code=$(curl -s -m 60 -o "$tmp/resp" -w '%{http_code}' -F "video=@$zc" -F model=xclip -F top=3 \
    -F "name=$zc" -F "labels=cat, falling,forklift" -F "template=a video of {}" "$url/v1/classify")
{ echo -n "["; tr -d '\n' <"$tmp/resp"; echo "]"; } >"$tmp/got"
[ "$code" = 200 ] && cmp -s "$tmp/got" "$tmp/zref.json" && ok ||
    bad "zero-shot multipart: $code $(cat "$tmp/got") vs $(cat "$tmp/zref.json")"
"$bin" timeline --model $X --labels "cat,falling,forklift" --json --window 1 --stride 0.5 \
    --top 2 $zc >"$tmp/zref_tl" 2>/dev/null || bad "timeline --labels $zc"
code=$(curl -s -m 60 -o "$tmp/resp" -w '%{http_code}' -H 'Content-Type: video/mp4' \
    --data-binary @$zc "$url/v1/timeline?model=xclip&labels=cat,falling,forklift&window=1&step=0.5&top=2")
[ "$code" = 200 ] && [ "$(grep -o '"start"' "$tmp/zref_tl" | wc -l)" -ge 4 ] &&
    same_top "$tmp/resp" "$tmp/zref_tl" && ok ||
    bad "zero-shot timeline: $code $(head -c 300 "$tmp/resp") vs $(head -c 300 "$tmp/zref_tl")"
code=$(post $zc "?model=xclip"); expect_error "zero-shot without labels" 400 "parameter labels"
code=$(post $zc "?labels=a,b"); expect_error "labels for a classifier" 400 "own labels"
code=$(post $zc "?model=xclip&labels=a,%20,b"); expect_error "an empty label" 422 "label 2 is empty"
many=$(seq -s, 257)
code=$(post $zc "?model=xclip&labels=$many"); expect_error "257 labels" 422 "more than 256"
long=$(head -c 9000 /dev/zero | tr '\0' a)
code=$(curl -s -m 60 -o "$tmp/resp" -w '%{http_code}' -F "video=@$zc" -F model=xclip \
    -F "labels=$long" "$url/v1/classify"); expect_error "labels of 9000 bytes" 413 "longer than"
code=$(post $zc "?model=xclip&labels=$(head -c 300 /dev/zero | tr '\0' a)%20$(head -c 300 /dev/zero | tr '\0' b)")
expect_error "a label longer than the context" 422 "context"
code=$(post $zc "?model=xclip&labels=a&template=no%20braces"); expect_error "template without {}" 400 "template"
# a label cut at 100 bytes for the message, inside a character (a, then é é ...): still UTF-8
code=$(post $zc "?model=xclip&labels=a$(for i in $(seq 200); do printf '%%C3%%A9'; done)")
[ "$code" = 422 ] && iconv -f UTF-8 -t UTF-8 "$tmp/resp" >/dev/null 2>&1 && grep -q 'context' "$tmp/resp" &&
    ok || bad "a long label's message: $code $(head -c 300 "$tmp/resp")"
# memory stays flat: the peak RSS after many requests is within 20 MB of its level after the
# first ones (the normal build only: ASan's quarantine holds freed memory on purpose)
if [[ "$bin" != *asan* ]]; then
    burst() { # N requests of every clip at concurrency 8
        for r in $(seq "$1"); do printf '%s\n' "${clips[@]}"; done | head -n "$1" |
            xargs -P 8 -I{} curl -s -m 60 -o /dev/null -H 'Content-Type: video/mp4' -H 'Expect:' \
                --data-binary @{} "$url/v1/classify"
    }
    burst 100
    hwm0=$(awk '/^VmHWM/ {print $2}' /proc/$pid/status)
    burst "${SERVE_MEMORY_REQUESTS:-400}"
    hwm1=$(awk '/^VmHWM/ {print $2}' /proc/$pid/status)
    [ -n "$hwm0" ] && [ -n "$hwm1" ] && [ $((hwm1 - hwm0)) -le 20480 ] && ok ||
        bad "peak RSS grew from $hwm0 kB to $hwm1 kB over ${SERVE_MEMORY_REQUESTS:-400} requests"
    echo "serve peak RSS: $hwm0 kB after 100 requests, $hwm1 kB after ${SERVE_MEMORY_REQUESTS:-400} more"
else
    echo "  peak RSS flat over many requests: skipped in the sanitizer build (ASan's quarantine holds freed memory): 1 check fewer"
fi
stop_server
[ $rc = 0 ] && ok || bad "SIGTERM: exit $rc: $(tail -5 "$tmp/main.log")"

# ---------------------------------------------------------------------------------------------
# dynamic batching for sure: the first request waits up to 5 s for three more (admitted, on
# their way), so the four share a forward pass, and each answer is still classify's (scores
# within 2e-6); a lone request does not wait
# ---------------------------------------------------------------------------------------------
start batch --max-batch 4 --max-wait-ms 5000 --queue 8
curls=()
for i in 0 1 2 3; do
    curl -s -m 60 -o "$tmp/batch$i" -H 'Content-Type: video/mp4' --data-binary @"${clips[$i]}" \
        "$url/v1/classify" &
    curls+=($!)
done
wait "${curls[@]}"
for i in 0 1 2 3; do
    same_top "$tmp/batch$i" "$tmp/ref$i.json" && ok || bad "batched ${clips[$i]}: $(cat "$tmp/batch$i")"
done
curl -s -m 10 "$url/metrics" >"$tmp/metrics"
n=$(awk '/^tubelet_batch_size_count/ {print $2}' "$tmp/metrics")
sum=$(awk '/^tubelet_batch_size_sum/ {print $2}' "$tmp/metrics")
[ "$sum" = 4 ] && [ "$n" -lt 4 ] && ok || bad "4 requests in $n forward passes: $(grep batch_size "$tmp/metrics")"
# a lone request waits for nobody: with no other request on its way, its batch runs at once
# instead of after --max-wait-ms (5 s here; the bound below is a hang check, not a timing)
code=$(curl -s -m 3 -o "$tmp/lone" -w '%{http_code}' -H 'Content-Type: video/mp4' \
    --data-binary @"${clips[0]}" "$url/v1/classify")
[ "$code" = 200 ] && same_top "$tmp/lone" "$tmp/ref0.json" && ok \
    || bad "a lone request under --max-wait-ms 5000: $code (waited for a batch that nobody joins?)"
stop_server
[ $rc = 0 ] && ok || bad "SIGTERM: exit $rc: $(tail -5 "$tmp/batch.log")"

# ---------------------------------------------------------------------------------------------
# --max-side and --max-frames bound the decoding on every endpoint (issue 39): a video that
# declares a larger side is refused before it is decoded, one that switches to a larger size at
# its first such frame, and a timeline counts the frames it decodes, not its windows' starts
# ---------------------------------------------------------------------------------------------
start limits --max-side 100 --max-frames 100 --log-format json
ffmpeg -v error -f lavfi -i testsrc=size=64x64:rate=25 -t 10 -pix_fmt yuv420p "$tmp/long10.mp4" ||
    bad "ffmpeg could not make the 10 s clip"
ffmpeg -v error -f lavfi -i testsrc=size=128x128:rate=25 -frames:v 8 -pix_fmt yuv420p "$tmp/big.mp4" &&
    ffmpeg -v error -f lavfi -i testsrc=size=64x64:rate=25 -t 0.6 -c:v libx264 -pix_fmt yuv420p -f mpegts "$tmp/a.ts" &&
    ffmpeg -v error -f lavfi -i testsrc=size=128x128:rate=25 -t 0.6 -c:v libx264 -pix_fmt yuv420p -f mpegts "$tmp/b.ts" ||
    bad "ffmpeg could not make the clips"
cat "$tmp/a.ts" "$tmp/b.ts" >"$tmp/switch.ts" # declares 64x64, switches to 128x128
for ep in classify features timeline; do
    code=$(curl -s -m 60 -o "$tmp/resp" -w '%{http_code}' -H 'Content-Type: video/mp4' \
        --data-binary @"$tmp/big.mp4" "$url/v1/$ep")
    expect_error "128x128 to $ep under --max-side 100" 422 "frames of 128x128, above the limit of 100"
    code=$(curl -s -m 60 -o "$tmp/resp" -w '%{http_code}' -H 'Content-Type: video/mp2t' \
        --data-binary @"$tmp/switch.ts" "$url/v1/$ep")
    expect_error "64x64 then 128x128 to $ep under --max-side 100" 422 "frames of 128x128, above the limit of 100"
done
code=$(post "${clips[0]}" "")
[ "$code" = 200 ] && ok || bad "64x64 under --max-side 100: $code $(cat "$tmp/resp")"
for q in "step=1e6" "window=1000&step=1000" ""; do # 250 frames, windows far apart or not
    code=$(curl -s -m 60 -o "$tmp/resp" -w '%{http_code}' -H 'Content-Type: video/mp4' \
        --data-binary @"$tmp/long10.mp4" "$url/v1/timeline?$q")
    expect_error "a timeline of 250 frames ($q) under --max-frames 100" 422 "more than 100 frames"
done
code=$(post "$tmp/long10.mp4" ""); expect_error "classify of 250 frames under --max-frames 100" 422 "250 frames, more than the limit of 100"
grep -q '^{"client": "127.0.0.1", "method": "POST", "path": "/v1/classify", "status": 422, "bytes": [0-9]*, "ms": [0-9.]*, "model": "motion-vivit"}$' "$tmp/limits.log" &&
    ok || bad "--log-format json: $(tail -3 "$tmp/limits.log")"
stop_server
[ $rc = 0 ] && ok || bad "SIGTERM: exit $rc: $(tail -5 "$tmp/limits.log")"

# ---------------------------------------------------------------------------------------------
# slow clients, all from 127.0.0.1 (issue 39): hundreds of connections that trickle their headers
# or their bodies cost a socket each; /health and classify answer meanwhile; the sweeper closes
# them at --header-timeout (headers) or for a body under --min-rate. Before, 32 such connections
# (a thread each, --queue + 16 at most) stopped everything, and slow bodies held the queue.
# ---------------------------------------------------------------------------------------------
# slow_clients N KIND SECONDS: N connections from one bash that trickle for SECONDS (KIND
# headers: a header line each 0.2 s, never the end of them; body: a POST whose body comes a byte
# each 0.2 s), then print how many the server has closed (read sees the end at once)
slow_clients() {
    timeout $(($3 + 30)) bash -c 'trap "" PIPE
        n=$1 kind=$2 secs=$3 port=$4 fds=()
        for i in $(seq $n); do
            exec {fd}<>/dev/tcp/127.0.0.1/$port || break
            fds+=($fd)
            if [ $kind = headers ]; then printf "GET /v1/models HTTP/1.1\r\nHost: t\r\n" >&$fd
            else printf "POST /v1/classify HTTP/1.1\r\nHost: t\r\nContent-Type: video/mp4\r\nContent-Length: 100000\r\n\r\n" >&$fd; fi
        done
        end=$((SECONDS + secs))
        while [ $SECONDS -lt $end ]; do
            for fd in "${fds[@]}"; do
                if [ $kind = headers ]; then printf "X-a: b\r\n" >&$fd; else printf x >&$fd; fi
            done 2>/dev/null
            sleep 0.2
        done
        closed=0
        for fd in "${fds[@]}"; do
            read -r -t 0.05 -u $fd line 2>/dev/null
            [ $? -le 128 ] && closed=$((closed + 1))
        done
        echo "${#fds[@]} $closed"' _ "$1" "$2" "$3" "${url##*:}"
}
start slow --header-timeout 3 --min-rate 1000 --timeout 10 --queue 4
slow_clients 300 headers 5 >"$tmp/slow.out" &
slow=$!
sleep 1
for i in 1 2 3; do # while the 300 are open (their deadline is 3 s)
    code=$(curl -s -m 2 -o "$tmp/resp" -w '%{http_code}' "$url/health")
    [ "$code" = 200 ] && ok || bad "/health beside 300 slow headers: $code"
    sleep 0.3
done
code=$(post "${clips[0]}" "")
[ "$code" = 200 ] && ok || bad "classify beside 300 slow headers: $code $(cat "$tmp/resp")"
wait $slow
read -r n closed <"$tmp/slow.out"
[ "$n" = 300 ] && [ "$closed" = 300 ] && ok ||
    bad "300 slow headers past --header-timeout 3: $closed of $n closed"
slow_clients 16 body 5 >"$tmp/slow.out" &
slow=$!
sleep 1
code=$(post "${clips[1]}" "") # 16 slow bodies hold no place in a queue of 4
[ "$code" = 200 ] && ok || bad "classify beside 16 slow bodies: $code $(cat "$tmp/resp")"
wait $slow
read -r n closed <"$tmp/slow.out"
[ "$n" = 16 ] && [ "$closed" = 16 ] && ok || bad "16 bodies at 5 bytes/s under --min-rate 1000: $closed of $n closed"
curl -s -m 10 "$url/metrics" >"$tmp/metrics"
grep -q '^tubelet_connections_cut_total{reason="headers"} 300$' "$tmp/metrics" &&
    grep -q '^tubelet_connections_cut_total{reason="body"} 16$' "$tmp/metrics" &&
    grep -q '^tubelet_connections 1$' "$tmp/metrics" && ok || bad "the sweeper's metrics: $(grep connections "$tmp/metrics")"
# the access log: a line per request (client, method, path, status, bytes, ms, model)
grep -q '^127.0.0.1 POST /v1/classify 200 [0-9]* B [0-9.]* ms motion-vivit$' "$tmp/slow.log" &&
    grep -q '^127.0.0.1 GET /health 200 17 B [0-9.]* ms -$' "$tmp/slow.log" && ok ||
    bad "the access log: $(tail -5 "$tmp/slow.log")"
stop_server
[ $rc = 0 ] && ok || bad "SIGTERM after slow clients: exit $rc: $(tail -5 "$tmp/slow.log")"

# ---------------------------------------------------------------------------------------------
# --min-rate judges the rate, not the length of an upload (issue 39): with --header-timeout 1 and
# --min-rate 200, a body trickled at ~500 bytes/s for ~4 s (well past the header timeout) is
# answered 200, as classify would; one at ~100 bytes/s is cut without an answer soon after 1 s
# ---------------------------------------------------------------------------------------------
# trickle_post FILE CHUNK: FILE to /v1/classify as CHUNK bytes each 0.25 s; prints the answer's
# status code (or "cut": closed with no answer) and the seconds from the headers to it
trickle_post() {
    timeout 60 bash -c 'trap "" PIPE
        f=$1 chunk=$2 port=$3 size=$(stat -c %s "$1")
        exec {fd}<>/dev/tcp/127.0.0.1/$port || { echo "noconnect 0"; exit; }
        printf "POST /v1/classify HTTP/1.1\r\nHost: t\r\nContent-Type: video/mp4\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" $size >&$fd
        t0=$(date +%s.%N) off=0
        while [ $off -lt $size ]; do
            tail -c +$((off + 1)) "$f" | head -c $chunk >&$fd 2>/dev/null || break
            off=$((off + chunk))
            [ $off -lt $size ] && sleep 0.25
        done
        line=""
        read -r -t 30 -u $fd line
        code=$(printf "%s" "$line" | sed -n "s|^HTTP/1.1 \([0-9]*\).*|\1|p")
        echo "${code:-cut} $(awk -v a="$t0" -v b="$(date +%s.%N)" "BEGIN { printf \"%.2f\", b - a }")"' _ "$1" "$2" "${url##*:}"
}
start rate --header-timeout 1 --min-rate 200 --timeout 10
fair=${clips[0]}
trickle_post "$fair" 125 >"$tmp/fair.out" & # ~500 B/s: 2.5 x the minimum
fair_pid=$!
trickle_post "$fair" 25 >"$tmp/slow1.out" &  # ~100 B/s: half the minimum
slow_pid=$!
wait $fair_pid $slow_pid
read -r code secs <"$tmp/fair.out"
[ "$code" = 200 ] && awk -v s="$secs" 'BEGIN { exit !(s > 2) }' && ok ||
    bad "a fair-rate upload (~500 B/s > --min-rate 200, $(stat -c %s "$fair") bytes): $code after $secs s, want 200 after > 2 s"
read -r code secs <"$tmp/slow1.out"
[ "$code" = cut ] && awk -v s="$secs" 'BEGIN { exit !(s < 3) }' && ok ||
    bad "a slow upload (~100 B/s < --min-rate 200): $code after $secs s, want cut within 3 s"
curl -s -m 10 "$url/metrics" >"$tmp/metrics"
grep -q '^tubelet_connections_cut_total{reason="body"} 1$' "$tmp/metrics" && ok ||
    bad "--min-rate: cut $(grep 'cut_total{reason="body"}' "$tmp/metrics"), want 1"
grep -c '^127.0.0.1 POST /v1/classify 200 ' "$tmp/rate.log" | grep -qx 1 && ok ||
    bad "--min-rate: the fair upload's access log line: $(tail -3 "$tmp/rate.log")"
stop_server
[ $rc = 0 ] && ok || bad "SIGTERM after --min-rate: exit $rc: $(tail -5 "$tmp/rate.log")"

# ---------------------------------------------------------------------------------------------
# --api-key, --cors, --queue 1 and the drain on SIGTERM
# ---------------------------------------------------------------------------------------------
start key --api-key s3cret --cors https://app.example --queue 1 --timeout 20 --min-rate 0
code=$(curl -s -m 10 -o "$tmp/resp" -w '%{http_code}' "$url/health"); [ "$code" = 200 ] && ok || bad "/health wants no key: $code"
code=$(curl -s -m 10 -o "$tmp/resp" -w '%{http_code}' "$url/v1/models"); expect_error "no key" 401 "API key"
code=$(curl -s -m 10 -o "$tmp/resp" -w '%{http_code}' -H 'Authorization: Bearer wrong' "$url/v1/models"); expect_error "wrong key" 401 "API key"
code=$(curl -s -m 10 -o "$tmp/resp" -w '%{http_code}' -H 'Authorization: Bearer s3cret' "$url/metrics"); [ "$code" = 200 ] && ok || bad "/metrics with the key: $code"
resp=$(timeout 5 bash -c 'exec 3<>/dev/tcp/127.0.0.1/$1
    printf "GET /v1/models HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer s3cret\r\nAuthorization: Bearer wrong\r\nConnection: close\r\n\r\n" >&3
    cat <&3' _ "${url##*:}")
case "$resp" in "HTTP/1.1 401"*) ok ;; *) bad "two Authorization headers: '$(echo "$resp" | head -c 200)'" ;; esac
curl -s -m 10 -D "$tmp/head" -o /dev/null -H 'Authorization: Bearer s3cret' "$url/v1/models"
grep -qi '^Access-Control-Allow-Origin: https://app.example' "$tmp/head" && ok || bad "CORS header: $(cat "$tmp/head")"

# a long request (a timeline of 250 windows, some seconds) holds the only place in the queue:
# the next gets 503; an upload still on its way holds none (issue 39: a slow body held a place)
# long_timeline OUT [VIDEO]: the long request in the background ($long its pid), once admitted
long_timeline() {
    curl -s -m 120 -o "$1" -w '%{http_code}' -H 'Authorization: Bearer s3cret' -H 'Content-Type: video/mp4' \
        --data-binary @"${2:-$tmp/long10.mp4}" "$url/v1/timeline?window=0.32&step=0.04" >"$1.code" &
    long=$!
    for i in $(seq 100); do # until the server has admitted it (10 s at most)
        curl -s -m 5 -H 'Authorization: Bearer s3cret' "$url/metrics" | grep -q '^tubelet_queue_depth 1$' && break
        sleep 0.1
    done
}
exec 3<>/dev/tcp/127.0.0.1/"${url##*:}"
printf "POST /v1/classify HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer s3cret\r\nContent-Type: video/mp4\r\nContent-Length: 1000000\r\nConnection: close\r\n\r\n" >&3
head -c 1000 "${clips[0]}" >&3
long_timeline "$tmp/long.json"
curl -s -m 10 -D "$tmp/head" -o "$tmp/resp" -H 'Authorization: Bearer s3cret' -H 'Content-Type: video/mp4' \
    --data-binary @"${clips[1]}" "$url/v1/classify" >/dev/null
code=$(sed -n '1s/^HTTP\/1.1 \([0-9]*\).*/\1/p' "$tmp/head")
expect_error "queue full" 503 "queue is full"
grep -qi '^Retry-After: [0-9]' "$tmp/head" && ok || bad "503 without Retry-After: $(cat "$tmp/head")"
wait $long
[ "$(cat "$tmp/long.json.code")" = 200 ] && ok || bad "the long timeline: $(cat "$tmp/long.json.code")"
exec 3<&-

# SIGTERM while a request is mid-body: no new connections, it finishes (admitted during the
# drain), exit 0
exec 3<>/dev/tcp/127.0.0.1/"${url##*:}"
size=$(stat -c %s "${clips[0]}")
printf "POST /v1/classify?name=held HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer s3cret\r\nContent-Type: video/mp4\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" "$size" >&3
head -c 1000 "${clips[0]}" >&3
for i in $(seq 100); do # until the server has its headers (10 s at most)
    curl -s -m 5 -H 'Authorization: Bearer s3cret' "$url/metrics" | grep -q '^tubelet_uploading 1$' && break
    sleep 0.1
done
kill -TERM $pid
for i in $(seq 100); do grep -q '^SIGTERM' "$tmp/key.log" && break; sleep 0.1; done
curl -s -m 5 "$url/health" >/dev/null 2>&1 && bad "a new connection accepted after SIGTERM" || ok
tail -c +1001 "${clips[0]}" >&3
resp=$(timeout 60 cat <&3)
exec 3<&-
case "$resp" in "HTTP/1.1 200"*'{"video": "held", "top": [{"label": "move_'*) ok ;;
    *) bad "the upload in flight at SIGTERM: '$(echo "$resp" | head -c 300)'" ;; esac
for i in $(seq 600); do kill -0 $pid 2>/dev/null || break; sleep 0.1; done
kill -0 $pid 2>/dev/null && kill -9 $pid
wait $pid
rc=$?
[ $rc = 0 ] && ok || bad "drained SIGTERM: exit $rc: $(tail -5 "$tmp/key.log")"

# --drain is a bound: a request still decoding when it ends is interrupted and answered 503, and
# the server exits within about a second of it (it waited for the whole decode before)
start drain --drain 1 --api-key s3cret
# 60 s of video: still running a second after SIGTERM on a quiet, fast machine (10 s was not)
ffmpeg -v error -f lavfi -i testsrc=size=64x64:rate=25 -t 60 -pix_fmt yuv420p "$tmp/long60.mp4"
long_timeline "$tmp/long3.json" "$tmp/long60.mp4"
t0=$(date +%s%N)
stop_server
ms=$((($(date +%s%N) - t0) / 1000000))
wait $long
[ $rc = 0 ] && [ $ms -lt 4000 ] && ok || bad "--drain 1: exit $rc after $ms ms: $(tail -3 "$tmp/drain.log")"
code=$(cat "$tmp/long3.json.code"); cp "$tmp/long3.json" "$tmp/resp"
expect_error "a request cut off by --drain" 503 "shutting down"

# ---------------------------------------------------------------------------------------------
# the command line
# ---------------------------------------------------------------------------------------------
"$bin" serve --help | grep -q -- '--max-batch' && ok || bad "serve --help"
"$bin" serve --port 0 >/dev/null 2>"$tmp/err"; rc=$?
[ $rc = 2 ] && grep -q "needs --model" "$tmp/err" && ok || bad "serve without --model: $rc $(cat "$tmp/err")"
OMPI_COMM_WORLD_SIZE=2 "$bin" serve --model $M --port 0 >/dev/null 2>"$tmp/err"; rc=$?
[ $rc = 2 ] && grep -q "without mpirun" "$tmp/err" && ok || bad "under mpirun: $rc $(cat "$tmp/err")"
"$bin" serve --model $M --model $M --port 0 >/dev/null 2>"$tmp/err"; rc=$?
[ $rc = 1 ] && grep -q "two models are named 'motion-vivit'" "$tmp/err" && ok || bad "two names: $rc $(cat "$tmp/err")"
"$bin" serve --model /nonexistent --port 0 >/dev/null 2>"$tmp/err"; rc=$?
[ $rc = 1 ] && grep -q "/nonexistent" "$tmp/err" && ! grep -q "listening" "$tmp/err" && ok ||
    bad "a missing model (no 'listening on' before it fails): $rc $(cat "$tmp/err")"
finish
