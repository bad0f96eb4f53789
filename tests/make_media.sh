#!/usr/bin/env bash
# Generates the test media of tests/test_video.c into the directory given as $1, with the ffmpeg
# CLI only (CI has no Python). Deterministic content: testsrc2 under a frame-number stripe.
#
# The stripe: the top quarter of every frame is cut into 10 vertical blocks; block b is white
# (Y 235) when bit b of the frame number is set, else black (Y 16). A decoded frame thus says
# which frame it is, whatever the codec did to the rest (see frame_id() in tests/test_video.c).
#
#   usage: tests/make_media.sh OUTDIR          (about 5 s; prints nothing unless something fails)
#          tests/make_media.sh --seeds OUTDIR  (tiny files for the fuzz_video.c seed corpus)
set -euo pipefail
seeds=0
if [ "${1:-}" = "--seeds" ]; then seeds=1; shift; fi
out=${1:?usage: make_media.sh [--seeds] OUTDIR}
mkdir -p "$out"
command -v ffmpeg >/dev/null || { echo "make_media.sh: ffmpeg CLI not found" >&2; exit 1; }

ff() { ffmpeg -nostdin -hide_banner -loglevel error -y "$@"; }

if [ $seeds = 1 ]; then
    s="testsrc2=size=32x24:rate=10,trim=end_frame=4"
    ff -f lavfi -i "$s" -pix_fmt yuv420p -c:v libx264 -preset ultrafast -x264-params keyint=2:bframes=1 "$out/s.mp4"
    ff -f lavfi -i "$s" -pix_fmt yuv420p -c:v libvpx-vp9 -deadline realtime -g 2 "$out/s.webm"
    ff -f lavfi -i "$s" -pix_fmt yuv420p -c:v ffv1 "$out/s.mkv"
    ff -f lavfi -i "$s" -pix_fmt yuvj422p -c:v mjpeg "$out/s.avi"
    ff -f lavfi -i "$s" -c:v gif "$out/s.gif"
    ff -f lavfi -i "$s" -pix_fmt yuv420p -f yuv4mpegpipe "$out/s.y4m"
    ff -f lavfi -i "$s" -pix_fmt yuv420p -c:v libx264 -preset ultrafast -metadata:s:v:0 rotate=90 "$out/r.mp4"
    ff -f lavfi -i "$s" -pix_fmt yuv420p -c:v mpeg4 -f mpegts "$out/s.ts"
    ff -f lavfi -i "$s" -c:v png -f image2pipe "$out/s.png"
    printf '{"size": {"shortest_edge": 9}, "crop_size": 8, "image_mean": [0.5, 0.4, 0.3], "offset": true}' > "$out/c.json"
    exit 0
fi

# frame-number stripe over testsrc2, in the pixel format of the encoder's input
stripe="geq=lum='if(lt(Y,H/4),if(bitand(N,pow(2,floor(X*10/W))),235,16),lum(X,Y))':cb='if(lt(Y,H/4),128,cb(X,Y))':cr='if(lt(Y,H/4),128,cr(X,Y))'"
src() {   # src W H RATE FRAMES
    echo "testsrc2=size=$1x$2:rate=$3,trim=end_frame=$4,format=yuv444p,$stripe"
}
gray_stripe="geq=lum='if(lt(Y,H/4),if(bitand(N,pow(2,floor(X*10/W))),235,16),lum(X,Y))'"

x264() { echo "-c:v libx264 -preset veryfast -threads 1 -x264-params keyint=12:min-keyint=12:scenecut=0:bframes=2"; }

# mp4/H.264 4:2:0 with B-frames, keyframe every 12
ff -f lavfi -i "$(src 160 120 25 60)" -pix_fmt yuv420p $(x264) "$out/h264.mp4"
# a longer file for the seeking test: 300 frames, keyframe every 12
ff -f lavfi -i "$(src 128 96 25 300)" -pix_fmt yuv420p $(x264) "$out/long.mp4"
# MPEG-TS/H.264 with B-frames: 13 frames behind one keyframe, and 60 with a keyframe every 12.
# MPEG-TS seeks by dts, which B-frames put before the pts: a seek aimed at a keyframe's pts lands
# after it (13 frames: nothing decoded, "the stream ends at frame -1")
ff -f lavfi -i "$(src 96 64 25 13)" -pix_fmt yuv420p -c:v libx264 -preset veryfast -threads 1 \
   -x264-params keyint=250:bframes=2 -f mpegts "$out/h264.ts"
ff -f lavfi -i "$(src 96 64 25 60)" -pix_fmt yuv420p $(x264) -f mpegts "$out/long.ts"
# webm/VP9
ff -f lavfi -i "$(src 160 120 25 30)" -pix_fmt yuv420p -c:v libvpx-vp9 -deadline realtime -cpu-used 8 \
   -threads 1 -g 10 -b:v 300k "$out/vp9.webm"
# mkv/FFV1 at an odd size (161x97, 4:2:0)
ff -f lavfi -i "$(src 161 97 25 20)" -pix_fmt yuv420p -c:v ffv1 "$out/odd.mkv"
# avi/MJPEG 4:2:2 full range
ff -f lavfi -i "$(src 160 120 25 20)" -pix_fmt yuvj422p -c:v mjpeg -q:v 3 "$out/mjpeg.avi"
# H.264 4:4:4
ff -f lavfi -i "$(src 160 120 25 20)" -pix_fmt yuv444p $(x264) "$out/yuv444.mp4"
# H.264 4:2:2
ff -f lavfi -i "$(src 160 120 25 20)" -pix_fmt yuv422p $(x264) "$out/yuv422.mp4"
# gray (FFV1 in mkv)
ff -f lavfi -i "testsrc2=size=160x120:rate=25,trim=end_frame=20,format=gray,$gray_stripe" \
   -pix_fmt gray -c:v ffv1 "$out/gray.mkv"
# animated GIF (pal8), no dithering so the stripe stays black and white
ff -f lavfi -i "$(src 96 64 10 20),format=rgb24,split[a][b];[a]palettegen=max_colors=64[p];[b][p]paletteuse=dither=none" \
   -c:v gif "$out/anim.gif"
# pal8 (PNG in mkv: the decoder outputs the palette format itself)
ff -f lavfi -i "$(src 96 64 10 12),format=rgb24,split[a][b];[a]palettegen=max_colors=64[p];[b][p]paletteuse=dither=none" \
   -c:v png "$out/pal8.mkv"
# portrait by rotation metadata: stored 160x120, shown 120x160 (the muxer's rotate=90 tag becomes
# a display matrix that FFmpeg, torchcodec and tubelet read as 90 degrees counter-clockwise)
ff -f lavfi -i "$(src 160 120 25 20)" -pix_fmt yuv420p $(x264) "$out/plain.mp4"
ff -i "$out/plain.mp4" -c copy -metadata:s:v:0 rotate=90 "$out/rotated.mp4"
rm -f "$out/plain.mp4"
# genuinely portrait
ff -f lavfi -i "$(src 96 160 25 20)" -pix_fmt yuv420p $(x264) "$out/portrait.mp4"
# variable frame rate: frames 0-9 every 40 ms, then every 120 ms (integer ticks of 1/25 s)
ff -f lavfi -i "$(src 160 120 25 20),setpts='if(lt(N,10),N,10+(N-10)*3)'" \
   -fps_mode vfr -pix_fmt yuv420p $(x264) "$out/vfr.mkv"
# very short (5 frames) and one frame
ff -f lavfi -i "$(src 160 120 25 5)" -pix_fmt yuv420p $(x264) "$out/short.mp4"
ff -f lavfi -i "$(src 160 120 25 1)" -pix_fmt yuv420p $(x264) "$out/one.mp4"
# with a silent audio track (AAC), audio first in the file
ff -f lavfi -i "anullsrc=r=16000:cl=mono" -f lavfi -i "$(src 160 120 25 25)" -map 0:a -map 1:v \
   -shortest -c:a aac -pix_fmt yuv420p $(x264) "$out/audio.mp4"
# audio only (no video stream)
ff -f lavfi -i "anullsrc=r=16000:cl=mono" -t 0.5 -c:a aac "$out/audio_only.m4a"
# truncated: the first 40% of h264.mp4 with the index at the end gone (faststart puts it first,
# so the demuxer believes in 60 frames and the data stops early)
ff -i "$out/h264.mp4" -c copy -movflags +faststart "$out/faststart.mp4"
size=$(stat -c %s "$out/faststart.mp4")
head -c $((size * 4 / 10)) "$out/faststart.mp4" > "$out/truncated.mp4"
rm -f "$out/faststart.mp4"
