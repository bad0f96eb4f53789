/* tubelet synth: writes the procedural motion dataset (src/synth, docs/synth.md). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "app.h"
#include "cli.h"
#include "tubelet_synth.h"

typedef struct {
    cli_bar bar;
    double t0;
} progress_t;

static void progress(void *user, int done, int total) {
    progress_t *p = user;
    int pct = (int)((int64_t)done * 100 / total);
    char bar[31];
    int fill = pct * 30 / 100;
    for (int i = 0; i < 30; i++) bar[i] = i < fill ? '#' : '.';
    bar[30] = 0;
    cli_progress(&p->bar, done, total, "synth [%s] %3d%% %d/%d clips, %.1f s", bar, pct, done,
                 total, app_now() - p->t0);
}

static int parse_seed(const char *s, uint64_t *out) {
    char *end;
    errno = 0;
    if (!s[0] || s[0] == '-' || s[0] == '+') goto bad;
    unsigned long long v = strtoull(s, &end, 0);
    if (errno || *end) goto bad;
    *out = (uint64_t)v;
    return 1;
bad:
    fprintf(stderr, "error: --seed must be an integer in [0, 2^64-1], got '%s'\n", s);
    return 0;
}

int cmd_synth(int argc, char **argv) {
    tubelet_synth_params p = tubelet_synth_default_params();
    const char *dir = NULL, *s_seed = NULL, *s_codec = NULL;
    int force = 0;
    double noise = p.noise;
    char h[8][96]; /* help lines that state the defaults */
    snprintf(h[0], sizeof h[0], "clips per class (default %d)", p.per_class);
    snprintf(h[1], sizeof h[1], "share of each class in val.csv, %% (default %d)", p.val_percent);
    snprintf(h[2], sizeof h[2], "frames per clip, 4..256 (default %d)", p.frames);
    snprintf(h[3], sizeof h[3], "frame side in pixels, even, 16..512 (default %d)", p.size);
    snprintf(h[4], sizeof h[4], "dataset seed, 0..2^64-1 (default %llu)", (unsigned long long)p.seed);
    snprintf(h[5], sizeof h[5], "frame rate written in the files (default %d)", p.fps);
    snprintf(h[6], sizeof h[6], "at most N distractor objects per clip, 0..3 (default %d)", p.max_distractors);
    snprintf(h[7], sizeof h[7], "noise and flicker scale, 0..4 (default %g)", (double)p.noise);
    const cli_option opts[] = {
        {"-o", CLI_STR, &dir, 0, 0, "DIR", "output directory (created)"},
        {"--per-class", CLI_INT, &p.per_class, 1, 100000, "N", h[0]},
        {"--val", CLI_INT, &p.val_percent, 0, 100, "PCT", h[1]},
        {"--frames", CLI_INT, &p.frames, 4, 256, "T", h[2]},
        {"--size", CLI_INT, &p.size, 16, 512, "S", h[3]},
        {"--seed", CLI_STR, &s_seed, 0, 0, "K", h[4]},
        {"--fps", CLI_INT, &p.fps, 1, 120, "F", h[5]},
        {"--codec", CLI_STR, &s_codec, 0, 0, "C", "h264 (libx264, .mp4; default) or mjpeg (.avi)"},
        {"--distractors", CLI_INT, &p.max_distractors, 0, 3, "N", h[6]},
        {"--noise", CLI_REAL, &noise, 0, 4, "X", h[7]},
        {"--threads", CLI_INT, &p.n_threads, 1, 1024, "N", "clips encoded in parallel (default: all cores)"},
        {"--force", CLI_FLAG, &force, 0, 0, NULL, "write into a non-empty directory that is not synth output"},
        {0}};
    char about[1200];
    snprintf(about, sizeof about,
             "Writes a deterministic procedural motion dataset: %d classes in opposite pairs\n"
             "(move right/left, down/up, rotate cw/ccw, grow/shrink, approach/recede, orbit\n"
             "cw/ccw) where each clip of one class is a clip of its pair played backwards, so no\n"
             "single frame and no unordered set of frames tells the pair apart; only the order\n"
             "does. Random shapes, colours, sizes, paths, speeds, textured backgrounds, 1-3\n"
             "distractors, per-pixel noise and flicker. Layout:\n"
             "  DIR/videos/{train,val}/<class>_<n>.mp4   DIR/train.csv, DIR/val.csv (path,label)\n"
             "  DIR/labels.txt (class names)             DIR/synth.json (the options used)\n"
             "Same options -> byte-identical files. DIR must be new, empty or an earlier synth\n"
             "output (it has synth.json), unless --force. A new DIR is written beside it under a\n"
             "temporary name and renamed into place when complete. See docs/synth.md.\n",
             tubelet_synth_n_classes());
    const cli_command cmd = {
        "synth",
        "synth -o DIR [--per-class N] [--frames T] [--size S] [--seed K]\n"
        "                     [--fps F] [--val PCT] [--codec h264|mjpeg] [--distractors N]\n"
        "                     [--noise X] [--threads N] [--force]",
        about, opts, NULL, NULL, 0, NULL};
    int parsed = cli_parse(&cmd, argc, argv);
    if (parsed >= 0) return parsed;
    if (!dir || !dir[0]) {
        fprintf(stderr, "error: tubelet synth needs -o DIR\n\n");
        cli_print_help(&cmd, stderr);
        return 2;
    }
    p.dir = dir;
    p.force = force;
    if (s_seed && !parse_seed(s_seed, &p.seed)) return 2;
    p.noise = (float)noise;
    if (p.size % 2) {
        fprintf(stderr, "error: --size must be even, got %d\n", p.size);
        return 2;
    }
    if (s_codec) {
        if (!tubelet_synth_codec_valid(s_codec)) {
            fprintf(stderr, "error: --codec must be h264 or mjpeg, got '%s'\n", s_codec);
            return 2;
        }
        p.codec = s_codec;
    }
    progress_t pr = {.t0 = app_now()};
    cli_progress_init(&pr.bar);
    p.progress = progress;
    p.progress_user = &pr;
    tubelet_synth_summary sum;
    char err[1024];
    int rc = tubelet_synth_write(&p, &sum, err, sizeof err);
    if (rc) {
        cli_progress_end(&pr.bar);
        fprintf(stderr, "error: %s\n", err);
        return 1;
    }
    double secs = app_now() - pr.t0;
    printf("%s: %d classes, %d train + %d val clips of %d frames %dx%d (%s), "
           "%.2f MB of video, %.1f s\n",
           dir, tubelet_synth_n_classes(), sum.n_train, sum.n_val, p.frames, p.size,
           p.size, p.codec, sum.video_bytes / 1e6, secs);
    return 0;
}
