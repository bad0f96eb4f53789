/* tubelet synth: writes the procedural motion dataset (src/synth, docs/synth.md). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "synth/synth.h"

static void help(FILE *f) {
    tb_synth_dataset_params d = tb_synth_dataset_default_params();
    fprintf(f,
            "usage: tubelet synth -o DIR [--per-class N] [--frames T] [--size S] [--seed K]\n"
            "                     [--fps F] [--val PCT] [--codec h264|mjpeg] [--distractors N]\n"
            "                     [--noise X] [--threads N] [--force]\n\n"
            "Writes a deterministic procedural motion dataset: %d classes in opposite pairs\n"
            "(move right/left, down/up, rotate cw/ccw, grow/shrink, approach/recede, orbit\n"
            "cw/ccw) where each clip of one class is a clip of its pair played backwards, so no\n"
            "single frame and no unordered set of frames tells the pair apart; only the order\n"
            "does. Random shapes, colours, sizes, paths, speeds, textured backgrounds, 1-3\n"
            "distractors, per-pixel noise and flicker. Layout:\n"
            "  DIR/videos/{train,val}/<class>_<n>.mp4   DIR/train.csv, DIR/val.csv (path,label)\n"
            "  DIR/labels.txt (class names)             DIR/synth.json (the options used)\n"
            "Same options -> byte-identical files. DIR must be new, empty or an earlier synth\n"
            "output (it has synth.json), unless --force. See docs/synth.md.\n\n"
            "  -o DIR            output directory (created)\n"
            "  --per-class N     clips per class (default %d)\n"
            "  --val PCT         share of each class in val.csv, %% (default %d)\n"
            "  --frames T        frames per clip, 4..256 (default %d)\n"
            "  --size S          frame side in pixels, even, 16..512 (default %d)\n"
            "  --seed K          dataset seed, 0..2^64-1 (default %llu)\n"
            "  --fps F           frame rate written in the files (default %d)\n"
            "  --codec C         h264 (libx264, .mp4; default) or mjpeg (.avi)\n"
            "  --distractors N   at most N distractor objects per clip, 0..3 (default %d)\n"
            "  --noise X         noise and flicker scale, 0..4 (default %g)\n"
            "  --threads N       clips encoded in parallel (default: all cores)\n"
            "  --force           write into a non-empty directory that is not synth output\n",
            TB_SYNTH_N_CLASSES, d.per_class, d.val_percent, d.clip.frames, d.clip.size,
            (unsigned long long)d.seed, d.fps, d.clip.max_distractors, (double)d.clip.noise);
}

typedef struct {
    int tty, last;
    double t0;
} progress_t;

static void progress(void *user, int done, int total) {
    progress_t *p = user;
    if (!p->tty) return;
    int pct = (int)((int64_t)done * 100 / total);
    if (pct == p->last && done != total) return;
    p->last = pct;
    char bar[31];
    int fill = pct * 30 / 100;
    for (int i = 0; i < 30; i++) bar[i] = i < fill ? '#' : '.';
    bar[30] = 0;
    fprintf(stderr, "\rsynth [%s] %3d%% %d/%d clips, %.1f s", bar, pct, done, total,
            cli_now() - p->t0);
    if (done == total) fputc('\n', stderr);
    fflush(stderr);
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
    const char *dir = NULL, *s_per = NULL, *s_frames = NULL, *s_size = NULL, *s_seed = NULL,
               *s_fps = NULL, *s_val = NULL, *s_codec = NULL, *s_dis = NULL, *s_noise = NULL,
               *s_threads = NULL;
    int force = 0, bad = 0;
    for (int i = 1; i < argc && !bad; i++) {
        if (cli_is_help(argv[i])) return help(stdout), 0;
        if (cli_flag(argv, i, "--force")) {
            force = 1;
            continue;
        }
        if (cli_opt(argc, argv, &i, "-o", &dir, &bad) ||
            cli_opt(argc, argv, &i, "--per-class", &s_per, &bad) ||
            cli_opt(argc, argv, &i, "--frames", &s_frames, &bad) ||
            cli_opt(argc, argv, &i, "--size", &s_size, &bad) ||
            cli_opt(argc, argv, &i, "--seed", &s_seed, &bad) ||
            cli_opt(argc, argv, &i, "--fps", &s_fps, &bad) ||
            cli_opt(argc, argv, &i, "--val", &s_val, &bad) ||
            cli_opt(argc, argv, &i, "--codec", &s_codec, &bad) ||
            cli_opt(argc, argv, &i, "--distractors", &s_dis, &bad) ||
            cli_opt(argc, argv, &i, "--noise", &s_noise, &bad) ||
            cli_opt(argc, argv, &i, "--threads", &s_threads, &bad))
            continue;
        if (argv[i][0] == '-' && argv[i][1])
            fprintf(stderr, "error: unknown option '%s' (see tubelet synth --help)\n", argv[i]);
        else
            fprintf(stderr, "error: unexpected argument '%s' (the directory goes after -o)\n",
                    argv[i]);
        return 2;
    }
    if (bad) return 2;
    if (!dir || !dir[0]) {
        fprintf(stderr, "error: tubelet synth needs -o DIR\n\n");
        help(stderr);
        return 2;
    }
    tb_synth_dataset_params p = tb_synth_dataset_default_params();
    p.dir = dir;
    p.force = force;
    double noise = p.clip.noise;
    if ((s_per && !cli_int(s_per, "--per-class", 1, 100000, &p.per_class)) ||
        (s_frames && !cli_int(s_frames, "--frames", 4, 256, &p.clip.frames)) ||
        (s_size && !cli_int(s_size, "--size", 16, 512, &p.clip.size)) ||
        (s_fps && !cli_int(s_fps, "--fps", 1, 120, &p.fps)) ||
        (s_val && !cli_int(s_val, "--val", 0, 100, &p.val_percent)) ||
        (s_dis && !cli_int(s_dis, "--distractors", 0, 3, &p.clip.max_distractors)) ||
        (s_noise && !cli_double(s_noise, "--noise", 0, 4, &noise)) ||
        (s_threads && !cli_int(s_threads, "--threads", 1, 1024, &p.n_threads)) ||
        (s_seed && !parse_seed(s_seed, &p.seed)))
        return 2;
    p.clip.noise = (float)noise;
    if (p.clip.size % 2) {
        fprintf(stderr, "error: --size must be even, got %d\n", p.clip.size);
        return 2;
    }
    if (s_codec) {
        int c = tb_synth_codec_from_name(s_codec);
        if (c < 0) {
            fprintf(stderr, "error: --codec must be h264 or mjpeg, got '%s'\n", s_codec);
            return 2;
        }
        p.codec = (tb_synth_codec)c;
    }
    progress_t pr = {isatty(2), -1, cli_now()};
    p.progress = progress;
    p.progress_user = &pr;
    tb_synth_summary sum;
    tb_err e = {{0}};
    int rc = tb_synth_write_dataset(&p, &sum, &e);
    if (rc) {
        if (pr.tty && pr.last >= 0) fputc('\n', stderr);
        fprintf(stderr, "error: %s\n", e.msg);
        return 1;
    }
    double secs = cli_now() - pr.t0;
    printf("%s: %d classes, %d train + %d val clips of %d frames %dx%d (%s), "
           "%.2f MB of video, %.1f s\n",
           dir, TB_SYNTH_N_CLASSES, sum.n_train, sum.n_val, p.clip.frames, p.clip.size,
           p.clip.size, tb_synth_codec_name(p.codec), sum.video_bytes / 1e6, secs);
    return 0;
}
