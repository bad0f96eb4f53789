/* tubelet features --out-dir: one feature row per clip, one DIR/<stem>.npy per video (the
 * temporal-localisation protocols, docs/temporal-localisation.md). Clips of `frames` frames
 * `interval` apart start every `stride` frames while the whole clip fits in the video; each
 * frame is decoded once (tubelet_video_stream keeps the frames consecutive clips share) and the
 * next clip is decoded and preprocessed on a second thread while the model runs on this one. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "app.h"
#include "cli.h"
#include "tubelet_io.h"
#include "tubelet_train.h"

static const cli_clip_protocol PRESETS[] = {
    /* OpenGVLab/VideoMAEv2 extract_tad_feature.py (THUMOS14): range(0, n - 15, 4) */
    {"videomae2-tad", 16, 4, 1, 1, 0},
    /* the same script's FineAction branch: range(0, n - 15, 16) */
    {"videomae2-tad-fineaction", 16, 16, 1, 1, 0},
    /* the clip layout of the I3D features ActionFormer's THUMOS14 config reads (feat_stride 4,
     * num_frames 16), with the model's own resize, crop and normalisation */
    {"i3d", 16, 4, 1, 0, 1},
    /* TSP's (ActivityNet, ActionFormer's feat_stride 16, num_frames 16) */
    {"tsp", 16, 16, 1, 0, 1},
};

int cli_clip_preset(const char *name, cli_clip_protocol *p) {
    for (size_t i = 0; i < sizeof PRESETS / sizeof *PRESETS; i++)
        if (!strcmp(name, PRESETS[i].name)) return *p = PRESETS[i], 1;
    return 0;
}

const char *cli_clip_preset_names(void) {
    return "videomae2-tad, videomae2-tad-fineaction, i3d, tsp";
}

/* The name of video's file without its folders and its last extension. */
static void stem_of(const char *video, char *out, size_t cap) {
    const char *base = strrchr(video, '/');
    base = base ? base + 1 : video;
    const char *dot = strrchr(base, '.');
    size_t n = dot && dot != base ? (size_t)(dot - base) : strlen(base);
    if (n >= cap) n = cap - 1;
    memcpy(out, base, n);
    out[n] = 0;
}

typedef struct {
    char stem[1024];
    int i;
} stem_row;

static int by_stem(const void *a, const void *b) {
    const stem_row *x = a, *y = b;
    const int c = strcmp(x->stem, y->stem);
    return c ? c : x->i - y->i;
}

int cli_clip_same_stems(const char *const *videos, int n) {
    stem_row *r = malloc(sizeof *r * (size_t)(n > 0 ? n : 1));
    if (!r) return fprintf(stderr, "error: out of memory\n"), 1;
    for (int i = 0; i < n; i++) stem_of(videos[i], r[i].stem, sizeof r[i].stem), r[i].i = i;
    qsort(r, (size_t)n, sizeof *r, by_stem); /* a list of 20 000 videos: sorted, not n^2 */
    int bad = 0;
    for (int k = 1; k < n && !bad; k++)
        if (!strcmp(r[k - 1].stem, r[k].stem)) {
            fprintf(stderr, "error: %s and %s would both write %s.npy; rename one, or extract "
                    "them into different --out-dir folders\n", videos[r[k - 1].i],
                    videos[r[k].i], r[k].stem);
            bad = 1;
        }
    free(r);
    return bad;
}

/* ---- one video: its stream, the clip being decoded ahead ---- */

typedef struct {
    const cli_clip_run *r;
    tubelet_video_stream *st;
    char out[4200], tmp[4300];
    int skipped, h, w;
    double fps, duration;
} clip_item;

typedef struct { /* the next clip, decoded on a thread */
    tubelet_video_stream *st;
    float *pix;
    int64_t first;
    int n_real, got;
    char err[1024];
} clip_next;

static void *next_clip(void *arg) {
    clip_next *c = arg;
    c->got = tubelet_video_stream_next(c->st, c->pix, &c->first, &c->n_real, c->err,
                                       sizeof c->err);
    return NULL;
}

static int clip_open(void *user, const cli_video_list *l, int i, void **item, char *err,
                     size_t errlen) {
    const cli_clip_run *r = user;
    clip_item *it = calloc(1, sizeof *it);
    if (!(*item = it)) return snprintf(err, errlen, "out of memory"), 1;
    it->r = r;
    char stem[1024];
    stem_of(l->videos[i], stem, sizeof stem);
    snprintf(it->out, sizeof it->out, "%s/%s.npy", r->out_dir, stem);
    snprintf(it->tmp, sizeof it->tmp, "%s/.%s.npy.%ld.tmp", r->out_dir, stem, (long)getpid());
    struct stat sb;
    if (stat(it->out, &sb) == 0) return it->skipped = 1, 0; /* as the script: never redone */
    const cli_clip_protocol *p = &r->p;
    /* two decoder threads: the decode runs beside the model, which has the cores */
    int rc = tubelet_video_stream_open(&it->st, l->videos[i], r->pp, 2, app_log, NULL, err, errlen);
    if (!rc) rc = tubelet_video_stream_begin(it->st, p->frames, p->interval, p->stride, &it->h,
                                             &it->w, err, errlen);
    if (!rc) it->fps = tubelet_video_stream_fps(it->st), it->duration =
                 tubelet_video_stream_duration(it->st);
    return rc;
}

static void clip_close(void *item) {
    clip_item *it = item;
    if (!it) return;
    tubelet_video_stream_close(it->st);
    free(it);
}

/* A VideoMAE encoder without fc_norm (a pretraining file's, STMixer's): the mean of its
 * last_hidden_state's tokens (after its final LayerNorm). */
static int clip_mean(cli_clip_run *r, const float *pix, float *out, char *err, size_t errlen) {
    tubelet_shape hs;
    tubelet_state_hidden_shape(r->s, &hs);
    float *h = malloc(sizeof(float) * (size_t)tubelet_shape_numel(&hs));
    if (!h) return snprintf(err, errlen, "out of memory"), 1;
    int rc = tubelet_forward_hidden(r->s, pix, -1, h, err, errlen);
    if (!rc) rc = tubelet_pool(r->s, h, TUBELET_POOL_MEAN, out);
    free(h);
    return rc;
}

/* The clips of one video into *feats (clips x hidden, malloc'd). 0, or 1 after a message. */
static int run_clips(cli_clip_run *r, clip_item *it, const char *path, float **feats,
                     int64_t *n_clips) {
    const cli_clip_protocol *p = &r->p;
    const size_t per = (size_t)p->frames * 3 * (size_t)it->h * (size_t)it->w;
    const int span = (p->frames - 1) * p->interval + 1;
    char err[1024];
    if (!r->s || !tubelet_state_matches(r->s, 1, p->frames, it->h, it->w)) {
        tubelet_state_free(r->s), r->s = NULL;
        if (tubelet_state_new(&r->s, r->m, 1, p->frames, it->h, it->w, err, sizeof err)) {
            fprintf(stderr, "error: %s: clips of %d frames of %dx%d: %s\n", path, p->frames,
                    it->w, it->h, err);
            return 1;
        }
    }
    float *buf[2] = {malloc(sizeof(float) * per), malloc(sizeof(float) * per)};
    int64_t cap = 64, n = 0, est = 0;
    float *f = malloc(sizeof(float) * (size_t)(cap * r->hidden));
    if (it->fps > 0 && it->duration > 0) {
        const int64_t frames = (int64_t)(it->duration * it->fps + 0.5);
        est = frames >= span ? (frames - span) / p->stride + 1 : 0;
    }
    int rc = 0;
    if (!buf[0] || !buf[1] || !f) {
        fprintf(stderr, "error: %s: out of memory\n", path);
        rc = 1;
    }
    clip_next c = {it->st, buf[0], 0, 0, 0, {0}};
    if (!rc) next_clip(&c);
    cli_bar bar;
    cli_progress_init(&bar);
    for (int k = 0; !rc; k ^= 1) {
        if (c.got < 0) {
            fprintf(stderr, "error: %s: %s\n", path, c.err);
            rc = 1;
            break;
        }
        if (c.got == 0 || c.n_real < p->frames) break; /* only whole clips, as range(0, n-15, 4) */
        if (n == cap) {
            float *g = realloc(f, sizeof(float) * (size_t)(2 * cap * r->hidden));
            if (!g) {
                fprintf(stderr, "error: %s: out of memory\n", path);
                rc = 1;
                break;
            }
            f = g, cap *= 2;
        }
        /* decode clip n + 1 into the other buffer while clip n runs */
        const float *cur = buf[k];
        c.pix = buf[k ^ 1];
        pthread_t t;
        const int ahead = pthread_create(&t, NULL, next_clip, &c) == 0;
        if (r->mean_hidden ? clip_mean(r, cur, f + n * r->hidden, err, sizeof err)
                           : tubelet_forward_pooled(r->s, cur, f + n * r->hidden, err, sizeof err)) {
            fprintf(stderr, "error: %s: clip %lld: %s\n", path, (long long)n, err);
            rc = 1;
        }
        if (ahead) pthread_join(t, NULL);
        else next_clip(&c);
        n++;
        const int64_t total = c.got == 1 && c.n_real == p->frames ? (est > n ? est : n + 1) : n;
        cli_progress(&bar, (int)n, (int)total, "  clip %lld/%s%lld", (long long)n,
                     total > n ? "~" : "", (long long)total);
    }
    cli_progress_end(&bar);
    free(buf[0]), free(buf[1]);
    if (!rc && n == 0) {
        fprintf(stderr, "error: %s is shorter than one clip (%d frames%s); no file written\n",
                path, span, p->interval > 1 ? ", interval included" : "");
        rc = 1;
    }
    if (rc) return free(f), 1;
    *feats = f, *n_clips = n;
    return 0;
}

static int clip_video(void *user, const cli_video_list *l, int i, void *item, const char *err) {
    cli_clip_run *r = user;
    clip_item *it = item;
    const char *path = l->videos[i];
    if (it && it->skipped) {
        r->skipped++;
        return 0;
    }
    cli_list_clear(l); /* its clip bar redraws the line at once */
    if (!it || !it->st) return fprintf(stderr, "error: %s\n", err), 1;
    float *feats = NULL;
    int64_t n = 0;
    if (run_clips(r, it, path, &feats, &n)) return 1;
    char e[9000];
    const int64_t shape[2] = {n, r->hidden};
    int rc = tubelet_npy_write(it->tmp, TUBELET_F32, 2, shape, feats, e, sizeof e);
    free(feats);
    if (!rc && rename(it->tmp, it->out)) {
        snprintf(e, sizeof e, "cannot rename %s to %s: %s", it->tmp, it->out, strerror(errno));
        rc = 1;
    }
    if (rc) {
        unlink(it->tmp);
        fprintf(stderr, "error: %s: %s\n", path, e);
        return 1;
    }
    if (!r->fps) r->fps = it->fps;
    else if (r->fps != it->fps && it->fps > 0) r->mixed_fps = 1;
    r->written++;
    fprintf(stderr, "  %s: %lld clips x %lld\n", it->out, (long long)n, (long long)r->hidden);
    return 0;
}

int cli_clip_features(cli_clip_run *r, const char *const *videos, int n_videos,
                      struct tubelet_dist *dist) {
    static const cli_video_ops ops = {clip_open, clip_video, clip_close};
    cli_video_list l = {videos, n_videos, NULL, NULL, 0, 0, 0, 0, NULL};
    return cli_each_opened(&l, dist, &ops, r);
}

/* The JSON beside the features: what made them. */
char *cli_clip_json(const cli_clip_run *r, const char *model) {
    const cli_clip_protocol *p = &r->p;
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) return NULL;
    fprintf(f, "{\n  \"protocol\": ");
    app_json_string(f, p->name ? p->name : "custom");
    fprintf(f, ",\n  \"clip_frames\": %d,\n  \"clip_stride\": %d,\n  \"frame_interval\": %d,\n"
            "  \"resize\": \"%s\",\n  \"size\": [%d, %d],\n  \"normalize\": \"%s\",\n"
            "  \"feature\": \"%s\",\n  \"dim\": %lld,\n  \"model\": ",
            p->frames, p->stride, p->interval, p->stretch ? "stretch" : "short-side", r->height,
            r->width, p->normalize ? "model" : "none", r->feature, (long long)r->hidden);
    /* its file or folder name: a run resumed from another directory is the same run */
    size_t n = strlen(model);
    while (n > 1 && model[n - 1] == '/') n--;
    char name[1024];
    snprintf(name, sizeof name, "%.*s", (int)n, model);
    const char *slash = strrchr(name, '/');
    app_json_string(f, slash ? slash + 1 : name);
    fprintf(f, ",\n  \"precision\": \"%s\",\n  \"layout\": \"one float32 <video stem>.npy per "
            "video, (clips, dim); clip i starts at frame i * clip_stride\",\n"
            "  \"tubelet_version\": \"%s\"\n}\n", r->precision, TUBELET_VERSION);
    fclose(f);
    return buf;
}
