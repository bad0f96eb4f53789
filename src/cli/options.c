/* One option parser for every command: a command is a table of its options (name, type, range,
 * where the value goes, its line in --help), and the same table prints --help. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

const cli_command_summary cli_commands[] = {
    {"classify", "label video files (top-k; X-CLIP: among --labels, zero-shot)"},
    {"features", "embeddings or feature maps of video files (.npy / .safetensors)"},
    {"preprocess", "write the pixel_values a model would see for a video (.npy)"},
    {"timeline", "sliding-window classification over long videos (streaming)"},
    {"serve", "an HTTP inference server: classify uploads, batched (docs/serve.md)"},
    {"watch", "classify a live stream (file, stdin, RTSP/HTTP/UDP/TCP/SRT, camera)"},
    {"train", "train or fine-tune a model on a CSV of videos"},
    {"pretrain", "VideoMAE masked pretraining on unlabelled videos"},
    {"reconstruct", "what a pretraining model makes of a masked video (PNG)"},
    {"init", "a video model initialised from an image ViT or Swin (--from-image)"},
    {"grad", "loss and the gradient of every parameter for one batch"},
    {"synth", "write the procedural motion dataset (train/val CSVs of videos)"},
    {"run", "run a model on pixel_values from a .npy file, write logits"},
    {"info", "describe a model: family, parameters, input shape, FLOPs"},
    {"bench", "time the forward pass: latency, GFLOP/s, peak memory"},
    {"convert", "an official checkpoint (.pth, .pyth, Flax) to a Hugging Face directory"},
    {"tokenize", "CLIP token ids of texts (JSON), as transformers' CLIPTokenizer"},
    {"calibrate", "int8 activation scales from a few clips (static int8)"},
    {0, 0}};

const char *cli_summary_of(const char *name) {
    for (const cli_command_summary *s = cli_commands; name && s->name; s++)
        if (!strcmp(s->name, name)) return s->summary;
    return NULL;
}

void cli_print_help(const cli_command *c, FILE *f) {
    const char *summary = cli_summary_of(c->name);
    if (summary) fprintf(f, "tubelet %s: %s\n\n", c->name, summary);
    fprintf(f, "usage: tubelet %s\n\n%s", c->usage, c->about);
    if (c->opts && c->opts[0].name) fputc('\n', f);
    for (const cli_option *o = c->opts; o && o->name; o++) {
        char left[64];
        snprintf(left, sizeof left, "%s%s%s", o->name, o->arg ? " " : "", o->arg ? o->arg : "");
        fprintf(f, "  %-18s ", left);
        for (const char *h = o->help; *h; h++) { /* continuation lines under the text column */
            fputc(*h, f);
            if (*h == '\n' && h[1]) fprintf(f, "  %-18s ", "");
        }
        fputc('\n', f);
    }
    if (c->footer) fprintf(f, "\n%s", c->footer);
}

static int set_value(const cli_option *o, const char *v) {
    char *end;
    errno = 0;
    if (o->kind == CLI_STR) {
        *(const char **)o->out = v;
        return 1;
    }
    if (o->kind == CLI_LIST) { /* the caller's items hold argc entries: every value fits */
        cli_list *l = o->out;
        l->items[l->n++] = v;
        return 1;
    }
    if (o->kind == CLI_INT) {
        long x = strtol(v, &end, 10);
        if (errno || *end || end == v || x < o->lo || x > o->hi) {
            fprintf(stderr, "error: %s must be an integer in [%.0f, %.0f], got '%s'\n", o->name,
                    o->lo, o->hi, v);
            return 0;
        }
        *(int *)o->out = (int)x;
        return 1;
    }
    double x = strtod(v, &end);
    if (o->kind == CLI_SECONDS && end != v && *end == 's') end++;
    if (errno || *end || end == v || !(x >= o->lo && x <= o->hi)) {
        fprintf(stderr, "error: %s must be a number%s in [%g, %g], got '%s'\n", o->name,
                o->kind == CLI_SECONDS ? " of seconds" : "", o->lo, o->hi, v);
        return 0;
    }
    *(double *)o->out = x;
    return 1;
}

int cli_parse(const cli_command *c, int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (cli_is_help(a)) {
            cli_print_help(c, stdout);
            return 0;
        }
        if (a[0] != '-' || !a[1]) { /* a positional argument */
            if (!c->positional || *c->n_positional >= c->max_positional) {
                fprintf(stderr, "error: unexpected argument '%s' (see tubelet %s --help)\n", a,
                        c->name);
                return 2;
            }
            c->positional[(*c->n_positional)++] = a;
            continue;
        }
        const cli_option *o = c->opts;
        size_t n = 0;
        for (; o && o->name; o++) {
            n = strlen(o->name);
            if (!strncmp(a, o->name, n) && (a[n] == 0 || (a[n] == '=' && o->kind != CLI_FLAG))) break;
        }
        if (!o || !o->name) {
            fprintf(stderr, "error: unknown option '%s' (see tubelet %s --help)\n", a, c->name);
            return 2;
        }
        if (o->kind == CLI_FLAG) {
            *(int *)o->out = 1;
            continue;
        }
        const char *v = a[n] == '=' ? a + n + 1 : NULL;
        if (!v && i + 1 >= argc) {
            fprintf(stderr, "error: %s needs a value\n", o->name);
            return 2;
        }
        if (!set_value(o, v ? v : argv[++i])) return 2;
    }
    return -1;
}
