#!/usr/bin/env bash
# Drives tubelet serve's page (/) in headless Chromium, as a user would: loads it, waits for the
# model list, chooses VIDEO in the page's file input, waits (60 s at most) for the page to show
# its top labels and plot its timeline, and saves a screenshot as PNG. Prints the labels the page
# shows, one per line (the test compares the first with `tubelet classify`); exits 1 with a
# message on stderr if the page shows an error, shows no labels, plots nothing, or times out.
# usage: tests/serve_page.sh URL VIDEO PNG [WINDOW STEP]   (WINDOW, STEP: the page's timeline
#        window and step in seconds; used for docs/serve-page.png)
#
# How: Debian's chromium with --remote-debugging-pipe speaks the DevTools protocol (CDP) as JSON
# messages ended by a NUL byte on its file descriptors 3 (in) and 4 (out). Bash handles that
# with two FIFOs, `printf '%s\0'` and `read -d ''`, so the test needs no WebSocket client, no
# Node, no Python and no npm package: chromium, bash and coreutils, all Debian packages. The
# file goes in through CDP's DOM.setFileInputFiles, which sets the input's files and fires its
# change event as a user's choice does. Every read is bounded (read -t).
set -u
[ $# = 3 ] || [ $# = 5 ] || { echo "usage: $0 URL VIDEO PNG [WINDOW STEP]" >&2; exit 2; }
url=${1%/} video=$(realpath "$2") png=$3 window=${4:-} step=${5:-}
die() { echo "serve_page.sh: $*" >&2; exit 1; }
command -v chromium >/dev/null || die "no chromium (scripts/install-deps.sh installs it)"
case "$video$window$step" in *[\"\\]*) die "a quote or backslash in the arguments" ;; esac
[ -f "$video" ] || die "no file $video"

dir=$(mktemp -d)
cpid=""
cleanup() {
    exec 5>&- 6<&- 2>/dev/null
    if [ -n "$cpid" ]; then
        for _ in $(seq 50); do kill -0 "$cpid" 2>/dev/null || break; sleep 0.1; done
        kill -TERM "$cpid" 2>/dev/null
        for _ in $(seq 50); do kill -0 "$cpid" 2>/dev/null || break; sleep 0.1; done
        kill -9 "$cpid" 2>/dev/null
        wait "$cpid" 2>/dev/null
    fi
    rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 1' TERM INT HUP # (timeout's SIGTERM too: the EXIT trap stops chromium)
mkfifo "$dir/in" "$dir/out"
# --no-sandbox: CI runs as root, where Chromium's sandbox refuses to start; the page is ours and
# loaded from 127.0.0.1. A fresh profile in $dir; no GPU; /tmp instead of a small /dev/shm.
chromium --headless --no-sandbox --disable-gpu --disable-dev-shm-usage --user-data-dir="$dir/profile" \
    --no-first-run --disable-extensions --disable-component-update --disable-sync --hide-scrollbars \
    --window-size=960,760 --remote-debugging-pipe about:blank \
    3<"$dir/in" 4>"$dir/out" >"$dir/chromium.log" 2>&1 &
cpid=$!
exec 5>"$dir/in" 6<"$dir/out"

# cdp METHOD PARAMS: sends a command (to the page's session once $session is set) and puts the
# answer to it in $reply, skipping the events in between; fails on an error answer or after 30 s
id=0 session=""
cdp() {
    id=$((id + 1))
    printf '{"id":%d,"method":"%s","params":%s%s}\0' $id "$1" "$2" \
        "${session:+,\"sessionId\":\"$session\"}" >&5 || die "chromium is gone: $(tail -5 "$dir/chromium.log")"
    while read -r -d '' -t 30 reply <&6; do
        case "$reply" in "{\"id\":$id,\"error\""*) die "$1: $reply" ;; "{\"id\":$id,"*) return 0 ;; esac
    done
    die "no answer to $1 within 30 s: $(tail -5 "$dir/chromium.log")"
}
# field NAME: the string field NAME of $reply (the first one)
field() { sed -n "s/.*\"$1\":\"\(\([^\"\\\\]\|\\\\.\)*\)\".*/\1/p" <<<"$reply" | head -n 1; }
# js EXPRESSION: evaluates EXPRESSION (no double quotes in it) in the page; $value: its string value
js() { cdp Runtime.evaluate "{\"expression\":\"String(${1//$'\n'/ })\",\"returnByValue\":true}"; value=$(field value); }

cdp Target.createTarget "{\"url\":\"$url/\"}"
target=$(field targetId)
cdp Target.attachToTarget "{\"targetId\":\"$target\",\"flatten\":true}"
session=$(field sessionId)
[ -n "$session" ] || die "no session: $reply"

# the page has loaded and listed the models (10 s at most)
for _ in $(seq 100); do
    js "document.readyState == 'complete' && document.getElementById('model').options.length > 0"
    [ "$value" = true ] && break
    sleep 0.1
done
if [ "$value" != true ]; then
    js "document.getElementById('status').textContent"
    die "the page lists no model after 10 s: '$value'"
fi
[ -z "$window" ] || js "document.getElementById('window').value = '$window'"
[ -z "$step" ] || js "document.getElementById('step').value = '$step'"

# choose the file, as a user would in the file dialog
cdp Runtime.evaluate '{"expression":"document.getElementById(\"file\")"}'
input=$(field objectId)
cdp DOM.setFileInputFiles "{\"files\":[\"$video\"],\"objectId\":\"$input\"}"

# the page says "NAME: N windows" once both answers are shown, or the error (60 s at most)
for _ in $(seq 600); do
    js "document.getElementById('status').className + ':' + document.getElementById('status').textContent"
    case "$value" in error:*|*window|*windows) break ;; esac
    sleep 0.1
done
case "$value" in error:*) die "the page says ${value#error:}" ;; :*window|:*windows) ;;
    *) die "no answer on the page within 60 s: '${value#*:}'" ;; esac
js "[...document.querySelectorAll('#labels td.label')].map((x) => x.textContent).join(' ')"
labels=$value
[ -n "$labels" ] || die "the page shows no labels"
# the timeline is drawn: pixels in the curves' colours (the frame and the text are grey)
js "(() => { const c = document.getElementById('plot'); if (c.hidden) return 0;
    const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data; let n = 0;
    for (let i = 0; i < d.length; i += 4) if (d[i + 3] && (d[i] != d[i + 1] || d[i + 1] != d[i + 2])) n++;
    return n; })()"
[ "${value:-0}" -gt 0 ] 2>/dev/null || die "no timeline plotted (${value:-?} coloured pixels)"

js "Math.ceil(document.body.getBoundingClientRect().bottom) + 16" # the page's height, to crop to
cdp Page.captureScreenshot "{\"format\":\"png\",\"clip\":{\"x\":0,\"y\":0,\"width\":960,\"height\":${value:-760},\"scale\":1}}"
field data | base64 -d >"$png" || die "screenshot: $(head -c 300 <<<"$reply")"
[ "$(head -c 4 "$png" | od -An -c | tr -d ' ')" = '211PNG' ] || die "the screenshot is not a PNG"
session=""
cdp Browser.close '{}'
tr ' ' '\n' <<<"$labels"
