/* tubelet bench: forward latency (median after warm-up), GFLOP/s, peak memory. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app.h"
#include "cli.h"
#include "tubelet_pretrain.h"

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* One timed pretraining step (VideoMAEForPreTraining): tube masks at `ratio`, the encoder over
 * the visible tokens, the decoder over all, the masked tokens' MSE, and with `train` the
 * backward into every gradient. Mask seeds change per run, as in pretraining. */
static int pretrain_step_ms(tubelet_pretrain *p, tubelet_model *m, const float *pix,
                            uint8_t *mask, int batch, double ratio, int run, int train,
                            double *ms, char *err, size_t errlen) {
    int gt, gh, gw;
    tubelet_pretrain_grid(m, &gt, &gh, &gw);
    double t0 = app_now();
    float loss;
    if (tubelet_tube_mask(mask, batch, gt, gh, gw, ratio, 1, run, 0, err, errlen) ||
        tubelet_pretrain_step(p, pix, mask, train, &loss, NULL, err, errlen))
        return 1;
    *ms = (app_now() - t0) * 1e3;
    return 0;
}

int cmd_bench(int argc, char **argv) {
    const char *dir = NULL, *arch = NULL, *prec_s = NULL;
    int precision = 0, reference = 0, json = 0, profile = 0, train = 0, ckpt = 0, unpacked = 0;
    int frozen = 0;
    int threads = 0, batch = 1, repeats = 5, warmup = 1, frames = 0, size = 0;
    double ratio = 0.9;
    const cli_option opts[] = {
        {"--model", CLI_STR, &dir, 0, 0, "DIR", "Hugging Face model directory"},
        {"--arch", CLI_STR, &arch, 0, 0, "NAME", "built-in architecture with random weights (tubelet info --list)"},
        {"--batch", CLI_INT, &batch, 1, 1024, "B", "clips per forward (default 1)"},
        {"--frames", CLI_INT, &frames, 1, 4096, "T", "frames per clip (default: config.json's num_frames)"},
        {"--size", CLI_INT, &size, 1, 8192, "S",
         "S x S pixels per frame (default: config.json's image_size); another\n"
         "shape resizes the position embeddings as classify does"},
        CLI_THREADS_OPTION(&threads),
        CLI_DEVICE_OPTION,
        CLI_PRECISION_OPTION(&prec_s),
        {"--repeats", CLI_INT, &repeats, 1, 100000, "R", "timed runs (default 5)"},
        {"--warmup", CLI_INT, &warmup, 0, 100000, "W", "untimed runs first (default 1)"},
        {"--profile", CLI_FLAG, &profile, 0, 0, NULL, "also print the time per kind of work (per forward)"},
        {"--train", CLI_FLAG, &train, 0, 0, NULL, "time a training step (forward + cross-entropy + backward) instead"},
        {"--checkpointing", CLI_FLAG, &ckpt, 0, 0, NULL, "with --train: recompute blocks in the backward (less memory)"},
        {"--freeze-encoder", CLI_FLAG, &frozen, 0, 0, NULL,
         "with --train: the probe's step over a frozen encoder (train --freeze-encoder)"},
        {"--mask-ratio", CLI_REAL, &ratio, 0, 1, "R",
         "pretraining models (VideoMAEForPreTraining): tube masking ratio\n"
         "(default 0.9); the step runs the encoder on the visible tokens"},
        {"--unpacked", CLI_FLAG, &unpacked, 0, 0, NULL,
         "fp32 inference with the weights as stored (sgemm, separate bias\n"
         "and activation passes) instead of packed for oneDNN's matmul"},
        {"--json", CLI_FLAG, &json, 0, 0, NULL, "print one JSON object"},
        {0}};
    const cli_command cmd = {
        "bench",
        "bench (--model DIR | --arch NAME) [--batch B] [--threads N]\n"
        "                     [--frames T] [--size S] [--repeats R] [--warmup W] [--json]",
        "Times the forward pass on random input: median of R runs after W warm-up runs.\n"
        "GFLOP/clip is counted for the input shape timed. On a pretraining model the\n"
        "forward is VideoMAEForPreTraining's (masked at --mask-ratio) and --train adds\n"
        "its backward; GFLOP/clip then counts the visible-token encoder and the decoder.\n"
        "--train --precision bf16 times a mixed-precision step (f32 weights, bf16 products).\n",
        opts, NULL, NULL, 0, NULL};
    int pr = cli_parse(&cmd, argc, argv);
    if (pr >= 0) return pr;
    if (!dir == !arch) {
        fprintf(stderr, "error: give exactly one of --model DIR or --arch NAME\n\n");
        cli_print_help(&cmd, stderr);
        return 2;
    }
    if (!cli_precision(prec_s, &precision, &reference)) return 2;
    /* a training step in bf16 is mixed precision: the f32 weights stay */
    tubelet_model *m = train ? cli_load_train(dir, arch, threads, precision, reference)
                             : cli_load_precision(dir, arch, threads, precision, reference,
                                                  !unpacked);
    if (!m) return 1;
    tubelet_model_info in;
    tubelet_model_get_info(m, &in);
    const int T = frames ? frames : in.num_frames, H = size ? size : in.image_height,
              W = size ? size : in.image_width;
    const int pretraining = tubelet_model_is_pretraining(m);
    if (pretraining && !(ratio > 0 && ratio < 1)) {
        fprintf(stderr, "error: --mask-ratio %g is outside (0, 1)\n", ratio);
        tubelet_model_free(m);
        return 2;
    }
    const double flop = pretraining ? tubelet_pretrain_flop(m, ratio, NULL, NULL, NULL)
                                    : tubelet_model_flop_per_clip(m, T, H, W);
    char err[1024];
    tubelet_state *s = NULL;
    tubelet_pretrain *p = NULL;
    tubelet_grads *g = NULL;
    int gt = 0, gh = 0, gw = 0;
    if (pretraining) tubelet_pretrain_grid(m, &gt, &gh, &gw);
    if ((train && (frozen ? tubelet_grads_new_probe : tubelet_grads_new)(&g, m, err, sizeof err)) ||
        (pretraining ? tubelet_pretrain_new(&p, m, batch, T, in.num_channels, H, W,
                                            (int)(ratio * gh * gw) * gt, g, ckpt, err, sizeof err)
                     : (tubelet_state_new(&s, m, batch, T, H, W, err, sizeof err) ||
                        (train && tubelet_state_enable_training(s, ckpt || frozen, g, err, sizeof err)) ||
                        (train && frozen && tubelet_state_freeze_encoder(s, 1, err, sizeof err))))) {
        fprintf(stderr, "error: %s\n", err);
        tubelet_pretrain_free(p), tubelet_state_free(s), tubelet_grads_free(g);
        tubelet_model_free(m);
        return 1;
    }
    size_t n = (size_t)batch * T * in.num_channels * H * W;
    tubelet_shape ls;
    if (pretraining) tubelet_pretrain_logits_shape(p, &ls);
    else tubelet_state_logits_shape(s, &ls);
    float *pix = malloc(sizeof(float) * n);
    float *logits = malloc(sizeof(float) * (size_t)tubelet_shape_numel(&ls));
    uint8_t *mask = pretraining ? malloc((size_t)batch * gt * gh * gw) : NULL;
    double *ms = malloc(sizeof(double) * (size_t)repeats);
    int64_t *labels = calloc((size_t)ls.dim[0], sizeof(int64_t));
    int rc = 1;
    if (!pix || !logits || !ms || !labels || (pretraining && !mask)) {
        fprintf(stderr, "error: out of memory\n");
        goto done;
    }
    uint64_t r = 1;
    for (size_t i = 0; i < n; i++) { /* deterministic pseudo-random pixels in [-1, 1) */
        r = r * 6364136223846793005ull + 1442695040888963407ull;
        pix[i] = (float)((r >> 40) / 8388608.0 - 1.0);
    }
    cli_bar bar;
    cli_progress_init(&bar);
    for (int i = 0; i < warmup + repeats; i++) {
        if (i == warmup && s) tubelet_state_set_profiling(s, profile);
        double t0 = app_now(), dt;
        float loss;
        if (pretraining ? pretrain_step_ms(p, m, pix, mask, batch, ratio, i, train, &dt, err,
                                           sizeof err)
            : train     ? tubelet_forward_backward(s, pix, labels, &loss, logits, err, sizeof err)
                        : tubelet_forward(s, pix, logits, NULL, err, sizeof err)) {
            cli_progress_end(&bar);
            fprintf(stderr, "error: %s\n", err);
            goto done;
        }
        if (!pretraining) dt = (app_now() - t0) * 1e3;
        if (i >= warmup) ms[i - warmup] = dt;
        if (!json)
            cli_progress(&bar, i + 1, warmup + repeats, "%s %d/%d: %.1f ms",
                         i < warmup ? "warm-up" : "run", i < warmup ? i + 1 : i - warmup + 1,
                         i < warmup ? warmup : repeats, dt);
    }
    qsort(ms, (size_t)repeats, sizeof *ms, cmp_double);
    double med = repeats % 2 ? ms[repeats / 2] : 0.5 * (ms[repeats / 2 - 1] + ms[repeats / 2]);
    /* a training step costs about 3 forwards (backward = 2), 4 with checkpointing */
    double gflop = flop / 1e9 * (train ? (ckpt ? 4 : 3) : 1);
    double gflops = gflop * batch / (med / 1e3);
    const char *name = dir ? dir : arch;
    if (json) {
        /* gflop_per_clip is the timed work (a whole step with --train); forward_gflop_per_clip
         * is the forward alone in every mode */
        printf("{\"arch\": ");
        app_json_string(stdout, name);
        printf(", \"batch\": %d, \"threads\": %d, \"ms_median\": %.3f, "
               "\"ms_min\": %.3f, \"ms_per_clip\": %.3f, \"gflop_per_clip\": %.3f, "
               "\"forward_gflop_per_clip\": %.3f, \"forward_flop_per_clip\": %.0f, "
               "\"input_shape\": [%d, %d, %d, %d, %d], "
               "\"gflops_per_s\": %.1f, \"peak_rss_mb\": %.1f, \"activation_mb\": %.1f, "
               "\"repeats\": %d, \"mode\": \"%s\", \"clips_per_s\": %.3f, \"gemm\": \"%s\", "
               "\"precision\": \"%s\", \"precision_native\": %d, \"packed\": %d, "
               "\"linear_weight_mb\": %.1f}\n",
               batch, tubelet_model_threads(m), med, ms[0], med / batch, gflop, flop / 1e9, flop,
               batch, T, in.num_channels, H, W, gflops, cli_peak_rss_mb(),
               (s ? tubelet_state_bytes(s) : tubelet_pretrain_bytes(p)) / 1048576.0, repeats,
               pretraining ? (train ? (ckpt ? "pretrain-step-checkpointed" : "pretrain-step")
                                    : "pretrain-forward")
               : train     ? (frozen ? "train-frozen" : ckpt ? "train-checkpointed" : "train")
                           : "inference",
               batch / (med / 1e3),
               in.packed ? "oneDNN matmul, packed weights"
               : train && precision == TUBELET_PRECISION_BF16
                   ? (in.precision_native ? "oneDNN bf16 matmul" : "sgemm on bf16-rounded operands")
                   : tubelet_gemm_backend(),
               tubelet_precision_name(train ? precision : in.precision), in.precision_native,
               in.packed, in.linear_weight_bytes / 1048576.0);
    }
    else
        printf("%s  %s%s  %s  %dx%dx%d  batch %d  threads %d: %.1f ms median (%.1f ms/clip, "
               "%.2f clips/s), %.2f GFLOP/clip, %.1f GFLOP/s, activations %.0f MB, "
               "peak RSS %.0f MB\n",
               name, tubelet_precision_name(train ? precision : in.precision),
               in.packed ? " packed" : "",
               pretraining ? (train ? "pretraining step" : "pretraining forward")
               : train     ? (ckpt ? "train step (checkpointed)" : "train step")
                           : "forward",
               T, H, W, batch, tubelet_model_threads(m), med, med / batch, batch / (med / 1e3),
               gflop, gflops, (s ? tubelet_state_bytes(s) : tubelet_pretrain_bytes(p)) / 1048576.0,
               cli_peak_rss_mb());
    if (profile && s) {
        const char *names[32];
        double pms[32], sum = 0;
        int np = tubelet_state_profile(s, names, pms, 32);
        for (int i = 0; i < np; i++) sum += pms[i];
        fprintf(json ? stderr : stdout, "per %s (sum %.1f ms of %.1f ms median):\n",
                train ? "step" : "forward", sum / repeats, med);
        for (int i = 0; i < np; i++) /* kinds of work this model or mode never does: left out */
            if (pms[i] > 0)
                fprintf(json ? stderr : stdout, "  %-14s %9.1f ms  %5.1f %%\n", names[i],
                        pms[i] / repeats, 100 * pms[i] / (sum > 0 ? sum : 1));
    }
    rc = 0;
done:
    free(pix);
    free(logits);
    free(ms);
    free(labels);
    free(mask);
    tubelet_pretrain_free(p);
    tubelet_state_free(s);
    tubelet_grads_free(g);
    tubelet_model_free(m);
    return rc;
}
