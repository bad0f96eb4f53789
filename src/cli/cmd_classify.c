/* tubelet classify: video files → labels with probabilities. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "app.h"
#include "cli.h"
#include "tubelet_pretrain.h"
#include "tubelet_train.h"
#include "tubelet_video.h"

/* What classifying one video needs; the state and its logits follow the videos' shapes. */
typedef struct {
    tubelet_model *m;
    tubelet_state *s;
    float *logits;
    double *prob;
    int *order;
    int n_labels, top, json;
    FILE *out;
    const float *text;         /* X-CLIP: the label set's text embeddings (n_labels of them), */
    char **names;              /*   computed once, and the labels' names */
} classifier;

/* Runs the model on v and prints video i's top labels to c->out; 0, or 1 with err set. */
static int classify_views(classifier *c, const cli_video_list *l, int i, const char *path,
                          const tubelet_views *v, char *err, size_t errlen) {
    if (v->n_padded) cli_list_clear(l);
    if (v->n_padded)
        fprintf(stderr, "note: %s has %lld frames, fewer than the clip needs: %d sampled "
                "positions repeat a frame (as the reference loaders pad)\n",
                path, (long long)v->n_frames, v->n_padded);
    tubelet_shape ls;
    if (!c->s || !tubelet_state_matches(c->s, v->n_views, v->T, v->H, v->W)) {
        tubelet_state_free(c->s);
        c->s = NULL;
        free(c->logits);
        c->logits = NULL;
        if (tubelet_state_new(&c->s, c->m, v->n_views, v->T, v->H, v->W, err, errlen)) return 1;
        app_scores_shape(c->s, v->n_views, c->text ? c->n_labels : 0, &ls);
        c->logits = malloc(sizeof(float) * (size_t)tubelet_shape_numel(&ls));
        if (!c->logits) return snprintf(err, errlen, "out of memory"), 1;
    }
    /* X-CLIP: the views against the label set's texts */
    app_scores_shape(c->s, v->n_views, c->text ? c->n_labels : 0, &ls);
    if (app_scores(c->s, v->pixels, c->text, c->n_labels, c->logits, err, errlen)) return 1;
    tubelet_mean_softmax(c->logits, ls.dim[0], ls.dim[1], c->prob);
    cli_list_clear(l); /* the "[i/n] PATH" line on a terminal */
    if (c->json) {
        fprintf(c->out, "%s", i ? ", " : "");
        app_json_classified(c->out, c->m, (const char *const *)c->names, path, c->prob,
                            c->n_labels, c->top, c->order);
        return 0;
    }
    fprintf(c->out, "%s%s  (%lld frames, %.2f fps, %dx%d; %d view%s)\n", i ? "\n" : "", path,
            (long long)v->n_frames, v->fps, v->width, v->height, v->n_views,
            v->n_views > 1 ? "s" : "");
    const int k_max = app_top_order(c->prob, c->n_labels, c->top, c->order);
    for (int k = 0; k < k_max; k++) {
        const char *lab = c->names ? c->names[c->order[k]] : tubelet_model_label(c->m, c->order[k]);
        fprintf(c->out, "  %6.2f%%  %s\n", 100 * c->prob[c->order[k]], lab ? lab : "?");
    }
    return 0;
}

/* cli_each_video's callback: video i's result, or its error (also as JSON with --json). */
static int classify_one(void *user, const cli_video_list *l, int i, tubelet_views *v,
                        const char *load_err) {
    classifier *c = user;
    char err[1024];
    const char *msg = load_err;
    int rc = !v;
    if (v && (rc = classify_views(c, l, i, l->videos[i], v, err, sizeof err))) msg = err;
    if (rc) {
        cli_list_clear(l);
        fprintf(stderr, "error: %s\n", msg);
        if (c->json) {
            fprintf(c->out, "%s", i ? ", " : "");
            app_json_failed(c->out, l->videos[i], msg);
        }
    }
    fflush(c->out);
    return rc;
}

int cmd_classify(int argc, char **argv) {
    const char *dir = NULL, *prec_s = NULL, *list_path = NULL;
    const char *labels_arg = NULL, *labels_file = NULL, *tmpl = NULL;
    char **list_items = NULL, **labels = NULL;
    int n_list = 0, n_labels = 0;
    float *text = NULL;
    tubelet_dist *dist = NULL;
    int precision = 0, reference = 0, json = 0, threads = 0, top = 5, n_videos = 0, bad = 0;
    tubelet_views_params o = tubelet_views_default_params();
    const char *const default_sampling = o.sampling;
    o.log = app_log;
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
        CLI_LABELS_OPTIONS(&labels_arg, &labels_file, &tmpl),
        CLI_THREADS_OPTION(&threads),
        CLI_DEVICE_OPTION,
        CLI_PRECISION_OPTION(&prec_s),
        {"--json", CLI_FLAG, &json, 0, 0, NULL,
         "one JSON array: {\"video\", \"top\": [{\"label\", \"score\"}]} or\n"
         "{\"video\", \"error\"} per video, in the order given"},
        {0}};
    const cli_command cmd = {
        "classify",
        "classify --model DIR VIDEO... [--top K] [--sampling MODE] [--stride S]\n"
        "                        [--clips N] [--crops 1|3] [--threads N] [--json]\n"
        "                        [--labels \"A,B,C\" | --labels-file FILE] [--template T]",
        "Decodes each video, samples and preprocesses its frames as the model directory's\n"
        "preprocessor_config.json says, runs the model and prints the top labels (config.json\n"
        "id2label) with probabilities. With several views (clips x crops) the softmax\n"
        "probabilities are averaged, as the papers evaluate. An X-CLIP model classifies\n"
        "zero-shot among --labels (their text embeddings computed once for every video;\n"
        "docs/zero-shot.md).\n",
        opts, videos, &n_videos, argc,
        "A video that fails is reported and the others still run; the exit status is then 1.\n"};
    int pr = cli_parse(&cmd, argc, argv);
    if (pr >= 0) return free(videos), pr;
    if (list_path && (pr = cli_append_list(&videos, &n_videos, list_path, &list_items, &n_list)))
        return free(videos), app_free_lines(list_items, n_list), pr;
    if (!dir || !n_videos) {
        fprintf(stderr, "error: tubelet classify needs --model DIR and at least one video\n\n");
        cli_print_help(&cmd, stderr);
        bad = 1;
    }
    if (!bad && !cli_precision(prec_s, &precision, &reference)) bad = 1;
    if (!bad && cli_refuse_streams("classify", videos, n_videos)) bad = 1;
    if (!bad && o.crops == 2) {
        fprintf(stderr, "error: --crops must be 1 or 3\n");
        bad = 1;
    }
    if (!bad && !tubelet_sampling_valid(o.sampling)) {
        fprintf(stderr, "error: unknown --sampling '%s' (hf, uniform, clip or hf-rate)\n", o.sampling);
        bad = 1;
    }
    if (bad) return free(videos), app_free_lines(list_items, n_list), 2;
    /* an official checkpoint's own clip sampling, unless the command line chose one */
    const int ckpt_stride = o.sampling == default_sampling && !o.stride ? app_ckpt_stride(dir) : 0;
    if (ckpt_stride) o.sampling = "clip", o.stride = ckpt_stride;
    if (cli_dist_join(&dist)) return free(videos), app_free_lines(list_items, n_list), 1;

    /* from here every exit goes through done: (tubelet_dist_finalize included: the other ranks
     * of an mpirun job must not be left waiting) */
    tubelet_preprocessor *pc = NULL;
    classifier c = {.top = top, .json = json, .out = stdout};
    char *out_buf = NULL, err[1024];
    size_t out_len = 0;
    int failed = 1, rank = 0;
    tubelet_model *m = c.m = cli_load_precision(dir, NULL, threads, precision, reference, 0);
    if (!m) goto done;
    app_default_threads(m, threads);
    if (tubelet_model_is_pretraining(m)) {
        fprintf(stderr, "error: %s is a VideoMAEForPreTraining checkpoint: it has no classifier "
                "head; fine-tune it first (tubelet train --model %s ...), or take its encoder's "
                "features (tubelet features)\n", dir, dir);
        goto done;
    }
    if (cli_takes_video(m, dir)) goto done;
    /* X-CLIP: the label set's text embeddings, once for every video */
    if (cli_zero_shot(m, dir, "classify", labels_arg, labels_file, tmpl, &labels, &text,
                      &n_labels))
        goto done;
    c.text = text, c.names = labels;
    if (tubelet_preprocessor_load(&pc, dir, app_log, NULL, err, sizeof err)) {
        fprintf(stderr, "error: %s\n", err);
        goto done;
    }
    o.threads = tubelet_model_threads(m);
    tubelet_model_info mi;
    tubelet_model_get_info(m, &mi);
    /* under mpirun: this rank's output collected in memory */
    if (dist) {
        rank = tubelet_dist_rank(dist);
        c.out = open_memstream(&out_buf, &out_len);
    }
    c.n_labels = c.text ? n_labels : mi.num_labels > 0 ? mi.num_labels : mi.hidden_size;
    c.order = malloc(sizeof(int) * (size_t)c.n_labels);
    c.prob = malloc(sizeof(double) * (size_t)c.n_labels);
    if (!c.out || !c.order || !c.prob) {
        fprintf(stderr, "error: out of memory\n");
        goto done;
    }
    if (json && rank == 0) printf("[");
    fflush(stdout);
    cli_video_list list = {videos, n_videos, pc, &o, mi.num_frames, 0, 0, 0, NULL};
    failed = cli_each_video(&list, dist, classify_one, &c);
    /* a sharded run: rank 0 prints every rank's results in the list's order */
    if (dist && (cli_dist_collect(dist, c.out, &out_buf, &out_len, &failed, err, sizeof err))) {
        fprintf(stderr, "error: %s\n", err);
        failed = 1;
    }
    if (json && rank == 0) printf("]\n");
done:
    free(c.logits);
    tubelet_state_free(c.s);
    tubelet_model_free(m);
    tubelet_preprocessor_free(pc);
    if (c.out && c.out != stdout) fclose(c.out);
    free(out_buf);
    tubelet_dist_finalize(dist);
    free(c.order), free(c.prob), free(videos), free(text);
    app_free_lines(labels, n_labels);
    app_free_lines(list_items, n_list);
    return failed ? 1 : 0;
}
