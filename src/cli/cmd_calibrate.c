/* tubelet calibrate: int8 activation scales from a few clips (static int8, docs/precision.md). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "app.h"
#include "cli.h"
#include "tubelet_pretrain.h"
#include "tubelet_video.h"

int cmd_calibrate(int argc, char **argv) {
    const char *dir = NULL, *list_path = NULL;
    char **list_items = NULL;
    int n_list = 0, threads = 0, n_videos = 0;
    double percentile = 100;
    tubelet_views_params o = tubelet_views_default_params();
    o.log = app_log;
    const char **videos = calloc((size_t)argc, sizeof(char *));
    if (!videos) return 1;
    const cli_option opts[] = {
        {"--model", CLI_STR, &dir, 0, 0, "DIR",
         "Hugging Face model directory: int8_scales.json is written there"},
        {"--list", CLI_STR, &list_path, 0, 0, "FILE",
         "the videos, one path per line, after any given as arguments"},
        {"--clips", CLI_INT, &o.clips, 1, 100, "N",
         "clips taken from each video, as classify's temporal views (default 1);\n"
         "each is one sample of the estimator"},
        {"--percentile", CLI_REAL, &percentile, 50, 100, "P",
         "100 (default): the min and max over every clip; below: the mean over\n"
         "the clips of each clip's (100 - P)-th and P-th percentiles (NNCF's\n"
         "quantile estimator: 99.99)"},
        CLI_THREADS_OPTION(&threads),
        {0}};
    const cli_command cmd = {
        "calibrate",
        "calibrate --model DIR VIDEO... [--clips N] [--percentile P] [--threads N]",
        "Runs the fp32 model over the videos' clips (preprocessed as classify does) and\n"
        "records the input range of every linear layer over them (min and max, or\n"
        "percentiles, as OpenVINO's NNCF estimates them).\n"
        "Writes DIR/int8_scales.json; `--precision int8` then quantises each layer's\n"
        "activations with those fixed scales (static int8) instead of measuring every call.\n",
        opts, videos, &n_videos, argc,
        "Nothing is written unless every clip ran; the file replaces an older one whole.\n"};
    int pr = cli_parse(&cmd, argc, argv);
    if (pr >= 0) return free(videos), pr;
    if (list_path && (pr = cli_append_list(&videos, &n_videos, list_path, &list_items, &n_list)))
        return free(videos), app_free_lines(list_items, n_list), pr;
    if (!dir || !n_videos) {
        fprintf(stderr, "error: tubelet calibrate needs --model DIR and at least one video\n\n");
        cli_print_help(&cmd, stderr);
        return free(videos), app_free_lines(list_items, n_list), 2;
    }
    int failed = 1;
    tubelet_model *m = NULL;
    tubelet_preprocessor *pc = NULL;
    tubelet_calib *c = NULL;
    tubelet_state *s = NULL;
    char err[1024];
    if (tubelet_checkpoint_is_file(dir)) {
        fprintf(stderr, "error: %s is a checkpoint file; int8_scales.json belongs in a model "
                "directory: convert it first (tubelet convert) and calibrate that\n", dir);
        goto done;
    }
    if (access(dir, W_OK) != 0) { /* before the clips run, not after */
        fprintf(stderr, "error: %s: cannot write int8_scales.json there: %s\n", dir,
                strerror(errno));
        goto done;
    }
    if (!(m = cli_load_precision(dir, NULL, threads, TUBELET_PRECISION_FP32, 0, 1))) goto done;
    if (tubelet_model_is_pretraining(m)) {
        fprintf(stderr, "error: %s is a VideoMAEForPreTraining checkpoint: it has no classifier "
                "to calibrate for; fine-tune it first\n", dir);
        goto done;
    }
    if (cli_takes_video(m, dir) || cli_own_labels(m, dir, "calibrate")) goto done;
    if (tubelet_preprocessor_load(&pc, dir, app_log, NULL, err, sizeof err) ||
        tubelet_calib_new(&c, m, percentile, err, sizeof err)) {
        fprintf(stderr, "error: %s\n", err);
        goto done;
    }
    o.threads = tubelet_model_threads(m);
    tubelet_model_info mi;
    tubelet_model_get_info(m, &mi);
    cli_bar bar;
    cli_progress_init(&bar);
    int clips = 0, rc = 0;
    for (int i = 0; i < n_videos && !rc; i++) {
        tubelet_views v;
        if ((rc = tubelet_views_load(&v, videos[i], pc, &o, mi.num_frames, err, sizeof err)))
            break;
        const size_t view = (size_t)v.T * v.C * v.H * v.W;
        for (int k = 0; k < v.n_views && !rc; k++) {
            if (!s || !tubelet_state_matches(s, 1, v.T, v.H, v.W)) {
                tubelet_state_free(s);
                s = NULL;
                rc = tubelet_state_new(&s, m, 1, v.T, v.H, v.W, err, sizeof err);
            }
            if (!rc) rc = tubelet_calib_observe(c, s, v.pixels + k * view, err, sizeof err);
            if (!rc) clips++;
        }
        tubelet_views_free(&v);
        if (!rc) cli_progress(&bar, i + 1, n_videos, "calibrate %d/%d videos, %d clips", i + 1,
                              n_videos, clips);
    }
    if (!rc) rc = tubelet_calib_write(c, dir, err, sizeof err);
    if (rc) {
        cli_progress_end(&bar);
        fprintf(stderr, "error: %s\nnote: %s/int8_scales.json not written\n", err, dir);
        goto done;
    }
    printf("%s/int8_scales.json: the activation scales of %d linear layers from %d clips\n", dir,
           tubelet_calib_n_layers(c), clips);
    failed = 0;
done:
    tubelet_state_free(s);
    tubelet_calib_free(c);
    tubelet_preprocessor_free(pc);
    tubelet_model_free(m);
    free(videos);
    app_free_lines(list_items, n_list);
    return failed;
}
