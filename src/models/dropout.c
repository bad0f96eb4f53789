/* Dropout of the current training step (docs/training.md, "Dropout"): masks keyed by the step,
 * the layer and the site, regenerated in the backward rather than stored. The bottom of the
 * encoder files: the family files' embeddings call it too. */
#include "../kernels/ops.h"
#include "encoder.h"

uint64_t tb_state_dropout_key(const tubelet_state *s, int layer, int site) {
    return tb_hash(tb_hash(s->train->dropout_key, (uint64_t)(layer + 1)), (uint64_t)site);
}

int tb_state_hidden_dropout_on(const tubelet_state *s) {
    return s->train && s->train->active && s->train->hidden_dropout > 0;
}

void tb_state_dropout(const tubelet_state *s, int layer, int site, float *x, int64_t n,
                      int64_t first) {
    if (!tb_state_hidden_dropout_on(s)) return;
    TB_RUN(&s->be, dropout, x, n, tb_state_dropout_key(s, layer, site), first,
           tb_keep_rule_make(s->train->hidden_dropout));
}
