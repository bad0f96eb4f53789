/* The CUDA backend's training against the committed PyTorch gradients (make CUDA=1 or CUDA=emu
 * $(BUILD)/gpu/gpu_grads): for each fixture named on the command line (or every fixture of
 * tests/fixtures/grad_list.txt), forward, loss and backward on device "cuda", without and with
 * gradient checkpointing, and the loss and every parameter's gradient against PyTorch's with
 * test_grads' tolerances (grad_parity.h). $GPU_PARITY_DEVICE names another device (cpu: the
 * program's own check, on a machine without a GPU).
 *
 * First (without fixture names; --entries: those alone), the training entries the fixtures do not reach, each against the
 * CPU table's entry on the same random inputs: attention with dropout and its backward, with
 * Swin's bias, masks and bias gradient and over ragged groups; the cross-entropy with label
 * smoothing; dropout and drop path's draws (the same masks, bit for bit); the bias table's
 * gradient; the optimiser's sum of squares and AdamW update; a host pointer that no upload
 * covers refused (TUBELET_ERR_ARG), never copied. Then two training steps (forward, backward,
 * AdamW) on the device against the CPU's, which in the emulator must copy no weights or
 * gradients. */
#include <sys/mman.h>
#include <unistd.h>

#include "grad_parity.h"
#include "kernels/rope.h"
#include "kernels/backend.h"
#include "rng.h"
#include "train/optim.h"

static const char *device(void) {
    const char *d = getenv("GPU_PARITY_DEVICE");
    return d ? d : "cuda";
}

/* ---- entries against the CPU's ---- */
static tb_backend dbe; /* the device's backend, opened */
static const tb_backend cbe = {&tb_cpu_kernels, NULL}; /* the CPU's */
static uint64_t g_seed = 7;

static float *randoms(int64_t n, float scale) {
    float *x = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) x[i] = (float)(2 * tb_uniform01(&g_seed) - 1) * scale;
    return x;
}
/* the device's copy of n host floats, and the host's copy of n device floats */
static float *up(const float *h, int64_t n) {
    float *d = TB_RUN(&dbe, mem_alloc, sizeof(float) * (size_t)n);
    if (d && h) TB_RUN(&dbe, to_device, d, h, sizeof(float) * (size_t)n);
    return d;
}
/* A host table the device's entries read (a grouping's rows and starts, masks, indices) handed
 * to it as a plan's are (upload, once); share_grouping: a grouping's and its kv grouping's. */
static void share(const void *h, size_t bytes) {
    tb_err e = {{0}};
    const int rc = h && dbe.k->upload ? dbe.k->upload(dbe.ctx, h, bytes, &e) : TUBELET_OK;
    CHECK(!rc, "upload of a table: %s", e.msg);
}
static void unshare(const void *h) {
    if (h && dbe.k->release) dbe.k->release(dbe.ctx, h);
}
static void share_grouping(const tb_grouping *g) {
    for (; g; g = g->kv) {
        share(g->rows, sizeof(int32_t) * (size_t)tb_group_members(g));
        share(g->start, sizeof(int64_t) * (size_t)(g->n_groups + 1));
    }
}
static float *down(const float *d, int64_t n) {
    float *h = malloc(sizeof(float) * (size_t)n);
    TB_RUN(&dbe, to_host, h, d, sizeof(float) * (size_t)n);
    return h;
}
/* max |got - want| <= tol max(max |want|, 1e-3), the device copy got fetched and freed */
static void same(const char *what, float *got_dev, const float *want, int64_t n, double tol) {
    float *got = down(got_dev, n);
    const double err = check_max_abs_diff(got, want, (long)n), sc = check_max_abs(want, (long)n);
    CHECK(err <= tol * (sc > 1e-3 ? sc : 1e-3), "%s: max abs error %.3g (max |cpu| %.3g)", what,
          err, sc);
    printf("  %-44s max abs error %.2e of max %.2e\n", what, err, sc);
    free(got);
    TB_RUN(&dbe, mem_free, got_dev);
}

/* n floats that end where an unreadable page starts: reading past them faults (the masks a
 * backend copies must be the ones mask_index names, no more). */
static float *guarded(int64_t n, char **map, size_t *map_bytes) {
    const size_t page = (size_t)sysconf(_SC_PAGESIZE), bytes = sizeof(float) * (size_t)n;
    const size_t data = (bytes + page - 1) / page * page;
    char *m = mmap(NULL, data + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return NULL;
    mprotect(m + data, page, PROT_NONE);
    *map = m, *map_bytes = data + page;
    return (float *)(m + data - bytes);
}

/* Forward and backward of one grouping on both tables: q, k, v columns of one (rows, 3 D) matrix
 * as the models keep them; bias (heads, L, L) and two masks when biased, dbias compared too. With
 * mask_index (Swin's), each of the n_groups groups names one of the two masks. With g->kv
 * (cross-attention), dk and dv cover the kv grouping's members. */
static void attention_case(const char *name, const tb_grouping *g, int64_t rows, int heads, int hd,
                           int biased, float p, const int32_t *mask_index) {
    const tb_backend *cpu = &cbe;
    const int64_t D = (int64_t)heads * hd, ld = 3 * D, L = g->group_len, mem = tb_group_members(g);
    const int64_t memk = tb_group_members(tb_group_keys(g)), Ls = tb_group_longest(g);
    float *qkv = randoms(rows * ld, 1.5f), *dout = randoms(mem * D, 1.0f);
    float *bias = biased ? randoms(heads * L * L, 1.0f) : NULL;
    char *mask_map = NULL;
    size_t mask_map_bytes = 0;
    float *mask = biased ? guarded(2 * L * L, &mask_map, &mask_map_bytes) : NULL;
    const int64_t n_masks = mask_index ? g->n_groups : 2;
    for (int64_t i = 0; biased && i < 2 * L * L; i++) mask[i] = (i * 7919) % 5 == 0 ? -100.0f : 0;
    tb_attn_dropout drop = {p, 0x5eedull};
    float *out = calloc((size_t)(mem * D), sizeof(float)), *dq = calloc((size_t)(mem * D), 4);
    float *dkk = calloc((size_t)(memk * D), 4), *dv = calloc((size_t)(memk * D), 4);
    float *db = biased ? calloc((size_t)(heads * L * L), sizeof(float)) : NULL;
    float *scratch =
        malloc(sizeof(float) * (size_t)(TB_RUN(cpu, attention_scratch_floats, Ls, hd, 1) +
                                        TB_RUN(cpu, attention_backward_scratch_floats, Ls, hd, 1)));
    tb_attn_bias b = {bias, mask, n_masks, db, mask_index};
    int rc = TB_RUN(cpu, attention, out, qkv, qkv + D, qkv + 2 * D, ld, g, heads, hd,
                    biased ? &b : NULL, 0, scratch, 1, &drop);
    rc = rc ? rc
            : TB_RUN(cpu, attention_backward, dq, dkk, dv, D, qkv, qkv + D, qkv + 2 * D, ld, out,
                     dout, g, heads, hd, biased ? &b : NULL, scratch, 1, &drop);
    CHECK(!rc, "%s: the CPU's attention failed (%d)", name, rc);
    /* the device: the activations in its memory, the plan's tables (mask) uploaded */
    share(mask, sizeof(float) * 2 * (size_t)(L * L));
    float *qkv_d = up(qkv, rows * ld), *dout_d = up(dout, mem * D), *out_d = up(NULL, mem * D);
    float *dq_d = up(NULL, mem * D), *dk_d = up(NULL, memk * D), *dv_d = up(NULL, memk * D);
    tb_attn_bias bd = {biased ? up(bias, heads * L * L) : NULL, mask, n_masks,
                       biased ? up(NULL, heads * L * L) : NULL, mask_index};
    rc = TB_RUN(&dbe, attention, out_d, qkv_d, qkv_d + D, qkv_d + 2 * D, ld, g, heads, hd,
                biased ? &bd : NULL, 0, NULL, 1, &drop);
    rc = rc ? rc
            : TB_RUN(&dbe, attention_backward, dq_d, dk_d, dv_d, D, qkv_d, qkv_d + D, qkv_d + 2 * D,
                     ld, out_d, dout_d, g, heads, hd, biased ? &bd : NULL, NULL, 1, &drop);
    rc = rc ? rc : TB_RUN(&dbe, ctx_status, NULL);
    CHECK(!rc, "%s: the device's attention failed (%d)", name, rc);
    char what[128];
    const char *part[] = {"out", "dq", "dk", "dv", "dbias"};
    float *dev[] = {out_d, dq_d, dk_d, dv_d, (float *)bd.dbias}, *host[] = {out, dq, dkk, dv, db};
    for (int i = 0; i < (biased ? 5 : 4); i++) {
        snprintf(what, sizeof what, "%s: %s", name, part[i]);
        same(what, dev[i], host[i], i == 4 ? heads * L * L : i >= 2 ? memk * D : mem * D, 1e-4);
    }
    TB_RUN(&dbe, mem_free, qkv_d), TB_RUN(&dbe, mem_free, dout_d),
        TB_RUN(&dbe, mem_free, (float *)bd.bias);
    unshare(mask);
    if (mask_map) munmap(mask_map, mask_map_bytes);
    free(qkv), free(dout), free(bias), free(out), free(dq), free(dkk), free(dv);
    free(db), free(scratch);
}

/* bf16 inference's attention (no bias: on a GPU the tensor-core kernel where head_dim is a
 * multiple of 16) against the CPU's bf16 attention, which rounds the same values: q, k, v and the
 * probabilities. The two differ only where a probability rounds the other way (a sum's order, a
 * tile's running max), about 2^-9 relative of one term. */
static void attention_bf16_case(const char *name, const tb_grouping *g, int64_t rows, int heads,
                                int hd) {
    const tb_backend *cpu = &cbe;
    const int64_t D = (int64_t)heads * hd, ld = 3 * D, L = tb_group_longest(g),
                  mem = tb_group_members(g);
    float *qkv = randoms(rows * ld, 1.5f), *out = calloc((size_t)(mem * D), sizeof(float));
    float *scratch =
        malloc(sizeof(float) * (size_t)TB_RUN(cpu, attention_scratch_floats, L, hd, 1));
    int rc = TB_RUN(cpu, attention, out, qkv, qkv + D, qkv + 2 * D, ld, g, heads, hd, NULL, 1,
                    scratch, 1, NULL);
    CHECK(!rc, "%s: the CPU's attention failed (%d)", name, rc);
    float *qkv_d = up(qkv, rows * ld), *out_d = up(NULL, mem * D);
    rc = TB_RUN(&dbe, attention, out_d, qkv_d, qkv_d + D, qkv_d + 2 * D, ld, g, heads, hd, NULL, 1,
                NULL, 1, NULL);
    rc = rc ? rc : TB_RUN(&dbe, ctx_status, NULL);
    CHECK(!rc, "%s: the device's attention failed (%d)", name, rc);
    same(name, out_d, out, mem * D, 1e-2);
    TB_RUN(&dbe, mem_free, qkv_d);
    free(qkv), free(out), free(scratch);
}

/* The rotary positions (V-JEPA 2) forward and transpose on both tables, in place on q|k columns
 * of (rows, 3 D) rows: heads of 20 (3 x 6 + 2 unrotated) and 26, positions up to n_pos - 1. */
static void rope_case(const char *name, int64_t rows, int heads, int hd, int n_pos) {
    const int64_t D = (int64_t)heads * hd, ld = 3 * D;
    int32_t *pos = malloc(sizeof(int32_t) * 3 * (size_t)rows);
    for (int64_t i = 0; i < 3 * rows; i++) pos[i] = (int32_t)((i * 7 + i / 3) % n_pos);
    const int64_t ncs = tb_rope_table_floats(hd, n_pos);
    float *cs = malloc(sizeof(float) * (size_t)ncs);
    tb_rope_table(cs, hd, n_pos);
    share(pos, sizeof(int32_t) * 3 * (size_t)rows), share(cs, sizeof(float) * (size_t)ncs);
    for (int backward = 0; backward < 2; backward++) {
        float *x = randoms(rows * ld, 1.0f), *x_d = up(x, rows * ld);
        TB_RUN(&cbe, rope, x, ld, rows, pos, 2 * heads, hd, cs, ncs, backward);
        TB_RUN(&dbe, rope, x_d, ld, rows, pos, 2 * heads, hd, cs, ncs, backward);
        CHECK(!TB_RUN(&dbe, ctx_status, NULL), "%s: the device's rope failed", name);
        char what[96];
        snprintf(what, sizeof what, "%s %s", name, backward ? "backward" : "forward");
        same(what, x_d, x, rows * ld, 1e-6);
        free(x);
    }
    unshare(pos), unshare(cs);
    free(pos), free(cs);
}

/* An entry handed a host pointer that no upload covers (a LayerNorm weight here) refuses it: the
 * pass's status is TUBELET_ERR_ARG, no kernel runs (the output stays as it was) and nothing is
 * copied to the device. Uploaded, the same pointer is read through its copy. */
static void refusal_case(void) {
    const int64_t rows = 6, n = 40;
    float *x = randoms(rows * n, 2.0f), *w = randoms(n, 1.0f), *b = randoms(n, 1.0f);
    float *y = malloc(sizeof(float) * (size_t)(rows * n)), *zeros = calloc((size_t)(rows * n), 4);
    float *x_d = up(x, rows * n), *y_d = up(zeros, rows * n);
    TB_RUN(&dbe, layernorm, y_d, n, x_d, n, w, b, rows, n, 1e-5f);
    const int rc = TB_RUN(&dbe, ctx_status, NULL);
    CHECK(rc == TUBELET_ERR_ARG, "a host weight reached the device's layernorm: status %d, not "
          "TUBELET_ERR_ARG (%d)", rc, TUBELET_ERR_ARG);
    float *got = down(y_d, rows * n);
    CHECK(!memcmp(got, zeros, sizeof(float) * (size_t)(rows * n)),
          "the refused layernorm wrote its output");
    free(got);
    CHECK(TB_RUN(&dbe, ctx_status, NULL) == 0, "the refusal was reported twice");
    share(w, sizeof(float) * (size_t)n), share(b, sizeof(float) * (size_t)n);
    TB_RUN(&cbe, layernorm, y, n, x, n, w, b, rows, n, 1e-5f);
    TB_RUN(&dbe, layernorm, y_d, n, x_d, n, w, b, rows, n, 1e-5f);
    CHECK(TB_RUN(&dbe, ctx_status, NULL) == 0, "the uploaded weight was refused");
    same("layernorm: a host weight refused, then uploaded", y_d, y, rows * n, 1e-6);
    unshare(w), unshare(b);
    TB_RUN(&dbe, mem_free, x_d);
    free(x), free(w), free(b), free(y), free(zeros);
}

static void test_entries(void) {
    dbe.k = tb_backend_find(device());
    CHECK(dbe.k != NULL, "no device %s in this build", device());
    if (!dbe.k) return;
    tb_err e = {{0}};
    const int rc = dbe.k->open ? dbe.k->open(&dbe.ctx, &e) : TUBELET_OK;
    CHECK(!rc, "device %s: %s", device(), e.msg);
    if (rc) return;
    refusal_case();
    rope_case("rope: 2 heads of 20, 4 positions", 37, 2, 20, 4);
    rope_case("rope: 3 heads of 26, 9 positions", 50, 3, 26, 9);
    /* three groups of 12 member rows out of 40, permuted, as Swin's windows */
    int32_t rows[36];
    for (int i = 0; i < 36; i++) rows[i] = (i * 11 + 3) % 40;
    const tb_grouping win = {.n_groups = 3, .group_len = 12, .rows = rows};
    share_grouping(&win);
    attention_case("attention, bias, masks", &win, 40, 2, 16, 1, 0, NULL);
    attention_case("attention, bias, masks, dropout", &win, 40, 2, 16, 1, 0.3f, NULL);
    /* Swin's: one mask index per window (3 here), naming 2 masks */
    const int32_t mask_index[3] = {1, 0, 1};
    share(mask_index, sizeof mask_index);
    attention_case("attention, bias, indexed masks, dropout", &win, 40, 2, 16, 1, 0.3f,
                   mask_index);
    const int64_t start[] = {0, 5, 17, 20}; /* ragged: TimeSformer's windows over an odd grid */
    const tb_grouping ragged = {.n_groups = 3, .group_len = 12, .start = start};
    share_grouping(&ragged);
    attention_case("attention, ragged groups, dropout", &ragged, 20, 3, 8, 0, 0.25f, NULL);
    /* bf16: member rows, ragged groups, several query blocks and key tiles, head_dim 16 to 128
     * (the tensor cores), and 24 (the scalar kernel) */
    attention_bf16_case("attention bf16, rows, head_dim 16", &win, 40, 2, 16);
    attention_bf16_case("attention bf16, ragged, head_dim 32", &ragged, 20, 3, 32);
    const tb_grouping one70 = {.n_groups = 2, .group_len = 70},
                      one20 = {.n_groups = 1, .group_len = 20};
    attention_bf16_case("attention bf16, 2 x 70, head_dim 64", &one70, 140, 2, 64);
    attention_bf16_case("attention bf16, 20, head_dim 128", &one20, 20, 1, 128);
    attention_bf16_case("attention bf16, 2 x 70, head_dim 24", &one70, 140, 2, 24);
    /* cross-attention (a kv grouping): X-CLIP's prompt generator (contiguous groups, queries
     * and keys of other lengths, read from the same rows of the matrix), V-JEPA 2's pooler (one
     * query), and member rows with ragged groups on both sides */
    const tb_grouping keys49 = {.n_groups = 2, .group_len = 49};
    const tb_grouping texts5 = {.n_groups = 2, .group_len = 5, .kv = &keys49};
    attention_case("cross-attention 5 x 49", &texts5, 98, 2, 16, 0, 0, NULL);
    attention_case("cross-attention 5 x 49, dropout", &texts5, 98, 2, 16, 0, 0.3f, NULL);
    const tb_grouping keys70 = {.n_groups = 3, .group_len = 70};
    const tb_grouping pool1 = {.n_groups = 3, .group_len = 1, .kv = &keys70};
    attention_case("cross-attention 1 x 70 (pooler)", &pool1, 210, 3, 8, 0, 0, NULL);
    int32_t qrows[20], krows[80];
    for (int i = 0; i < 20; i++) qrows[i] = (i * 7 + 2) % 90;
    for (int i = 0; i < 80; i++) krows[i] = 89 - (i * 3) % 90;
    const int64_t qstart[] = {0, 3, 14, 20}, kstart[] = {0, 40, 47, 80};
    const tb_grouping kvr = {.n_groups = 3, .group_len = 40, .rows = krows, .start = kstart};
    const tb_grouping cr = {.n_groups = 3, .group_len = 11, .rows = qrows, .start = qstart,
                            .kv = &kvr};
    share_grouping(&cr);
    attention_case("cross-attention ragged, rows, dropout", &cr, 90, 2, 12, 0, 0.25f, NULL);
    attention_bf16_case("attention bf16, cross 5 x 49, head_dim 32", &texts5, 98, 2, 32);
    attention_bf16_case("attention bf16, cross ragged, rows, head_dim 64", &cr, 90, 1, 64);

    /* cross-entropy with label smoothing: the loss and dL/dlogits */
    const int64_t R = 5, C = 7, labels[5] = {0, 6, 3, 3, 1};
    float *lg = randoms(R * C, 4.0f), *lg_d = up(lg, R * C);
    const double lc = TB_RUN(&cbe, cross_entropy, lg, labels, R, C, 0.1);
    int64_t *labels_d = TB_RUN(&dbe, mem_alloc, sizeof labels); /* where the logits are */
    TB_RUN(&dbe, to_device, labels_d, labels, sizeof labels);
    const double lgpu = TB_RUN(&dbe, cross_entropy, lg_d, labels_d, R, C, 0.1);
    TB_RUN(&dbe, mem_free, labels_d);
    CHECK(fabs(lc - lgpu) <= 1e-9 * fabs(lc), "cross-entropy: %.12g, cpu %.12g", lgpu, lc);
    same("cross-entropy (label smoothing 0.1): dlogits", lg_d, lg, R * C, 1e-6);
    free(lg);

    /* dropout: the same mask, bit for bit */
    const int64_t n = 5000;
    float *x = randoms(n, 1.0f), *x_d = up(x, n);
    const tb_keep_rule r = tb_keep_rule_make(0.25f);
    TB_RUN(&cbe, dropout, x, n, 0xabcdefull, 17, r);
    TB_RUN(&dbe, dropout, x_d, n, 0xabcdefull, 17, r);
    same("dropout 0.25", x_d, x, n, 0);

    /* drop path's factors, both families' draws: the same, bit for bit */
    for (int hash = 0; hash < 2; hash++) {
        const tb_drop_draws d = {0x5eedull, (uint64_t)3 << 32, hash, 0.3};
        float *keep = malloc(sizeof(float) * 777), *keep_d = up(NULL, 777);
        TB_RUN(&cbe, draw_keep, keep, 777, d);
        TB_RUN(&dbe, draw_keep, keep_d, 777, d);
        same(hash ? "draw_keep 0.3 (tb_hash)" : "draw_keep 0.3 (tb_hash3)", keep_d, keep, 777, 0);
        free(keep);
    }

    /* the relative-position table's gradient: several pairs share a table row */
    const int64_t heads = 3, pairs = 144, trows = 23;
    int32_t rel[144];
    for (int i = 0; i < pairs; i++) rel[i] = (i * 37) % trows;
    share(rel, sizeof rel);
    float *dbias = randoms(heads * pairs, 1.0f), *dbias_d = up(dbias, heads * pairs);
    float *dt = randoms(trows * heads, 1.0f), *dt_d = up(dt, trows * heads);
    TB_RUN(&cbe, bias_lookup_backward, dt, dbias, rel, heads, pairs);
    TB_RUN(&dbe, bias_lookup_backward, dt_d, dbias_d, rel, heads, pairs);
    same("bias_lookup_backward", dt_d, dt, trows * heads, 1e-6);
    TB_RUN(&dbe, mem_free, dbias_d);

    /* the optimiser's: the global norm's sum of squares over buffers (one skipped), and AdamW on
     * an uploaded tensor (the device updates its copy), read back with download */
    const int64_t sn[3] = {3000, 37, 500};
    float *s0 = randoms(sn[0], 1.0f), *s2 = randoms(sn[2], 2.0f);
    const float *sc[3] = {s0, NULL, s2}, *sd[3] = {up(s0, sn[0]), NULL, up(s2, sn[2])};
    const double ssc = TB_RUN(&cbe, sum_squares, sc, sn, 3);
    const double ssd = TB_RUN(&dbe, sum_squares, sd, sn, 3);
    CHECK(fabs(ssd - ssc) <= 1e-12 * ssc, "sum_squares: %.15g, cpu %.15g", ssd, ssc);
    printf("  %-44s %.15g, cpu %.15g\n", "sum_squares (3 buffers, 1 skipped)", ssd, ssc);
    TB_RUN(&dbe, mem_free, (float *)sd[0]), TB_RUN(&dbe, mem_free, (float *)sd[2]);
    const int64_t an = 2000;
    float *aw = randoms(an, 0.5f), *ag = randoms(an, 0.1f), *am = randoms(an, 0.01f);
    float *av = randoms(an, 1e-3f), *awc = malloc(sizeof(float) * an);
    for (int64_t i = 0; i < an; i++) av[i] = fabsf(av[i]);
    memcpy(awc, aw, sizeof(float) * an);
    const int upl = dbe.k->upload && !dbe.k->upload(dbe.ctx, aw, sizeof(float) * an, &e);
    CHECK(upl || !dbe.k->upload, "adamw: upload: %s", e.msg);
    float *agd = up(ag, an), *amd = up(am, an), *avd = up(av, an);
    const tb_adamw_args aa = {1e-2, 0.05, 0.9, 0.999, 1e-8, 1 - 0.9 * 0.9, 1 - 0.999 * 0.999, 0.37};
    TB_RUN(&cbe, adamw, awc, ag, am, av, an, &aa);
    TB_RUN(&dbe, adamw, aw, agd, amd, avd, an, &aa);
    CHECK(!dbe.k->download || !dbe.k->download(dbe.ctx, aw, sizeof(float) * an, &e),
          "adamw: download: %s", e.msg);
    const double werr = check_max_abs_diff(aw, awc, (long)an);
    CHECK(werr <= 1e-6 * check_max_abs(awc, (long)an), "adamw: weights: max abs error %.3g",
          werr);
    printf("  %-44s max abs error %.2e\n", "adamw: weights (uploaded, downloaded)", werr);
    same("adamw: first moment", amd, am, an, 1e-6);
    same("adamw: second moment", avd, av, an, 1e-6);
    TB_RUN(&dbe, mem_free, agd);
    if (upl) dbe.k->release(dbe.ctx, aw);
    free(s0), free(s2), free(aw), free(ag), free(am), free(av), free(awc);
    CHECK(TB_RUN(&dbe, ctx_status, NULL) == 0, "the device reported a failure");
    free(x), free(dbias), free(dt);
    if (dbe.k->close) dbe.k->close(dbe.ctx);
}

/* ---- training steps: the optimiser where the weights and gradients are ---- */

/* The emulator's count of host-device copies so far (tests/cudaemu/emu.cc); NULL (a weak
 * symbol) in a build for a GPU. */
extern void tb_cudaemu_copies(long *h2d, long *h2d_bytes, long *d2h, long *d2h_bytes)
    __attribute__((weak));
/* ... and of the calls made on the default stream (each instance has its own stream). */
extern void tb_cudaemu_default_stream(long *calls) __attribute__((weak));

/* The optimiser state of o[1] (the device's, of model m) saved, loaded into a fresh optimiser and
 * saved again: the same bytes; and against o[0]'s (the CPU's), each moment to 1e-3 of its
 * tensor's largest (the gradients' tolerance). Files in dir, removed. */
static void moments_through_host(const char *dir, tb_adamw *const o[2], tubelet_model *m,
                                 const tb_adamw_params *ap) {
    char f[3][64];
    for (int k = 0; k < 3; k++) snprintf(f[k], sizeof f[k], "%s/opt%d.safetensors", dir, k);
    tb_err e = {{0}};
    tb_adamw *o2 = NULL;
    st_file *s[3] = {NULL, NULL, NULL};
    int rc = tb_adamw_save(o[0], f[0], &e);
    if (!rc) rc = tb_adamw_save(o[1], f[1], &e);
    if (!rc) rc = tb_adamw_new(&o2, m, ap, &e);
    if (!rc) rc = tb_adamw_load(o2, f[1], &e);
    if (!rc) rc = tb_adamw_save(o2, f[2], &e);
    for (int k = 0; k < 3 && !rc; k++) rc = st_open(&s[k], f[k], 0, &e);
    CHECK(!rc, "optimiser state through the host: %s", e.msg);
    for (int i = 0; !rc && i < st_count(s[1]); i++) {
        const st_tensor *a = st_at(s[1], i), *b = st_find(s[2], a->name),
                        *c = st_find(s[0], a->name);
        CHECK(b && c && b->nbytes == a->nbytes && !memcmp(a->data, b->data, a->nbytes),
              "optimiser state: %s changed through save and load", a->name);
        if (!c || c->dtype != ST_F32 || c->nbytes != a->nbytes) continue;
        double err_abs = 0, scale = 0;
        for (size_t j = 0; j < a->nbytes / 4; j++) {
            float x, y;
            memcpy(&x, (const char *)a->data + 4 * j, 4), memcpy(&y, (const char *)c->data + 4 * j, 4);
            err_abs = fmax(err_abs, fabs((double)x - y)), scale = fmax(scale, fabs((double)y));
        }
        CHECK(err_abs <= 1e-3 * scale, "optimiser state: %s: error %.3g of %.3g", a->name,
              err_abs, scale);
    }
    for (int k = 0; k < 3; k++) st_close(s[k]), remove(f[k]);
    tb_adamw_free(o2);
}

/* Two optimiser steps of two accumulated batches each of a small VideoMAE with `layers` blocks
 * (no dropout or drop path, whose draws would cross per block; no key bias, whose gradient is
 * rounding noise that AdamW's normalisation would blow up) on the device and on the CPU, AdamW
 * with clipping (these gradients exceed it), layer-wise and weight decay: the losses and norms
 * agree (1e-5, as the gradients' test), and every parameter's update to 1e-2 of its largest:
 * AdamW divides a gradient by its own size, so an element whose gradient is near zero magnifies
 * rounding (8e-4 seen in the emulator), while a wrong rate, decay or clip is off by 25 % or more.
 * In the emulator, copies gets the second step's host-device copies (count, bytes, each way).
 * Then the optimiser state through the host (moments_through_host). */
static void training_steps(int layers, long copies[4]) {
    char dir[] = "/tmp/gpu_grads_XXXXXX", path[64], err[1024];
    if (!mkdtemp(dir)) return;
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    fprintf(f, "{\"model_type\": \"videomae\", \"image_size\": 16, \"patch_size\": 8, "
               "\"num_frames\": 4, \"tubelet_size\": 2, \"hidden_size\": 16, "
               "\"num_hidden_layers\": %d, \"num_attention_heads\": 2, "
               "\"intermediate_size\": 32, \"use_mean_pooling\": true, "
               "\"id2label\": {\"0\": \"a\", \"1\": \"b\", \"2\": \"c\"}}",
            layers);
    fclose(f);
    const int B = 2, T = 4, S = 16;
    const int64_t np = (int64_t)B * T * 3 * S * S, labels[2][2] = {{0, 2}, {1, 1}};
    float *px[2] = {randoms(np, 1.0f), randoms(np, 1.0f)};
    const char *devs[2] = {"cpu", device()};
    tubelet_model *m[2] = {NULL, NULL};
    tubelet_grads *g[2] = {NULL, NULL};
    tubelet_state *s[2] = {NULL, NULL};
    tb_adamw *o[2] = {NULL, NULL};
    float **w0 = NULL, loss[2][4];
    double norm[2][2];
    int n = 0, rc = 0;
    tb_err e = {{0}};
    tb_adamw_params ap = tb_adamw_default_params();
    ap.lr = 1e-2, ap.layer_decay = 0.75, ap.clip_norm = 0.05, ap.total_steps = 10;
    for (int d = 0; d < 2 && !rc; d++) {
        tubelet_load_params lp = tubelet_load_default_params();
        lp.n_threads = 2, lp.device = devs[d], lp.random_init = 1, lp.seed = 3, lp.no_mmap = 1;
        rc = tubelet_model_load(&m[d], dir, &lp, err, sizeof err);
        if (!rc) rc = tubelet_grads_new(&g[d], m[d], err, sizeof err);
        if (!rc) rc = tubelet_state_new(&s[d], m[d], B, T, S, S, err, sizeof err);
        if (!rc) rc = tubelet_state_enable_training(s[d], 0, g[d], err, sizeof err);
        if (!rc && (rc = tb_adamw_new(&o[d], m[d], &ap, &e))) snprintf(err, sizeof err, "%s", e.msg);
        CHECK(!rc, "training steps on %s: %s", devs[d], err);
    }
    if (rc) goto done;
    n = tubelet_model_n_tensors(m[0]);
    w0 = calloc((size_t)n, sizeof *w0);
    for (int i = 0; i < n; i++) { /* the weights before: the same random ones on both */
        tubelet_shape sh;
        const float *a, *b;
        tubelet_model_tensor(m[0], i, &sh, &a), tubelet_model_tensor(m[1], i, NULL, &b);
        const size_t bytes = sizeof(float) * (size_t)tubelet_shape_numel(&sh);
        w0[i] = malloc(bytes), memcpy(w0[i], a, bytes);
        CHECK(!memcmp(a, b, bytes), "training steps: tensor %d starts different", i);
    }
    for (int d = 0; d < 2 && !rc; d++)
        for (int k = 0; k < 2 && !rc; k++) {
            long c0[4] = {0}, c1[4] = {0}, ds0 = 0, ds1 = 0;
            if (tb_cudaemu_copies) tb_cudaemu_copies(&c0[0], &c0[1], &c0[2], &c0[3]);
            if (tb_cudaemu_default_stream) tb_cudaemu_default_stream(&ds0);
            for (int b = 0; b < 2 && !rc; b++)
                rc = tubelet_forward_backward(s[d], px[b], labels[b], &loss[d][2 * k + b], NULL,
                                              err, sizeof err);
            if (!rc && (rc = tb_adamw_step(o[d], g[d], 0.5, &norm[d][k], &e)))
                snprintf(err, sizeof err, "%s", e.msg);
            tubelet_grads_zero(g[d]);
            if (tb_cudaemu_copies) tb_cudaemu_copies(&c1[0], &c1[1], &c1[2], &c1[3]);
            if (tb_cudaemu_default_stream) tb_cudaemu_default_stream(&ds1);
            for (int c = 0; c < 4 && d == 1 && k == 1; c++) copies[c] = c1[c] - c0[c];
            /* every launch, product, copy and set on the state's, the gradients' or the
             * optimiser's own stream: two states on two threads do not serialise there */
            CHECK(d == 0 || ds1 == ds0, "training steps on %s: step %d: %ld calls on the default "
                  "stream (TB_CUDAEMU_TRACE_DEFAULT=1 says where)", devs[d], k + 1, ds1 - ds0);
            CHECK(!rc, "training steps on %s: step %d: %s", devs[d], k + 1, err);
        }
    if (!rc && (rc = tb_adamw_weights_to_host(o[1], &e)))
        CHECK(0, "training steps: the weights back from %s: %s", devs[1], e.msg);
    if (rc) goto done;
    for (int k = 0; k < 4; k++)
        CHECK(fabsf(loss[1][k] - loss[0][k]) <= 1e-5f * fmaxf(1, fabsf(loss[0][k])),
              "training steps: loss %d: %.7f, cpu %.7f", k, loss[1][k], loss[0][k]);
    for (int k = 0; k < 2; k++)
        CHECK(fabs(norm[1][k] - norm[0][k]) <= 1e-5 * norm[0][k] && norm[0][k] > ap.clip_norm,
              "training steps: norm %d: %.9g, cpu %.9g (clipping at %g)", k, norm[1][k],
              norm[0][k], ap.clip_norm);
    double worst = 0;
    const char *worst_name = "";
    for (int i = 0; i < n; i++) { /* the update, device against CPU */
        tubelet_shape sh;
        const float *a, *b;
        const char *name = tubelet_model_tensor(m[0], i, &sh, &a);
        tubelet_model_tensor(m[1], i, NULL, &b);
        double err_abs = 0, scale = 0;
        for (int64_t j = 0; j < tubelet_shape_numel(&sh); j++) {
            err_abs = fmax(err_abs, fabs(((double)b[j] - w0[i][j]) - ((double)a[j] - w0[i][j])));
            scale = fmax(scale, fabs((double)a[j] - w0[i][j]));
        }
        CHECK(scale > 0 && err_abs <= 1e-2 * scale, "training steps: %s: update error %.3g of %.3g",
              name, err_abs, scale);
        if ((scale > 0 ? err_abs / scale : 1) > worst) worst_name = name;
        worst = fmax(worst, scale > 0 ? err_abs / scale : 1);
    }
    moments_through_host(dir, o, m[1], &ap);
    printf("  training steps, %d block%s: losses %.6f .. %.6f, norms %.4g %.4g (cpu %.4g %.4g), "
           "%d updates, worst relative error %.2e (%s)\n", layers, layers == 1 ? "" : "s",
           loss[1][0], loss[1][3], norm[1][0], norm[1][1], norm[0][0], norm[0][1], n, worst,
           worst_name);
done:
    for (int d = 0; d < 2; d++) {
        tb_adamw_free(o[d]);
        tubelet_state_free(s[d]);
        tubelet_grads_free(g[d]);
        tubelet_model_free(m[d]);
    }
    for (int i = 0; w0 && i < n; i++) free(w0[i]);
    free(w0), free(px[0]), free(px[1]);
    remove(path), rmdir(dir);
}

/* A training step on the device against the CPU's, at two depths; in the emulator, the step
 * copies no weights and no gradients between host and device: what it copies (the pixels and
 * labels in, the losses and the norm out) does not grow with the model. */
static void test_training_steps(void) {
    long one[4] = {0}, three[4] = {0};
    training_steps(1, one);
    training_steps(3, three);
    if (!tb_cudaemu_copies) return;
    printf("  a step's copies (1 block, 3 blocks): %ld / %ld host-to-device (%ld / %ld bytes), "
           "%ld / %ld device-to-host (%ld / %ld bytes)\n", one[0], three[0], one[1], three[1],
           one[2], three[2], one[3], three[3]);
    CHECK(!memcmp(one, three, sizeof one), "a training step's host-device copies grow with the "
          "model: weights or gradients cross");
}

static void each_fixture(const char *fixture, void *arg) {
    (void)arg;
    for (int ck = 0; ck < 2; ck++) grad_parity(fixture, ck, device());
}

int main(int argc, char **argv) {
    if (argc == 2 && !strcmp(argv[1], "--entries")) { /* those alone, and the training steps */
        test_entries();
        test_training_steps();
        return check_done();
    }
    if (argc > 1) {
        for (int i = 1; i < argc; i++) each_fixture(argv[i], NULL);
        return check_done();
    }
    test_entries();
    test_training_steps();
    parity_each_listed("grad_list.txt", each_fixture, NULL);
    return check_done();
}
