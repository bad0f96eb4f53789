/* libFuzzer harness for the request parameters of tubelet serve (src/serve/params.c): the input
 * is a query string, split at '&' into key=value pairs (no '=': an empty value), each given to
 * serve_param_set, as the server does with a query string or multipart fields.
 *
 * Invariants (abort() = a finding): a refused parameter leaves a message that names it and fits
 * the buffer; whatever is accepted stays within the ranges the server relies on (top, clips,
 * crops, stride; a sampling the video library knows; model and name non-empty, NUL-terminated
 * within their buffers; window and step finite and positive).
 *
 * Build and run: tests/fuzz.sh (see its table). */
#include "fuzz.h"

#include <math.h>

#include "serve/serve.h"
#include "tubelet_video.h"

static void check(const serve_params *p) {
    if (p->top < 1 || p->top > SERVE_MAX_TOP || p->clips < 1 || p->clips > SERVE_MAX_CLIPS ||
        (p->crops != 1 && p->crops != 3) || p->stride < 0 || p->stride > 10000)
        abort();
    if (memchr(p->sampling, 0, sizeof p->sampling) == NULL) abort();
    if (*p->sampling && !tubelet_sampling_valid(p->sampling)) abort();
    if (!memchr(p->model, 0, sizeof p->model) || !memchr(p->name, 0, sizeof p->name) || !*p->name)
        abort();
    if (!(p->window >= 0 && p->window <= 1e6) || !(p->step >= 0 && p->step <= 1e6)) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 4096) return 0;
    char *q = malloc(size + 1);
    if (!q) abort();
    memcpy(q, data, size);
    q[size] = 0;
    serve_params p;
    serve_params_default(&p);
    char *save = NULL;
    for (char *kv = strtok_r(q, "&", &save); kv; kv = strtok_r(NULL, "&", &save)) {
        char *eq = strchr(kv, '='), err[256] = "";
        if (eq) *eq = 0;
        const serve_params before = p;
        if (serve_param_set(&p, kv, eq ? eq + 1 : NULL, err, sizeof err)) {
            char key[16];
            snprintf(key, sizeof key, "%s", kv); /* the message names the key (its start) */
            if (!*err || !memchr(err, 0, sizeof err) || (*key && !strstr(err, key))) abort();
            if (memcmp(&before, &p, sizeof p)) abort(); /* a refused value changes nothing */
        }
        check(&p);
    }
    free(q);
    return 0;
}
