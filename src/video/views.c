/* The public video API (include/tubelet_video.h): a file in, the views a model sees out. */
#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../io/checkpoint.h"
#include "tubelet_video.h"
#include "video.h"

struct tubelet_preprocessor {
    tb_preproc_config c;
};

const tb_preproc_config *tb_preprocessor_config(const tubelet_preprocessor *p) { return &p->c; }

/* An official checkpoint file (docs/checkpoints.md): a (video_)preprocessor_config.json beside it, else
 * its family's preprocessing with what its own training config says (io/checkpoint.h). */
static int load_for_checkpoint(tb_preproc_config *c, const char *file, const tb_log *lg, tb_err *e) {
    char dir[4200], path[4300];
    const char *slash = strrchr(file, '/');
    snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - file) : 1, slash ? file : ".");
    if (slash == file) snprintf(dir, sizeof dir, "/");
    if (tb_preproc_config_file(dir, path, sizeof path)) return tb_preproc_config_load_dir(c, dir, lg, e);
    char *json = NULL, name[4200];
    int rc = tb_ckpt_preprocessor_for(file, 0, &json, e);
    if (rc) return rc;
    snprintf(name, sizeof name, "%s (its training config)", file);
    rc = tb_preproc_config_parse(c, json, name, lg, e);
    free(json);
    return rc;
}

int tubelet_preprocessor_protocol(tubelet_preprocessor **out, const tubelet_preprocessor *base,
                                  int stretch_h, int stretch_w, int normalize) {
    if (!(*out = malloc(sizeof **out))) return TUBELET_ERR_MEMORY;
    if (stretch_h < 0 || stretch_w < 0 || stretch_h > 16384 || stretch_w > 16384 ||
        (stretch_h > 0) != (stretch_w > 0))
        return free(*out), *out = NULL, TUBELET_ERR_ARG;
    tb_preproc_config *c = &(*out)->c;
    *c = base->c;
    if (!normalize) {
        c->do_normalize = 0, c->offset = 0, c->do_rescale = 1;
        if (!(c->rescale_factor > 0)) c->rescale_factor = 1.0 / 255;
    }
    if (stretch_h > 0) {
        c->do_resize = 1, c->shortest_edge = 0, c->size_h = stretch_h, c->size_w = stretch_w;
        c->do_center_crop = 0, c->resample = TB_RESAMPLE_BILINEAR, c->float_resize = 1;
        c->do_rescale = 1, c->rescale_factor = 1.0 / 255;
        if (normalize && c->offset && !c->do_normalize) /* ViViT's x / 127.5 - 1 */
            c->do_normalize = 1, c->mean[0] = c->mean[1] = c->mean[2] = 0.5f,
            c->std[0] = c->std[1] = c->std[2] = 0.5f;
        c->offset = 0;
    }
    return TUBELET_OK;
}

int tubelet_preprocessor_load(tubelet_preprocessor **out, const char *model_dir, tubelet_log_fn log,
                              void *log_user, char *err, size_t errlen) {
    tb_err e = {{0}};
    tb_log lg = {log, log_user};
    *out = calloc(1, sizeof **out);
    if (!*out) return tb_err_out(tb_fail(&e, TUBELET_ERR_MEMORY, "out of memory"), &e, err, errlen);
    char path[4200];
    if (tb_ckpt_is_file(model_dir)) {
        int rc = load_for_checkpoint(&(*out)->c, model_dir, &lg, &e);
        if (rc) free(*out), *out = NULL;
        return tb_err_out(rc, &e, err, errlen);
    }
    /* transformers 5's order: processor_config.json's video_processor, then
     * video_preprocessor_config.json, then preprocessor_config.json */
    if (!tb_preproc_config_file(model_dir, path, sizeof path)) {
        tb_warn(&lg, "%s has no video_preprocessor_config.json or preprocessor_config.json; using "
                "the VideoMAE processor defaults (shortest edge 224, centre crop 224, mean/std 0.5)",
                model_dir);
        tb_preproc_config_default(&(*out)->c);
        return TUBELET_OK;
    }
    int rc = tb_preproc_config_load_dir(&(*out)->c, model_dir, &lg, &e);
    if (rc) free(*out), *out = NULL;
    return tb_err_out(rc, &e, err, errlen);
}

int tubelet_preprocessor_default(tubelet_preprocessor **out, int height, int width) {
    *out = calloc(1, sizeof **out);
    if (!*out) return TUBELET_ERR_MEMORY;
    tb_preproc_config_default(&(*out)->c);
    (*out)->c.shortest_edge = height, (*out)->c.crop_h = height, (*out)->c.crop_w = width;
    return TUBELET_OK;
}

char *tubelet_preprocessor_to_json(const tubelet_preprocessor *p) {
    return tb_preproc_config_to_json(&p->c);
}

void tubelet_preprocessor_free(tubelet_preprocessor *p) { free(p); }

int tubelet_preprocessor_normalization(const tubelet_preprocessor *p, float mean[3], float std[3]) {
    for (int c = 0; c < 3; c++) mean[c] = p->c.mean[c], std[c] = p->c.std[c];
    return p->c.do_normalize;
}

tubelet_views_params tubelet_views_default_params(void) {
    tubelet_views_params p;
    memset(&p, 0, sizeof p);
    p.sampling = "hf", p.clips = 1, p.crops = 1;
    return p;
}

int tubelet_sampling_valid(const char *name) { return name && tb_sample_mode_from_name(name) >= 0; }

void tubelet_frames_free(tubelet_frames *f) {
    free(f->rgb), free(f->indices);
    memset(f, 0, sizeof *f);
}

/* Opens the video and samples clips x T indices; the decode is the caller's. */
static int sample(tb_video **vid, const tb_video_src *src, const tubelet_views_params *p, int T,
                  int64_t **indices, int *n_padded, tb_err *e) {
    const char *path = tb_video_src_name(src);
    tb_video_params vp = tb_video_default_params();
    vp.n_threads = p->threads;
    vp.log = (tb_log){p->log, p->log_user};
    vp.max_side = p->max_side, vp.max_frames = p->max_frames;
    vp.interrupt = p->interrupt, vp.interrupt_user = p->interrupt_user;
    int mode = tb_sample_mode_from_name(p->sampling ? p->sampling : "hf");
    if (mode < 0)
        return tb_fail(e, TUBELET_ERR_ARG, "unknown sampling '%s' (clip, uniform, hf or hf-rate)",
                       p->sampling);
    if (T < 1 || T > 4096) return tb_fail(e, TUBELET_ERR_ARG, "num_frames %d is not in [1, 4096]", T);
    const int clips = p->clips > 0 ? p->clips : 1;
    if (clips > 1024) return tb_fail(e, TUBELET_ERR_ARG, "clips %d is not in [1, 1024]", clips);
    int rc = tb_video_open_src(vid, src, &vp, e);
    if (rc) return rc;
    const tb_video_info *in = tb_video_get_info(*vid);
    *indices = malloc(sizeof(int64_t) * (size_t)clips * T);
    if (!*indices) return tb_fail(e, TUBELET_ERR_MEMORY, "%s: out of memory", path);
    *n_padded = 0;
    for (int c = 0; c < clips; c++) {
        tb_sample_params sp = {(tb_sample_mode)mode, T, p->stride, clips, c};
        if (sp.stride <= 0) sp.stride = mode == TB_SAMPLE_CLIP ? 4 : 1;
        tb_sample_result sr;
        if ((rc = tb_sample_indices(&sp, in->n_frames, *indices + (size_t)c * T, &sr, e)))
            return tb_prefix(e, rc, "%s: ", path);
        if (sr.n_padded > *n_padded) *n_padded = sr.n_padded;
    }
    return TUBELET_OK;
}

static int read_frames(tubelet_frames *f, const tb_video_src *src, const tubelet_views_params *p,
                       int T, tb_err *e) {
    memset(f, 0, sizeof *f);
    tb_video *vid = NULL;
    int rc = sample(&vid, src, p, T, &f->indices, &f->n_padded, e);
    if (!rc) {
        const tb_video_info *in = tb_video_get_info(vid);
        f->n = (p->clips > 0 ? p->clips : 1) * T, f->height = in->height, f->width = in->width;
        f->n_frames = in->n_frames, f->fps = in->fps;
        f->rgb = malloc((size_t)in->height * in->width * 3 * (size_t)f->n);
        rc = f->rgb ? tb_video_decode(vid, f->indices, f->n, f->rgb, e)
                    : tb_fail(e, TUBELET_ERR_MEMORY, "%s: out of memory", tb_video_src_name(src));
    }
    tb_video_close(vid);
    if (rc) tubelet_frames_free(f);
    return rc;
}

static int frames_read(tubelet_frames *f, const tb_video_src *src, const tubelet_views_params *p,
                       int num_frames, char *err, size_t errlen) {
    tb_err e = {{0}};
    tubelet_views_params d = tubelet_views_default_params();
    return tb_err_out(read_frames(f, src, p ? p : &d, num_frames, &e), &e, err, errlen);
}

int tubelet_frames_read(tubelet_frames *f, const char *path, const tubelet_views_params *p,
                        int num_frames, char *err, size_t errlen) {
    return frames_read(f, &(tb_video_src){.path = path}, p, num_frames, err, errlen);
}

int tubelet_frames_read_memory(tubelet_frames *f, const void *data, size_t size, const char *name,
                               const tubelet_views_params *p, int num_frames, char *err,
                               size_t errlen) {
    return frames_read(f, &(tb_video_src){.data = data, .size = size, .name = name}, p, num_frames,
                       err, errlen);
}

void tubelet_views_free(tubelet_views *v) {
    free(v->pixels), free(v->indices);
    memset(v, 0, sizeof *v);
}

static int views_load(tubelet_views *v, const tb_video_src *src, const tubelet_preprocessor *pp,
                      const tubelet_views_params *p, int model_frames, char *err, size_t errlen) {
    memset(v, 0, sizeof *v);
    const char *path = tb_video_src_name(src);
    tb_err e = {{0}};
    tubelet_views_params d = tubelet_views_default_params();
    if (!p) p = &d;
    const int T = p->num_frames > 0 ? p->num_frames : model_frames;
    const int clips = p->clips > 0 ? p->clips : 1, crops = p->crops == 3 ? 3 : 1;
    tubelet_frames f;
    tb_preproc *pre = NULL;
    int rc = read_frames(&f, src, p, T, &e);
    if (!rc && (rc = tb_preproc_new(&pre, &pp->c, f.height, f.width, &e))) tb_prefix(&e, rc, "%s: ", path);
    if (!rc) {
        v->n_frames = f.n_frames, v->fps = f.fps, v->width = f.width, v->height = f.height;
        v->T = T, v->C = 3, v->n_views = clips * crops, v->n_padded = f.n_padded;
        v->indices = f.indices, f.indices = NULL;
        tb_preproc_out_size(pre, &v->H, &v->W);
        const size_t per_view = tb_preproc_out_numel(pre, T), frame = (size_t)f.height * f.width * 3;
        v->pixels = malloc(sizeof(float) * per_view * (size_t)v->n_views);
        if (!v->pixels) rc = tb_fail(&e, TUBELET_ERR_MEMORY, "%s: out of memory", path);
        static const tb_crop_pos three[3] = {TB_CROP_FIRST, TB_CROP_CENTER, TB_CROP_LAST};
        for (int c = 0; !rc && c < clips; c++)
            for (int k = 0; !rc && k < crops; k++)
                if ((rc = tb_preproc_run(pre, f.rgb + frame * (size_t)c * T, T,
                                         crops == 3 ? three[k] : TB_CROP_CENTER,
                                         v->pixels + per_view * (size_t)(c * crops + k), &e)))
                    tb_prefix(&e, rc, "%s: ", path);
    }
    tubelet_frames_free(&f);
    tb_preproc_free(pre);
    if (rc) tubelet_views_free(v);
    return tb_err_out(rc, &e, err, errlen);
}

int tubelet_views_load(tubelet_views *v, const char *path, const tubelet_preprocessor *pp,
                       const tubelet_views_params *p, int model_frames, char *err, size_t errlen) {
    return views_load(v, &(tb_video_src){.path = path}, pp, p, model_frames, err, errlen);
}

int tubelet_views_load_memory(tubelet_views *v, const void *data, size_t size, const char *name,
                              const tubelet_preprocessor *pp, const tubelet_views_params *p,
                              int model_frames, char *err, size_t errlen) {
    return views_load(v, &(tb_video_src){.data = data, .size = size, .name = name}, pp, p,
                      model_frames, err, errlen);
}

int tubelet_preprocess_frames(const tubelet_preprocessor *pp, const uint8_t *rgb, int n, int height,
                              int width, int crop, float *out, int *out_h, int *out_w, char *err,
                              size_t errlen) {
    tb_err e = {{0}};
    tb_preproc *pre = NULL;
    if (n < 1 || crop < 0 || crop > 2)
        return tb_err_out(tb_fail(&e, TUBELET_ERR_ARG, "preprocess: %d frames, crop %d", n, crop),
                          &e, err, errlen);
    int rc = tb_preproc_new(&pre, &pp->c, height, width, &e);
    if (!rc) {
        tb_preproc_out_size(pre, out_h, out_w);
        if (out) rc = tb_preproc_run(pre, rgb, n, (tb_crop_pos)crop, out, &e);
    }
    tb_preproc_free(pre);
    return tb_err_out(rc, &e, err, errlen);
}

/* ---- windows over a long video (tubelet_video_stream_*) ---- */

struct tubelet_video_stream {
    tb_video *v;
    tb_preproc_config c;
    tb_preproc *pp;   /* made by begin, for the video's frame size */
    uint8_t *rgb;     /* one window of decoded frames */
    int T;
};

static int stream_open(tubelet_video_stream **out, const tb_video_src *src,
                       const tubelet_preprocessor *pp, const tubelet_views_params *p, char *err,
                       size_t errlen) {
    tb_err e = {{0}};
    tubelet_video_stream *s = calloc(1, sizeof *s);
    *out = NULL;
    if (!s) return tb_err_out(tb_fail(&e, TUBELET_ERR_MEMORY, "out of memory"), &e, err, errlen);
    s->c = pp->c;
    tb_video_params vp = tb_video_default_params();
    vp.n_threads = p->threads;
    vp.no_index = 1; /* one forward pass: no packet scan of the whole file first */
    vp.log = (tb_log){p->log, p->log_user};
    vp.max_side = p->max_side, vp.max_frames = p->max_frames;
    vp.interrupt = p->interrupt, vp.interrupt_user = p->interrupt_user;
    int rc = tb_video_open_src(&s->v, src, &vp, &e);
    if (rc) {
        free(s);
        return tb_err_out(rc, &e, err, errlen);
    }
    *out = s;
    return TUBELET_OK;
}

int tubelet_video_stream_open(tubelet_video_stream **out, const char *path,
                              const tubelet_preprocessor *pp, int threads, tubelet_log_fn log,
                              void *log_user, char *err, size_t errlen) {
    tubelet_views_params p = {.threads = threads, .log = log, .log_user = log_user};
    return stream_open(out, &(tb_video_src){.path = path}, pp, &p, err, errlen);
}

int tubelet_video_stream_open_memory(tubelet_video_stream **out, const void *data, size_t size,
                                     const char *name, const tubelet_preprocessor *pp, int threads,
                                     tubelet_log_fn log, void *log_user, char *err, size_t errlen) {
    tubelet_views_params p = {.threads = threads, .log = log, .log_user = log_user};
    return stream_open(out, &(tb_video_src){.data = data, .size = size, .name = name}, pp, &p,
                       err, errlen);
}

int tubelet_video_stream_open_memory_params(tubelet_video_stream **out, const void *data,
                                            size_t size, const char *name,
                                            const tubelet_preprocessor *pp,
                                            const tubelet_views_params *p, char *err,
                                            size_t errlen) {
    return stream_open(out, &(tb_video_src){.data = data, .size = size, .name = name}, pp, p,
                       err, errlen);
}

double tubelet_video_stream_fps(const tubelet_video_stream *s) {
    return tb_video_get_info(s->v)->fps;
}

double tubelet_video_stream_duration(const tubelet_video_stream *s) {
    const double d = tb_video_get_info(s->v)->duration;
    return d > 0 ? d : 0;
}

int tubelet_video_stream_begin(tubelet_video_stream *s, int num_frames, int stride, int hop,
                               int *out_h, int *out_w, char *err, size_t errlen) {
    tb_err e = {{0}};
    const tb_video_info *in = tb_video_get_info(s->v);
    tb_stream_params sp = {num_frames, stride, hop};
    int rc = tb_video_stream_begin(s->v, &sp, &e);
    tb_preproc_free(s->pp), s->pp = NULL;
    if (!rc) rc = tb_preproc_new(&s->pp, &s->c, in->height, in->width, &e);
    free(s->rgb), s->rgb = NULL;
    s->T = num_frames;
    if (!rc && !(s->rgb = malloc((size_t)num_frames * in->height * in->width * 3)))
        rc = tb_fail(&e, TUBELET_ERR_MEMORY, "out of memory");
    if (rc) return tb_err_out(rc, &e, err, errlen);
    tb_preproc_out_size(s->pp, out_h, out_w);
    return TUBELET_OK;
}

int tubelet_video_stream_next(tubelet_video_stream *s, float *pixels, int64_t *first,
                              int *n_real, char *err, size_t errlen) {
    tb_err e = {{0}};
    if (!s->pp) {
        tb_err_out(tb_fail(&e, TUBELET_ERR_ARG, "tubelet_video_stream_begin first"), &e, err,
                   errlen);
        return -TUBELET_ERR_ARG;
    }
    int got = tb_video_stream_next(s->v, s->rgb, first, n_real, &e);
    if (got == 1) {
        int rc = tb_preproc_run(s->pp, s->rgb, s->T, TB_CROP_CENTER, pixels, &e);
        if (rc) got = -rc;
    }
    if (got < 0) tb_err_out(-got, &e, err, errlen);
    return got;
}

void tubelet_video_stream_close(tubelet_video_stream *s) {
    if (!s) return;
    tb_preproc_free(s->pp);
    tb_video_close(s->v);
    free(s->rgb), free(s);
}

/* ---- windows over a video (timeline, watch, serve, tubelet.watch) ---- */

int64_t tubelet_window_plan(double window, double stride, double fps, int T, int64_t n_frames,
                            int *fstride, int *hop) {
    int fs = window > 0 ? (int)lround(window * fps / T) : 4;
    if (fs < 1) fs = 1;
    /* a window longer than the video: one window over the whole video, at the largest frame
     * stride that fits (the caller says so) */
    const int64_t whole = n_frames > 0 && (int64_t)(T - 1) * fs + 1 > n_frames ? n_frames : 0;
    if (whole) {
        fs = n_frames >= T ? (int)((n_frames - 1) / (T > 1 ? T - 1 : 1)) : 1;
        if (fs < 1) fs = 1;
    }
    int h = stride > 0 ? (int)lround(stride * fps) : fs * T;
    if (h < fs * T) { /* the stream wants a multiple of the frame stride: the nearest */
        h = (int)lround((double)h / fs) * fs;
        if (h < fs) h = fs;
    }
    if (whole) { /* one window: the next would start past the end (a multiple of the stride) */
        h = fs * T;
        if (h < whole) h = (int)((whole + fs - 1) / fs) * fs;
    }
    *fstride = fs, *hop = h;
    return whole;
}

void tubelet_window_span(int64_t first, int n_real, int fstride, double fps, double *t0,
                         double *t1) {
    *t0 = first / fps;
    *t1 = (first + (int64_t)(n_real - 1) * fstride + 1) / fps;
}
