/* tubelet serve: a POST's body, read as it arrives: the raw video, or the fields of a
 * multipart/form-data body that libmicrohttpd's post processor hands over piece by piece (the
 * field 'video' is the video, every other field a parameter). Fuzzed by tests/fuzz_serve.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve.h"

void serve_body_init(serve_body *b, double max) {
    memset(b, 0, sizeof *b);
    serve_params_default(&b->p);
    b->max = max;
}

void serve_body_free(serve_body *b) {
    free(b->data);
    b->data = NULL, b->len = b->cap = 0;
}

int serve_body_append(serve_body *b, const char *data, size_t size) {
    if ((double)b->len + (double)size > b->max) {
        b->status = MHD_HTTP_CONTENT_TOO_LARGE;
        snprintf(b->err, sizeof b->err, "the video is larger than --max-body (%.0f bytes)", b->max);
        return -1;
    }
    if (b->len + size > b->cap) {
        size_t cap = b->cap ? b->cap : 1 << 16;
        while (cap < b->len + size) cap *= 2;
        char *d = realloc(b->data, cap);
        if (!d) {
            b->status = MHD_HTTP_SERVICE_UNAVAILABLE;
            snprintf(b->err, sizeof b->err, "out of memory for a body of %zu bytes", b->len + size);
            return -1;
        }
        b->data = d, b->cap = cap;
    }
    if (size) memcpy(b->data + b->len, data, size);
    b->len += size;
    return 0;
}

int serve_body_flush(serve_body *b) {
    if (!*b->fkey || b->status) return b->status ? -1 : 0;
    b->fval[b->flen] = 0;
    int rc = serve_param_set(&b->p, b->fkey, b->fval, b->err, sizeof b->err);
    if (rc) b->status = rc;
    b->fkey[0] = 0, b->flen = 0;
    return rc ? -1 : 0;
}

enum MHD_Result serve_body_field(void *cls, enum MHD_ValueKind kind, const char *key,
                                 const char *filename, const char *ctype, const char *enc,
                                 const char *data, uint64_t off, size_t size) {
    (void)kind, (void)ctype, (void)enc;
    serve_body *b = cls;
    if (b->status) return MHD_NO;
    if (!key) { /* a part whose Content-Disposition names no field */
        b->status = MHD_HTTP_BAD_REQUEST;
        snprintf(b->err, sizeof b->err, "a multipart part without a field name");
        return MHD_NO;
    }
    if (!strcmp(key, "video")) {
        if (serve_body_flush(b)) return MHD_NO;
        /* a second part named video (another video, or one in pieces) would be joined to the
         * first: refused, as is anything after the video but parameters */
        if (off == 0 && b->len > 0) {
            b->status = MHD_HTTP_BAD_REQUEST;
            snprintf(b->err, sizeof b->err, "two multipart fields 'video': send one video");
            return MHD_NO;
        }
        b->has_video = 1;
        if (off == 0 && filename && *filename && !strcmp(b->p.name, "video"))
            snprintf(b->p.name, sizeof b->p.name, "%s", filename);
        return serve_body_append(b, data, size) ? MHD_NO : MHD_YES;
    }
    /* a new field: another name, or the same name again (libmicrohttpd may first call with no
     * data at offset 0, then with the value at offset 0 again) */
    if (strcmp(b->fkey, key) || (off == 0 && b->flen > 0)) {
        if (serve_body_flush(b)) return MHD_NO;
        if (!serve_param_known(key)) { /* at once: a file in it would hit the value's limit */
            b->status = MHD_HTTP_BAD_REQUEST;
            if (filename)
                snprintf(b->err, sizeof b->err, "unknown field '%.64s': send the video as the "
                         "field 'video'", key);
            else
                snprintf(b->err, sizeof b->err, "unknown parameter '%.64s' (video, top, clips, "
                         "crops, sampling, stride, model, name, pool, window, step, labels, "
                         "template)", key);
            return MHD_NO;
        }
        snprintf(b->fkey, sizeof b->fkey, "%s", key);
    }
    if (b->flen + size >= sizeof b->fval) {
        b->status = MHD_HTTP_CONTENT_TOO_LARGE;
        snprintf(b->err, sizeof b->err, "field '%.64s' is longer than %zu bytes", key,
                 sizeof b->fval - 1);
        return MHD_NO;
    }
    if (size) memcpy(b->fval + b->flen, data, size);
    b->flen += size;
    return MHD_YES;
}
