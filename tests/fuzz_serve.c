/* libFuzzer harness for the request parameters and the body of tubelet serve (src/serve/params.c,
 * src/serve/body.c). Two kinds of input:
 * - a query string, split at '&' into key=value pairs (no '=': an empty value), each given to
 *   serve_param_set, as the server does with a query string;
 * - "multipart/..." up to the first newline, a Content-Type, and the rest a body: fed through
 *   libmicrohttpd's own post processor (MHD_create_post_processor, over a stand-in connection
 *   whose only header is that Content-Type) in pieces of 1 to 256 bytes (sizes from the body's
 *   bytes) to serve_body_field, then serve_body_flush, as the server reads a multipart POST:
 *   boundaries, field names, a missing or repeated video field, truncated parts, long fields.
 *
 * Invariants (abort() = a finding): a refused parameter leaves a message that names it and fits
 * the buffer; whatever is accepted stays within the ranges the server relies on (top, clips,
 * crops, stride; a sampling the video library knows; model and name non-empty, NUL-terminated
 * within their buffers; window and step finite and positive; labels NUL-terminated within their
 * SERVE_MAX_LABEL_BYTES, longer ones refused with 413; a template with its {}). A body: a refusal is a 400 or 413
 * with a message; the video stays within --max-body; a body without the field 'video' has no
 * video bytes; a parameter refused leaves the parameters as they were.
 *
 * Build and run: tests/fuzz.sh (see its table). */
#include "fuzz.h"

#include <math.h>
#include <strings.h>

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
    /* zero-shot: labels within their bound, a template with its {} */
    if (!memchr(p->labels, 0, sizeof p->labels) || !memchr(p->tmpl, 0, sizeof p->tmpl)) abort();
    if (*p->tmpl && !strstr(p->tmpl, "{}")) abort();
}

/* The stand-in connection: libmicrohttpd asks it for the Content-Type (through its PLT, so this
 * definition is the one it calls) and for nothing else. */
static const char *fuzz_ctype;
static char fuzz_conn[4096];

enum MHD_Result MHD_lookup_connection_value_n(struct MHD_Connection *c, enum MHD_ValueKind kind,
                                              const char *key, size_t key_size,
                                              const char **value, size_t *value_size) {
    if ((void *)c != fuzz_conn) abort();
    if (kind != MHD_HEADER_KIND || key_size != strlen(MHD_HTTP_HEADER_CONTENT_TYPE) ||
        strcasecmp(key, MHD_HTTP_HEADER_CONTENT_TYPE))
        return MHD_NO;
    if (value) *value = fuzz_ctype;
    if (value_size) *value_size = strlen(fuzz_ctype);
    return MHD_YES;
}

const char *MHD_lookup_connection_value(struct MHD_Connection *c, enum MHD_ValueKind kind,
                                        const char *key) {
    const char *v = NULL;
    return MHD_lookup_connection_value_n(c, kind, key, key ? strlen(key) : 0, &v, NULL) == MHD_YES
               ? v : NULL;
}

static void fuzz_multipart(const uint8_t *data, size_t size) {
    const uint8_t *nl = memchr(data, '\n', size);
    if (!nl) return;
    char *ctype = fuzz_strdup(data, (size_t)(nl - data));
    const char *body = (const char *)nl + 1;
    size_t len = size - (size_t)(nl + 1 - data);
    fuzz_ctype = ctype;
    serve_body b;
    serve_body_init(&b, 2000); /* a small --max-body, so that inputs reach it */
    struct MHD_PostProcessor *pp = MHD_create_post_processor((struct MHD_Connection *)fuzz_conn,
                                                             1024, serve_body_field, &b);
    if (pp) {
        for (size_t off = 0; off < len && !b.status;) {
            size_t n = 1 + (unsigned char)body[off] % 256;
            if (n > len - off) n = len - off;
            if (MHD_post_process(pp, body + off, n) != MHD_YES && !b.status) break;
            off += n;
        }
        const serve_params before = b.p;
        if (!b.status && serve_body_flush(&b) && memcmp(&before, &b.p, sizeof b.p)) abort();
        MHD_destroy_post_processor(pp);
    }
    if (b.status && b.status != MHD_HTTP_BAD_REQUEST && b.status != MHD_HTTP_CONTENT_TOO_LARGE)
        abort();
    if (b.status && (!*b.err || !memchr(b.err, 0, sizeof b.err))) abort();
    if ((double)b.len > b.max || b.len > b.cap || (!b.has_video && b.len)) abort();
    fuzz_touch(b.data, b.len);
    if (b.flen >= sizeof b.fval || !memchr(b.fkey, 0, sizeof b.fkey)) abort();
    check(&b.p);
    serve_body_free(&b);
    free(ctype);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 12288) return 0; /* room for labels over SERVE_MAX_LABEL_BYTES */
    if (size >= 10 && !memcmp(data, "multipart/", 10)) {
        fuzz_multipart(data, size);
        return 0;
    }
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
        const int st = serve_param_set(&p, kv, eq ? eq + 1 : NULL, err, sizeof err);
        if (st) {
            char key[16];
            if (st != 400 && (st != 413 || strcmp(kv, "labels"))) abort();
            snprintf(key, sizeof key, "%s", kv); /* the message names the key (its start) */
            if (!*err || !memchr(err, 0, sizeof err) || (*key && !strstr(err, key))) abort();
            if (memcmp(&before, &p, sizeof p)) abort(); /* a refused value changes nothing */
        }
        check(&p);
    }
    free(q);
    return 0;
}
