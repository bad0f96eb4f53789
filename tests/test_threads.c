/* A backend is an instance, not a process (issue 37): two states of one model, each made and run
 * on its own thread at the same time, give what one state gives alone, bit for bit: logits and
 * the last hidden state of several forwards, for a ViT family, ViViT's factorised encoder and
 * Video Swin (windows, masks and bias uploaded to each state's instance), and a training step's
 * loss, logits and every gradient (its own gradients per thread), with drop path and dropout.
 *
 *   TUBELET_TEST_DEVICE=D test_threads [CASE...]   D: cpu (default), or cuda (make
 *   test-cuda-emu runs it on the emulator, whose device runs one kernel at a time); CASE: the
 *   case filter of every test program (tests/check.h) */
#include <pthread.h>

#include "parity.h"

static const char *device = "cpu";
enum { REPS = 2 };

typedef struct {
    tubelet_model *m;
    const npy_array *x, *y;
    int train;
    float *logits, *hidden; /* what each of the REPS passes gave (the last one kept) */
    size_t n_logits, n_hidden;
    float loss;
    int same;               /* every pass gave what the first did */
    int rc;
    char err[512];
} job;

/* One state on this thread: REPS forwards (or training steps), each compared to the first. */
static void *run(void *arg) {
    job *j = arg;
    const npy_array *x = j->x;
    tubelet_state *s = NULL;
    tubelet_grads *g = NULL;
    float *l = malloc(sizeof(float) * j->n_logits), *h = malloc(sizeof(float) * j->n_hidden);
    j->same = 1;
    j->rc = tubelet_state_new(&s, j->m, (int)x->shape[0], (int)x->shape[1], (int)x->shape[3],
                              (int)x->shape[4], j->err, sizeof j->err);
    if (!j->rc && j->train) j->rc = tubelet_grads_new(&g, j->m, j->err, sizeof j->err);
    if (!j->rc && j->train) j->rc = tubelet_state_enable_training(s, 0, g, j->err, sizeof j->err);
    for (int r = 0; !j->rc && r < REPS; r++) {
        float loss = 0;
        float *lo = r ? l : j->logits, *hi = r ? h : j->hidden;
        if (j->train) { /* drop path and dropout too: the same draws each time */
            tubelet_grads_zero(g);
            tubelet_state_set_drop_path(s, 0.2f, 7, 3);
            tubelet_state_set_dropout(s, 0.1f, 0.1f, 7, 3);
            j->rc = tubelet_forward_backward(s, x->data, (const int64_t *)j->y->data, &loss, lo,
                                             j->err, sizeof j->err);
        } else {
            j->rc = tubelet_forward(s, x->data, lo, hi, j->err, sizeof j->err);
        }
        if (!r) {
            j->loss = loss;
        } else if (!j->rc) {
            j->same = j->same && loss == j->loss &&
                      !memcmp(l, j->logits, sizeof(float) * j->n_logits) &&
                      (j->train || !memcmp(h, j->hidden, sizeof(float) * j->n_hidden));
        }
    }
    for (int i = 0, at = 0; !j->rc && j->train && i < tubelet_model_n_tensors(j->m); i++) {
        tubelet_shape sh; /* the last step's gradients into hidden */
        tubelet_model_tensor(j->m, i, &sh, NULL);
        memcpy(j->hidden + at, tubelet_grads_at(g, i),
               sizeof(float) * (size_t)tubelet_shape_numel(&sh));
        at += (int)tubelet_shape_numel(&sh);
    }
    tubelet_grads_free(g);
    tubelet_state_free(s);
    free(l), free(h);
    return NULL;
}

static void check_fixture(const char *fixture, int train) {
    char dir[1024], err[512];
    snprintf(dir, sizeof dir, "%s/%s", parity_fixtures_dir(), fixture);
    npy_array x = {0}, y = {0};
    if (!parity_fixture_npy(fixture, "input.npy", &x)) return;
    tubelet_load_params lp = tubelet_load_default_params();
    lp.device = device, lp.n_threads = 1; /* each thread's own team of one */
    tubelet_model *m = NULL;
    int rc = tubelet_model_load(&m, dir, &lp, err, sizeof err);
    CHECK(!rc, "%s: %s", fixture, err);
    tubelet_state *s = NULL;
    if (!rc)
        rc = tubelet_state_new(&s, m, (int)x.shape[0], (int)x.shape[1], (int)x.shape[3],
                               (int)x.shape[4], err, sizeof err);
    CHECK(!rc, "%s: state: %s", fixture, err);
    if (rc) goto done;
    tubelet_shape ls, hs;
    tubelet_state_logits_shape(s, &ls), tubelet_state_hidden_shape(s, &hs);
    tubelet_state_free(s);
    if (train) { /* labels: class b % n for clip b */
        y.ndim = 1, y.shape[0] = x.shape[0];
        y.data = malloc(sizeof(int64_t) * (size_t)x.shape[0]);
        for (int64_t b = 0; b < x.shape[0]; b++) ((int64_t *)y.data)[b] = b % ls.dim[1];
    }
    job one = {m, &x, &y, train, NULL, NULL, 0, 0, 0, 0, 0, ""}, two[2];
    one.n_logits = (size_t)tubelet_shape_numel(&ls),
    one.n_hidden = (size_t)tubelet_shape_numel(&hs);
    if (train) /* hidden: every gradient instead */
        for (int i = 0; i < tubelet_model_n_tensors(m); i++) {
            tubelet_shape sh;
            tubelet_model_tensor(m, i, &sh, NULL);
            one.n_hidden += (size_t)tubelet_shape_numel(&sh);
        }
    one.logits = malloc(sizeof(float) * one.n_logits);
    one.hidden = malloc(sizeof(float) * one.n_hidden);
    run(&one); /* alone, on this thread */
    CHECK(!one.rc && one.same, "%s%s: one state: status %d (%s), passes the same: %d", fixture,
          train ? " (training)" : "", one.rc, one.err, one.same);
    pthread_t t[2];
    for (int i = 0; i < 2; i++) {
        two[i] = one;
        two[i].logits = malloc(sizeof(float) * one.n_logits);
        two[i].hidden = malloc(sizeof(float) * one.n_hidden);
        pthread_create(&t[i], NULL, run, &two[i]);
    }
    for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
    for (int i = 0; i < 2; i++) {
        CHECK(!two[i].rc, "%s%s: thread %d: status %d (%s)", fixture, train ? " (training)" : "", i,
              two[i].rc, two[i].err);
        CHECK(two[i].same && two[i].loss == one.loss &&
                  !memcmp(two[i].logits, one.logits, sizeof(float) * one.n_logits) &&
                  !memcmp(two[i].hidden, one.hidden, sizeof(float) * one.n_hidden),
              "%s%s: thread %d's outputs differ from one state's alone", fixture,
              train ? " (training)" : "", i);
        free(two[i].logits), free(two[i].hidden);
    }
    printf("test_threads (%s): %s%s: two states on two threads = one state alone\n", device,
           fixture, train ? ", a training step" : "");
    free(one.logits), free(one.hidden);
done:
    if (train) free(y.data);
    npy_free(&x);
    tubelet_model_free(m);
}

int main(int argc, char **argv) {
    check_cases(argc, argv);
    const char *dev = getenv("TUBELET_TEST_DEVICE");
    if (dev && *dev) device = dev;
    CASE(check_fixture("timesformer_divided", 0));
    CASE(check_fixture("vivit_m2_frames", 0));
    CASE(check_fixture("video_swin_shift", 0));
    CASE(check_fixture("timesformer_divided", 1));
    return check_done();
}
