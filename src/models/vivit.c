/* ViViT Model 1, spatio-temporal attention (Arnab et al. 2021, seed 000), as Hugging Face's
 * VivitModel / VivitForVideoClassification: tubelet embedding (Conv3d, stride = kernel), a cls
 * token, learned positions, pre-norm blocks with joint attention over all tokens, final
 * LayerNorm, classifier on the cls token. */
#include <stdio.h>

#include "state.h"

int tb_vivit_build(tubelet_model *m, tb_weightset *ws, tb_err *e) {
    const tb_config *c = &m->cfg;
    const int D = c->hidden;
    int rc;
    int64_t n_patch = (int64_t)tb_grid_t(c, c->num_frames) * tb_grid_h(c, c->image_h) *
                      tb_grid_w(c, c->image_w);
    int64_t pw[5] = {D, c->num_channels, c->tubelet_t, c->patch_h, c->patch_w}, pb[1] = {D};
    int64_t cls[3] = {1, 1, D}, pos[3] = {1, n_patch + 1, D};
    if ((rc = tb_param(m, "vivit.embeddings.patch_embeddings.projection.weight", 5, pw,
                       TB_INIT_NORMAL, &ws->patch_w, e)) ||
        (rc = tb_param(m, "vivit.embeddings.patch_embeddings.projection.bias", 1, pb,
                       TB_INIT_ZEROS, &ws->patch_b, e)) ||
        (rc = tb_param(m, "vivit.embeddings.cls_token", 3, cls, TB_INIT_NORMAL, &ws->cls, e)) ||
        (rc = tb_param(m, "vivit.embeddings.position_embeddings", 3, pos, TB_INIT_NORMAL,
                       &ws->pos, e)))
        return rc;
    /* transformers 5 can save new-style names (vivit.layers.N.attention.q_proj, mlp.fc1);
     * published checkpoints use the legacy ones. Both load. */
    const int new_names = m->weights && tb_weights_has(m->weights, "vivit.layers.0.layernorm_before.weight");
    const char *layer = new_names ? "vivit.layers" : "vivit.encoder.layer";
    const char *qn = new_names ? "attention.q_proj." : "attention.attention.query.";
    const char *kn = new_names ? "attention.k_proj." : "attention.attention.key.";
    const char *vn = new_names ? "attention.v_proj." : "attention.attention.value.";
    const char *on = new_names ? "attention.o_proj." : "attention.output.dense.";
    const char *f1 = new_names ? "mlp.fc1." : "intermediate.dense.";
    const char *f2 = new_names ? "mlp.fc2." : "output.dense.";
    for (int l = 0; l < c->layers; l++) {
        tb_block *b = &ws->blocks[l];
        char q[200];
#define SUB(s) (snprintf(q, sizeof q, "%s.%d.%s", layer, l, s), q)
        if ((rc = tb_build_layernorm(m, &b->ln1, SUB("layernorm_before."), D, c->ln_eps, e)) ||
            (rc = tb_build_linear(m, &b->attn.q, SUB(qn), D, D, c->qkv_bias, e)) ||
            (rc = tb_build_linear(m, &b->attn.k, SUB(kn), D, D, c->qkv_bias, e)) ||
            (rc = tb_build_linear(m, &b->attn.v, SUB(vn), D, D, c->qkv_bias, e)) ||
            (rc = tb_build_linear(m, &b->attn.o, SUB(on), D, D, 1, e)) ||
            (rc = tb_build_layernorm(m, &b->ln2, SUB("layernorm_after."), D, c->ln_eps, e)) ||
            (rc = tb_build_linear(m, &b->fc1, SUB(f1), c->intermediate, D, 1, e)) ||
            (rc = tb_build_linear(m, &b->fc2, SUB(f2), D, c->intermediate, 1, e)))
            return rc;
#undef SUB
    }
    m->has_final_ln = 1;
    if ((rc = tb_build_layernorm(m, &ws->final_ln, "vivit.layernorm.", D, c->ln_eps, e))) return rc;
    if (c->num_labels > 0)
        return tb_build_linear(m, &ws->head, "classifier.", c->num_labels, D, 1, e);
    return TUBELET_OK;
}

/* x = dropout([cls; patch embeddings] + learned positions) (VivitEmbeddings.dropout). */
void tb_vivit_tokens(tubelet_state *s) {
    const tubelet_model *m = s->m;
    const int64_t D = m->cfg.hidden, N = s->n_patch;
    for (int64_t b = 0; b < s->B; b++) {
        float *x = s->x + b * (N + 1) * D;
        for (int64_t d = 0; d < D; d++) x[d] = m->w.cls[d] + s->pos[d];
        for (int64_t n = 0; n < N; n++)
            for (int64_t d = 0; d < D; d++)
                x[(1 + n) * D + d] = s->emb[(b * N + n) * D + d] + s->pos[(1 + n) * D + d];
    }
    tb_state_dropout(s, -1, TB_DROP_EMB, s->x, s->rows * D, 0);
}

void tb_vivit_tokens_backward(tubelet_state *s, float *dx, float *demb) {
    const tubelet_model *m = s->m;
    const int64_t D = m->cfg.hidden, N = s->n_patch;
    tb_state_dropout(s, -1, TB_DROP_EMB, dx, s->rows * D, 0);
    float *gcls = (float *)m->g.cls, *gpos = (float *)m->g.pos;
    for (int64_t b = 0; b < s->B; b++) {
        const float *x = dx + b * (N + 1) * D;
        for (int64_t d = 0; d < D; d++) gcls[d] += x[d], gpos[d] += x[d];
        for (int64_t n = 0; n < N; n++)
            for (int64_t d = 0; d < D; d++) {
                demb[(b * N + n) * D + d] = x[(1 + n) * D + d];
                gpos[(1 + n) * D + d] += x[(1 + n) * D + d];
            }
    }
}
