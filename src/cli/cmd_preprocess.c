/* tubelet preprocess: the exact pixel_values a model would see for a video. */
#include <stdio.h>
#include <stdlib.h>

#include "cli.h"
#include "io/npy.h"
#include "tubelet_video.h"

static void help(FILE *f) {
    fprintf(f,
            "usage: tubelet preprocess --model DIR VIDEO -o X.npy [--sampling MODE] [--stride S]\n"
            "                          [--clips N] [--crops 1|3] [--frames T]\n\n"
            "Decodes, samples and preprocesses VIDEO exactly as `tubelet classify` does and writes\n"
            "the float32 pixel_values, shape (views, frames, 3, height, width), views = clips x\n"
            "crops in that order — to debug, or to compare with another implementation.\n\n"
            "  --model DIR      model directory (preprocessor_config.json, config.json num_frames)\n"
            "  -o X.npy         output file\n"
            "  --sampling MODE  hf (default), uniform, clip, hf-rate (see tubelet classify --help)\n"
            "  --stride S       clip stride (default 4) / hf-rate rate (default 1)\n"
            "  --clips N        temporal views (default 1)\n"
            "  --crops 1|3      spatial views (default 1)\n"
            "  --frames T       frames per clip (default: the model's num_frames)\n");
}

int cmd_preprocess(int argc, char **argv) {
    const char *dir = NULL, *out = NULL, *video = NULL, *s_stride = NULL, *s_clips = NULL,
               *s_crops = NULL, *s_frames = NULL;
    tubelet_views_params o = tubelet_views_default_params();
    o.log = cli_log;
    int bad = 0;
    for (int i = 1; i < argc && !bad; i++) {
        if (cli_is_help(argv[i])) return help(stdout), 0;
        if (cli_opt(argc, argv, &i, "--model", &dir, &bad) ||
            cli_opt(argc, argv, &i, "-o", &out, &bad) ||
            cli_opt(argc, argv, &i, "--sampling", &o.sampling, &bad) ||
            cli_opt(argc, argv, &i, "--stride", &s_stride, &bad) ||
            cli_opt(argc, argv, &i, "--clips", &s_clips, &bad) ||
            cli_opt(argc, argv, &i, "--crops", &s_crops, &bad) ||
            cli_opt(argc, argv, &i, "--frames", &s_frames, &bad))
            continue;
        if (argv[i][0] == '-' && argv[i][1]) {
            fprintf(stderr, "error: unknown option '%s' (see tubelet preprocess --help)\n", argv[i]);
            return 2;
        }
        if (video) {
            fprintf(stderr, "error: tubelet preprocess takes one video\n");
            return 2;
        }
        video = argv[i];
    }
    if (bad) return 2;
    if (!dir || !out || !video) {
        fprintf(stderr, "error: tubelet preprocess needs --model DIR, VIDEO and -o X.npy\n\n");
        help(stderr);
        return 2;
    }
    if ((s_stride && !cli_int(s_stride, "--stride", 1, 10000, &o.stride)) ||
        (s_clips && !cli_int(s_clips, "--clips", 1, 100, &o.clips)) ||
        (s_crops && !cli_int(s_crops, "--crops", 1, 3, &o.crops)) ||
        (s_frames && !cli_int(s_frames, "--frames", 1, 4096, &o.num_frames)))
        return 2;
    if (o.crops == 2) {
        fprintf(stderr, "error: --crops must be 1 or 3\n");
        return 2;
    }
    char err[1024];
    tb_err e = {{0}};
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
    if (tubelet_preprocessor_load(&pc, dir, cli_log, NULL, err, sizeof err)) {
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
    int rc = npy_write(out, NPY_F32, 5, shape, v.pixels, &e);
    if (rc) fprintf(stderr, "error: %s\n", e.msg);
    else
        fprintf(stderr, "%s: (%d, %d, %d, %d, %d) from frames %lld .. %lld of %lld\n", out,
                v.n_views, v.T, v.C, v.H, v.W, (long long)v.indices[0],
                (long long)v.indices[v.T * o.clips - 1], (long long)v.n_frames);
    tubelet_views_free(&v);
    return rc ? 1 : 0;
}
