/* tubelet reconstruct: what a VideoMAE pretraining model makes of a masked video, as a picture:
 * one column per frame; rows: the input, the masked input (masked patches grey), the
 * reconstruction (the visible patches as they are, the masked ones predicted). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "app.h"
#include "cli.h"
#include "tubelet_io.h"
#include "tubelet_pretrain.h"
#include "tubelet_video.h"

/* HF un-normalises 3-channel input with ImageNet's mean and std before cutting the targets. */
static const float mean3[3] = {0.485f, 0.456f, 0.406f}, std3[3] = {0.229f, 0.224f, 0.225f};

typedef struct {
    int T, C, H, W, tt, ph, pw, gh, gw;
} geometry;

/* The pixel (0..1 scale) of token `tok`'s patch element (dt, dy, dx, ch) in frame-major video
 * v (T, C, H, W) as the targets see it: un-normalised for 3 channels. */
static float *at(float *v, const geometry *g, int t, int ch, int y, int x) {
    return v + (((size_t)t * g->C + ch) * g->H + y) * g->W + x;
}

/* Masked patches filled with the predictions: with norm_pix_loss they are normalised per patch
 * and channel, so they get back a mean and spread — the mean over the clip's visible patches
 * of each one's mean and standard deviation (per channel; the masked patch's own would leak
 * what the model did not see). */
static void fill_masked(float *rec, const geometry *g, const uint8_t *mask, const float *logits,
                        int norm_pix) {
    const int per = g->tt * g->ph * g->pw, n_tok = g->T / g->tt * g->gh * g->gw;
    double mu[64] = {0}, sd[64] = {0};
    int n_vis = 0;
    for (int tok = 0; tok < n_tok; tok++) { /* the visible patches' statistics */
        if (mask[tok]) continue;
        const int it = tok / (g->gh * g->gw), iy = tok / g->gw % g->gh, ix = tok % g->gw;
        n_vis++;
        for (int ch = 0; ch < g->C && ch < 64; ch++) {
            double s = 0, q = 0;
            for (int k = 0; k < per; k++) {
                const int dt = k / (g->ph * g->pw), dy = k / g->pw % g->ph, dx = k % g->pw;
                const double v = *at(rec, g, it * g->tt + dt, ch, iy * g->ph + dy, ix * g->pw + dx);
                s += v, q += v * v;
            }
            const double m = s / per;
            mu[ch] += m, sd[ch] += sqrt(fmax(0, (q - per * m * m) / (per > 1 ? per - 1 : 1)));
        }
    }
    for (int ch = 0; ch < g->C && ch < 64; ch++) mu[ch] /= n_vis, sd[ch] /= n_vis;
    for (int tok = 0, r = 0; tok < n_tok; tok++) {
        if (!mask[tok]) continue;
        const int it = tok / (g->gh * g->gw), iy = tok / g->gw % g->gh, ix = tok % g->gw;
        const float *row = logits + (size_t)r++ * per * g->C;
        for (int k = 0; k < per; k++)
            for (int ch = 0; ch < g->C; ch++) {
                const int dt = k / (g->ph * g->pw), dy = k / g->pw % g->ph, dx = k % g->pw;
                double v = row[k * g->C + ch];
                if (norm_pix && ch < 64) v = v * (sd[ch] + 1e-6) + mu[ch];
                *at(rec, g, it * g->tt + dt, ch, iy * g->ph + dy, ix * g->pw + dx) = (float)v;
            }
    }
}

/* Three rows of T frames into an RGB image (grey for a single channel), each pixel drawn as a
 * scale x scale block (small clips would be a few dozen pixels wide); a pixel v of the targets'
 * scale is shown as a[ch] v + b[ch] (the processor's own scale). */
/* Three rows of frames, each under its name: the input, the input with the masked patches grey,
 * and the reconstruction. */
static uint8_t *draw(const float *orig, const float *masked, const float *rec, const geometry *g,
                     const float a[3], const float b[3], int scale, const char *const names[3],
                     int *iw, int *ih) {
    const int gap = 2, fw = g->W * scale, fh = g->H * scale;
    const int W = g->T * (fw + gap) - gap, ts = W >= 400 ? 2 : 1, band = 9 * ts + 8;
    const int H = 3 * (band + fh) + 2 * gap;
    static const uint8_t ink[3] = {40, 40, 40};
    uint8_t *img = malloc((size_t)W * H * 3);
    if (!img) return NULL;
    memset(img, 255, (size_t)W * H * 3);
    const float *rows[3] = {orig, masked, rec};
    for (int r = 0; r < 3; r++) {
        const int top = r * (band + fh + gap);
        tubelet_png_text(img, W, H, 2, top + 4, ts, ink, names[r]);
        for (int t = 0; t < g->T; t++)
            for (int y = 0; y < fh; y++)
                for (int x = 0; x < fw; x++) {
                    uint8_t *px = img + ((size_t)(top + band + y) * W + t * (fw + gap) + x) * 3;
                    for (int c = 0; c < 3; c++) {
                        const int ch = g->C == 3 ? c : 0;
                        const float v =
                            a[ch] * *at((float *)rows[r], g, t, ch, y / scale, x / scale) + b[ch];
                        px[c] = (uint8_t)lrintf(255.0f * fminf(1.0f, fmaxf(0.0f, v)));
                    }
                }
    }
    *iw = W, *ih = H;
    return img;
}

int cmd_reconstruct(int argc, char **argv) {
    const char *dir = NULL, *out = NULL, *video[2] = {NULL, NULL};
    double ratio = 0.9;
    int seed = 0, threads = 0, n_pos = 0, scale = 0;
    const cli_option opts[] = {
        {"--model", CLI_STR, &dir, 0, 0, "DIR", "a VideoMAEForPreTraining directory"},
        {"-o", CLI_STR, &out, 0, 0, "PNG", "the picture"},
        {"--mask-ratio", CLI_REAL, &ratio, 0, 1, "R", "tube masking ratio (default 0.9)"},
        {"--scale", CLI_INT, &scale, 1, 16, "N",
         "draw each pixel as N x N (default: enough for frames of at least\n"
         "112 pixels, at most 8)"},
        {"--seed", CLI_INT, &seed, 0, 2147483647, "K", "the mask's seed (default 0)"},
        CLI_THREADS_OPTION(&threads),
        {0}};
    const cli_command cmd = {
        "reconstruct", "reconstruct --model DIR VIDEO -o recon.png [--mask-ratio 0.9] [--seed K]\n"
        "                     [--scale N]",
        "Masks tubes of VIDEO's clip (the model's frames and size, sampled and preprocessed as\n"
        "its processor does), runs the pretraining model, and draws one column per frame and\n"
        "three rows, each under its name: the input, the masked input (masked patches grey),\n"
        "the reconstruction.\n"
        "With norm_pix_loss the model predicts normalised patches; they are shown with the mean\n"
        "and spread of the clip's visible patches (docs/pretraining.md).\n",
        opts, video, &n_pos, 1, NULL};
    int pr = cli_parse(&cmd, argc, argv);
    if (pr >= 0) return pr;
    if (!dir || !out || n_pos != 1) {
        fprintf(stderr, "error: tubelet reconstruct needs --model, one video and -o\n\n");
        cli_print_help(&cmd, stderr);
        return 2;
    }
    char err[1024], pp_path[1200];
    int rc = 1;
    tubelet_model *m = cli_load(dir, NULL, threads);
    tubelet_preprocessor *pp = NULL;
    tubelet_pretrain *p = NULL;
    tubelet_views v = {0};
    float *logits = NULL, *masked = NULL, *rec = NULL, *orig = NULL;
    uint8_t *mask = NULL, *img = NULL;
    if (!m) return 1;
    if (!tubelet_model_is_pretraining(m)) {
        fprintf(stderr, "error: %s is not a VideoMAEForPreTraining model: it has no decoder to "
                "reconstruct with\n", dir);
        goto done;
    }
    tubelet_model_info mi;
    tubelet_model_get_info(m, &mi);
    snprintf(pp_path, sizeof pp_path, "%s/preprocessor_config.json", dir);
    int have_pp = access(pp_path, F_OK) == 0;
    snprintf(pp_path, sizeof pp_path, "%s/video_preprocessor_config.json", dir);
    have_pp |= access(pp_path, F_OK) == 0;
    snprintf(err, sizeof err, "out of memory");
    if (have_pp ? tubelet_preprocessor_load(&pp, dir, app_log, NULL, err, sizeof err)
                                   : tubelet_preprocessor_default(&pp, mi.image_height, mi.image_width)) {
        fprintf(stderr, "error: %s\n", err);
        goto done;
    }
    tubelet_views_params vp = tubelet_views_default_params();
    vp.log = app_log;
    if (tubelet_views_load(&v, video[0], pp, &vp, mi.num_frames, err, sizeof err)) {
        fprintf(stderr, "error: %s\n", err);
        goto done;
    }
    int gt, gh, gw;
    tubelet_pretrain_grid(m, &gt, &gh, &gw);
    const int n_tok = gt * gh * gw, per_frame = (int)(ratio * gh * gw);
    const geometry g = {v.T, v.C, v.H, v.W, mi.tubelet_t, mi.patch_h, mi.patch_w, gh, gw};
    const size_t n = (size_t)v.T * v.C * v.H * v.W;
    mask = malloc((size_t)n_tok);
    orig = malloc(sizeof(float) * n), masked = malloc(sizeof(float) * n), rec = malloc(sizeof(float) * n);
    if (!mask || !orig || !masked || !rec) {
        fprintf(stderr, "error: out of memory\n");
        goto done;
    }
    if (tubelet_tube_mask(mask, 1, gt, gh, gw, ratio, (uint64_t)seed, 0, 0, err, sizeof err) ||
        tubelet_pretrain_new(&p, m, 1, v.T, v.C, v.H, v.W, per_frame * gt, NULL, 0, err, sizeof err)) {
        fprintf(stderr, "error: %s: %s\n", video[0], err);
        goto done;
    }
    tubelet_shape ls;
    tubelet_pretrain_logits_shape(p, &ls);
    float loss;
    if (!(logits = malloc(sizeof(float) * (size_t)tubelet_shape_numel(&ls))) ||
        tubelet_pretrain_step(p, v.pixels, mask, 0, &loss, logits, err, sizeof err)) {
        fprintf(stderr, "error: %s: %s\n", video[0], logits ? err : "out of memory");
        goto done;
    }
    for (size_t i = 0; i < n; i++) { /* the pixels the targets are cut from */
        const int ch = (int)(i / ((size_t)v.H * v.W) % (size_t)v.C);
        orig[i] = v.C == 3 ? v.pixels[i] * std3[ch] + mean3[ch] : v.pixels[i];
    }
    /* HF un-normalises with ImageNet's mean and std whatever the processor used (its default is
     * 0.5, 0.5): the picture shows the processor's own pixels, a v + b */
    float a[3] = {1, 1, 1}, b[3] = {0, 0, 0}, pmean[3], pstd[3];
    const int normalize = tubelet_preprocessor_normalization(pp, pmean, pstd);
    for (int c = 0; c < 3 && v.C == 3; c++) {
        const float ps = normalize ? pstd[c] : 1, pm = normalize ? pmean[c] : 0;
        a[c] = ps / std3[c], b[c] = pm - mean3[c] * ps / std3[c];
    }
    memcpy(masked, orig, sizeof(float) * n), memcpy(rec, orig, sizeof(float) * n);
    for (int tok = 0; tok < n_tok; tok++) /* grey over the masked patches */
        for (int k = 0; mask[tok] && k < g.tt * g.ph * g.pw; k++)
            for (int ch = 0; ch < g.C; ch++) {
                const int it = tok / (gh * gw), iy = tok / gw % gh, ix = tok % gw;
                const int dt = k / (g.ph * g.pw), dy = k / g.pw % g.ph, dx = k % g.pw;
                *at(masked, &g, it * g.tt + dt, ch, iy * g.ph + dy, ix * g.pw + dx) =
                    ch < 3 ? (0.5f - b[ch]) / a[ch] : 0.5f; /* shown as mid grey */
            }
    fill_masked(rec, &g, mask, logits, tubelet_pretrain_decoder(m, 4));
    int iw, ih;
    if (!scale) /* small clips magnified, so that a person can see the patches */
        for (scale = 1; scale < 8 && v.H * scale < 112; scale++) {}
    char masked_name[96];
    snprintf(masked_name, sizeof masked_name, "masked: %d of %d tokens (grey)", per_frame * gt,
             n_tok);
    const char *const names[3] = {"input", masked_name, "reconstruction"};
    if (!(img = draw(orig, masked, rec, &g, a, b, scale, names, &iw, &ih))) {
        fprintf(stderr, "error: out of memory\n");
        goto done;
    }
    if (tubelet_png_write(out, img, iw, ih, err, sizeof err)) {
        fprintf(stderr, "error: %s\n", err);
        goto done;
    }
    printf("loss %.7f\n", loss);
    fprintf(stderr, "%s: %d frames, %d of %d tokens masked\n", out, v.T, per_frame * gt, n_tok);
    rc = 0;
done:
    free(img), free(mask), free(orig), free(masked), free(rec), free(logits);
    tubelet_pretrain_free(p);
    tubelet_views_free(&v);
    tubelet_preprocessor_free(pp);
    tubelet_model_free(m);
    return rc;
}
