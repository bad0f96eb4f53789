/* X-CLIP (Ni et al., ECCV 2022; transformers' XCLIPModel, model_type "xclip"; docs/zero-shot.md):
 * a video and texts in, their similarity out, with transformers' parameter names.
 *
 *   vision_model   CLIP's ViT over each frame (patch embedding without bias, cls token,
 *                  positions, pre_layernorm), each layer a cross-frame attention block:
 *                    m = message_fc(cls of each frame); m += message_attn(message_ln(m)) over
 *                    the clip's frames; the frame's tokens and its message token:
 *                    x += self_attn(layer_norm1(x)); the message token dropped;
 *                    x += mlp(layer_norm2(x))
 *                  post_layernorm of each frame's cls token, visual_projection
 *   mit            the multi-frame integration transformer: + position_embedding per frame,
 *                  CLIP encoder layers over the clip's frames, + its input, the mean over frames
 *                  = the video embedding
 *   text_model     CLIP's text transformer: token and position embeddings, causal layers,
 *                  final_layer_norm of the end-of-text token (the largest id, as transformers
 *                  pools), text_projection = the text embedding
 *   prompts        prompts_visual_layernorm of every frame's patch tokens, their mean over the
 *                  frames, @ prompts_visual_projection; prompts_generator: layernorm, then each
 *                  layer: t += cross_attn(norm1(t), visual); t += mlp(norm3(t)); the text
 *                  embedding += alpha t
 *   logits         both normalised, logit_scale.exp() times their dot products
 *
 * The model runs itself (family.h's tb_model_ops, as Video Swin) on the backend table's
 * operations: linear layers, LayerNorm, quick GELU (in the products' epilogue), row gathers and
 * scatters, and the one attention kernel: with a mask for the text's causal attention, and as
 * cross-attention (attention.h's kv grouping) for the prompt generator (each clip's texts the
 * queries, its patches the keys and values). Inference only. The text entries (tb_text_ops)
 * encode texts once (a label set is cached by the caller) and score a video against them. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <omp.h>

#include <cjson/cJSON.h>

#include "family.h"

/* X-CLIP's own config (tb_config.fam; XCLIPModel; docs/zero-shot.md): the fields of config.json's text_config, of the
 * multi-frame integration transformer (vision_config's mit_*) and of the prompt generator. The
 * vision tower's sizes are tb_config's own (hidden, layers, heads, intermediate, act, ln_eps,
 * image and patch, num_frames), read from vision_config. */
typedef struct {
    int projection_dim;
    int prompt_layers, prompt_heads;     /* prompt_layers, prompt_num_attention_heads */
    tb_act prompt_act;                   /* prompt_hidden_act */
    float prompt_eps;                    /* text_config's layer_norm_eps (the layers' norms) */
    int vocab, text_hidden, text_layers, text_heads, text_intermediate, text_positions;
    tb_act text_act;
    float text_eps;
    int mit_hidden, mit_layers, mit_heads, mit_intermediate;
} tb_xclip_config;

static inline tb_xclip_config *xclip_cfg(const tb_config *c) { return c->fam; }

#define MASKED (-1e30f) /* a masked pair's score: exp() of it is 0 */

/* ---- parameters ---- */

typedef struct {
    tb_lin q, k, v, o;
} xc_attn;

/* A CLIP encoder layer; the vision tower's also carry the message token's parts. */
typedef struct {
    tb_ln ln1, ln2;
    xc_attn at;
    tb_lin fc1, fc2;
    tb_lin msg_fc;
    tb_ln msg_ln;
    xc_attn msg;
} xc_layer;

typedef struct {
    tb_ln norm1, norm3;
    tb_lin q, k, v, proj, fc1, fc2;
} xc_prompt;

typedef struct {
    tb_lin patch;              /* vision_model.embeddings.patch_embedding (D, C, p, p), no bias */
    const float *cls, *vpos;   /* class_embedding (D), position_embedding (N + 1, D) */
    tb_ln pre, post;
    tb_lin vproj;              /* visual_projection (P, D) */
    const float *mit_pos;      /* mit.position_embedding (1, T, P) */
    tb_ln pv_ln;               /* prompts_visual_layernorm */
    tb_lin pv_proj;            /* prompts_visual_projection (D, P), transposed to (P, D) */
    tb_ln pg_ln;               /* prompts_generator.layernorm */
    const float *alpha;        /* prompts_generator.alpha (P) */
    const float *tok, *tpos;   /* text token (vocab, Dt) and position (positions, Dt) tables */
    tb_ln tfinal;
    tb_lin tproj;              /* text_projection (P, Dt) */
    const float *logit_scale;  /* () */
    xc_layer *vl, *ml, *tl;    /* vision, mit, text layers */
    xc_prompt *pl;
} xc_weights;

static int build_attn(tubelet_model *m, xc_attn *a, const char *pre, int D, int bias_qkv,
                      tb_err *e) {
    char p[160];
    int rc;
#define PRE(s) (snprintf(p, sizeof p, "%s%s", pre, s), p)
    if ((rc = tb_build_linear(m, &a->q, PRE("q_proj."), D, D, bias_qkv, e)) ||
        (rc = tb_build_linear(m, &a->k, PRE("k_proj."), D, D, bias_qkv, e)) ||
        (rc = tb_build_linear(m, &a->v, PRE("v_proj."), D, D, bias_qkv, e)))
        return rc;
    if (bias_qkv) return tb_build_linear(m, &a->o, PRE("out_proj."), D, D, 1, e);
    return tb_build_linear(m, &a->o, PRE("proj."), D, D, 1, e);
#undef PRE
}

static int build_layer(tubelet_model *m, xc_layer *l, const char *pre, int D, int I, float eps,
                       int message, tb_err *e) {
    char p[160];
    int rc;
#define PRE(s) (snprintf(p, sizeof p, "%s%s", pre, s), p)
    if ((rc = tb_build_layernorm(m, &l->ln1, PRE("layer_norm1."), D, eps, e)) ||
        (rc = build_attn(m, &l->at, PRE("self_attn."), D, 1, e)) ||
        (rc = tb_build_layernorm(m, &l->ln2, PRE("layer_norm2."), D, eps, e)) ||
        (rc = tb_build_linear(m, &l->fc1, PRE("mlp.fc1."), I, D, 1, e)) ||
        (rc = tb_build_linear(m, &l->fc2, PRE("mlp.fc2."), D, I, 1, e)))
        return rc;
    if (message &&
        ((rc = tb_build_linear(m, &l->msg_fc, PRE("message_fc."), D, D, 1, e)) ||
         (rc = tb_build_layernorm(m, &l->msg_ln, PRE("message_ln."), D, eps, e)) ||
         (rc = build_attn(m, &l->msg, PRE("message_attn."), D, 1, e))))
        return rc;
    return TUBELET_OK;
#undef PRE
}

static int xc_build(tubelet_model *m, tb_weightset *ws, tb_err *e) {
    const tb_config *c = &m->cfg;
    const tb_xclip_config *x = xclip_cfg(c);
    if (m->grad_of)
        return tb_fail(e, TUBELET_ERR_UNSUPPORTED, "%s: X-CLIP runs inference only (no "
                       "gradients)", m->source);
    const int D = c->hidden, P = x->projection_dim, Dt = x->text_hidden;
    const size_t n_layers = (size_t)(c->layers + x->mit_layers + x->text_layers);
    xc_weights *w = calloc(1, sizeof *w + sizeof(xc_layer) * n_layers +
                                  sizeof(xc_prompt) * (size_t)x->prompt_layers);
    if (!w) return tb_fail(e, TUBELET_ERR_MEMORY, "%s: out of memory", m->source);
    free(ws->fam);
    ws->fam = w;
    w->vl = (xc_layer *)(w + 1), w->ml = w->vl + c->layers, w->tl = w->ml + x->mit_layers;
    w->pl = (xc_prompt *)(w->tl + x->text_layers);
    const int64_t N = (int64_t)(c->image_h / c->patch_h) * (c->image_w / c->patch_w);
    const int64_t pshape[4] = {D, c->num_channels, c->patch_h, c->patch_w}, cshape[1] = {D},
                  vpshape[2] = {N + 1, D}, mshape[3] = {1, c->num_frames, P},
                  pvshape[2] = {D, P}, ashape[1] = {P}, tshape[2] = {x->vocab, Dt},
                  tpshape[2] = {x->text_positions, Dt};
    const float *pv = NULL;
    char pre[96];
    int rc;
    if ((rc = tb_param(m, "vision_model.embeddings.patch_embedding.weight", 4, pshape,
                       TB_INIT_NORMAL, &w->patch.w, e)) ||
        (rc = tb_param(m, "vision_model.embeddings.class_embedding", 1, cshape, TB_INIT_NORMAL,
                       &w->cls, e)) ||
        (rc = tb_param(m, "vision_model.embeddings.position_embedding.weight", 2, vpshape,
                       TB_INIT_NORMAL, &w->vpos, e)) ||
        (rc = tb_build_layernorm(m, &w->pre, "vision_model.pre_layernorm.", D, c->ln_eps, e)))
        return rc;
    for (int l = 0; l < c->layers; l++) {
        snprintf(pre, sizeof pre, "vision_model.encoder.layers.%d.", l);
        if ((rc = build_layer(m, &w->vl[l], pre, D, c->intermediate, c->ln_eps, 1, e))) return rc;
    }
    if ((rc = tb_build_layernorm(m, &w->post, "vision_model.post_layernorm.", D, c->ln_eps, e)) ||
        (rc = tb_build_linear(m, &w->vproj, "visual_projection.", P, D, 0, e)) ||
        (rc = tb_param(m, "mit.position_embedding", 3, mshape, TB_INIT_NORMAL, &w->mit_pos, e)))
        return rc;
    for (int l = 0; l < x->mit_layers; l++) {
        snprintf(pre, sizeof pre, "mit.encoder.layers.%d.", l);
        if ((rc = build_layer(m, &w->ml[l], pre, P, x->mit_intermediate, c->ln_eps, 0, e)))
            return rc;
    }
    if ((rc = tb_build_layernorm(m, &w->pv_ln, "prompts_visual_layernorm.", D, c->ln_eps, e)) ||
        (rc = tb_param(m, "prompts_visual_projection", 2, pvshape, TB_INIT_NORMAL, &pv, e)) ||
        (rc = tb_build_layernorm(m, &w->pg_ln, "prompts_generator.layernorm.", P, c->ln_eps, e)) ||
        (rc = tb_param(m, "prompts_generator.alpha", 1, ashape, TB_INIT_NORMAL, &w->alpha, e)))
        return rc;
    if (pv) { /* x @ W (D, P) as a linear layer: W^T (P, D), owned by the model */
        float *t = tb_model_alloc(m, (size_t)D * (size_t)P, e);
        if (!t) return TUBELET_ERR_MEMORY;
        for (int i = 0; i < D; i++)
            for (int j = 0; j < P; j++) t[(size_t)j * D + i] = pv[(size_t)i * P + j];
        w->pv_proj.w = t;
        if ((rc = tb_model_share(m, t, (size_t)D * (size_t)P, e))) return rc;
    }
    for (int l = 0; l < x->prompt_layers; l++) {
        xc_prompt *q = &w->pl[l];
        char p[160];
#define PRE(s) (snprintf(p, sizeof p, "prompts_generator.decoder.%d.%s", l, s), p)
        if ((rc = tb_build_layernorm(m, &q->norm1, PRE("norm1."), P, x->prompt_eps, e)) ||
            (rc = tb_build_layernorm(m, &q->norm3, PRE("norm3."), P, x->prompt_eps, e)) ||
            (rc = tb_build_linear(m, &q->q, PRE("cross_attn.q_proj."), P, P, 0, e)) ||
            (rc = tb_build_linear(m, &q->k, PRE("cross_attn.k_proj."), P, P, 0, e)) ||
            (rc = tb_build_linear(m, &q->v, PRE("cross_attn.v_proj."), P, P, 0, e)) ||
            (rc = tb_build_linear(m, &q->proj, PRE("cross_attn.proj."), P, P, 1, e)) ||
            (rc = tb_build_linear(m, &q->fc1, PRE("mlp.0."), 4 * P, P, 1, e)) ||
            (rc = tb_build_linear(m, &q->fc2, PRE("mlp.3."), P, 4 * P, 1, e)))
            return rc;
#undef PRE
    }
    if ((rc = tb_param(m, "text_model.embeddings.token_embedding.weight", 2, tshape,
                       TB_INIT_NORMAL, &w->tok, e)) ||
        (rc = tb_param(m, "text_model.embeddings.position_embedding.weight", 2, tpshape,
                       TB_INIT_NORMAL, &w->tpos, e)))
        return rc;
    for (int l = 0; l < x->text_layers; l++) {
        snprintf(pre, sizeof pre, "text_model.encoder.layers.%d.", l);
        if ((rc = build_layer(m, &w->tl[l], pre, Dt, x->text_intermediate, x->text_eps, 0, e)))
            return rc;
    }
    if ((rc = tb_build_layernorm(m, &w->tfinal, "text_model.final_layer_norm.", Dt, x->text_eps,
                                 e)) ||
        (rc = tb_build_linear(m, &w->tproj, "text_projection.", P, Dt, 0, e)))
        return rc;
    const int64_t scalar[1] = {1};
    return tb_param(m, "logit_scale", 0, scalar, TB_INIT_ZEROS, &w->logit_scale, e);
}

static const xc_weights *weights(const tubelet_model *m) { return m->w.fam; }

/* ---- one CLIP encoder layer over groups of L contiguous rows ---- */

/* Buffers a layer over R rows of width D (MLP width I) runs in. */
typedef struct {
    float *a, *qkv, *o, *mlp, *scratch, *mask;
} xc_bufs;

/* q, k, v of a (R rows of D) into qkv (R, 3D). */
static void project_qkv(const tb_backend *ops, tb_lowp_ctx *ctx, float *qkv, const float *a,
                        const xc_attn *at, int64_t R, int64_t D) {
    TB_RUN(ops, linear, ctx, qkv, 3 * D, a, &at->q, at->q.b, R, D, D, 0);
    TB_RUN(ops, linear, ctx, qkv + D, 3 * D, a, &at->k, at->k.b, R, D, D, 0);
    TB_RUN(ops, linear, ctx, qkv + 2 * D, 3 * D, a, &at->v, at->v.b, R, D, D, 0);
}

/* x (R = G L rows) += out_proj(attention(ln1(x))) over G groups of L rows (mask (L, L) or NULL);
 * then x += fc2(act(fc1(ln2(x)))) over the first mlp_rows of each group of L (all: L). Returns
 * the attention's status. */
static int clip_layer(const tb_backend *ops, tb_lowp_ctx *ctx, const xc_layer *w, float *x,
                      int64_t G, int64_t L, int64_t D, int64_t I, int heads, float eps, tb_act act,
                      const xc_bufs *b, const float *mask, int threads) {
    const int64_t R = G * L;
    TB_RUN(ops, layernorm, b->a, D, x, D, w->ln1.w, w->ln1.b, R, D, eps);
    project_qkv(ops, ctx, b->qkv, b->a, &w->at, R, D);
    const tb_grouping g = {.n_groups = G, .group_len = L};
    const tb_attn_bias ab = {NULL, mask, 1, NULL, NULL};
    const int rc = TB_RUN(ops, attention, b->o, b->qkv, b->qkv + D, b->qkv + 2 * D, 3 * D, &g,
                          heads, (int)(D / heads), mask ? &ab : NULL, 0, b->scratch, threads, NULL);
    TB_RUN(ops, linear, ctx, x, D, b->o, &w->at.o, w->at.o.b, R, D, D, 1);
    TB_RUN(ops, layernorm, b->a, D, x, D, w->ln2.w, w->ln2.b, R, D, eps);
    TB_RUN(ops, linear_act, ctx, b->mlp, b->a, &w->fc1, R, I, D, act);
    TB_RUN(ops, linear, ctx, x, D, b->mlp, &w->fc2, w->fc2.b, R, D, I, 1);
    return rc;
}

/* ---- the state: one video pass ---- */

typedef struct {
    int64_t BT, N, L;   /* frames in all, patches per frame, tokens per frame with the message */
    int64_t K;          /* C p p */
    float *patches, *emb, *xs;            /* (BT N, K), (BT N, D), (BT L, D) */
    xc_bufs vb;                           /* (BT L) rows of D, I */
    float *cls, *msg;                     /* (BT, D): each frame's cls row, its message token */
    xc_bufs mb;                           /* message attention: (BT) rows of D */
    float *feat, *mit;                    /* (BT, P): cls_features, the mit stream */
    xc_bufs tb;                           /* mit: (BT) rows of P, mit_intermediate */
    float *video;                         /* (B, P) video_embeds before normalising */
    float *patch_mean;                    /* (B N, D): normed patch tokens, mean over frames */
    float *visual;                        /* (B N, P): the prompt generator's normed visual */
    int64_t max_scratch;
} xc_state;

static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

static void xc_free_state(tubelet_state *s) {
    xc_state *v = s->fam;
    if (!v) return;
    free(v);
    s->fam = NULL;
}

static int threads(const tubelet_state *s) { return tb_state_threads(s); }

static int xc_plan(tubelet_state *s, tb_err *e) {
    tubelet_model *m = s->m;
    const tb_config *c = &m->cfg;
    const tb_xclip_config *x = xclip_cfg(c);
    if (s->T != c->num_frames)
        return tb_fail(e, TUBELET_ERR_SHAPE, "%s: X-CLIP's cross-frame attention runs over "
                       "vision_config.num_frames = %d frames; the input has %d", m->source,
                       c->num_frames, s->T);
    if (s->H != c->image_h || s->W != c->image_w)
        return tb_fail(e, TUBELET_ERR_SHAPE, "%s: the input's frames are %dx%d; X-CLIP's "
                       "positions are for vision_config.image_size %dx%d", m->source, s->H, s->W,
                       c->image_h, c->image_w);
    xc_state *v = calloc(1, sizeof *v);
    if (!v) return tb_fail(e, TUBELET_ERR_MEMORY, "out of memory");
    s->fam = v;
    const int64_t D = c->hidden, I = c->intermediate, P = x->projection_dim;
    s->grid_t = s->T, s->grid_h = s->H / c->patch_h, s->grid_w = s->W / c->patch_w;
    v->N = s->grid_h * s->grid_w, v->BT = (int64_t)s->B * s->T, v->L = v->N + 2;
    v->K = (int64_t)c->num_channels * c->patch_h * c->patch_w;
    s->n_patch = s->T * v->N;
    /* the shared view: vision_model's last_hidden_state, a sequence per frame */
    s->n_stages = 1;
    s->n_seq = v->BT, s->seq_len = v->N + 1, s->rows = v->BT * (v->N + 1);
    s->stages[0] = (tb_stage){NULL, s->n_seq, s->seq_len, s->rows};
    const int64_t BT = v->BT, VR = BT * v->L, MI = x->mit_intermediate;
    const int hd_v = (int)(D / c->heads), hd_m = (int)(P / x->mit_heads);
    v->max_scratch =
        max64(TB_RUN(&m->be, attention_scratch_floats, v->L, hd_v, s->max_threads),
              max64(TB_RUN(&m->be, attention_scratch_floats, s->T, hd_v, s->max_threads),
                    TB_RUN(&m->be, attention_scratch_floats, s->T, hd_m, s->max_threads)));
    float **ptr[] = {&v->patches, &v->emb, &v->xs, &v->vb.a, &v->vb.qkv, &v->vb.o, &v->vb.mlp,
                     &v->vb.scratch, &v->cls, &v->msg, &v->mb.a, &v->mb.qkv, &v->mb.o,
                     &v->feat, &v->mit, &v->tb.a, &v->tb.qkv, &v->tb.o, &v->tb.mlp, &v->video,
                     &v->patch_mean, &v->visual, &s->x, &s->pooled};
    const int64_t n[] = {BT * v->N * v->K, BT * v->N * D, VR * D, VR * D, VR * 3 * D, VR * D,
                         VR * I, v->max_scratch, BT * D, BT * D, BT * D, BT * 3 * D, BT * D,
                         BT * P, BT * P, BT * P, BT * 3 * P, BT * P, BT * MI, s->B * P,
                         s->B * v->N * D, s->B * v->N * P, s->rows * D, BT * D};
    size_t total = 0;
    for (size_t i = 0; i < sizeof n / sizeof *n; i++) total += ((size_t)n[i] + 15) & ~(size_t)15;
    s->arena = TB_RUN(&s->be, mem_alloc, sizeof(float) * total);
    if (!s->arena)
        return tb_fail(e, TUBELET_ERR_MEMORY, "out of memory: the activations need %.1f MB",
                       total * 4.0 / 1e6);
    s->arena_floats = total;
    float *p = s->arena;
    for (size_t i = 0; i < sizeof n / sizeof *n; i++) {
        *ptr[i] = p;
        p += ((size_t)n[i] + 15) & ~(size_t)15;
    }
    v->mb.scratch = v->tb.scratch = v->vb.scratch;
    s->stages[0].x = s->x;
    s->logits = s->pooled; /* tubelet_forward's "logits": the pooled output (xc_forward) */
    if (!m->packed && !m->mixed) return TUBELET_OK;
    const int64_t mk = max64(BT * v->N * v->K, max64(VR * I, s->B * v->N * D)),
                  nn = max64(3 * D, max64(I, max64(4 * P, MI))),
                  nk = max64(D * v->K, max64(D * I, max64(P * D, 4 * P * P)));
    return TB_RUN(&m->be, ctx_new, &s->lowp, m->pack, m->precision == TB_PREC_FP32 ? 0 : mk, nn,
                  max64(nk, P * MI), e);
}

/* Pixels (B, T, C, H, W) → a row per patch of each frame, as the Conv2d kernel (c, dy, dx). */
static void patchify(tubelet_state *s, xc_state *v, const float *pix) {
    const tb_config *c = &s->m->cfg;
    const tb_patch_geom g = {s->B, s->T, c->num_channels, s->H, s->W, 1, c->patch_h,
                             c->patch_w, s->T, s->grid_h, s->grid_w};
    TB_RUN(&s->be, patchify, v->patches, pix, &g);
}

/* One cross-frame attention block on v->xs (BT frames of L = N + 2 rows: cls, patches, message). */
static void vision_layer(tubelet_state *s, xc_state *v, const xc_layer *w) {
    const tb_backend *ops = &s->be;
    const tb_config *c = &s->m->cfg;
    const int64_t D = c->hidden, BT = v->BT, L = v->L;
    const float eps = c->ln_eps;
    /* the message tokens: message_fc of each frame's cls row, + attention over the clip */
    TB_RUN(ops, copy_block, v->cls, D, NULL, v->xs, L * D, NULL, BT, D);
    TB_RUN(ops, linear, s->lowp, v->msg, D, v->cls, &w->msg_fc, w->msg_fc.b, BT, D, D, 0);
    TB_RUN(ops, layernorm, v->mb.a, D, v->msg, D, w->msg_ln.w, w->msg_ln.b, BT, D, eps);
    project_qkv(ops, s->lowp, v->mb.qkv, v->mb.a, &w->msg, BT, D);
    const tb_grouping clips = {.n_groups = s->B, .group_len = s->T};
    tb_state_kernel_failed(s,
                           TB_RUN(ops, attention, v->mb.o, v->mb.qkv, v->mb.qkv + D,
                                  v->mb.qkv + 2 * D, 3 * D, &clips, c->heads, (int)(D / c->heads),
                                  NULL, 0, v->mb.scratch, threads(s), NULL),
                           "message attention");
    TB_RUN(ops, linear, s->lowp, v->msg, D, v->mb.o, &w->msg.o, w->msg.o.b, BT, D, D, 1);
    /* the message token is each frame's last row */
    TB_RUN(ops, copy_block, v->xs + (L - 1) * D, L * D, NULL, v->msg, D, NULL, BT, D);
    /* the frame's tokens and its message token; the MLP also runs on the message row, which
     * the next layer overwrites (transformers drops it before the MLP) */
    tb_state_kernel_failed(s, clip_layer(ops, s->lowp, w, v->xs, BT, L, D, c->intermediate,
                                         c->heads, eps, c->act, &v->vb, NULL, threads(s)),
                           "frame attention");
}

/* The vision tower, the mit and the prompt generator's visual input: v->video, v->visual, and
 * the last hidden state into s->x. */
static void video_forward(tubelet_state *s, const float *pix) {
    xc_state *v = s->fam;
    const tubelet_model *m = s->m;
    const tb_backend *ops = &s->be;
    const xc_weights *w = weights(m);
    const tb_config *c = &m->cfg;
    const tb_xclip_config *x = xclip_cfg(c);
    const int64_t D = c->hidden, P = x->projection_dim, N = v->N, L = v->L, BT = v->BT;
    omp_set_num_threads(threads(s));
    patchify(s, v, pix);
    TB_RUN(ops, linear, s->lowp, v->emb, D, v->patches, &w->patch, NULL, BT * N, D, v->K, 0);
    TB_RUN(ops, add_rows, v->xs, L * D, w->cls, 0, w->vpos, 0, NULL, NULL, 0, BT,
           D); /* cls + pos */
    for (int64_t f = 0; f < BT; f++) { /* patches + positions, pre_layernorm, no message yet */
        float *fr = v->xs + f * L * D;
        TB_RUN(ops, add_rows, fr + D, D, v->emb + f * N * D, D, w->vpos + D, D, NULL, NULL, 0, N,
               D);
        TB_RUN(ops, layernorm, fr, D, fr, D, w->pre.w, w->pre.b, N + 1, D, c->ln_eps);
        TB_RUN(ops, zero, fr + (L - 1) * D, D);
    }
    for (int l = 0; l < c->layers; l++) vision_layer(s, v, &w->vl[l]);
    /* last_hidden_state: the frames without message rows */
    TB_RUN(ops, copy_block, s->x, (N + 1) * D, NULL, v->xs, L * D, NULL, BT, (N + 1) * D);
    /* post_layernorm of the cls rows, visual_projection: cls_features */
    TB_RUN(ops, copy_block, v->cls, D, NULL, s->x, (N + 1) * D, NULL, BT, D);
    TB_RUN(ops, layernorm, s->pooled, D, v->cls, D, w->post.w, w->post.b, BT, D, c->ln_eps);
    TB_RUN(ops, linear, s->lowp, v->feat, P, s->pooled, &w->vproj, NULL, BT, P, D, 0);
    /* mit: + positions, its layers over the frames of each clip, + its input, mean */
    for (int64_t b = 0; b < s->B; b++)
        TB_RUN(ops, add_rows, v->mit + b * s->T * P, P, v->feat + b * s->T * P, P, w->mit_pos, P,
               NULL, NULL, 0, s->T, P);
    for (int l = 0; l < x->mit_layers; l++)
        tb_state_kernel_failed(s, clip_layer(ops, s->lowp, &w->ml[l], v->mit, s->B, s->T, P,
                                             x->mit_intermediate, x->mit_heads, c->ln_eps,
                                             c->act, &v->tb, NULL, threads(s)),
                               "mit attention");
    /* the mean of mit + feat over each clip's T frames with the sums in double: the mean of
     * the 2T rows [mit; feat] (tb.qkv holds 3 BT P floats), doubled (exactly) */
    float *both = v->tb.qkv;
    for (int64_t b = 0; b < s->B; b++) {
        TB_RUN(ops, copy, both + 2 * b * s->T * P, v->mit + b * s->T * P, s->T * P);
        TB_RUN(ops, copy, both + (2 * b + 1) * s->T * P, v->feat + b * s->T * P, s->T * P);
    }
    TB_RUN(ops, mean_rows, v->video, both, s->B, 2 * (int64_t)s->T, P);
    TB_RUN(ops, add_rows, v->video, P, v->video, P, v->video, P, NULL, NULL, 0, s->B, P);
    /* the patches: prompts_visual_layernorm, the mean over frames, the projection (the mean
     * commutes with the linear map), then the prompt generator's layernorm */
    for (int64_t f = 0; f < BT; f++)
        TB_RUN(ops, layernorm, v->vb.a + f * N * D, D, s->x + (f * (N + 1) + 1) * D, D, w->pv_ln.w,
               w->pv_ln.b, N, D, c->ln_eps);
    TB_RUN(ops, mean_rows, v->patch_mean, v->vb.a, s->B, s->T, N * D);
    TB_RUN(ops, linear, s->lowp, v->visual, P, v->patch_mean, &w->pv_proj, NULL, s->B * N, P, D, 0);
    TB_RUN(ops, layernorm, v->visual, P, v->visual, P, w->pg_ln.w, w->pg_ln.b, s->B * N, P,
           c->ln_eps);
}

/* No classifier (the labels are texts: tb_text_ops): the "logits" of tubelet_forward are the
 * vision tower's pooled output, each frame's post_layernorm'd cls token (B T, D), as for the
 * other families' models without a head. */
static const float *xc_forward(tubelet_state *s, const float *pix, float *logits) {
    (void)logits; /* s->logits is s->pooled (xc_plan), written by the vision tower */
    video_forward(s, pix);
    return s->x;
}

static int xc_hidden(tubelet_state *s, const float *pix, int layer, const float **hidden,
                     tb_err *e) {
    if (layer >= 0)
        return tb_fail(e, TUBELET_ERR_UNSUPPORTED, "per-block features of X-CLIP are not "
                       "supported (use layer -1: the vision tower's last hidden state)");
    *hidden = xc_forward(s, pix, NULL);
    return TUBELET_OK;
}

static int xc_levels(tubelet_state *s, const float *pix, int n_levels, const int *layers,
                     float *const *out, tb_err *e) {
    (void)s, (void)pix, (void)n_levels, (void)layers, (void)out;
    return tb_fail(e, TUBELET_ERR_UNSUPPORTED, "X-CLIP has no feature maps (its frames are "
                   "encoded one by one)");
}

static int xc_level_shape(const tubelet_state *s, int level, int64_t shape[5]) {
    (void)s, (void)level, (void)shape;
    return TUBELET_ERR_UNSUPPORTED;
}

static int xc_enable_training(tubelet_state *s, int checkpoint, tb_err *e) {
    (void)checkpoint;
    return tb_fail(e, TUBELET_ERR_UNSUPPORTED, "%s: X-CLIP runs inference only (training is not "
                   "supported)", s->m->source);
}

static void xc_backward(tubelet_state *s) { (void)s; }

/* the products of the video pass (the text tower and the transposed prompts_visual_projection
 * stay f32) */
static int xc_each_linear(tubelet_model *m, const tb_linear_visitor *v, void *job) {
    xc_weights *w = m->w.fam;
    const tb_config *c = &m->cfg;
    const int64_t D = c->hidden, I = c->intermediate, P = xclip_cfg(c)->projection_dim,
                  MI = xclip_cfg(c)->mit_intermediate;
    int rc = v->lin(job, NULL, &w->patch, D, (int64_t)c->num_channels * c->patch_h * c->patch_w);
    for (int l = 0; l < c->layers && !rc; l++) {
        xc_layer *y = &w->vl[l];
        tb_lin *sq[] = {&y->at.q, &y->at.k, &y->at.v, &y->at.o, &y->msg_fc, &y->msg.q,
                        &y->msg.k, &y->msg.v, &y->msg.o};
        for (size_t i = 0; i < sizeof sq / sizeof *sq && !rc; i++) rc = v->lin(job, NULL, sq[i], D, D);
        if (!rc) rc = v->lin(job, NULL, &y->fc1, I, D);
        if (!rc) rc = v->lin(job, NULL, &y->fc2, D, I);
    }
    if (!rc) rc = v->lin(job, NULL, &w->vproj, P, D);
    for (int l = 0; l < xclip_cfg(c)->mit_layers && !rc; l++) {
        xc_layer *y = &w->ml[l];
        tb_lin *sq[] = {&y->at.q, &y->at.k, &y->at.v, &y->at.o};
        for (size_t i = 0; i < 4 && !rc; i++) rc = v->lin(job, NULL, sq[i], P, P);
        if (!rc) rc = v->lin(job, NULL, &y->fc1, MI, P);
        if (!rc) rc = v->lin(job, NULL, &y->fc2, P, MI);
    }
    for (int l = 0; l < xclip_cfg(c)->prompt_layers && !rc; l++) {
        xc_prompt *q = &w->pl[l];
        tb_lin *sq[] = {&q->q, &q->k, &q->v, &q->proj};
        for (size_t i = 0; i < 4 && !rc; i++) rc = v->lin(job, NULL, sq[i], P, P);
        if (!rc) rc = v->lin(job, NULL, &q->fc1, 4 * P, P);
        if (!rc) rc = v->lin(job, NULL, &q->fc2, P, 4 * P);
    }
    return rc;
}

static double linear_floats(const tb_config *c) {
    const tb_xclip_config *x = xclip_cfg(c);
    const double D = c->hidden, I = c->intermediate, P = x->projection_dim, Dt = x->text_hidden;
    return D * c->num_channels * c->patch_h * c->patch_w + c->layers * (9 * D * D + 2 * D * I) +
           2 * P * D + x->mit_layers * (4 * P * P + 2 * P * x->mit_intermediate) +
           x->prompt_layers * 12 * P * P +
           x->text_layers * (4 * Dt * Dt + 2 * Dt * x->text_intermediate) + P * Dt;
}

static size_t xc_linear_bytes(const tubelet_model *m) {
    return (size_t)(4 * linear_floats(&m->cfg));
}

static const tb_model_ops xc_model = {
    .plan = xc_plan,
    .free_state = xc_free_state,
    .forward = xc_forward,
    .hidden = xc_hidden,
    .levels = xc_levels,
    .level_shape = xc_level_shape,
    .enable_training = xc_enable_training,
    .backward = xc_backward,
    .each_linear = xc_each_linear,
    .linear_bytes = xc_linear_bytes,
};

/* ---- the text entries ---- */

static void xc_dims(const tubelet_model *m, int *embed_dim, int *context) {
    if (embed_dim) *embed_dim = xclip_cfg(&m->cfg)->projection_dim;
    if (context) *context = xclip_cfg(&m->cfg)->text_positions;
}

static int xc_vocab_size(const tubelet_model *m) { return xclip_cfg(&m->cfg)->vocab; }

/* n texts' ids (n, ctx) → text_projection of the end-of-text token's state (n, P), text first
 * of them the first; the ids are checked. The causal
 * attention lets no token see a later one, so the layers run over the first L tokens only, L
 * the last pooled position + 1. */
static int encode_chunk(tubelet_model *m, const int32_t *ids, int n, int ctx, int first,
                        float *out, tb_err *e) {
    const tb_config *c = &m->cfg;
    const tb_xclip_config *x = xclip_cfg(c);
    const xc_weights *w = weights(m);
    const tb_backend *ops = &m->be;
    int64_t L = 1;
    int32_t *pos = malloc(sizeof(int32_t) * (size_t)n); /* then the pooled rows */
    if (!pos) return tb_fail(e, TUBELET_ERR_MEMORY, "out of memory");
    for (int i = 0; i < n; i++) {
        int64_t best = 0;
        for (int j = 0; j < ctx; j++) {
            const int32_t id = ids[(int64_t)i * ctx + j];
            if (id < 0 || id >= x->vocab) {
                free(pos);
                return tb_fail(e, TUBELET_ERR_ARG, "%s: text %d has token id %d at %d, outside "
                               "the vocabulary [0, %d)", m->source, first + i, (int)id, j,
                               x->vocab);
            }
            if (id > ids[(int64_t)i * ctx + best]) best = j; /* the first largest, as argmax */
        }
        pos[i] = (int32_t)best;
        L = max64(L, best + 1);
    }
    for (int i = 0; i < n; i++) pos[i] += (int32_t)(i * L);
    const int64_t D = x->text_hidden, I = x->text_intermediate, P = x->projection_dim, R = n * L;
    const int nt = m->n_threads > 0 ? m->n_threads : 1;
    const int64_t sc = TB_RUN(ops, attention_scratch_floats, L, (int)(D / x->text_heads), nt);
    /* the activations, then the causal mask, the pooled rows and the token ids copied there (the
     * kernels read only the backend's memory) */
    const int64_t acts = R * D * 6 + R * I + sc + n * D * 2 + n * P;
    float *h = TB_RUN(ops, mem_alloc, sizeof(float) * (size_t)(acts + L * L + n + n * ctx));
    float *mask = malloc(sizeof(float) * (size_t)(L * L)); /* made here, then copied */
    if (!h || !mask) {
        TB_RUN(ops, mem_free, h), free(mask), free(pos);
        return tb_fail(e, TUBELET_ERR_MEMORY, "out of memory encoding %d texts", n);
    }
    float *mask_d = h + acts;
    int32_t *pos_d = (int32_t *)(mask_d + L * L), *ids_d = pos_d + n;
    xc_bufs b = {h + R * D, h + 2 * R * D, h + 5 * R * D, h + 6 * R * D, h + 6 * R * D + R * I,
                 mask_d};
    float *pooled = h + 6 * R * D + R * I + sc, *normed = pooled + n * D, *proj = normed + n * D;
    for (int64_t i = 0; i < L; i++)
        for (int64_t j = 0; j < L; j++) mask[i * L + j] = j > i ? MASKED : 0.0f;
    TB_RUN(ops, to_device, mask_d, mask, sizeof(float) * (size_t)(L * L));
    TB_RUN(ops, to_device, pos_d, pos, sizeof(int32_t) * (size_t)n);
    TB_RUN(ops, to_device, ids_d, ids, sizeof(int32_t) * (size_t)(n * ctx));
    for (int i = 0; i < n; i++) /* the tokens' embeddings + positions */
        TB_RUN(ops, add_rows, h + i * L * D, D, w->tpos, D, w->tok, D, ids_d + (int64_t)i * ctx,
               NULL, 0, L, D);
    omp_set_num_threads(nt);
    int rc = TUBELET_OK;
    for (int l = 0; l < x->text_layers; l++) {
        const int r = clip_layer(ops, NULL, &w->tl[l], h, n, L, D, I, x->text_heads, x->text_eps,
                                 x->text_act, &b, b.mask, nt);
        if (r && !rc) rc = r;
    }
    TB_RUN(ops, gather_rows, pooled, h, pos_d, n, D, NULL, NULL, 1);
    TB_RUN(ops, layernorm, normed, D, pooled, D, w->tfinal.w, w->tfinal.b, n, D, x->text_eps);
    TB_RUN(ops, linear, NULL, proj, P, normed, &w->tproj, NULL, n, P, D, 0);
    TB_RUN(ops, to_host, out, proj, sizeof(float) * (size_t)(n * P));
    TB_RUN(ops, mem_free, h);
    free(mask), free(pos);
    if (rc)
        return tb_fail(e, rc, "%s: the %s kernels' causal attention failed (status %d)", m->source,
                       ops->k->name, rc);
    return TUBELET_OK;
}

/* Texts encoded at once: the activations of a label set of any size stay bounded. */
#define ENCODE_CHUNK 256

static int xc_encode(tubelet_model *m, const int32_t *ids, int n, int ctx, float *out,
                     tb_err *e) {
    const tb_xclip_config *x = xclip_cfg(&m->cfg);
    if (n < 1 || ctx < 1 || ctx > x->text_positions)
        return tb_fail(e, TUBELET_ERR_SHAPE, "%s: %d texts of %d tokens; X-CLIP reads 1 or more "
                       "texts of 1 to %d tokens (text_config.max_position_embeddings)", m->source,
                       n, ctx, x->text_positions);
    int rc = TUBELET_OK;
    for (int i = 0; i < n && !rc; i += ENCODE_CHUNK)
        rc = encode_chunk(m, ids + (int64_t)i * ctx, n - i < ENCODE_CHUNK ? n - i : ENCODE_CHUNK,
                          ctx, i, out + (int64_t)i * x->projection_dim, e);
    return rc;
}

/* Texts the prompt generator runs at once: they never interact (each attends to the clip's
 * patches only), so a label set of any size runs in chunks of bounded memory. */
#define TEXT_CHUNK 64

/* The prompt generator's keys and values: each layer's k_proj and v_proj of every clip's visual
 * tokens (B N rows of P each), kv[l] = (k, v). They do not depend on the texts, so they are
 * computed once per call, not per chunk of texts. */
static void prompt_keys(tubelet_state *s, float *kv) {
    const tb_xclip_config *x = xclip_cfg(&s->m->cfg);
    const xc_weights *w = weights(s->m);
    const xc_state *v = s->fam;
    const int64_t P = x->projection_dim, BN = s->B * v->N;
    for (int l = 0; l < x->prompt_layers; l++) {
        const xc_prompt *q = &w->pl[l];
        float *k = kv + 2 * l * BN * P;
        TB_RUN(&s->be, linear, s->lowp, k, P, v->visual, &q->k, NULL, BN, P, P, 0);
        TB_RUN(&s->be, linear, s->lowp, k + BN * P, P, v->visual, &q->v, NULL, BN, P, P, 0);
    }
}

/* The prompt generator over texts t (B clips x cn texts, the clip's rows together) against the
 * clips' visual tokens, in place (then t = the generator's output before alpha). The cross
 * attention is the kernel's: the queries of group b are clip b's cn texts (q: B cn rows), its
 * keys and values clip b's N visual tokens (kv from prompt_keys: B N rows). */
static void prompt_layers(tubelet_state *s, float *t, int64_t cn, float *a, float *qb, float *o,
                          float *mlp, const float *kv, float *scratch) {
    const tubelet_model *m = s->m;
    const tb_xclip_config *x = xclip_cfg(&m->cfg);
    const xc_weights *w = weights(m);
    const tb_backend *ops = &s->be;
    const xc_state *v = s->fam;
    const int64_t P = x->projection_dim, N = v->N, B = s->B;
    const tb_grouping keys = {.n_groups = B, .group_len = N};
    const tb_grouping g = {.n_groups = B, .group_len = cn, .kv = &keys};
    for (int l = 0; l < x->prompt_layers; l++) {
        const xc_prompt *q = &w->pl[l];
        const float *k = kv + 2 * l * B * N * P;
        TB_RUN(ops, layernorm, a, P, t, P, q->norm1.w, q->norm1.b, B * cn, P, x->prompt_eps);
        TB_RUN(ops, linear, s->lowp, qb, P, a, &q->q, NULL, B * cn, P, P, 0);
        tb_state_kernel_failed(s,
                               TB_RUN(ops, attention, o, qb, k, k + B * N * P, P, &g,
                                      x->prompt_heads, (int)(P / x->prompt_heads), NULL, 0,
                                      scratch, threads(s), NULL),
                               "prompt cross attention");
        TB_RUN(ops, linear, s->lowp, t, P, o, &q->proj, q->proj.b, B * cn, P, P, 1);
        TB_RUN(ops, layernorm, a, P, t, P, q->norm3.w, q->norm3.b, B * cn, P, x->prompt_eps);
        TB_RUN(ops, linear_act, s->lowp, mlp, a, &q->fc1, B * cn, 4 * P, P, x->prompt_act);
        TB_RUN(ops, linear, s->lowp, t, P, mlp, &q->fc2, q->fc2.b, B * cn, P, 4 * P, 1);
    }
}

/* The video pass, the prompt generator over each clip's n texts, the logits. */
static int xc_logits(tubelet_state *s, const float *pix, const float *text, int n, float *logits,
                     float *video, float *text_out, tb_err *e) {
    tubelet_model *m = s->m;
    const tb_xclip_config *x = xclip_cfg(&m->cfg);
    const xc_weights *w = weights(m);
    xc_state *v = s->fam;
    const int64_t P = x->projection_dim, N = v->N, B = s->B;
    const int64_t CH = n < TEXT_CHUNK ? n : TEXT_CHUNK, KV = 2 * (int64_t)x->prompt_layers * B * N;
    const int64_t sc = TB_RUN(&m->be, attention_scratch_floats, max64(CH, N),
                              (int)(P / x->prompt_heads), s->max_threads);
    const tb_backend *ops = &s->be;
    float *h = TB_RUN(ops, mem_alloc,
                      sizeof(float) * (size_t)(B * CH * P * 8 + KV * P + sc + CH * P + B * n));
    if (!h) return tb_fail(e, TUBELET_ERR_MEMORY, "out of memory scoring %d texts", n);
    float *t = h, *a = t + B * CH * P, *mlp = a + B * CH * P, *qb = mlp + B * CH * 4 * P,
          *o = qb + B * CH * P, *kv = o + B * CH * P, *scratch = kv + KV * P, *t0 = scratch + sc,
          *lg = t0 + CH * P;
    video_forward(s, pix);
    omp_set_num_threads(threads(s));
    TB_RUN(ops, normalize_rows, v->video, B, P);
    prompt_keys(s, kv);
    const float scale = expf(*w->logit_scale);
    for (int64_t c0 = 0; c0 < n; c0 += CH) {
        const int64_t cn = n - c0 < CH ? n - c0 : CH;
        TB_RUN(ops, to_device, t0, text + c0 * P, sizeof(float) * (size_t)(cn * P));
        for (int64_t b = 0; b < B; b++) TB_RUN(ops, copy, t + b * cn * P, t0, cn * P);
        prompt_layers(s, t, cn, a, qb, o, mlp, kv, scratch);
        /* text + alpha * prompt, normalised; the logits against the clip's video embedding */
        TB_RUN(ops, scale_cols, t, w->alpha, B * cn, P);
        for (int64_t b = 0; b < B; b++)
            TB_RUN(ops, add_rows, t + b * cn * P, P, t0, P, t + b * cn * P, P, NULL, NULL, 0, cn,
                   P);
        TB_RUN(ops, normalize_rows, t, B * cn, P);
        for (int64_t b = 0; b < B; b++) {
            TB_RUN(ops, row_dots, lg + b * n + c0, v->video + b * P, 0, t + b * cn * P, P, cn, P,
                   scale);
            if (text_out)
                TB_RUN(ops, to_host, text_out + (b * n + c0) * P, t + b * cn * P,
                       sizeof(float) * (size_t)(cn * P));
        }
    }
    TB_RUN(ops, to_host, logits, lg, sizeof(float) * (size_t)(B * n));
    if (video) TB_RUN(ops, to_host, video, v->video, sizeof(float) * (size_t)(B * P));
    TB_RUN(ops, mem_free, h);
    return TUBELET_OK;
}

/* XCLIPModel.get_video_features: the MIT's mean, not normalised */
static void xc_encode_video(tubelet_state *s, const float *pix, float *video) {
    video_forward(s, pix);
    TB_RUN(&s->be, to_host, video, ((xc_state *)s->fam)->video,
           sizeof(float) * (size_t)(s->B * xclip_cfg(&s->m->cfg)->projection_dim));
}

static const tb_text_ops xc_text = {
    .dims = xc_dims,
    .vocab_size = xc_vocab_size,
    .encode = xc_encode,
    .logits = xc_logits,
    .encode_video = xc_encode_video,
};

/* ---- the shared entries that X-CLIP's own pass makes moot ---- */

static double xc_flop(const tb_config *c, int T, int H, int W) {
    const tb_xclip_config *x = xclip_cfg(c);
    const double D = c->hidden, I = c->intermediate, P = x->projection_dim;
    const double N = (double)(H / c->patch_h) * (W / c->patch_w), L = N + 2, BT = T;
    double f = 2 * BT * N * D * c->num_channels * c->patch_h * c->patch_w;
    f += c->layers * BT * (2 * 4 * D * D + 4 * T * D + 2 * L * 4 * D * D + 4 * L * L * D +
                           4 * L * D * I);
    f += 2 * BT * D * P + x->mit_layers * (2 * BT * 4 * P * P + 4 * T * BT * P +
                                           4 * BT * P * x->mit_intermediate);
    f += 2 * N * D * P;
    return f;
}

static const char *xc_variant(const tb_config *c) {
    (void)c;
    return "cross-frame attention, text prompts";
}

static int xc_sequences(const tb_config *c, int64_t B, int64_t gt, int64_t N, tb_stage st[2]) {
    (void)c;
    return tb_sequences_per_frame(B, gt, N, st);
}

static int64_t xc_token_row(const tubelet_state *s, int64_t b, int64_t it, int64_t iy,
                            int64_t ix) {
    return (b * s->grid_t + it) * s->seq_len + 1 + iy * s->grid_w + ix;
}

/* ---- config.json: XCLIPConfig with its text_config and vision_config ---- */

static const char *const xclip_keys[] = {
    "text_config", "vision_config", "image_size", "projection_dim", "prompt_layers", "prompt_alpha",
    "prompt_hidden_act", "prompt_num_attention_heads", "prompt_attention_dropout",
    "prompt_projection_dropout", "logit_scale_init_value", "initializer_factor", NULL};

/* XCLIPConfig's defaults (microsoft/xclip-base-patch32) */
static void xc_defaults(tb_config *c) {
    c->num_frames = 8, c->tubelet_t = 1, c->patch_h = c->patch_w = 32;
    c->hidden = 768, c->layers = 12, c->heads = 12, c->intermediate = 3072;
    c->act = TB_ACT_QUICK_GELU, c->ln_eps = 1e-5f, c->cls_token = 1, c->num_labels = 0;
    *xclip_cfg(c) = (tb_xclip_config){512, 2, 8, TB_ACT_QUICK_GELU, 1e-5f, 49408, 512, 12, 8, 2048,
                                 77, TB_ACT_QUICK_GELU, 1e-5f, 512, 1, 8, 2048};
}

static int read_act(const cJSON *j, const char *key, tb_act *out, const char *path, tb_err *e) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    if (!v || cJSON_IsNull(v)) return TUBELET_OK;
    const int a = cJSON_IsString(v) ? tb_act_parse(v->valuestring) : -1;
    if (a < 0)
        return tb_fail(e, TUBELET_ERR_CONFIG, "%s: %s %.64s is not supported (use gelu, gelu_new, "
                       "quick_gelu, relu or silu)", path, key,
                       cJSON_IsString(v) ? v->valuestring : "(not a string)");
    *out = (tb_act)a;
    return TUBELET_OK;
}

static int read_eps(const cJSON *j, float *out, const char *path, tb_err *e) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, "layer_norm_eps");
    if (!v || cJSON_IsNull(v)) return TUBELET_OK;
    if (!cJSON_IsNumber(v) || !(v->valuedouble >= 1e-30) || v->valuedouble > 1)
        return tb_fail(e, TUBELET_ERR_CONFIG, "%s: layer_norm_eps must be a number in [1e-30, 1]",
                       path);
    *out = (float)v->valuedouble;
    return TUBELET_OK;
}

static const cJSON *sub_config(const cJSON *j, const char *key, char *sub, size_t n,
                               const char *path, tb_err *e) {
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(j, key);
    snprintf(sub, n, "%s (%s)", path, key);
    if (!cJSON_IsObject(s)) {
        tb_fail(e, TUBELET_ERR_CONFIG, "%s: X-CLIP's config needs \"%s\", an object (the %s "
                "tower's sizes)%s", path, key, key[0] == 't' ? "text" : "vision",
                s ? ", not another type" : "; it is missing");
        return NULL;
    }
    return s;
}

static int xc_parse_config(tb_config *c, const cJSON *j, const char *path, const tb_log *log,
                           tb_err *e) {
    (void)log;
    tb_xclip_config *x = xclip_cfg(c);
    char tp[600], vp[600];
    const cJSON *t = sub_config(j, "text_config", tp, sizeof tp, path, e);
    if (!t) return TUBELET_ERR_CONFIG;
    const cJSON *v = sub_config(j, "vision_config", vp, sizeof vp, path, e);
    if (!v) return TUBELET_ERR_CONFIG;
    int hw[2] = {c->image_h, c->image_w}, rc;
    if ((rc = tb_cfg_int(j, "projection_dim", &x->projection_dim, 1, 1 << 14, path, e)) ||
        (rc = tb_cfg_int(j, "prompt_layers", &x->prompt_layers, 0, 64, path, e)) ||
        (rc = tb_cfg_int(j, "prompt_num_attention_heads", &x->prompt_heads, 1, 1 << 10, path,
                         e)) ||
        (rc = read_act(j, "prompt_hidden_act", &x->prompt_act, path, e)) ||
        (rc = tb_cfg_int(t, "vocab_size", &x->vocab, 1, 1 << 24, tp, e)) ||
        (rc = tb_cfg_int(t, "hidden_size", &x->text_hidden, 1, 1 << 14, tp, e)) ||
        (rc = tb_cfg_int(t, "intermediate_size", &x->text_intermediate, 1, 1 << 16, tp, e)) ||
        (rc = tb_cfg_int(t, "num_hidden_layers", &x->text_layers, 0, 256, tp, e)) ||
        (rc = tb_cfg_int(t, "num_attention_heads", &x->text_heads, 1, 1 << 10, tp, e)) ||
        (rc = tb_cfg_int(t, "max_position_embeddings", &x->text_positions, 2, 1 << 14, tp, e)) ||
        (rc = read_act(t, "hidden_act", &x->text_act, tp, e)) ||
        (rc = read_eps(t, &x->text_eps, tp, e)) ||
        (rc = tb_cfg_ints(v, "image_size", hw, 2, vp, e)) ||
        (rc = tb_cfg_patch_size(c, v, vp, e)) ||
        (rc = tb_cfg_int(v, "num_channels", &c->num_channels, 1, 64, vp, e)) ||
        (rc = tb_cfg_int(v, "num_frames", &c->num_frames, 1, 1 << 12, vp, e)) ||
        (rc = tb_cfg_int(v, "hidden_size", &c->hidden, 1, 1 << 14, vp, e)) ||
        (rc = tb_cfg_int(v, "intermediate_size", &c->intermediate, 1, 1 << 16, vp, e)) ||
        (rc = tb_cfg_int(v, "num_hidden_layers", &c->layers, 0, 256, vp, e)) ||
        (rc = tb_cfg_int(v, "num_attention_heads", &c->heads, 1, 1 << 10, vp, e)) ||
        (rc = read_act(v, "hidden_act", &c->act, vp, e)) || (rc = read_eps(v, &c->ln_eps, vp, e)) ||
        (rc = tb_cfg_int(v, "mit_hidden_size", &x->mit_hidden, 1, 1 << 14, vp, e)) ||
        (rc = tb_cfg_int(v, "mit_intermediate_size", &x->mit_intermediate, 1, 1 << 16, vp, e)) ||
        (rc = tb_cfg_int(v, "mit_num_hidden_layers", &x->mit_layers, 0, 64, vp, e)) ||
        (rc = tb_cfg_int(v, "mit_num_attention_heads", &x->mit_heads, 1, 1 << 10, vp, e)))
        return rc;
    c->image_h = hw[0], c->image_w = hw[1];
    x->prompt_eps = x->text_eps; /* the prompt layers' norm1, norm3 take text_config's */
    return TUBELET_OK;
}

static int xc_check_config(tb_config *c, const char *path, tb_err *e) {
    const tb_xclip_config *x = xclip_cfg(c);
    if (x->text_hidden % x->text_heads)
        return tb_fail(e, TUBELET_ERR_CONFIG, "%s: text_config.hidden_size %d is not divisible by "
                       "its num_attention_heads %d", path, x->text_hidden, x->text_heads);
    if (x->mit_hidden != x->projection_dim)
        return tb_fail(e, TUBELET_ERR_CONFIG, "%s: vision_config.mit_hidden_size %d must equal "
                       "projection_dim %d (the mit adds its positions to the projected frames)",
                       path, x->mit_hidden, x->projection_dim);
    if (x->mit_hidden % x->mit_heads)
        return tb_fail(e, TUBELET_ERR_CONFIG, "%s: vision_config.mit_hidden_size %d is not "
                       "divisible by mit_num_attention_heads %d", path, x->mit_hidden,
                       x->mit_heads);
    if (x->projection_dim % x->prompt_heads)
        return tb_fail(e, TUBELET_ERR_CONFIG, "%s: projection_dim %d is not divisible by "
                       "prompt_num_attention_heads %d", path, x->projection_dim, x->prompt_heads);
    c->tubelet_t = 1, c->cls_token = 1, c->qkv_bias = 1;
    return TUBELET_OK;
}

static const char *xc_architecture(const tb_config *c) {
    (void)c;
    return "XCLIPModel";
}

/* config.json as XCLIPConfig writes it (the sizes of the towers in text_config and
 * vision_config; the shared writer's top-level image_size is ignored on reading) */
static void xc_write_config(cJSON *j, const tb_config *c) {
    const tb_xclip_config *x = xclip_cfg(c);
    cJSON *t = cJSON_CreateObject(), *v = cJSON_CreateObject();
    cJSON_AddNumberToObject(j, "projection_dim", x->projection_dim);
    cJSON_AddNumberToObject(j, "prompt_layers", x->prompt_layers);
    cJSON_AddNumberToObject(j, "prompt_num_attention_heads", x->prompt_heads);
    cJSON_AddStringToObject(j, "prompt_hidden_act", tb_cfg_act_name(x->prompt_act));
    cJSON_AddNumberToObject(t, "vocab_size", x->vocab);
    cJSON_AddNumberToObject(t, "hidden_size", x->text_hidden);
    cJSON_AddNumberToObject(t, "intermediate_size", x->text_intermediate);
    cJSON_AddNumberToObject(t, "num_hidden_layers", x->text_layers);
    cJSON_AddNumberToObject(t, "num_attention_heads", x->text_heads);
    cJSON_AddNumberToObject(t, "max_position_embeddings", x->text_positions);
    cJSON_AddStringToObject(t, "hidden_act", tb_cfg_act_name(x->text_act));
    cJSON_AddNumberToObject(t, "layer_norm_eps", x->text_eps);
    const int hw[2] = {c->image_h, c->image_w};
    cJSON_AddItemToObject(v, "image_size", c->image_h == c->image_w
                                               ? cJSON_CreateNumber(c->image_h)
                                               : cJSON_CreateIntArray(hw, 2));
    tb_cfg_write_patch_size(v, c);
    tb_cfg_write_vit_fields(v, c);
    cJSON_AddNumberToObject(v, "mit_hidden_size", x->mit_hidden);
    cJSON_AddNumberToObject(v, "mit_intermediate_size", x->mit_intermediate);
    cJSON_AddNumberToObject(v, "mit_num_hidden_layers", x->mit_layers);
    cJSON_AddNumberToObject(v, "mit_num_attention_heads", x->mit_heads);
    cJSON_AddItemToObject(j, "text_config", t);
    cJSON_AddItemToObject(j, "vision_config", v);
}

static double xc_weight_bytes(const tb_config *c) {
    const tb_xclip_config *x = xclip_cfg(c);
    return 4.0 * (linear_floats(c) + (double)x->vocab * x->text_hidden);
}

/* microsoft/xclip-base-patch32 and -patch16 (8 frames, 224²) */
static void preset_xclip(tb_config *c, const char *name) {
    c->patch_h = c->patch_w = strstr(name, "16") ? 16 : 32;
    c->num_labels = 0;
}

static const tb_arch_preset xc_presets[] = {
    {"xclip-b32", preset_xclip}, {"xclip-b16", preset_xclip}, {NULL, NULL}};

const tb_family_ops tb_xclip_family = {
    .id = TB_XCLIP,
    .build = xc_build,
    .sequences = xc_sequences,
    .token_row = xc_token_row,
    .flop = xc_flop,
    .variant = xc_variant,
    .model = &xc_model,
    .text = &xc_text,
    .model_type = "xclip",
    .display_name = "X-CLIP",
    .config_keys = xclip_keys,
    .config_size = sizeof(tb_xclip_config),
    .defaults = xc_defaults,
    .parse_config = xc_parse_config,
    .check_config = xc_check_config,
    .architecture = xc_architecture,
    .write_config = xc_write_config,
    .weight_bytes = xc_weight_bytes,
    .presets = xc_presets,
    .image_model_what = "no image model (X-CLIP is loaded from an XCLIPModel directory)",
};
