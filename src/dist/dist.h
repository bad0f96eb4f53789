/* The processes of one job (Open MPI when built with `make MPI=1`, else one process): the few
 * collectives data-parallel training and sharded inference need. Every call is collective: all
 * ranks make it, in the same order. */
#ifndef TB_DIST_H
#define TB_DIST_H

#include <stddef.h>
#include <stdint.h>

#include "../common.h"
#include "tubelet_train.h"

int tb_dist_rank(const tubelet_dist *d); /* 0 for NULL */
int tb_dist_size(const tubelet_dist *d); /* 1 for NULL */
/* In-place sum over the ranks (the small agreements: flags, losses, counts). */
int tb_dist_sum_f64(tubelet_dist *d, double *x, size_t n, tb_err *e);
/* Sums started without waiting (MPI_Iallreduce), in place, f32 or (bf16 = 1) bf16 through
 * scratch (n uint16_t, untouched until the wait): x rounded to bf16 (to nearest even) for the
 * wire and each partial sum, and back to f32 after the wait. Every rank starts the same sums in the same
 * order. tb_dist_progress lets MPI move them on (Open MPI progresses non-blocking collectives
 * only inside MPI calls); tb_dist_wait finishes them all, the bf16 ones copied back to f32. */
typedef struct tb_dist_pending tb_dist_pending;
int tb_dist_pending_new(tb_dist_pending **p, int capacity, tb_err *e);
void tb_dist_pending_free(tb_dist_pending *p);
int tb_dist_isum(tubelet_dist *d, tb_dist_pending *p, float *x, uint16_t *scratch, size_t n,
                 int bf16, tb_err *e);
void tb_dist_progress(tb_dist_pending *p);
int tb_dist_wait(tb_dist_pending *p, tb_err *e);
/* Rank 0's n bytes to every rank. */
int tb_dist_bcast(tubelet_dist *d, void *x, size_t n, tb_err *e);
/* Every rank's n_i bytes, concatenated in rank order at rank 0 (*out malloc'd there, NULL
 * elsewhere). */
int tb_dist_gather(tubelet_dist *d, const void *x, size_t n, void **out, size_t *out_n, tb_err *e);

#endif
