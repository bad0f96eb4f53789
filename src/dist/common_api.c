/* The public collectives (tubelet_train.h) over either implementation of dist.h. */
#include <stdio.h>

#include "dist.h"

int tubelet_dist_sum(tubelet_dist *d, double *x, size_t n, char *err, size_t errlen) {
    tb_err e = {{0}};
    int rc = tb_dist_sum_f64(d, x, n, &e);
    return tb_err_out(rc, &e, err, errlen);
}

int tubelet_dist_gather(tubelet_dist *d, const void *x, size_t n, void **out, size_t *out_n,
                        char *err, size_t errlen) {
    tb_err e = {{0}};
    int rc = tb_dist_gather(d, x, n, out, out_n, &e);
    return tb_err_out(rc, &e, err, errlen);
}

void tubelet_dist_share(const tubelet_dist *d, int n, int *first, int *count) {
    const int r = tb_dist_rank(d), N = tb_dist_size(d), q = n / N, extra = n % N;
    *first = r * q + (r < extra ? r : extra);
    *count = q + (r < extra);
}
