/* libFuzzer harness for the video input path: open (probe + packet index) -> sample -> decode ->
 * preprocess, plus streaming, on whatever bytes the fuzzer makes. The bytes are opened from
 * memory (FFmpeg custom I/O, as the server decodes uploads), which costs no temporary file and
 * goes through the same demuxers and decoders as a file. Inputs starting with '{' are
 * also parsed as a preprocessor_config.json.
 *
 * Invariants checked (abort() = a finding): a failing call returns a non-zero status, leaves no
 * handle, and its message is NUL-terminated and names the file; a successful open reports sane
 * sizes; decoded frames and pixel_values are fully written (ASan/UBSan do the rest).
 *
 * Build (FFmpeg itself is not instrumented; our code is):
 *   clang -g -O1 -fsanitize=fuzzer,address,undefined -std=c11 -D_GNU_SOURCE -Iinclude -Isrc \
 *     src/common.c src/video/decode.c src/video/sample.c src/video/preprocess.c tests/fuzz_video.c \
 *     $(pkg-config --cflags --libs libavformat libavcodec libswscale libavutil) -lcjson -lm -o fuzz_video
 * Seeds:  tests/make_media.sh --seeds corpus/     (tiny files of every container and codec)
 * Run:    ./fuzz_video -max_total_time=120 -rss_limit_mb=2048 -timeout=20 corpus/ */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "video/video.h"

static const char g_file[] = "fuzz-input.bin";   /* the memory source's name */

static void check_err(int rc, const tb_err *e) {
    if (rc == 0) abort();
    if (!memchr(e->msg, 0, sizeof e->msg)) abort();
    if (!strstr(e->msg, g_file)) abort();
}

static volatile unsigned sink;

static void touch_u8(const uint8_t *p, size_t n) {
    unsigned s = 0;
    for (size_t i = 0; i < n; i++) s += p[i];
    sink += s;
}

static void nolog(void *u, int level, const char *msg) {
    (void)u;
    (void)level;
    if (!memchr(msg, 0, 1024)) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    tb_log log = {nolog, NULL};

    if (size > 0 && data[0] == '{') {
        char *js = malloc(size + 1);
        if (!js) abort();
        memcpy(js, data, size);
        js[size] = 0;
        tb_preproc_config c;
        tb_err e = {{0}};
        if (tb_preproc_config_parse(&c, js, "fuzz.json", &log, &e) == 0) {
            tb_preproc *p = NULL;
            /* small frames only: the config may ask for any size */
            if ((c.shortest_edge <= 64 && c.size_h <= 64 && c.size_w <= 64) &&
                (!c.do_center_crop || (c.crop_h <= 64 && c.crop_w <= 64)) &&
                tb_preproc_new(&p, &c, 7, 11, &e) == 0) {
                uint8_t img[7 * 11 * 3];
                for (size_t i = 0; i < sizeof img; i++) img[i] = (uint8_t)(i * 37);
                float *out = malloc(tb_preproc_out_numel(p, 1) * sizeof(float));
                if (!out) abort();
                for (int pos = 0; pos < 3; pos++)
                    if (tb_preproc_run(p, img, 1, (tb_crop_pos)pos, out, &e)) abort();
                free(out);
                tb_preproc_free(p);
            }
        } else if (!strstr(e.msg, "fuzz.json")) {
            abort();
        }
        free(js);
    }

    tb_video_src src = {.data = data, .size = size, .name = g_file};
    tb_video *v = NULL;
    tb_err e = {{0}};
    tb_video_params vp = tb_video_default_params();
    vp.n_threads = 1;
    vp.max_pixels = 1 << 18;   /* keep single inputs fast */
    vp.log = log;
    int rc = tb_video_open_src(&v, &src, &vp, &e);
    if (rc) {
        if (v) abort();
        check_err(rc, &e);
        return 0;
    }
    const tb_video_info *in = tb_video_get_info(v);
    if (in->width < 1 || in->height < 1 || (int64_t)in->width * in->height > (1 << 18) || in->n_frames < 1)
        abort();
    size_t fs = (size_t)in->width * in->height * 3;

    /* sample 4 frames two ways and decode them (the second call seeks back) */
    int64_t idx[4];
    tb_sample_result sr;
    tb_sample_params sp = {.mode = TB_SAMPLE_HF, .num_frames = 4, .stride = 1, .n_clips = 1};
    if (tb_sample_indices(&sp, in->n_frames, idx, &sr, &e)) abort();
    uint8_t *rgb = malloc(fs * 4);
    if (!rgb) abort();
    rc = tb_video_decode(v, idx, 4, rgb, &e);
    if (rc) check_err(rc, &e);
    else touch_u8(rgb, fs * 4);
    sp.mode = TB_SAMPLE_CLIP;
    sp.stride = 3;
    if (tb_sample_indices(&sp, in->n_frames, idx, &sr, &e)) abort();
    rc = tb_video_decode(v, idx, 4, rgb, &e);
    if (rc) check_err(rc, &e);
    else {
        tb_preproc_config c;
        tb_preproc_config_default(&c);
        c.shortest_edge = 20;
        c.crop_h = c.crop_w = 16;
        tb_preproc *p;
        if (tb_preproc_new(&p, &c, in->height, in->width, &e)) abort();
        float *px = malloc(tb_preproc_out_numel(p, 4) * sizeof(float));
        if (!px) abort();
        if (tb_preproc_run(p, rgb, 4, TB_CROP_LAST, px, &e)) abort();
        free(px);
        tb_preproc_free(p);
    }

    /* a few streaming windows */
    tb_stream_params st = {.num_frames = 3, .stride = 2, .hop = 2};
    if (tb_video_stream_begin(v, &st, &e) == 0) {
        for (int w = 0; w < 6; w++) {
            int64_t first;
            int real;
            int r = tb_video_stream_next(v, rgb, &first, &real, &e);
            if (r == 0) break;
            if (r < 0) {
                check_err(-r, &e);
                break;
            }
            if (real < 1 || real > 3) abort();
            touch_u8(rgb, fs * 3);
        }
    } else {
        check_err(1, &e);
    }
    free(rgb);
    tb_video_close(v);
    return 0;
}
