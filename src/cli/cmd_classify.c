/* tubelet classify: video files → labels with probabilities. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "tubelet_pretrain.h"
#include "tubelet_train.h"
#include "tubelet_video.h"

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

/* Rank 0 prints every rank's output (each a contiguous share of the list, so rank order is the
 * list's order); the failures are summed. */
static int collect(tubelet_dist *d, FILE *out, char **buf, size_t *len, int *failed, char *err,
                   size_t errlen) {
    fflush(out); /* updates *buf and *len of the memory stream */
    void *all = NULL;
    size_t n = 0;
    double f = *failed;
    int rc = tubelet_dist_gather(d, *buf, *len, &all, &n, err, errlen);
    if (!rc) rc = tubelet_dist_sum(d, &f, 1, err, errlen);
    if (!rc) *failed = (int)f;
    if (!rc && all) fwrite(all, 1, n, stdout);
    free(all);
    return rc;
}

int cmd_classify(int argc, char **argv) {
    const char *dir = NULL, *prec_s = NULL, *list_path = NULL;
    char **list_items = NULL;
    int n_list = 0;
    tubelet_dist *dist = NULL;
    int precision = 0, reference = 0, json = 0, threads = 0, top = 5, n_videos = 0, bad = 0;
    tubelet_views_params o = tubelet_views_default_params();
    const char *const default_sampling = o.sampling;
    o.log = cli_log;
    const char **videos = calloc((size_t)argc, sizeof(char *));
    if (!videos) return 1;
    const cli_option opts[] = {
        {"--model", CLI_STR, &dir, 0, 0, "DIR", "Hugging Face model directory"},
        {"--list", CLI_STR, &list_path, 0, 0, "FILE",
         "the videos, one path per line, after any given as arguments; under\n"
         "mpirun each rank classifies a contiguous share and rank 0 prints\n"
         "every result in the list's order (docs/distributed.md)"},
        {"--top", CLI_INT, &top, 1, 100000, "K", "labels to print (default 5)"},
        {"--sampling", CLI_STR, &o.sampling, 0, 0, "MODE",
         "hf (default: what the Hugging Face pipeline takes, frame i*F/T),\n"
         "uniform (segment centres), clip (a strided clip, centred),\n"
         "hf-rate (the pipeline's older frames 0, r, 2r, ...)"},
        {"--stride", CLI_INT, &o.stride, 1, 10000, "S", "frame stride for clip (default 4) / rate for hf-rate (default 1)"},
        {"--clips", CLI_INT, &o.clips, 1, 100, "N", "temporal views (default 1)"},
        {"--crops", CLI_INT, &o.crops, 1, 3, "1|3", "spatial views: centre, or left/centre/right (default 1)"},
        CLI_THREADS_OPTION(&threads),
        CLI_PRECISION_OPTION(&prec_s),
        {"--json", CLI_FLAG, &json, 0, 0, NULL,
         "one JSON array: {\"video\", \"top\": [{\"label\", \"score\"}]} or\n"
         "{\"video\", \"error\"} per video, in the order given"},
        {0}};
    const cli_command cmd = {
        "classify",
        "classify --model DIR VIDEO... [--top K] [--sampling MODE] [--stride S]\n"
        "                        [--clips N] [--crops 1|3] [--threads N] [--json]",
        "Decodes each video, samples and preprocesses its frames as the model directory's\n"
        "preprocessor_config.json says, runs the model and prints the top labels (config.json\n"
        "id2label) with probabilities. With several views (clips x crops) the softmax\n"
        "probabilities are averaged, as the papers evaluate.\n",
        opts, videos, &n_videos, argc,
        "A video that fails is reported and the others still run; the exit status is then 1.\n"};
    int pr = cli_parse(&cmd, argc, argv);
    if (pr >= 0) return free(videos), pr;
    if (list_path && (pr = cli_append_list(&videos, &n_videos, list_path, &list_items, &n_list)))
        return free(videos), cli_free_lines(list_items, n_list), pr;
    if (!dir || !n_videos) {
        fprintf(stderr, "error: tubelet classify needs --model DIR and at least one video\n\n");
        cli_print_help(&cmd, stderr);
        bad = 1;
    }
    if (!bad && !cli_precision(prec_s, &precision, &reference)) bad = 1;
    if (!bad && o.crops == 2) {
        fprintf(stderr, "error: --crops must be 1 or 3\n");
        bad = 1;
    }
    if (!bad && !tubelet_sampling_valid(o.sampling)) {
        fprintf(stderr, "error: unknown --sampling '%s' (hf, uniform, clip or hf-rate)\n", o.sampling);
        bad = 1;
    }
    if (bad) return free(videos), cli_free_lines(list_items, n_list), 2;
    /* an official checkpoint's own clip sampling, unless the command line chose one */
    const int ckpt_stride = o.sampling == default_sampling && !o.stride ? cli_ckpt_stride(dir) : 0;
    if (ckpt_stride) o.sampling = "clip", o.stride = ckpt_stride;
    if (cli_dist_join(&dist)) return free(videos), cli_free_lines(list_items, n_list), 1;

    /* from here every exit goes through done: (tubelet_dist_finalize included: the other ranks
     * of an mpirun job must not be left waiting) */
    tubelet_preprocessor *pc = NULL;
    tubelet_state *s = NULL;
    job *jobs = NULL;
    int *order = NULL;
    double *prob = NULL;
    float *logits = NULL;
    char *out_buf = NULL, err[1024];
    size_t out_len = 0;
    FILE *out = stdout;
    int failed = 1, first = 0, count = n_videos, rank = 0;
    tubelet_model *m = cli_load_precision(dir, NULL, threads, precision, reference, 0);
    if (!m) goto done;
    if (tubelet_model_is_pretraining(m)) {
        fprintf(stderr, "error: %s is a VideoMAEForPreTraining checkpoint: it has no classifier "
                "head; fine-tune it first (tubelet train --model %s ...), or take its encoder's "
                "features (tubelet features)\n", dir, dir);
        goto done;
    }
    if (cli_takes_video(m, dir)) goto done;
    if (tubelet_preprocessor_load(&pc, dir, cli_log, NULL, err, sizeof err)) {
        fprintf(stderr, "error: %s\n", err);
        goto done;
    }
    o.threads = tubelet_model_threads(m);
    tubelet_model_info mi;
    tubelet_model_get_info(m, &mi);
    /* under mpirun: this rank's share of the list, its output collected in memory */
    if (dist) {
        tubelet_dist_share(dist, n_videos, &first, &count);
        rank = tubelet_dist_rank(dist);
        out = open_memstream(&out_buf, &out_len);
    }
    const int n_labels = mi.num_labels > 0 ? mi.num_labels : mi.hidden_size;
    jobs = calloc((size_t)n_videos, sizeof(job));
    order = malloc(sizeof(int) * (size_t)n_labels);
    prob = malloc(sizeof(double) * (size_t)n_labels);
    if (!out || !jobs || !order || !prob) {
        fprintf(stderr, "error: out of memory\n");
        goto done;
    }
    failed = 0;
    for (int i = 0; i < n_videos; i++)
        jobs[i] = (job){videos[i], pc, &o, mi.num_frames, {0}, 0, {0}};
    /* decode and preprocess video i+1 while the model runs on video i */
    pthread_t next;
    int have_next = count > 0 && pthread_create(&next, NULL, load_job, &jobs[first]) == 0;
    if (count > 0 && !have_next) load_job(&jobs[first]);
    if (json && rank == 0) printf("[");
    fflush(stdout);
    for (int i = first; i < first + count; i++) {
        job *j = &jobs[i];
        if (have_next) pthread_join(next, NULL);
        have_next = i + 1 < first + count && pthread_create(&next, NULL, load_job, &jobs[i + 1]) == 0;
        if (i + 1 < first + count && !have_next) load_job(&jobs[i + 1]);
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
                    if (!logits) rc = 1, snprintf(j->err, sizeof j->err, "out of memory");
                }
            }
            if (!rc && tubelet_forward(s, v->pixels, logits, NULL, j->err, sizeof j->err)) rc = 1;
            if (!rc) {
                tubelet_mean_softmax(logits, ls.dim[0], ls.dim[1], prob);
                int k_max = top < n_labels ? top : n_labels;
                if (json) {
                    fprintf(out, "%s", i ? ", " : "");
                    cli_json_classified(out, m, j->path, prob, n_labels, top, order);
                } else {
                    fprintf(out, "%s%s  (%lld frames, %.2f fps, %dx%d; %d view%s)\n", i ? "\n" : "",
                           j->path, (long long)v->n_frames, v->fps, v->width, v->height,
                           v->n_views, v->n_views > 1 ? "s" : "");
                    cli_top_order(prob, n_labels, top, order);
                    for (int k = 0; k < k_max; k++) {
                        const char *lab = tubelet_model_label(m, order[k]);
                        fprintf(out, "  %6.2f%%  %s\n", 100 * prob[order[k]], lab ? lab : "?");
                    }
                }
            }
        }
        if (rc) {
            failed++;
            fprintf(stderr, "error: %s\n", j->err);
            if (json) {
                fprintf(out, "%s{\"video\": ", i ? ", " : "");
                cli_json_string(out, j->path);
                fprintf(out, ", \"error\": ");
                cli_json_string(out, j->err);
                fprintf(out, "}");
            }
        }
        fflush(out);
        tubelet_views_free(&j->v);
    }
    /* a sharded run: rank 0 prints every rank's results in the list's order */
    if (dist && (collect(dist, out, &out_buf, &out_len, &failed, err, sizeof err))) {
        fprintf(stderr, "error: %s\n", err);
        failed = 1;
    }
    if (json && rank == 0) printf("]\n");
done:
    free(logits);
    tubelet_state_free(s);
    tubelet_model_free(m);
    tubelet_preprocessor_free(pc);
    if (out && out != stdout) fclose(out);
    free(out_buf);
    tubelet_dist_finalize(dist);
    free(jobs), free(order), free(prob), free(videos);
    cli_free_lines(list_items, n_list);
    return failed ? 1 : 0;
}
