/* tubelet watch: sliding-window classification of a live source (a file, stdin, a network
 * stream, a camera) as it arrives, one JSON line per window, with a lag that never grows
 * (docs/watch.md). The decoding, the ring of frames and the dropping of windows the model is too
 * slow for are the library's (tubelet_live_*); this is the model loop and the output. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

#include "app.h"
#include "cli.h"
#include "tubelet_video.h"

static tubelet_live *volatile g_live;
static volatile sig_atomic_t g_stop;

static void on_signal(int sig) {
    (void)sig;
    g_stop = 1;
    tubelet_live_stop(g_live);   /* an atomic store: safe here */
}

static double wall_now(void) {
    struct timeval t;
    gettimeofday(&t, NULL);
    return t.tv_sec + t.tv_usec * 1e-6;
}

/* Sleeps ms milliseconds unless a signal stops the command (--model-delay-ms). */
static void delay_ms(int ms) {
    for (double end = app_now() + ms / 1000.0; !g_stop && app_now() < end;) {
        struct timespec ts = {0, 10 * 1000000L};
        nanosleep(&ts, NULL);
    }
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int cmd_watch(int argc, char **argv) {
    const char *dir = NULL, *source = NULL, *prec_s = NULL;
    const char *labels_arg = NULL, *labels_file = NULL, *tmpl = NULL;
    int precision = 0, reference = 0, threads = 0, top = 5, smooth = 1, n_src = 0;
    int reconnect = 0, tries = 0, realtime = 0, model_delay = 0;
    double window = 2, stride = 0.5, timeout = 10;
    const cli_option opts[] = {
        {"--model", CLI_STR, &dir, 0, 0, "DIR", "Hugging Face model directory (or checkpoint file)"},
        {"--window", CLI_SECONDS, &window, 1e-3, 1e6, "S", "window length in seconds, e.g. 2 or 2s (default 2)"},
        {"--stride", CLI_SECONDS, &stride, 1e-3, 1e6, "S", "seconds between window starts (default 0.5)"},
        {"--smooth", CLI_INT, &smooth, 1, 10000, "K", "report the mean probabilities of the last K windows\n(default 1: none)"},
        {"--top", CLI_INT, &top, 1, 100000, "K", "labels per window (default 5)"},
        {"--realtime", CLI_FLAG, &realtime, 0, 0, NULL, "read a file at its frame rate, as a live source\n(default: as fast as the model goes, no window skipped)"},
        {"--reconnect", CLI_FLAG, &reconnect, 0, 0, NULL, "reopen a network source that drops, with backoff\n(0.25 s doubling to 5 s between attempts)"},
        {"--reconnect-tries", CLI_INT, &tries, 0, 1000000, "N", "give up after N failed attempts in a row (default 0:\nnever)"},
        {"--timeout", CLI_SECONDS, &timeout, 0, 1e6, "S", "a network source that sends nothing for S seconds has\ndropped (default 10; 0: wait for ever)"},
        CLI_LABELS_OPTIONS(&labels_arg, &labels_file, &tmpl),
        CLI_THREADS_OPTION(&threads),
        CLI_PRECISION_OPTION(&prec_s),
        {"--model-delay-ms", CLI_INT, &model_delay, 0, 600000, "MS", "for testing: sleep MS after each forward pass, as a\nslower model would"},
        {0}};
    const cli_command cmd = {
        "watch",
        "watch SOURCE --model DIR [--window S] [--stride S] [--smooth K] [--top K]\n"
        "                     [--realtime] [--reconnect] [--timeout S] [--threads N] [--precision P]\n"
        "                     [--labels \"A,B,C\" | --labels-file FILE] [--template T]",
        "Classifies a live SOURCE window by window as it arrives, one JSON line per window on\n"
        "stdout: {\"t0\", \"t1\", \"wall\", \"lag_ms\", \"skipped\", \"top\": [{\"label\", \"score\"}]}.\n"
        "Windows are sampled as in `tubelet timeline`: a file gives timeline's windows. When the\n"
        "model is slower than the stream, windows are skipped (counted in \"skipped\") and the lag\n"
        "does not grow. SOURCE: a file, - (stdin, e.g. ffmpeg ... -f mpegts - | tubelet watch -),\n"
        "rtsp://, rtmp://, http://, https://, udp://, tcp://, srt:// or v4l2:/dev/videoN.\n"
        "Ends at the end of the stream or on SIGINT/SIGTERM (exit 0). An X-CLIP model scores\n"
        "each window zero-shot against --labels (docs/zero-shot.md). docs/watch.md has more.\n",
        opts, &source, &n_src, 1, NULL};
    int pr = cli_parse(&cmd, argc, argv);
    if (pr >= 0) return pr;
    if (!dir || !source) {
        fprintf(stderr, "error: tubelet watch needs --model DIR and a SOURCE\n\n");
        cli_print_help(&cmd, stderr);
        return 2;
    }
    if (!cli_precision(prec_s, &precision, &reference)) return 2;

    char err[1024];
    tubelet_live_params lp = tubelet_live_default_params();
    lp.threads = threads, lp.realtime = realtime, lp.reconnect = reconnect;
    lp.reconnect_tries = tries, lp.timeout = timeout, lp.log = app_log;
    tubelet_live *live = NULL;
    if (tubelet_live_new(&live, source, &lp, err, sizeof err)) {
        fprintf(stderr, "error: %s\n", err);
        return 1;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;   /* no SA_RESTART: a blocked read returns EINTR */
    sigemptyset(&sa.sa_mask);
    g_live = live;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);

    tubelet_model *m = NULL;
    tubelet_preprocessor *pc = NULL;
    tubelet_state *s = NULL;
    float *pix = NULL, *logits = NULL;
    double *prob = NULL, *hist = NULL, *mean = NULL, *lags = NULL;
    char **labels = NULL;
    float *text = NULL;
    int *order = NULL, rc = 1, n_labels = 0;
    int64_t n_windows = 0, n_skipped = 0, lag_cap = 0;
    if ((m = cli_load_precision(dir, NULL, threads, precision, reference, 1)))
        app_default_threads(m, threads);
    if (!m || cli_zero_shot(m, dir, "watch", labels_arg, labels_file, tmpl, &labels, &text, &n_labels))
        goto done;
    if (tubelet_preprocessor_load(&pc, dir, app_log, NULL, err, sizeof err)) goto fail;
    if (tubelet_live_connect(live, err, sizeof err)) {
        if (g_stop) rc = 0;
        else goto fail;
        goto done;
    }
    tubelet_model_info mi;
    tubelet_model_get_info(m, &mi);
    const int T = mi.num_frames;
    double fps = tubelet_live_fps(live);
    if (!(fps > 0)) {
        fprintf(stderr, "warning: %s does not say its frame rate; taking 25 fps\n", source);
        fps = 25;
    }
    int fstride, hop, oh, ow;
    tubelet_window_plan(window, stride, fps, T, 0, &fstride, &hop);
    cli_window_note(source, window, fps, T, fstride);
    /* warm-up before the decoder starts: the first pass (oneDNN's kernels made, the weights
     * paged in) takes several times a later one, and windows that come meanwhile are skipped
     * (the mailbox keeps the newest); a live source buffers until then. At the model's size,
     * which the preprocessor's crop normally is: the real state follows the stream's. */
    if (tubelet_state_new(&s, m, 1, T, mi.image_height, mi.image_width, err, sizeof err) == 0) {
        float *zero = calloc((size_t)T * 3 * mi.image_height * mi.image_width, sizeof(float));
        tubelet_shape ws;
        app_scores_shape(s, 1, n_labels, &ws);
        float *wl = malloc(sizeof(float) * (size_t)tubelet_shape_numel(&ws));
        if (zero && wl) (void)app_scores(s, zero, text, n_labels, wl, err, sizeof err);
        free(zero), free(wl);
        tubelet_state_free(s);
        s = NULL;
    }
    if (tubelet_live_start(live, pc, T, fstride, hop, &oh, &ow, err, sizeof err)) goto fail;
    if (tubelet_state_new(&s, m, 1, T, oh, ow, err, sizeof err)) goto fail;
    tubelet_shape ls;
    app_scores_shape(s, 1, n_labels, &ls);
    const int64_t n_lab = ls.dim[1];
    pix = malloc(sizeof(float) * (size_t)T * 3 * oh * ow);
    logits = malloc(sizeof(float) * (size_t)tubelet_shape_numel(&ls));
    prob = malloc(sizeof(double) * (size_t)n_lab);
    mean = malloc(sizeof(double) * (size_t)n_lab);
    hist = malloc(sizeof(double) * (size_t)n_lab * smooth);
    order = malloc(sizeof(int) * (size_t)n_lab);
    if (!pix || !logits || !prob || !mean || !hist || !order) {
        snprintf(err, sizeof err, "out of memory");
        goto fail;
    }
    fprintf(stderr, "%s: %.2f fps; windows of %d frames at stride %d (%.2f s), every %d frame%s "
            "(%.2f s)%s\n", source, fps, T, fstride, T * fstride / fps, hop, hop == 1 ? "" : "s",
            hop / fps,
            tubelet_live_is_file(live) ? "; a file: as fast as the model goes" : "");
    int n_hist = 0;
    for (;;) {
        tubelet_live_item it;
        int got = tubelet_live_next(live, pix, &it, err, sizeof err);
        if (got < 0) goto fail;
        if (got == 0) break;
        if (it.kind != TUBELET_LIVE_WINDOW) {
            const int back = it.kind == TUBELET_LIVE_RECONNECTED;
            printf("{\"event\": \"%s\", \"wall\": %.3f", back ? "reconnected" : "disconnected",
                   wall_now());
            if (back) printf(", \"attempts\": %d, \"down_s\": %.3f", it.attempts, it.down);
            printf(", \"message\": ");
            app_json_string(stdout, it.message);
            printf("}\n");
            fflush(stdout);
            n_hist = 0;   /* smoothing starts again with the new connection */
            continue;
        }
        if (app_scores(s, pix, text, n_labels, logits, err, sizeof err)) goto fail;
        if (model_delay) delay_ms(model_delay);
        tubelet_mean_softmax(logits, ls.dim[0], n_lab, prob);
        /* the mean over the last `smooth` windows: hist is a ring of their probabilities */
        memcpy(hist + (size_t)(n_hist % smooth) * n_lab, prob, sizeof(double) * (size_t)n_lab);
        n_hist++;
        int have = n_hist < smooth ? n_hist : smooth;
        for (int64_t k = 0; k < n_lab; k++) {
            double a = 0;
            for (int h = 0; h < have; h++) a += hist[(size_t)h * n_lab + k];
            mean[k] = a / have;
        }
        double t0, t1;
        tubelet_window_span(it.first, it.n_real, fstride, fps, &t0, &t1);
        int kk = app_top_order(mean, n_lab, top, order);
        double lag = (app_now() - it.arrival) * 1000;
        printf("{\"t0\": %.3f, \"t1\": %.3f, \"wall\": %.3f, \"lag_ms\": %.1f, \"skipped\": %lld, "
               "\"top\": ", t0, t1, wall_now(), lag, (long long)it.skipped);
        app_json_top(stdout, m, (const char *const *)labels, mean, order, kk);
        printf("}\n");
        fflush(stdout);
        if (n_windows == lag_cap) {
            double *g = realloc(lags, sizeof(double) * (size_t)(lag_cap = lag_cap ? 2 * lag_cap : 256));
            if (!g) {
                snprintf(err, sizeof err, "out of memory");
                goto fail;
            }
            lags = g;
        }
        lags[n_windows++] = lag;
        n_skipped += it.skipped;
    }
    if (n_windows) {
        qsort(lags, (size_t)n_windows, sizeof *lags, cmp_double);
        fprintf(stderr, "%s: %lld window%s, %lld skipped; lag p50 %.1f ms, p99 %.1f ms, max %.1f ms\n",
                source, (long long)n_windows, n_windows == 1 ? "" : "s", (long long)n_skipped, lags[n_windows / 2],
                lags[(n_windows * 99) / 100], lags[n_windows - 1]);
    } else {
        fprintf(stderr, "%s: no window\n", source);
    }
    rc = 0;
    goto done;
fail:
    fprintf(stderr, "error: %s\n", err);
done:
    g_live = NULL;
    tubelet_live_close(live);
    free(pix), free(logits), free(prob), free(mean), free(hist), free(order), free(lags);
    free(text), app_free_lines(labels, n_labels);
    tubelet_state_free(s);
    tubelet_preprocessor_free(pc);
    tubelet_model_free(m);
    return rc;
}
