/* tubelet serve: a request's parameters (query string or multipart fields), checked strictly. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve.h"
#include "tubelet_video.h"

void serve_params_default(serve_params *p) {
    memset(p, 0, sizeof *p);
    p->top = 5, p->clips = 1, p->crops = 1;
    snprintf(p->name, sizeof p->name, "video");
}

/* A number's text as it is: no blank before it (strtol and strtod skip them: "%20%205" was 5). */
static int bare(const char *s) {
    return *s && !isspace((unsigned char)*s) && *s != '+';
}

/* A whole decimal integer in [lo, hi]. */
static int parse_int(const char *s, long lo, long hi, int *out) {
    char *end;
    if (!bare(s)) return -1;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (end == s || *end || errno || v < lo || v > hi) return -1;
    *out = (int)v;
    return 0;
}

/* Seconds, with an optional "s" suffix, in (0, 1e6]. */
static int parse_seconds(const char *s, double *out) {
    char *end;
    if (!bare(s)) return -1;
    double v = strtod(s, &end);
    if (end == s || (*end && strcmp(end, "s")) || !isfinite(v) || v <= 0 || v > 1e6) return -1;
    *out = v;
    return 0;
}

static int copy(char *dst, size_t cap, const char *s) {
    size_t n = strlen(s);
    if (!n || n >= cap) return -1;
    memcpy(dst, s, n + 1);
    return 0;
}

static const char *const known[] = {"top", "clips", "crops", "stride", "sampling", "model", "name",
                                    "pool", "window", "step", "labels", "template"};

int serve_param_known(const char *key) {
    for (size_t i = 0; i < sizeof known / sizeof *known; i++)
        if (!strcmp(key, known[i])) return 1;
    return 0;
}

int serve_param_set(serve_params *p, const char *key, const char *value, char *err, size_t errlen) {
    const char *want = NULL;
    if (!value) value = "";
    if (!strcmp(key, "top")) {
        if (parse_int(value, 1, SERVE_MAX_TOP, &p->top)) want = "an integer from 1 to 1000";
        else p->top_given = 1;
    } else if (!strcmp(key, "clips")) {
        if (parse_int(value, 1, SERVE_MAX_CLIPS, &p->clips)) want = "an integer from 1 to 16";
    } else if (!strcmp(key, "crops")) {
        int crops;
        if (parse_int(value, 1, 3, &crops) || crops == 2) want = "1 or 3";
        else p->crops = crops;
    } else if (!strcmp(key, "stride")) {
        if (parse_int(value, 1, 10000, &p->stride)) want = "an integer from 1 to 10000";
    } else if (!strcmp(key, "sampling")) {
        if (strlen(value) >= sizeof p->sampling || !tubelet_sampling_valid(value))
            want = "hf, uniform, clip or hf-rate";
        else
            snprintf(p->sampling, sizeof p->sampling, "%s", value);
    } else if (!strcmp(key, "model")) {
        if (copy(p->model, sizeof p->model, value)) want = "a model name of 1 to 127 bytes";
    } else if (!strcmp(key, "name")) {
        if (copy(p->name, sizeof p->name, value)) want = "a name of 1 to 255 bytes";
    } else if (!strcmp(key, "pool")) {
        if (strcmp(value, "cls") && strcmp(value, "mean") && strcmp(value, "none"))
            want = "cls, mean or none";
        else
            snprintf(p->pool, sizeof p->pool, "%s", value);
    } else if (!strcmp(key, "window")) {
        if (parse_seconds(value, &p->window)) want = "seconds above 0 (e.g. 2 or 2s)";
    } else if (!strcmp(key, "step")) {
        if (parse_seconds(value, &p->step)) want = "seconds above 0 (e.g. 0.5 or 0.5s)";
    } else if (!strcmp(key, "labels")) {
        if (strlen(value) > SERVE_MAX_LABEL_BYTES) {
            snprintf(err, errlen, "parameter labels is longer than %d bytes",
                     SERVE_MAX_LABEL_BYTES);
            return 413;
        }
        if (copy(p->labels, sizeof p->labels, value)) want = "labels, comma-separated";
    } else if (!strcmp(key, "template")) {
        if (!strstr(value, "{}") || copy(p->tmpl, sizeof p->tmpl, value))
            want = "a text of at most 511 bytes with {} for the label";
    } else {
        snprintf(err, errlen, "unknown parameter '%.64s' (top, clips, crops, sampling, stride, "
                 "model, name, pool, window, step, labels, template)", key);
        return 400;
    }
    if (!want) return 0;
    snprintf(err, errlen, "parameter %s wants %s, got '%.64s'", key, want, value);
    return 400;
}
