/* tubelet timeline: sliding-window classification over a long video, streaming: the memory held
 * is one window of frames, whatever the video's length. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "tubelet_video.h"
#include "video/video.h"

static void help(FILE *f) {
    fprintf(f,
            "usage: tubelet timeline --model DIR VIDEO --window S --stride S [--top K]\n"
            "                        [--threads N] [--precision P] [--json | --csv]\n\n"
            "Classifies consecutive windows of VIDEO: each window is S seconds long and is\n"
            "sampled to the model's num_frames frames at an even frame stride; windows start every\n"
            "--stride seconds (rounded to whole frames and to that frame stride). Frames are\n"
            "decoded once, in order, and memory does not grow with the video's length.\n\n"
            "  --window S   window length in seconds (default: num_frames frames at stride 4)\n"
            "  --stride S   seconds between window starts (default: the window length)\n"
            "  --top K      labels per window in --json (default 1)\n"
            "  --json       one JSON array of {start, end, top: [{label, score}]}\n"
            "  --csv        start,end,label,score per window\n"
            CLI_PRECISION_HELP);
}

int cmd_timeline(int argc, char **argv) {
    const char *dir = NULL, *video = NULL, *th = NULL, *win_s = NULL, *str_s = NULL, *top_s = NULL;
    const char *prec_s = NULL;
    int precision = 0, reference = 0;
    int bad = 0, json = 0, csv = 0, threads = 0, top = 1;
    for (int i = 1; i < argc && !bad; i++) {
        if (cli_is_help(argv[i])) return help(stdout), 0;
        if (cli_flag(argv, i, "--json")) json = 1;
        else if (cli_flag(argv, i, "--csv")) csv = 1;
        else if (cli_opt(argc, argv, &i, "--model", &dir, &bad) ||
                 cli_opt(argc, argv, &i, "--threads", &th, &bad) ||
            cli_opt(argc, argv, &i, "--precision", &prec_s, &bad) ||
                 cli_opt(argc, argv, &i, "--window", &win_s, &bad) ||
                 cli_opt(argc, argv, &i, "--stride", &str_s, &bad) ||
                 cli_opt(argc, argv, &i, "--top", &top_s, &bad))
            continue;
        else if (argv[i][0] == '-' && argv[i][1]) {
            fprintf(stderr, "error: unknown option '%s' (see tubelet timeline --help)\n", argv[i]);
            bad = 1;
        } else if (video) {
            fprintf(stderr, "error: tubelet timeline takes one video\n");
            bad = 1;
        } else video = argv[i];
    }
    if (!bad && json && csv) {
        fprintf(stderr, "error: --json and --csv exclude each other\n");
        bad = 1;
    }
    if (!bad && (!dir || !video)) {
        fprintf(stderr, "error: tubelet timeline needs --model DIR and a video\n\n");
        help(stderr);
        bad = 1;
    }
    double window = 0, stride = 0;
    if (!bad && win_s && !cli_double(win_s, "--window", 1e-3, 1e6, &window)) bad = 1;
    if (!bad && str_s && !cli_double(str_s, "--stride", 1e-3, 1e6, &stride)) bad = 1;
    if (!bad && ((th && !cli_int(th, "--threads", 0, 1024, &threads)) ||
                 !cli_precision(prec_s, &precision, &reference) ||
                 (top_s && !cli_int(top_s, "--top", 1, 100000, &top))))
        bad = 1;
    if (bad) return 2;

    tubelet_model *m = cli_load_precision(dir, NULL, threads, precision, reference, 1);
    if (!m) return 1;
    char err[1024];
    tb_err e = {{0}};
    tubelet_preprocessor *pc = NULL;
    tb_video *v = NULL;
    tb_preproc *pp = NULL;
    tubelet_state *s = NULL;
    uint8_t *rgb = NULL;
    float *pix = NULL, *logits = NULL;
    int rc = 1, n_windows = 0;
    tubelet_model_info mi;
    tubelet_model_get_info(m, &mi);
    const int T = mi.num_frames;
    if (tubelet_preprocessor_load(&pc, dir, cli_log, NULL, err, sizeof err)) {
        fprintf(stderr, "error: %s\n", err);
        goto done;
    }
    tb_video_params vp = tb_video_default_params();
    vp.n_threads = tubelet_model_threads(m);
    vp.no_index = 1; /* one forward pass: no packet scan of the whole file first */
    vp.log = (tb_log){cli_log, NULL};
    if (tb_video_open(&v, video, &vp, &e)) goto fail;
    const tb_video_info *in = tb_video_get_info(v);
    const double fps = in->fps > 0 ? in->fps : 25.0;
    int fstride = window > 0 ? (int)lround(window * fps / T) : 4;
    if (fstride < 1) fstride = 1;
    int hop = stride > 0 ? (int)lround(stride * fps) : fstride * T;
    if (hop < fstride * T) { /* the stream wants a multiple of the frame stride: the nearest */
        hop = (int)lround((double)hop / fstride) * fstride;
        if (hop < fstride) hop = fstride;
    }
    tb_stream_params sp = {T, fstride, hop};
    if (tb_video_stream_begin(v, &sp, &e) || tb_preproc_new(&pp, tb_preprocessor_config(pc), in->height, in->width, &e))
        goto fail;
    int oh, ow;
    tb_preproc_out_size(pp, &oh, &ow);
    if (tubelet_state_new(&s, m, 1, T, oh, ow, err, sizeof err)) {
        fprintf(stderr, "error: %s: %s\n", video, err);
        goto done;
    }
    tubelet_shape ls;
    tubelet_state_logits_shape(s, &ls);
    const int64_t n_lab = ls.dim[1];
    rgb = malloc((size_t)T * in->height * in->width * 3);
    pix = malloc(sizeof(float) * tb_preproc_out_numel(pp, T));
    logits = malloc(sizeof(float) * (size_t)tubelet_shape_numel(&ls));
    double *prob = malloc(sizeof(double) * (size_t)n_lab);
    int *best = malloc(sizeof(int) * (size_t)n_lab);
    if (!rgb || !pix || !logits || !prob || !best) {
        free(prob), free(best);
        fprintf(stderr, "error: out of memory\n");
        goto done;
    }
    fprintf(stderr, "%s: windows of %d frames at stride %d (%.2f s), every %d frames (%.2f s)\n",
            video, T, fstride, T * fstride / fps, hop, hop / fps);
    if (json) printf("[");
    if (csv) printf("start,end,label,score\n");
    for (;;) {
        int64_t first;
        int n_real, got = tb_video_stream_next(v, rgb, &first, &n_real, &e);
        if (got < 0) {
            free(prob), free(best);
            goto fail;
        }
        if (got == 0) break;
        if (tb_preproc_run(pp, rgb, T, TB_CROP_CENTER, pix, &e)) {
            free(prob), free(best);
            goto fail;
        }
        if (tubelet_forward(s, pix, logits, NULL, err, sizeof err)) {
            fprintf(stderr, "error: %s: %s\n", video, err);
            free(prob), free(best);
            goto done;
        }
        /* softmax averaged over the logits rows (several for TimeSformer space_only) */
        cli_mean_softmax(logits, ls.dim[0], n_lab, prob);
        double t0 = first / fps, t1 = (first + (int64_t)(n_real - 1) * fstride + 1) / fps;
        int kk = top < n_lab ? top : (int)n_lab;
        for (int a = 0; a < kk; a++) {
            best[a] = -1;
            for (int k = 0; k < n_lab; k++) {
                int used = 0;
                for (int b = 0; b < a; b++) used |= best[b] == k;
                if (!used && (best[a] < 0 || prob[k] > prob[best[a]])) best[a] = k;
            }
        }
        const char *lab = tubelet_model_label(m, best[0]);
        if (json) {
            printf("%s{\"start\": %.3f, \"end\": %.3f, \"top\": [", n_windows ? ", " : "", t0, t1);
            for (int a = 0; a < kk; a++) {
                const char *la = tubelet_model_label(m, best[a]);
                printf("%s{\"label\": ", a ? ", " : "");
                cli_json_string(stdout, la ? la : "");
                printf(", \"score\": %.6f}", prob[best[a]]);
            }
            printf("]}");
        } else if (csv) {
            printf("%.3f,%.3f,", t0, t1);
            cli_csv_string(stdout, lab ? lab : "");
            printf(",%.6f\n", prob[best[0]]);
        } else {
            printf("%9.2f - %9.2f s  %6.2f%%  %s\n", t0, t1, 100 * prob[best[0]], lab ? lab : "?");
        }
        fflush(stdout);
        n_windows++;
    }
    if (json) printf("]\n");
    free(prob), free(best);
    fprintf(stderr, "%s: %d windows\n", video, n_windows);
    rc = 0;
    goto done;
fail:
    fprintf(stderr, "error: %s\n", e.msg);
done:
    free(rgb), free(pix), free(logits);
    tubelet_state_free(s);
    tb_preproc_free(pp);
    tubelet_preprocessor_free(pc);
    tb_video_close(v);
    tubelet_model_free(m);
    return rc;
}
