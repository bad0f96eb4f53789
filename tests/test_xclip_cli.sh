#!/usr/bin/env bash
# X-CLIP through the CLI (issue 31): run --text [--text-embeds] [--video-embeds] (shapes; the
# values are checked against transformers by test_xclip.c), classify --labels / --labels-file /
# --template (text and JSON output, the labels' names), and the errors: no texts for an X-CLIP
# model, texts or labels for a model without a text tower, a template without {}, an empty
# label, an input of another frame count; calibrate, which does not take texts yet — each with
# a message and no output file; convert of the original repository's .pth. timeline and watch
# --labels on a clip of 64 frames (one window of 8 frames at stride 8 = classify's hf sampling of
# it): the same scores as classify --labels; their errors without labels, and with labels on a
# model of its own labels.
# Shell tools only (no Python).
set -u
bin=${1:-build/tubelet}
cd "$(dirname "$0")/.."
fx=tests/fixtures
X=$fx/xclip/p16_f8
X3=$fx/xclip/p32_f3
V=$fx/video/h264.mp4
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }
run_ok() { # NAME CMD...: exit 0
    local name=$1; shift
    "$@" >"$tmp/stdout" 2>"$tmp/stderr" && { ok; return 0; }
    bad "$name: exit $?: $(tail -3 "$tmp/stderr")"
    return 1
}
run_fails() { # NAME PATTERN CMD...: non-zero exit, PATTERN in stderr
    local name=$1 pat=$2; shift 2
    if "$@" >"$tmp/stdout" 2>"$tmp/stderr"; then bad "$name: exit 0"; return; fi
    grep -q -- "$pat" "$tmp/stderr" && ok || bad "$name: stderr lacks '$pat': $(cat "$tmp/stderr")"
}
# the shape in a .npy header
npy_shape() { head -c 128 "$1" | tr -d '\0' | grep -ao "'shape': ([0-9, ]*)" | sed "s/'shape': //"; }

# run: logits_per_video and the embeddings
if run_ok "run --text" $bin run --model $X --input $X/x.npy --text "a video of a cat" \
    --text "someone falling" --text "x" --logits $tmp/l.npy --text-embeds $tmp/t.npy \
    --video-embeds $tmp/v.npy --threads 1; then
    [ "$(npy_shape $tmp/l.npy)" = "(2, 3)" ] && ok || bad "logits shape $(npy_shape $tmp/l.npy)"
    [ "$(npy_shape $tmp/t.npy)" = "(2, 3, 32)" ] && ok || bad "text shape $(npy_shape $tmp/t.npy)"
    [ "$(npy_shape $tmp/v.npy)" = "(2, 32)" ] && ok || bad "video shape $(npy_shape $tmp/v.npy)"
fi
run_ok "run p32_f3" $bin run --model $X3 --input $X3/x.npy --text "-a text with a dash" \
    --logits $tmp/l3.npy && { [ "$(npy_shape $tmp/l3.npy)" = "(1, 1)" ] && ok || bad "p32 shape"; }

# run: errors, and no output file
run_fails "run without --text" "give the texts" $bin run --model $X --input $X/x.npy \
    --logits $tmp/none.npy
run_fails "--text-embeds without --text" "need --text" $bin run --model $X --input $X/x.npy \
    --logits $tmp/none.npy --text-embeds $tmp/none_t.npy
run_fails "--text on VideoMAE" "no text tower" $bin run --model $fx/videomae_mean \
    --input $fx/videomae_mean/input.npy --text a --logits $tmp/none.npy
run_fails "3-frame input to an 8-frame model" "num_frames = 8" $bin run --model $X \
    --input $X3/x.npy --text a --logits $tmp/none.npy
[ ! -e $tmp/none.npy ] && [ ! -e $tmp/none_t.npy ] && ok || bad "a failed run left an output"

# classify --labels, --template, --json
if run_ok "classify --labels" $bin classify --model $X --labels "cat, falling,forklift" \
    --template "a video of {}" $V; then
    [ "$(grep -c '%  ' $tmp/stdout)" = 3 ] && ok || bad "classify printed $(cat $tmp/stdout)"
    for l in cat falling forklift; do
        grep -q "%  $l\$" $tmp/stdout && ok || bad "label '$l' missing: $(cat $tmp/stdout)"
    done
fi
run_ok "classify --json" $bin classify --model $X --labels "cat, falling,forklift" \
    --template "a video of {}" --json --top 2 $V $V && cp $tmp/stdout $tmp/labels.json &&
    { grep -q '^\[{"video": "[^"]*h264.mp4", "top": \[{"label": "[a-z]*", "score": 0\.[0-9]*}, {"label"' \
        $tmp/labels.json && ok || bad "classify JSON: $(cat $tmp/labels.json)"; }
printf 'cat\nfalling\r\n\nforklift\n' >$tmp/labels.txt
run_ok "classify --labels-file" $bin classify --model $X --labels-file $tmp/labels.txt \
    --template "a video of {}" --json --top 2 $V $V &&
    { cmp -s $tmp/stdout $tmp/labels.json && ok || bad "--labels-file differs from --labels"; }
# without the template the texts differ: other scores
run_ok "classify no template" $bin classify --model $X --labels "cat,falling,forklift" --json \
    --top 2 $V $V && { cmp -s $tmp/stdout $tmp/labels.json && bad "template ignored" || ok; }

# classify: errors
run_fails "classify X-CLIP without labels" "give the labels" $bin classify --model $X $V
run_fails "classify --labels and --labels-file" "one of them" $bin classify --model $X \
    --labels a --labels-file $tmp/labels.txt $V
run_fails "template without {}" "has no {}" $bin classify --model $X --labels a,b \
    --template "a video" $V
run_fails "empty label" "label 2 is empty" $bin classify --model $X --labels "a, ,b" $V
run_fails "--labels on VideoMAE" "need a video-text model" $bin classify \
    --model $fx/videomae_mean --labels a,b $V
run_fails "calibrate of X-CLIP" "does not take yet" $bin calibrate --model $X $V

# timeline and watch --labels: a clip of 64 frames at 25 fps, whose one window of 2.56 s is
# classify's sampling of it (frames 0, 8, ..., 56)
C=$tmp/c64.mp4
L=(--labels "cat, falling,forklift" --template "a video of {}")
ffmpeg -v error -f lavfi -i testsrc=size=64x48:rate=25 -frames:v 64 -pix_fmt yuv420p $C ||
    bad "ffmpeg could not make the clip"
# the "top" list of a JSON answer (classify's video, timeline's window, watch's line)
tops() { grep -o '"top": \[[^]]*\]' "$1"; }
run_ok "classify the clip" $bin classify --model $X "${L[@]}" --json --top 3 --threads 1 $C &&
    tops $tmp/stdout >$tmp/want.top
if run_ok "timeline --labels" $bin timeline --model $X "${L[@]}" --json --top 3 --window 2.56 \
    --threads 1 $C; then
    tops $tmp/stdout >$tmp/tl.top
    [ -s $tmp/want.top ] && cmp -s $tmp/tl.top $tmp/want.top && ok ||
        bad "timeline's window differs from classify: $(cat $tmp/tl.top) / $(cat $tmp/want.top)"
fi
if run_ok "watch --labels" $bin watch $C --model $X "${L[@]}" --top 3 --window 2.56 \
    --stride 2.56 --threads 1; then
    tops $tmp/stdout >$tmp/w.top
    [ -s $tmp/want.top ] && cmp -s $tmp/w.top $tmp/want.top && ok ||
        bad "watch's window differs from classify: $(cat $tmp/w.top) / $(cat $tmp/want.top)"
fi
printf 'cat\nfalling\nforklift\n' >$tmp/three.txt
if run_ok "timeline --labels-file --csv" $bin timeline --model $X --labels-file $tmp/three.txt \
    --csv --window 1 --stride 0.5 --threads 1 $C; then
    [ "$(head -1 $tmp/stdout)" = "start,end,label,score" ] && ok || bad "CSV header"
    [ "$(tail -n +2 $tmp/stdout | grep -cE '^[0-9.]+,[0-9.]+,(cat|falling|forklift),0\.[0-9]+$')" = 5 ] &&
        ok || bad "timeline CSV rows: $(cat $tmp/stdout)"
fi
for c in timeline watch; do
    run_fails "$c of X-CLIP without labels" "give the labels to .tubelet $c" $bin $c --model $X $C
    run_fails "$c --labels on VideoMAE" "need a video-text model" $bin $c \
        --model $fx/videomae_mean --labels a,b $C
done
[ ! -s $tmp/stdout ] && ok || bad "a refused watch printed $(cat $tmp/stdout)"
grep -q -- "--labels" <($bin classify --help) && grep -q -- "--text-embeds" <($bin run --help) &&
    ok || bad "--help lacks the X-CLIP options"

# the tokenizer's files, checked at load (issue 39): ids past text_config.vocab_size (every text
# would fail: serve answered 503 to each), a NUL in a token (cJSON cut it short), a special token
# of no text ({"content": 5} fell back to the default), a labels file of empty lines or with a NUL
tok_copy() { rm -rf $tmp/tk; mkdir $tmp/tk; cp $X/* $tmp/tk/; }
tok_copy
sed -i 's/"<|endoftext|>": 1711/"<|endoftext|>": 5000/' $tmp/tk/vocab.json
run_fails "vocab past vocab_size" "tk/vocab.json: id 5000 is past the model's 1712 token embeddings" \
    $bin classify --model $tmp/tk --labels a,b $V
run_fails "serve: vocab past vocab_size" "tk/vocab.json: id 5000 is past" $bin serve --model $tmp/tk --port 0
tok_copy
sed -i 's/"daci": 1499/"da\\u0000ci": 1499/' $tmp/tk/vocab.json
run_fails "NUL in a token" "tk/vocab.json: a string holds .u0000 (NUL" $bin classify --model $tmp/tk --labels a,b $V
tok_copy
sed -i 's/"pad_token": "<|endoftext|>"/"pad_token": {"content": 5}/' $tmp/tk/tokenizer_config.json
run_fails "pad_token of no text" "tokenizer_config.json: pad_token is neither a string nor" \
    $bin classify --model $tmp/tk --labels a,b $V
printf '\n\r\n\n' >$tmp/empty.txt
run_fails "labels file of empty lines" "empty.txt: nothing in it (no line that is not empty)" \
    $bin classify --model $X --labels-file $tmp/empty.txt $V
printf 'cat\nfall\000ing\n' >$tmp/nul.txt
run_fails "labels file with a NUL" "nul.txt: line 2 holds a NUL byte" \
    $bin classify --model $X --labels-file $tmp/nul.txt $V

# serve's /v1/features is `tubelet features`'s .npy byte for byte, at both defaults (issue 39:
# serve ran a small model on one thread, features on every core, and oneDNN's sgemm sums in
# another order on another thread count: 2.9e-6 apart)
if command -v curl >/dev/null; then
    $bin serve --model $X --port 0 >$tmp/serve.log 2>&1 &
    spid=$!
    port=""
    for i in $(seq 300); do
        port=$(sed -n 's|^listening on http://127.0.0.1:\([0-9]*\)/.*|\1|p' $tmp/serve.log)
        [ -n "$port" ] && curl -s -m 5 http://127.0.0.1:$port/health | grep -q '"ok"' && break
        kill -0 $spid 2>/dev/null || break
        sleep 0.1
    done
    curl -s -m 60 -o $tmp/served.npy -H 'Accept: application/x-npy' -H 'Content-Type: video/mp4' \
        --data-binary @$V http://127.0.0.1:$port/v1/features
    kill $spid; wait $spid 2>/dev/null
    run_ok "features of X-CLIP" $bin features --model $X -o $tmp/feat.npy $V &&
        { cmp -s $tmp/served.npy $tmp/feat.npy && ok || bad "/v1/features differs from features"; }
fi

# convert: the original repository's .pth (tools/make_xclip_pth.py: p32_f3 in microsoft/VideoX's
# names; its config.json beside it) into a directory with CLIP's normalisation, whose logits are
# the fixture directory's, byte for byte
if run_ok "convert X-CLIP .pth" $bin convert $fx/xclip/pth/xclip_p32_f3.pth -o $tmp/conv; then
    grep -q "0.48145" $tmp/conv/preprocessor_config.json && ok ||
        bad "converted X-CLIP: no CLIP mean in $(cat $tmp/conv/preprocessor_config.json)"
    cp $X3/vocab.json $X3/merges.txt $X3/tokenizer_config.json $tmp/conv/
    for d in $X3 $tmp/conv; do
        run_ok "run $d" $bin run --model $d --input $X3/x.npy --text "a video of a cat" \
            --text "x" --logits $tmp/$(basename $d).npy --threads 1
    done
    cmp -s $tmp/p32_f3.npy $tmp/conv.npy && ok || bad "converted X-CLIP: other logits"
    # the model's own size (its config.json: 64), not the family's 224: the directory classifies
    grep -q '"crop_size": {"height": 64' $tmp/conv/preprocessor_config.json && ok ||
        bad "converted X-CLIP: crop is not the model's 64: $(cat $tmp/conv/preprocessor_config.json)"
    run_ok "classify the converted X-CLIP" $bin classify --model $tmp/conv --labels a,b $V
fi
# --model FILE.pth: the tokenizer beside the file, or a message saying so
run_fails "X-CLIP .pth without a tokenizer" "a checkpoint file holds no tokenizer: put its vocab.json" \
    $bin classify --model $fx/xclip/pth/xclip_p32_f3.pth --labels a,b $V
mkdir $tmp/pth && cp $fx/xclip/pth/* $X3/vocab.json $X3/merges.txt $X3/tokenizer_config.json $tmp/pth/
run_ok "classify --model X.pth" $bin classify --model $tmp/pth/xclip_p32_f3.pth --labels a,b --json $V &&
    { grep -q '"top": \[{"label": "[ab]"' $tmp/stdout && ok || bad "classify X.pth: $(cat $tmp/stdout)"; }

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
