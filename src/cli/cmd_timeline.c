/* tubelet timeline: sliding-window classification over long videos, streaming: the memory held
 * is one window of frames (and the next video's first window, decoded ahead), whatever the
 * videos' length. Several videos run as classify's do (cli_each_opened: sharded under mpirun). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app.h"
#include "cli.h"
#include "tubelet_train.h"
#include "tubelet_video.h"

/* One video, opened on the driver's second thread: its stream, its window plan and its first
 * window, decoded. */
typedef struct {
    tubelet_video_stream *v;
    double fps, duration;
    int64_t n_frames, whole; /* whole: the window is longer than the video (run says so) */
    int fstride, hop, oh, ow;
    float *pix;              /* the next window to run, (T, 3, oh, ow) */
    int64_t first;
    int n_real, got;         /* got: 1 while pix holds a window, 0 after the last */
} video;

/* What the videos share: the options, the model, and the state, which follows the videos'
 * frame size. */
typedef struct {
    tubelet_model *m;
    const tubelet_preprocessor *pc;
    double window, stride;
    int T, decode_threads, top, json, csv;
    int several; /* more than one video given: each video's rows are labelled with it */
    tubelet_state *s;
    tubelet_shape ls;
    float *logits;
    double *prob;
    int *best;
    const float *text;   /* X-CLIP: the label set's text embeddings, computed once, */
    char **names;        /*   the labels' names and their number */
    int n_text;
    FILE *out; /* stdout, or this rank's share under mpirun */
} timeline;

static int open_video(void *user, const cli_video_list *l, int i, void **item, char *err,
                      size_t errlen) {
    const timeline *t = user;
    video *o = *item = calloc(1, sizeof(video));
    if (!o) return snprintf(err, errlen, "out of memory"), 1;
    if (tubelet_video_stream_open(&o->v, l->videos[i], t->pc, t->decode_threads, app_log, NULL,
                                  err, errlen))
        return 1;
    o->fps = tubelet_video_stream_fps(o->v) > 0 ? tubelet_video_stream_fps(o->v) : 25.0;
    o->duration = tubelet_video_stream_duration(o->v);
    o->n_frames = (int64_t)floor(o->duration * o->fps + 0.5);
    o->whole = tubelet_window_plan(t->window, t->stride, o->fps, t->T, o->n_frames, &o->fstride,
                               &o->hop);
    if (tubelet_video_stream_begin(o->v, t->T, o->fstride, o->hop, &o->oh, &o->ow, err, errlen))
        return 1;
    if (!(o->pix = malloc(sizeof(float) * (size_t)t->T * 3 * o->oh * o->ow)))
        return snprintf(err, errlen, "out of memory"), 1;
    o->got = tubelet_video_stream_next(o->v, o->pix, &o->first, &o->n_real, err, errlen);
    return o->got < 0;
}

static void close_video(void *item) {
    video *o = item;
    if (!o) return;
    tubelet_video_stream_close(o->v);
    free(o->pix), free(o);
}

/* A state for windows of oh x ow frames, and its buffers. */
static int ensure_state(timeline *t, int oh, int ow, char *err, size_t errlen) {
    if (t->s && tubelet_state_matches(t->s, 1, t->T, oh, ow)) return 0;
    tubelet_state_free(t->s), t->s = NULL;
    free(t->logits), free(t->prob), free(t->best);
    t->logits = NULL, t->prob = NULL, t->best = NULL;
    if (tubelet_state_new(&t->s, t->m, 1, t->T, oh, ow, err, errlen)) return 1;
    app_scores_shape(t->s, 1, t->n_text, &t->ls);
    t->logits = malloc(sizeof(float) * (size_t)tubelet_shape_numel(&t->ls));
    t->prob = malloc(sizeof(double) * (size_t)t->ls.dim[1]);
    t->best = malloc(sizeof(int) * (size_t)t->ls.dim[1]);
    if (!t->logits || !t->prob || !t->best) return snprintf(err, errlen, "out of memory"), 1;
    return 0;
}

/* Window n of a video, from t->logits, to f (several videos: a CSV row starts with its path). */
static void print_window(const timeline *t, FILE *f, const video *o, const char *path, int n) {
    /* softmax averaged over the logits rows (several for TimeSformer space_only) */
    tubelet_mean_softmax(t->logits, t->ls.dim[0], t->ls.dim[1], t->prob);
    double t0, t1;
    tubelet_window_span(o->first, o->n_real, o->fstride, o->fps, &t0, &t1);
    const int k = app_top_order(t->prob, t->ls.dim[1], t->top, t->best);
    const char *lab = t->names ? t->names[t->best[0]] : tubelet_model_label(t->m, t->best[0]);
    if (t->json) {
        fprintf(f, "%s", n ? ", " : "");
        app_json_window(f, t->m, (const char *const *)t->names, t0, t1, t->prob, t->best, k);
    } else if (t->csv) {
        if (t->several) cli_csv_string(f, path), fputc(',', f);
        fprintf(f, "%.3f,%.3f,", t0, t1);
        cli_csv_string(f, lab ? lab : "");
        fprintf(f, ",%.6f\n", t->prob[t->best[0]]);
    } else {
        fprintf(f, "%9.2f - %9.2f s  %6.2f%%  %s\n", t0, t1, 100 * t->prob[t->best[0]],
                lab ? lab : "?");
    }
}

/* Video i's windows to f: 0, or 1 with err set. One video: a JSON array of windows, or the CSV
 * with its header, or lines; several: JSON's {"video", "windows": [...]}, CSV rows that start
 * with the path (cmd_timeline prints the header), or the path's line, then the lines. */
static int run_windows(timeline *t, FILE *f, video *o, int i, const char *path, int *n,
                       char *err, size_t errlen) {
    if (t->json && t->several) {
        fprintf(f, "%s{\"video\": ", i ? ", " : "");
        app_json_string(f, path);
        fprintf(f, ", \"windows\": [");
    } else if (t->json) {
        fprintf(f, "[");
    } else if (t->csv && !t->several) {
        fprintf(f, "start,end,label,score\n");
    } else if (!t->csv && t->several) {
        fprintf(f, "%s%s\n", i ? "\n" : "", path);
    }
    for (*n = 0; o->got == 1; (*n)++) {
        if (app_scores(t->s, o->pix, t->text, t->n_text, t->logits, err, errlen)) return 1;
        print_window(t, f, o, path, *n);
        fflush(f);
        o->got = tubelet_video_stream_next(o->v, o->pix, &o->first, &o->n_real, err, errlen);
    }
    if (o->got < 0) return 1;
    if (t->json) fprintf(f, t->several ? "]}" : "]\n");
    return 0;
}

/* cli_each_opened's run: video i's windows, or its error (with several videos in the video's
 * place: JSON's {"video", "error"}; none of its rows). */
static int run_video(void *user, const cli_video_list *l, int i, void *item, const char *open_err) {
    timeline *t = user;
    video *o = item;
    const char *path = l->videos[i];
    char err[1024], *buf = NULL;
    size_t len = 0;
    int n = 0, rc = 1;
    cli_list_clear(l); /* its notes and rows follow at once */
    if (!o) {
        snprintf(err, sizeof err, "%s", open_err);
    } else if (!ensure_state(t, o->oh, o->ow, err, sizeof err)) {
        if (o->whole)
            fprintf(stderr, "warning: %s: the window (%.2f s, %d frames) is longer than the video "
                    "(%.2f s, %lld frames): one window over the whole video instead, %d frames "
                    "at stride %d%s\n", path, t->window > 0 ? t->window : t->T * 4 / o->fps, t->T,
                    o->duration, (long long)o->n_frames, t->T, o->fstride,
                    o->n_frames < t->T ? ", its last frame repeated" : "");
        cli_window_note(path, t->window, o->fps, t->T, o->fstride);
        fprintf(stderr, "%s: windows of %d frames at stride %d (%.2f s), every %d frame%s "
                "(%.2f s)\n", path, t->T, o->fstride, t->T * o->fstride / o->fps, o->hop,
                o->hop == 1 ? "" : "s", o->hop / o->fps);
        /* several videos: a video's rows are held until it ends, so one that fails leaves none */
        FILE *f = t->several ? open_memstream(&buf, &len) : t->out;
        if (!f) snprintf(err, sizeof err, "out of memory");
        else rc = run_windows(t, f, o, i, path, &n, err, sizeof err);
        if (f && f != t->out) fclose(f);
    }
    if (rc) { /* the message names the video */
        char msg[1100];
        snprintf(msg, sizeof msg, "%s%s%s", strstr(err, path) ? "" : path,
                 strstr(err, path) ? "" : ": ", err);
        fprintf(stderr, "error: %s\n", msg);
        if (t->json && t->several) {
            fprintf(t->out, "%s", i ? ", " : "");
            app_json_failed(t->out, path, msg);
        }
    } else {
        if (buf) fwrite(buf, 1, len, t->out);
        fprintf(stderr, "%s: %d window%s\n", path, n, n == 1 ? "" : "s");
    }
    free(buf);
    fflush(t->out);
    return rc;
}

int cmd_timeline(int argc, char **argv) {
    const char *dir = NULL, *prec_s = NULL, *list_path = NULL;
    const char *labels_arg = NULL, *labels_file = NULL, *tmpl = NULL;
    char **list_items = NULL, **labels = NULL;
    float *text = NULL;
    int n_list = 0, n_labels = 0;
    tubelet_dist *dist = NULL;
    int precision = 0, reference = 0, bad = 0, json = 0, csv = 0, threads = 0, top = 1,
        n_videos = 0;
    double window = 0, stride = 0;
    const char **videos = calloc((size_t)argc, sizeof(char *));
    if (!videos) return 1;
    const cli_option opts[] = {
        {"--model", CLI_STR, &dir, 0, 0, "DIR", "Hugging Face model directory"},
        {"--list", CLI_STR, &list_path, 0, 0, "FILE",
         "the videos, one path per line, after any given as arguments; under\n"
         "mpirun each rank takes a contiguous share and rank 0 prints every\n"
         "video's windows in the list's order (docs/distributed.md)"},
        {"--window", CLI_SECONDS, &window, 1e-3, 1e6, "S", "window length in seconds, e.g. 2 or 2s (default: num_frames\nframes at stride 4)"},
        {"--stride", CLI_SECONDS, &stride, 1e-3, 1e6, "S", "seconds between window starts (default: the window length)"},
        {"--top", CLI_INT, &top, 1, 100000, "K", "labels per window in --json (default 1)"},
        {"--json", CLI_FLAG, &json, 0, 0, NULL,
         "one JSON array of {start, end, top: [{label, score}]}; several videos:\n"
         "one array of {video, windows: [...]} or {video, error}"},
        {"--csv", CLI_FLAG, &csv, 0, 0, NULL,
         "start,end,label,score per window; several videos: video,start,..."},
        CLI_LABELS_OPTIONS(&labels_arg, &labels_file, &tmpl),
        CLI_THREADS_OPTION(&threads),
        CLI_DEVICE_OPTION,
        CLI_PRECISION_OPTION(&prec_s),
        {0}};
    const cli_command cmd = {
        "timeline",
        "timeline --model DIR VIDEO... --window S --stride S [--list FILE] [--top K]\n"
        "                        [--threads N] [--precision P] [--json | --csv]\n"
        "                        [--labels \"A,B,C\" | --labels-file FILE] [--template T]",
        "Classifies consecutive windows of each VIDEO: each window is S seconds long and is\n"
        "sampled to the model's num_frames frames at an even frame stride; windows start every\n"
        "--stride seconds (rounded to whole frames and to that frame stride). Frames are\n"
        "decoded once, in order, and memory does not grow with the video's length; the next\n"
        "video is opened, and its first window decoded, while the model runs. An X-CLIP model\n"
        "scores each window zero-shot against --labels (their text embeddings computed once;\n"
        "docs/zero-shot.md).\n",
        opts, videos, &n_videos, argc,
        "Several videos: the text form gives each video's path before its windows; a video\n"
        "that fails is reported on stderr with none of its windows (--json: {video, error}\n"
        "in its place), and the others still run. A failure makes the exit status 1.\n"};
    int pr = cli_parse(&cmd, argc, argv);
    if (pr >= 0) return free(videos), pr;
    if (list_path && (pr = cli_append_list(&videos, &n_videos, list_path, &list_items, &n_list)))
        return free(videos), app_free_lines(list_items, n_list), pr;
    if (json && csv) {
        fprintf(stderr, "error: --json and --csv exclude each other\n");
        bad = 1;
    }
    if (!bad && (!dir || !n_videos)) {
        fprintf(stderr, "error: tubelet timeline needs --model DIR and a video\n\n");
        cli_print_help(&cmd, stderr);
        bad = 1;
    }
    if (!bad && !cli_precision(prec_s, &precision, &reference)) bad = 1;
    if (!bad && cli_refuse_streams("timeline", videos, n_videos)) bad = 1;
    if (bad) return free(videos), app_free_lines(list_items, n_list), 2;
    if (cli_dist_join(&dist)) return free(videos), app_free_lines(list_items, n_list), 1;

    /* from here every exit goes through done: (tubelet_dist_finalize included) */
    tubelet_preprocessor *pc = NULL;
    timeline t = {.window = window, .stride = stride, .top = top, .json = json, .csv = csv,
                  .several = n_videos > 1, .out = stdout};
    char *out_buf = NULL, err[1024];
    size_t out_len = 0;
    int failed = 1, rank = 0;
    tubelet_model *m = t.m = cli_load_precision(dir, NULL, threads, precision, reference, 1);
    if (m) app_default_threads(m, threads);
    if (!m || cli_takes_video(m, dir) ||
        cli_zero_shot(m, dir, "timeline", labels_arg, labels_file, tmpl, &labels, &text,
                      &n_labels))
        goto done;
    t.text = text, t.names = labels, t.n_text = n_labels;
    if (tubelet_preprocessor_load(&pc, dir, app_log, NULL, err, sizeof err)) {
        fprintf(stderr, "error: %s\n", err);
        goto done;
    }
    tubelet_model_info mi;
    tubelet_model_get_info(m, &mi);
    t.pc = pc, t.T = mi.num_frames, t.decode_threads = tubelet_model_threads(m);
    /* under mpirun: this rank's output collected in memory */
    if (dist) {
        rank = tubelet_dist_rank(dist);
        if (!(t.out = open_memstream(&out_buf, &out_len))) {
            fprintf(stderr, "error: out of memory\n");
            goto done;
        }
    }
    if (t.several && rank == 0) fputs(json ? "[" : csv ? "video,start,end,label,score\n" : "", stdout);
    fflush(stdout);
    static const cli_video_ops ops = {open_video, run_video, close_video};
    cli_video_list list = {videos, n_videos, pc, NULL, t.T, 0, 0, 0, NULL};
    failed = cli_each_opened(&list, dist, &ops, &t);
    /* a sharded run: rank 0 prints every rank's windows in the list's order */
    if (dist && cli_dist_collect(dist, t.out, &out_buf, &out_len, &failed, err, sizeof err)) {
        fprintf(stderr, "error: %s\n", err);
        failed = 1;
    }
    if (t.several && json && rank == 0) printf("]\n");
done:
    free(t.logits), free(t.prob), free(t.best);
    tubelet_state_free(t.s);
    tubelet_model_free(m);
    tubelet_preprocessor_free(pc);
    if (t.out && t.out != stdout) fclose(t.out);
    free(out_buf), free(videos), free(text);
    app_free_lines(labels, n_labels);
    tubelet_dist_finalize(dist);
    app_free_lines(list_items, n_list);
    return failed ? 1 : 0;
}
