/* tubelet features: embeddings or feature maps of video files. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "app.h"
#include "cli.h"
#include "tubelet_io.h"
#include "tubelet_train.h"
#include "tubelet_video.h"

static int ends_with(const char *s, const char *suf) {
    size_t n = strlen(s), m = strlen(suf);
    return n >= m && !strcmp(s + n - m, suf);
}

/* "A,B,..." → layers[0..n), each in [-1, 4096]; returns n (0 on a bad list, with a message). */
static int parse_layers(const char *s, int *layers, int max) {
    int n = 0;
    for (const char *p = s; n < max;) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < -1 || v > 4096 || (*end && *end != ',')) break;
        layers[n++] = (int)v;
        if (!*end) return n;
        p = end + 1;
    }
    fprintf(stderr, "error: --layers wants 1 to %d comma-separated block numbers in [-1, 4096], "
            "got '%s'\n", max, s);
    return 0;
}

/* Writes the features: one tensor (.npy, or "features" in .safetensors), or with levels the
 * stacked levels (.npy) or one tensor per level "features.<i>" (.safetensors). Level l is
 * lshape[l] (videos first) at feats + loff[l]: Video Swin's levels differ in shape. */
static int write_features(const char *out, int n_levels, int ndim, const int64_t *shape,
                          const float *feats, const int64_t (*lshape)[5], const int64_t *loff) {
    char err[1024];
    int rc;
    if (ends_with(out, ".npy")) {
        if (n_levels) { /* (levels, videos, hidden, t, h, w): every level of one shape */
            int64_t sh[6] = {n_levels};
            memcpy(sh + 1, lshape[0], sizeof(int64_t) * 5);
            rc = tubelet_npy_write(out, TUBELET_F32, 6, sh, feats, err, sizeof err);
        } else {
            rc = tubelet_npy_write(out, TUBELET_F32, ndim, shape, feats, err, sizeof err);
        }
    } else {
        const int n = n_levels ? n_levels : 1;
        tubelet_tensor t[64];
        char names[64][24];
        for (int i = 0; i < n; i++) {
            const int64_t *sh = n_levels ? lshape[i] : shape;
            const int nd = n_levels ? 5 : ndim;
            if (n_levels) snprintf(names[i], sizeof names[i], "features.%d", i);
            else snprintf(names[i], sizeof names[i], "features");
            t[i] = (tubelet_tensor){names[i], nd, {0}, feats + (n_levels ? loff[i] : 0)};
            memcpy(t[i].shape, sh, sizeof(int64_t) * (size_t)nd);
        }
        rc = tubelet_safetensors_write(out, t, n, err, sizeof err);
    }
    if (rc) fprintf(stderr, "error: %s\n", err);
    return rc;
}

/* A sharded run (mpirun): each rank sends rank 0 its grid, its per-video size of each level and
 * its features (level by level, its videos each); rank 0 checks that every rank's videos have
 * its shapes and puts the shares in the list's order. Every rank returns the same status. */
typedef struct {
    int64_t grid[3], count, n, per[64]; /* n levels (1 without --levels), per[l] floats a video */
} shard_head;

static int gather_shards(tubelet_dist *d, int n_videos, const shard_head *mine, const float *feats,
                         float **all_out) {
    char err[1024];
    int64_t mine_total = 0;
    for (int l = 0; l < mine->n; l++) mine_total += mine->per[l] * mine->count;
    const size_t body = sizeof(float) * (size_t)mine_total;
    char *msg = malloc(sizeof *mine + body);
    void *all = NULL;
    size_t n_all = 0;
    double bad = !msg;
    if (msg) memcpy(msg, mine, sizeof *mine);
    if (msg && body) memcpy(msg + sizeof *mine, feats, body);
    int rc = tubelet_dist_sum(d, &bad, 1, err, sizeof err);
    if (!rc && !bad) rc = tubelet_dist_gather(d, msg, sizeof *mine + body, &all, &n_all, err, sizeof err);
    free(msg);
    if (rc || bad) {
        if (rc) fprintf(stderr, "error: %s\n", err);
        else fprintf(stderr, "error: out of memory\n");
        return free(all), 1;
    }
    double wrong = 0;
    float *cat = NULL;
    if (tubelet_dist_rank(d) == 0) { /* level l of video v at goff[l] + per[l] v */
        int64_t goff[65] = {0};
        for (int l = 0; l < mine->n; l++) goff[l + 1] = goff[l] + mine->per[l] * n_videos;
        cat = malloc(sizeof(float) * (size_t)goff[mine->n]);
        wrong = !cat;
        size_t at = 0;
        int64_t v0 = 0;
        for (int r = 0; r < tubelet_dist_size(d) && !wrong; r++) {
            shard_head h;
            memcpy(&h, (char *)all + at, sizeof h);
            at += sizeof h;
            if (h.count && (h.n != mine->n || memcmp(h.per, mine->per, sizeof(int64_t) * (size_t)h.n) ||
                            memcmp(h.grid, mine->grid, sizeof h.grid))) {
                fprintf(stderr, "error: rank %d's videos preprocess to another shape than rank 0's "
                        "(all videos of one features run must have the same shape)\n", r);
                wrong = 1;
                break;
            }
            for (int l = 0; l < mine->n && h.count; l++) {
                const size_t bytes = sizeof(float) * (size_t)(h.count * h.per[l]);
                memcpy(cat + goff[l] + mine->per[l] * v0, (char *)all + at, bytes);
                at += bytes;
            }
            v0 += h.count;
        }
    }
    free(all);
    rc = tubelet_dist_sum(d, &wrong, 1, err, sizeof err);
    if (rc || wrong) {
        if (rc) fprintf(stderr, "error: %s\n", err);
        return free(cat), 1;
    }
    *all_out = cat;
    return 0;
}

/* One features run: its options, and what its first video sets: the state, the output's shape
 * (videos first) and the features of this rank's videos (with levels: level l, of shape
 * lshape[l], at loff[l] / n_videos * count). */
typedef struct {
    tubelet_model *m;
    const char *dir, *out;
    int layer, n_levels, pool; /* pool: TUBELET_POOL_*, 2 for none, -1 the model's default */
    const int *layers;         /* one block per level, or NULL: the final-normed map each time */
    tubelet_state *s;
    float *hidden, *feats;
    int ndim;
    int64_t per_video, shape[5], lshape[64][5], loff[65];
} extractor;

/* At the first video (l->videos[i], views v): the state, the shapes and the buffers. 0, or 1
 * after an error message. */
static int extractor_start(extractor *x, const cli_video_list *l, int i, const tubelet_views *v) {
    char err[1024];
    const int n_videos = l->n_videos;
    if (tubelet_state_new(&x->s, x->m, 1, v->T, v->H, v->W, err, sizeof err)) {
        fprintf(stderr, "error: %s: %s\n", l->videos[i], err);
        return 1;
    }
    if (x->pool < 0) x->pool = tubelet_state_has_cls(x->s) ? TUBELET_POOL_CLS : TUBELET_POOL_MEAN;
    if (x->pool == TUBELET_POOL_CLS && !tubelet_state_has_cls(x->s)) {
        fprintf(stderr, "error: %s has no cls token (VideoMAE, ViViT Models 3 and 4); use "
                "--pool mean or none\n", x->dir);
        return 1;
    }
    tubelet_shape hs;
    tubelet_state_hidden_shape(x->s, &hs);
    int gt, gh, gw;
    tubelet_state_grid(x->s, &gt, &gh, &gw);
    const int64_t hidden = x->shape[1];
    if (x->pool == 2) x->ndim = 5, x->shape[2] = gt, x->shape[3] = gh, x->shape[4] = gw;
    x->per_video = x->pool == 2 ? hidden * gt * gh * gw : hidden;
    x->hidden = malloc(sizeof(float) * (size_t)tubelet_shape_numel(&hs));
    for (int lev = 0; lev < x->n_levels; lev++) {
        tubelet_shape ls;
        if (tubelet_state_level_shape(x->s, lev, &ls)) {
            fprintf(stderr, "error: %s has fewer than %d feature levels (Video Swin: one "
                    "per stage)\n", x->dir, x->n_levels);
            return 1;
        }
        memcpy(x->lshape[lev], ls.dim, sizeof x->lshape[lev]);
        x->lshape[lev][0] = n_videos;
        x->loff[lev + 1] = x->loff[lev] + tubelet_shape_numel(&ls) * n_videos;
        if (memcmp(x->lshape[lev], x->lshape[0], sizeof x->lshape[0]) && ends_with(x->out, ".npy")) {
            fprintf(stderr, "error: the %d levels of %s differ in shape (Video Swin's "
                    "stages): write them to OUT.safetensors\n", x->n_levels, x->dir);
            return 1;
        }
    }
    /* this rank's videos only */
    const int64_t per = x->n_levels ? x->loff[x->n_levels] / n_videos : x->per_video;
    x->feats = malloc(sizeof(float) * (size_t)(per * l->count));
    if (!x->hidden || !x->feats) {
        fprintf(stderr, "error: out of memory\n");
        return 1;
    }
    return 0;
}

/* cli_each_video's callback: video i's features into its row of x->feats. */
static int extract_one(void *user, const cli_video_list *l, int i, tubelet_views *v,
                       const char *load_err) {
    extractor *x = user;
    const char *path = l->videos[i];
    const int k = i - l->first, n_videos = l->n_videos; /* k: its row in this rank's buffer */
    char err[1024];
    if (!v) return cli_list_clear(l), fprintf(stderr, "error: %s\n", load_err), 1;
    if (!x->s) {
        cli_list_clear(l); /* the first video: its setup may explain a refusal */
        if (extractor_start(x, l, i, v)) return 1;
    } else if (!tubelet_state_matches(x->s, 1, v->T, v->H, v->W)) {
        cli_list_clear(l);
        fprintf(stderr, "error: %s: preprocessed to %dx%d x %d frames, unlike the videos "
                "before it\n", path, v->H, v->W, v->T);
        return 1;
    }
    float *lv[64]; /* level l of video i: feats[l][i], (levels, videos, ...) */
    for (int lev = 0; lev < x->n_levels; lev++)
        lv[lev] = x->feats + x->loff[lev] / n_videos * l->count +
                  (x->loff[lev + 1] - x->loff[lev]) / n_videos * k;
    if (x->n_levels ? tubelet_forward_features(x->s, v->pixels, x->n_levels, x->layers, lv, err,
                                               sizeof err)
                    : tubelet_forward_hidden(x->s, v->pixels, x->layer, x->hidden, err,
                                             sizeof err)) {
        cli_list_clear(l);
        fprintf(stderr, "error: %s: %s\n", path, err);
        return 1;
    }
    if (x->n_levels) return 0;
    if (x->pool == 2) tubelet_feature_map(x->s, x->hidden, x->feats + x->per_video * k);
    else if (tubelet_pool(x->s, x->hidden, x->pool, x->feats + x->per_video * k)) {
        cli_list_clear(l);
        fprintf(stderr, "error: %s: --pool %s is not possible with this model (it has no "
                "cls token: use --pool mean)\n", path, x->pool ? "mean" : "cls");
        return 1;
    }
    return 0;
}

/* The clip options given on the command line (0 / NULL: not given). */
typedef struct {
    const char *protocol, *out_dir, *resize, *normalize;
    int frames, stride, interval;
} clip_args;

static int clip_mode(const clip_args *a) {
    return a->protocol || a->out_dir || a->resize || a->normalize || a->frames || a->stride ||
           a->interval;
}

/* The protocol: a preset's values, any of them replaced by the generic options. 0, or 2 after
 * an error message. */
static int clip_protocol(const clip_args *a, int model_frames, cli_clip_protocol *p) {
    *p = (cli_clip_protocol){NULL, model_frames, 4, 1, 0, 1};
    if (a->protocol && !cli_clip_preset(a->protocol, p)) {
        fprintf(stderr, "error: unknown --protocol '%s' (one of %s)\n", a->protocol,
                cli_clip_preset_names());
        return 2;
    }
    if (a->frames || a->stride || a->interval || a->resize || a->normalize) p->name = NULL;
    if (a->frames) p->frames = a->frames;
    if (a->stride) p->stride = a->stride;
    if (a->interval) p->interval = a->interval;
    if (a->resize && strcmp(a->resize, "stretch") && strcmp(a->resize, "short-side")) {
        fprintf(stderr, "error: --resize must be stretch or short-side\n");
        return 2;
    }
    if (a->normalize && strcmp(a->normalize, "none") && strcmp(a->normalize, "model")) {
        fprintf(stderr, "error: --normalize must be none or model\n");
        return 2;
    }
    if (a->resize) p->stretch = !strcmp(a->resize, "stretch");
    if (a->normalize) p->normalize = !strcmp(a->normalize, "model");
    if (p->stride % p->interval && p->stride < p->frames * p->interval) {
        fprintf(stderr, "error: --clip-stride %d: clips that overlap must start a multiple of "
                "--frame-interval %d apart\n", p->stride, p->interval);
        return 2;
    }
    return 0;
}

/* DIR/tubelet_features.json: written (rank 0), or compared with the one a previous run wrote
 * (its tubelet_version line aside): features of two protocols or models never share a folder.
 * 0, or 1 after an error message. */
static int clip_json(const char *dir, const char *json) {
    char path[4200], tmp[4300], *old = NULL;
    snprintf(path, sizeof path, "%s/tubelet_features.json", dir);
    FILE *f = fopen(path, "rb");
    if (f) {
        old = calloc(1, 1 << 16);
        if (old) fread(old, 1, (1 << 16) - 1, f);
        fclose(f);
        const char *a = old ? strstr(old, "  \"tubelet_version\"") : NULL,
                   *b = strstr(json, "  \"tubelet_version\"");
        const int same = a && b && a - old == b - json && !strncmp(old, json, (size_t)(b - json));
        free(old);
        if (same) return 0;
        fprintf(stderr, "error: %s was written for other features (another protocol, model or "
                "precision); use another --out-dir, or delete it and the .npy files beside it\n",
                path);
        return 1;
    }
    snprintf(tmp, sizeof tmp, "%s.%ld.tmp", path, (long)getpid());
    f = fopen(tmp, "wb");
    int bad = !f || fputs(json, f) < 0;
    if (f && fclose(f)) bad = 1;
    if (bad || rename(tmp, path)) {
        fprintf(stderr, "error: cannot write %s: %s\n", path, strerror(errno));
        unlink(tmp);
        return 1;
    }
    return 0;
}

/* features --out-dir: one row per clip, one DIR/<stem>.npy per video. */
static int features_clips(const clip_args *a, const char *dir, const char *const *videos,
                          int n_videos, int threads, int precision, int reference,
                          const char *prec_s) {
    if (!a->out_dir || !n_videos) {
        fprintf(stderr, "error: clip features need --out-dir DIR and videos (see tubelet "
                "features --help)\n");
        return 2;
    }
    if (cli_clip_same_stems(videos, n_videos)) return 2;
    struct stat sb;
    if (mkdir(a->out_dir, 0777) && errno != EEXIST) {
        fprintf(stderr, "error: cannot make --out-dir %s: %s\n", a->out_dir, strerror(errno));
        return 1;
    }
    if (stat(a->out_dir, &sb) || !S_ISDIR(sb.st_mode)) {
        fprintf(stderr, "error: --out-dir %s is not a folder\n", a->out_dir);
        return 1;
    }
    tubelet_dist *dist = NULL;
    if (cli_dist_join(&dist)) return 1;
    tubelet_model *m = cli_load_precision(dir, NULL, threads, precision, reference, 0);
    if (!m) return tubelet_dist_finalize(dist), 1;
    tubelet_model_info mi;
    tubelet_model_get_info(m, &mi);
    tubelet_preprocessor *base = NULL, *pp = NULL;
    char err[1024], *json = NULL;
    int rc = 1;
    cli_clip_run r = {.m = m, .out_dir = a->out_dir, .hidden = mi.hidden_size,
                      .precision = prec_s ? prec_s : "fp32"};
    if (cli_takes_video(m, dir)) goto done;
    if ((rc = clip_protocol(a, mi.num_frames, &r.p))) goto done;
    rc = 1;
    if (tubelet_preprocessor_load(&base, dir, app_log, NULL, err, sizeof err)) {
        fprintf(stderr, "error: %s\n", err);
        goto done;
    }
    if (tubelet_preprocessor_protocol(&pp, base, r.p.stretch ? mi.image_height : 0,
                                      r.p.stretch ? mi.image_width : 0, r.p.normalize)) {
        fprintf(stderr, "error: out of memory\n");
        goto done;
    }
    r.pp = pp;
    r.height = mi.image_height, r.width = mi.image_width;
    /* VideoMAE with fc_norm: the original's forward_features; without (a pretraining encoder,
     * STMixer's backbone): the mean of the final-normed tokens, not Hugging Face's token 0 */
    r.mean_hidden = !strcmp(mi.family, "videomae") && strcmp(mi.variant, "mean_pooling");
    r.feature = r.mean_hidden ? "mean of the final-normed tokens"
                : !strcmp(mi.family, "videomae") ? "fc_norm(mean of the last block's tokens)"
                                                 : "the pooled output the classifier reads";
    if (!(json = cli_clip_json(&r, dir))) {
        fprintf(stderr, "error: out of memory\n");
        goto done;
    }
    double bad = (!dist || tubelet_dist_rank(dist) == 0) && clip_json(a->out_dir, json);
    if (dist && tubelet_dist_sum(dist, &bad, 1, err, sizeof err)) {
        fprintf(stderr, "error: %s\n", err);
        goto done;
    }
    if (bad) goto done;
    double counts[3] = {cli_clip_features(&r, videos, n_videos, dist), 0, 0};
    counts[1] = r.written, counts[2] = r.skipped;
    if (dist && tubelet_dist_sum(dist, counts, 3, err, sizeof err)) {
        fprintf(stderr, "error: %s\n", err);
        goto done;
    }
    rc = counts[0] > 0;
    if (dist && tubelet_dist_rank(dist) != 0) goto done;
    fprintf(stderr, "%s: %d written, %d skipped (their .npy exists), %d failed of %d video%s\n",
            a->out_dir, (int)counts[1], (int)counts[2], (int)counts[0], n_videos,
            n_videos > 1 ? "s" : "");
    if (r.mixed_fps)
        fprintf(stderr, "note: the videos' frame rates differ: ActionFormer's default_fps below "
                "is the first video's; give each video its own fps in the annotations\n");
    /* what the detectors' configs must say for these files */
    const int span = (r.p.frames - 1) * r.p.interval + 1;
    printf("# feature i covers frames [i*%d, i*%d + %d); its centre is frame i*%d + %d\n",
           r.p.stride, r.p.stride, span, r.p.stride, span / 2);
    printf("actionformer: feat_stride: %d, num_frames: %d, input_dim: %lld", r.p.stride, span,
           (long long)r.hidden);
    if (r.fps > 0) printf(", default_fps: %.6g", r.fps);
    printf(", downsample_rate: 1, feat_folder: %s, file_ext: .npy\n", a->out_dir);
    printf("opentad: feature_stride=%d, sample_stride=1, offset_frames=%d, in_channels=%lld\n",
           r.p.stride, span / 2, (long long)r.hidden);
done:
    free(json);
    tubelet_state_free(r.s);
    tubelet_preprocessor_free(pp), tubelet_preprocessor_free(base);
    tubelet_model_free(m);
    tubelet_dist_finalize(dist);
    return rc;
}

int cmd_features(int argc, char **argv) {
    const char *dir = NULL, *out = NULL, *pool_s = NULL, *layers_s = NULL, *prec_s = NULL,
               *list_path = NULL;
    char **list_items = NULL;
    int n_list = 0;
    tubelet_dist *dist = NULL;
    int precision = 0, reference = 0, bad = 0, threads = 0, layer = -1, n_videos = 0,
        n_levels = 0, layers[64];
    tubelet_views_params o = tubelet_views_default_params();
    const char *const default_sampling = o.sampling;
    o.log = app_log;
    const char **videos = calloc((size_t)argc, sizeof(char *));
    if (!videos) return 1;
    clip_args ca = {0};
    const cli_option opts[] = {
        {"--model", CLI_STR, &dir, 0, 0, "DIR", "Hugging Face model directory"},
        {"--list", CLI_STR, &list_path, 0, 0, "FILE",
         "the videos, one path per line, after any given as arguments; under\n"
         "mpirun each rank takes a contiguous share and rank 0 writes OUT,\n"
         "byte-identical to one process's (docs/distributed.md)"},
        {"--pool", CLI_STR, &pool_s, 0, 0, "cls|mean|none",
         "cls: the cls token, (videos, hidden) (default for ViViT and TimeSformer)\n"
         "mean: the mean of the patch tokens, (videos, hidden) (default for VideoMAE)\n"
         "none: the feature map, (videos, hidden, T/tubelet, H/patch, W/patch), the\n"
         "layout the VideoMAE / STMixer backbone hands to a detector"},
        {"--layer", CLI_INT, &layer, 0, 4096, "L",
         "the output of block L (Hugging Face hidden_states[L]; 0 = embeddings,\n"
         "no final LayerNorm); default: last_hidden_state"},
        {"--levels", CLI_INT, &n_levels, 1, 64, "N",
         "N feature maps per video, as a detector's neck takes them (implies\n"
         "--pool none): STMixer's backbone returns its final-normed map four\n"
         "times, [x, x, x, x] (--levels 4); Video Swin gives its first N stage\n"
         "outputs (--levels 4: the four an FPN neck takes; .safetensors only)"},
        {"--layers", CLI_STR, &layers_s, 0, 0, "A,B,...",
         "one level per entry: hidden_states[A], ... as --layer reads them\n"
         "(-1 = last_hidden_state); ViTDet's blocks 3,5,7,11 (0-based) of a\n"
         "12-block ViT are --layers 4,6,8,12"},
        {"-o", CLI_STR, &out, 0, 0, "OUT",
         ".npy, or .safetensors with one tensor named \"features\"; with levels,\n"
         ".npy holds them stacked (levels, videos, hidden, T/t, H/p, W/p) and\n"
         ".safetensors one tensor per level, \"features.0\", \"features.1\", ..."},
        {"--sampling", CLI_STR, &o.sampling, 0, 0, "MODE", "as for tubelet classify (default hf)"},
        {"--stride", CLI_INT, &o.stride, 1, 10000, "S", "as for tubelet classify"},
        {"--out-dir", CLI_STR, &ca.out_dir, 0, 0, "DIR",
         "one row per clip: DIR/<video stem>.npy, float32 (clips, hidden),\n"
         "written atomically; a video whose file exists is skipped; under\n"
         "mpirun each rank writes its share (docs/temporal-localisation.md)"},
        {"--protocol", CLI_STR, &ca.protocol, 0, 0, "NAME",
         "clips as a feature set was made: videomae2-tad (16 frames every 4,\n"
         "stretched to 224x224, [0, 1]: VideoMAE V2's extract_tad_feature.py),\n"
         "videomae2-tad-fineaction (every 16), i3d (16 every 4), tsp (16\n"
         "every 16); --stride S then sets the clip stride"},
        {"--clip-frames", CLI_INT, &ca.frames, 1, 4096, "F", "frames per clip (default: the model's)"},
        {"--clip-stride", CLI_INT, &ca.stride, 1, 1 << 20, "S", "frames between clip starts (default 4)"},
        {"--frame-interval", CLI_INT, &ca.interval, 1, 4096, "I",
         "frames between a clip's frames (default 1)"},
        {"--resize", CLI_STR, &ca.resize, 0, 0, "stretch|short-side",
         "stretch: to the model's size, aspect ignored (float bilinear, as\n"
         "F.interpolate); short-side: the model's resize and centre crop\n"
         "(default; videomae2-tad: stretch)"},
        {"--normalize", CLI_STR, &ca.normalize, 0, 0, "none|model",
         "none: pixels in [0, 1]; model: its mean and std (default; videomae2-tad:\n"
         "none)"},
        CLI_THREADS_OPTION(&threads),
        CLI_DEVICE_OPTION,
        CLI_PRECISION_OPTION(&prec_s),
        {0}};
    const cli_command cmd = {
        "features",
        "features --model DIR VIDEO... -o OUT.npy|OUT.safetensors\n"
        "                        [--layer L] [--pool cls|mean|none] [--sampling MODE]\n"
        "                        [--levels N | --layers A,B,...] [--stride S] [--threads N]\n"
        "                        [--precision P]\n"
        "       tubelet features --model DIR --protocol NAME|--clip-frames F ... --out-dir DIR\n"
        "                        VIDEO... [--list FILE]",
        "Writes one feature row per video, in the order given. Inputs of another size than\n"
        "config.json's get bicubically resized positions (VideoMAE, ViViT), so a backbone runs\n"
        "at the detector's resolution (the model directory's preprocessor_config.json sets it).\n"
        "With --out-dir: one row per clip and one .npy per video, for temporal action\n"
        "localisation (ActionFormer, OpenTAD; docs/temporal-localisation.md).\n",
        opts, videos, &n_videos, argc,
        "If any video fails, nothing is written and the exit status is 1 (--out-dir: the\n"
        "other videos' files are written, and the exit status is 1).\n"};
    int pr = cli_parse(&cmd, argc, argv);
    if (pr >= 0) return free(videos), pr;
    if (list_path && (pr = cli_append_list(&videos, &n_videos, list_path, &list_items, &n_list)))
        return free(videos), app_free_lines(list_items, n_list), pr;
    if (clip_mode(&ca)) {
        int rc = 2;
        if (!ca.stride) ca.stride = o.stride; /* --protocol P --stride S: the clip stride */
        if (!dir) fprintf(stderr, "error: tubelet features needs --model DIR\n");
        else if (out || pool_s || layers_s || n_levels || layer >= 0 || o.sampling != default_sampling)
            fprintf(stderr, "error: --out-dir writes one row per clip: not with -o, --pool, "
                    "--layer(s), --levels or --sampling\n");
        else if (cli_precision(prec_s, &precision, &reference))
            rc = features_clips(&ca, dir, videos, n_videos, threads, precision, reference, prec_s);
        free(videos), app_free_lines(list_items, n_list);
        return rc;
    }
    if (!dir || !out || !n_videos) {
        fprintf(stderr, "error: tubelet features needs --model DIR, videos and -o OUT\n\n");
        cli_print_help(&cmd, stderr);
        bad = 1;
    }
    if (!bad && !ends_with(out, ".npy") && !ends_with(out, ".safetensors")) {
        fprintf(stderr, "error: -o must end in .npy or .safetensors\n");
        bad = 1;
    }
    if (!bad && !cli_precision(prec_s, &precision, &reference)) bad = 1;
    if (!bad && cli_refuse_streams("features", videos, n_videos)) bad = 1;
    int pool = -1; /* -1 default, 2 none */
    if (!bad && pool_s) {
        if (!strcmp(pool_s, "cls")) pool = TUBELET_POOL_CLS;
        else if (!strcmp(pool_s, "mean")) pool = TUBELET_POOL_MEAN;
        else if (!strcmp(pool_s, "none")) pool = 2;
        else {
            fprintf(stderr, "error: --pool must be cls, mean or none\n");
            bad = 1;
        }
    }
    /* levels: the final-normed map n times (--levels), or one per --layers entry */
    if (!bad && layers_s) {
        const int n = parse_layers(layers_s, layers, 64);
        if (!n) bad = 1;
        else if (n_levels && n_levels != n) {
            fprintf(stderr, "error: --levels %d but --layers names %d\n", n_levels, n);
            bad = 1;
        }
        n_levels = n;
    }
    if (!bad && n_levels && (layer >= 0 || (pool >= 0 && pool != 2))) {
        fprintf(stderr, "error: --levels / --layers give feature maps: not with --layer or "
                "--pool %s\n", layer >= 0 ? "(use --layers)" : pool_s);
        bad = 1;
    }
    if (n_levels) pool = 2;
    if (bad) return free(videos), app_free_lines(list_items, n_list), 2;
    /* an official checkpoint's own clip sampling, unless the command line chose one */
    const int ckpt_stride = o.sampling == default_sampling && !o.stride ? app_ckpt_stride(dir) : 0;
    if (ckpt_stride) o.sampling = "clip", o.stride = ckpt_stride;
    if (cli_dist_join(&dist)) return free(videos), app_free_lines(list_items, n_list), 1;

    tubelet_model *m = cli_load_precision(dir, NULL, threads, precision, reference, 0);
    if (!m) return free(videos), app_free_lines(list_items, n_list), tubelet_dist_finalize(dist), 1;
    app_default_threads(m, threads);
    char err[1024];
    tubelet_preprocessor *pc = NULL;
    tubelet_model_info mi;
    tubelet_model_get_info(m, &mi);
    int rc = 1;
    extractor x = {m, dir, out, layer, n_levels, pool, layers_s ? layers : NULL,
                   .ndim = 2, .shape = {n_videos, mi.hidden_size}};
    if (cli_takes_video(m, dir)) goto done;
    if (tubelet_preprocessor_load(&pc, dir, app_log, NULL, err, sizeof err)) {
        fprintf(stderr, "error: %s\n", err);
        goto done;
    }
    o.threads = tubelet_model_threads(m);
    if (layer > mi.num_layers) {
        fprintf(stderr, "error: --layer %d: the model has blocks 0..%d\n", layer, mi.num_layers);
        goto done;
    }
    for (int i = 0; layers_s && i < n_levels; i++)
        if (layers[i] > mi.num_layers) {
            fprintf(stderr, "error: --layers %d: the model has blocks 0..%d\n", layers[i],
                    mi.num_layers);
            goto done;
        }
    if (mi.num_temporal_layers && (layer >= 0 || pool == 2)) {
        fprintf(stderr, "error: %s is a ViViT factorised encoder (Model 2): its last hidden state "
                "holds frame tokens, not patch tokens; only --pool cls|mean of the last layer\n",
                dir);
        goto done;
    }
    /* any failure stops the run: nothing is written */
    cli_video_list list = {videos, n_videos, pc, &o, mi.num_frames, 1, 0, 0, NULL};
    const int failed = cli_each_video(&list, dist, extract_one, &x) > 0;
    if (dist) { /* every rank learns whether any failed, then rank 0 gathers and writes */
        double f = failed;
        if (tubelet_dist_sum(dist, &f, 1, err, sizeof err)) {
            fprintf(stderr, "error: %s\n", err);
            goto done;
        }
        if (f) goto done;
        shard_head h = {{x.shape[2], x.shape[3], x.shape[4]}, list.count, n_levels ? n_levels : 1,
                        {x.per_video}};
        for (int l = 0; l < n_levels; l++) h.per[l] = (x.loff[l + 1] - x.loff[l]) / n_videos;
        float *all = NULL;
        if (gather_shards(dist, n_videos, &h, x.feats, &all)) goto done;
        free(x.feats), x.feats = all;
        if (tubelet_dist_rank(dist) != 0) { /* rank 0 writes; the others only report success */
            rc = 0;
            goto done;
        }
    } else if (failed) {
        goto done;
    }
    rc = write_features(out, n_levels, x.ndim, x.shape, x.feats, (const int64_t (*)[5])x.lshape,
                        x.loff);
    if (!rc && n_levels)
        fprintf(stderr, "%s: %d feature levels of %d video%s\n", out, n_levels, n_videos,
                n_videos > 1 ? "s" : "");
    else if (!rc)
        fprintf(stderr, "%s: features of %d video%s\n", out, n_videos, n_videos > 1 ? "s" : "");
done:
    free(x.hidden), free(x.feats), free(videos);
    app_free_lines(list_items, n_list);
    tubelet_state_free(x.s);
    tubelet_model_free(m);
    tubelet_preprocessor_free(pc);
    tubelet_dist_finalize(dist);
    return rc ? 1 : 0;
}
