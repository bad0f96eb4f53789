/* tubelet serve's core (src/serve/): the HTTP server (server.c, serve_run), the parsing of a
 * request's parameters (params.c) and of its body (body.c), both fuzzed by tests/fuzz_serve.c.
 * The command's options: src/cli/cmd_serve.c, which calls serve_run; what the server shares with
 * the commands (JSON results, labels, loading a model): src/app/app.h. */
#ifndef TB_SERVE_H
#define TB_SERVE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <microhttpd.h>

/* tubelet serve's settings, from its options (src/cli/cmd_serve.c). */
typedef struct {
    const char **models;      /* "DIR_OR_FILE" or "NAME=DIR_OR_FILE" */
    int n_models;
    const char *host;
    int port;                 /* 0: an ephemeral port */
    int threads, workers;     /* model threads (0: all cores); requests decoded at once */
    int max_batch, max_wait_ms, queue;
    double max_body;          /* bytes */
    int max_frames, max_side; /* what a video may decode to */
    int timeout_s, drain_s;
    int header_timeout_s;     /* a request's headers must be in within this (the sweeper) */
    double min_rate;          /* bytes/s a body must average once header_timeout_s has passed */
    int max_connections;      /* at most (the descriptor limit may give fewer) */
    int log_json;             /* the access log as JSON lines */
    const char *api_key, *cors;
    int precision, reference;
} serve_config;
/* Runs the server (server.c) until SIGTERM or SIGINT; the exit status. */
int serve_run(const serve_config *c);

/* The most labels a zero-shot request may name, their most bytes (413 above), the longest
 * template, and the label sets whose text embeddings a served model keeps (least recently used
 * out first). */
#define SERVE_MAX_LABELS 256
#define SERVE_MAX_LABEL_BYTES 8192
#define SERVE_MAX_TEMPLATE 512
#define SERVE_TEXT_CACHE 64

/* The parameters of one request, from its query string or its multipart fields. */
typedef struct {
    int top;            /* labels (default 5; timeline: 1) */
    int top_given;
    int clips, crops;   /* temporal and spatial views (default 1, 1) */
    int stride;         /* frame stride of sampling=clip / rate of hf-rate; 0: the default */
    char sampling[16];  /* "" = the model's default (hf, or an official checkpoint's clip) */
    char model[128];    /* "" = the first model */
    char name[256];     /* "video" in the answer: a multipart file's name, else "video" */
    char pool[8];       /* features: "cls", "mean", "none"; "" = the model's (as features) */
    double window, step; /* timeline: --window and --stride in seconds; 0 = their defaults */
    char labels[SERVE_MAX_LABEL_BYTES + 1]; /* zero-shot models: "a,b,c"; "" = none given */
    char tmpl[SERVE_MAX_TEMPLATE];          /* zero-shot: the template; "" = none given */
} serve_params;

void serve_params_default(serve_params *p);
/* Sets one parameter from its text; 0, or the HTTP status to refuse it with (400; 413 for labels
 * longer than SERVE_MAX_LABEL_BYTES) with err naming the parameter and the problem. */
int serve_param_set(serve_params *p, const char *key, const char *value, char *err, size_t errlen);
/* 1 if key names a parameter. */
int serve_param_known(const char *key);

/* A POST's body as it arrives: the raw video, or a multipart body's fields (body.c). */
typedef struct {
    serve_params p;     /* the query string's, then the multipart fields' */
    int status;         /* 0, or the HTTP status the request is refused with (and err) */
    char err[512];
    char *data;         /* the video: the raw body or the field 'video' */
    size_t len, cap;
    double max;         /* --max-body */
    char fkey[32], fval[SERVE_MAX_LABEL_BYTES + 1]; /* the multipart field being read (not
                                                     * "video") */
    size_t flen;
    int has_video;      /* multipart: the field 'video' came */
} serve_body;

void serve_body_init(serve_body *b, double max_body);
void serve_body_free(serve_body *b);
/* Appends video bytes within max: 0, or -1 with status and err set. */
int serve_body_append(serve_body *b, const char *data, size_t size);
/* libmicrohttpd's MHD_PostDataIterator over a serve_body (cls): a field's piece. */
enum MHD_Result serve_body_field(void *cls, enum MHD_ValueKind kind, const char *key,
                                 const char *filename, const char *ctype, const char *enc,
                                 const char *data, uint64_t off, size_t size);
/* At the end of a multipart body: the last field read becomes a parameter; 0 or -1 (status). */
int serve_body_flush(serve_body *b);

/* The most views (clips x crops) one request may ask for, the most labels. */
#define SERVE_MAX_CLIPS 16
#define SERVE_MAX_TOP 1000

#endif
