/* tubelet serve: an HTTP/1.1 server (GNU libmicrohttpd's internal epoll event loop, one thread
 * for every connection's I/O) in front of the models. The event loop only reads headers and
 * bodies (bounded) and writes answers: once a POST's whole body is in, the request is admitted
 * (at most --queue at once; the next gets 503), its connection suspended, and one of --queue
 * request threads decodes it (--workers at once) and queues its views for the one model executor
 * thread, which batches the requests of one model and one input shape dynamically (--max-batch,
 * --max-wait-ms); the answer resumes the connection. A sweeper thread closes connections whose
 * headers take longer than --header-timeout or whose body arrives slower than --min-rate, so
 * that slow clients cost a socket each and nothing else. */
#include <errno.h>
#include <math.h>
#include <netdb.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <microhttpd.h>

#include "app.h"
#include "serve.h"
#include "tubelet_io.h"
#include "tubelet_pretrain.h"
#include "tubelet_text.h"
#include "tubelet_video.h"

/* ---- models ---- */

/* A zero-shot model's label set (labels and template), its text embeddings computed once: an
 * entry of the model's cache, held (refs) by the requests that score against it. */
typedef struct {
    char *key;          /* labels, a 0 byte, the template */
    size_t key_len;
    char **names;
    int n, refs, evicted; /* evicted: out of the cache, freed when the last request lets go */
    float *text;        /* n x embed_dim */
    uint64_t used;      /* when last asked for: the least recently used goes first */
} label_set;

typedef struct {
    char name[128];
    const char *dir;
    tubelet_model *m;
    tubelet_preprocessor *pc;
    tubelet_model_info mi;
    int n_labels, ckpt_stride, has_cls;
    tubelet_state *s; /* the executor's, for the last batch shape */
    float *logits;
    /* a zero-shot model (X-CLIP): its tokenizer and the label sets' cache, under cache_mu;
     * model_mu keeps the text tower's passes apart from the executor's forward passes */
    int zero_shot, embed_dim, context;
    tubelet_tokenizer *tok;
    label_set *cache[SERVE_TEXT_CACHE];
    uint64_t clock;
    pthread_mutex_t cache_mu, model_mu;
} served_model;

/* ---- one request's work for the executor ---- */

typedef struct job {
    served_model *sm;
    const label_set *ls;  /* a zero-shot model's: the label set scored (batched only with it) */
    const tubelet_views *v;
    float *logits;       /* rows_per_view * n_views rows of n_labels (zero-shot: the label set's),
                          * filled by the executor */
    int64_t rows;
    int rc, done, batch;  /* rc 2: the request asked for what the model has not */
    char err[512];
    int pool;            /* features: TUBELET_POOL_CLS, _MEAN, 2 = the feature map; -1: none */
    int *coming;         /* its request's flag: counted in server.coming until first queued */
    float *feats;        /* (1, hidden) or (1, hidden, t, h, w), filled by the executor */
    int64_t fshape[5];
    int fndim;
    struct job *next;
} job;

/* ---- metrics ---- */

enum { EP_HEALTH, EP_MODELS, EP_CLASSIFY, EP_FEATURES, EP_TIMELINE, EP_METRICS, EP_PAGE, EP_OTHER,
       EP_N };
static const char *const ep_names[EP_N] = {"health", "models", "classify", "features", "timeline",
                                           "metrics", "page", "other"};
extern const char serve_page[]; /* src/serve/page.html, compiled in by the Makefile */
#define N_CODES 16
static const double lat_buckets[] = {0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30};
#define N_LAT (int)(sizeof lat_buckets / sizeof *lat_buckets)
static const int batch_buckets[] = {1, 2, 4, 8, 16, 32, 64};
#define N_BATCH (int)(sizeof batch_buckets / sizeof *batch_buckets)

typedef struct {
    int codes[N_CODES];
    long long count[EP_N][N_CODES];
    long long lat[N_LAT + 1], lat_n, batch[N_BATCH + 1], batch_n, batch_sum, clips;
    double lat_sum, decode_s, model_s;
} metrics;

/* ---- the server ---- */

typedef struct {
    const serve_config *c;
    served_model *models;
    int n_models;
    volatile int ready;
    pthread_mutex_t mu;
    pthread_cond_t work, done;
    job *head, *tail;
    int admitted, stopping;
    int coming; /* requests on their way and not yet queued (uploading, or admitted and
                   decoding): what a batch may wait for */
    int uploading; /* POSTs whose body is on its way (not admitted yet) */
    sem_t decoders;
    metrics mx;
    pthread_t executor;
    /* the request threads: admitted requests wait in todo for one */
    struct request *todo_head, *todo_tail;
    pthread_cond_t todo;
    pthread_t *threads;
    int n_threads, busy, quit;
    /* every open connection (conn_state), for the sweeper; under conn_mu */
    pthread_mutex_t conn_mu;
    struct conn_state *conns;
    int n_conns;
    long long swept_headers, swept_body; /* connections the sweeper closed, by deadline */
    pthread_t sweeper;
    int sweeping;
} server;

/* What a connection is doing, for the sweeper's deadlines. */
enum { PH_HEADERS, PH_BODY, PH_BUSY };
typedef struct conn_state {
    struct conn_state *prev, *next;
    int fd;
    int phase;
    double since;        /* when the phase began */
    uint64_t body;       /* PH_BODY: bytes received */
} conn_state;

/* A request in progress (MHD's per-request context). */
typedef struct request {
    int ep, admitted, coming, uploading;
    int state;                /* RQ_* */
    serve_body b;             /* its parameters, its video, its status and error once refused */
    struct MHD_PostProcessor *pp;
    struct MHD_Connection *conn;
    conn_state *cs;
    served_model *sm;
    double t0;
    int want_npy;             /* features: Accept asked for .npy */
    char method[8], path[128];
    /* the answer, made by a request thread or the event loop, sent by the event loop */
    int status;
    const char *ctype;
    char *body;
    size_t len;
    int close;                /* Connection: close */
    struct request *next;     /* in server.todo */
} request;
enum { RQ_NEW, RQ_BODY, RQ_WORKING, RQ_ANSWERED };

/* ---- responses ---- */

static void count_response(server *sv, int ep, int status) {
    pthread_mutex_lock(&sv->mu);
    int i = 0;
    while (i < N_CODES && sv->mx.codes[i] && sv->mx.codes[i] != status) i++;
    if (i < N_CODES) sv->mx.codes[i] = status, sv->mx.count[ep][i]++;
    pthread_mutex_unlock(&sv->mu);
}

/* The answer of rq (the body copied), sent by the event loop (send_answer); 0. */
static int respond(server *sv, request *rq, int ep, int status, const char *ctype,
                    const char *body, size_t len) {
    (void)sv;
    free(rq->body);
    rq->body = malloc(len ? len : 1);
    if (!rq->body) status = MHD_HTTP_SERVICE_UNAVAILABLE, len = 0; /* sent empty */
    else if (len) memcpy(rq->body, body, len);
    rq->ep = ep, rq->status = status, rq->ctype = ctype, rq->len = len;
    rq->state = RQ_ANSWERED;
    return 0;
}

/* {"error": msg}; 0. */
static int respond_error(server *sv, request *rq, int ep, int status, const char *fmt, ...) {
    char msg[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (f) {
        fprintf(f, "{\"error\": ");
        app_json_string(f, msg);
        fprintf(f, "}\n");
        fclose(f);
    }
    respond(sv, rq, ep, status, "application/json", buf ? buf : "", buf ? len : 0);
    free(buf);
    return 0;
}

/* ---- the model executor ---- */

/* The features the jobs of a batch ask for, from the batch's last hidden state (each of those
 * jobs has one view). */
static void features_of(served_model *sm, const float *hidden, int views, job **b, int n) {
    const int64_t hd = sm->mi.hidden_size;
    int gt, gh, gw;
    tubelet_state_grid(sm->s, &gt, &gh, &gw);
    const int64_t map = hd * gt * gh * gw;
    float *pooled[3] = {NULL, NULL, NULL}; /* cls, mean, map: of the whole batch, once each */
    int failed[3] = {0, 0, 0};
    for (int i = 0, at = 0; i < n; at += b[i]->v->n_views, i++) {
        job *j = b[i];
        if (j->pool < 0) continue;
        const int p = j->pool;
        const int64_t per = p == 2 ? map : hd;
        if (!pooled[p] && !failed[p]) {
            pooled[p] = malloc(sizeof(float) * (size_t)(per * views));
            if (!pooled[p]) failed[p] = 1;
            else if (p == 2) tubelet_feature_map(sm->s, hidden, pooled[p]);
            else if (tubelet_pool(sm->s, hidden, p, pooled[p])) failed[p] = 2;
        }
        if (failed[p] == 2) {
            j->rc = 2;
            snprintf(j->err, sizeof j->err, "model '%s' has no cls token: pool=mean or none",
                     sm->name);
        } else if (failed[p] || !(j->feats = malloc(sizeof(float) * (size_t)per))) {
            j->rc = 1;
            snprintf(j->err, sizeof j->err, "out of memory");
        } else {
            memcpy(j->feats, pooled[p] + per * at, sizeof(float) * (size_t)per);
            j->fndim = p == 2 ? 5 : 2;
            j->fshape[0] = 1, j->fshape[1] = hd, j->fshape[2] = gt, j->fshape[3] = gh,
            j->fshape[4] = gw;
        }
    }
    for (int p = 0; p < 3; p++) free(pooled[p]);
}

/* Runs a batch of jobs of one model and one input shape as one forward pass. */
static void run_batch(server *sv, job **b, int n) {
    served_model *sm = b[0]->sm;
    const tubelet_views *v0 = b[0]->v;
    int views = 0;
    for (int i = 0; i < n; i++) views += b[i]->v->n_views;
    char err[512] = "";
    int rc = 0;
    const float *pixels = v0->pixels;
    float *joined = NULL;
    const size_t per_view = (size_t)v0->T * v0->C * v0->H * v0->W;
    if (n > 1) { /* the views one after the other */
        joined = malloc(sizeof(float) * per_view * (size_t)views);
        if (!joined) rc = 1, snprintf(err, sizeof err, "out of memory for a batch of %d views", views);
        for (int i = 0, at = 0; joined && i < n; at += b[i]->v->n_views, i++)
            memcpy(joined + per_view * (size_t)at, b[i]->v->pixels,
                   sizeof(float) * per_view * (size_t)b[i]->v->n_views);
        pixels = joined;
    }
    if (!rc && !(sm->s && tubelet_state_matches(sm->s, views, v0->T, v0->H, v0->W))) {
        tubelet_state_free(sm->s);
        free(sm->logits);
        sm->s = NULL, sm->logits = NULL;
        tubelet_shape ls;
        if (tubelet_state_new(&sm->s, sm->m, views, v0->T, v0->H, v0->W, err, sizeof err)) rc = 1;
        else {
            /* zero-shot: room for the most labels a request may name */
            app_scores_shape(sm->s, views, sm->zero_shot ? SERVE_MAX_LABELS : 0, &ls);
            if (!(sm->logits = malloc(sizeof(float) * (size_t)tubelet_shape_numel(&ls))))
                rc = 1, snprintf(err, sizeof err, "out of memory");
        }
    }
    tubelet_shape ls = {0, {0}}, hs = {0, {0}};
    float *hidden = NULL;
    int want_hidden = 0;
    for (int i = 0; i < n; i++) want_hidden |= b[i]->pool >= 0;
    if (!rc && want_hidden) {
        tubelet_state_hidden_shape(sm->s, &hs);
        if (!(hidden = malloc(sizeof(float) * (size_t)tubelet_shape_numel(&hs))))
            rc = 1, snprintf(err, sizeof err, "out of memory");
    }
    double t = app_now();
    const label_set *set = b[0]->ls;
    if (!rc && set) { /* X-CLIP: the batch against its one label set */
        app_scores_shape(sm->s, views, set->n, &ls);
        pthread_mutex_lock(&sm->model_mu);
        rc = tubelet_forward_text(sm->s, pixels, set->text, set->n, sm->logits, NULL, NULL, err,
                                  sizeof err) != 0;
        pthread_mutex_unlock(&sm->model_mu);
    } else if (!rc) {
        tubelet_state_logits_shape(sm->s, &ls);
        pthread_mutex_lock(&sm->model_mu);
        rc = tubelet_forward(sm->s, pixels, sm->logits, hidden, err, sizeof err) != 0;
        pthread_mutex_unlock(&sm->model_mu);
    }
    t = app_now() - t;
    free(joined);
    if (!rc && want_hidden) features_of(sm, hidden, views, b, n);
    free(hidden);
    const int64_t per = rc ? 0 : ls.dim[0] / views; /* logits rows per view */
    for (int i = 0, at = 0; i < n; at += b[i]->v->n_views, i++) {
        job *j = b[i];
        j->batch = n;
        if (!rc) {
            j->rows = per * j->v->n_views;
            j->logits = malloc(sizeof(float) * (size_t)(j->rows * ls.dim[1]));
            if (j->logits)
                memcpy(j->logits, sm->logits + per * at * ls.dim[1],
                       sizeof(float) * (size_t)(j->rows * ls.dim[1]));
        }
        if (j->rc) continue; /* features_of's */
        j->rc = rc || !j->logits;
        if (j->rc) snprintf(j->err, sizeof j->err, "%s", rc ? err : "out of memory");
    }
    pthread_mutex_lock(&sv->mu);
    sv->mx.model_s += t;
    if (!rc) sv->mx.clips += views;
    int k = 0;
    while (k < N_BATCH && n > batch_buckets[k]) k++;
    sv->mx.batch[k]++, sv->mx.batch_n++, sv->mx.batch_sum += n;
    for (int i = 0; i < n; i++) b[i]->done = 1;
    pthread_cond_broadcast(&sv->done);
    pthread_mutex_unlock(&sv->mu);
}

/* Jobs batched together: one model, one input shape and, zero-shot, one label set. */
static int same_shape(const job *a, const job *b) {
    return a->sm == b->sm && a->ls == b->ls && a->v->T == b->v->T && a->v->H == b->v->H && a->v->W == b->v->W;
}

/* Takes the first job of the queue and then, until the batch is full or --max-wait-ms has passed,
 * every queued job of the same model, shape and label set. It waits only while other requests
 * are still on their way (uploading, decoding): with none, the batch runs at once, so a lone
 * request pays no --max-wait-ms (bench/serve_bench.py at concurrency 1: p50 14.1 ms before,
 * docs/serve.md). */
static void *executor(void *arg) {
    server *sv = arg;
    const int max_batch = sv->c->max_batch;
    job **b = malloc(sizeof(job *) * (size_t)max_batch);
    pthread_mutex_lock(&sv->mu);
    for (;;) {
        while (!sv->head && !sv->stopping) pthread_cond_wait(&sv->work, &sv->mu);
        if (!sv->head) break;
        int n = 0;
        b[n++] = sv->head;
        if (!(sv->head = sv->head->next)) sv->tail = NULL;
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        long long ns = until.tv_nsec + (long long)sv->c->max_wait_ms * 1000000;
        until.tv_sec += ns / 1000000000, until.tv_nsec = ns % 1000000000;
        while (n < max_batch) {
            job *prev = NULL, *j = sv->head;
            while (j && !same_shape(j, b[0])) prev = j, j = j->next;
            if (j) { /* out of the queue, into the batch */
                if (prev) prev->next = j->next;
                else sv->head = j->next;
                if (sv->tail == j) sv->tail = prev;
                b[n++] = j;
                continue;
            }
            if (sv->stopping || !sv->c->max_wait_ms || !sv->coming ||
                pthread_cond_timedwait(&sv->work, &sv->mu, &until) == ETIMEDOUT)
                break;
        }
        pthread_mutex_unlock(&sv->mu);
        run_batch(sv, b, n);
        pthread_mutex_lock(&sv->mu);
    }
    pthread_mutex_unlock(&sv->mu);
    free(b);
    return NULL;
}

/* A request leaves server.coming (queued, or answered without a job): a batch waiting for it
 * stops waiting if it was the last. Under sv->mu. */
static void uncount_coming(server *sv, int *coming) {
    if (!coming || !*coming) return;
    *coming = 0, sv->coming--;
    pthread_cond_signal(&sv->work);
}

/* Queues the job and waits for its logits. */
static void execute(server *sv, job *j) {
    pthread_mutex_lock(&sv->mu);
    uncount_coming(sv, j->coming);
    if (sv->stopping) {
        j->rc = 1, j->done = 1;
        snprintf(j->err, sizeof j->err, "the server is shutting down");
    } else {
        j->next = NULL;
        if (sv->tail) sv->tail->next = j;
        else sv->head = j;
        sv->tail = j;
        pthread_cond_signal(&sv->work);
    }
    while (!j->done) pthread_cond_wait(&sv->done, &sv->mu);
    pthread_mutex_unlock(&sv->mu);
}

/* ---- zero-shot label sets ---- */

static void label_set_free(label_set *e) {
    if (!e) return;
    free(e->key), free(e->text);
    app_free_lines(e->names, e->n);
    free(e);
}

/* Lets go of a label set from label_set_get (NULL: none). */
static void label_set_release(served_model *sm, const label_set *set) {
    if (!set) return;
    label_set *e = (label_set *)set;
    pthread_mutex_lock(&sm->cache_mu);
    const int gone = --e->refs == 0 && e->evicted;
    pthread_mutex_unlock(&sm->cache_mu);
    if (gone) label_set_free(e);
}

/* A new label set of labels and tmpl, encoded (under cache_mu: the tokenizer serves one thread):
 * 0, or the status to refuse the request with (err says why). */
static int label_set_new(served_model *sm, const char *labels, const char *tmpl, label_set **out,
                         char *err, size_t errlen) {
    label_set *e = calloc(1, sizeof *e);
    char **texts = NULL;
    int rc = 1;
    if (!e || !(e->key = malloc(strlen(labels) + strlen(tmpl) + 2))) goto oom;
    e->key_len = (size_t)sprintf(e->key, "%s%c%s", labels, 0, tmpl);
    if (app_labels_split(labels, &e->names, &e->n)) goto oom;
    if (e->n > SERVE_MAX_LABELS) {
        snprintf(err, errlen, "labels: %d labels, more than %d", e->n, SERVE_MAX_LABELS);
        label_set_free(e);
        return MHD_HTTP_UNPROCESSABLE_CONTENT;
    }
    if ((rc = app_labels_fill(e->names, e->n, "labels", *tmpl ? tmpl : NULL, &texts, err,
                              errlen)) == 1)
        goto oom;
    if (!rc) {
        if (!(e->text = malloc(sizeof(float) * (size_t)e->n * (size_t)sm->embed_dim))) goto oom;
        pthread_mutex_lock(&sm->model_mu);
        rc = app_texts_embed(sm->m, sm->tok, sm->context, (const char *const *)texts, e->n, 1,
                             e->text, err, errlen);
        pthread_mutex_unlock(&sm->model_mu);
    }
    if (texts) app_free_lines(texts, e->n);
    if (rc) {
        label_set_free(e);
        return rc == 2 ? MHD_HTTP_UNPROCESSABLE_CONTENT : MHD_HTTP_SERVICE_UNAVAILABLE;
    }
    *out = e;
    return 0;
oom:
    if (texts) app_free_lines(texts, e->n);
    label_set_free(e);
    snprintf(err, errlen, "out of memory");
    return MHD_HTTP_SERVICE_UNAVAILABLE;
}

/* The request's label set: NULL for a model of its own labels (which takes none), else the
 * cached one of these labels and template, or a new one encoded and cached (the least recently
 * used out); held until label_set_release. 0, or the status to refuse the request with. */
static int label_set_get(served_model *sm, const serve_params *p, const label_set **out,
                         char *err, size_t errlen) {
    *out = NULL;
    if (!sm->zero_shot) {
        if (!*p->labels && !*p->tmpl) return 0;
        snprintf(err, errlen, "model '%s' classifies among its own labels: the parameters labels "
                 "and template are for a zero-shot model (X-CLIP)", sm->name);
        return MHD_HTTP_BAD_REQUEST;
    }
    if (!*p->labels) {
        snprintf(err, errlen, "model '%s' is a zero-shot model (X-CLIP): give the parameter "
                 "labels (comma-separated, e.g. labels=falling,walking)", sm->name);
        return MHD_HTTP_BAD_REQUEST;
    }
    const size_t nl = strlen(p->labels), nt = strlen(p->tmpl);
    pthread_mutex_lock(&sm->cache_mu);
    int st = 0, slot = 0;
    label_set *e = NULL;
    for (int i = 0; i < SERVE_TEXT_CACHE && !e; i++) {
        label_set *c = sm->cache[i];
        if (c && c->key_len == nl + 1 + nt && !memcmp(c->key, p->labels, nl + 1) &&
            !memcmp(c->key + nl + 1, p->tmpl, nt))
            e = c;
        else if (!c || (sm->cache[slot] && c->used < sm->cache[slot]->used))
            slot = i; /* an empty slot, or the least recently used */
    }
    if (!e && !(st = label_set_new(sm, p->labels, p->tmpl, &e, err, errlen))) {
        label_set *old = sm->cache[slot];
        if (old && !old->refs) label_set_free(old);
        else if (old) old->evicted = 1;
        sm->cache[slot] = e;
    }
    if (e) e->refs++, e->used = ++sm->clock, *out = e;
    pthread_mutex_unlock(&sm->cache_mu);
    return st;
}

/* ---- endpoints ---- */

static served_model *find_model(server *sv, const char *name) {
    if (!*name) return &sv->models[0];
    for (int i = 0; i < sv->n_models; i++)
        if (!strcmp(sv->models[i].name, name)) return &sv->models[i];
    return NULL;
}

static int get_models(server *sv, request *rq) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) return respond_error(sv, rq, rq->ep, MHD_HTTP_SERVICE_UNAVAILABLE, "out of memory");
    fprintf(f, "{\"models\": [");
    for (int i = 0; i < sv->n_models; i++) {
        const served_model *sm = &sv->models[i];
        const tubelet_model_info *mi = &sm->mi;
        fprintf(f, "%s{\"name\": ", i ? ", " : "");
        app_json_string(f, sm->name);
        fprintf(f, ", \"family\": ");
        app_json_string(f, mi->family);
        fprintf(f, ", \"variant\": ");
        app_json_string(f, mi->variant ? mi->variant : "");
        fprintf(f, ", \"input\": {\"frames\": %d, \"channels\": %d, \"height\": %d, \"width\": %d}, "
                "\"precision\": \"%s\", \"labels\": [", mi->num_frames, mi->num_channels,
                mi->image_height, mi->image_width, tubelet_precision_name(mi->precision));
        for (int k = 0; k < mi->num_labels && !sm->zero_shot; k++) {
            const char *lab = tubelet_model_label(sm->m, k);
            fprintf(f, "%s", k ? ", " : "");
            app_json_string(f, lab ? lab : "");
        }
        fprintf(f, "], \"zero_shot\": %s}", sm->zero_shot ? "true" : "false");
    }
    fprintf(f, "]}\n");
    fclose(f);
    respond(sv, rq, EP_MODELS, MHD_HTTP_OK, "application/json", buf, len);
    free(buf);
    return 0;
}

static int get_metrics(server *sv, request *rq) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) return respond_error(sv, rq, rq->ep, MHD_HTTP_SERVICE_UNAVAILABLE, "out of memory");
    pthread_mutex_lock(&sv->mu);
    metrics m = sv->mx;
    int depth = sv->admitted, uploading = sv->uploading;
    pthread_mutex_unlock(&sv->mu);
    fprintf(f, "# HELP tubelet_requests_total Requests answered, by endpoint and HTTP status.\n"
               "# TYPE tubelet_requests_total counter\n");
    for (int e = 0; e < EP_N; e++)
        for (int i = 0; i < N_CODES && m.codes[i]; i++)
            if (m.count[e][i])
                fprintf(f, "tubelet_requests_total{endpoint=\"%s\",code=\"%d\"} %lld\n",
                        ep_names[e], m.codes[i], m.count[e][i]);
    fprintf(f, "# HELP tubelet_queue_depth Requests admitted and not yet answered.\n"
               "# TYPE tubelet_queue_depth gauge\ntubelet_queue_depth %d\n"
               "# HELP tubelet_queue_capacity The most requests admitted at once (--queue).\n"
               "# TYPE tubelet_queue_capacity gauge\ntubelet_queue_capacity %d\n",
            depth, sv->c->queue);
    fprintf(f, "# HELP tubelet_uploading Requests whose body is still arriving (not admitted yet).\n"
               "# TYPE tubelet_uploading gauge\ntubelet_uploading %d\n", uploading);
    pthread_mutex_lock(&sv->conn_mu);
    const int conns = sv->n_conns;
    const long long sh = sv->swept_headers, sb = sv->swept_body;
    pthread_mutex_unlock(&sv->conn_mu);
    fprintf(f, "# HELP tubelet_connections Connections open.\n"
               "# TYPE tubelet_connections gauge\ntubelet_connections %d\n"
               "# HELP tubelet_connections_cut_total Connections closed for a deadline: headers "
               "past --header-timeout, a body under --min-rate.\n"
               "# TYPE tubelet_connections_cut_total counter\n"
               "tubelet_connections_cut_total{reason=\"headers\"} %lld\n"
               "tubelet_connections_cut_total{reason=\"body\"} %lld\n", conns, sh, sb);
    fprintf(f, "# HELP tubelet_batch_size Requests per forward pass of the model executor.\n"
               "# TYPE tubelet_batch_size histogram\n");
    long long cum = 0;
    for (int k = 0; k < N_BATCH; k++)
        fprintf(f, "tubelet_batch_size_bucket{le=\"%d\"} %lld\n", batch_buckets[k], cum += m.batch[k]);
    fprintf(f, "tubelet_batch_size_bucket{le=\"+Inf\"} %lld\ntubelet_batch_size_sum %lld\n"
               "tubelet_batch_size_count %lld\n", m.batch_n, m.batch_sum, m.batch_n);
    fprintf(f, "# HELP tubelet_request_duration_seconds Time from a classify request's arrival "
               "to its answer.\n# TYPE tubelet_request_duration_seconds histogram\n");
    cum = 0;
    for (int k = 0; k < N_LAT; k++)
        fprintf(f, "tubelet_request_duration_seconds_bucket{le=\"%g\"} %lld\n", lat_buckets[k],
                cum += m.lat[k]);
    fprintf(f, "tubelet_request_duration_seconds_bucket{le=\"+Inf\"} %lld\n"
               "tubelet_request_duration_seconds_sum %.6f\n"
               "tubelet_request_duration_seconds_count %lld\n", m.lat_n, m.lat_sum, m.lat_n);
    fprintf(f, "# HELP tubelet_decode_seconds_total Time spent decoding and preprocessing videos.\n"
               "# TYPE tubelet_decode_seconds_total counter\ntubelet_decode_seconds_total %.6f\n"
               "# HELP tubelet_model_seconds_total Time the model executor spent in forward passes.\n"
               "# TYPE tubelet_model_seconds_total counter\ntubelet_model_seconds_total %.6f\n"
               "# HELP tubelet_clips_total Clips (views) through the model.\n"
               "# TYPE tubelet_clips_total counter\ntubelet_clips_total %lld\n"
               "# HELP tubelet_clips_per_second Clips per second of model time.\n"
               "# TYPE tubelet_clips_per_second gauge\ntubelet_clips_per_second %.3f\n",
            m.decode_s, m.model_s, m.clips, m.model_s > 0 ? m.clips / m.model_s : 0.0);
    fclose(f);
    respond(sv, rq, EP_METRICS, MHD_HTTP_OK, "text/plain; version=0.0.4", buf, len);
    free(buf);
    return 0;
}

static void add_decode_time(server *sv, double t) {
    pthread_mutex_lock(&sv->mu);
    sv->mx.decode_s += t;
    pthread_mutex_unlock(&sv->mu);
}

/* Decodes the body into views as classify does; 0, or the status to refuse it with (err says
 * why). The body is freed: the views hold the request from here on. */
/* The decoder's polled interrupt: a shutdown past --drain stops the decodes in flight. */
static int stopping(void *arg) {
    server *sv = arg;
    return __atomic_load_n(&sv->stopping, __ATOMIC_RELAXED);
}

/* The bounds of an upload's decoding: --max-side (checked on what the stream declares, then on
 * every sequence header and frame) and --max-frames, one decoder thread, the shutdown's
 * interrupt. */
static tubelet_views_params decode_params(server *sv) {
    tubelet_views_params o = tubelet_views_default_params();
    o.threads = 1, o.max_side = sv->c->max_side, o.max_frames = sv->c->max_frames;
    o.interrupt = stopping, o.interrupt_user = sv;
    return o;
}

/* A decoding error's status: 503 for memory or the shutdown, else 422 (the video). */
static int decode_status(server *sv, int rc, char *err, size_t errlen) {
    if (stopping(sv)) {
        snprintf(err, errlen, "the server is shutting down");
        return MHD_HTTP_SERVICE_UNAVAILABLE;
    }
    return rc == TUBELET_ERR_MEMORY ? MHD_HTTP_SERVICE_UNAVAILABLE : MHD_HTTP_UNPROCESSABLE_CONTENT;
}

static int decode_views(server *sv, request *rq, served_model *sm, tubelet_views *v, char *err,
                        size_t errlen) {
    tubelet_views_params o = decode_params(sv);
    o.clips = rq->b.p.clips, o.crops = rq->b.p.crops, o.stride = rq->b.p.stride;
    if (*rq->b.p.sampling) o.sampling = rq->b.p.sampling;
    else if (sm->ckpt_stride && !o.stride) o.sampling = "clip", o.stride = sm->ckpt_stride;
    double t = app_now();
    sem_wait(&sv->decoders);
    int rc = tubelet_views_load_memory(v, rq->b.data, rq->b.len, rq->b.p.name, sm->pc, &o,
                                       sm->mi.num_frames, err, errlen);
    sem_post(&sv->decoders);
    add_decode_time(sv, app_now() - t);
    free(rq->b.data), rq->b.data = NULL;
    if (rc) return decode_status(sv, rc, err, errlen);
    if (v->n_frames > sv->c->max_frames || v->width > sv->c->max_side ||
        v->height > sv->c->max_side) {
        snprintf(err, errlen, "%s: %lld frames of %dx%d: above the limit of %d frames of at most "
                 "%d pixels a side (--max-frames, --max-side)", rq->b.p.name,
                 (long long)v->n_frames, v->width, v->height, sv->c->max_frames, sv->c->max_side);
        tubelet_views_free(v);
        return MHD_HTTP_UNPROCESSABLE_CONTENT;
    }
    return 0;
}

/* The body decoded, classified with the other requests of its batch, answered as one video of
 * `classify --json`. */
static int post_classify(server *sv, request *rq, served_model *sm) {
    tubelet_views v = {0};
    char err[1024];
    const label_set *set = NULL;
    int st = label_set_get(sm, &rq->b.p, &set, err, sizeof err);
    if (!st) st = decode_views(sv, rq, sm, &v, err, sizeof err);
    if (st) {
        label_set_release(sm, set);
        return respond_error(sv, rq, EP_CLASSIFY, st, "%s", err);
    }
    job j = {.sm = sm, .ls = set, .v = &v, .pool = -1, .coming = &rq->coming};
    execute(sv, &j);
    tubelet_views_free(&v);
    if (j.rc) {
        free(j.logits);
        label_set_release(sm, set);
        return respond_error(sv, rq, EP_CLASSIFY, MHD_HTTP_SERVICE_UNAVAILABLE, "%s", j.err);
    }
    const int n_labels = set ? set->n : sm->n_labels;
    double *prob = malloc(sizeof(double) * (size_t)n_labels);
    int *order = malloc(sizeof(int) * (size_t)n_labels);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = prob && order ? open_memstream(&buf, &len) : NULL;
    if (f) {
        tubelet_mean_softmax(j.logits, j.rows, n_labels, prob);
        app_json_classified(f, sm->m, set ? (const char *const *)set->names : NULL, rq->b.p.name,
                            prob, n_labels, rq->b.p.top, order);
        fprintf(f, "\n");
        fclose(f);
        respond(sv, rq, EP_CLASSIFY, MHD_HTTP_OK, "application/json", buf, len);
    } else {
        respond_error(sv, rq, EP_CLASSIFY, MHD_HTTP_SERVICE_UNAVAILABLE, "out of memory");
    }
    free(buf), free(prob), free(order), free(j.logits);
    label_set_release(sm, set);
    double dt = app_now() - rq->t0;
    pthread_mutex_lock(&sv->mu);
    int k = 0;
    while (k < N_LAT && dt > lat_buckets[k]) k++;
    sv->mx.lat[k]++, sv->mx.lat_n++, sv->mx.lat_sum += dt;
    pthread_mutex_unlock(&sv->mu);
    return 0;
}

/* The pooled features (or feature map) of one view, as `tubelet features` computes them: .npy
 * bytes when Accept asks for application/x-npy or application/octet-stream, else JSON. */
static int post_features(server *sv, request *rq, served_model *sm) {
    const int ep = EP_FEATURES;
    if (rq->b.p.clips != 1 || rq->b.p.crops != 1)
        return respond_error(sv, rq, ep, MHD_HTTP_BAD_REQUEST,
                             "features are of one view: clips=1 and crops=1");
    if (*rq->b.p.labels || *rq->b.p.tmpl) /* they would change nothing: say so */
        return respond_error(sv, rq, ep, MHD_HTTP_BAD_REQUEST, "features take no labels or "
                             "template (those are for /v1/classify and /v1/timeline)");
    tubelet_views v = {0};
    char err[1024];
    int st = decode_views(sv, rq, sm, &v, err, sizeof err);
    if (st) return respond_error(sv, rq, ep, st, "%s", err);
    const char *ps = rq->b.p.pool;
    job j = {.sm = sm, .v = &v, .coming = &rq->coming,
             .pool = !*ps ? -2 : !strcmp(ps, "cls") ? TUBELET_POOL_CLS
                   : !strcmp(ps, "mean") ? TUBELET_POOL_MEAN : 2};
    if (j.pool == -2) j.pool = sm->has_cls ? TUBELET_POOL_CLS : TUBELET_POOL_MEAN;
    execute(sv, &j);
    tubelet_views_free(&v);
    free(j.logits);
    if (j.rc) {
        free(j.feats);
        return respond_error(sv, rq, ep, j.rc == 2 ? MHD_HTTP_BAD_REQUEST
                             : MHD_HTTP_SERVICE_UNAVAILABLE, "%s", j.err);
    }
    int64_t numel = 1;
    for (int d = 0; d < j.fndim; d++) numel *= j.fshape[d];
    if (rq->want_npy) {
        unsigned char hdr[1024];
        size_t hlen;
        char *buf = NULL;
        if (tubelet_npy_header(TUBELET_F32, j.fndim, j.fshape, hdr, sizeof hdr, &hlen, err,
                               sizeof err) ||
            !(buf = malloc(hlen + sizeof(float) * (size_t)numel))) {
            free(j.feats);
            return respond_error(sv, rq, ep, MHD_HTTP_SERVICE_UNAVAILABLE, "%s",
                                 buf ? err : "out of memory");
        }
        memcpy(buf, hdr, hlen);
        memcpy(buf + hlen, j.feats, sizeof(float) * (size_t)numel);
        respond(sv, rq, ep, MHD_HTTP_OK, "application/x-npy", buf,
                      hlen + sizeof(float) * (size_t)numel);
        free(buf);
    } else {
        char *buf = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&buf, &len);
        if (!f) {
            free(j.feats);
            return respond_error(sv, rq, ep, MHD_HTTP_SERVICE_UNAVAILABLE, "out of memory");
        }
        fprintf(f, "{\"video\": ");
        app_json_string(f, rq->b.p.name);
        fprintf(f, ", \"pool\": \"%s\", \"shape\": [", j.pool == 2 ? "none"
                : j.pool == TUBELET_POOL_CLS ? "cls" : "mean");
        for (int d = 0; d < j.fndim; d++) fprintf(f, "%s%lld", d ? ", " : "", (long long)j.fshape[d]);
        fprintf(f, "], \"features\": [");
        for (int64_t i = 0; i < numel; i++) fprintf(f, "%s%.9g", i ? ", " : "", j.feats[i]);
        fprintf(f, "]}\n");
        fclose(f);
        respond(sv, rq, ep, MHD_HTTP_OK, "application/json", buf, len);
        free(buf);
    }
    free(j.feats);
    return 0;
}

/* The windows of a long video, each a job of one view for the executor (batched with whatever
 * else is queued), answered as `timeline --json`. */
static int post_timeline(server *sv, request *rq, served_model *sm) {
    const int T = sm->mi.num_frames, ep = EP_TIMELINE;
    const int top = rq->b.p.top_given ? rq->b.p.top : 1;
    char err[1024];
    const label_set *set = NULL;
    int status = label_set_get(sm, &rq->b.p, &set, err, sizeof err);
    if (status) return respond_error(sv, rq, ep, status, "%s", err);
    const int n_labels = set ? set->n : sm->n_labels;
    const char *const *names = set ? (const char *const *)set->names : NULL;
    tubelet_video_stream *st = NULL;
    float *pix = NULL;
    double *prob = malloc(sizeof(double) * (size_t)n_labels);
    int *best = malloc(sizeof(int) * (size_t)n_labels);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = prob && best ? open_memstream(&buf, &len) : NULL;
    int n = 0, oh, ow, fstride = 1, hop = 1;
    double fps = 25.0;
    sem_wait(&sv->decoders); /* opening and each window's frames take a decoder's place */
    double t = app_now();
    if (!f) status = MHD_HTTP_SERVICE_UNAVAILABLE, snprintf(err, sizeof err, "out of memory");
    else {
        /* the frames decoded are counted against --max-frames, whatever the windows skip */
        const tubelet_views_params o = decode_params(sv);
        int rc = tubelet_video_stream_open_memory_params(&st, rq->b.data, rq->b.len, rq->b.p.name,
                                                         sm->pc, &o, err, sizeof err);
        if (rc) status = decode_status(sv, rc, err, sizeof err);
    }
    if (!status) {
        if (tubelet_video_stream_fps(st) > 0) fps = tubelet_video_stream_fps(st);
        const int64_t n_frames = (int64_t)floor(tubelet_video_stream_duration(st) * fps + 0.5);
        tubelet_window_plan(rq->b.p.window, rq->b.p.step, fps, T, n_frames, &fstride, &hop);
        int rc = tubelet_video_stream_begin(st, T, fstride, hop, &oh, &ow, err, sizeof err);
        if (rc) status = decode_status(sv, rc, err, sizeof err);
        else if (!(pix = malloc(sizeof(float) * (size_t)T * 3 * oh * ow)))
            status = MHD_HTTP_SERVICE_UNAVAILABLE, snprintf(err, sizeof err, "out of memory");
    }
    sem_post(&sv->decoders);
    add_decode_time(sv, app_now() - t);
    if (f) fprintf(f, "[");
    while (!status) {
        int64_t first;
        int n_real;
        sem_wait(&sv->decoders);
        t = app_now();
        int got = tubelet_video_stream_next(st, pix, &first, &n_real, err, sizeof err);
        sem_post(&sv->decoders);
        add_decode_time(sv, app_now() - t);
        if (got == 0) break;
        if (got < 0) {
            status = decode_status(sv, -got, err, sizeof err);
            break;
        }
        const tubelet_views v = {.pixels = pix, .n_views = 1, .T = T, .C = 3, .H = oh, .W = ow};
        job j = {.sm = sm, .ls = set, .v = &v, .pool = -1, .coming = &rq->coming};
        execute(sv, &j);
        if (j.rc) {
            status = MHD_HTTP_SERVICE_UNAVAILABLE, snprintf(err, sizeof err, "%s", j.err);
        } else {
            tubelet_mean_softmax(j.logits, j.rows, n_labels, prob);
            double t0, t1;
            tubelet_window_span(first, n_real, fstride, fps, &t0, &t1);
            const int kk = app_top_order(prob, n_labels, top, best);
            fprintf(f, "%s", n++ ? ", " : "");
            app_json_window(f, sm->m, names, t0, t1, prob, best, kk);
        }
        free(j.logits);
    }
    tubelet_video_stream_close(st);
    label_set_release(sm, set);
    free(pix), free(prob), free(best);
    if (f) fprintf(f, "]\n"), fclose(f);
    if (status) respond_error(sv, rq, ep, status, "%s", err);
    else respond(sv, rq, ep, MHD_HTTP_OK, "application/json", buf, len);
    free(buf);
    return 0;
}

/* ---- request plumbing ---- */

static enum MHD_Result on_arg(void *cls, enum MHD_ValueKind kind, const char *key, const char *value) {
    (void)kind;
    request *rq = cls;
    if (rq->b.status) return MHD_NO;
    if ((rq->b.status = serve_param_set(&rq->b.p, key, value, rq->b.err, sizeof rq->b.err)))
        return MHD_NO;
    return MHD_YES;
}

/* The headers a request's framing and key depend on, counted: two Authorization headers (a
 * proxy may have checked the other one), two Content-Lengths that differ, or a Content-Length
 * beside a Transfer-Encoding are refused (RFC 9112 6.3: the framing is ambiguous). */
typedef struct {
    int n_auth, n_len, n_te, len_differ, te_other;
    const char *auth, *len;
} header_count;

static enum MHD_Result on_header(void *cls, enum MHD_ValueKind kind, const char *key,
                                 const char *value) {
    (void)kind;
    header_count *h = cls;
    if (!value) value = "";
    if (!strcasecmp(key, MHD_HTTP_HEADER_AUTHORIZATION)) h->n_auth++, h->auth = value;
    else if (!strcasecmp(key, MHD_HTTP_HEADER_CONTENT_LENGTH)) {
        if (h->len && strcmp(h->len, value)) h->len_differ = 1;
        h->n_len++, h->len = value;
    } else if (!strcasecmp(key, MHD_HTTP_HEADER_TRANSFER_ENCODING)) {
        h->n_te++;
        if (strcasecmp(value, "chunked")) h->te_other = 1;
    }
    return MHD_YES;
}

static int authorized(server *sv, const header_count *h) {
    if (!sv->c->api_key) return 1;
    if (h->n_auth != 1 || strncmp(h->auth, "Bearer ", 7)) return 0;
    /* the same time whatever the key's first difference */
    const char *a = h->auth + 7, *b = sv->c->api_key;
    size_t na = strlen(a), nb = strlen(b);
    unsigned char d = na != nb;
    for (size_t i = 0; i < nb; i++) d |= (unsigned char)(a[i < na ? i : 0] ^ b[i]);
    return !d;
}

/* Starts a POST: checks what the headers say and counts it as uploading. 0 to read its body, or
 * the status (and rq->b.err) to refuse it with. */
static int begin_post(server *sv, struct MHD_Connection *conn, request *rq, const header_count *h) {
    if (h->te_other) {
        snprintf(rq->b.err, sizeof rq->b.err, "Transfer-Encoding: only chunked is understood");
        return MHD_HTTP_NOT_IMPLEMENTED;
    }
    if (h->len_differ || (h->n_len && h->n_te)) {
        snprintf(rq->b.err, sizeof rq->b.err, h->len_differ ? "two different Content-Length headers"
                 : "Content-Length and Transfer-Encoding together");
        return MHD_HTTP_BAD_REQUEST;
    }
    const char *cl = h->len;
    if (cl && strtod(cl, NULL) > sv->c->max_body) {
        snprintf(rq->b.err, sizeof rq->b.err, "Content-Length %.40s is above --max-body (%.0f bytes)",
                 cl, sv->c->max_body);
        return MHD_HTTP_CONTENT_TOO_LARGE;
    }
    const char *ct = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_TYPE);
    int multipart = ct && !strncasecmp(ct, "multipart/form-data", 19);
    if (ct && !multipart && strncasecmp(ct, "video/", 6) &&
        strncasecmp(ct, "application/octet-stream", 24)) {
        snprintf(rq->b.err, sizeof rq->b.err, "Content-Type %.80s: send the video as video/*, "
                 "application/octet-stream or the field 'video' of multipart/form-data", ct);
        return MHD_HTTP_UNSUPPORTED_MEDIA_TYPE;
    }
    const char *accept = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_ACCEPT);
    rq->want_npy = accept && (strstr(accept, "application/x-npy") ||
                              strstr(accept, "application/octet-stream"));
    MHD_get_connection_values(conn, MHD_GET_ARGUMENT_KIND, on_arg, rq);
    if (rq->b.status) return rq->b.status;
    if (multipart && !(rq->pp = MHD_create_post_processor(conn, 64 * 1024, serve_body_field, &rq->b))) {
        snprintf(rq->b.err, sizeof rq->b.err, "a multipart body without a boundary");
        return MHD_HTTP_BAD_REQUEST;
    }
    pthread_mutex_lock(&sv->mu);
    if (sv->stopping) {
        pthread_mutex_unlock(&sv->mu);
        snprintf(rq->b.err, sizeof rq->b.err, "the server is shutting down");
        return MHD_HTTP_SERVICE_UNAVAILABLE;
    }
    /* on its way: a batch may wait for it (--max-wait-ms), the drain waits for it */
    sv->uploading++, rq->uploading = 1, sv->coming++, rq->coming = 1;
    pthread_mutex_unlock(&sv->mu);
    return 0;
}

/* A connection's phase, for the sweeper. */
static void set_phase(server *sv, conn_state *cs, int phase) {
    if (!cs) return;
    pthread_mutex_lock(&sv->conn_mu);
    cs->phase = phase, cs->since = app_now(), cs->body = 0;
    pthread_mutex_unlock(&sv->conn_mu);
}

/* The access log: one line per answer on stderr, as text or (--log-format json) JSON. */
static void log_access(server *sv, struct MHD_Connection *conn, const request *rq) {
    char addr[INET6_ADDRSTRLEN] = "-";
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn,
                                                                 MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    if (ci && ci->client_addr) {
        const struct sockaddr *sa = ci->client_addr;
        if (sa->sa_family == AF_INET)
            inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, addr, sizeof addr);
        else if (sa->sa_family == AF_INET6)
            inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr, addr, sizeof addr);
    }
    const double ms = (app_now() - rq->t0) * 1e3;
    const char *model = rq->sm ? rq->sm->name : "-";
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) return;
    if (sv->c->log_json) {
        fprintf(f, "{\"client\": \"%s\", \"method\": ", addr);
        app_json_string(f, rq->method);
        fprintf(f, ", \"path\": ");
        app_json_string(f, rq->path);
        fprintf(f, ", \"status\": %d, \"bytes\": %zu, \"ms\": %.1f, \"model\": ", rq->status,
                rq->len, ms);
        app_json_string(f, model);
        fprintf(f, "}\n");
    } else { /* the path's bytes outside printable ASCII as %XX, so that a line stays a line */
        fprintf(f, "%s %s ", addr, rq->method);
        for (const unsigned char *p = (const unsigned char *)rq->path; *p; p++)
            fprintf(f, *p > 0x20 && *p < 0x7f ? "%c" : "%%%02X", *p);
        fprintf(f, " %d %zu B %.1f ms %s\n", rq->status, rq->len, ms, model);
    }
    fclose(f);
    fwrite(buf, 1, len, stderr); /* one write: lines of several threads do not mix */
    free(buf);
}

/* Sends rq's answer (from the event loop: libmicrohttpd takes responses only there). */
static enum MHD_Result send_answer(server *sv, struct MHD_Connection *conn, request *rq) {
    struct MHD_Response *r = MHD_create_response_from_buffer(rq->len, rq->body,
                                                             MHD_RESPMEM_MUST_FREE);
    if (!r) return MHD_NO;
    rq->body = NULL; /* the response's now */
    if (rq->ctype) MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, rq->ctype);
    if (sv->c->cors) {
        MHD_add_response_header(r, "Access-Control-Allow-Origin", sv->c->cors);
        MHD_add_response_header(r, "Vary", "Origin");
        if (rq->status == MHD_HTTP_NO_CONTENT) { /* a preflight */
            MHD_add_response_header(r, "Access-Control-Allow-Methods", "GET, POST, OPTIONS");
            MHD_add_response_header(r, "Access-Control-Allow-Headers", "Authorization, Content-Type");
            MHD_add_response_header(r, "Access-Control-Max-Age", "600");
        }
    }
    if (rq->ep == EP_PAGE && rq->status == MHD_HTTP_OK) { /* the page: no script from elsewhere,
                                                           * and no framing by another site */
        MHD_add_response_header(r, "Content-Security-Policy",
                                "default-src 'none'; script-src 'unsafe-inline'; style-src "
                                "'unsafe-inline'; connect-src 'self'; img-src 'self'; "
                                "frame-ancestors 'none'");
        MHD_add_response_header(r, "X-Frame-Options", "DENY");
        MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
    }
    if (rq->status == MHD_HTTP_SERVICE_UNAVAILABLE) MHD_add_response_header(r, "Retry-After", "1");
    if (rq->status == MHD_HTTP_UNAUTHORIZED) MHD_add_response_header(r, "WWW-Authenticate", "Bearer");
    if (rq->close) MHD_add_response_header(r, MHD_HTTP_HEADER_CONNECTION, "close");
    enum MHD_Result res = MHD_queue_response(conn, (unsigned)rq->status, r);
    MHD_destroy_response(r);
    count_response(sv, rq->ep, rq->status);
    log_access(sv, conn, rq);
    return res;
}

/* A request thread: takes admitted requests, decodes and classifies each (waiting for the
 * executor), and resumes its connection with the answer. */
static void *request_thread(void *arg) {
    server *sv = arg;
    pthread_mutex_lock(&sv->mu);
    for (;;) {
        while (!sv->todo_head && !sv->quit) pthread_cond_wait(&sv->todo, &sv->mu);
        request *rq = sv->todo_head;
        if (!rq) break;
        if (!(sv->todo_head = rq->next)) sv->todo_tail = NULL;
        sv->busy++;
        pthread_mutex_unlock(&sv->mu);
        if (rq->ep == EP_TIMELINE) post_timeline(sv, rq, rq->sm);
        else if (rq->ep == EP_FEATURES) post_features(sv, rq, rq->sm);
        else post_classify(sv, rq, rq->sm);
        MHD_resume_connection(rq->conn); /* the event loop sends the answer */
        pthread_mutex_lock(&sv->mu);
        sv->busy--;
        pthread_cond_broadcast(&sv->done);
    }
    pthread_mutex_unlock(&sv->mu);
    return NULL;
}

/* The most query parameters and the longest request target a request may have (414 beyond):
 * libmicrohttpd keeps each parameter in the connection's 128 KiB pool, and about 2,000 of them
 * left it no room even for its own error answer (no answer at all). */
#define MAX_QUERY_PARAMS 64
#define MAX_TARGET 8192
static char target_refused; /* the con_cls of a request whose target was refused */

/* libmicrohttpd's URI log callback: it sees the request target before the parameters are parsed
 * into the pool. A target over the limits loses its query string here (zeroed in libmicrohttpd's
 * own buffer: the parse that follows finds no parameter) and is marked for handle to refuse. */
static void *check_target(void *cls, const char *uri, struct MHD_Connection *conn) {
    (void)cls, (void)conn;
    size_t len = strlen(uri), n = 0;
    const char *q = strchr(uri, '?');
    for (const char *p = q; p && *p; p++) n += *p == '&' || *p == ';';
    if (len <= MAX_TARGET && n < MAX_QUERY_PARAMS) return NULL;
    if (q) memset((char *)q, 0, (size_t)(uri + len - q));
    return &target_refused;
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *conn, const char *url,
                              const char *method, const char *version, const char *upload,
                              size_t *upload_size, void **con_cls) {
    (void)version;
    server *sv = cls;
    request *rq = *con_cls;
    const int refused = rq == (request *)&target_refused;
    if (refused) rq = NULL;
    if (!rq) { /* the headers are in: route */
        if (!(rq = calloc(1, sizeof *rq))) return MHD_NO;
        *con_cls = rq;
        rq->t0 = app_now();
        rq->conn = conn;
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(
            conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
        rq->cs = ci ? ci->socket_context : NULL;
        snprintf(rq->method, sizeof rq->method, "%s", method);
        snprintf(rq->path, sizeof rq->path, "%s", url);
        serve_body_init(&rq->b, sv->c->max_body);
        header_count h = {0};
        MHD_get_connection_values(conn, MHD_HEADER_KIND, on_header, &h);
        int get = !strcmp(method, "GET") || !strcmp(method, "HEAD");
        int post = !strcmp(method, "POST");
        rq->ep = !strcmp(url, "/health") ? EP_HEALTH : !strcmp(url, "/v1/models") ? EP_MODELS
               : !strcmp(url, "/v1/classify") ? EP_CLASSIFY : !strcmp(url, "/v1/timeline") ? EP_TIMELINE
               : !strcmp(url, "/v1/features") ? EP_FEATURES
               : !strcmp(url, "/metrics") ? EP_METRICS : !strcmp(url, "/") ? EP_PAGE
               : EP_OTHER;
        set_phase(sv, rq->cs, post ? PH_BODY : PH_BUSY);
        /* an answer before the body: the body is not read, the connection closes after it */
        rq->close = post;
        const int want_post = rq->ep == EP_CLASSIFY || rq->ep == EP_FEATURES || rq->ep == EP_TIMELINE;
        if (refused)
            respond_error(sv, rq, rq->ep, MHD_HTTP_URI_TOO_LONG, "the request target is too "
                          "long: at most %d query parameters and %d bytes", MAX_QUERY_PARAMS,
                          MAX_TARGET);
        else if (!strcmp(method, "OPTIONS") && sv->c->cors) /* a CORS preflight */
            respond(sv, rq, rq->ep, MHD_HTTP_NO_CONTENT, NULL, "", 0);
        else if (rq->ep == EP_OTHER)
            respond_error(sv, rq, EP_OTHER, MHD_HTTP_NOT_FOUND, "no endpoint %.100s (GET "
                          "/, /health, /v1/models, /metrics; POST /v1/classify, /v1/features, "
                          "/v1/timeline)", url);
        else if ((want_post && !post) || (!want_post && !get))
            respond_error(sv, rq, rq->ep, MHD_HTTP_METHOD_NOT_ALLOWED, "%.100s wants %s, not %.20s",
                          url, want_post ? "POST" : "GET", method);
        else if (rq->ep == EP_PAGE) /* the page asks for the API key itself */
            respond(sv, rq, EP_PAGE, MHD_HTTP_OK, "text/html; charset=utf-8", serve_page,
                    strlen(serve_page));
        else if (rq->ep == EP_HEALTH) {
            if (!sv->ready) respond_error(sv, rq, EP_HEALTH, MHD_HTTP_SERVICE_UNAVAILABLE,
                                          "loading the models");
            else respond(sv, rq, EP_HEALTH, MHD_HTTP_OK, "application/json",
                         "{\"status\": \"ok\"}\n", 17);
        } else if (!authorized(sv, &h))
            respond_error(sv, rq, rq->ep, MHD_HTTP_UNAUTHORIZED,
                          "a missing or wrong API key (Authorization: Bearer KEY, once)");
        else if (!sv->ready)
            respond_error(sv, rq, rq->ep, MHD_HTTP_SERVICE_UNAVAILABLE, "loading the models");
        else if (rq->ep == EP_MODELS) get_models(sv, rq);
        else if (rq->ep == EP_METRICS) get_metrics(sv, rq);
        else {
            int st = begin_post(sv, conn, rq, &h);
            if (st) respond_error(sv, rq, rq->ep, st, "%s", rq->b.err);
        }
        /* a POST refused from its headers is answered at once (its body unread, so the
         * connection closes after it); any other answer waits for the request's end, the next
         * call, or libmicrohttpd closes the connection after it (no keep-alive) */
        if (rq->state == RQ_ANSWERED && post) return send_answer(sv, conn, rq);
        if (rq->state != RQ_ANSWERED) rq->state = RQ_BODY;
        return MHD_YES;
    }
    if (rq->state == RQ_ANSWERED && *upload_size) { /* a GET's body: dropped */
        *upload_size = 0;
        return MHD_YES;
    }
    if (rq->state == RQ_ANSWERED) return send_answer(sv, conn, rq); /* resumed with it */
    if (rq->state == RQ_WORKING) return MHD_YES;
    if (*upload_size) { /* more of the body */
        if (rq->cs) {
            pthread_mutex_lock(&sv->conn_mu);
            rq->cs->body += *upload_size;
            pthread_mutex_unlock(&sv->conn_mu);
        }
        if (!rq->b.status) {
            if (rq->pp) {
                if (MHD_post_process(rq->pp, upload, *upload_size) != MHD_YES && !rq->b.status) {
                    rq->b.status = MHD_HTTP_BAD_REQUEST;
                    snprintf(rq->b.err, sizeof rq->b.err, "a malformed multipart body");
                }
            } else {
                serve_body_append(&rq->b, upload, *upload_size);
            }
        }
        /* after an error, the rest of the body is read and dropped (libmicrohttpd answers a
         * request whose body has begun only once it is in); its size was limited by the
         * Content-Length check, a chunked one's by --min-rate and the client's patience */
        *upload_size = 0;
        return MHD_YES;
    }
    /* the whole body is in: the connection may stay open after the answer */
    rq->close = 0;
    set_phase(sv, rq->cs, PH_BUSY);
    if (rq->pp && !rq->b.status) serve_body_flush(&rq->b);
    served_model *sm = NULL;
    if (rq->b.status) respond_error(sv, rq, rq->ep, rq->b.status, "%s", rq->b.err);
    else if (rq->pp && !rq->b.has_video)
        respond_error(sv, rq, rq->ep, MHD_HTTP_BAD_REQUEST, "the multipart body has no field 'video'");
    else if (!(sm = find_model(sv, rq->b.p.model)))
        respond_error(sv, rq, rq->ep, MHD_HTTP_NOT_FOUND, "unknown model '%s'", rq->b.p.model);
    else if (!rq->b.len)
        respond_error(sv, rq, rq->ep, MHD_HTTP_BAD_REQUEST,
                      "no video: send it as the body or as the multipart field 'video'");
    if (rq->state == RQ_ANSWERED) return send_answer(sv, conn, rq);
    rq->sm = sm;
    /* admitted to the queue now that its body is here, or 503 */
    pthread_mutex_lock(&sv->mu);
    sv->uploading -= rq->uploading, rq->uploading = 0;
    int full = sv->admitted >= sv->c->queue || sv->stopping;
    if (!full) sv->admitted++, rq->admitted = 1;
    else uncount_coming(sv, &rq->coming);
    pthread_mutex_unlock(&sv->mu);
    if (full) {
        respond_error(sv, rq, rq->ep, MHD_HTTP_SERVICE_UNAVAILABLE, sv->stopping
                      ? "the server is shutting down"
                      : "the queue is full (%d requests): try again shortly", sv->c->queue);
        return send_answer(sv, conn, rq);
    }
    /* off the event loop: a request thread answers and resumes it */
    rq->state = RQ_WORKING;
    MHD_suspend_connection(conn);
    pthread_mutex_lock(&sv->mu);
    rq->next = NULL;
    if (sv->todo_tail) sv->todo_tail->next = rq;
    else sv->todo_head = rq;
    sv->todo_tail = rq;
    pthread_cond_signal(&sv->todo);
    pthread_mutex_unlock(&sv->mu);
    return MHD_YES;
}

static void completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                      enum MHD_RequestTerminationCode toe) {
    (void)conn, (void)toe;
    server *sv = cls;
    request *rq = *con_cls;
    if (!rq || rq == (request *)&target_refused) return;
    if (rq->pp) MHD_destroy_post_processor(rq->pp);
    pthread_mutex_lock(&sv->mu);
    uncount_coming(sv, &rq->coming);
    sv->uploading -= rq->uploading;
    sv->admitted -= rq->admitted;
    pthread_cond_broadcast(&sv->done);
    pthread_mutex_unlock(&sv->mu);
    set_phase(sv, rq->cs, PH_HEADERS); /* keep-alive: the next request's headers, or nothing */
    serve_body_free(&rq->b);
    free(rq->body);
    free(rq);
    *con_cls = NULL;
}

/* Every connection in sv->conns from its start to its end (libmicrohttpd's notification, on the
 * event loop, before it closes the socket: so the sweeper never touches a reused descriptor). */
static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                          enum MHD_ConnectionNotificationCode code) {
    server *sv = cls;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        conn_state *cs = calloc(1, sizeof *cs);
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(
            conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        if (!cs) return; /* no deadline but --timeout for this one */
        cs->fd = ci ? ci->connect_fd : -1;
        cs->phase = PH_HEADERS, cs->since = app_now();
        pthread_mutex_lock(&sv->conn_mu);
        if ((cs->next = sv->conns)) cs->next->prev = cs;
        sv->conns = cs, sv->n_conns++;
        pthread_mutex_unlock(&sv->conn_mu);
        *socket_context = cs;
    } else if (*socket_context) {
        conn_state *cs = *socket_context;
        pthread_mutex_lock(&sv->conn_mu);
        if (cs->prev) cs->prev->next = cs->next;
        else sv->conns = cs->next;
        if (cs->next) cs->next->prev = cs->prev;
        sv->n_conns--;
        pthread_mutex_unlock(&sv->conn_mu);
        free(cs);
        *socket_context = NULL;
    }
}

/* Every 100 ms, closes (shuts down: the event loop then sees the end and closes it) each
 * connection whose headers have taken longer than --header-timeout, or whose body arrives
 * slower than --min-rate on average once --header-timeout has passed. --timeout alone closes
 * only a connection silent that long: one byte every --timeout - 1 s would hold it forever. */
static void *sweeper(void *arg) {
    server *sv = arg;
    const double limit = sv->c->header_timeout_s, rate = sv->c->min_rate;
    while (__atomic_load_n(&sv->sweeping, __ATOMIC_RELAXED)) {
        nanosleep(&(struct timespec){0, 100000000}, NULL);
        const double now = app_now();
        pthread_mutex_lock(&sv->conn_mu);
        for (conn_state *cs = sv->conns; cs; cs = cs->next) {
            const double age = now - cs->since;
            if (cs->fd < 0 || age <= limit) continue;
            if (cs->phase == PH_HEADERS || (cs->phase == PH_BODY && (double)cs->body < rate * age)) {
                if (cs->phase == PH_HEADERS) sv->swept_headers++;
                else sv->swept_body++;
                shutdown(cs->fd, SHUT_RDWR);
                cs->fd = -1; /* once */
            }
        }
        pthread_mutex_unlock(&sv->conn_mu);
    }
    return NULL;
}

/* ---- start, serve, drain ---- */

static int load_models(server *sv) {
    const serve_config *c = sv->c;
    for (int i = 0; i < c->n_models; i++) {
        served_model *sm = &sv->models[i];
        pthread_mutex_init(&sm->cache_mu, NULL);
        pthread_mutex_init(&sm->model_mu, NULL);
        const char *spec = c->models[i], *eq = strchr(spec, '=');
        sm->dir = eq ? eq + 1 : spec;
        if (eq) {
            snprintf(sm->name, sizeof sm->name, "%.*s", (int)(eq - spec), spec);
        } else { /* the directory's (or file's) last name */
            size_t n = strlen(spec);
            while (n > 1 && spec[n - 1] == '/') n--;
            size_t b = n;
            while (b > 0 && spec[b - 1] != '/') b--;
            snprintf(sm->name, sizeof sm->name, "%.*s", (int)(n - b), spec + b);
        }
        for (int k = 0; k < i; k++)
            if (!strcmp(sv->models[k].name, sm->name)) {
                fprintf(stderr, "error: two models are named '%s': name them (--model NAME=DIR)\n",
                        sm->name);
                return 1;
            }
        tubelet_load_params lp = tubelet_load_default_params(); /* the CPU, memory-mapped */
        lp.n_threads = c->threads;
        lp.precision = c->precision, lp.precision_reference = c->reference;
        if (!(sm->m = app_load(sm->dir, NULL, &lp))) return 1;
        tubelet_model_info mi;
        tubelet_model_get_info(sm->m, &mi);
        app_default_threads(sm->m, c->threads); /* as classify and features: the same bytes */
        if (tubelet_model_is_pretraining(sm->m)) {
            fprintf(stderr, "error: %s is a VideoMAEForPreTraining checkpoint: it has no classifier "
                    "head to serve\n", sm->dir);
            return 1;
        }
        char err[1024];
        if (!tubelet_text_dims(sm->m, &sm->embed_dim, &sm->context)) { /* X-CLIP: zero-shot */
            sm->zero_shot = 1;
            if (tubelet_tokenizer_load(&sm->tok, sm->dir, err, sizeof err) ||
                tubelet_tokenizer_check(sm->tok, sm->m, err, sizeof err)) {
                fprintf(stderr, "error: %s\n", err);
                return 1;
            }
            const int tc = tubelet_tokenizer_context(sm->tok);
            if (tc < sm->context) sm->context = tc;
        }
        if (tubelet_preprocessor_load(&sm->pc, sm->dir, app_log, NULL, err, sizeof err)) {
            fprintf(stderr, "error: %s\n", err);
            return 1;
        }
        tubelet_model_get_info(sm->m, &sm->mi);
        sm->n_labels = sm->mi.num_labels > 0 ? sm->mi.num_labels : sm->mi.hidden_size;
        sm->ckpt_stride = app_ckpt_stride(sm->dir);
        tubelet_state *probe = NULL; /* whether it has a cls token: a state of one clip tells */
        if (tubelet_state_new(&probe, sm->m, 1, sm->mi.num_frames, sm->mi.image_height,
                              sm->mi.image_width, err, sizeof err)) {
            fprintf(stderr, "error: %s: %s\n", sm->dir, err);
            return 1;
        }
        sm->has_cls = tubelet_state_has_cls(probe);
        tubelet_state_free(probe);
        fprintf(stderr, "serving %s (%s) as '%s'\n", sm->dir, sm->mi.family, sm->name);
    }
    return 0;
}

static void free_models(server *sv) {
    for (int i = 0; i < sv->n_models; i++) {
        served_model *sm = &sv->models[i];
        tubelet_state_free(sm->s);
        free(sm->logits);
        tubelet_preprocessor_free(sm->pc);
        tubelet_model_free(sm->m);
        tubelet_tokenizer_free(sm->tok);
        for (int k = 0; k < SERVE_TEXT_CACHE; k++) label_set_free(sm->cache[k]);
        pthread_mutex_destroy(&sm->cache_mu);
        pthread_mutex_destroy(&sm->model_mu);
    }
    free(sv->models);
}

/* libmicrohttpd's own messages (a client's malformed request, a connection refused at the limit)
 * are dropped: the access log and the server's messages say what matters. */
static void mhd_log(void *cls, const char *fmt, va_list ap) {
    (void)cls, (void)fmt, (void)ap;
}

/* The listening socket, bound here rather than by libmicrohttpd so that a port in use or a bad
 * address is one plain message: the descriptor, or -1 after the message. */
static int listen_on(const serve_config *c, int *family, unsigned *port) {
    char ps[16];
    snprintf(ps, sizeof ps, "%d", c->port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV}, *ai = NULL;
    int gai = getaddrinfo(c->host, ps, &hints, &ai);
    if (gai) {
        fprintf(stderr, "error: --host %s: %s\n", c->host, gai_strerror(gai));
        return -1;
    }
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
    if (fd >= 0) setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (fd < 0 || bind(fd, ai->ai_addr, ai->ai_addrlen) || listen(fd, SOMAXCONN)) {
        const int e = errno;
        if (e == EADDRINUSE)
            fprintf(stderr, "error: port %d on %s is in use (another server?): choose another "
                    "with --port, or --port 0 for any free one\n", c->port, c->host);
        else
            fprintf(stderr, "error: cannot listen on %s port %d: %s\n", c->host, c->port,
                    strerror(e));
        if (fd >= 0) close(fd);
        freeaddrinfo(ai);
        return -1;
    }
    *family = ai->ai_family;
    freeaddrinfo(ai);
    struct sockaddr_storage sa;
    socklen_t sl = sizeof sa;
    *port = (unsigned)c->port;
    if (!getsockname(fd, (struct sockaddr *)&sa, &sl))
        *port = ntohs(sa.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&sa)->sin6_port
                                               : ((struct sockaddr_in *)&sa)->sin_port);
    return fd;
}

/* The most connections open at once: what the descriptor limit leaves (raised to its hard
 * limit) after the server's own files (models, decoders' threads, a margin of 64), at most
 * --max-connections. Past it, a new connection is closed at once. */
static unsigned connection_cap(const serve_config *c) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl)) return 256;
    if (rl.rlim_cur < rl.rlim_max) {
        struct rlimit up = {rl.rlim_max, rl.rlim_max};
        if (!setrlimit(RLIMIT_NOFILE, &up)) rl = up;
    }
    const rlim_t reserve = 64 + 4 * (rlim_t)c->n_models + (rlim_t)c->queue;
    const rlim_t room = rl.rlim_cur > reserve + 16 ? rl.rlim_cur - reserve : 16;
    return (unsigned)(room < (rlim_t)c->max_connections ? room : (rlim_t)c->max_connections);
}

int serve_run(const serve_config *c) {
    server sv = {.c = c, .n_models = c->n_models};
    if (!(sv.models = calloc((size_t)c->n_models, sizeof *sv.models))) return 1;
    pthread_mutex_init(&sv.mu, NULL);
    pthread_mutex_init(&sv.conn_mu, NULL);
    pthread_cond_init(&sv.work, NULL);
    pthread_cond_init(&sv.done, NULL);
    pthread_cond_init(&sv.todo, NULL);
    sem_init(&sv.decoders, 0, (unsigned)c->workers);
    /* signals go to the main thread only, which waits for them once the models are in */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM), sigaddset(&sigs, SIGINT);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    /* bound first (a port in use fails before a long load), served once the models are in:
     * meanwhile /health says 503 "loading the models" */
    int family = AF_INET;
    unsigned port = 0;
    const int lfd = listen_on(c, &family, &port);
    if (lfd < 0) {
        free(sv.models);
        return 1;
    }
    const unsigned cap = connection_cap(c);
    /* one event loop (epoll) for every connection's I/O; a suspended connection (its request at
     * a request thread) costs nothing there */
    const unsigned flags = MHD_USE_AUTO_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME |
                           MHD_USE_ERROR_LOG | (family == AF_INET6 ? MHD_USE_IPv6 : 0);
    struct MHD_Daemon *d = MHD_start_daemon(
        flags, 0, NULL, NULL, handle, &sv,
        MHD_OPTION_LISTEN_SOCKET, (MHD_socket)lfd,
        MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)c->timeout_s,
        MHD_OPTION_CONNECTION_LIMIT, cap,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)(128 * 1024),
        MHD_OPTION_NOTIFY_COMPLETED, completed, &sv,
        MHD_OPTION_NOTIFY_CONNECTION, on_connection, &sv,
        MHD_OPTION_URI_LOG_CALLBACK, check_target, NULL,
        MHD_OPTION_END);
    if (!d) {
        fprintf(stderr, "error: cannot start the HTTP server on %s port %u\n", c->host, port);
        close(lfd);
        free(sv.models);
        return 1;
    }
    sv.sweeping = 1;
    int rc = load_models(&sv), started = 0, swept = 0;
    if (!rc && pthread_create(&sv.executor, NULL, executor, &sv)) {
        fprintf(stderr, "error: cannot start the model executor\n");
        rc = 1;
    }
    started = !rc;
    if (!rc) swept = !pthread_create(&sv.sweeper, NULL, sweeper, &sv);
    if (!rc && (!swept || !(sv.threads = calloc((size_t)c->queue, sizeof *sv.threads)))) rc = 1;
    for (int i = 0; !rc && i < c->queue; i++, sv.n_threads++)
        if (pthread_create(&sv.threads[i], NULL, request_thread, &sv)) rc = 1;
    if (rc && started) fprintf(stderr, "error: cannot start the server's threads\n");
    if (!rc) {
        sv.ready = 1;
        fprintf(stderr, "listening on http://%s%s%s:%u/ (at most %u connections; headers within "
                "%d s, bodies at %g bytes/s or more)\nready\n", family == AF_INET6 ? "[" : "",
                c->host, family == AF_INET6 ? "]" : "", port, cap, c->header_timeout_s,
                c->min_rate);
        int sig = 0;
        sigwait(&sigs, &sig);
        MHD_socket ls = MHD_quiesce_daemon(d);
        if (ls != MHD_INVALID_SOCKET) close(ls);
        fprintf(stderr, "%s: no new connections; finishing the requests in flight (at most %d s)\n",
                sig == SIGTERM ? "SIGTERM" : "SIGINT", c->drain_s);
    }
    double until = app_now() + c->drain_s;
    pthread_mutex_lock(&sv.mu);
    while (!rc && sv.admitted + sv.uploading > 0 && app_now() < until) {
        struct timespec t;
        clock_gettime(CLOCK_REALTIME, &t);
        t.tv_nsec += 50000000;
        if (t.tv_nsec >= 1000000000) t.tv_sec++, t.tv_nsec -= 1000000000;
        pthread_cond_timedwait(&sv.done, &sv.mu, &t);
    }
    if (!rc && sv.admitted + sv.uploading)
        fprintf(stderr, "%d requests still in flight: cut off (503)\n", sv.admitted + sv.uploading);
    /* past --drain: decodes are interrupted, queued jobs fail, the executor ends after its
     * batch, and every admitted request is answered 503 */
    __atomic_store_n(&sv.stopping, 1, __ATOMIC_RELAXED);
    for (job *j = sv.head; j; j = j->next) {
        j->rc = 1, j->done = 1;
        snprintf(j->err, sizeof j->err, "the server is shutting down");
    }
    sv.head = sv.tail = NULL;
    pthread_cond_broadcast(&sv.work);
    pthread_cond_broadcast(&sv.done);
    /* every suspended connection resumed (libmicrohttpd cannot stop with one), then a moment
     * for the event loop to send those answers */
    while (sv.busy || sv.todo_head) pthread_cond_wait(&sv.done, &sv.mu);
    until = app_now() + 1;
    while (sv.admitted > 0 && app_now() < until) {
        struct timespec t;
        clock_gettime(CLOCK_REALTIME, &t);
        t.tv_nsec += 20000000;
        if (t.tv_nsec >= 1000000000) t.tv_sec++, t.tv_nsec -= 1000000000;
        pthread_cond_timedwait(&sv.done, &sv.mu, &t);
    }
    sv.quit = 1;
    pthread_cond_broadcast(&sv.todo);
    pthread_mutex_unlock(&sv.mu);
    __atomic_store_n(&sv.sweeping, 0, __ATOMIC_RELAXED);
    if (swept) pthread_join(sv.sweeper, NULL);
    MHD_stop_daemon(d); /* closes the connections */
    for (int i = 0; i < sv.n_threads; i++) pthread_join(sv.threads[i], NULL);
    free(sv.threads);
    if (started) pthread_join(sv.executor, NULL);
    free_models(&sv);
    sem_destroy(&sv.decoders);
    if (!rc) fprintf(stderr, "stopped\n");
    return rc;
}
