/* Open MPI (make MPI=1). Errors come back as return codes (MPI_ERRORS_RETURN on our own
 * communicator); a rank that dies makes mpirun stop the job and name it. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mpi.h>

#include "dist.h"

struct tubelet_dist {
    MPI_Comm comm;
    int rank, size, owns_mpi;
};

static int mpi_fail(tb_err *e, int code, const char *what) {
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(code, msg, &len);
    return tb_fail(e, TUBELET_ERR_IO, "MPI %s failed: %.*s", what, len, msg);
}

int tubelet_dist_init(tubelet_dist **out, int *argc, char ***argv, char *err, size_t errlen) {
    tb_err e = {{0}};
    int init = 0, rc;
    *out = calloc(1, sizeof **out);
    if (!*out) return TUBELET_ERR_MEMORY;
    MPI_Initialized(&init);
    if (!init && MPI_Init(argc, argv) != MPI_SUCCESS) {
        free(*out), *out = NULL;
        if (err && errlen) snprintf(err, errlen, "MPI_Init failed");
        return TUBELET_ERR_IO;
    }
    (*out)->owns_mpi = !init;
    if ((rc = MPI_Comm_dup(MPI_COMM_WORLD, &(*out)->comm)) != MPI_SUCCESS) {
        free(*out), *out = NULL;
        return tb_err_out(mpi_fail(&e, rc, "MPI_Comm_dup"), &e, err, errlen);
    }
    MPI_Comm_set_errhandler((*out)->comm, MPI_ERRORS_RETURN);
    MPI_Comm_rank((*out)->comm, &(*out)->rank);
    MPI_Comm_size((*out)->comm, &(*out)->size);
    return TUBELET_OK;
}

void tubelet_dist_finalize(tubelet_dist *d) {
    if (!d) return;
    MPI_Comm_free(&d->comm);
    if (d->owns_mpi) MPI_Finalize();
    free(d);
}

int tubelet_dist_rank(const tubelet_dist *d) { return tb_dist_rank(d); }
int tubelet_dist_size(const tubelet_dist *d) { return tb_dist_size(d); }
int tubelet_dist_available(void) { return 1; }
int tb_dist_rank(const tubelet_dist *d) { return d ? d->rank : 0; }
int tb_dist_size(const tubelet_dist *d) { return d ? d->size : 1; }

/* MPI counts are ints: large buffers go in chunks. */
static int sum(tubelet_dist *d, void *x, size_t n, MPI_Datatype t, size_t width, tb_err *e) {
    if (!d || d->size == 1) return TUBELET_OK;
    for (size_t at = 0; at < n;) {
        int k = n - at > (size_t)INT_MAX / 2 ? INT_MAX / 2 : (int)(n - at);
        int rc = MPI_Allreduce(MPI_IN_PLACE, (char *)x + at * width, k, t, MPI_SUM, d->comm);
        if (rc != MPI_SUCCESS) return mpi_fail(e, rc, "MPI_Allreduce");
        at += (size_t)k;
    }
    return TUBELET_OK;
}

int tb_dist_sum_f64(tubelet_dist *d, double *x, size_t n, tb_err *e) {
    return sum(d, x, n, MPI_DOUBLE, sizeof(double), e);
}

/* bf16 as the top half of an f32, rounded to nearest even (NaN kept NaN). */
static uint16_t to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
static float from_bf16(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* MPI has no bf16 type: a user operation on 16-bit words, each pair added in f32 and rounded. */
static void bf16_add(void *in, void *inout, int *len, MPI_Datatype *t) {
    (void)t;
    const uint16_t *a = in;
    uint16_t *b = inout;
    for (int i = 0; i < *len; i++) b[i] = to_bf16(from_bf16(a[i]) + from_bf16(b[i]));
}

struct tb_dist_pending {
    int n, cap;
    MPI_Request *req;
    struct { float *x; uint16_t *h; size_t n; } *bf16; /* to copy back after the wait */
    int n_bf16;
    MPI_Op op; /* the bf16 sum, made once */
};

int tb_dist_pending_new(tb_dist_pending **out, int cap, tb_err *e) {
    tb_dist_pending *p = calloc(1, sizeof *p);
    if (p) p->req = calloc((size_t)cap, sizeof *p->req), p->bf16 = calloc((size_t)cap, sizeof *p->bf16);
    if (!p || !p->req || !p->bf16) {
        tb_dist_pending_free(p);
        return tb_fail(e, TUBELET_ERR_MEMORY, "out of memory");
    }
    p->cap = cap, p->op = MPI_OP_NULL;
    *out = p;
    return TUBELET_OK;
}

void tb_dist_pending_free(tb_dist_pending *p) {
    if (!p) return;
    if (p->op != MPI_OP_NULL) MPI_Op_free(&p->op);
    free(p->req), free(p->bf16), free(p);
}

int tb_dist_isum(tubelet_dist *d, tb_dist_pending *p, float *x, uint16_t *h, size_t n, int bf16,
                 tb_err *e) {
    if (!d || d->size == 1) return TUBELET_OK;
    if (n > (size_t)INT_MAX / 2 || p->n == p->cap)
        return tb_fail(e, TUBELET_ERR_ARG, "tb_dist_isum: %zu values, %d of %d requests", n, p->n, p->cap);
    int rc;
    if (bf16) {
        if (p->op == MPI_OP_NULL && (rc = MPI_Op_create(bf16_add, 1, &p->op)) != MPI_SUCCESS)
            return mpi_fail(e, rc, "MPI_Op_create");
        for (size_t i = 0; i < n; i++) h[i] = to_bf16(x[i]);
        rc = MPI_Iallreduce(MPI_IN_PLACE, h, (int)n, MPI_UINT16_T, p->op, d->comm, &p->req[p->n]);
        p->bf16[p->n_bf16].x = x, p->bf16[p->n_bf16].h = h, p->bf16[p->n_bf16++].n = n;
    } else {
        rc = MPI_Iallreduce(MPI_IN_PLACE, x, (int)n, MPI_FLOAT, MPI_SUM, d->comm, &p->req[p->n]);
    }
    if (rc != MPI_SUCCESS) return mpi_fail(e, rc, "MPI_Iallreduce");
    p->n++;
    return TUBELET_OK;
}

void tb_dist_progress(tb_dist_pending *p) {
    int done;
    if (p && p->n) MPI_Testall(p->n, p->req, &done, MPI_STATUSES_IGNORE);
}

int tb_dist_wait(tb_dist_pending *p, tb_err *e) {
    if (!p || !p->n) return TUBELET_OK;
    int rc = MPI_Waitall(p->n, p->req, MPI_STATUSES_IGNORE);
    for (int k = 0; k < p->n_bf16; k++)
        for (size_t i = 0; i < p->bf16[k].n; i++) p->bf16[k].x[i] = from_bf16(p->bf16[k].h[i]);
    p->n = p->n_bf16 = 0;
    return rc == MPI_SUCCESS ? TUBELET_OK : mpi_fail(e, rc, "MPI_Waitall");
}

int tb_dist_bcast(tubelet_dist *d, void *x, size_t n, tb_err *e) {
    if (!d || d->size == 1) return TUBELET_OK;
    if (n > INT_MAX) return tb_fail(e, TUBELET_ERR_ARG, "broadcast of %zu bytes", n);
    int rc = MPI_Bcast(x, (int)n, MPI_BYTE, 0, d->comm);
    return rc == MPI_SUCCESS ? TUBELET_OK : mpi_fail(e, rc, "MPI_Bcast");
}

int tb_dist_gather(tubelet_dist *d, const void *x, size_t n, void **out, size_t *out_n, tb_err *e) {
    *out = NULL, *out_n = 0;
    if (!d || d->size == 1) {
        *out = malloc(n ? n : 1), *out_n = n;
        if (!*out) return tb_fail(e, TUBELET_ERR_MEMORY, "out of memory");
        if (n) memcpy(*out, x, n);
        return TUBELET_OK;
    }
    if (n > INT_MAX) return tb_fail(e, TUBELET_ERR_ARG, "gather of %zu bytes", n);
    int mine = (int)n, rc;
    int *counts = d->rank == 0 ? calloc((size_t)d->size, sizeof(int)) : NULL;
    int *displs = d->rank == 0 ? calloc((size_t)d->size, sizeof(int)) : NULL;
    if ((rc = MPI_Gather(&mine, 1, MPI_INT, counts, 1, MPI_INT, 0, d->comm)) != MPI_SUCCESS) {
        free(counts), free(displs);
        return mpi_fail(e, rc, "MPI_Gather");
    }
    size_t total = 0;
    for (int r = 0; d->rank == 0 && r < d->size; r++) displs[r] = (int)total, total += (size_t)counts[r];
    if (d->rank == 0) *out = malloc(total ? total : 1), *out_n = total;
    rc = MPI_Gatherv(x, mine, MPI_BYTE, *out, counts, displs, MPI_BYTE, 0, d->comm);
    free(counts), free(displs);
    if (rc != MPI_SUCCESS) {
        free(*out), *out = NULL;
        return mpi_fail(e, rc, "MPI_Gatherv");
    }
    return TUBELET_OK;
}
