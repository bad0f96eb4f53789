/* What a cached label set adds per clip on X-CLIP: the prompt generator over the labels' text
 * embeddings and the logits (tubelet_forward_text), beyond the video pass alone
 * (tubelet_encode_video), at a published shape with random weights. The label set is encoded
 * once (tubelet_encode_text, not timed), as classify, timeline and serve do. Each repeat runs
 * both passes on the same clip, one after the other; the figure is the median of the repeats'
 * differences, divided by the batch. At the published shapes that is a small difference of two
 * long passes; --model DIR (a config.json, random weights) takes a model whose vision tower is
 * shrunk (bench/xclip_compare.py writes one: the published projection_dim, patch grid, frames,
 * text tower and prompt generator, a 1-layer 64-wide vision tower), since the prompt generator
 * and the logits depend only on those, so that the difference stands clear of the video pass.
 *
 *   make && gcc -O2 -march=native -fopenmp -std=c11 -D_GNU_SOURCE -Iinclude \
 *       bench/xclip_labels.c build/libtubelet.a -ldnnl -lcjson -lavformat -lavcodec -lswscale \
 *       -lavutil -lzip -lmsgpackc -lpcre2-8 -lutf8proc -lm -o build/xclip_labels
 *   build/xclip_labels [--arch xclip-b32 | --model DIR] [--batch 1] [--labels 3 101 400] [--threads 2]
 *       [--repeats 5] [--cpu]
 *
 * --cpu times process CPU time instead of wall time: steadier on a shared machine, with
 * --threads 1.
 *
 * Prints one JSON line per label count: {"arch", "batch", "labels", "ms_video", "ms_text",
 * "ms_added_per_clip", "ms_added_min", "ms_added_max"}. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_timing.h"
#include "tubelet.h"
#include "tubelet_text.h"

static double median(double *x, int n) {
    qsort(x, (size_t)n, sizeof *x, cmp);
    return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

int main(int argc, char **argv) {
    const char *arch = "xclip-b32", *dir = NULL;
    int batch = 1, threads = 2, repeats = 5, n_sets = 0, sets[16];
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--arch") && i + 1 < argc) arch = argv[++i];
        else if (!strcmp(argv[i], "--model") && i + 1 < argc) dir = arch = argv[++i];
        else if (!strcmp(argv[i], "--batch") && i + 1 < argc) batch = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--repeats") && i + 1 < argc) repeats = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--cpu")) use_cpu = 1;
        else if (!strcmp(argv[i], "--labels"))
            while (i + 1 < argc && argv[i + 1][0] != '-' && n_sets < 16)
                sets[n_sets++] = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: %s [--arch A] [--batch B] [--labels N...] [--threads T] "
                    "[--repeats R] [--cpu]\n", argv[0]);
            return 2;
        }
    }
    if (!n_sets) sets[n_sets++] = 3;
    if (batch < 1 || threads < 1 || repeats < 1 || repeats > 1000) {
        fprintf(stderr, "%s: batch, threads and repeats must be positive\n", argv[0]);
        return 2;
    }
    char err[512];
    tubelet_load_params lp = tubelet_load_default_params();
    lp.n_threads = threads, lp.inference = 1, lp.random_init = 1;
    tubelet_model *m = NULL;
    if (dir ? tubelet_model_load(&m, dir, &lp, err, sizeof err)
            : tubelet_model_random(&m, arch, 0, &lp, err, sizeof err)) {
        fprintf(stderr, "%s: %s\n", arch, err);
        return 1;
    }
    int P = 0, ctx = 0;
    tubelet_model_info info;
    tubelet_model_get_info(m, &info);
    tubelet_state *s = NULL;
    int rc = tubelet_text_dims(m, &P, &ctx);
    if (!rc) rc = tubelet_state_new(&s, m, batch, info.num_frames, info.image_height,
                                    info.image_width, err, sizeof err);
    if (rc) {
        fprintf(stderr, "%s: %s\n", arch, err);
        tubelet_model_free(m);
        return 1;
    }
    const size_t clip = (size_t)batch * info.num_frames * info.num_channels * info.image_height *
                        info.image_width;
    float *pix = malloc(sizeof(float) * clip), *video = malloc(sizeof(float) * (size_t)(batch * P));
    for (size_t i = 0; pix && i < clip; i++) pix[i] = frand();
    double *diff = malloc(sizeof(double) * (size_t)repeats),
           *tv = malloc(sizeof(double) * (size_t)repeats),
           *tt = malloc(sizeof(double) * (size_t)repeats);
    for (int k = 0; k < n_sets && !rc && pix && video && diff && tv && tt; k++) {
        const int n = sets[k];
        int32_t *ids = calloc((size_t)n * ctx, sizeof *ids);
        float *text = malloc(sizeof(float) * (size_t)n * P);
        float *logits = malloc(sizeof(float) * (size_t)n * batch);
        if (!ids || !text || !logits) rc = TUBELET_ERR_MEMORY, snprintf(err, sizeof err, "memory");
        for (int i = 0; !rc && i < n; i++) { /* start, 7 words, end: the largest id */
            int32_t *r = ids + (size_t)i * ctx;
            r[0] = 1;
            for (int j = 1; j < 8 && j < ctx - 1; j++)
                r[j] = 2 + (int32_t)((i * 31 + j * 7) % 1000);
            r[ctx < 9 ? ctx - 1 : 8] = 49407;
        }
        if (!rc) rc = tubelet_encode_text(m, ids, n, ctx, text, err, sizeof err);
        if (!rc) rc = tubelet_encode_video(s, pix, video, err, sizeof err); /* warm-up */
        if (!rc) rc = tubelet_forward_text(s, pix, text, n, logits, NULL, NULL, err, sizeof err);
        for (int r = 0; r < repeats && !rc; r++) {
            double t0 = now();
            rc = tubelet_encode_video(s, pix, video, err, sizeof err);
            double t1 = now();
            if (!rc)
                rc = tubelet_forward_text(s, pix, text, n, logits, NULL, NULL, err, sizeof err);
            double t2 = now();
            tv[r] = 1e3 * (t1 - t0), tt[r] = 1e3 * (t2 - t1), diff[r] = (tt[r] - tv[r]) / batch;
        }
        if (!rc) {
            const double mv = median(tv, repeats), mt = median(tt, repeats),
                         md = median(diff, repeats); /* sorted: min first, max last */
            printf("{\"arch\": \"%s\", \"batch\": %d, \"labels\": %d, \"ms_video\": %.3f, "
                   "\"ms_text\": %.3f, \"ms_added_per_clip\": %.3f, \"ms_added_min\": %.3f, "
                   "\"ms_added_max\": %.3f}\n", arch, batch, n, mv, mt, md, diff[0],
                   diff[repeats - 1]);
            fflush(stdout);
        }
        free(ids), free(text), free(logits);
    }
    if (rc) fprintf(stderr, "%s: %s\n", arch, err);
    free(pix), free(video), free(diff), free(tv), free(tt);
    tubelet_state_free(s);
    tubelet_model_free(m);
    return rc ? 1 : 0;
}
