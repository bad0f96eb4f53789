/* Tests for src/video: decoding every generated format frame-accurately, seeking, rotation, the
 * sampling rules, preprocessing parity with transformers 5.23 (tests/fixtures/video), streaming,
 * and bad input. Media are made by tests/make_media.sh (ffmpeg CLI) in a temporary directory.
 * Prints one line per failed check and finally "N passed, M failed". */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <ftw.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "check.h"
#include "common.h"
#include "io/npy.h"
#include "models/family.h"
#include "tubelet_video.h"
#include "video/video.h"

static char g_dir[4096];
static int g_media_ok;

static char *mpath(const char *name) {
    static char bufs[8][4200];
    static int k;
    char *b = bufs[k++ % 8];
    snprintf(b, sizeof bufs[0], "%s/%s", g_dir, name);
    return b;
}

/* A generated test file opened with default parameters, or NULL after a failed check. */
static tb_video *open_media(const char *name) {
    tb_video *v;
    tb_err e;
    tb_video_params vp = tb_video_default_params();
    if (tb_video_open(&v, mpath(name), &vp, &e)) {
        CHECK(0, "%s: %s", name, e.msg);
        return NULL;
    }
    return v;
}

static int rm_cb(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(p);
}

static void write_bytes(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) {
        printf("FATAL: cannot create %s: %s\n", path, strerror(errno));
        exit(2);
    }
    if (n && fwrite(p, 1, n, f) != n) exit(2);
    fclose(f);
}

/* The frame number drawn by make_media.sh: 10 blocks across the top quarter of the stored frame,
 * white = bit set. rot: the rotation tb_video applied (clockwise degrees), so that the stored
 * coordinates can be found in the returned frame. */
static int frame_id(const uint8_t *rgb, int W, int H, int rot) {
    int sw = (rot == 90 || rot == 270) ? H : W;   /* stored width/height */
    int sh = (rot == 90 || rot == 270) ? W : H;
    int id = 0;
    for (int b = 0; b < 10; b++) {
        int cx = (int)((b + 0.5) * sw / 10.0), cy = sh / 8;
        int x, y;
        switch (rot) {
        case 90: x = sh - 1 - cy; y = cx; break;
        case 180: x = sw - 1 - cx; y = sh - 1 - cy; break;
        case 270: x = cy; y = sw - 1 - cx; break;
        default: x = cx; y = cy;
        }
        const uint8_t *p = rgb + ((size_t)y * W + x) * 3;
        if (p[0] + p[1] + p[2] > 3 * 128) id |= 1 << b;
    }
    return id;
}

static uint64_t fnv1a64(const uint8_t *p, size_t n) {
    uint64_t h = 0xCBF29CE484222325ull;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0x100000001B3ull;
    }
    return h;
}

typedef struct {
    int warnings;
    char last[1024];
} logcap;

static void log_cb(void *user, int level, const char *msg) {
    logcap *l = user;
    (void)level;
    l->warnings++;
    snprintf(l->last, sizeof l->last, "%s", msg);
}

/* ------------------------------------------------------------ decoding every format */

typedef struct {
    const char *file;
    int w, h, n, rot;
    const char *pix_fmt;
} media_t;

static const media_t MEDIA[] = {
    {"h264.mp4", 160, 120, 60, 0, "yuv420p"},   {"long.mp4", 128, 96, 300, 0, "yuv420p"},
    {"vp9.webm", 160, 120, 30, 0, "yuv420p"},   {"odd.mkv", 161, 97, 20, 0, "yuv420p"},
    {"mjpeg.avi", 160, 120, 20, 0, "yuvj422p"}, {"yuv444.mp4", 160, 120, 20, 0, "yuv444p"},
    {"yuv422.mp4", 160, 120, 20, 0, "yuv422p"}, {"gray.mkv", 160, 120, 20, 0, "gray"},
    {"anim.gif", 96, 64, 20, 0, NULL},          {"pal8.mkv", 96, 64, 12, 0, "pal8"},
    {"rotated.mp4", 120, 160, 20, 270, NULL},   {"portrait.mp4", 96, 160, 20, 0, NULL},
    {"vfr.mkv", 160, 120, 20, 0, NULL},         {"short.mp4", 160, 120, 5, 0, NULL},
    {"one.mp4", 160, 120, 1, 0, NULL},          {"audio.mp4", 160, 120, 25, 0, NULL},
    {"h264.ts", 96, 64, 13, 0, "yuv420p"},      {"long.ts", 96, 64, 60, 0, "yuv420p"},
};

static void test_formats(void) {
    for (size_t m = 0; m < sizeof MEDIA / sizeof MEDIA[0]; m++) {
        const media_t *md = &MEDIA[m];
        const char *path = mpath(md->file);
        tb_video *v = NULL;
        tb_err e = {{0}};
        tb_video_params vp = tb_video_default_params();
        vp.n_threads = 2;
        int rc = tb_video_open(&v, path, &vp, &e);
        CHECK(rc == 0, "%s: open: %s", md->file, e.msg);
        if (rc) continue;
        const tb_video_info *in = tb_video_get_info(v);
        CHECK(in->width == md->w && in->height == md->h, "%s: size %dx%d, want %dx%d", md->file,
              in->width, in->height, md->w, md->h);
        CHECK(in->n_frames == md->n, "%s: %lld frames, want %d", md->file, (long long)in->n_frames, md->n);
        CHECK(in->rotation == md->rot, "%s: rotation %d, want %d", md->file, in->rotation, md->rot);
        if (md->pix_fmt)
            CHECK(!strcmp(in->pix_fmt, md->pix_fmt), "%s: pix_fmt %s, want %s", md->file, in->pix_fmt, md->pix_fmt);
        /* every frame (long.mp4: every 7th), asked in reverse order: the decoder sorts them */
        int step = md->n > 100 ? 7 : 1, n = 0;
        int64_t idx[64];
        for (int i = md->n - 1; i >= 0 && n < 64; i -= step) idx[n++] = i;
        size_t fs = (size_t)in->width * in->height * 3;
        uint8_t *rgb = malloc(fs * (n < 3 ? 3 : n));
        rc = tb_video_decode(v, idx, n, rgb, &e);
        CHECK(rc == 0, "%s: decode: %s", md->file, e.msg);
        int bad = 0;
        for (int i = 0; i < n && !rc; i++) {
            int id = frame_id(rgb + fs * i, in->width, in->height, in->rotation);
            if (id != idx[i]) {
                if (!bad) printf("  %s: frame %lld shows %d\n", md->file, (long long)idx[i], id);
                bad++;
            }
        }
        CHECK(bad == 0, "%s: %d of %d frames are not the frame asked for", md->file, bad, n);
        tb_video_stats st;
        tb_video_get_stats(v, &st);
        CHECK(st.frames_converted == n, "%s: converted %lld frames for %d", md->file,
              (long long)st.frames_converted, n);
        /* the same frame twice, and again after the end: served by seeking back */
        int64_t again[3] = {0, 0, md->n - 1};
        rc = tb_video_decode(v, again, 3, rgb, &e);
        CHECK(rc == 0 && frame_id(rgb, in->width, in->height, in->rotation) == 0 &&
                  frame_id(rgb + fs, in->width, in->height, in->rotation) == 0 &&
                  frame_id(rgb + 2 * fs, in->width, in->height, in->rotation) == md->n - 1,
              "%s: re-decoding frames 0, 0, last: %s", md->file, rc ? e.msg : "wrong content");
        free(rgb);
        tb_video_close(v);
    }
}

/* the file with audio first: the video stream is still found; audio reported */
static void test_audio_track(void) {
    tb_video *v = open_media("audio.mp4");
    if (!v) return;
    CHECK(tb_video_get_info(v)->has_audio == 1, "audio.mp4: audio track not seen");
    tb_video_close(v);
}

/* ------------------------------------------------------------ seeking */

static void test_seeking(void) {
    tb_err e;
    tb_video *v = open_media("long.mp4");
    if (!v) return;
    const tb_video_info *in = tb_video_get_info(v);
    size_t fs = (size_t)in->width * in->height * 3;
    uint8_t *rgb = malloc(fs * 4);
    int64_t late = 290;
    int rc = tb_video_decode(v, &late, 1, rgb, &e);
    tb_video_stats st;
    tb_video_get_stats(v, &st);
    CHECK(rc == 0 && frame_id(rgb, in->width, in->height, 0) == 290, "long.mp4 frame 290: %s",
          rc ? e.msg : "wrong frame");
    /* keyframes every 12: from the one at 288 the decoder needs a few frames (B-frame delay),
     * not the 291 a decode from the start would take */
    CHECK(st.seeks >= 1 && st.frames_decoded < 30, "long.mp4: frame 290 took %lld seeks, %lld frames decoded",
          (long long)st.seeks, (long long)st.frames_decoded);
    /* a sparse clip: 4 frames far apart */
    int64_t idx[4] = {250, 10, 130, 131};
    tb_video_stats s0 = st;
    rc = tb_video_decode(v, idx, 4, rgb, &e);
    tb_video_get_stats(v, &st);
    int ok = rc == 0;
    for (int i = 0; i < 4 && ok; i++) ok = frame_id(rgb + fs * i, in->width, in->height, 0) == idx[i];
    CHECK(ok, "long.mp4 sparse frames: %s", rc ? e.msg : "wrong frames");
    CHECK(st.frames_decoded - s0.frames_decoded < 80, "long.mp4: 4 sparse frames took %lld decoded frames",
          (long long)(st.frames_decoded - s0.frames_decoded));
    /* times */
    CHECK(fabs(tb_video_frame_time(v, 100) - 4.0) < 1e-9, "long.mp4: frame 100 at %g s",
          tb_video_frame_time(v, 100));
    CHECK(tb_video_frame_at_time(v, 4.0) == 100 && tb_video_frame_at_time(v, 4.039) == 100 &&
              tb_video_frame_at_time(v, 1e9) == 299 && tb_video_frame_at_time(v, -1) == 0,
          "long.mp4: frame_at_time");
    CHECK(fabs(in->fps - 25) < 1e-9 && fabs(in->duration - 12) < 1e-9, "long.mp4: fps %g duration %g",
          in->fps, in->duration);
    free(rgb);
    tb_video_close(v);
}

/* variable frame rate: frames 0-9 every 40 ms, then every 120 ms */
/* Frames between sampled ones that nothing refers to are not decoded; the sampled frames must be
 * bit-identical to a decode of every frame (streaming decodes them all). */
static void test_nonref_skip(void) {
    tb_err e;
    tb_video *v = open_media("long.mp4");
    if (!v) return;
    const tb_video_info *in = tb_video_get_info(v);
    size_t fs = (size_t)in->width * in->height * 3;
    enum { N = 12, STEP = 5 };   /* frames 0, 5, ..., 55: gaps too short to seek over */
    uint8_t *a = malloc(fs * N), *b = malloc(fs * N);
    int64_t idx[N];
    for (int i = 0; i < N; i++) idx[i] = (int64_t)i * STEP;
    tb_video_stats s0, s1;
    tb_video_get_stats(v, &s0);
    int rc = a && b ? tb_video_decode(v, idx, N, a, &e) : TUBELET_ERR_MEMORY;
    tb_video_get_stats(v, &s1);
    CHECK(rc == 0, "long.mp4 strided frames: %s", rc ? e.msg : "");
    /* 56 frames are passed through; x264's B-frames (2, pyramid) leave a third non-referenced */
    CHECK(rc == 0 && s1.seeks == s0.seeks && s1.frames_decoded - s0.frames_decoded < 50,
          "long.mp4: 12 frames at stride 5 decoded %lld frames (%lld seeks); the non-reference "
          "ones between them should have been skipped",
          (long long)(s1.frames_decoded - s0.frames_decoded), (long long)(s1.seeks - s0.seeks));
    tb_stream_params sp = {N, STEP, N * STEP};
    int64_t first = -1;
    int real = 0;
    rc = rc ? rc : tb_video_stream_begin(v, &sp, &e);
    int got = rc ? -1 : tb_video_stream_next(v, b, &first, &real, &e);
    CHECK(got == 1 && first == 0 && real == N, "long.mp4 stream: %s", got < 0 ? e.msg : "short window");
    CHECK(got == 1 && memcmp(a, b, fs * N) == 0,
          "long.mp4: frames decoded with non-reference skipping differ from a full decode");
    free(a);
    free(b);
    tb_video_close(v);
}

static void test_vfr(void) {
    tb_err e;
    tb_video *v = open_media("vfr.mkv");
    if (!v) return;
    int ok = 1;
    for (int i = 0; i < 20; i++) {
        double want = i < 10 ? 0.04 * i : 0.4 + (i - 10) * 0.12;
        if (fabs(tb_video_frame_time(v, i) - want) > 1e-3) {
            if (ok) printf("  vfr.mkv: frame %d at %g s, want %g\n", i, tb_video_frame_time(v, i), want);
            ok = 0;
        }
    }
    CHECK(ok, "vfr.mkv: frame times");
    int64_t f = tb_video_frame_at_time(v, 1.0);   /* 0.4 + 5 * 0.12 = 1.0 */
    CHECK(f == 15, "vfr.mkv: frame at 1.0 s is %lld, want 15", (long long)f);
    f = tb_video_frame_at_time(v, 0.99);
    CHECK(f == 14, "vfr.mkv: frame at 0.99 s is %lld, want 14", (long long)f);
    const tb_video_info *in = tb_video_get_info(v);
    uint8_t *rgb = malloc((size_t)in->width * in->height * 3);
    int64_t i15 = 15;
    int rc = tb_video_decode(v, &i15, 1, rgb, &e);
    CHECK(rc == 0 && frame_id(rgb, in->width, in->height, 0) == 15, "vfr.mkv: frame 15");
    free(rgb);
    tb_video_close(v);
}

/* ------------------------------------------------------------ sampling */

static void expect_idx(const char *what, const tb_sample_params *p, int64_t F, const int64_t *want,
                       int want_pad) {
    int64_t got[256];
    tb_sample_result r;
    tb_err e;
    int rc = tb_sample_indices(p, F, got, &r, &e);
    CHECK(rc == 0, "%s: %s", what, e.msg);
    if (rc) return;
    int same = 1;
    for (int i = 0; i < p->num_frames; i++) same &= got[i] == want[i];
    if (!same) {
        printf("  %s got:", what);
        for (int i = 0; i < p->num_frames; i++) printf(" %lld", (long long)got[i]);
        printf("\n");
    }
    CHECK(same, "%s: indices", what);
    CHECK(r.n_padded == want_pad, "%s: n_padded %d, want %d", what, r.n_padded, want_pad);
}

static void test_sampling(void) {
    /* VideoMAE Kinetics, 16 x stride 4 on 300 frames: 75 strided frames, centred start 29 */
    tb_sample_params p = {.mode = TB_SAMPLE_CLIP, .num_frames = 16, .stride = 4, .n_clips = 1};
    int64_t w[256];
    for (int i = 0; i < 16; i++) w[i] = (29 + i) * 4;
    expect_idx("clip 16x4 F=300", &p, 300, w, 0);
    /* 5 temporal views: start int(k * 59 / 4) = 0, 14, 29, 44, 59 */
    p.n_clips = 5;
    int starts[5] = {0, 14, 29, 44, 59};
    for (int k = 0; k < 5; k++) {
        p.clip = k;
        for (int i = 0; i < 16; i++) w[i] = (starts[k] + i) * 4;
        char what[64];
        snprintf(what, sizeof what, "clip view %d/5", k);
        expect_idx(what, &p, 300, w, 0);
    }
    /* stride makes the clip longer than the video: F = 20, strided 0,4,...,16 then the last repeated */
    p.n_clips = 1;
    p.clip = 0;
    for (int i = 0; i < 16; i++) w[i] = i < 5 ? 4 * i : 16;
    expect_idx("clip 16x4 F=20 (padded)", &p, 20, w, 11);
    /* F = 1 */
    for (int i = 0; i < 16; i++) w[i] = 0;
    expect_idx("clip F=1", &p, 1, w, 15);
    /* F < T at stride 1 */
    p.stride = 1;
    for (int i = 0; i < 16; i++) w[i] = i < 10 ? i : 9;
    expect_idx("clip 16x1 F=10", &p, 10, w, 6);

    /* uniform: floor((i + 0.5) F / T) */
    tb_sample_params u = {.mode = TB_SAMPLE_UNIFORM, .num_frames = 8};
    int64_t wu[8] = {6, 18, 31, 43, 56, 68, 81, 93};   /* F = 100 */
    expect_idx("uniform F=100", &u, 100, wu, 0);
    int64_t wu2[8] = {0, 0, 1, 1, 2, 2, 3, 3};         /* F = 4 < T */
    expect_idx("uniform F=4", &u, 4, wu2, 4);
    int64_t wu1[8] = {0};
    expect_idx("uniform F=1", &u, 1, wu1, 7);

    /* hf: i * F // T (transformers default_sample_indices_fn) */
    tb_sample_params h = {.mode = TB_SAMPLE_HF, .num_frames = 8};
    int64_t wh[8] = {0, 7, 15, 22, 30, 37, 45, 52};     /* F = 60: as the fixture */
    expect_idx("hf F=60", &h, 60, wh, 0);
    int64_t wh2[8] = {0, 0, 0, 1, 1, 1, 2, 2};          /* F = 3: HF raises, we repeat */
    expect_idx("hf F=3", &h, 3, wh2, 5);

    /* hf-rate: np.linspace(0, T*r - 1, T).astype(int64) */
    tb_sample_params hr = {.mode = TB_SAMPLE_HF_RATE, .num_frames = 8, .stride = 4};
    int64_t whr[8] = {0, 4, 8, 13, 17, 22, 26, 31};
    expect_idx("hf-rate 8x4 F=60", &hr, 60, whr, 0);
    int64_t whr2[8] = {0, 4, 8, 13, 17, 19, 19, 19};   /* F = 20: the tail repeats frame 19 */
    expect_idx("hf-rate 8x4 F=20", &hr, 20, whr2, 2);
    hr.num_frames = 1;
    int64_t whr1[1] = {0};
    expect_idx("hf-rate T=1", &hr, 60, whr1, 0);

    /* argument errors */
    int64_t tmp[4];
    tb_err e;
    tb_sample_params badp = {.mode = TB_SAMPLE_CLIP, .num_frames = 4, .stride = 0, .n_clips = 1};
    CHECK(tb_sample_indices(&badp, 10, tmp, NULL, &e) == TUBELET_ERR_ARG, "stride 0 accepted");
    badp.stride = 1;
    badp.clip = 3;
    CHECK(tb_sample_indices(&badp, 10, tmp, NULL, &e) == TUBELET_ERR_ARG, "clip 3 of 1 accepted");
    badp.clip = 0;
    CHECK(tb_sample_indices(&badp, 0, tmp, NULL, &e) == TUBELET_ERR_ARG, "F = 0 accepted");
    CHECK(tb_sample_mode_from_name("uniform") == TB_SAMPLE_UNIFORM &&
              tb_sample_mode_from_name("hf-rate") == TB_SAMPLE_HF_RATE &&
              tb_sample_mode_from_name("nope") == -1,
          "mode names");
}

/* ------------------------------------------------------------ preprocessing parity */

static void test_parity(void) {
    const char *fix = "tests/fixtures/video";
    char path[4200];
    snprintf(path, sizeof path, "%s/cases.json", fix);
    char *json = NULL;
    tb_err e;
    if (tb_read_file(path, &json, NULL, 1 << 20, &e)) {
        CHECK(0, "%s", e.msg);
        return;
    }
    cJSON *root = cJSON_Parse(json);
    free(json);
    cJSON *cases = cJSON_GetObjectItem(root, "cases");
    CHECK(cJSON_GetArraySize(cases) >= 4, "cases.json: %d cases", cJSON_GetArraySize(cases));
    const cJSON *c;
    cJSON_ArrayForEach(c, cases) {
        const char *name = cJSON_GetObjectItem(c, "name")->valuestring;
        const char *vid = cJSON_GetObjectItem(c, "video")->valuestring;
        const char *cfg = cJSON_GetObjectItem(c, "config")->valuestring;
        const char *mode = cJSON_GetObjectItem(c, "mode")->valuestring;
        int T = cJSON_GetObjectItem(c, "num_frames")->valueint;
        int stride = cJSON_GetObjectItem(c, "stride")->valueint;
        cJSON *want_idx = cJSON_GetObjectItem(c, "indices");
        cJSON *hashes = cJSON_GetObjectItem(c, "frame_fnv1a64");

        snprintf(path, sizeof path, "%s/%s", fix, vid);
        tb_video *v;
        tb_video_params vp = tb_video_default_params();
        if (tb_video_open(&v, path, &vp, &e)) {
            CHECK(0, "%s: %s", name, e.msg);
            continue;
        }
        const tb_video_info *in = tb_video_get_info(v);
        CHECK(in->n_frames == cJSON_GetObjectItem(c, "n_frames_video")->valueint, "%s: frame count", name);
        tb_sample_params sp = {.mode = (tb_sample_mode)tb_sample_mode_from_name(mode), .num_frames = T,
                               .stride = stride, .n_clips = 1};
        int64_t idx[64];
        tb_sample_result sr;
        int rc = tb_sample_indices(&sp, in->n_frames, idx, &sr, &e);
        int same = rc == 0 && cJSON_GetArraySize(want_idx) == T;
        for (int i = 0; i < T && same; i++) same = idx[i] == (int64_t)cJSON_GetArrayItem(want_idx, i)->valuedouble;
        CHECK(same, "%s: indices differ from transformers'", name);

        size_t fs = (size_t)in->width * in->height * 3;
        uint8_t *rgb = malloc(fs * T);
        rc = tb_video_decode(v, idx, T, rgb, &e);
        CHECK(rc == 0, "%s: decode: %s", name, e.msg);
        int hash_ok = 0;
        for (int i = 0; i < T && rc == 0; i++) {
            char hx[17];
            snprintf(hx, sizeof hx, "%016llx", (unsigned long long)fnv1a64(rgb + fs * i, fs));
            hash_ok += !strcmp(hx, cJSON_GetArrayItem(hashes, i)->valuestring);
        }
        /* bit-exact decoding: torchcodec on the same FFmpeg; PyAV (hf-rate) bundles its own */
        CHECK(hash_ok == T, "%s: %d of %d decoded frames bit-identical to the reference decoder", name,
              hash_ok, T);

        tb_preproc_config pc;
        logcap lc = {0};
        tb_log log = {log_cb, &lc};
        /* the file transformers read (video_preprocessor_config.json for a processor saved by
         * transformers 5), found as a model directory's is */
        const cJSON *cf = cJSON_GetObjectItem(c, "config_file");
        char dir[2048], found[2100];
        snprintf(dir, sizeof dir, "%s/%s", fix, cfg);
        rc = tb_preproc_config_file(dir, found, sizeof found) ? 0 : TUBELET_ERR_IO;
        snprintf(path, sizeof path, "%s/%s", dir,
                 cJSON_IsString(cf) ? cf->valuestring : "preprocessor_config.json");
        CHECK(rc == 0 && !strcmp(found, path), "%s: found '%s', want %s", name, rc ? "" : found, path);
        rc = tb_preproc_config_load_dir(&pc, dir, &log, &e);
        /* one fixture crops 48x48 out of 44x70 on purpose: transformers pads, we warn and pad */
        CHECK(rc == 0 && (lc.warnings == 0 || (lc.warnings == 1 && strstr(lc.last, "padded with zeros"))),
              "%s: config: %s %s", name, rc ? e.msg : "", lc.last);
        tb_preproc *pp = NULL;
        if (!rc) rc = tb_preproc_new(&pp, &pc, in->height, in->width, &e);
        npy_array ref;
        snprintf(path, sizeof path, "%s/%s.pixel_values.npy", fix, name);
        int rr = npy_read(path, &ref, &e);
        CHECK(rr == 0, "%s: %s", name, e.msg);
        if (!rc && !rr) {
            int oh, ow;
            tb_preproc_out_size(pp, &oh, &ow);
            CHECK(ref.ndim == 4 && ref.shape[0] == T && ref.shape[1] == 3 && ref.shape[2] == oh &&
                      ref.shape[3] == ow,
                  "%s: output %dx%d vs reference shape", name, oh, ow);
            float *px = malloc(tb_preproc_out_numel(pp, T) * sizeof(float));
            rc = tb_preproc_run(pp, rgb, T, TB_CROP_CENTER, px, &e);
            if (!rc && ref.numel == tb_preproc_out_numel(pp, T)) {
                double d = check_max_abs_diff(px, ref.data, (long)ref.numel);
                /* bound: 1e-6 absolute on normalised values; measured 0 (bit-identical) */
                CHECK(d <= 1e-6, "%s: pixel_values max abs diff %g", name, d);
                if (getenv("TB_VERBOSE")) printf("  %s: max abs diff %g\n", name, d);
            }
            free(px);
        }
        npy_free(&ref);
        tb_preproc_free(pp);
        free(rgb);
        tb_video_close(v);
    }
    cJSON_Delete(root);
}

/* ------------------------------------------------------------ preprocessing details */

static void test_crops(void) {
    /* a 4 x 10 frame, pixel value = column; no resize, crop 4 x 4, no rescale/normalise */
    tb_preproc_config c;
    tb_preproc_config_default(&c);
    c.do_resize = 0;
    c.crop_h = 4;
    c.crop_w = 4;
    c.do_rescale = c.do_normalize = 0;
    uint8_t img[4 * 10 * 3];
    for (int y = 0; y < 4; y++)
        for (int x = 0; x < 10; x++)
            for (int k = 0; k < 3; k++) img[(y * 10 + x) * 3 + k] = (uint8_t)x;
    tb_preproc *p;
    tb_err e;
    CHECK(tb_preproc_new(&p, &c, 4, 10, &e) == 0, "crop plan: %s", e.msg);
    float out[3 * 16];
    int want_left[3] = {3, 0, 6};   /* centre int(6 / 2.0), first, last */
    for (int pos = 0; pos < 3; pos++) {
        tb_preproc_run(p, img, 1, (tb_crop_pos)pos, out, &e);
        CHECK(out[0] == want_left[pos] && out[15] == want_left[pos] + 3, "landscape crop %d starts at %g", pos, out[0]);
    }
    tb_preproc_free(p);
    /* portrait 10 x 4: crops move down the frame */
    uint8_t img2[10 * 4 * 3];
    for (int y = 0; y < 10; y++)
        for (int x = 0; x < 4; x++)
            for (int k = 0; k < 3; k++) img2[(y * 4 + x) * 3 + k] = (uint8_t)y;
    CHECK(tb_preproc_new(&p, &c, 10, 4, &e) == 0, "crop plan: %s", e.msg);
    for (int pos = 0; pos < 3; pos++) {
        tb_preproc_run(p, img2, 1, (tb_crop_pos)pos, out, &e);
        CHECK(out[0] == want_left[pos] && out[15] == want_left[pos] + 3, "portrait crop %d starts at %g", pos, out[0]);
    }
    tb_preproc_free(p);
    /* crop larger than the frame: zero padding, (c - n) // 2 before */
    c.crop_h = 6;
    c.crop_w = 13;
    CHECK(tb_preproc_new(&p, &c, 4, 10, &e) == 0, "crop plan: %s", e.msg);
    float big[3 * 6 * 13];
    tb_preproc_run(p, img, 1, TB_CROP_CENTER, big, &e);
    /* rows 0 and 5 are padding; row 1 = [0 0 | 0..9 | 0] with one column before the image */
    CHECK(big[0] == 0 && big[13 + 1] == 0 && big[13 + 2] == 1 && big[13 + 10] == 9 && big[13 + 11] == 0 &&
              big[5 * 13 + 5] == 0,
          "padded crop");
    tb_preproc_free(p);
}

static void test_config(void) {
    tb_preproc_config c;
    tb_err e;
    logcap lc = {0};
    tb_log log = {log_cb, &lc};
    /* ViViT defaults come from the class name; unknown keys are warnings */
    int rc = tb_preproc_config_parse(&c, "{\"image_processor_type\": \"VivitImageProcessor\", \"colour\": 1}",
                                     "vivit.json", &log, &e);
    CHECK(rc == 0 && c.offset == 1 && c.shortest_edge == 256 && fabs(c.rescale_factor - 1 / 127.5) < 1e-12,
          "vivit defaults: %s", e.msg);
    CHECK(lc.warnings == 1 && strstr(lc.last, "colour") && strstr(lc.last, "vivit.json"),
          "unknown key warning: %s", lc.last);
    /* size as an int, crop as an int, one-number mean */
    rc = tb_preproc_config_parse(&c, "{\"size\": 100, \"crop_size\": 90, \"image_mean\": 0.25, \"do_normalize\": false}",
                                 "x.json", &log, &e);
    CHECK(rc == 0 && c.shortest_edge == 100 && c.crop_h == 90 && c.crop_w == 90 && c.mean[2] == 0.25f &&
              c.do_normalize == 0,
          "int sizes: %s", e.msg);
    rc = tb_preproc_config_parse(&c, "{\"size\": {\"height\": 32, \"width\": 48}}", "x.json", &log, &e);
    CHECK(rc == 0 && c.shortest_edge == 0 && c.size_h == 32 && c.size_w == 48, "size dict: %s", e.msg);
    /* errors name the file */
    rc = tb_preproc_config_parse(&c, "{\"image_std\": [1, 0, 1]}", "bad_std.json", &log, &e);
    CHECK(rc == TUBELET_ERR_CONFIG && strstr(e.msg, "bad_std.json"), "zero std: %d %s", rc, e.msg);
    rc = tb_preproc_config_parse(&c, "{\"resample\": 1}", "lanczos.json", &log, &e);
    CHECK(rc == TUBELET_ERR_UNSUPPORTED && strstr(e.msg, "lanczos.json"), "lanczos: %d %s", rc, e.msg);
    rc = tb_preproc_config_parse(&c, "{\"size\": \"big\"}", "s.json", &log, &e);
    CHECK(rc == TUBELET_ERR_CONFIG && strstr(e.msg, "size"), "string size: %s", e.msg);
    rc = tb_preproc_config_parse(&c, "[1, 2]", "arr.json", &log, &e);
    CHECK(rc == TUBELET_ERR_FORMAT && strstr(e.msg, "arr.json"), "array json: %s", e.msg);
    /* the JSON written for a Vivit* class without offset keeps it off (its default is on) */
    rc = tb_preproc_config_parse(&c, "{\"image_processor_type\": \"VivitImageProcessor\", "
                                 "\"offset\": false}", "nooffset.json", &log, &e);
    CHECK(rc == 0 && c.offset == 0, "vivit without offset: %s", e.msg);
    char *js = tb_preproc_config_to_json(&c);
    tb_preproc_config back;
    rc = js ? tb_preproc_config_parse(&back, js, "written.json", &log, &e) : -1;
    CHECK(rc == 0 && back.offset == 0, "written vivit config re-reads offset %d: %s", back.offset,
          js ? js : "(null)");
    free(js);
    /* rescale_factor is written with every digit it needs (cJSON alone drops the last bit of
     * this one) */
    rc = tb_preproc_config_parse(&c, "{\"rescale_factor\": 5.00392156862745098}", "rf.json", &log,
                                 &e);
    js = rc ? NULL : tb_preproc_config_to_json(&c);
    rc = js ? tb_preproc_config_parse(&back, js, "written.json", &log, &e) : -1;
    CHECK(rc == 0 && back.rescale_factor == c.rescale_factor,
          "rescale_factor %.17g written as %.17g", c.rescale_factor, back.rescale_factor);
    free(js);
    rc = tb_preproc_config_load(&c, mpath("no_such_config.json"), &log, &e);
    CHECK(rc == TUBELET_ERR_IO && strstr(e.msg, "no_such_config.json"), "missing config: %s", e.msg);
    /* resized size: short side S, long int(S * long / short) */
    tb_preproc_config_default(&c);
    c.shortest_edge = 224;
    c.do_center_crop = 0;
    tb_preproc *p;
    CHECK(tb_preproc_new(&p, &c, 97, 161, &e) == 0, "plan: %s", e.msg);
    int oh, ow;
    tb_preproc_out_size(p, &oh, &ow);
    CHECK(oh == 224 && ow == 371, "97x161 -> %dx%d, want 224x371", oh, ow);
    tb_preproc_free(p);
}

/* ------------------------------------------------------------ V-JEPA 2's processor, file order */

static void write_text_file(const char *dir, const char *name, const char *text) {
    char path[600];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    if (f) fputs(text, f), fclose(f);
}

/* transformers 5's AutoVideoProcessor reads processor_config.json's "video_processor", else
 * video_preprocessor_config.json, else preprocessor_config.json; VJEPA2VideoProcessor's short
 * side follows its crop (vjepa2.c's preprocess defaults). */
static void test_vjepa2_preprocess(void) {
    logcap lc = {0};
    tb_log log = {log_cb, &lc};
    tb_err e = {{0}};
    tb_preproc_config c;
    char dir[] = "/tmp/tubelet_vjpp_XXXXXX", path[700];
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    CHECK(!tb_preproc_config_file(dir, path, sizeof path), "an empty directory has a config: %s", path);
    write_text_file(dir, "preprocessor_config.json", "{\"size\": {\"shortest_edge\": 100}}");
    int rc = tb_preproc_config_load_dir(&c, dir, &log, &e);
    CHECK(rc == 0 && c.shortest_edge == 100, "preprocessor_config.json alone: %d %s", c.shortest_edge, e.msg);
    write_text_file(dir, "video_preprocessor_config.json", "{\"size\": {\"shortest_edge\": 64}}");
    rc = tb_preproc_config_load_dir(&c, dir, &log, &e);
    CHECK(rc == 0 && c.shortest_edge == 64, "video_preprocessor_config.json first: %d %s", c.shortest_edge, e.msg);
    write_text_file(dir, "processor_config.json", "{\"processor_class\": \"X\"}");
    rc = tb_preproc_config_load_dir(&c, dir, &log, &e);
    CHECK(rc == 0 && c.shortest_edge == 64, "processor_config.json without a video_processor: %d", c.shortest_edge);
    write_text_file(dir, "processor_config.json", "{\"video_processor\": {\"size\": {\"shortest_edge\": 50}}}");
    rc = tb_preproc_config_load_dir(&c, dir, &log, &e);
    CHECK(rc == 0 && c.shortest_edge == 50, "processor_config.json's video_processor first: %d %s", c.shortest_edge, e.msg);
    tubelet_preprocessor *pp = NULL;
    char err[512];
    rc = tubelet_preprocessor_load(&pp, dir, NULL, NULL, err, sizeof err);
    CHECK(rc == 0 && tb_preprocessor_config(pp)->shortest_edge == 50, "public load: %s", err);
    tubelet_preprocessor_free(pp);
    static const char *const names[] = {"processor_config.json", "video_preprocessor_config.json",
                                        "preprocessor_config.json"};
    for (int i = 0; i < 3; i++) snprintf(path, sizeof path, "%s/%s", dir, names[i]), unlink(path);
    rmdir(dir);

    /* the class's own defaults, from its family's table: crop 256, short side int(256 * 256 / 224) */
    const tb_preproc_defaults *d = tb_family_preprocess("VJEPA2VideoProcessor");
    CHECK(d && d->shortest_edge == 292 && d->crop_size == 256 && d->shortest_from_crop == 1,
          "no VJEPA2 defaults, or not VJEPA2VideoProcessor's");
    rc = tb_preproc_config_parse(&c, "{\"video_processor_type\": \"VJEPA2VideoProcessor\"}", "v.json", &log, &e);
    CHECK(rc == 0 && c.crop_h == 256 && c.crop_w == 256 && c.shortest_edge == 292 && c.mean[0] == 0.485f &&
              c.std[2] == 0.225f && c.rescale_factor == 1.0 / 255 && c.resample == TB_RESAMPLE_BILINEAR,
          "VJEPA2 defaults: crop %d short %d: %s", c.crop_h, c.shortest_edge, e.msg);
    rc = tb_preproc_config_parse(&c, "{\"video_processor_type\": \"VJEPA2VideoProcessor\", \"crop_size\": 384, "
                                 "\"size\": {\"shortest_edge\": 10}}", "v.json", &log, &e);
    CHECK(rc == 0 && c.crop_h == 384 && c.shortest_edge == 438, "VJEPA2 at 384: short %d", c.shortest_edge);
    char *js = tb_preproc_config_to_json(&c);
    CHECK(js && strstr(js, "\"video_processor_type\"") && strstr(js, "438"), "written: %s", js ? js : "");
    free(js);
}

/* ------------------------------------------------------------ streaming */

static void test_streaming(void) {
    tb_video *v;
    tb_err e;
    tb_video_params vp = tb_video_default_params();
    vp.no_index = 1;   /* as a timeline over a long file would */
    if (tb_video_open(&v, mpath("long.mp4"), &vp, &e)) {
        CHECK(0, "long.mp4: %s", e.msg);
        return;
    }
    const tb_video_info *in = tb_video_get_info(v);
    size_t fs = (size_t)in->width * in->height * 3;
    /* non-overlapping windows of 16 frames at stride 2 (hop 32): 9 full, then 6 real + padding */
    tb_stream_params sp = {.num_frames = 16, .stride = 2, .hop = 32};
    CHECK(tb_video_stream_begin(v, &sp, &e) == 0, "stream begin: %s", e.msg);
    uint8_t *win = malloc(fs * 16);
    int64_t first;
    int real, nw = 0, ok = 1, r;
    while ((r = tb_video_stream_next(v, win, &first, &real, &e)) == 1) {
        if (first != (int64_t)nw * 32) ok = 0;
        for (int j = 0; j < 16; j++) {
            int64_t want = first + 2 * (j < real ? j : real - 1);
            if (frame_id(win + fs * j, in->width, in->height, 0) != want) ok = 0;
        }
        if (nw < 9 && real != 16) ok = 0;
        if (nw == 9 && real != 6) ok = 0;
        nw++;
    }
    CHECK(r == 0 && nw == 10 && ok, "stream windows: r=%d windows=%d ok=%d %s", r, nw, ok, r < 0 ? e.msg : "");
    tb_video_stats st;
    tb_video_get_stats(v, &st);
    CHECK(st.seeks == 0 && st.frames_converted == 9 * 16 + 6, "stream: %lld seeks, %lld converted",
          (long long)st.seeks, (long long)st.frames_converted);
    /* overlapping windows (hop 4 < 8 x 2): shared frames are kept, not decoded again */
    tb_stream_params sp2 = {.num_frames = 8, .stride = 2, .hop = 4};
    tb_video_stats s0;
    tb_video_get_stats(v, &s0);
    CHECK(tb_video_stream_begin(v, &sp2, &e) == 0, "stream begin 2: %s", e.msg);
    nw = 0;
    ok = 1;
    while (nw < 20 && (r = tb_video_stream_next(v, win, &first, &real, &e)) == 1) {
        for (int j = 0; j < 8; j++)
            if (frame_id(win + fs * j, in->width, in->height, 0) != first + 2 * (j < real ? j : real - 1)) ok = 0;
        nw++;
    }
    tb_video_get_stats(v, &st);
    CHECK(ok && nw == 20, "overlapping windows content (%d windows)", nw);
    /* 20 windows of 8 frames, each new window needs only 2 new frames: 8 + 19 * 2 */
    CHECK(st.frames_converted - s0.frames_converted == 8 + 19 * 2, "overlapping windows converted %lld",
          (long long)(st.frames_converted - s0.frames_converted));
    /* a hop that would need going back */
    tb_stream_params bad = {.num_frames = 8, .stride = 4, .hop = 6};
    CHECK(tb_video_stream_begin(v, &bad, &e) == TUBELET_ERR_ARG && strstr(e.msg, "long.mp4"), "bad hop: %s", e.msg);
    free(win);
    tb_video_close(v);
}

/* ------------------------------------------------------------ bad input */

static void expect_open_fail(const char *path, int want_rc, const char *what) {
    tb_video *v = (tb_video *)1;
    tb_err e = {{0}};
    tb_video_params vp = tb_video_default_params();
    int rc = tb_video_open(&v, path, &vp, &e);
    CHECK(rc != 0 && v == NULL, "%s: opened (rc %d)", what, rc);
    if (want_rc) CHECK(rc == want_rc, "%s: status %d, want %d (%s)", what, rc, want_rc, e.msg);
    CHECK(strstr(e.msg, path) != NULL, "%s: message does not name the file: %s", what, e.msg);
    if (getenv("TB_VERBOSE")) printf("  %s: %s\n", what, e.msg);
}

static void test_bad_input(void) {
    expect_open_fail(mpath("does_not_exist.mp4"), TUBELET_ERR_IO, "missing file");
    write_bytes(mpath("notes.txt"), "this is not a video\n", 20);
    expect_open_fail(mpath("notes.txt"), TUBELET_ERR_FORMAT, "text file");
    write_bytes(mpath("empty.mp4"), "", 0);
    expect_open_fail(mpath("empty.mp4"), TUBELET_ERR_FORMAT, "empty file");
    expect_open_fail(g_dir, 0, "a directory");
    expect_open_fail(mpath("audio_only.m4a"), TUBELET_ERR_FORMAT, "audio only");
    /* zero frames: a y4m header and nothing after it */
    const char *y4m = "YUV4MPEG2 W64 H48 F25:1 Ip A1:1 C420jpeg\n";
    write_bytes(mpath("empty.y4m"), y4m, strlen(y4m));
    expect_open_fail(mpath("empty.y4m"), TUBELET_ERR_FORMAT, "zero frames");
    /* absurd dimensions */
    const char *huge = "YUV4MPEG2 W100000 H100000 F25:1 Ip A1:1 C420jpeg\nFRAME\n\x10\x10\x10\x10";
    write_bytes(mpath("huge.y4m"), huge, strlen(huge));
    expect_open_fail(mpath("huge.y4m"), 0, "absurd dimensions (FFmpeg refuses)");
    const char *wide = "YUV4MPEG2 W20000 H64 F25:1 Ip A1:1 C420jpeg\nFRAME\n\x10\x10\x10\x10";
    write_bytes(mpath("wide.y4m"), wide, strlen(wide));
    expect_open_fail(mpath("wide.y4m"), TUBELET_ERR_UNSUPPORTED, "absurd dimensions (our limit)");
    /* a stream FFmpeg has no decoder for: the AVI's MJPG fourcc renamed */
    size_t n;
    unsigned char *b = check_read_file(mpath("mjpeg.avi"), &n);
    if (b) {
        for (size_t i = 0; i + 4 <= n; i++)
            if (!memcmp(b + i, "MJPG", 4) || !memcmp(b + i, "mjpg", 4)) memcpy(b + i, "QZQZ", 4);
        write_bytes(mpath("nodecoder.avi"), b, n);
        free(b);
        expect_open_fail(mpath("nodecoder.avi"), TUBELET_ERR_UNSUPPORTED, "no decoder");
    }

    /* truncated: the index promises 60 frames, the data stops early. Opening works (with a
     * warning); frames past the data are a clean error naming the file, frames before it decode */
    tb_video *v;
    tb_err e = {{0}};
    logcap lc = {0};
    tb_video_params vp = tb_video_default_params();
    vp.log = (tb_log){log_cb, &lc};
    if (tb_video_open(&v, mpath("truncated.mp4"), &vp, &e) == 0) {
        const tb_video_info *in = tb_video_get_info(v);
        CHECK(in->n_frames_header == 60 && in->n_frames < 60, "truncated: %lld of %lld frames",
              (long long)in->n_frames, (long long)in->n_frames_header);
        CHECK(lc.warnings == 1 && strstr(lc.last, "truncated.mp4"), "truncated: warning '%s'", lc.last);
        size_t fs = (size_t)in->width * in->height * 3;
        uint8_t *rgb = malloc(fs);
        int64_t i50 = 50;
        int rc = tb_video_decode(v, &i50, 1, rgb, &e);
        CHECK(rc == TUBELET_ERR_ARG && strstr(e.msg, "truncated.mp4"), "truncated frame 50: %d %s", rc, e.msg);
        int decoded = 0, failed = 0;
        for (int64_t i = 0; i < in->n_frames; i++) {
            rc = tb_video_decode(v, &i, 1, rgb, &e);
            if (rc == 0) decoded += frame_id(rgb, in->width, in->height, 0) == i;
            else failed += strstr(e.msg, "truncated.mp4") != NULL;
        }
        CHECK(decoded + failed == in->n_frames && decoded >= 12, "truncated: %d decoded, %d clean errors",
              decoded, failed);
        free(rgb);
        tb_video_close(v);
    } else {
        CHECK(strstr(e.msg, "truncated.mp4") != NULL, "truncated: %s", e.msg);
    }

    /* corrupt: garbage over the middle of the stream. Never a crash; every frame either decodes
     * or is an error naming the file */
    b = check_read_file(mpath("h264.mp4"), &n);
    if (b) {
        uint32_t s = 12345;
        for (size_t i = n / 3; i < n / 3 + n / 6; i++) {
            s = s * 1103515245u + 12345u;
            b[i] = (unsigned char)(s >> 16);
        }
        write_bytes(mpath("corrupt.mp4"), b, n);
        free(b);
        if (tb_video_open(&v, mpath("corrupt.mp4"), NULL, &e) == 0) {
            const tb_video_info *in = tb_video_get_info(v);
            size_t fs = (size_t)in->width * in->height * 3;
            uint8_t *rgb = malloc(fs * in->n_frames);
            int64_t *all = malloc(sizeof(int64_t) * in->n_frames);
            for (int64_t i = 0; i < in->n_frames; i++) all[i] = i;
            int rc = tb_video_decode(v, all, (int)in->n_frames, rgb, &e);
            CHECK(rc == 0 || strstr(e.msg, "corrupt.mp4"), "corrupt: %s", e.msg);
            free(all);
            free(rgb);
            tb_video_close(v);
        } else {
            CHECK(strstr(e.msg, "corrupt.mp4") != NULL, "corrupt open: %s", e.msg);
        }
    }

    /* argument errors */
    if (tb_video_open(&v, mpath("short.mp4"), NULL, &e) == 0) {
        uint8_t px[3];
        int64_t bad[2] = {-1, 5};
        CHECK(tb_video_decode(v, bad, 1, px, &e) == TUBELET_ERR_ARG && strstr(e.msg, "short.mp4"), "index -1");
        CHECK(tb_video_decode(v, bad + 1, 1, px, &e) == TUBELET_ERR_ARG && strstr(e.msg, "outside"),
              "index past the end: %s", e.msg);
        tb_video_close(v);
    }
    CHECK(tb_video_open(&v, "", NULL, &e) == TUBELET_ERR_ARG, "empty path");

    /* fuzzer finding: a WebM whose seek back to the start fails, so the file is reopened during
     * open (used a stream pointer of the closed context). Must open or fail cleanly. */
    const char *fz = "tests/fixtures/video/fuzz_reopen.bin";
    int rc = tb_video_open(&v, fz, NULL, &e);
    if (rc == 0) {
        const tb_video_info *in = tb_video_get_info(v);
        uint8_t *rgb = malloc((size_t)in->width * in->height * 3);
        int64_t i0 = 0;
        rc = tb_video_decode(v, &i0, 1, rgb, &e);
        CHECK(rc == 0 || strstr(e.msg, fz), "fuzz_reopen.bin decode: %s", e.msg);
        free(rgb);
        tb_video_close(v);
    } else {
        CHECK(strstr(e.msg, fz) != NULL, "fuzz_reopen.bin: %s", e.msg);
    }
}

/* The public API: views of a file equal its sampled frames preprocessed in memory, view by
 * view (1 clip x 3 crops); a FIFO, a bad sampling name and a bad preprocessor are errors that
 * name the file. */
static void test_public_views(void) {
    char err[1024];
    tubelet_preprocessor *pp = NULL;
    CHECK(tubelet_preprocessor_default(&pp, 32, 32) == 0, "preprocessor_default");
    if (!pp) return;
    tubelet_views_params p = tubelet_views_default_params();
    p.crops = 3, p.sampling = "uniform";
    tubelet_views v;
    tubelet_frames f;
    const char *path = mpath("long.mp4");
    int rc = tubelet_views_load(&v, path, pp, &p, 5, err, sizeof err);
    CHECK(rc == 0, "views_load: %s", err);
    int rf = tubelet_frames_read(&f, path, &p, 5, err, sizeof err);
    CHECK(rf == 0, "frames_read: %s", err);
    if (!rc && !rf) {
        CHECK(v.n_views == 3 && v.T == 5 && v.C == 3 && v.H == 32 && v.W == 32, "views shape %d %d %d %d %d",
              v.n_views, v.T, v.C, v.H, v.W);
        CHECK(f.n == 5 && !memcmp(f.indices, v.indices, 5 * sizeof(int64_t)), "frames indices");
        const size_t per = (size_t)5 * 3 * 32 * 32;
        float *out = malloc(sizeof(float) * per);
        for (int k = 0; out && k < 3; k++) {
            int oh = 0, ow = 0, crop = k == 0 ? 1 : k == 1 ? 0 : 2; /* views: first, centre, last */
            CHECK(tubelet_preprocess_frames(pp, f.rgb, f.n, f.height, f.width, crop, out, &oh, &ow,
                                            err, sizeof err) == 0, "preprocess_frames: %s", err);
            CHECK(oh == 32 && ow == 32 && !memcmp(out, v.pixels + per * k, sizeof(float) * per),
                  "view %d differs from its frames preprocessed", k);
        }
        free(out);
        tubelet_frames_free(&f);
        tubelet_views_free(&v);
    }
    p.sampling = "nope";
    CHECK(tubelet_views_load(&v, path, pp, &p, 5, err, sizeof err) != 0 && strstr(err, "nope"),
          "bad sampling accepted: %s", err);
    CHECK(!tubelet_sampling_valid("nope") && tubelet_sampling_valid("hf"), "sampling_valid");
    p.sampling = "hf";
    char fifo[4300];
    snprintf(fifo, sizeof fifo, "%s/fifo.mp4", g_dir);
    CHECK(mkfifo(fifo, 0600) == 0, "mkfifo");
    CHECK(tubelet_views_load(&v, fifo, pp, &p, 5, err, sizeof err) != 0 && strstr(err, fifo) &&
          strstr(err, "not a regular file"), "FIFO: %s", err);
    tubelet_preprocessor_free(pp);
    char dir[4300], cfg[4400];
    snprintf(dir, sizeof dir, "%s/ppdir", g_dir);
    mkdir(dir, 0700);
    snprintf(cfg, sizeof cfg, "%s/preprocessor_config.json", dir);
    write_bytes(cfg, "{\"image_std\": [0, 1, 1]}", 24);
    CHECK(tubelet_preprocessor_load(&pp, dir, NULL, NULL, err, sizeof err) != 0 && !pp &&
          strstr(err, "preprocessor_config.json"), "zero std accepted: %s", err);
}

/* Video from memory (FFmpeg custom I/O): the same bytes give bit-identical views, frames and
 * stream windows as the path; truncated, garbage and empty buffers are clean errors naming the
 * source; a playlist in memory opens nothing else. */
static void same_views(const char *file, const tubelet_preprocessor *pp, tubelet_views_params *p) {
    char err[1024], err2[1024];
    size_t n;
    unsigned char *b = check_read_file(mpath(file), &n);
    if (!b) return;
    tubelet_views a, m;
    int ra = tubelet_views_load(&a, mpath(file), pp, p, 6, err, sizeof err);
    int rm = tubelet_views_load_memory(&m, b, n, file, pp, p, 6, err2, sizeof err2);
    CHECK(ra == 0 && rm == 0, "%s: views from path %d (%s), from memory %d (%s)", file, ra,
          ra ? err : "", rm, rm ? err2 : "");
    if (!ra && !rm) {
        size_t px = (size_t)a.n_views * a.T * a.C * a.H * a.W;
        CHECK(m.n_views == a.n_views && m.T == a.T && m.H == a.H && m.W == a.W &&
                  m.n_frames == a.n_frames && m.fps == a.fps && m.width == a.width &&
                  m.height == a.height && m.n_padded == a.n_padded &&
                  !memcmp(m.indices, a.indices, sizeof(int64_t) * (size_t)(p->clips * a.T)) &&
                  !memcmp(m.pixels, a.pixels, sizeof(float) * px),
              "%s: views from memory differ from the path's", file);
    }
    if (!ra) tubelet_views_free(&a);
    if (!rm) tubelet_views_free(&m);
    tubelet_frames fa, fm;
    ra = tubelet_frames_read(&fa, mpath(file), p, 4, err, sizeof err);
    rm = tubelet_frames_read_memory(&fm, b, n, NULL, p, 4, err2, sizeof err2);
    CHECK(ra == 0 && rm == 0 && fa.n == fm.n && fa.height == fm.height && fa.width == fm.width &&
              !memcmp(fa.rgb, fm.rgb, (size_t)fa.n * fa.height * fa.width * 3),
          "%s: frames from memory differ (%s)", file, rm ? err2 : "");
    if (!ra) tubelet_frames_free(&fa);
    if (!rm) tubelet_frames_free(&fm);
    /* windows of 4 frames at stride 2, overlapping (hop 2) */
    tubelet_video_stream *sa = NULL, *sm = NULL;
    ra = tubelet_video_stream_open(&sa, mpath(file), pp, 1, NULL, NULL, err, sizeof err);
    rm = tubelet_video_stream_open_memory(&sm, b, n, file, pp, 1, NULL, NULL, err2, sizeof err2);
    CHECK(ra == 0 && rm == 0, "%s: stream open: %s / %s", file, ra ? err : "", rm ? err2 : "");
    if (!ra && !rm) {
        int ha, wa, hm, wm, windows = 0, same = 1, ga, gm;
        ra = tubelet_video_stream_begin(sa, 4, 2, 2, &ha, &wa, err, sizeof err);
        rm = tubelet_video_stream_begin(sm, 4, 2, 2, &hm, &wm, err2, sizeof err2);
        CHECK(!ra && !rm && ha == hm && wa == wm, "%s: stream begin", file);
        size_t np = (size_t)4 * 3 * ha * wa;
        float *pa = malloc(sizeof(float) * np), *pm = malloc(sizeof(float) * np);
        do {
            int64_t fa0 = -1, fm0 = -2;
            int na = 0, nm = 0;
            ga = tubelet_video_stream_next(sa, pa, &fa0, &na, err, sizeof err);
            gm = tubelet_video_stream_next(sm, pm, &fm0, &nm, err2, sizeof err2);
            if (ga != gm || (ga == 1 && (fa0 != fm0 || na != nm || memcmp(pa, pm, sizeof(float) * np))))
                same = 0;
            windows += ga == 1;
        } while (same && ga == 1 && windows < 400);
        CHECK(same && ga == 0 && windows > 0, "%s: stream windows from memory differ (%d windows)",
              file, windows);
        free(pa), free(pm);
    }
    tubelet_video_stream_close(sa);
    tubelet_video_stream_close(sm);
    free(b);
}

static void expect_memory_fail(const void *data, size_t size, const char *name, const char *want,
                               const tubelet_preprocessor *pp, const char *what) {
    char err[1024] = "";
    tubelet_views v;
    int rc = tubelet_views_load_memory(&v, data, size, name, pp, NULL, 4, err, sizeof err);
    CHECK(rc != 0 && v.pixels == NULL && strstr(err, want), "%s: status %d, message '%s'", what, rc,
          err);
    tubelet_video_stream *s = (tubelet_video_stream *)1;
    rc = tubelet_video_stream_open_memory(&s, data, size, name, pp, 1, NULL, NULL, err, sizeof err);
    CHECK(rc != 0 && s == NULL && strstr(err, want), "%s (stream): status %d, '%s'", what, rc, err);
    if (getenv("TB_VERBOSE")) printf("  %s: %s\n", what, err);
}

static void test_memory(void) {
    tubelet_preprocessor *pp = NULL;
    CHECK(tubelet_preprocessor_default(&pp, 32, 32) == 0, "preprocessor_default");
    if (!pp) return;
    tubelet_views_params p = tubelet_views_default_params();
    p.clips = 2, p.crops = 3, p.sampling = "clip", p.stride = 2;
    const char *files[] = {"h264.mp4", "vp9.webm", "odd.mkv", "mjpeg.avi", "anim.gif",
                           "rotated.mp4", "vfr.mkv", "audio.mp4", "h264.ts", "long.ts"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) same_views(files[i], pp, &p);
    p.clips = 1, p.crops = 1, p.sampling = "hf";
    same_views("long.mp4", pp, &p);

    size_t n;
    unsigned char *b = check_read_file(mpath("h264.mp4"), &n);
    if (b) {
        /* truncated at every eighth: open fails or views load, or a clean error; never a crash */
        for (int k = 1; k < 8; k++) {
            char err[1024] = "";
            tubelet_views v;
            int rc = tubelet_views_load_memory(&v, b, n * k / 8, "cut.mp4", pp, NULL, 4, err, sizeof err);
            CHECK(rc == 0 || strstr(err, "cut.mp4"), "truncated to %d/8: %s", k, err);
            if (!rc) tubelet_views_free(&v);
        }
        expect_memory_fail(b, 64, "head.mp4", "head.mp4", pp, "64 bytes of an mp4");
        free(b);
    }
    static const char text[] = "this is not a video, just text\n";
    expect_memory_fail(text, sizeof text - 1, "notes.txt", "notes.txt: not a video", pp, "text");
    expect_memory_fail(text, sizeof text - 1, NULL, "<memory>", pp, "text, no name");
    expect_memory_fail(text, 0, "empty.mp4", "empty.mp4: empty", pp, "empty buffer");
    expect_memory_fail(NULL, 0, NULL, "<memory>: empty", pp, "NULL buffer");
    /* a playlist naming a real file: from memory, FFmpeg opens no other file or URL */
    char m3u[8600];
    snprintf(m3u, sizeof m3u,
             "#EXTM3U\n#EXT-X-TARGETDURATION:10\n#EXT-X-MEDIA-SEQUENCE:0\n#EXTINF:2.0,\n%s\n"
             "#EXTINF:2.0,\nfile://%s\n#EXT-X-ENDLIST\n", mpath("h264.mp4"), mpath("h264.mp4"));
    expect_memory_fail(m3u, strlen(m3u), "list.m3u8", "list.m3u8", pp, "playlist in memory");
    tubelet_preprocessor_free(pp);
}

/* The clips of tests/make_media.sh in g_dir, made for the first case that needs them (none for
 * --list or a filter that picks none of those cases); the cases after it run if they were made. */
static int media(void) {
    static int made;
    if (!made) {
        made = 1;
        char cmd[8400];
        snprintf(cmd, sizeof cmd, "tests/make_media.sh '%s'", g_dir);
        g_media_ok = system(cmd) == 0;
        CHECK(g_media_ok, "tests/make_media.sh failed (is the ffmpeg CLI installed?)");
    }
    return g_media_ok;
}
#define MEDIA_CASE(...)                                                                          \
    do {                                                                                         \
        if (check_select("%s", #__VA_ARGS__) && media()) __VA_ARGS__;                            \
    } while (0)

int main(int argc, char **argv) {
    check_cases(argc, argv);
    const char *base = getenv("TMPDIR");
    if (!base || !*base) base = "/tmp";
    snprintf(g_dir, sizeof g_dir, "%s/tubelet_video.XXXXXX", base);
    if (!mkdtemp(g_dir)) {
        printf("FATAL: mkdtemp: %s\n", strerror(errno));
        return 2;
    }

    CASE(test_sampling());
    CASE(test_config());
    CASE(test_vjepa2_preprocess());
    CASE(test_crops());
    CASE(test_parity());
    MEDIA_CASE(test_formats());
    MEDIA_CASE(test_audio_track());
    MEDIA_CASE(test_seeking());
    MEDIA_CASE(test_nonref_skip());
    MEDIA_CASE(test_vfr());
    MEDIA_CASE(test_streaming());
    MEDIA_CASE(test_bad_input());
    MEDIA_CASE(test_public_views());
    MEDIA_CASE(test_memory());
    nftw(g_dir, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
    return check_done();
}
