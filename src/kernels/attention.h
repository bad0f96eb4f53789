/* Multi-head scaled dot-product attention over groups of tokens — the one operation behind every
 * attention scheme of the papers. A grouping says which rows of the token matrix attend to each
 * other: all tokens of a clip (joint space-time), the tokens of one frame (space), the tokens of
 * one spatial position (time), and later rows, columns and windows. */
#ifndef TB_ATTENTION_H
#define TB_ATTENTION_H

#include <stdint.h>

#include "../common.h"

/* The members of all groups are listed group after group: group g is members [first(g),
 * first(g) + size(g)), member i is row rows[i] (or row i when rows is NULL). Groups of one
 * length (start NULL): first(g) = g L. Groups of several lengths (TimeSformer's local and
 * strided windows over an odd grid): start holds n_groups + 1 offsets and group_len is the
 * longest. */
typedef struct tb_grouping {
    int64_t n_groups, group_len;
    const int32_t *rows;  /* row of each member; NULL: member i is row i */
    const int64_t *start; /* NULL: every group has group_len members; else first members */
    /* Cross-attention: the keys and values of group g are the members of kv's group g (kv has
     * n_groups groups of its own lengths, rows of k and v), the queries this grouping's; NULL:
     * self-attention, each group attends over itself. */
    const struct tb_grouping *kv;
} tb_grouping;

static inline int64_t tb_group_first(const tb_grouping *g, int64_t grp) {
    return g->start ? g->start[grp] : grp * g->group_len;
}
static inline int64_t tb_group_size(const tb_grouping *g, int64_t grp) {
    return g->start ? g->start[grp + 1] - g->start[grp] : g->group_len;
}
/* The grouping the keys and values of g are read by: g itself, or its kv. */
static inline const tb_grouping *tb_group_keys(const tb_grouping *g) { return g->kv ? g->kv : g; }
/* The longest group of queries or keys: what the scratch sizes are asked for. */
static inline int64_t tb_group_longest(const tb_grouping *g) {
    const int64_t k = tb_group_keys(g)->group_len;
    return k > g->group_len ? k : g->group_len;
}
/* Members of all groups together: the rows of the group-major outputs. */
static inline int64_t tb_group_members(const tb_grouping *g) {
    return g->start ? g->start[g->n_groups] : g->n_groups * g->group_len;
}
/* Row index of member j of group g. */
static inline int64_t tb_group_row(const tb_grouping *g, int64_t grp, int64_t j) {
    const int64_t i = tb_group_first(g, grp) + j;
    return g->rows ? g->rows[i] : i;
}

/* Dropout on the attention probabilities (training): P'_ij = P_ij m_ij / (1 - p), the softmax
 * normaliser taken from the undropped P. m_ij = keep(tb_hash(tb_hash(key, group * heads + head),
 * i), j) (ops.h) for query i and key j of the group, so the backward regenerates the forward's
 * mask. NULL or p = 0: no dropout, and the kernels run exactly as without it. */
typedef struct {
    float p;
    uint64_t key; /* of this step, layer and attention */
} tb_attn_dropout;

/* out (tb_group_members rows, group-major, row stride heads * head_dim) =
 *   softmax(Q K^T / sqrt(head_dim)) V per group and head, where Q is read from rows of q as the
 *   grouping says, K and V from rows of k and v as its keys' grouping says (tb_group_keys: g's kv
 *   for cross-attention, else g), all with row stride ld; head h uses columns [h hd, (h+1) hd).
 * scratch: tb_attention_scratch_floats(tb_group_longest(g), ...) floats. Score matrices are formed one query tile of one
 * (group, head) per thread at a time, never for all heads at once. */
void tb_attention_forward(float *out, const float *q, const float *k, const float *v, int64_t ld,
                          const tb_grouping *g, int heads, int head_dim, float *scratch,
                          int n_threads, const tb_attn_dropout *drop);
int64_t tb_attention_scratch_floats(int64_t group_len, int head_dim, int n_threads);

/* tb_attention_forward for inference in reduced precision: where this build has AVX512-BF16
 * and the CPU runs it faster than f32 FMA (tb_attention_has_bf16: not on AMX CPUs), the fused
 * kernel rounds Q (scaled), K, V and each chunk of probabilities to bf16 and multiplies them with
 * vdpbf16ps (f32 accumulation; scores, softmax and outputs f32): relative error ~2^-8. Groups of at
 * most 32 tokens, head sizes that are not a multiple of 16 and builds without the instructions
 * run the f32 kernels. Same scratch as tb_attention_forward; no dropout. */
void tb_attention_forward_bf16(float *out, const float *q, const float *k, const float *v,
                               int64_t ld, const tb_grouping *g, int heads, int head_dim,
                               float *scratch, int n_threads);
int tb_attention_has_bf16(void);
/* Which kernel tb_attention_forward_bf16 runs here, in words. */
const char *tb_attention_bf16_kernel(void);

/* Additive terms of the scores per group (Video Swin's windows: a learned relative-position bias
 * per head, and the masks that keep a shifted window's parts apart). For group g, head h:
 *   S_ij = q_i . k_j / sqrt(head_dim) + bias[(h L + i) L + j] + mask[(m(g) L + i) L + j],
 *   m(g) = mask_index ? mask_index[g % n_masks] : g % n_masks
 * (mask_index lets groups share masks: Video Swin's windows have at most 8 different ones.)
 * Groups of one length L (start NULL). Either table may be NULL; masked pairs carry a large
 * negative value (Swin's -100), so that no row is all -inf. dbias (backward only; NULL: not
 * wanted) accumulates dL/dbias, summed over the groups. */
typedef struct {
    const float *bias;  /* (heads, L, L) */
    const float *mask;  /* (n_masks, L, L) */
    int64_t n_masks;
    float *dbias;       /* (heads, L, L), added to */
    const int32_t *mask_index; /* (n_masks) rows of mask, or NULL */
} tb_attn_bias;

/* tb_attention_forward and tb_attention_backward with a bias. Both add the bias and mask rows to
 * the scores in the fused kernel (AVX-512 or AVX2 + FMA, head size a multiple of 16, groups of
 * more than 32: the forward to each key chunk's scores, the backward to each recomputed score
 * row) and to each query tile's scores in the GEMM-tile kernel otherwise. The backward runs one
 * thread per head, so that dbias has one writer per row. Same scratch sizes. TUBELET_ERR_ARG
 * for groups of several lengths and for cross-attention (the tables are L x L). */
int tb_attention_forward_biased(float *out, const float *q, const float *k, const float *v,
                                int64_t ld, const tb_grouping *g, int heads, int head_dim,
                                const tb_attn_bias *bias, float *scratch, int n_threads,
                                const tb_attn_dropout *drop);
int tb_attention_backward_biased(float *dq, float *dk, float *dv, int64_t ldd, const float *q,
                                 const float *k, const float *v, int64_t ld, const float *o,
                                 const float *dout, const tb_grouping *g, int heads,
                                 int head_dim, const tb_attn_bias *bias, float *scratch,
                                 int n_threads, const tb_attn_dropout *drop);

/* Backward of tb_attention_forward (with the same drop). o and dout: the forward's output and
 * its gradient (group-major, row stride heads * head_dim). Writes dq, dk, dv group-major (row
 * stride ldd): dq over the grouping's members, dk and dv over its keys' grouping's members (the
 * same rows without kv); the caller scatters them back to token rows (rows shared by several
 * groups add up). */
void tb_attention_backward(float *dq, float *dk, float *dv, int64_t ldd, const float *q,
                           const float *k, const float *v, int64_t ld, const float *o,
                           const float *dout, const tb_grouping *g, int heads, int head_dim,
                           float *scratch, int n_threads, const tb_attn_dropout *drop);
int64_t tb_attention_backward_scratch_floats(int64_t group_len, int head_dim, int n_threads);

/* The kernels behind tb_attention_backward, which picks per group: SMALL (direct loops, groups of
 * at most 32 tokens), FUSED (AVX-512 register tiles; head_dim a multiple of 16), GEMM (query
 * tiles through tb_gemm; any shape). Naming one forces it where it applies (SMALL only on small
 * groups, FUSED only with AVX-512 and head_dim % 16 == 0; GEMM elsewhere), so that tests and
 * benchmarks can compare them on the same input. */
typedef enum { TB_ATTN_AUTO, TB_ATTN_SMALL, TB_ATTN_FUSED, TB_ATTN_GEMM } tb_attn_kernel;
void tb_attention_backward_kernel(float *dq, float *dk, float *dv, int64_t ldd, const float *q,
                                  const float *k, const float *v, int64_t ld, const float *o,
                                  const float *dout, const tb_grouping *g, int heads, int head_dim,
                                  float *scratch, int n_threads, const tb_attn_dropout *drop,
                                  tb_attn_kernel kernel);
/* The kernel that runs on a group of L tokens when `kernel` is asked for (never AUTO). */
tb_attn_kernel tb_attention_backward_kernel_for(int64_t L, int head_dim, tb_attn_kernel kernel);
/* tb_attention_backward_biased with the kernel named (FUSED or GEMM; AUTO: FUSED where it
 * applies, GEMM for groups of at most 32, which SMALL does not cover with a bias). */
int tb_attention_backward_biased_kernel(float *dq, float *dk, float *dv, int64_t ldd,
                                        const float *q, const float *k, const float *v,
                                        int64_t ld, const float *o, const float *dout,
                                        const tb_grouping *g, int heads, int head_dim,
                                        const tb_attn_bias *bias, float *scratch, int n_threads,
                                        const tb_attn_dropout *drop, tb_attn_kernel kernel);

/* Plain references (whole score matrix per group and head, double accumulation) for tests. */
void tb_attention_ref(float *out, const float *q, const float *k, const float *v, int64_t ld,
                      const tb_grouping *g, int heads, int head_dim, const tb_attn_dropout *drop);
/* dq, dk, dv as tb_attention_backward writes them, from the equations (no recomputed O). */
void tb_attention_backward_ref(float *dq, float *dk, float *dv, int64_t ldd, const float *q,
                               const float *k, const float *v, int64_t ld, const float *dout,
                               const tb_grouping *g, int heads, int head_dim,
                               const tb_attn_dropout *drop);
/* The same with a bias (dbias accumulated when not NULL). */
void tb_attention_ref_biased(float *out, const float *q, const float *k, const float *v,
                             int64_t ld, const tb_grouping *g, int heads, int head_dim,
                             const tb_attn_bias *bias, const tb_attn_dropout *drop);
void tb_attention_backward_ref_biased(float *dq, float *dk, float *dv, int64_t ldd,
                                      const float *q, const float *k, const float *v, int64_t ld,
                                      const float *dout, const tb_grouping *g, int heads,
                                      int head_dim, const tb_attn_bias *bias,
                                      const tb_attn_dropout *drop);

#endif
