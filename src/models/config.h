/* config.json → tb_config: the fields and defaults every family shares (Hugging Face's
 * PretrainedConfig and ViT's); each family file adds its own fields, defaults and --arch presets
 * through its tb_family_ops (family.h), its fields in a struct private to its file
 * (tb_config.fam). Unknown fields are reported as warnings (typos surface). */
#ifndef TB_CONFIG_H
#define TB_CONFIG_H

#include "../common.h"
#include "../kernels/ops.h"

typedef enum { TB_VIDEOMAE, TB_TIMESFORMER, TB_VIVIT, TB_VIDEO_SWIN, TB_XCLIP, TB_VJEPA2 } tb_family;

/* Which tokens attend to which, per block. */
typedef enum {
    TB_ATTN_JOINT,   /* all tokens of a clip (VideoMAE, ViViT Model 1, TimeSformer joint) */
    TB_ATTN_DIVIDED, /* TimeSformer: time then space, each with its own weights */
    TB_ATTN_SPACE,   /* TimeSformer space_only: each frame on its own */
    TB_ATTN_LOCAL_GLOBAL, /* TimeSformer sparse local-global (L+G): local windows, then stride 2 */
    TB_ATTN_AXIAL,   /* TimeSformer axial (T+W+H): time, width, height, each with its own weights */
} tb_attn_type;

typedef struct {
    tb_family family;
    char model_type[32];
    int image_h, image_w, num_channels, num_frames;
    int tubelet_t, patch_h, patch_w;
    int hidden, layers, heads, intermediate;
    tb_act act;
    float ln_eps;
    double init_std; /* initializer_range: the std of random initialisation (HF default 0.02) */
    int qkv_bias;
    tb_attn_type attn;
    int temporal_layers;    /* blocks of a second, temporal encoder stage after the `layers` ones,
                               run when temporal_encoder is set (ViViT Model 2's L_t,
                               "num_temporal_layers"): the shared encoder's stage count */
    /* set by the family from the fields above (its defaults, parse_config, presets): */
    int cls_token;          /* 1: the token sequence starts with a cls token */
    int temporal_encoder;   /* 1: temporal_layers blocks follow the layers ones (ViViT Model 2) */
    int pad_to_patch;       /* 1: the input is padded to whole patches (Video Swin's PatchEmbed3d);
                               0: the pixels past the last whole patch are dropped */
    int num_labels;
    char **labels;          /* num_labels strings (owned), "LABEL_i" where id2label is silent */
    double hidden_dropout, attn_dropout; /* hidden_dropout_prob, attention_probs_dropout_prob
                                            (training only; HF default 0; double so that
                                            config.json round-trips them exactly) */
    double layer_scale;     /* the shared encoder's layer scale (BEiT's "layer_scale_init_value";
                               VideoMAE's config reads it): > 0: each block scales its attention
                               and MLP outputs by learned lambda_1, lambda_2 (tb_block.ls1, ls2;
                               STMixer's gamma_1, gamma_2), initialised to this value; 0: none
                               (docs/stmixer-backbone.md) */
    int pretraining;        /* 1: the family's masked-autoencoder pretraining model (VideoMAE's
                               "VideoMAEForPreTraining"): no classifier; pretrain.c runs it with
                               the decoder its family's `decoder` hook describes */
    int repeat_short_clips; /* 1: a clip of fewer frames than a tubelet is repeated in time up to
                               it, as torch's repeat (V-JEPA 2's embeddings); 0: refused */
    void *fam;              /* the family's own fields, its private struct (tb_family_ops.
                               config_size bytes, owned: tb_config_free frees it); a tb_config
                               copied by value (a model view) borrows it */
} tb_config;

int tb_config_parse(tb_config *c, const char *json_text, const char *path, const tb_log *log,
                    tb_err *e);
/* The built-in architectures at their published shapes (see tubelet_arch_name). */
int tb_config_arch(tb_config *c, const char *arch, tb_err *e);
const char *tb_config_arch_name(int i);
void tb_config_free(tb_config *c);
void tb_config_free_labels(tb_config *c);
/* config.json text for c (malloc'd; NULL when out of memory). */
char *tb_config_to_json(const tb_config *c);
/* A lower bound of the bytes of the model's f32 weights (the encoder's products, the patch
 * embedding and the head): checked against the memory there is before anything is allocated. */
double tb_config_weight_bytes(const tb_config *c);
const char *tb_family_name(tb_family f);

/* ---- config.json pieces the family files' config hooks share ---- */
struct cJSON;
/* Readers of one field: absent or null keeps *out (the default); a bad value fails naming the
 * file and the field. tb_cfg_ints: an int, or a list of n (image_size may be [h, w]);
 * tb_cfg_list: a list of 1 to max entries, its length in *n. */
int tb_cfg_int(const struct cJSON *j, const char *key, int *out, int lo, int hi, const char *path,
               tb_err *e);
int tb_cfg_bool(const struct cJSON *j, const char *key, int *out, const char *path, tb_err *e);
int tb_cfg_ints(const struct cJSON *j, const char *key, int *out, int n, const char *path,
                tb_err *e);
int tb_cfg_list(const struct cJSON *j, const char *key, int *out, int *n, int max, int lo, int hi,
                const char *path, tb_err *e);
/* Hugging Face's 2-d patch_size (an int, or [h, w]): read into patch_h, patch_w; written. */
int tb_cfg_patch_size(tb_config *c, const struct cJSON *j, const char *path, tb_err *e);
void tb_cfg_write_patch_size(struct cJSON *j, const tb_config *c);
/* An activation's Hugging Face hidden_act name ("gelu_new" for TB_ACT_GELU_TANH). */
const char *tb_cfg_act_name(tb_act a);
/* The fields of a Hugging Face ViT config, num_channels to the dropouts; the dropouts alone. */
void tb_cfg_write_vit_fields(struct cJSON *j, const tb_config *c);
void tb_cfg_write_dropout(struct cJSON *j, const tb_config *c);

/* Tokens along each axis for an input of the config's size. */
static inline int tb_grid_div(const tb_config *c, int n, int p) {
    return c->pad_to_patch ? (n + p - 1) / p : n / p;
}
static inline int tb_grid_t(const tb_config *c, int frames) {
    if (c->repeat_short_clips && frames < c->tubelet_t) return frames; /* frames x tubelet_t
                                                                          after the repeat */
    return tb_grid_div(c, frames, c->tubelet_t);
}
static inline int tb_grid_h(const tb_config *c, int h) { return tb_grid_div(c, h, c->patch_h); }
static inline int tb_grid_w(const tb_config *c, int w) { return tb_grid_div(c, w, c->patch_w); }
/* Encoder blocks in all: ViViT Model 2's temporal encoder follows its spatial one. */
static inline int tb_n_blocks(const tb_config *c) {
    return c->layers + (c->temporal_encoder ? c->temporal_layers : 0);
}
/* 1 if the token sequence starts with a cls token (ViViT Models 3 and 4 and VideoMAE have none). */
static inline int tb_has_cls(const tb_config *c) { return c->cls_token; }

#endif
