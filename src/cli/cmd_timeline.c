/* tubelet timeline: sliding-window classification over a long video, streaming: the memory held
 * is one window of frames, whatever the video's length. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "tubelet_video.h"

int cmd_timeline(int argc, char **argv) {
    const char *dir = NULL, *video = NULL, *prec_s = NULL;
    int precision = 0, reference = 0, bad = 0, json = 0, csv = 0, threads = 0, top = 1, n_video = 0;
    double window = 0, stride = 0;
    const cli_option opts[] = {
        {"--model", CLI_STR, &dir, 0, 0, "DIR", "Hugging Face model directory"},
        {"--window", CLI_SECONDS, &window, 1e-3, 1e6, "S", "window length in seconds, e.g. 2 or 2s (default: num_frames\nframes at stride 4)"},
        {"--stride", CLI_SECONDS, &stride, 1e-3, 1e6, "S", "seconds between window starts (default: the window length)"},
        {"--top", CLI_INT, &top, 1, 100000, "K", "labels per window in --json (default 1)"},
        {"--json", CLI_FLAG, &json, 0, 0, NULL, "one JSON array of {start, end, top: [{label, score}]}"},
        {"--csv", CLI_FLAG, &csv, 0, 0, NULL, "start,end,label,score per window"},
        CLI_THREADS_OPTION(&threads),
        CLI_PRECISION_OPTION(&prec_s),
        {0}};
    const cli_command cmd = {
        "timeline",
        "timeline --model DIR VIDEO --window S --stride S [--top K]\n"
        "                        [--threads N] [--precision P] [--json | --csv]",
        "Classifies consecutive windows of VIDEO: each window is S seconds long and is\n"
        "sampled to the model's num_frames frames at an even frame stride; windows start every\n"
        "--stride seconds (rounded to whole frames and to that frame stride). Frames are\n"
        "decoded once, in order, and memory does not grow with the video's length.\n",
        opts, &video, &n_video, 1, NULL};
    int pr = cli_parse(&cmd, argc, argv);
    if (pr >= 0) return pr;
    if (json && csv) {
        fprintf(stderr, "error: --json and --csv exclude each other\n");
        bad = 1;
    }
    if (!bad && (!dir || !video)) {
        fprintf(stderr, "error: tubelet timeline needs --model DIR and a video\n\n");
        cli_print_help(&cmd, stderr);
        bad = 1;
    }
    if (!bad && !cli_precision(prec_s, &precision, &reference)) bad = 1;
    if (bad) return 2;

    tubelet_model *m = cli_load_precision(dir, NULL, threads, precision, reference, 1);
    if (!m) return 1;
    char err[1024];
    tubelet_preprocessor *pc = NULL;
    tubelet_video_stream *v = NULL;
    tubelet_state *s = NULL;
    float *pix = NULL, *logits = NULL;
    int rc = 1, n_windows = 0;
    tubelet_model_info mi;
    tubelet_model_get_info(m, &mi);
    const int T = mi.num_frames;
    if (cli_takes_video(m, dir) || cli_own_labels(m, dir, "timeline")) goto done;
    if (tubelet_preprocessor_load(&pc, dir, cli_log, NULL, err, sizeof err)) {
        fprintf(stderr, "error: %s\n", err);
        goto done;
    }
    if (tubelet_video_stream_open(&v, video, pc, tubelet_model_threads(m), cli_log, NULL, err,
                                  sizeof err))
        goto fail;
    const double fps = tubelet_video_stream_fps(v) > 0 ? tubelet_video_stream_fps(v) : 25.0;
    /* a window longer than the video: one window over the whole video, said so */
    const double duration = tubelet_video_stream_duration(v);
    const int64_t n_frames = (int64_t)floor(duration * fps + 0.5);
    int fstride, hop;
    if (cli_window_plan(window, stride, fps, T, n_frames, &fstride, &hop))
        fprintf(stderr, "warning: %s: the window (%.2f s, %d frames) is longer than the video "
                "(%.2f s, %lld frames): one window over the whole video instead, %d frames at "
                "stride %d%s\n", video, window > 0 ? window : T * 4 / fps, T, duration,
                (long long)n_frames, T, fstride, n_frames < T ? ", its last frame repeated" : "");
    int oh, ow;
    if (tubelet_video_stream_begin(v, T, fstride, hop, &oh, &ow, err, sizeof err)) goto fail;
    if (tubelet_state_new(&s, m, 1, T, oh, ow, err, sizeof err)) {
        fprintf(stderr, "error: %s: %s\n", video, err);
        goto done;
    }
    tubelet_shape ls;
    tubelet_state_logits_shape(s, &ls);
    const int64_t n_lab = ls.dim[1];
    pix = malloc(sizeof(float) * (size_t)T * 3 * oh * ow);
    logits = malloc(sizeof(float) * (size_t)tubelet_shape_numel(&ls));
    double *prob = malloc(sizeof(double) * (size_t)n_lab);
    int *best = malloc(sizeof(int) * (size_t)n_lab);
    if (!pix || !logits || !prob || !best) {
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
        int n_real, got = tubelet_video_stream_next(v, pix, &first, &n_real, err, sizeof err);
        if (got < 0) {
            free(prob), free(best);
            goto fail;
        }
        if (got == 0) break;
        if (tubelet_forward(s, pix, logits, NULL, err, sizeof err)) {
            fprintf(stderr, "error: %s: %s\n", video, err);
            free(prob), free(best);
            goto done;
        }
        /* softmax averaged over the logits rows (several for TimeSformer space_only) */
        tubelet_mean_softmax(logits, ls.dim[0], n_lab, prob);
        double t0, t1;
        cli_window_span(first, n_real, fstride, fps, &t0, &t1);
        int kk = cli_top_order(prob, n_lab, top, best);
        const char *lab = tubelet_model_label(m, best[0]);
        if (json) {
            printf("%s", n_windows ? ", " : "");
            cli_json_window(stdout, m, t0, t1, prob, best, kk);
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
    fprintf(stderr, "error: %s\n", err);
done:
    free(pix), free(logits);
    tubelet_state_free(s);
    tubelet_video_stream_close(v);
    tubelet_preprocessor_free(pc);
    tubelet_model_free(m);
    return rc;
}
