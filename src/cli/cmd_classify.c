/* tubelet classify: video files → labels with probabilities. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "tubelet_video.h"

static void help(FILE *f) {
    fprintf(f,
            "usage: tubelet classify --model DIR VIDEO... [--top K] [--sampling MODE] [--stride S]\n"
            "                        [--clips N] [--crops 1|3] [--threads N] [--json]\n\n"
            "Decodes each video, samples and preprocesses its frames as the model directory's\n"
            "preprocessor_config.json says, runs the model and prints the top labels (config.json\n"
            "id2label) with probabilities. With several views (clips x crops) the softmax\n"
            "probabilities are averaged, as the papers evaluate.\n\n"
            "  --model DIR      Hugging Face model directory\n"
            "  --top K          labels to print (default 5)\n"
            "  --sampling MODE  hf (default: what the Hugging Face pipeline takes, frame i*F/T),\n"
            "                   uniform (segment centres), clip (a strided clip, centred),\n"
            "                   hf-rate (the pipeline's older frames 0, r, 2r, ...)\n"
            "  --stride S       frame stride for clip (default 4) / rate for hf-rate (default 1)\n"
            "  --clips N        temporal views (default 1)\n"
            "  --crops 1|3      spatial views: centre, or left/centre/right (default 1)\n"
            "  --threads N      threads (default: all cores)\n"
            CLI_PRECISION_HELP
            "  --json           one JSON array: {\"video\", \"top\": [{\"label\", \"score\"}]} or\n"
            "                   {\"video\", \"error\"} per video, in the order given\n"
            "A video that fails is reported and the others still run; the exit status is then 1.\n");
}

typedef struct {
    const char *path;
    const tubelet_preprocessor *pc;
    const tubelet_views_params *opts;
    int model_frames;
    tubelet_views v;
    int rc;
    char err[1024];
} job;

static void *load_job(void *arg) {
    job *j = arg;
    j->rc = tubelet_views_load(&j->v, j->path, j->pc, j->opts, j->model_frames, j->err, sizeof j->err);
    return NULL;
}

/* Mean over rows of softmax(logits row). */
int cmd_classify(int argc, char **argv) {
    const char *dir = NULL, *th = NULL, *top_s = NULL, *clips_s = NULL, *crops_s = NULL,
               *stride_s = NULL;
    const char *prec_s = NULL;
    int precision = 0, reference = 0;
    tubelet_views_params o = tubelet_views_default_params();
    o.log = cli_log;
    int bad = 0, json = 0, threads = 0, top = 5, n_videos = 0;
    const char **videos = calloc((size_t)argc, sizeof(char *));
    if (!videos) return 1;
    for (int i = 1; i < argc && !bad; i++) {
        if (cli_is_help(argv[i])) return free(videos), help(stdout), 0;
        if (cli_flag(argv, i, "--json")) json = 1;
        else if (cli_opt(argc, argv, &i, "--model", &dir, &bad) ||
                 cli_opt(argc, argv, &i, "--threads", &th, &bad) ||
            cli_opt(argc, argv, &i, "--precision", &prec_s, &bad) ||
                 cli_opt(argc, argv, &i, "--top", &top_s, &bad) ||
                 cli_opt(argc, argv, &i, "--sampling", &o.sampling, &bad) ||
                 cli_opt(argc, argv, &i, "--stride", &stride_s, &bad) ||
                 cli_opt(argc, argv, &i, "--clips", &clips_s, &bad) ||
                 cli_opt(argc, argv, &i, "--crops", &crops_s, &bad))
            continue;
        else if (argv[i][0] == '-' && argv[i][1]) {
            fprintf(stderr, "error: unknown option '%s' (see tubelet classify --help)\n", argv[i]);
            bad = 1;
        } else videos[n_videos++] = argv[i];
    }
    if (!bad && (!dir || !n_videos)) {
        fprintf(stderr, "error: tubelet classify needs --model DIR and at least one video\n\n");
        help(stderr);
        bad = 1;
    }
    if (!bad && ((th && !cli_int(th, "--threads", 0, 1024, &threads)) ||
                 !cli_precision(prec_s, &precision, &reference) ||
                 (top_s && !cli_int(top_s, "--top", 1, 100000, &top)) ||
                 (stride_s && !cli_int(stride_s, "--stride", 1, 10000, &o.stride)) ||
                 (clips_s && !cli_int(clips_s, "--clips", 1, 100, &o.clips)) ||
                 (crops_s && !cli_int(crops_s, "--crops", 1, 3, &o.crops))))
        bad = 1;
    if (!bad && o.crops == 2) {
        fprintf(stderr, "error: --crops must be 1 or 3\n");
        bad = 1;
    }
    if (!bad && !tubelet_sampling_valid(o.sampling)) {
        fprintf(stderr, "error: unknown --sampling '%s' (hf, uniform, clip or hf-rate)\n", o.sampling);
        bad = 1;
    }
    if (bad) return free(videos), 2;

    tubelet_model *m = cli_load_precision(dir, NULL, threads, precision, reference, 0);
    tubelet_preprocessor *pc = NULL;
    char err[1024];
    if (!m) return free(videos), 1;
    if (tubelet_preprocessor_load(&pc, dir, cli_log, NULL, err, sizeof err)) {
        fprintf(stderr, "error: %s\n", err);
        tubelet_model_free(m);
        return free(videos), 1;
    }
    o.threads = tubelet_model_threads(m);
    tubelet_model_info mi;
    tubelet_model_get_info(m, &mi);
    job *jobs = calloc((size_t)n_videos, sizeof(job));
    double *prob = NULL;
    int n_labels = mi.num_labels > 0 ? mi.num_labels : mi.hidden_size;
    int *order = malloc(sizeof(int) * (size_t)n_labels);
    prob = malloc(sizeof(double) * (size_t)n_labels);
    tubelet_state *s = NULL;
    float *logits = NULL;
    int failed = 0;
    if (!jobs || !order || !prob) {
        fprintf(stderr, "error: out of memory\n");
        return 1;
    }
    for (int i = 0; i < n_videos; i++)
        jobs[i] = (job){videos[i], pc, &o, mi.num_frames, {0}, 0, {0}};
    /* decode and preprocess video i+1 while the model runs on video i */
    pthread_t next;
    int have_next = pthread_create(&next, NULL, load_job, &jobs[0]) == 0;
    if (!have_next) load_job(&jobs[0]);
    if (json) printf("[");
    for (int i = 0; i < n_videos; i++) {
        job *j = &jobs[i];
        if (have_next) pthread_join(next, NULL);
        have_next = i + 1 < n_videos && pthread_create(&next, NULL, load_job, &jobs[i + 1]) == 0;
        if (i + 1 < n_videos && !have_next) load_job(&jobs[i + 1]);
        if (n_videos > 1) fprintf(stderr, "[%d/%d] %s\n", i + 1, n_videos, j->path);
        int rc = j->rc;
        if (!rc) {
            tubelet_views *v = &j->v;
            if (v->n_padded)
                fprintf(stderr, "note: %s has %lld frames, fewer than the clip needs: %d sampled "
                        "positions repeat a frame (as the reference loaders pad)\n",
                        j->path, (long long)v->n_frames, v->n_padded);
            tubelet_shape ls = {0, {0}};
            if (s) tubelet_state_logits_shape(s, &ls);
            int same = s && tubelet_state_matches(s, v->n_views, v->T, v->H, v->W);
            if (!same) {
                tubelet_state_free(s);
                s = NULL;
                free(logits);
                logits = NULL;
                if (tubelet_state_new(&s, m, v->n_views, v->T, v->H, v->W, j->err, sizeof j->err))
                    rc = 1;
                else {
                    tubelet_state_logits_shape(s, &ls);
                    logits = malloc(sizeof(float) * (size_t)tubelet_shape_numel(&ls));
                }
            }
            if (!rc && tubelet_forward(s, v->pixels, logits, NULL, j->err, sizeof j->err)) rc = 1;
            if (!rc) {
                cli_mean_softmax(logits, ls.dim[0], ls.dim[1], prob);
                for (int k = 0; k < n_labels; k++) order[k] = k;
                for (int a = 0; a < n_labels && a < top; a++) /* partial selection sort */
                    for (int b = a + 1; b < n_labels; b++)
                        if (prob[order[b]] > prob[order[a]]) {
                            int t = order[a];
                            order[a] = order[b], order[b] = t;
                        }
                int k_max = top < n_labels ? top : n_labels;
                if (json) {
                    printf("%s{\"video\": ", i ? ", " : "");
                    cli_json_string(stdout, j->path);
                    printf(", \"top\": [");
                    for (int k = 0; k < k_max; k++) {
                        const char *lab = tubelet_model_label(m, order[k]);
                        printf("%s{\"label\": ", k ? ", " : "");
                        cli_json_string(stdout, lab ? lab : "");
                        printf(", \"score\": %.6f}", prob[order[k]]);
                    }
                    printf("]}");
                } else {
                    printf("%s%s  (%lld frames, %.2f fps, %dx%d; %d view%s)\n", i ? "\n" : "",
                           j->path, (long long)v->n_frames, v->fps, v->width, v->height,
                           v->n_views, v->n_views > 1 ? "s" : "");
                    for (int k = 0; k < k_max; k++) {
                        const char *lab = tubelet_model_label(m, order[k]);
                        printf("  %6.2f%%  %s\n", 100 * prob[order[k]], lab ? lab : "?");
                    }
                }
            }
        }
        if (rc) {
            failed++;
            fprintf(stderr, "error: %s\n", j->err);
            if (json) {
                printf("%s{\"video\": ", i ? ", " : "");
                cli_json_string(stdout, j->path);
                printf(", \"error\": ");
                cli_json_string(stdout, j->err);
                printf("}");
            }
        }
        fflush(stdout);
        tubelet_views_free(&j->v);
    }
    if (json) printf("]\n");
    free(logits);
    tubelet_state_free(s);
    tubelet_model_free(m);
    tubelet_preprocessor_free(pc);
    free(jobs), free(order), free(prob), free(videos);
    return failed ? 1 : 0;
}
