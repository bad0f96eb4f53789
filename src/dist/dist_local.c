/* One process: what the collectives do when the job is a single rank (built without MPI). */
#include <stdlib.h>
#include <string.h>

#include "dist.h"

struct tubelet_dist {
    int unused;
};

int tubelet_dist_init(tubelet_dist **out, int *argc, char ***argv, char *err, size_t errlen) {
    (void)argc, (void)argv, (void)err, (void)errlen;
    *out = calloc(1, sizeof **out);
    return *out ? TUBELET_OK : TUBELET_ERR_MEMORY;
}
void tubelet_dist_finalize(tubelet_dist *d) { free(d); }
int tubelet_dist_rank(const tubelet_dist *d) { return tb_dist_rank(d); }
int tubelet_dist_size(const tubelet_dist *d) { return tb_dist_size(d); }
int tubelet_dist_available(void) { return 0; }

int tb_dist_rank(const tubelet_dist *d) { return (void)d, 0; }
int tb_dist_size(const tubelet_dist *d) { return (void)d, 1; }
struct tb_dist_pending {
    int unused;
};
int tb_dist_pending_new(tb_dist_pending **p, int capacity, tb_err *e) {
    (void)capacity;
    *p = calloc(1, sizeof **p);
    return *p ? TUBELET_OK : tb_fail(e, TUBELET_ERR_MEMORY, "out of memory");
}
void tb_dist_pending_free(tb_dist_pending *p) { free(p); }
int tb_dist_isum(tubelet_dist *d, tb_dist_pending *p, float *x, uint16_t *scratch, size_t n,
                 int bf16, tb_err *e) {
    return (void)d, (void)p, (void)x, (void)scratch, (void)n, (void)bf16, (void)e, 0;
}
void tb_dist_progress(tb_dist_pending *p) { (void)p; }
int tb_dist_wait(tb_dist_pending *p, tb_err *e) { return (void)p, (void)e, 0; }

int tb_dist_sum_f64(tubelet_dist *d, double *x, size_t n, tb_err *e) { return (void)d, (void)x, (void)n, (void)e, 0; }
int tb_dist_bcast(tubelet_dist *d, void *x, size_t n, tb_err *e) { return (void)d, (void)x, (void)n, (void)e, 0; }
int tb_dist_gather(tubelet_dist *d, const void *x, size_t n, void **out, size_t *out_n, tb_err *e) {
    (void)d;
    *out = malloc(n ? n : 1), *out_n = n;
    if (!*out) return tb_fail(e, TUBELET_ERR_MEMORY, "out of memory");
    if (n) memcpy(*out, x, n);
    return TUBELET_OK;
}
