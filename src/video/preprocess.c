/* Frames (RGB24) -> pixel_values (T, C, H, W) float32, as transformers 5.x's video processors
 * (VideoMAEVideoProcessor, VivitVideoProcessor, TimesformerVideoProcessor; torchvision backend):
 *
 *   resize    uint8 -> uint8, antialiased, PyTorch's fixed-point kernel (int16 weights; what
 *             torchvision runs for uint8 bilinear/bicubic on CPUs with AVX2/AVX-512)
 *   crop      top = int((h - ch) / 2.0), left = int((w - cw) / 2.0); zero padding when smaller
 *   rescale + normalize in float32, in torch's operation order:
 *             VideoMAE/TimeSformer (fused): (x - mean/rf) / (std/rf)
 *             ViViT (offset):               (x * rf - 1 - mean) / std
 */
#pragma STDC FP_CONTRACT OFF

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>

#include "../models/family.h"
#include "video.h"

/* ------------------------------------------------------------------ config */

void tb_preproc_config_default(tb_preproc_config *c) {
    memset(c, 0, sizeof *c);
    snprintf(c->processor_class, sizeof c->processor_class, "VideoMAEImageProcessor");
    c->do_resize = 1;
    c->shortest_edge = 224;
    c->resample = TB_RESAMPLE_BILINEAR;
    c->do_center_crop = 1;
    c->crop_h = c->crop_w = 224;
    c->do_rescale = 1;
    c->rescale_factor = 1.0 / 255.0;
    c->offset = 0;
    c->do_normalize = 1;
    for (int i = 0; i < 3; i++) c->mean[i] = c->std[i] = 0.5f;
}

/* The defaults of the processor class: its family's (tb_family_preprocess), which knows them. */
static void class_defaults(tb_preproc_config *c, const char *cls) {
    const tb_preproc_defaults *d = tb_family_preprocess(cls);
    if (!d) return;
    c->shortest_edge = d->shortest_edge;
    c->size_h = c->size_w = 0;
    c->rescale_factor = d->rescale_factor;
    c->offset = d->offset;
    memcpy(c->mean, d->mean, sizeof c->mean);
    memcpy(c->std, d->std, sizeof c->std);
    if (d->crop_size > 0) c->crop_h = c->crop_w = d->crop_size;
}

static int get_bool(const cJSON *j, int *out) {
    if (cJSON_IsBool(j)) {
        *out = cJSON_IsTrue(j);
        return 1;
    }
    if (cJSON_IsNumber(j)) {
        *out = j->valuedouble != 0;
        return 1;
    }
    return cJSON_IsNull(j);   /* null: keep the default */
}

static int get_int(const cJSON *j, int lo, int hi, int *out) {
    if (!cJSON_IsNumber(j)) return 0;
    double d = j->valuedouble;
    if (!(d >= lo && d <= hi) || d != floor(d)) return 0;
    *out = (int)d;
    return 1;
}

/* {"shortest_edge": S} | {"height": h, "width": w} | S */
static int get_size(const cJSON *j, int *se, int *h, int *w, int crop) {
    if (cJSON_IsNumber(j)) {
        int s;
        if (!get_int(j, 1, 65536, &s)) return 0;
        if (crop) *h = *w = s;
        else *se = s, *h = *w = 0;
        return 1;
    }
    if (!cJSON_IsObject(j)) return 0;
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(j, "shortest_edge");
    const cJSON *hh = cJSON_GetObjectItemCaseSensitive(j, "height");
    const cJSON *ww = cJSON_GetObjectItemCaseSensitive(j, "width");
    const cJSON *le = cJSON_GetObjectItemCaseSensitive(j, "longest_edge");
    if (le && !cJSON_IsNull(le)) return -1;   /* supported by neither of our processors */
    if (s && !cJSON_IsNull(s)) {
        if (crop || !get_int(s, 1, 65536, se)) return 0;
        *h = *w = 0;
        return 1;
    }
    if (hh && ww && get_int(hh, 1, 65536, h) && get_int(ww, 1, 65536, w)) {
        if (!crop) *se = 0;
        return 1;
    }
    return 0;
}

static int get_triple(const cJSON *j, float out[3]) {
    if (cJSON_IsNumber(j)) {
        if (!(fabs(j->valuedouble) <= 1e6)) return 0; /* the cast to float must not overflow */
        out[0] = out[1] = out[2] = (float)j->valuedouble;
        return 1;
    }
    if (!cJSON_IsArray(j)) return 0;
    int n = cJSON_GetArraySize(j);
    if (n != 3 && n != 1) return 0;
    for (int i = 0; i < 3; i++) {
        const cJSON *x = cJSON_GetArrayItem(j, n == 1 ? 0 : i);
        if (!cJSON_IsNumber(x) || !(fabs(x->valuedouble) <= 1e6)) return 0; /* float-safe */
        out[i] = (float)x->valuedouble;   /* torch.tensor(list) is float32 */
    }
    return 1;
}

/* keys transformers writes that do not change pixel values */
static const char *const ignored_keys[] = {
    "processor_class", "do_convert_rgb", "default_to_square", "data_format", "input_data_format",
    "do_sample_frames", "num_frames", "fps", "device", "return_metadata", "video_metadata",
    "return_tensors", "disable_grouping", "model_input_names", "_processor_class", "do_pad",
    "pad_size", "antialias", "video_processor_class", "image_processor_class", NULL};

int tb_preproc_config_parse(tb_preproc_config *c, const char *json, const char *name,
                            const tb_log *log, tb_err *e) {
    tb_preproc_config_default(c);
    cJSON *root = cJSON_Parse(json);
    if (!root || !cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return tb_fail(e, TUBELET_ERR_FORMAT, "%s: not a JSON object", name);
    }
    /* the class first: it sets the defaults the other keys override */
    static const char *const cls_keys[] = {"video_processor_type", "image_processor_type",
                                           "feature_extractor_type"};
    for (int i = 0; i < 3; i++) {
        const cJSON *k = cJSON_GetObjectItemCaseSensitive(root, cls_keys[i]);
        if (cJSON_IsString(k) && k->valuestring[0]) {
            snprintf(c->processor_class, sizeof c->processor_class, "%s", k->valuestring);
            break;
        }
    }
    class_defaults(c, c->processor_class);
    int rc = TUBELET_OK;
    const cJSON *it;
    cJSON_ArrayForEach(it, root) {
        const char *k = it->string;
        int ok = 1;
        if (!strcmp(k, "video_processor_type") || !strcmp(k, "image_processor_type") ||
            !strcmp(k, "feature_extractor_type")) {
            ok = cJSON_IsString(it) || cJSON_IsNull(it);
        } else if (!strcmp(k, "do_resize")) ok = get_bool(it, &c->do_resize);
        else if (!strcmp(k, "do_center_crop")) ok = get_bool(it, &c->do_center_crop);
        else if (!strcmp(k, "do_rescale")) ok = get_bool(it, &c->do_rescale);
        else if (!strcmp(k, "do_normalize")) ok = get_bool(it, &c->do_normalize);
        else if (!strcmp(k, "offset")) ok = get_bool(it, &c->offset);
        else if (!strcmp(k, "rescale_factor")) {
            ok = cJSON_IsNumber(it) && it->valuedouble > 0 && it->valuedouble <= 1e6;
            if (ok) c->rescale_factor = it->valuedouble;
        } else if (!strcmp(k, "size")) {
            int r = get_size(it, &c->shortest_edge, &c->size_h, &c->size_w, 0);
            if (r < 0) {
                rc = tb_fail(e, TUBELET_ERR_UNSUPPORTED, "%s: size with longest_edge is not supported", name);
                break;
            }
            ok = r;
        } else if (!strcmp(k, "crop_size")) {
            int dummy = 0;
            ok = get_size(it, &dummy, &c->crop_h, &c->crop_w, 1) == 1;
        } else if (!strcmp(k, "image_mean")) ok = get_triple(it, c->mean);
        else if (!strcmp(k, "image_std")) ok = get_triple(it, c->std);
        else if (!strcmp(k, "resample")) {
            int r;
            ok = get_int(it, 0, 5, &r);
            if (ok && r != TB_RESAMPLE_BILINEAR && r != TB_RESAMPLE_BICUBIC && r != TB_RESAMPLE_NEAREST) {
                rc = tb_fail(e, TUBELET_ERR_UNSUPPORTED,
                             "%s: resample %d is not supported (0 nearest, 2 bilinear, 3 bicubic)", name, r);
                break;
            }
            if (ok) c->resample = (tb_resample)r;
        } else {
            int known = 0;
            for (int i = 0; ignored_keys[i]; i++)
                if (!strcmp(k, ignored_keys[i])) known = 1;
            if (!known) tb_warn(log, "%s: unknown key \"%s\" ignored", name, k);
        }
        if (!ok) {
            rc = tb_fail(e, TUBELET_ERR_CONFIG, "%s: bad value for \"%s\"", name, k);
            break;
        }
    }
    cJSON_Delete(root);
    if (rc) return rc;
    /* VJEPA2VideoProcessor derives its short side from its crop, whatever size says */
    const tb_preproc_defaults *d = tb_family_preprocess(c->processor_class);
    if (d && d->shortest_from_crop && c->crop_h > 0)
        c->shortest_edge = (int)((double)c->crop_h * 256 / 224), c->size_h = c->size_w = 0;
    for (int i = 0; i < 3; i++)
        if (!(c->std[i] != 0) || !isfinite(c->std[i]) || !isfinite(c->mean[i]))
            return tb_fail(e, TUBELET_ERR_CONFIG, "%s: image_std must be finite and non-zero", name);
    if (c->do_resize && c->shortest_edge <= 0 && (c->size_h <= 0 || c->size_w <= 0))
        return tb_fail(e, TUBELET_ERR_CONFIG, "%s: do_resize without a size", name);
    if (c->do_center_crop && (c->crop_h <= 0 || c->crop_w <= 0))
        return tb_fail(e, TUBELET_ERR_CONFIG, "%s: do_center_crop without a crop_size", name);
    /* transformers pads a crop larger than the resized frame with zeros; so do we, but say so */
    int rh = c->shortest_edge > 0 ? c->shortest_edge : c->size_h;
    int rw = c->shortest_edge > 0 ? c->shortest_edge : c->size_w;
    if (c->do_resize && c->do_center_crop && (c->crop_h > rh || c->crop_w > rw))
        tb_warn(log, "%s: crop_size %dx%d is larger than the resized frame (%s %d%s%.0d): every "
                "frame will be padded with zeros, as transformers does; was a smaller crop meant?",
                name, c->crop_h, c->crop_w, c->shortest_edge > 0 ? "shortest edge" : "size",
                rh, c->shortest_edge > 0 ? "" : "x", c->shortest_edge > 0 ? 0 : rw);
    return TUBELET_OK;
}

int tb_preproc_config_load(tb_preproc_config *c, const char *path, const tb_log *log, tb_err *e) {
    char *buf = NULL;
    int rc = tb_read_file(path, &buf, NULL, 1 << 20, e);
    if (rc) return rc;
    rc = tb_preproc_config_parse(c, buf, path, log, e);
    free(buf);
    return rc;
}

static int is_file(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* processor_config.json's nested "video_processor" (transformers 5 saves processors nested
 * there), as text (malloc'd), or NULL. */
static char *nested_video_processor(const char *path, tb_err *e) {
    char *buf = NULL, *text = NULL;
    if (!is_file(path) || tb_read_file(path, &buf, NULL, 1 << 20, e)) return NULL;
    cJSON *j = cJSON_Parse(buf), *v = cJSON_GetObjectItemCaseSensitive(j, "video_processor");
    if (cJSON_IsObject(v)) text = cJSON_PrintUnformatted(v);
    cJSON_Delete(j);
    free(buf);
    return text;
}

int tb_preproc_config_file(const char *dir, char *path, size_t n) {
    static const char *const names[] = {"processor_config.json", "video_preprocessor_config.json",
                                        "preprocessor_config.json"};
    for (int k = 0; k < 3; k++) {
        snprintf(path, n, "%s/%s", dir, names[k]);
        if (!is_file(path)) continue;
        if (k > 0) return 1;
        tb_err e = {{0}};
        char *nested = nested_video_processor(path, &e);
        free(nested);
        if (nested) return 1;
    }
    return 0;
}

int tb_preproc_config_load_dir(tb_preproc_config *c, const char *dir, const tb_log *log,
                               tb_err *e) {
    char path[4200];
    if (!tb_preproc_config_file(dir, path, sizeof path))
        return tb_fail(e, TUBELET_ERR_IO, "%s: no video_preprocessor_config.json or "
                       "preprocessor_config.json", dir);
    const size_t n = strlen(path), k = strlen("/processor_config.json");
    if (n >= k && !strcmp(path + n - k, "/processor_config.json")) {
        char *text = nested_video_processor(path, e), name[4300];
        if (!text) return tb_fail(e, TUBELET_ERR_IO, "%s: unreadable", path);
        snprintf(name, sizeof name, "%s (video_processor)", path);
        int rc = tb_preproc_config_parse(c, text, name, log, e);
        free(text);
        return rc;
    }
    return tb_preproc_config_load(c, path, log, e);
}

/* ------------------------------------------------------------------ resize */

typedef struct {
    int in, out, ksize, prec;
    int *xmin, *xsize;  /* per output position */
    int16_t *w;         /* ksize weights per output position */
    int nearest;        /* nearest: xmin is the source index */
} axis_t;

static double filt_bilinear(double x) {
    x = fabs(x);
    return x < 1.0 ? 1.0 - x : 0.0;
}

static double filt_bicubic(double x) {
    const double a = -0.5;   /* PIL's and PyTorch's antialiased bicubic */
    x = fabs(x);
    if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0;
    if (x < 2.0) return (((x - 5.0) * x + 8.0) * x - 4.0) * a;
    return 0.0;
}

static void axis_free(axis_t *a) {
    free(a->xmin);
    free(a->xsize);
    free(a->w);
    memset(a, 0, sizeof *a);
}

/* aten/src/ATen/native/cpu/UpSampleKernel.cpp: HelperInterpBase::_compute_index_ranges_weights
 * (antialias=true, align_corners=false, no explicit scale) and _compute_index_ranges_int16_weights. */
static int axis_plan(axis_t *a, int in, int out, tb_resample mode) {
    memset(a, 0, sizeof *a);
    a->in = in;
    a->out = out;
    a->xmin = malloc((size_t)out * sizeof(int));
    a->xsize = malloc((size_t)out * sizeof(int));
    if (!a->xmin || !a->xsize) return 0;
    if (mode == TB_RESAMPLE_NEAREST) {
        /* torch's legacy "nearest": src = min(floor(dst * (float)(in / out)), in - 1) */
        float scale = (float)in / (float)out;
        a->nearest = 1;
        for (int i = 0; i < out; i++) {
            int64_t s = (int64_t)floorf((float)i * scale);
            a->xmin[i] = (int)(s > in - 1 ? in - 1 : s);
            a->xsize[i] = 1;
        }
        return 1;
    }
    double (*filt)(double) = mode == TB_RESAMPLE_BICUBIC ? filt_bicubic : filt_bilinear;
    int interp = mode == TB_RESAMPLE_BICUBIC ? 4 : 2;
    double scale = (double)in / (double)out;
    double support = scale >= 1.0 ? (interp * 0.5) * scale : interp * 0.5;
    int ks = (int)ceil(support) * 2 + 1;
    a->ksize = ks;
    double *wd = malloc((size_t)out * ks * sizeof(double));
    a->w = malloc((size_t)out * ks * sizeof(int16_t));
    if (!wd || !a->w) {
        free(wd);
        return 0;
    }
    double wt_max = 0.0;
    double invscale = scale >= 1.0 ? 1.0 / scale : 1.0;
    for (int i = 0; i < out; i++) {
        double center = scale * (i + 0.5);
        int64_t xmin = (int64_t)(center - support + 0.5);
        if (xmin < 0) xmin = 0;
        int64_t xmax = (int64_t)(center + support + 0.5);
        if (xmax > in) xmax = in;
        int64_t xsize = xmax - xmin;
        if (xsize < 0) xsize = 0;
        if (xsize > ks) xsize = ks;
        double *w = wd + (size_t)i * ks, total = 0.0;
        int64_t j = 0;
        for (; j < xsize; j++) {
            w[j] = filt(((double)(j + xmin) - center + 0.5) * invscale);
            total += w[j];
        }
        if (total != 0.0)
            for (j = 0; j < xsize; j++) w[j] /= total;
        for (j = xsize; j < ks; j++) w[j] = 0.0;
        for (j = 0; j < ks; j++)
            if (w[j] > wt_max) wt_max = w[j];
        a->xmin[i] = (int)xmin;
        a->xsize[i] = (int)xsize;
    }
    unsigned prec;
    for (prec = 0; prec < 22; ++prec) {
        int next = (int)(0.5 + wt_max * (double)(1 << (prec + 1)));
        if (next >= (1 << 15)) break;
    }
    a->prec = (int)prec;
    for (size_t k = 0; k < (size_t)out * ks; k++) {
        double v = wd[k] * (double)(1 << prec);
        a->w[k] = (int16_t)(v < 0 ? (int)(-0.5 + v) : (int)(0.5 + v));
    }
    free(wd);
    return 1;
}

static inline uint8_t clip8(int32_t s, int prec) {
    if (s < 0) return 0;
    s >>= prec;
    return s > 255 ? 255 : (uint8_t)s;
}

/* in: rows x in_w x 3 -> out: rows x out_w x 3 */
static void pass_horizontal(const axis_t *a, const uint8_t *in, int rows, uint8_t *out) {
    int iw = a->in, ow = a->out;
    for (int y = 0; y < rows; y++) {
        const uint8_t *src = in + (size_t)y * iw * 3;
        uint8_t *dst = out + (size_t)y * ow * 3;
        for (int x = 0; x < ow; x++) {
            const uint8_t *s = src + (size_t)a->xmin[x] * 3;
            if (a->nearest) {
                memcpy(dst + 3 * x, s, 3);
                continue;
            }
            const int16_t *w = a->w + (size_t)x * a->ksize;
            int32_t init = (int32_t)1 << (a->prec - 1);
            int32_t r = init, g = init, b = init;
            for (int j = 0; j < a->xsize[x]; j++) {
                r += s[3 * j] * w[j];
                g += s[3 * j + 1] * w[j];
                b += s[3 * j + 2] * w[j];
            }
            dst[3 * x] = clip8(r, a->prec);
            dst[3 * x + 1] = clip8(g, a->prec);
            dst[3 * x + 2] = clip8(b, a->prec);
        }
    }
}

/* in: in_h x cols x 3 -> out: out_h x cols x 3 */
static void pass_vertical(const axis_t *a, const uint8_t *in, int cols, uint8_t *out) {
    size_t row = (size_t)cols * 3;
    for (int y = 0; y < a->out; y++) {
        uint8_t *dst = out + y * row;
        if (a->nearest) {
            memcpy(dst, in + (size_t)a->xmin[y] * row, row);
            continue;
        }
        const int16_t *w = a->w + (size_t)y * a->ksize;
        const uint8_t *src = in + (size_t)a->xmin[y] * row;
        int n = a->xsize[y];
        int32_t init = (int32_t)1 << (a->prec - 1);
        for (size_t x = 0; x < row; x++) {
            int32_t s = init;
            for (int j = 0; j < n; j++) s += src[j * row + x] * w[j];
            dst[x] = clip8(s, a->prec);
        }
    }
}

/* ------------------------------------------------------------------ the plan */

struct tb_preproc {
    tb_preproc_config c;
    int in_h, in_w, rh, rw;    /* input and resized sizes */
    int oh, ow;                /* output (after crop) */
    int need_h, need_v;
    axis_t ax_h, ax_v;
    uint8_t *tmp_h;            /* in_h x rw x 3 */
    uint8_t *resized;          /* rh x rw x 3 */
    int *fi0, *fi1;            /* float_resize: source rows [0, rh) then columns [rh, rh + rw) */
    float *fw0, *fw1;          /* and their weights */
    float *plane;              /* float_resize: one rescaled input channel, in_h x in_w */
    float *fres;               /* float_resize: the resized frame, 3 x rh x rw */
    float m[3], s[3], rf;      /* float32 constants in torch's order */
    int mode;                  /* 0 none, 1 fused rescale+normalize, 2 rescale, 3 normalize,
                                  4 offset-rescale(+normalize) */
};

static void resized_size(const tb_preproc_config *c, int h, int w, int *rh, int *rw) {
    if (!c->do_resize) {
        *rh = h;
        *rw = w;
    } else if (c->shortest_edge > 0) {
        /* transformers.image_transforms.get_resize_output_image_size(default_to_square=False) */
        int S = c->shortest_edge;
        if (w <= h) {
            *rw = S;
            *rh = (int)((double)S * h / w);
        } else {
            *rh = S;
            *rw = (int)((double)S * w / h);
        }
    } else {
        *rh = c->size_h;
        *rw = c->size_w;
    }
}

/* torch's upsample_bilinear2d on CPU (align_corners=False, no scale_factor): for output d,
 * scale = (float)in / out, src = scale * (d + 0.5) - 0.5 clamped at 0, the rows floor(src) and
 * the next (the last row repeats), weights 1 - l and l, l = src - floor(src); all in float. */
static void float_axis(int in, int out, int *i0, int *i1, float *w0, float *w1) {
    const float scale = (float)in / (float)out;
    for (int d = 0; d < out; d++) {
        float src = scale * ((float)d + 0.5f) - 0.5f;
        if (src < 0) src = 0;
        int k = (int)floorf(src);
        if (k > in - 1) k = in - 1;
        float l = src - (float)k;
        l = l < 0 ? 0 : l > 1 ? 1 : l;
        i0[d] = k, i1[d] = k + (k < in - 1), w1[d] = l, w0[d] = 1.0f - l;
    }
}

static int float_plan(tb_preproc *p) {
    const size_t n = (size_t)p->rh + (size_t)p->rw;
    p->fi0 = malloc(sizeof(int) * n), p->fi1 = malloc(sizeof(int) * n);
    p->fw0 = malloc(sizeof(float) * n), p->fw1 = malloc(sizeof(float) * n);
    p->plane = malloc(sizeof(float) * (size_t)p->in_h * (size_t)p->in_w);
    p->fres = malloc(sizeof(float) * 3 * (size_t)p->rh * (size_t)p->rw);
    if (!p->fi0 || !p->fi1 || !p->fw0 || !p->fw1 || !p->plane || !p->fres) return 0;
    float_axis(p->in_h, p->rh, p->fi0, p->fi1, p->fw0, p->fw1);
    float_axis(p->in_w, p->rw, p->fi0 + p->rh, p->fi1 + p->rh, p->fw0 + p->rh, p->fw1 + p->rh);
    return 1;
}

/* float_resize: one frame (in_h, in_w, 3) uint8 to p->fres (3, rh, rw): each channel divided
 * (torch's `x.to(float32) / 255`), then interpolated, the columns inside each row first:
 * (a w0x + b w1x) w0y + (c w0x + d w1x) w1y, as ATen's Interpolate<2> sums. */
static void float_resize(tb_preproc *p, const uint8_t *in) {
    const float div = (float)(1.0 / p->c.rescale_factor);
    const size_t W = (size_t)p->in_w, n = (size_t)p->in_h * W;
    const int *xi0 = p->fi0 + p->rh, *xi1 = p->fi1 + p->rh;
    const float *xw0 = p->fw0 + p->rh, *xw1 = p->fw1 + p->rh;
    for (int c = 0; c < 3; c++) {
        for (size_t i = 0; i < n; i++) p->plane[i] = (float)in[i * 3 + (size_t)c] / div;
        float *o = p->fres + (size_t)c * p->rh * p->rw;
        for (int y = 0; y < p->rh; y++) {
            const float *r0 = p->plane + (size_t)p->fi0[y] * W, *r1 = p->plane + (size_t)p->fi1[y] * W;
            const float wy0 = p->fw0[y], wy1 = p->fw1[y];
            for (int x = 0; x < p->rw; x++) {
                const float t0 = r0[xi0[x]] * xw0[x] + r0[xi1[x]] * xw1[x];
                const float t1 = r1[xi0[x]] * xw0[x] + r1[xi1[x]] * xw1[x];
                o[(size_t)y * p->rw + x] = t0 * wy0 + t1 * wy1;
            }
        }
    }
}

int tb_preproc_new(tb_preproc **out, const tb_preproc_config *c, int in_h, int in_w, tb_err *e) {
    if (!out || !c) return tb_fail(e, TUBELET_ERR_ARG, "tb_preproc_new: NULL argument");
    *out = NULL;
    if (in_h < 1 || in_w < 1 || in_h > 16384 || in_w > 16384)
        return tb_fail(e, TUBELET_ERR_ARG, "preprocess: bad frame size %dx%d", in_w, in_h);
    if (c->resample != TB_RESAMPLE_BILINEAR && c->resample != TB_RESAMPLE_BICUBIC &&
        c->resample != TB_RESAMPLE_NEAREST)
        return tb_fail(e, TUBELET_ERR_UNSUPPORTED, "preprocess: resample %d is not supported", (int)c->resample);
    tb_preproc *p = calloc(1, sizeof *p);
    if (!p) return tb_fail(e, TUBELET_ERR_MEMORY, "preprocess: out of memory");
    p->c = *c;
    p->in_h = in_h;
    p->in_w = in_w;
    resized_size(c, in_h, in_w, &p->rh, &p->rw);
    if (p->rh < 1 || p->rw < 1 || p->rh > 16384 || p->rw > 16384) {
        int rh = p->rh, rw = p->rw;
        free(p);
        return tb_fail(e, TUBELET_ERR_ARG, "preprocess: resize of %dx%d gives %dx%d", in_w, in_h, rw, rh);
    }
    if (c->float_resize && (c->resample != TB_RESAMPLE_BILINEAR || !c->do_rescale || c->offset)) {
        free(p);
        return tb_fail(e, TUBELET_ERR_UNSUPPORTED, "preprocess: a float resize is bilinear, of "
                       "rescaled pixels, without offset");
    }
    p->oh = c->do_center_crop ? c->crop_h : p->rh;
    p->ow = c->do_center_crop ? c->crop_w : p->rw;
    p->need_h = p->rw != in_w;
    p->need_v = p->rh != in_h;
    int ok = 1;
    if (c->float_resize) {
        ok = float_plan(p);
        p->need_h = p->need_v = 0;
    }
    if (p->need_h) ok &= axis_plan(&p->ax_h, in_w, p->rw, c->resample);
    if (p->need_v) ok &= axis_plan(&p->ax_v, in_h, p->rh, c->resample);
    p->tmp_h = malloc((size_t)in_h * p->rw * 3);
    p->resized = malloc((size_t)p->rh * p->rw * 3);
    if (!ok || !p->tmp_h || !p->resized) {
        tb_preproc_free(p);
        return tb_fail(e, TUBELET_ERR_MEMORY, "preprocess: out of memory");
    }
    float rf = (float)c->rescale_factor;
    p->rf = rf;
    if (c->do_rescale && c->offset) {
        p->mode = 4;
        for (int i = 0; i < 3; i++) p->m[i] = c->mean[i], p->s[i] = c->std[i];
    } else if (c->do_rescale && c->do_normalize) {
        /* torch.tensor(mean) * (1.0 / rescale_factor): float32 times the scalar rounded to float32 */
        float inv = (float)(1.0 / c->rescale_factor);
        p->mode = 1;
        for (int i = 0; i < 3; i++) {
            p->m[i] = c->mean[i] * inv;
            p->s[i] = c->std[i] * inv;
        }
    } else if (c->do_rescale) {
        p->mode = 2;
    } else if (c->do_normalize) {
        p->mode = 3;
        for (int i = 0; i < 3; i++) p->m[i] = c->mean[i], p->s[i] = c->std[i];
    }
    *out = p;
    return TUBELET_OK;
}

void tb_preproc_free(tb_preproc *p) {
    if (!p) return;
    axis_free(&p->ax_h);
    axis_free(&p->ax_v);
    free(p->tmp_h);
    free(p->resized);
    free(p->fi0), free(p->fi1), free(p->fw0), free(p->fw1), free(p->plane), free(p->fres);
    free(p);
}

void tb_preproc_out_size(const tb_preproc *p, int *out_h, int *out_w) {
    *out_h = p->oh;
    *out_w = p->ow;
}

size_t tb_preproc_out_numel(const tb_preproc *p, int n_frames) {
    return (size_t)n_frames * 3 * p->oh * p->ow;
}

static void resize_frame(tb_preproc *p, const uint8_t *in, uint8_t *out) {
    if (p->need_h && p->need_v) {
        pass_horizontal(&p->ax_h, in, p->in_h, p->tmp_h);
        pass_vertical(&p->ax_v, p->tmp_h, p->rw, out);
    } else if (p->need_h) {
        pass_horizontal(&p->ax_h, in, p->in_h, out);
    } else if (p->need_v) {
        pass_vertical(&p->ax_v, in, p->in_w, out);
    } else {
        memcpy(out, in, (size_t)p->in_h * p->in_w * 3);
    }
}

static inline float norm(const tb_preproc *p, int c, uint8_t v) {
    float x = (float)v;
    switch (p->mode) {
    case 1:
        return (x - p->m[c]) / p->s[c];
    case 2:
        return x * p->rf;
    case 3:
        return (x - p->m[c]) / p->s[c];
    case 4: {
        float y = x * p->rf;
        y = y - 1.0f;
        if (p->c.do_normalize) y = (y - p->m[c]) / p->s[c];
        return y;
    }
    default:
        return x;
    }
}

/* crop origin on one axis; may be negative (zero padding), as transformers' torchvision
 * center_crop: pad (c - n) // 2 before, then crop at int((padded - c) / 2.0) */
static int crop_origin(int n, int c, int pos) {
    if (c > n) {
        int pad_before = (c - n) / 2;
        return -pad_before;   /* padded size (c - n) // 2 + n + (c - n + 1) // 2 == c: crop at 0 */
    }
    if (pos == TB_CROP_FIRST) return 0;
    if (pos == TB_CROP_LAST) return n - c;
    return (int)((double)(n - c) / 2.0);
}

int tb_preproc_run(tb_preproc *p, const uint8_t *rgb, int n, tb_crop_pos pos, float *out, tb_err *e) {
    if (!p || (n && (!rgb || !out)) || n < 0)
        return tb_fail(e, TUBELET_ERR_ARG, "tb_preproc_run: bad argument");
    if (pos != TB_CROP_CENTER && pos != TB_CROP_FIRST && pos != TB_CROP_LAST)
        return tb_fail(e, TUBELET_ERR_ARG, "tb_preproc_run: bad crop position %d", (int)pos);
    int top, left;
    if (p->c.do_center_crop) {
        int portrait = p->rh >= p->rw;   /* VideoMAE: crop along H when H >= W */
        top = crop_origin(p->rh, p->oh, portrait ? pos : TB_CROP_CENTER);
        left = crop_origin(p->rw, p->ow, portrait ? TB_CROP_CENTER : pos);
    } else {
        top = left = 0;
    }
    size_t plane = (size_t)p->oh * p->ow;
    size_t in_sz = (size_t)p->in_h * p->in_w * 3;
    const size_t rplane = (size_t)p->rh * p->rw;
    for (int t = 0; t < n && p->c.float_resize; t++) { /* crop, then (x - mean) / std if asked */
        float_resize(p, rgb + (size_t)t * in_sz);
        float *o = out + (size_t)t * 3 * plane;
        for (int c = 0; c < 3; c++)
            for (int y = 0; y < p->oh; y++)
                for (int x = 0; x < p->ow; x++) {
                    const int sy = y + top, sx = x + left;
                    const int inside = sy >= 0 && sy < p->rh && sx >= 0 && sx < p->rw;
                    float v = inside ? p->fres[c * rplane + (size_t)sy * p->rw + sx] : 0;
                    if (p->c.do_normalize) v = (v - p->c.mean[c]) / p->c.std[c];
                    o[c * plane + (size_t)y * p->ow + x] = v;
                }
    }
    for (int t = 0; t < n && !p->c.float_resize; t++) {
        resize_frame(p, rgb + (size_t)t * in_sz, p->resized);
        float *o = out + (size_t)t * 3 * plane;
        for (int y = 0; y < p->oh; y++) {
            int sy = y + top;
            for (int x = 0; x < p->ow; x++) {
                int sx = x + left;
                int inside = sy >= 0 && sy < p->rh && sx >= 0 && sx < p->rw;
                const uint8_t *px = p->resized + ((size_t)(inside ? sy : 0) * p->rw + (inside ? sx : 0)) * 3;
                for (int c = 0; c < 3; c++)
                    o[c * plane + (size_t)y * p->ow + x] = norm(p, c, inside ? px[c] : 0);
            }
        }
    }
    return TUBELET_OK;
}

int tb_resize_u8(const uint8_t *in, int in_h, int in_w, uint8_t *out, int out_h, int out_w,
                 tb_resample mode, tb_err *e) {
    tb_preproc_config c;
    tb_preproc_config_default(&c);
    c.shortest_edge = 0;
    c.size_h = out_h;
    c.size_w = out_w;
    c.resample = mode;
    c.do_center_crop = 0;
    tb_preproc *p;
    int rc = tb_preproc_new(&p, &c, in_h, in_w, e);
    if (rc) return rc;
    resize_frame(p, in, out);
    tb_preproc_free(p);
    return TUBELET_OK;
}

/* preprocessor_config.json for c, as Hugging Face's image processors write it. */
/* v with the fewest digits that read back as exactly v: cJSON's own printing stops at 15 digits
 * when those are within DBL_EPSILON, which can change the last bit. */
char *tb_preproc_config_to_json(const tb_preproc_config *c) {
    cJSON *j = cJSON_CreateObject();
    if (!j) return NULL;
    /* a video processor's class under its own key (VJEPA2VideoProcessor has no image one) */
    cJSON_AddStringToObject(j, strstr(c->processor_class, "VideoProcessor") ? "video_processor_type"
                               : "image_processor_type", c->processor_class);
    cJSON_AddBoolToObject(j, "do_resize", c->do_resize);
    cJSON *size = cJSON_AddObjectToObject(j, "size");
    if (size && c->shortest_edge > 0) cJSON_AddNumberToObject(size, "shortest_edge", c->shortest_edge);
    else if (size) {
        cJSON_AddNumberToObject(size, "height", c->size_h);
        cJSON_AddNumberToObject(size, "width", c->size_w);
    }
    cJSON_AddNumberToObject(j, "resample", (int)c->resample);
    cJSON_AddBoolToObject(j, "do_center_crop", c->do_center_crop);
    cJSON *crop = cJSON_AddObjectToObject(j, "crop_size");
    if (crop) {
        cJSON_AddNumberToObject(crop, "height", c->crop_h);
        cJSON_AddNumberToObject(crop, "width", c->crop_w);
    }
    cJSON_AddBoolToObject(j, "do_rescale", c->do_rescale);
    cJSON_AddItemToObject(j, "rescale_factor", tb_json_number(c->rescale_factor));
    /* a class whose offset defaults to true (Vivit*) needs a false one written too */
    const tb_preproc_defaults *d = tb_family_preprocess(c->processor_class);
    if (c->offset || (d && d->offset))
        cJSON_AddBoolToObject(j, "offset", c->offset);
    cJSON_AddBoolToObject(j, "do_normalize", c->do_normalize);
    double mean[3] = {c->mean[0], c->mean[1], c->mean[2]}, std[3] = {c->std[0], c->std[1], c->std[2]};
    cJSON_AddItemToObject(j, "image_mean", cJSON_CreateDoubleArray(mean, 3));
    cJSON_AddItemToObject(j, "image_std", cJSON_CreateDoubleArray(std, 3));
    char *text = cJSON_Print(j);
    cJSON_Delete(j);
    return text;
}
