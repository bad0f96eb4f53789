/* tubelet: the command-line tool: its usage and the dispatch to the commands, one file per
 * command (cmd_*.c); what several commands share lives in the other files of src/cli/ (cli.h). */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

static void usage(FILE *f) {
    fprintf(f,
            "tubelet %s: video vision transformers (ViViT, TimeSformer, VideoMAE, Video Swin,\n"
            "X-CLIP) in C\n\n"
            "usage: tubelet <command> [options]   (tubelet help <command>, or tubelet <command>\n"
            "                                      --help, for its options)\n\n"
            "commands:\n",
            TUBELET_VERSION);
    for (const cli_command_summary *c = cli_commands; c->name; c++)
        fprintf(f, "  %-11s %s\n", c->name, c->summary);
}

/* OpenMP's idle threads spin before they sleep (libgomp: 300,000 turns). When other processes
 * share the cores, a spinning thread holds a core that the thread it waits for needs, and short
 * parallel regions run several times slower (docs/threads.md has the measurements). libgomp reads
 * OMP_WAIT_POLICY and GOMP_SPINCOUNT once, when it loads, before main: so, only when the user set
 * neither, the CLI sets tubelet's default and executes itself again, once. */
#define CLI_SPINCOUNT "1000"
static void cli_wait_policy(char **argv) {
    if (getenv("OMP_WAIT_POLICY") || getenv("GOMP_SPINCOUNT")) return;
    /* the binary's own path, not /proc/self/exe: the process keeps its name (ps, pkill) */
    char self[4096];
    const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0 || n >= (ssize_t)sizeof self - 1) return; /* no /proc: libgomp's default */
    self[n] = 0;
    if (setenv("GOMP_SPINCOUNT", CLI_SPINCOUNT, 1)) return;
    execv(self, argv);
    unsetenv("GOMP_SPINCOUNT"); /* not executable any more: run on with libgomp's default */
}

int main(int argc, char **argv) {
    cli_wait_policy(argv);
    if (argc < 2 || cli_is_help(argv[1]) || (!strcmp(argv[1], "help") && argc == 2)) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    char help_flag[] = "--help";
    if (!strcmp(argv[1], "help")) { /* `tubelet help CMD`, as git and cargo take it: CMD --help */
        char *args[] = {argv[0], argv[2], help_flag, NULL};
        return main(3, args);
    }
    if (!strcmp(argv[1], "--version")) {
        printf("tubelet %s\n", TUBELET_VERSION);
        return 0;
    }
    /* a file-size limit (ulimit -f) makes write() fail with EFBIG, reported like a full disk,
     * instead of killing the process in the middle of a file */
    signal(SIGXFSZ, SIG_IGN);
    if (!strcmp(argv[1], "run")) return cmd_run(argc - 1, argv + 1);
    if (!strcmp(argv[1], "info")) return cmd_info(argc - 1, argv + 1);
    if (!strcmp(argv[1], "bench")) return cmd_bench(argc - 1, argv + 1);
    if (!strcmp(argv[1], "classify")) return cmd_classify(argc - 1, argv + 1);
    if (!strcmp(argv[1], "preprocess")) return cmd_preprocess(argc - 1, argv + 1);
    if (!strcmp(argv[1], "features")) return cmd_features(argc - 1, argv + 1);
    if (!strcmp(argv[1], "timeline")) return cmd_timeline(argc - 1, argv + 1);
    if (!strcmp(argv[1], "watch")) return cmd_watch(argc - 1, argv + 1);
    if (!strcmp(argv[1], "synth")) return cmd_synth(argc - 1, argv + 1);
    if (!strcmp(argv[1], "grad")) return cmd_grad(argc - 1, argv + 1);
    if (!strcmp(argv[1], "init")) return cmd_init(argc - 1, argv + 1);
    if (!strcmp(argv[1], "train")) return cmd_train(argc - 1, argv + 1);
    if (!strcmp(argv[1], "pretrain")) return cmd_pretrain(argc - 1, argv + 1);
    if (!strcmp(argv[1], "reconstruct")) return cmd_reconstruct(argc - 1, argv + 1);
    if (!strcmp(argv[1], "serve")) return cmd_serve(argc - 1, argv + 1);
    if (!strcmp(argv[1], "convert")) return cmd_convert(argc - 1, argv + 1);
    if (!strcmp(argv[1], "tokenize")) return cmd_tokenize(argc - 1, argv + 1);
    if (!strcmp(argv[1], "calibrate")) return cmd_calibrate(argc - 1, argv + 1);
    fprintf(stderr, "error: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return 2;
}
