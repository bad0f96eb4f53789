#!/usr/bin/env bash
# End-to-end tests of the video commands (classify, preprocess, features, timeline) and their bad
# input. Shell, awk and the ffmpeg CLI only (no Python): media are generated into a temporary
# directory; the references are committed fixtures:
#   tests/fixtures/pipeline/   random-weight VideoMAE / TimeSformer / ViViT directories and, per
#                              (model, video), the top-5 of transformers'
#                              pipeline("video-classification") (tools/make_pipeline_fixtures.py)
#   tests/fixtures/video/      pixel_values of the HF video processors (make_video_fixtures.py)
# usage: tests/test_video_cli.sh [build/tubelet]      prints "N passed, M failed" last
set -u
bin=${1:-build/tubelet}
cd "$(dirname "$0")/.."
P=tests/fixtures/pipeline
V=tests/fixtures/video
# ~70 short runs of tiny models: OpenMP's spin-waiting only burns CPU on a shared machine
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }
finish() { echo "$pass passed, $fail failed"; [ $fail -eq 0 ]; exit $?; }
command -v ffmpeg >/dev/null || { bad "the ffmpeg CLI is needed"; finish; }
[ -x "$bin" ] || { bad "no executable $bin"; finish; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# ---------------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------------

# JSON → one "path<TAB>value" line per scalar ([0].top[1].label), "path#<TAB>n" per array and
# "path{}<TAB>n" per object. Strings are decoded (\" \\ \/ \uXXXX; control characters stay
# escaped). Exit 1, with a message, on anything that is not exactly one valid JSON value.
cat >"$tmp/json.awk" <<'AWK'
BEGIN { for (c = 1; c < 32; c++) CTL = CTL sprintf("%c", c); HEX = "0123456789abcdef" }
{ s = s $0 "\n" }
function lex(   i, j, c, n, L, rest) {
    n = 0; i = 1; L = length(s)
    while (i <= L) {
        c = substr(s, i, 1)
        if (c == " " || c == "\t" || c == "\n" || c == "\r") { i++; continue }
        if (index("{}[]:,", c)) { tok[++n] = c; i++; continue }
        if (c == "\"") {
            for (j = i + 1; ; ) {
                if (j > L) return -i
                c = substr(s, j, 1)
                if (c == "\"") break
                if (index(CTL, c)) return -j
                if (c == "\\") {
                    c = substr(s, j + 1, 1)
                    if (c == "u") {
                        if (substr(s, j + 2, 4) !~ /^[0-9a-fA-F][0-9a-fA-F][0-9a-fA-F][0-9a-fA-F]$/) return -j
                        j += 6
                    } else if (c != "" && index("\"\\/bfnrt", c)) j += 2
                    else return -j
                } else j++
            }
            tok[++n] = substr(s, i, j - i + 1); i = j + 1; continue
        }
        rest = substr(s, i, 64)
        if (match(rest, /^-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?/)) {
            tok[++n] = substr(rest, 1, RLENGTH); i += RLENGTH; continue
        }
        if (substr(s, i, 4) == "true" || substr(s, i, 4) == "null") { tok[++n] = substr(s, i, 4); i += 4; continue }
        if (substr(s, i, 5) == "false") { tok[++n] = "false"; i += 5; continue }
        return -i
    }
    return n
}
function utf8(cp) {
    if (cp < 128) return sprintf("%c", cp)
    if (cp < 2048) return sprintf("%c%c", 192 + int(cp / 64), 128 + cp % 64)
    return sprintf("%c%c%c", 224 + int(cp / 4096), 128 + int(cp / 64) % 64, 128 + cp % 64)
}
function jdec(t,   out, i, c, L, h, cp) {
    t = substr(t, 2, length(t) - 2)
    if (!index(t, "\\")) return t
    out = ""; L = length(t)
    for (i = 1; i <= L; i++) {
        c = substr(t, i, 1)
        if (c != "\\") { out = out c; continue }
        c = substr(t, ++i, 1)
        if (c == "\"" || c == "\\" || c == "/") out = out c
        else if (c == "u") {
            h = tolower(substr(t, i + 1, 4))
            cp = (index(HEX, substr(h, 1, 1)) - 1) * 4096 + (index(HEX, substr(h, 2, 1)) - 1) * 256 + \
                 (index(HEX, substr(h, 3, 1)) - 1) * 16 + index(HEX, substr(h, 4, 1)) - 1
            out = out ((cp < 32 || (cp >= 55296 && cp < 57344)) ? "\\u" h : utf8(cp))
            i += 4
        } else out = out "\\" c
    }
    return out
}
function pval(path,   t) {
    t = tok[p]
    if (t == "{") return pobj(path)
    if (t == "[") return parr(path)
    if (t == "" || (length(t) == 1 && index("}]:,", t))) return 0
    print path "\t" (substr(t, 1, 1) == "\"" ? jdec(t) : t)
    p++
    return 1
}
function pobj(path,   n, k) {
    p++; n = 0
    if (tok[p] == "}") { p++; print path "{}\t0"; return 1 }
    while (1) {
        if (substr(tok[p], 1, 1) != "\"") return 0
        k = jdec(tok[p]); p++
        if (tok[p] != ":") return 0
        p++
        if (!pval(path "." k)) return 0
        n++
        if (tok[p] == ",") { p++; continue }
        if (tok[p] == "}") { p++; print path "{}\t" n; return 1 }
        return 0
    }
}
function parr(path,   n) {
    p++; n = 0
    if (tok[p] == "]") { p++; print path "#\t0"; return 1 }
    while (1) {
        if (!pval("" path "[" n "]")) return 0
        n++
        if (tok[p] == ",") { p++; continue }
        if (tok[p] == "]") { p++; print path "#\t" n; return 1 }
        return 0
    }
}
END {
    nt = lex()
    if (nt <= 0) { print "invalid JSON: " (nt < 0 ? "bad token at byte " (-nt) : "empty") > "/dev/stderr"; exit 1 }
    p = 1
    if (!pval("") || p != nt + 1) { print "invalid JSON: unexpected token " p " '" tok[p] "'" > "/dev/stderr"; exit 1 }
}
AWK
json() { LC_ALL=C awk -f "$tmp/json.awk" "$@"; }
# jget FLAT PATH: the value at PATH in a flattened file
jget() { LC_ALL=C awk -F'\t' -v k="$2" '$1 == k { print $2; f = 1; exit } END { exit !f }' "$1"; }

# r CMD...: runs CMD with stdout in $tmp/out, stderr in $tmp/err, status in $rc; a crash or a
# sanitizer report is a failure whatever the command was expected to do.
rc=0
r() {
    "$@" </dev/null >"$tmp/out" 2>"$tmp/err"
    rc=$?
    if [ $rc -ge 128 ] || grep -qE 'Sanitizer|runtime error|Segmentation fault|core dumped|LeakSanitizer' "$tmp/err"; then
        bad "crash or sanitizer report (exit $rc): $*"; head -n 30 "$tmp/err"
    fi
}
# expect_rc NAME WANT CMD...
expect_rc() {
    local name=$1 want=$2; shift 2
    r "$@"
    if [ $rc -eq "$want" ]; then ok; else bad "$name: exit $rc, want $want"; head -n 5 "$tmp/err"; fi
}
# check NAME CMD...: CMD succeeds
check() { local name=$1; shift; if "$@"; then ok; else bad "$name"; fi; }
not() { ! "$@"; }
# .npy version 1: 10 bytes, then a header of the length in bytes 8-9, then the data
npy_hlen() { od -An -tu2 -j8 -N2 "$1" | tr -d ' '; }
npy_data() { tail -c +$((10 + $(npy_hlen "$1") + 1)) "$1"; }
npy_header() { head -c $((10 + $(npy_hlen "$1"))) "$1" | tr -d '\000'; }
npy_bytes() { echo $(( $(stat -c %s "$1") - 10 - $(npy_hlen "$1") )); }
# same_top GOT EXPECTED: label<TAB>score lines; labels equal in order, |score diff| <= 1e-4
same_top() {
    LC_ALL=C awk -F'\t' 'NR == FNR { l[FNR] = $1; s[FNR] = $2; n = FNR; next }
        { m = FNR; if ($1 != l[FNR]) { printf "  rank %d: label \"%s\", expected \"%s\"\n", FNR, $1, l[FNR]; e = 1 }
          d = $2 - s[FNR]; if (d < 0) d = -d
          if ($2 == "" || d > 1e-4) { printf "  rank %d: score %s, expected %s\n", FNR, $2, s[FNR]; e = 1 } }
        END { if (m != n) { printf "  %d labels, expected %d\n", m, n; e = 1 } exit e }' "$2" "$1"
}
# top_of FLAT IDX: the label<TAB>score lines of video IDX of classify --json
top_of() {
    LC_ALL=C awk -F'\t' -v pre="[$2].top[" 'index($1, pre) == 1 {
            rest = substr($1, length(pre) + 1); k = rest; sub(/\].*/, "", k); f = rest; sub(/^[0-9]+\]\./, "", f)
            if (f == "label") lab[k] = $2; else if (f == "score") sc[k] = $2; if (k + 1 > n) n = k + 1 }
        END { for (k = 0; k < n; k++) print lab[k] "\t" sc[k] }' "$1"
}

# ---------------------------------------------------------------------------------------------
# media
# ---------------------------------------------------------------------------------------------
ff() { ffmpeg -nostdin -hide_banner -loglevel error -y "$@"; }
ff -f lavfi -i "testsrc2=size=160x120:rate=25,trim=end_frame=150" -pix_fmt yuv420p -c:v libx264 \
   -preset ultrafast -g 50 "$tmp/six.mp4"                                   # 6 s
ff -f lavfi -i "testsrc2=size=160x120:rate=25,trim=end_frame=1500" -pix_fmt yuv420p -c:v libx264 \
   -preset ultrafast -g 50 "$tmp/long.mp4"                                  # 60 s
ff -i "$tmp/six.mp4" -c copy -movflags +faststart "$tmp/fs.mp4"
echo "this is not a video" >"$tmp/text.mp4"
: >"$tmp/empty.mp4"
head -c 3000 "$tmp/six.mp4" >"$tmp/trunc.mp4"           # mdat first: the index (moov) is cut off
head -c $(( $(stat -c %s "$tmp/fs.mp4") * 4 / 10 )) "$tmp/fs.mp4" >"$tmp/trunc_fs.mp4"  # index kept, data cut
mkdir "$tmp/adir"
LC_ALL=C awk 'BEGIN { srand(7); for (i = 0; i < 4096; i++) printf "%c", 1 + int(rand() * 255) }' >"$tmp/noise.mp4"
ff -f lavfi -i "testsrc2=size=64x48:rate=25,trim=end_frame=5" -pix_fmt yuv420p -c:v libx264 -preset ultrafast "$tmp/five.mp4"
odd="$tmp/my vidéo \"x\" \\ y.mp4"                           # a name JSON has to escape
cp $V/h264.mp4 "$odd"
for f in six long fs; do [ -s "$tmp/$f.mp4" ] || bad "ffmpeg did not write $f.mp4"; done

# ---------------------------------------------------------------------------------------------
# 1. top-5 parity with pipeline("video-classification"), one case per command in expected.json
# ---------------------------------------------------------------------------------------------
n_cases=0
while IFS= read -r cmd; do
    set -- $cmd                                  # build/tubelet classify --model DIR VIDEO ...
    [ "$1" = build/tubelet ] && [ "$2" = classify ] || { bad "unexpected command '$cmd'"; continue; }
    shift
    model=$(basename "$3") video=$4 stem=$(basename "$4"); stem=${stem%.*}
    exp=$P/expected_${model}_${stem}.txt
    n_cases=$((n_cases + 1))
    r "$bin" "$@"
    [ $rc -eq 0 ] || { bad "$model $stem: exit $rc"; head -n 5 "$tmp/err"; continue; }
    json "$tmp/out" >"$tmp/flat" || { bad "$model $stem: --json output is not JSON"; continue; }
    check "$model $stem: one result" [ "$(jget "$tmp/flat" '#')" = 1 ]
    check "$model $stem: video field" [ "$(jget "$tmp/flat" '[0].video')" = "$video" ]
    top_of "$tmp/flat" 0 >"$tmp/top"
    check "$model $stem: top-5 = pipeline top-5 ($exp)" same_top "$tmp/top" "$exp"
done < <(grep -o '"command": "[^"]*"' $P/expected.json | sed 's/^"command": "//; s/"$//')
check "9 pipeline cases in expected.json (got $n_cases)" [ $n_cases -eq 9 ]

# text output: the labels in order, percentages to 2 decimals
r "$bin" classify --model $P/vivit $V/rotated.mp4 --top 5
check "classify text: exit 0" [ $rc -eq 0 ]
check "classify text: header names the video" grep -q "^$V/rotated.mp4  (20 frames" "$tmp/out"
grep -E '^ +[0-9.]+%  ' "$tmp/out" | LC_ALL=C sed -E 's/^ +([0-9.]+)%  (.*)$/\2\t\1/' |
    LC_ALL=C awk -F'\t' '{ printf "%s\t%.6f\n", $1, $2 / 100 }' >"$tmp/top"
check "classify text: labels and percentages" same_top "$tmp/top" $P/expected_vivit_rotated.txt

# ---------------------------------------------------------------------------------------------
# 2. classify: several videos, bad ones among them
# ---------------------------------------------------------------------------------------------
M=$P/videomae
vids=("$tmp/nope.mp4" $V/h264.mp4 "$tmp/text.mp4" $V/rotated.mp4 "$tmp/trunc.mp4" "$tmp/empty.mp4"
      $P/portrait.webm "$tmp/adir" "$tmp/noise.mp4" $V/fuzz_reopen.bin "$odd")
good=(- h264 - rotated - - portrait - - - h264)
r "$bin" classify --model $M "${vids[@]}" --top 5 --json
check "mixed videos --json: exit 1" [ $rc -eq 1 ]
if json "$tmp/out" >"$tmp/flat"; then
    ok
    check "mixed videos: one result per video" [ "$(jget "$tmp/flat" '#')" = ${#vids[@]} ]
    for i in "${!vids[@]}"; do
        check "mixed [$i]: video field" [ "$(jget "$tmp/flat" "[$i].video")" = "${vids[$i]}" ]
        if [ "${good[$i]}" = - ]; then
            e=$(jget "$tmp/flat" "[$i].error") && [ -z "$(jget "$tmp/flat" "[$i].top#")" ] &&
                case $e in *"${vids[$i]}"*) true ;; *) false ;; esac
            check "mixed [$i] ${vids[$i]}: error naming the file" [ $? -eq 0 ]
            check "mixed [$i]: stderr names the file" grep -qF "error: ${vids[$i]}" "$tmp/err"
        else
            top_of "$tmp/flat" $i >"$tmp/top"
            check "mixed [$i] ${vids[$i]}: top-5 as alone" same_top "$tmp/top" $P/expected_videomae_${good[$i]}.txt
        fi
    done
else
    bad "mixed videos: --json output is not JSON"; head -c 600 "$tmp/out"
fi
r "$bin" classify --model $M "${vids[@]}" --top 2
check "mixed videos text: exit 1" [ $rc -eq 1 ]
check "mixed videos text: the good ones reported" [ "$(grep -c '%  ' "$tmp/out")" -eq 8 ]
check "mixed videos text: 7 errors on stderr" [ "$(grep -c '^error: ' "$tmp/err")" -eq 7 ]
# a truncated file whose index survived: reported (with the frames it has) or an error, never a crash
r "$bin" classify --model $M "$tmp/trunc_fs.mp4" --json
check "truncated (index kept): exit 0 or 1" [ $rc -le 1 ]
json "$tmp/out" >"$tmp/flat" && [ "$(jget "$tmp/flat" '[0].video')" = "$tmp/trunc_fs.mp4" ]
check "truncated (index kept): JSON result" [ $? -eq 0 ]
# shorter than the clip: HF's sampling raises, tubelet repeats frames and says so
expect_rc "5-frame video, 8-frame model" 0 "$bin" classify --model $M "$tmp/five.mp4"
check "5-frame video: note about repeated frames" grep -q "^note: .*five.mp4 has 5 frames" "$tmp/err"
# H.264 with B-frames in MPEG-TS (13 frames, one keyframe): a seek to the first frame's pts lands
# after its keyframe (MPEG-TS seeks by dts) and every frame failed ("the stream ends at frame
# -1"); the same stream remuxed to mp4 gives the same answer
ff -f lavfi -i "testsrc2=size=64x48:rate=25,trim=end_frame=13" -pix_fmt yuv420p -c:v libx264 \
   -preset ultrafast -x264-params keyint=250:bframes=2 -f mpegts "$tmp/b13.ts"
ff -i "$tmp/b13.ts" -c copy "$tmp/b13.mp4"
r "$bin" classify --model $M "$tmp/b13.ts" --json
check "13-frame MPEG-TS: exit 0" [ $rc -eq 0 ]
sed "s|$tmp/b13.ts|X|" "$tmp/out" >"$tmp/ts.json"
r "$bin" classify --model $M "$tmp/b13.mp4" --json
sed "s|$tmp/b13.mp4|X|" "$tmp/out" >"$tmp/mp4.json"
check "13-frame MPEG-TS: the same top-5 as its mp4 remux" cmp -s "$tmp/ts.json" "$tmp/mp4.json"
expect_rc "13-frame MPEG-TS: features" 0 "$bin" features --model $M "$tmp/b13.ts" -o "$tmp/b13.npy"
expect_rc "13-frame MPEG-TS: timeline" 0 "$bin" timeline --model $M "$tmp/b13.ts"
expect_rc "only bad videos" 1 "$bin" classify --model $M "$tmp/empty.mp4" --json
check "only bad videos: JSON error entry" grep -q '^\[{"video": ".*", "error": ".*empty.mp4' "$tmp/out"

# stderr a terminal (script(1) gives a pty; stdout stays a file): each "[i/n] PATH" line is drawn
# open and erased ("\r", clear to the end) before the video's results or error; not a terminal:
# plain lines, as above (issue 39 item 22: the progress stayed over the results)
if command -v script >/dev/null; then
    script -qec "'$bin' classify --model '$M' '$V/h264.mp4' '$V/rotated.mp4' '$tmp/nope.mp4' --top 2 >'$tmp/tty_out'" \
        /dev/null </dev/null >"$tmp/tty_err" 2>&1
    check "terminal: exit 1 (one missing video)" [ $? -eq 1 ]
    check "terminal: [1/3] drawn open, then erased" grep -qF "$(printf '\r[1/3] %s\033[K\r\033[K' "$V/h264.mp4")" "$tmp/tty_err"
    check "terminal: [2/3] drawn open, then erased" grep -qF "$(printf '\r[2/3] %s\033[K\r\033[K' "$V/rotated.mp4")" "$tmp/tty_err"
    check "terminal: the error starts an erased line" grep -qF "$(printf '\033[K\r\033[Kerror: %s' "$tmp/nope.mp4")" "$tmp/tty_err"
    check "terminal: no [i/n] line left standing" not grep -q '^\[[0-9]/3\]' "$tmp/tty_err"
    check "terminal: the results on stdout" [ "$(grep -c '%  ' "$tmp/tty_out")" -eq 4 ]
    # the same in timeline: erased before the video's own lines
    script -qec "'$bin' timeline --model '$M' '$V/h264.mp4' '$V/rotated.mp4' >'$tmp/tty_out'" \
        /dev/null </dev/null >"$tmp/tty_err" 2>&1
    check "terminal, timeline: [1/2] erased before its notes" grep -qF "$(printf '\r[1/2] %s\033[K\r\033[K%s: windows' "$V/h264.mp4" "$V/h264.mp4")" "$tmp/tty_err"
    check "terminal, timeline: [2/2] erased before its warning" grep -qF "$(printf '\r[2/2] %s\033[K\r\033[Kwarning: ' "$V/rotated.mp4")" "$tmp/tty_err"
else
    echo "note: no script(1): the terminal progress checks are skipped"
fi
r "$bin" classify --model $M $V/h264.mp4 $V/rotated.mp4
check "not a terminal: plain [i/n] lines" [ "$(grep -c '^\[[12]/2\] ' "$tmp/err")" -eq 2 ]
check "not a terminal: no escape sequences" not grep -q $'\033\|\r' "$tmp/err"

# views and sampling modes
r "$bin" classify --model $M $V/h264.mp4 --crops 3 --clips 2
check "--crops 3 --clips 2: exit 0" [ $rc -eq 0 ]
check "--crops 3 --clips 2: 6 views" grep -q '; 6 views)' "$tmp/out"
r "$bin" classify --model $M $V/h264.mp4 --crops 3 --clips 2 --json
json "$tmp/out" >"$tmp/flat" && [ "$(jget "$tmp/flat" '[0].top#')" = 5 ]
check "--crops 3 --clips 2 --json: 5 labels" [ $? -eq 0 ]
for s in hf uniform clip hf-rate; do
    r "$bin" classify --model $M $V/h264.mp4 --sampling $s --json
    cp "$tmp/out" "$tmp/sampling_$s"
    json "$tmp/out" >"$tmp/flat" && [ $rc -eq 0 ] && [ "$(jget "$tmp/flat" '[0].top#')" = 5 ]
    check "--sampling $s: exit 0, 5 labels" [ $? -eq 0 ]
done
r "$bin" classify --model $M $V/h264.mp4 --json
check "--sampling hf is the default" cmp -s "$tmp/out" "$tmp/sampling_hf"
check "--sampling uniform differs from hf" not cmp -s "$tmp/sampling_uniform" "$tmp/sampling_hf"
expect_rc "--sampling clip --stride 2" 0 "$bin" classify --model $M $V/h264.mp4 --sampling clip --stride 2
expect_rc "unknown sampling" 2 "$bin" classify --model $M $V/h264.mp4 --sampling bogus
check "unknown sampling: message" grep -q "sampling 'bogus'" "$tmp/err"
expect_rc "--crops 2" 2 "$bin" classify --model $M $V/h264.mp4 --crops 2
expect_rc "--top 0" 2 "$bin" classify --model $M $V/h264.mp4 --top 0
expect_rc "no video" 2 "$bin" classify --model $M
expect_rc "no model" 2 "$bin" classify $V/h264.mp4
expect_rc "unknown option" 2 "$bin" classify --model $M $V/h264.mp4 --frobnicate
expect_rc "missing model dir" 1 "$bin" classify --model "$tmp/nomodel" $V/h264.mp4
# the failures before the first video free what they took, the --list's lines included (the
# ASan build's LeakSanitizer reports a leak and exits 23): no model, a pretraining model, a bad
# preprocessor_config.json
echo "$V/h264.mp4" >"$tmp/one.txt"
mkdir "$tmp/badpre" && cp $M/* "$tmp/badpre/" && echo '{"crop_size":' >"$tmp/badpre/preprocessor_config.json"
for d in "$tmp/nomodel" tests/fixtures/pretrain_normpix "$tmp/badpre"; do
    expect_rc "$(basename "$d") with --list: exit 1" 1 "$bin" classify --model "$d" --list "$tmp/one.txt"
done
r "$bin" classify --model $M $V/h264.mp4 --top 100 --json
json "$tmp/out" >"$tmp/flat" && [ "$(jget "$tmp/flat" '[0].top#')" = 16 ]
check "--top 100: all 16 labels" [ $? -eq 0 ]

# ---------------------------------------------------------------------------------------------
# 3. preprocess
# ---------------------------------------------------------------------------------------------
expect_rc "preprocess" 0 "$bin" preprocess --model $M $V/h264.mp4 -o "$tmp/p.npy"
check "preprocess: shape (1, 8, 3, 32, 32)" grep -q "'shape': (1, 8, 3, 32, 32)" <(npy_header "$tmp/p.npy")
check "preprocess: data size" [ "$(npy_bytes "$tmp/p.npy")" -eq $((1 * 8 * 3 * 32 * 32 * 4)) ]
expect_rc "preprocess 6 views" 0 "$bin" preprocess --model $M $V/h264.mp4 -o "$tmp/p6.npy" --crops 3 --clips 2
check "preprocess 6 views: shape" grep -q "'shape': (6, 8, 3, 32, 32)" <(npy_header "$tmp/p6.npy")
check "preprocess 6 views: data size" [ "$(npy_bytes "$tmp/p6.npy")" -eq $((6 * 8 * 3 * 32 * 32 * 4)) ]
# byte-exact against the HF video processors' pixel_values (tools/make_video_fixtures.py)
while read -r name cfg video frames extra; do
    rm -f "$tmp/pv.npy"
    expect_rc "preprocess $name" 0 "$bin" preprocess --model $V/$cfg $V/$video --frames "$frames" $extra -o "$tmp/pv.npy"
    check "preprocess $name: bytes equal the HF pixel_values" cmp -s <(npy_data "$tmp/pv.npy") <(npy_data $V/$name.pixel_values.npy)
done <<EOF
videomae_h264_hf videomae h264.mp4 8
vivit_rotated_hf vivit rotated.mp4 6
timesformer_odd_hf timesformer odd.mkv 4
videomae_h264_hfrate videomae h264.mp4 8 --sampling hf-rate --stride 4
EOF
for b in text empty trunc; do
    expect_rc "preprocess $b.mp4" 1 "$bin" preprocess --model $M "$tmp/$b.mp4" -o "$tmp/bad.npy"
    check "preprocess $b.mp4: message names the file" grep -qF "$tmp/$b.mp4" "$tmp/err"
    check "preprocess $b.mp4: no output file" [ ! -e "$tmp/bad.npy" ]
done
expect_rc "preprocess without -o" 2 "$bin" preprocess --model $M $V/h264.mp4
expect_rc "preprocess, unwritable output" 1 "$bin" preprocess --model $M $V/h264.mp4 -o "$tmp/no/such/p.npy"

# ---------------------------------------------------------------------------------------------
# 4. features: sizes from config.json
# ---------------------------------------------------------------------------------------------
for m in videomae timesformer vivit; do
    json $P/$m/config.json >"$tmp/cfg"
    D=$(jget "$tmp/cfg" .hidden_size) F=$(jget "$tmp/cfg" .num_frames) S=$(jget "$tmp/cfg" .image_size)
    case $m in
        videomae) kt=$(jget "$tmp/cfg" .tubelet_size) ks=$(jget "$tmp/cfg" .patch_size) ;;
        timesformer) kt=1 ks=$(jget "$tmp/cfg" .patch_size) ;;
        vivit) kt=$(jget "$tmp/cfg" '.tubelet_size[0]') ks=$(jget "$tmp/cfg" '.tubelet_size[1]') ;;
    esac
    t=$((F / kt)) h=$((S / ks))
    for pool in cls mean none; do
        o="$tmp/f_${m}_$pool.npy"
        r "$bin" features --model $P/$m $V/h264.mp4 $V/rotated.mp4 -o "$o" --pool $pool
        if [ $m = videomae ] && [ $pool = cls ]; then
            check "features $m --pool cls: exit 1" [ $rc -eq 1 ]
            check "features $m --pool cls: message" grep -q "no cls token" "$tmp/err"
            check "features $m --pool cls: no output" [ ! -e "$o" ]
            continue
        fi
        check "features $m --pool $pool: exit 0" [ $rc -eq 0 ]
        if [ $pool = none ]; then want="(2, $D, $t, $h, $h)" n=$((2 * D * t * h * h)); else want="(2, $D)" n=$((2 * D)); fi
        check "features $m --pool $pool: shape $want" grep -qF "'shape': $want" <(npy_header "$o")
        check "features $m --pool $pool: $((n * 4)) data bytes" [ "$(npy_bytes "$o")" -eq $((n * 4)) ]
    done
done
# videos in the order given: [h264, rotated] = [h264] then [rotated]
"$bin" features --model $P/vivit $V/h264.mp4 -o "$tmp/fa.npy" 2>/dev/null
"$bin" features --model $P/vivit $V/rotated.mp4 -o "$tmp/fb.npy" 2>/dev/null
check "features: rows in the order of the videos" cmp -s <(npy_data "$tmp/f_vivit_cls.npy") <(cat <(npy_data "$tmp/fa.npy") <(npy_data "$tmp/fb.npy"))
# mean pooling = the mean of the feature map (VideoMAE: all tokens are patches)
od -An -v -tf4 <(npy_data "$tmp/f_videomae_none.npy") | tr -s ' ' '\n' | grep . >"$tmp/map.txt"
od -An -v -tf4 <(npy_data "$tmp/f_videomae_mean.npy") | tr -s ' ' '\n' | grep . >"$tmp/mean.txt"
json $M/config.json >"$tmp/cfg"
D=$(jget "$tmp/cfg" .hidden_size)
N=$(( $(jget "$tmp/cfg" .num_frames) / $(jget "$tmp/cfg" .tubelet_size) * ($(jget "$tmp/cfg" .image_size) / $(jget "$tmp/cfg" .patch_size)) ** 2 ))
awk -v D="$D" -v N="$N" 'NR == FNR { s[int((NR - 1) / N)] += $1; next }
     { d = s[FNR - 1] / N - $1; if (d < 0) d = -d; if (d > 1e-5) e = 1; k++ }
     END { exit e || k != 2 * D }' "$tmp/map.txt" "$tmp/mean.txt"
check "features: --pool mean = mean of --pool none" [ $? -eq 0 ]
# safetensors: 8-byte header length, then a JSON header with the tensor
expect_rc "features .safetensors" 0 "$bin" features --model $P/timesformer $V/h264.mp4 $V/rotated.mp4 -o "$tmp/f.safetensors"
hl=$(od -An -tu8 -N8 "$tmp/f.safetensors" | tr -d ' ')
check "safetensors: file size = 8 + header + 2x32 floats" [ "$(stat -c %s "$tmp/f.safetensors")" -eq $((8 + hl + 2 * 32 * 4)) ]
head -c $((8 + hl)) "$tmp/f.safetensors" | tail -c +9 >"$tmp/sth"
json "$tmp/sth" >"$tmp/flat"
check "safetensors: header is JSON" [ $? -eq 0 ]
check "safetensors: features F32 [2, 32]" [ "$(jget "$tmp/flat" .features.dtype) $(jget "$tmp/flat" '.features.shape[0]') $(jget "$tmp/flat" '.features.shape[1]')" = "F32 2 32" ]
check "safetensors: grep finds the key" [ "$(grep -c '"features"' "$tmp/sth")" -eq 1 ]
check "safetensors: same numbers as .npy" cmp -s <(tail -c 256 "$tmp/f.safetensors") <(npy_data "$tmp/f_timesformer_cls.npy")
# failures: nothing written
expect_rc "features, a failing video" 1 "$bin" features --model $P/vivit $V/h264.mp4 "$tmp/text.mp4" -o "$tmp/fx.npy"
check "features, a failing video: no output" [ ! -e "$tmp/fx.npy" ]
check "features, a failing video: message" grep -qF "$tmp/text.mp4" "$tmp/err"
expect_rc "features --layer 0" 0 "$bin" features --model $P/vivit $V/h264.mp4 -o "$tmp/l0.npy" --layer 0
check "features --layer 0: size" [ "$(npy_bytes "$tmp/l0.npy")" -eq $((32 * 4)) ]
check "features --layer 0 differs from the last layer" not cmp -s <(npy_data "$tmp/l0.npy") <(npy_data "$tmp/fa.npy")
expect_rc "features --layer 99" 1 "$bin" features --model $P/vivit $V/h264.mp4 -o "$tmp/l99.npy" --layer 99
check "features --layer 99: message" grep -q "layer 99" "$tmp/err"
check "features --layer 99: no output" [ ! -e "$tmp/l99.npy" ]
expect_rc "features --pool bogus" 2 "$bin" features --model $P/vivit $V/h264.mp4 -o "$tmp/fy.npy" --pool bogus
expect_rc "features -o x.txt" 2 "$bin" features --model $P/vivit $V/h264.mp4 -o "$tmp/fy.txt"
# feature levels for a detector (docs/stmixer-backbone.md): --levels N repeats the final map (STMixer's
# [x, x, x, x]), --layers picks blocks; .npy stacks (levels, videos, ...), .safetensors has features.<i>
expect_rc "features --levels 4" 0 "$bin" features --model $P/videomae $V/h264.mp4 $V/rotated.mp4 -o "$tmp/lv.npy" --levels 4
json $P/videomae/config.json >"$tmp/cfg"
D=$(jget "$tmp/cfg" .hidden_size) t=$(( $(jget "$tmp/cfg" .num_frames) / $(jget "$tmp/cfg" .tubelet_size) )) h=$(( $(jget "$tmp/cfg" .image_size) / $(jget "$tmp/cfg" .patch_size) ))
n=$((2 * D * t * h * h * 4))
check "features --levels 4: shape (4, 2, $D, $t, $h, $h)" grep -qF "'shape': (4, 2, $D, $t, $h, $h)" <(npy_header "$tmp/lv.npy")
for l in 0 1 2 3; do
    check "features --levels 4: level $l = --pool none" cmp -s <(npy_data "$tmp/lv.npy" | tail -c +$((l * n + 1)) | head -c $n) <(npy_data "$tmp/f_videomae_none.npy")
done
"$bin" features --model $P/videomae $V/h264.mp4 $V/rotated.mp4 -o "$tmp/l1.npy" --pool none --layer 1 2>/dev/null
expect_rc "features --layers 1,-1" 0 "$bin" features --model $P/videomae $V/h264.mp4 $V/rotated.mp4 -o "$tmp/ly.npy" --layers 1,-1
check "features --layers 1,-1: level 0 = --layer 1" cmp -s <(npy_data "$tmp/ly.npy" | head -c $n) <(npy_data "$tmp/l1.npy")
check "features --layers 1,-1: level 1 = last hidden state" cmp -s <(npy_data "$tmp/ly.npy" | tail -c +$((n + 1))) <(npy_data "$tmp/f_videomae_none.npy")
expect_rc "features --levels 2 .safetensors" 0 "$bin" features --model $P/videomae $V/h264.mp4 -o "$tmp/lv.safetensors" --levels 2
hl=$(od -An -tu8 -N8 "$tmp/lv.safetensors" | tr -d ' ')
head -c $((8 + hl)) "$tmp/lv.safetensors" | tail -c +9 >"$tmp/sth"
json "$tmp/sth" >"$tmp/flat"
check "--levels 2 .safetensors: features.0 and features.1, (1, $D, $t, $h, $h)" [ "$(jget "$tmp/flat" '.features.0.shape#') $(jget "$tmp/flat" '.features.1.shape[1]') $(grep -c '"features"' "$tmp/sth")" = "5 $D 0" ]
expect_rc "features --levels 0" 2 "$bin" features --model $P/videomae $V/h264.mp4 -o "$tmp/fz.npy" --levels 0
expect_rc "features --layers 1,x" 2 "$bin" features --model $P/videomae $V/h264.mp4 -o "$tmp/fz.npy" --layers 1,x
check "features --layers 1,x: message" grep -q "comma-separated" "$tmp/err"
expect_rc "features --levels 3 --layers 1,2" 2 "$bin" features --model $P/videomae $V/h264.mp4 -o "$tmp/fz.npy" --levels 3 --layers 1,2
expect_rc "features --levels 4 --pool mean" 2 "$bin" features --model $P/videomae $V/h264.mp4 -o "$tmp/fz.npy" --levels 4 --pool mean
expect_rc "features --levels 4 --layer 1" 2 "$bin" features --model $P/videomae $V/h264.mp4 -o "$tmp/fz.npy" --levels 4 --layer 1
expect_rc "features --layers 1,99" 1 "$bin" features --model $P/videomae $V/h264.mp4 -o "$tmp/fz.npy" --layers 1,99
check "features --layers 1,99: message" grep -q "layers 99" "$tmp/err"
check "features: bad levels leave no output" [ ! -e "$tmp/fz.npy" ]
# the STMixer backbone (layer scale, final LayerNorm) at its own resolution: 28x24 crops of a
# model trained at 20x20 (bicubic positions; the values are checked in test_models)
cp -r tests/fixtures/stmixer_backbone "$tmp/stm"
sed 's/"height": 32/"height": 28/; s/"width": 32/"width": 24/' $P/videomae/preprocessor_config.json >"$tmp/stm/preprocessor_config.json"
expect_rc "features STMixer 28x24 --levels 4" 0 "$bin" features --model "$tmp/stm" $V/h264.mp4 -o "$tmp/stm.npy" --levels 4
check "features STMixer 28x24: shape (4, 1, 32, 2, 7, 6)" grep -qF "'shape': (4, 1, 32, 2, 7, 6)" <(npy_header "$tmp/stm.npy")

# ---------------------------------------------------------------------------------------------
# 5. timeline
# ---------------------------------------------------------------------------------------------
json $P/expected.json | LC_ALL=C awk -F'\t' '$1 ~ /^\.labels\[/ { print $2 }' >"$tmp/labels"
check "16 labels in expected.json" [ "$(wc -l <"$tmp/labels")" -eq 16 ]
expect_rc "timeline --csv" 0 "$bin" timeline --model $M "$tmp/six.mp4" --window 1 --stride 1 --csv
check "timeline --csv: header" [ "$(head -n 1 "$tmp/out")" = "start,end,label,score" ]
check "timeline --csv: 6 windows of a 6 s video" [ "$(tail -n +2 "$tmp/out" | wc -l)" -eq 6 ]
cp "$tmp/out" "$tmp/tl.csv"
# start,end,"label",score: starts 0, 1, 2, ... s, increasing; end > start; score in (0, 1]; the label a
# JSON string literal naming one of the model's labels
tail -n +2 "$tmp/tl.csv" | LC_ALL=C awk -v R="$tmp/rows" '
    { a = index($0, ","); st = substr($0, 1, a - 1); r = substr($0, a + 1); b = index(r, ","); en = substr(r, 1, b - 1)
      r = substr(r, b + 1); c = match(r, /,[^,]*$/); la = substr(r, 1, c - 1); sc = substr(r, c + 1)
      print la
      if (st + 0 != NR - 1 || st !~ /^[0-9]+\.[0-9]+$/) { print "  row " NR ": start " st > "/dev/stderr"; e = 1 }
      if (NR > 1 && st + 0 <= prev) { print "  row " NR ": start not increasing" > "/dev/stderr"; e = 1 }
      if (!(en + 0 > st + 0)) { print "  row " NR ": end " en " <= start" > "/dev/stderr"; e = 1 }
      if (!(sc > 0 && sc <= 1)) { print "  row " NR ": score " sc > "/dev/stderr"; e = 1 }
      prev = st + 0 }
    END { exit e || NR == 0 }' >"$tmp/csvlabels"
check "timeline --csv: rows (start, end, score)" [ $? -eq 0 ]
# RFC 4180: a field with a comma or quote is quoted, quotes doubled
sed -E '/^".*"$/{s/^"(.*)"$/\1/; s/""/"/g}' "$tmp/csvlabels" >"$tmp/csvlabels.dec"
[ "$(wc -l <"$tmp/csvlabels.dec")" -eq 6 ] && [ -z "$(grep -vxFf "$tmp/labels" "$tmp/csvlabels.dec")" ]
check "timeline --csv: labels are CSV fields of the model's labels" [ $? -eq 0 ]
expect_rc "timeline --json" 0 "$bin" timeline --model $M "$tmp/six.mp4" --window 1 --stride 1 --json --top 3
if json "$tmp/out" >"$tmp/flat"; then
    ok
    check "timeline --json: 6 windows" [ "$(jget "$tmp/flat" '#')" = 6 ]
    check "timeline --json: 3 labels per window" [ "$(grep -c '^\[[0-9]*\]\.top#	3$' "$tmp/flat")" -eq 6 ]
    check "timeline --json: same starts as --csv" cmp -s <(grep '^\[[0-9]*\]\.start	' "$tmp/flat" | cut -f2) <(tail -n +2 "$tmp/tl.csv" | cut -d, -f1)
    check "timeline --json: same top label as --csv" cmp -s <(grep '^\[[0-9]*\]\.top\[0\]\.label	' "$tmp/flat" | cut -f2) "$tmp/csvlabels.dec"
else
    bad "timeline --json: not JSON"; head -c 400 "$tmp/out"
fi
# a window longer than the video (issue 27): a warning, and one window over the whole video
expect_rc "timeline --window 100 on a 6 s video" 0 "$bin" timeline --model $M "$tmp/six.mp4" --window 100 --stride 1 --csv
check "timeline --window 100: warns" grep -q "window (100.00 s.*longer than the video (6.00 s.*one window over the whole video" "$tmp/err"
check "timeline --window 100: one window, 0 to about 6 s" \
    awk -F, 'NR == 2 && $1 == 0 && $2 > 5.5 && $2 <= 6.001 { ok = 1 } END { exit !(ok && NR == 2) }' "$tmp/out"
expect_rc "timeline, default output" 0 "$bin" timeline --model $M "$tmp/six.mp4"
check "timeline, default output: rows" [ "$(grep -c ' s  ' "$tmp/out")" -ge 4 ]
expect_rc "timeline, bad video" 1 "$bin" timeline --model $M "$tmp/text.mp4" --csv
check "timeline, bad video: message" grep -qF "$tmp/text.mp4" "$tmp/err"
expect_rc "timeline, missing video" 1 "$bin" timeline --model $M "$tmp/nope.mp4"
# several videos (docs/video.md): each one's windows as alone, labelled with the video; a video
# that fails (unreadable; or a frame beyond the size limit after its first window: mixed.mjpeg)
# is named on stderr, prints none of its rows (--json: {video, error} in its place), and the
# others still run, exit 1
ff -f lavfi -i "testsrc2=size=160x120:rate=25" -frames:v 75 -c:v mjpeg -f mjpeg "$tmp/a.mjpeg"
ff -f lavfi -i "color=c=gray:size=16400x16:rate=25" -frames:v 1 -c:v mjpeg -f mjpeg "$tmp/b.mjpeg"
cat "$tmp/a.mjpeg" "$tmp/b.mjpeg" "$tmp/a.mjpeg" >"$tmp/mixed.mjpeg"
TL=(timeline --model $M --window 1 --stride 1)
expect_rc "timeline, the mid-stream failure alone" 1 "$bin" "${TL[@]}" "$tmp/mixed.mjpeg" --csv
[ "$(tail -n +2 "$tmp/out" | wc -l)" -ge 2 ] && grep -qF "error: $tmp/mixed.mjpeg: decoded frame size 16400x16" "$tmp/err"
check "timeline, mid-stream failure: windows before it, then the error" [ $? -eq 0 ]
expect_rc "timeline --json of six.mp4 alone" 0 "$bin" "${TL[@]}" "$tmp/six.mp4" --json --top 2
cp "$tmp/out" "$tmp/tl_six.json"
expect_rc "timeline --json of the odd name alone" 0 "$bin" "${TL[@]}" "$odd" --json --top 2
cp "$tmp/out" "$tmp/tl_odd.json"
tvids=("$tmp/six.mp4" "$tmp/text.mp4" "$tmp/mixed.mjpeg" "$odd")
expect_rc "timeline --json, 4 videos, 2 bad" 1 "$bin" "${TL[@]}" "${tvids[@]}" --json --top 2
if json "$tmp/out" >"$tmp/flat"; then
    ok
    check "timeline --json, several: one entry per video" [ "$(jget "$tmp/flat" '#')" = 4 ]
    for i in 0 1 2 3; do
        check "timeline --json, several [$i]: video field" [ "$(jget "$tmp/flat" "[$i].video")" = "${tvids[$i]}" ]
    done
    for i in 1 2; do
        e=$(jget "$tmp/flat" "[$i].error") && [ -z "$(jget "$tmp/flat" "[$i].windows#")" ] &&
            case $e in "${tvids[$i]}: "*) true ;; *) false ;; esac
        check "timeline --json, several [$i]: an error naming the file, no windows" [ $? -eq 0 ]
        check "timeline, several [$i]: stderr names the file" grep -qF "error: ${tvids[$i]}" "$tmp/err"
    done
    # each video's windows: its own run's array, value for value
    json "$tmp/tl_six.json" >"$tmp/tl_six.flat"
    check "timeline --json, several: six.mp4's windows as alone" \
        cmp -s <(sed -n 's/^\[0\]\.windows//p' "$tmp/flat") "$tmp/tl_six.flat"
    json "$tmp/tl_odd.json" >"$tmp/tl_odd.flat"
    check "timeline --json, several: the odd name's windows as alone" \
        cmp -s <(sed -n 's/^\[3\]\.windows//p' "$tmp/flat") "$tmp/tl_odd.flat"
else
    bad "timeline --json, several: not JSON"; head -c 600 "$tmp/out"
fi
printf '%s\n' "${tvids[@]:0:2}" >"$tmp/tl_list.txt"
expect_rc "timeline --csv, several, --list after arguments" 1 "$bin" "${TL[@]}" "$tmp/mixed.mjpeg" --list "$tmp/tl_list.txt" "$odd" --csv
check "timeline --csv, several: the video column" [ "$(head -n 1 "$tmp/out")" = "video,start,end,label,score" ]
qodd="\"$(printf '%s' "$odd" | sed 's/"/""/g')\","                  # the odd name as a CSV field
[ "$(grep -c "^$tmp/six.mp4," "$tmp/out")" = 6 ] && [ "$(grep -cF "$qodd" "$tmp/out")" -ge 1 ] &&
    [ "$(tail -n +2 "$tmp/out" | grep -v "^$tmp/six.mp4," | grep -vcF "$qodd")" = 0 ]
check "timeline --csv, several: rows of six.mp4 and the odd name (a quoted field) only" [ $? -eq 0 ]
[ "$(grep -F '] ' "$tmp/err" | cut -d' ' -f1 | tr -d '\n')" = "[1/4][2/4][3/4][4/4]" ] &&
    grep -qF "[2/4] $odd" "$tmp/err" && grep -qF "[3/4] $tmp/six.mp4" "$tmp/err"
check "timeline --csv, several: the order (the arguments, then --list's)" [ $? -eq 0 ]
check "timeline --csv, several: six.mp4's rows as alone" \
    cmp -s <(grep "^$tmp/six.mp4," "$tmp/out" | cut -d, -f2-) <(tail -n +2 "$tmp/tl.csv")
expect_rc "timeline, text, several" 1 "$bin" "${TL[@]}" "${tvids[@]}"
cp "$tmp/out" "$tmp/tl_multi.txt"
expect_rc "timeline, text, six.mp4 alone" 0 "$bin" "${TL[@]}" "$tmp/six.mp4"
cp "$tmp/out" "$tmp/tl_six.txt"
expect_rc "timeline, text, the odd name alone" 0 "$bin" "${TL[@]}" "$odd"
check "timeline, text, several: each good video's path line, then its lines as alone" \
    cmp -s "$tmp/tl_multi.txt" <(echo "$tmp/six.mp4"; cat "$tmp/tl_six.txt"; echo; echo "$odd"; cat "$tmp/out")
expect_rc "timeline, several, all good" 0 "$bin" "${TL[@]}" "$tmp/six.mp4" "$odd" --json
expect_rc "timeline --window 0" 2 "$bin" timeline --model $M "$tmp/six.mp4" --window 0
# memory does not grow with the video: peak RSS of 60 s vs 6 s at the same size. ASan's quarantine
# keeps freed blocks (FFmpeg frees a packet and a frame per decoded frame) and grows with the number
# of frees, so it is switched off for these two runs; no effect on other builds.
if [ -x /usr/bin/time ]; then
    for v in six long; do
        ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}quarantine_size_mb=0:thread_local_quarantine_size_kb=0" \
            /usr/bin/time -f 'maxrss %M' -o "$tmp/rss_$v" \
            "$bin" timeline --model $M "$tmp/$v.mp4" --window 1 --stride 1 --csv </dev/null >"$tmp/rss_out_$v" 2>"$tmp/rss_err_$v"
        check "timeline on $v.mp4: exit 0" [ $? -eq 0 ]
        check "timeline on $v.mp4: no sanitizer report" not grep -qE 'Sanitizer|runtime error' "$tmp/rss_err_$v"
    done
    short=$(sed -n 's/^maxrss //p' "$tmp/rss_six") long=$(sed -n 's/^maxrss //p' "$tmp/rss_long")
    check "timeline: 60 windows of the 60 s video" [ "$(tail -n +2 "$tmp/rss_out_long" | wc -l)" -eq 60 ]
    echo "timeline peak RSS: 6 s video ${short:-?} KB, 60 s video ${long:-?} KB"
    check "timeline: peak RSS of 60 s (${long:-?} KB) < 1.5 x 6 s (${short:-?} KB)" [ $((${long:-0} * 2)) -lt $((${short:-0} * 3)) ]
else
    bad "timeline memory: /usr/bin/time (Debian package 'time') is needed"
fi

# ---------------------------------------------------------------------------------------------
# 6. help
# ---------------------------------------------------------------------------------------------
for c in classify preprocess features timeline; do
    expect_rc "$c --help" 0 "$bin" $c --help
    check "$c --help: usage on stdout" grep -q "usage: tubelet $c" "$tmp/out"
done

finish
