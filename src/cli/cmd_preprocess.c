/* tubelet preprocess: the exact pixel_values a model would see for a video. */
#include <stdio.h>
#include <stdlib.h>

#include "app.h"
#include "cli.h"
#include "tubelet_io.h"
#include "tubelet_video.h"

int cmd_preprocess(int argc, char **argv) {
    const char *dir = NULL, *out = NULL, *video = NULL;
    int n_video = 0;
    tubelet_views_params o = tubelet_views_default_params();
    const char *const default_sampling = o.sampling;
    o.log = app_log;
    const cli_option opts[] = {
        {"--model", CLI_STR, &dir, 0, 0, "DIR", "model directory (preprocessor_config.json, config.json num_frames)"},
        {"-o", CLI_STR, &out, 0, 0, "X.npy", "output file"},
        {"--sampling", CLI_STR, &o.sampling, 0, 0, "MODE", "hf (default), uniform, clip, hf-rate (see tubelet classify --help)"},
        {"--stride", CLI_INT, &o.stride, 1, 10000, "S", "clip stride (default 4) / hf-rate rate (default 1)"},
        {"--clips", CLI_INT, &o.clips, 1, 100, "N", "temporal views (default 1)"},
        {"--crops", CLI_INT, &o.crops, 1, 3, "1|3", "spatial views (default 1)"},
        {"--frames", CLI_INT, &o.num_frames, 1, 4096, "T", "frames per clip (default: the model's num_frames)"},
        {0}};
    const cli_command cmd = {
        "preprocess",
        "preprocess --model DIR VIDEO -o X.npy [--sampling MODE] [--stride S]\n"
        "                          [--clips N] [--crops 1|3] [--frames T]",
        "Decodes, samples and preprocesses VIDEO exactly as `tubelet classify` does and writes\n"
        "the float32 pixel_values, shape (views, frames, 3, height, width), views = clips x\n"
        "crops in that order — to debug, or to compare with another implementation.\n",
        opts, &video, &n_video, 1, NULL};
    int pr = cli_parse(&cmd, argc, argv);
    if (pr >= 0) return pr;
    if (!dir || !out || !video) {
        fprintf(stderr, "error: tubelet preprocess needs --model DIR, VIDEO and -o X.npy\n\n");
        cli_print_help(&cmd, stderr);
        return 2;
    }
    if (o.crops == 2) {
        fprintf(stderr, "error: --crops must be 1 or 3\n");
        return 2;
    }
    /* an official checkpoint's own clip sampling, as classify takes it */
    const int ckpt_stride = o.sampling == default_sampling && !o.stride ? app_ckpt_stride(dir) : 0;
    if (ckpt_stride) o.sampling = "clip", o.stride = ckpt_stride;
    char err[1024];
    int frames = o.num_frames;
    if (!frames) { /* the model's clip length (weights are memory-mapped, so this is cheap) */
        tubelet_model *m = cli_load(dir, NULL, 1);
        if (!m) return 1;
        tubelet_model_info mi;
        tubelet_model_get_info(m, &mi);
        frames = mi.num_frames;
        tubelet_model_free(m);
    }
    tubelet_preprocessor *pc = NULL;
    if (tubelet_preprocessor_load(&pc, dir, app_log, NULL, err, sizeof err)) {
        fprintf(stderr, "error: %s\n", err);
        return 1;
    }
    tubelet_views v;
    int lrc = tubelet_views_load(&v, video, pc, &o, frames, err, sizeof err);
    tubelet_preprocessor_free(pc);
    if (lrc) {
        fprintf(stderr, "error: %s\n", err);
        return 1;
    }
    if (v.n_padded)
        fprintf(stderr, "note: %s has %lld frames, fewer than the clip needs: %d sampled positions "
                "repeat a frame\n", video, (long long)v.n_frames, v.n_padded);
    int64_t shape[5] = {v.n_views, v.T, v.C, v.H, v.W};
    int rc = tubelet_npy_write(out, TUBELET_F32, 5, shape, v.pixels, err, sizeof err);
    if (rc) fprintf(stderr, "error: %s\n", err);
    else
        fprintf(stderr, "%s: (%d, %d, %d, %d, %d) from frames %lld .. %lld of %lld\n", out,
                v.n_views, v.T, v.C, v.H, v.W, (long long)v.indices[0],
                (long long)v.indices[v.T * o.clips - 1], (long long)v.n_frames);
    tubelet_views_free(&v);
    return rc ? 1 : 0;
}
