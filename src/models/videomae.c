/* VideoMAE (Tong et al. 2022) as Hugging Face's VideoMAEModel / VideoMAEForVideoClassification:
 * tubelet Conv3d embedding, fixed sinusoid positions, pre-norm ViT blocks whose query and value
 * projections carry separate biases (q_bias, v_bias; the key has none), and either mean pooling
 * + fc_norm or the final LayerNorm + token 0. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "family.h"

/* VideoMAE's own config (tb_config.fam): its pooling and the pretraining decoder's fields. */
typedef struct {
    int use_mean_pooling;
    float fc_norm_eps;      /* fc_norm's eps, tubelet's "fc_norm_eps" (default 1e-5: transformers
                               builds nn.LayerNorm(hidden_size) whatever layer_norm_eps says; the
                               original codebases' 1e-6, which the .pth files infer:
                               docs/checkpoints.md) */
    /* VideoMAEForPreTraining (tb_config.pretraining): the masked-autoencoder decoder
     * (docs/pretraining.md) */
    int dec_hidden, dec_layers, dec_heads, dec_intermediate; /* decoder_hidden_size, ... */
    int norm_pix_loss;      /* targets normalised per patch (HF default true) */
} tb_videomae_config;

static inline tb_videomae_config *vm_cfg(const tb_config *c) { return c->fam; }

/* The sinusoid table of the original Transformer, as get_sinusoid_encoding_table builds it:
 * angle(pos, i) = pos / 10000^(2 (i // 2) / D); sin on even i, cos on odd i. Computed in double
 * like NumPy does, then rounded to float. */
void tb_sinusoid_table(float *t, int64_t n_pos, int64_t D) {
    for (int64_t p = 0; p < n_pos; p++)
        for (int64_t i = 0; i < D; i++) {
            double angle = (double)p / pow(10000.0, 2.0 * (double)(i / 2) / (double)D);
            t[p * D + i] = (float)(i % 2 ? cos(angle) : sin(angle));
        }
}

/* Layer scale (Touvron et al., CaiT), as STMixer's Block has it (gamma_1, gamma_2; seed 001):
 * x += lambda_1 * Attention(LN(x)); x += lambda_2 * MLP(LN(x)), under BEiT's names lambda_1,
 * lambda_2 (docs/stmixer-backbone.md). prefix: "videomae.encoder.layer.N." */
static int build_layer_scale(tubelet_model *m, tb_block *b, const char *prefix, tb_err *e) {
    int64_t s[1] = {m->cfg.hidden};
    const float **dst[2] = {&b->ls1, &b->ls2};
    char name[200];
    for (int i = 0; i < 2; i++) {
        snprintf(name, sizeof name, "%slambda_%d", prefix, i + 1);
        int rc = tb_param(m, name, 1, s, TB_INIT_LAYER_SCALE, dst[i], e);
        if (rc == TUBELET_ERR_MISSING && !m->grad_of) {
            char msg[sizeof e->msg];
            snprintf(msg, sizeof msg, "%s", e->msg);
            return tb_fail(e, rc, "%s (config.json's layer_scale_init_value %g asks for layer "
                                  "scale)", msg, m->cfg.layer_scale);
        }
        if (rc) return rc;
    }
    return TUBELET_OK;
}

/* One pre-norm block of width D and MLP width I under prefix ("videomae.encoder.layer.N." or
 * "decoder.decoder_layers.N."): the decoder's blocks are VideoMAELayer with the decoder_* sizes. */
static int build_block(tubelet_model *m, tb_block *b, const char *p, int D, int I, tb_err *e) {
    const tb_config *c = &m->cfg;
    char q[200];
    int rc;
#define SUB(s) (snprintf(q, sizeof q, "%s%s", p, s), q)
    if ((rc = tb_build_layernorm(m, &b->ln1, SUB("layernorm_before."), D, c->ln_eps, e)) ||
        (rc = tb_build_linear(m, &b->attn.q, SUB("attention.attention.query."), D, D, 0, e)) ||
        (rc = tb_build_linear(m, &b->attn.k, SUB("attention.attention.key."), D, D, 0, e)) ||
        (rc = tb_build_linear(m, &b->attn.v, SUB("attention.attention.value."), D, D, 0, e)) ||
        (rc = tb_build_linear(m, &b->attn.o, SUB("attention.output.dense."), D, D, 1, e)) ||
        (rc = tb_build_layernorm(m, &b->ln2, SUB("layernorm_after."), D, c->ln_eps, e)) ||
        (rc = tb_build_linear(m, &b->fc1, SUB("intermediate.dense."), I, D, 1, e)) ||
        (rc = tb_build_linear(m, &b->fc2, SUB("output.dense."), D, I, 1, e)))
        return rc;
    if (c->qkv_bias) {
        /* transformers 5 renames q_bias and v_bias to query.bias and value.bias as it loads,
         * and some 5.x versions (5.17) save them so: either spelling loads */
        const int renamed = m->weights &&
                            !tb_weights_has(m->weights, SUB("attention.attention.q_bias")) &&
                            tb_weights_has(m->weights, SUB("attention.attention.query.bias"));
        int64_t s[1] = {D};
        if ((rc = tb_param(
                 m, SUB(renamed ? "attention.attention.query.bias" : "attention.attention.q_bias"),
                 1, s, TB_INIT_ZEROS, &b->attn.q.b, e)) ||
            (rc = tb_param(
                 m, SUB(renamed ? "attention.attention.value.bias" : "attention.attention.v_bias"),
                 1, s, TB_INIT_ZEROS, &b->attn.v.b, e)))
            return rc;
    }
#undef SUB
    return TUBELET_OK;
}

/* VideoMAEForPreTraining's parts after the encoder: encoder_to_decoder, mask_token (zero at
 * first, as transformers leaves it), the fixed decoder positions, the decoder's blocks, norm
 * (nn.LayerNorm's eps 1e-5) and head (to the C t ph pw pixels of a tubelet). */
static int build_decoder(tubelet_model *m, tb_weightset *ws, tb_err *e) {
    const tb_config *c = &m->cfg;
    const tb_videomae_config *v = vm_cfg(c);
    const int Dd = v->dec_hidden, P = c->num_channels * c->tubelet_t * c->patch_h * c->patch_w;
    int64_t sm[3] = {1, 1, Dd};
    int rc;
    tb_decoder_weights *dw = calloc(1, sizeof *dw); /* ws->fam, freed with ws's owner */
    if (!dw) return tb_fail(e, TUBELET_ERR_MEMORY, "out of memory");
    free(ws->fam);
    ws->fam = dw;
    if ((rc = tb_build_linear(m, &dw->enc_to_dec, "encoder_to_decoder.", Dd, c->hidden, 0, e)) ||
        (rc = tb_param(m, "mask_token", 3, sm, TB_INIT_ZEROS, &dw->mask_token, e)))
        return rc;
    if (!m->grad_of) {
        int64_t n_pos = (int64_t)tb_grid_t(c, c->num_frames) * tb_grid_h(c, c->image_h) *
                        tb_grid_w(c, c->image_w);
        float *table = tb_model_alloc(m, (size_t)(n_pos * Dd), e);
        if (!table) return TUBELET_ERR_MEMORY;
        tb_sinusoid_table(table, n_pos, Dd);
        dw->pos = table;
        if ((rc = tb_model_share(m, table, (size_t)(n_pos * Dd), e))) return rc;
    }
    const size_t floats = (sizeof(tb_block) * (size_t)(v->dec_layers + 1) + 3) / 4;
    dw->blocks = (tb_block *)tb_model_alloc(m, floats, e); /* owned by the model */
    if (!dw->blocks) return TUBELET_ERR_MEMORY;
    memset(dw->blocks, 0, sizeof(float) * floats);
    for (int l = 0; l < v->dec_layers; l++) {
        char p[160];
        snprintf(p, sizeof p, "decoder.decoder_layers.%d.", l);
        if ((rc = build_block(m, &dw->blocks[l], p, Dd, v->dec_intermediate, e))) return rc;
    }
    if ((rc = tb_build_layernorm(m, &dw->norm, "decoder.norm.", Dd, 1e-5f, e))) return rc;
    return tb_build_linear(m, &dw->head, "decoder.head.", P, Dd, 1, e);
}
static tb_decoder_weights *videomae_decoder_weights(const tb_weightset *ws) { return ws->fam; }

static int videomae_build(tubelet_model *m, tb_weightset *ws, tb_err *e) {
    const tb_config *c = &m->cfg;
    const tb_videomae_config *v = vm_cfg(c);
    const int D = c->hidden;
    int rc;
    char p[160];
    int64_t pw[5] = {D, c->num_channels, c->tubelet_t, c->patch_h, c->patch_w}, pb[1] = {D};
    if ((rc = tb_param(m, "videomae.embeddings.patch_embeddings.projection.weight", 5, pw,
                       TB_INIT_NORMAL, &ws->patch_w, e)) ||
        (rc = tb_param(m, "videomae.embeddings.patch_embeddings.projection.bias", 1, pb,
                       TB_INIT_ZEROS, &ws->patch_b, e)))
        return rc;
    if (!m->grad_of) { /* a fixed table: no parameter, no gradient */
        int64_t n_pos = (int64_t)tb_grid_t(c, c->num_frames) * tb_grid_h(c, c->image_h) *
                        tb_grid_w(c, c->image_w);
        float *table = tb_model_alloc(m, (size_t)(n_pos * D), e);
        if (!table) return TUBELET_ERR_MEMORY;
        tb_sinusoid_table(table, n_pos, D);
        ws->pos = table;
        if ((rc = tb_model_share(m, table, (size_t)(n_pos * D), e))) return rc;
    }
    for (int l = 0; l < c->layers; l++) {
        snprintf(p, sizeof p, "videomae.encoder.layer.%d.", l);
        if ((rc = build_block(m, &ws->blocks[l], p, D, c->intermediate, e))) return rc;
        if (c->layer_scale > 0 && (rc = build_layer_scale(m, &ws->blocks[l], p, e))) return rc;
    }
    if (c->pretraining) { /* VideoMAEModel's own LayerNorm (none with mean pooling), the decoder */
        m->has_final_ln = !v->use_mean_pooling;
        if (m->has_final_ln &&
            (rc = tb_build_layernorm(m, &ws->final_ln, "videomae.layernorm.", D, c->ln_eps, e)))
            return rc;
        return build_decoder(m, ws, e);
    }
    if (v->use_mean_pooling) {
        /* HF builds fc_norm as nn.LayerNorm(hidden_size): eps 1e-5 whatever layer_norm_eps
         * says; tubelet's fc_norm_eps (the .pth files': 1e-6) replaces it */
        m->has_fc_norm = 1;
        if ((rc = tb_build_layernorm(m, &ws->fc_norm, "fc_norm.", D, v->fc_norm_eps, e))) return rc;
    } else {
        m->has_final_ln = 1;
        if ((rc = tb_build_layernorm(m, &ws->final_ln, "videomae.layernorm.", D, c->ln_eps, e)))
            return rc;
    }
    if (c->num_labels > 0)
        return tb_build_linear(m, &ws->head, "classifier.", c->num_labels, D, 1, e);
    return TUBELET_OK;
}

/* x = patch embeddings + sinusoid positions; no cls token. */
static void videomae_tokens(tubelet_state *s) {
    const int64_t D = s->m->cfg.hidden, N = s->n_patch;
    for (int64_t b = 0; b < s->B; b++)
        TB_RUN(&s->be, add_rows, s->x + b * N * D, D, s->emb + b * N * D, D, s->pos, D, NULL, NULL,
               0, N, D);
}

/* The sinusoid table is fixed: the embeddings' gradient is dx itself (VideoMAEEmbeddings has no
 * dropout). */
static void videomae_tokens_backward(tubelet_state *s, float *dx, float *demb) {
    TB_RUN(&s->be, copy, demb, dx, s->B * s->n_patch * s->m->cfg.hidden);
}

static int videomae_attention_plan(const tb_config *c, int64_t T, int64_t H, int64_t W,
                                   tb_attn_step st[TB_MAX_STEPS], int *split_heads) {
    (void)c, (void)T, (void)H, (void)W, (void)st;
    *split_heads = 0;
    return 0; /* joint attention over each clip */
}

static int64_t videomae_token_row(const tubelet_state *s, int64_t b, int64_t it, int64_t iy,
                                  int64_t ix) {
    return b * s->n_patch + (it * s->grid_h + iy) * s->grid_w + ix;
}

static int videomae_positions(tubelet_state *s, tb_err *e) { return tb_positions_bicubic(s, 0, e); }

static double videomae_flop(const tb_config *c, int T, int H, int W) {
    const double gt = tb_grid_t(c, T), N = (double)tb_grid_h(c, H) * tb_grid_w(c, W);
    const double rows = gt * N;
    return tb_clip_flop(c, gt, N, 0, tb_attn_flop(rows, 1, rows, c->hidden), rows, 1);
}

static const char *videomae_variant(const tb_config *c) {
    if (c->pretraining) return "pretraining";
    return vm_cfg(c)->use_mean_pooling ? "mean_pooling" : "token0_final_layernorm";
}

/* ---- config.json: VideoMAEConfig (and tubelet's layer_scale_init_value, for STMixer) ---- */

static const char *const videomae_keys[] = {
    "image_size", "patch_size", "num_channels", "num_frames", "tubelet_size", "hidden_size",
    "num_hidden_layers", "num_attention_heads", "intermediate_size", "hidden_act",
    "layer_norm_eps", "qkv_bias", "qv_bias", "use_mean_pooling", "decoder_num_attention_heads",
    "decoder_hidden_size", "decoder_num_hidden_layers", "decoder_intermediate_size",
    "norm_pix_loss", "layer_scale_init_value", "fc_norm_eps", NULL}; /* the last two: tubelet's
                                                                         (STMixer, the .pth eps) */

static void videomae_defaults(tb_config *c) {
    c->num_frames = 16, c->tubelet_t = 2, c->patch_h = c->patch_w = 16;
    c->ln_eps = 1e-12f;
    *vm_cfg(c) = (tb_videomae_config){.use_mean_pooling = 1, .fc_norm_eps = 1e-5f,
                                      .dec_hidden = 384, .dec_layers = 4, .dec_heads = 6,
                                      .dec_intermediate = 1536, .norm_pix_loss = 1};
}

/* VideoMAEForPreTraining: "architectures" names it, and the decoder_* fields and norm_pix_loss
 * shape its decoder and targets (HF's defaults otherwise). */
static int parse_pretraining(tb_config *c, const cJSON *j, const char *path, tb_err *e) {
    const cJSON *arch = cJSON_GetObjectItemCaseSensitive(j, "architectures"), *a;
    cJSON_ArrayForEach(a, arch)
        if (cJSON_IsString(a) && !strcmp(a->valuestring, "VideoMAEForPreTraining")) c->pretraining = 1;
    tb_videomae_config *v = vm_cfg(c);
    int rc;
    if ((rc = tb_cfg_int(j, "decoder_hidden_size", &v->dec_hidden, 1, 1 << 16, path, e)) ||
        (rc = tb_cfg_int(j, "decoder_num_hidden_layers", &v->dec_layers, 0, 1 << 10, path, e)) ||
        (rc = tb_cfg_int(j, "decoder_num_attention_heads", &v->dec_heads, 1, 1 << 10, path, e)) ||
        (rc = tb_cfg_int(j, "decoder_intermediate_size", &v->dec_intermediate, 1, 1 << 18, path, e)) ||
        (rc = tb_cfg_bool(j, "norm_pix_loss", &v->norm_pix_loss, path, e)))
        return rc;
    if (c->pretraining && v->dec_hidden % v->dec_heads)
        return tb_fail(e, TUBELET_ERR_CONFIG, "%s: decoder_hidden_size %d is not divisible by "
                       "decoder_num_attention_heads %d", path, v->dec_hidden, v->dec_heads);
    if (c->pretraining && !v->norm_pix_loss && c->num_channels != 3)
        return tb_fail(e, TUBELET_ERR_CONFIG, "%s: norm_pix_loss false needs 3 channels (the "
                       "targets are un-normalised with ImageNet's mean and std)", path);
    return TUBELET_OK;
}

static int videomae_parse_config(tb_config *c, const cJSON *j, const char *path,
                                 const tb_log *log, tb_err *e) {
    (void)log;
    int rc;
    if ((rc = tb_cfg_patch_size(c, j, path, e)) ||
        (rc = tb_cfg_int(j, "tubelet_size", &c->tubelet_t, 1, 1 << 10, path, e)) ||
        /* transformers 5 writes the flag as qv_bias: the key has no bias either way */
        (rc = tb_cfg_bool(j, "qv_bias", &c->qkv_bias, path, e)) ||
        (rc = tb_cfg_bool(j, "use_mean_pooling", &vm_cfg(c)->use_mean_pooling, path, e)) ||
        (rc = parse_pretraining(c, j, path, e)))
        return rc;
    const cJSON *ls = cJSON_GetObjectItemCaseSensitive(j, "layer_scale_init_value");
    if (ls && !cJSON_IsNull(ls)) {
        if (!cJSON_IsNumber(ls) || !(ls->valuedouble >= 0) || ls->valuedouble > 1e6)
            return tb_fail(e, TUBELET_ERR_CONFIG, "%s: layer_scale_init_value must be a number "
                                                  ">= 0 (0: no layer scale)", path);
        c->layer_scale = ls->valuedouble;
    }
    const cJSON *fe = cJSON_GetObjectItemCaseSensitive(j, "fc_norm_eps");
    if (fe && !cJSON_IsNull(fe)) {
        if (!cJSON_IsNumber(fe) || !(fe->valuedouble >= 1e-30) || fe->valuedouble > 1)
            return tb_fail(e, TUBELET_ERR_CONFIG, "%s: fc_norm_eps must be a number in [1e-30, 1]",
                           path);
        vm_cfg(c)->fc_norm_eps = (float)fe->valuedouble;
    }
    return TUBELET_OK;
}

/* VideoMAEForPreTraining's decoder, for pretrain.c */
static void videomae_decoder(const tb_config *c, tb_decoder_dims *d) {
    const tb_videomae_config *v = vm_cfg(c);
    *d = (tb_decoder_dims){v->dec_hidden, v->dec_layers, v->dec_heads, v->dec_intermediate,
                           v->norm_pix_loss};
}

static const char *videomae_architecture(const tb_config *c) {
    return c->pretraining ? "VideoMAEForPreTraining" : "VideoMAEForVideoClassification";
}

static void videomae_write_config(cJSON *j, const tb_config *c) {
    const tb_videomae_config *v = vm_cfg(c);
    tb_cfg_write_patch_size(j, c);
    cJSON_AddNumberToObject(j, "tubelet_size", c->tubelet_t);
    tb_cfg_write_vit_fields(j, c);
    cJSON_AddBoolToObject(j, "use_mean_pooling", v->use_mean_pooling);
    if (c->pretraining) {
        cJSON_AddNumberToObject(j, "decoder_hidden_size", v->dec_hidden);
        cJSON_AddNumberToObject(j, "decoder_num_hidden_layers", v->dec_layers);
        cJSON_AddNumberToObject(j, "decoder_num_attention_heads", v->dec_heads);
        cJSON_AddNumberToObject(j, "decoder_intermediate_size", v->dec_intermediate);
        cJSON_AddBoolToObject(j, "norm_pix_loss", v->norm_pix_loss);
    }
    if (c->layer_scale > 0)
        cJSON_AddItemToObject(j, "layer_scale_init_value", tb_json_number(c->layer_scale));
    if (v->fc_norm_eps != 1e-5f) cJSON_AddNumberToObject(j, "fc_norm_eps", v->fc_norm_eps);
}

/* STMixer's backbone (seed 001, docs/stmixer-backbone.md): VideoMAE ViT-B at 16x224², LayerNorm
 * eps 1e-6, final LayerNorm instead of mean pooling, layer scale, no head */
static void preset_stmixer(tb_config *c, const char *name) {
    (void)name;
    c->ln_eps = 1e-6f, vm_cfg(c)->use_mean_pooling = 0, c->layer_scale = 0.1, c->num_labels = 0;
}

/* VideoMAE-B masked pretraining (MCG-NJU/videomae-base): ViT-B encoder with its final LayerNorm,
 * decoder 384 wide, 4 blocks, 6 heads, normalised-pixel targets */
static void preset_pretrain_b(tb_config *c, const char *name) {
    (void)name;
    c->pretraining = 1, vm_cfg(c)->use_mean_pooling = 0, c->num_labels = 0;
}

/* a laptop-sized pretraining model, docs/pretraining.md's experiment: 8 frames of 32², patch 4,
 * tubelet 2 (256 tokens), encoder 96 wide, 4 blocks, 4 heads, MLP 384, mean pooling for
 * fine-tuning; decoder 64 wide, 2 blocks, 4 heads, MLP 256; 0.5M parameters */
static void preset_pretrain_tiny(tb_config *c, const char *name) {
    (void)name;
    c->image_h = c->image_w = 32, c->num_frames = 8, c->patch_h = c->patch_w = 4;
    c->hidden = 96, c->layers = 4, c->heads = 4, c->intermediate = 384;
    tb_videomae_config *v = vm_cfg(c);
    v->dec_hidden = 64, v->dec_layers = 2, v->dec_heads = 4, v->dec_intermediate = 256;
    c->pretraining = 1, c->num_labels = 0;
}

/* VideoMAE V2's ViT-g/14 (OpenGVLab/VideoMAEv2 vit_giant_patch14_224, the K710 fine-tuned
 * vit_g_hybrid_pt_1200e_k710_ft.pth): 1408 wide, 40 blocks, 16 heads, MLP 48/11 (6144), patch
 * 14, q/v biases, every LayerNorm (fc_norm too) eps 1e-6, 710 classes */
static void preset_videomae2_giant(tb_config *c, const char *name) {
    (void)name;
    c->patch_h = c->patch_w = 14, c->hidden = 1408, c->layers = 40, c->heads = 16;
    c->intermediate = 6144, c->qkv_bias = 1, c->ln_eps = 1e-6f, vm_cfg(c)->fc_norm_eps = 1e-6f;
    c->num_labels = 710;
}

static const tb_arch_preset videomae_presets[] = {
    {"videomae-base", NULL}, /* MCG-NJU/videomae-base-finetuned-kinetics */
    {"stmixer-vit-base", preset_stmixer},
    {"videomae2-giant", preset_videomae2_giant},
    {"videomae-b-pretrain", preset_pretrain_b},
    {"videomae-tiny-pretrain", preset_pretrain_tiny},
    {NULL, NULL},
};

/* The shared encoder's hooks (family.h's tb_vit_hooks). */
static const tb_vit_hooks videomae_vit = {
    .attention_plan = videomae_attention_plan,
    .patch_of_row = tb_patch_of_row_by_frame,
    .positions = videomae_positions,
    .tokens = videomae_tokens,
    .tokens_backward = videomae_tokens_backward,
};

/* the pretraining decoder's mask token takes no weight decay (its positions are fixed) */
static const char *const videomae_no_decay[] = {"mask_token", NULL};
/* VideoMAEForPreTraining loaded as VideoMAEForVideoClassification: the decoder goes, fc_norm is
 * new (the pretraining model has none) */
static const char *const videomae_pretraining_only[] = {"decoder.", "mask_token",
                                                        "encoder_to_decoder.", NULL};
static const char *const videomae_new_after_pretraining[] = {"fc_norm.", NULL};
/* between the encoder and the classifier: trained with it over a frozen encoder */
static const char *const videomae_probe[] = {"fc_norm.", NULL};

const tb_family_ops tb_videomae_family = {
    .id = TB_VIDEOMAE,
    .build = videomae_build,
    .vit = &videomae_vit, /* the shared encoder runs it */
    .sequences = tb_sequences_per_clip,
    .token_row = videomae_token_row,
    .flop = videomae_flop,
    .variant = videomae_variant,
    .model_type = "videomae",
    .display_name = "VideoMAE",
    .config_keys = videomae_keys,
    .config_size = sizeof(tb_videomae_config),
    .defaults = videomae_defaults,
    .parse_config = videomae_parse_config,
    .architecture = videomae_architecture,
    .write_config = videomae_write_config,
    .presets = videomae_presets,
    .no_decay = videomae_no_decay,
    .pretraining_only = videomae_pretraining_only,
    .new_after_pretraining = videomae_new_after_pretraining,
    .decoder = videomae_decoder,
    .decoder_weights = videomae_decoder_weights,
    .probe = videomae_probe,
    .head_prefix = "classifier.",
    .image_model_what = "VideoMAE has no image-ViT initialisation (its encoder is pre-trained by "
                        "masked autoencoding); use a TimeSformer or ViViT config",
};
