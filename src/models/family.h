/* What a model family is: one table per family file (videomae.c, timesformer.c, vivit.c,
 * video_swin.c, xclip.c), found only through the registry (families.c; tests/check_models.sh
 * checks it). Two interfaces:
 *  - tb_family_ops, what every family is: its parameters and token layout, FLOPs, config.json
 *    (fields, defaults, --arch presets, the config.json it writes), its initialisation from an
 *    image model, its image processor's defaults, the optimiser's view of its parameters;
 *  - tb_vit_hooks, what only the families the shared encoder runs fill (`vit`): token sets,
 *    positions, tokens. model.c then runs them with tb_vit_encoder_model (vit_model.c over
 *    plan.c, encoder.c, outputs.c, vit_train.c); a family without them has its own runner
 *    `model` (tb_model_ops: planning a state, forward, feature levels, training, its linear
 *    layers; Video Swin's stages, X-CLIP's towers).
 * The other files of src/models call a family only through its table and never test which family
 * it is (tests/check_models.sh checks that no file of src/models but the family files and
 * families.c names a family or compares its id, and that no call circle runs through a table).
 * A family with a second input (issue 31's X-CLIP: text) adds `text` (tb_text_ops).
 * A new family: docs/architecture.md, "Adding a family", lists what it touches. */
#ifndef TB_FAMILY_H
#define TB_FAMILY_H

#include "state.h"

/* An --arch preset: its name and what it changes over the family's defaults, which start with
 * 400 labels (Kinetics-400); NULL: nothing. */
typedef struct tb_arch_preset {
    const char *name;
    void (*apply)(tb_config *c, const char *name);
} tb_arch_preset;

struct cJSON;

/* The defaults of a family's Hugging Face image processor where they differ from
 * VideoMAEImageProcessor's (tb_preproc_config_default): preprocess.c applies them to a
 * preprocessor_config.json whose class name starts with `processor`, before its own keys. */
typedef struct tb_preproc_defaults {
    const char *processor;     /* the start of the class name: "Vivit" */
    int shortest_edge;         /* the short side resized to this */
    double rescale_factor;
    int offset;                /* 1: x * rescale_factor - 1 */
    float mean[3], std[3];
    int crop_size;             /* the class's default crop (0: VideoMAEImageProcessor's 224) */
    int shortest_from_crop;    /* 1: the short side is int(crop height * 256 / 224), whatever the
                                  file's size says (VJEPA2VideoProcessor's __init__) */
} tb_preproc_defaults;

/* The hooks of the shared ViT encoder (plan.c, encoder.c, vit_train.c): filled by the families
 * it runs (tb_family_ops.vit), and only by them. */
struct tb_linear_visitor; /* below */

typedef struct tb_vit_hooks {
    /* The attention steps of a block as token sets over a T x H x W grid (tb_attn_step); 0: one
     * attention over each whole sequence. *split_heads = 1: the sets are not steps but the
     * groups of the two halves of the heads of the block's one attention (ViViT Model 4). */
    int (*attention_plan)(const tb_config *c, int64_t T, int64_t H, int64_t W,
                          tb_attn_step st[TB_MAX_STEPS], int *split_heads);
    /* Frame t and spatial position n of the i-th patch row of a clip (after its cls token) for
     * a T-frame grid of N positions. */
    void (*patch_of_row)(int64_t i, int64_t T, int64_t N, int64_t *t, int64_t *n);
    /* Points s->pos / s->time_pos at position tables for the state's token grid. */
    int (*positions)(tubelet_state *s, tb_err *e);
    /* The embedded patches s->emb with cls tokens and positions into s->x, in the family's token
     * order (embedding dropout included), and its backward: dx (rows, D) → demb, and the
     * gradients of cls, positions, time embeddings (dx is overwritten). */
    void (*tokens)(tubelet_state *s);
    void (*tokens_backward)(tubelet_state *s, float *dx, float *demb);
    /* Between stage 0 and stage 1 (NULL with one stage): stage 0's output xs → stage 1's input
     * xt; frames (if not NULL) keeps what the backward needs. Its backward: dxt → dxs. */
    void (*stage_tokens)(tubelet_state *s, const float *xs, float *xt, float *frames);
    void (*stage_tokens_backward)(tubelet_state *s, float *dxt, const float *frames,
                                  float *dframes, float *dxs);
    int mlp_act_dropout; /* 1: dropout after the MLP's activation (TimeSformer's intermediate) */
    /* Positions applied to the queries and keys after their projections (V-JEPA 2's rotary
     * embeddings): q and k of qkv (s->rows, 3D) in place; backward: the transpose, on their
     * gradients. NULL: positions are added to the tokens instead (tokens). */
    void (*rotate_qk)(tubelet_state *s, float *qkv, int backward);
    /* Each sequence's pooled vector from its final-normed tokens hidden (s->rows, D) into
     * s->pooled (V-JEPA 2's attentive pooler), and its backward from s->train->dpooled into
     * dhidden (s->rows, D; zero on entry). NULL: token 0, or the mean (has_fc_norm, mean_pool). */
    void (*pool)(tubelet_state *s, const float *hidden);
    void (*pool_backward)(tubelet_state *s, float *dhidden);
    /* The family's own part of a state (s->fam: V-JEPA 2's positions and pooler buffers), made
     * last by the plan, its training buffers made by enable_training, both freed by free_plan
     * (also after a failed plan or a failed enable_training). NULL: none. */
    int (*plan)(tubelet_state *s, tb_err *e);
    int (*enable_training)(tubelet_state *s, tb_err *e);
    void (*free_plan)(tubelet_state *s);
    /* The family's own linear layers beside the encoder's (V-JEPA 2's pooler), handed to the
     * visitor after the blocks and before the classifier (tb_vit_each_linear: packed for
     * inference, converted to bf16 or int8), and their f32 bytes (tb_vit_linear_bytes).
     * NULL: none. */
    int (*each_linear)(tubelet_model *m, const struct tb_linear_visitor *v, void *job);
    size_t (*linear_bytes)(const tubelet_model *m);
} tb_vit_hooks;

/* The masked-autoencoder decoder of a pretraining model (tb_family_ops.decoder; pretrain.c):
 * decoder_hidden_size, decoder_num_hidden_layers, decoder_num_attention_heads,
 * decoder_intermediate_size, and 1 if the targets are normalised per patch (norm_pix_loss). */
typedef struct tb_decoder_dims {
    int hidden, layers, heads, intermediate, norm_pix_loss;
} tb_decoder_dims;
/* Its weights, the family's own (in its tb_weightset.fam; tb_family_ops.decoder_weights), or
 * their gradients: encoder_to_decoder (no bias), the mask token (D_dec), the fixed sinusoid
 * positions (num_patches, D_dec; no parameter: NULL in gradients), its blocks (the `decoder`
 * layers), its norm and its head. */
typedef struct tb_decoder_weights {
    tb_lin enc_to_dec;
    const float *mask_token, *pos;
    tb_block *blocks;
    tb_ln norm;
    tb_lin head;
} tb_decoder_weights;

typedef struct tb_family_ops {
    tb_family id;
    /* ---- config.json and --arch (config.c runs the shared fields, then these) ---- */
    const char *model_type;          /* config.json's "model_type" */
    const char *display_name;        /* for messages: "Video Swin" */
    const char *const *config_keys;  /* the config.json fields the family reads (NULL-ended) */
    /* The size of its own config struct (tb_config.fam), defined in its file: plain data, no
     * pointers, so config.c allocates it zeroed before defaults and frees it with the config;
     * 0: the shared fields are all it has. */
    size_t config_size;
    /* The family's defaults over config.c's shared ones (its Hugging Face config class's). */
    void (*defaults)(tb_config *c);
    /* The family's own fields of config.json (after the shared ones are read). */
    int (*parse_config)(tb_config *c, const struct cJSON *j, const char *path, const tb_log *log,
                        tb_err *e);
    /* Checks before the shared ones (NULL: none); may set fields derived from the others. */
    int (*check_config)(tb_config *c, const char *path, tb_err *e);
    /* config.json's "architectures" entry, and its fields after "image_size" (tb_config_to_json) */
    const char *(*architecture)(const tb_config *c);
    void (*write_config)(struct cJSON *j, const tb_config *c);
    /* tb_config_weight_bytes (NULL: the shared encoder's) */
    double (*weight_bytes)(const tb_config *c);
    const tb_arch_preset *presets;   /* the --arch presets, ended by a NULL name */

    /* Every parameter under the family's Hugging Face names (tb_param, tb_build_*; run a second
     * time in gradient mode by tubelet_grads_new). */
    int (*build)(tubelet_model *m, tb_weightset *ws, tb_err *e);
    /* The sequences each encoder stage runs over for B clips of a gt x N patch grid (st[k].x
     * left NULL); returns the number of stages (ViViT Model 2: 2, others 1). */
    int (*sequences)(const tb_config *c, int64_t B, int64_t gt, int64_t N, tb_stage st[2]);
    /* Row of patch token (clip b, time it, row iy, column ix) in the last hidden state. */
    int64_t (*token_row)(const tubelet_state *s, int64_t b, int64_t it, int64_t iy, int64_t ix);
    /* Frame tokens per clip that the last hidden state holds in place of patch tokens, after a
     * cls token (ViViT Model 2's temporal encoder: [cls; T frames]): tubelet_pool reads them,
     * the feature map is zero. NULL, or 0 for this state: patch tokens, at token_row. */
    int64_t (*frame_tokens)(const tubelet_state *s);
    /* FLOPs of one clip of T x H x W pixels (tubelet_model_flop_per_clip). */
    double (*flop)(const tb_config *c, int T, int H, int W);
    /* The variant tubelet_model_info reports. */
    const char *(*variant)(const tb_config *c);
    /* The stages tubelet_model_info reports (num_stages, stage[], window_size); NULL: none. */
    void (*stages)(const tb_config *c, tubelet_model_info *info);
    /* ---- initialisation from an image model (image_init.h; docs/image-init.md) ---- */
    const char *image_model_type; /* the image model's config.json model_type ("vit", "swin") */
    /* What the image model must be, for the error naming another ("an image ViT (...)"); without
     * image_open, the message refusing any. */
    const char *image_model_what;
    /* The image model's config.json j checked against c (c may take its activation, epsilon,
     * ...), and its weights opened into v; NULL: the family has no image initialisation. */
    int (*image_open)(tb_vit *v, const struct cJSON *j, const char *path, tb_config *c,
                      const tb_log *log, tb_err *e);
    /* The image weights written over a model built with random weights from that config. */
    int (*image_copy)(tb_vit *v, tubelet_model *m, int inflate, int keep_head, tb_err *e);
    /* Its image processor's defaults (NULL: VideoMAEImageProcessor's, preprocess.c's own). */
    const tb_preproc_defaults *preprocess;
    /* ---- the optimiser (tubelet_model_tensor_group) ---- */
    /* How the names of the matrices that take no weight decay end (positions, cls and mask
     * tokens; NULL-ended, NULL: none); a tensor of ndim <= 1 (norms, biases) never does. */
    const char *const *no_decay;
    /* Depth of parameter `name` for layer-wise learning-rate decay (tubelet_model_tensor_group);
     * NULL: tb_param_layer's shared rule. */
    int (*param_layer)(const tb_config *c, const char *name);
    /* A classifier loaded from the family's pretraining checkpoint (tubelet_model.
     * from_pretraining): the starts of the names of the tensors it drops on purpose (VideoMAE's
     * decoder), and of those it makes new besides the classifier (fc_norm); NULL-ended, NULL:
     * none. */
    const char *const *pretraining_only, *const *new_after_pretraining;
    /* Its pretraining model's decoder (for a config with `pretraining`: pretrain.c); NULL: the
     * family has no pretraining model. */
    void (*decoder)(const tb_config *c, tb_decoder_dims *d);
    /* ... and where its weights (or their gradients) are in a weightset the family built. */
    tb_decoder_weights *(*decoder_weights)(const tb_weightset *ws);
    /* The starts of the names of the tensors between the encoder's last hidden state and the
     * classifier (V-JEPA 2's pooler, VideoMAE's fc_norm): trained with it when the encoder is
     * frozen (tubelet_model_tensor_is_probe); NULL-ended, NULL: none. */
    const char *const *probe;
    /* The starts of the names of tensors its files carry that it loads past on purpose, without
     * a warning (V-JEPA 2's predictor, which serves JEPA pretraining only); NULL-ended, NULL: none. */
    const char *const *not_run;
    /* How many parameters those are for config c (tubelet_model_info.n_params_not_run); NULL: 0. */
    int64_t (*params_not_run)(const tb_config *c);
    /* The classifier's parameter names start with this (Hugging Face's "classifier.",
     * torchvision's "head."): re-made when the data has other classes (tb_is_head_param); NULL: the family has no
     * classifier (X-CLIP). */
    const char *head_prefix;
    /* Image initialisation's default (TUBELET_TUBELET_DEFAULT): 1 inflates the image patch filter
     * over time (Video Swin's inflate_weights), 0 puts it at the central frame (ViViT's). */
    int inflate_by_default;
    double init_trunc;   /* > 0: the random normal weights are truncated to |x| <= init_trunc, as
                            the reference's trunc_normal_(std, a = -2, b = 2) (absolute bounds:
                            +-100 std at 0.02); 0: plain normal_ */
    /* Who runs the family, one of two: vit, the shared ViT encoder's hooks (tb_vit_hooks below),
     * which then runs it (tb_vit_encoder_model); or model, its own runner (Video Swin, whose
     * width changes from stage to stage; X-CLIP, with its prompts and text tower). */
    const struct tb_vit_hooks *vit;
    const struct tb_model_ops *model;
    /* A second input beside the video: the text tower of a video-text family (X-CLIP); NULL for
     * the video-only families. */
    const struct tb_text_ops *text;
} tb_family_ops;

/* What a family's each_linear hands its linear layers to (precision.c packs them for inference):
 * lin, one layer (out N, in K) under its name in int8_scales.json ("blocks.3.fc1"; NULL: numbered
 * "linear.i"); mha, an attention's q, k, v (D x D each, fused into one weight "NAME.qkv") and its
 * output ("NAME.out"); done, the f32 copies of the layers handed so far may go (called between
 * blocks, so that the f32 and packed copies never add up). */
typedef struct tb_linear_visitor {
    int (*lin)(void *job, const char *name, tb_lin *l, int64_t N, int64_t K);
    int (*mha)(void *job, const char *name, tb_mha *a, int64_t D);
    void (*done)(void *job);
} tb_linear_visitor;

/* The model runner (tb_family_ops.model): what the public entry points (plan.c, forward.c,
 * train_step.c, precision.c) call for every family, unconditionally. The state plan makes keeps
 * the shared view of the model's last stage — grid_*, stages[0] (B sequences of its tokens),
 * rows, cfg.hidden its width — so that last_hidden_state, feature maps and pooling (outputs.c)
 * work unchanged; a runner's own plan and buffers live in s->fam. */
typedef struct tb_model_ops {
    /* the state's plan for its input shape (s->B, T, H, W; s->n_visible > 0: that many visible
     * tokens per clip, tb_state_new_visible) and its buffers; free_state frees what plan made
     * beyond the shared arena, training buffers and product context (also after a failed plan) */
    int (*plan)(tubelet_state *s, tb_err *e);
    void (*free_state)(tubelet_state *s);
    /* logits (NULL: none); returns last_hidden_state (s->rows, cfg.hidden). In a training step
     * (s->train->active) it also draws the step's drop-path masks and keeps what backward needs,
     * and logits is s->train->dlogits. */
    const float *(*forward)(tubelet_state *s, const float *pix, float *logits);
    /* *hidden: the hidden state after block `layer` (-1: last_hidden_state; the caller checked
     * -1 <= layer <= cfg.layers); TUBELET_ERR_UNSUPPORTED where the model has no such state */
    int (*hidden)(tubelet_state *s, const float *pix, int layer, const float **hidden,
                  tb_err *e);
    /* feature maps into out[i], i < n_levels (each a buffer): layers NULL, the model's levels
     * (the shared encoder: last_hidden_state each; Video Swin: stage i's output); else the hidden
     * state after block layers[i] (-1: last_hidden_state), or TUBELET_ERR_UNSUPPORTED */
    int (*levels)(tubelet_state *s, const float *pix, int n_levels, const int *layers,
                  float *const *out, tb_err *e);
    /* level's feature map shape (B, C, T, H, W) */
    int (*level_shape)(const tubelet_state *s, int level, int64_t shape[5]);
    /* training buffers (s->train, whose arena holds dlogits), and the backward from dlogits */
    int (*enable_training)(tubelet_state *s, int checkpoint, tb_err *e);
    void (*backward)(tubelet_state *s);
    /* every linear layer, handed to v for packing in reduced precision (precision.c) */
    int (*each_linear)(tubelet_model *m, const tb_linear_visitor *v, void *job);
    /* bytes of the linear layers' f32 weights (tb_model_linear_bytes, unpacked) */
    size_t (*linear_bytes)(const tubelet_model *m);
    int attention_f32; /* 1: attention stays f32 in packed precisions (Video Swin's biased one) */
    int can_freeze_encoder; /* 1: its forward and backward honour s->train->frozen_encoder */
} tb_model_ops;

/* The shared encoder as a model runner (vit_model.c; its other hooks in plan.c, vit_train.c,
 * precision.c): the ViT families' `model`. */
extern const tb_model_ops tb_vit_encoder_model;

/* The second input (tb_family_ops.text): a text tower beside the video (xclip.c), behind
 * include/tubelet_text.h's tubelet_text_dims, tubelet_encode_text and tubelet_forward_text
 * (forward.c); the tokenizer is a separate file (src/text/). */
typedef struct tb_text_ops {
    /* the width of the embeddings and the longest token sequence */
    void (*dims)(const tubelet_model *m, int *embed_dim, int *context);
    /* the number of token embeddings (ids are in [0, vocab_size)) */
    int (*vocab_size)(const tubelet_model *m);
    /* n texts' token ids (n, context) → their projected embeddings (n, embed_dim) */
    int (*encode)(tubelet_model *m, const int32_t *ids, int n, int context, float *out,
                  tb_err *e);
    /* a video pass, then logits (B, n) against n text embeddings; video (B, embed_dim) and
     * text_out (B, n, embed_dim), the normalised embeddings, when not NULL */
    int (*logits)(tubelet_state *s, const float *pix, const float *text, int n, float *logits,
                  float *video, float *text_out, tb_err *e);
    /* a video pass: the video embeddings before normalising (B, embed_dim) */
    void (*encode_video)(tubelet_state *s, const float *pix, float *video);
} tb_text_ops;

/* The registry (families.c): the table of family f, NULL if none; the i-th family, NULL past
 * the last. */
const tb_family_ops *tb_family_ops_of(tb_family f);
const tb_family_ops *tb_family_at(int i);
/* The image processor defaults of the family whose processor class starts `processor_class`
 * names (preprocess.c); NULL: none differs from VideoMAEImageProcessor's. */
const tb_preproc_defaults *tb_family_preprocess(const char *processor_class);

/* ---- pieces several families share ---- */

/* One sequence per clip: its patches, after a cls token if the config has one. */
static inline int tb_sequences_per_clip(const tb_config *c, int64_t B, int64_t gt, int64_t N,
                                        tb_stage st[2]) {
    const int64_t L = gt * N + tb_has_cls(c);
    st[0] = (tb_stage){NULL, B, L, B * L};
    return 1;
}
/* One sequence per frame, each with its own cls token. */
static inline int tb_sequences_per_frame(int64_t B, int64_t gt, int64_t N, tb_stage st[2]) {
    st[0] = (tb_stage){NULL, B * gt, N + 1, B * gt * (N + 1)};
    return 1;
}
/* Patch rows in (frame, position) order: row t N + n. */
static inline void tb_patch_of_row_by_frame(int64_t i, int64_t T, int64_t N, int64_t *t,
                                            int64_t *n) {
    (void)T;
    *t = i / N, *n = i % N;
}

/* The token sets TimeSformer and ViViT share: time, the T tokens of one spatial position; space,
 * the H W tokens of one frame. */
static inline int64_t tb_time_group(int64_t t, int64_t y, int64_t x, int64_t H, int64_t W) {
    (void)t, (void)H;
    return y * W + x;
}
static inline int64_t tb_space_group(int64_t t, int64_t y, int64_t x, int64_t H, int64_t W) {
    (void)y, (void)x, (void)H, (void)W;
    return t;
}

/* FLOPs (2 x multiply-adds) of one attention: projections of `rows` tokens plus QK^T and AV over
 * n_groups groups of L tokens. */
static inline double tb_attn_flop(double rows, double groups, double L, double D) {
    return 2 * rows * D * 3 * D + 4 * groups * L * L * D + 2 * rows * D * D;
}
/* FLOPs of a clip: the embedding, `extra` (ViViT Model 2's temporal encoder), c->layers blocks of
 * `attn` attention FLOPs and an MLP over `rows` tokens, and the classifier over head_rows
 * pooled vectors. */
static inline double tb_clip_flop(const tb_config *c, double gt, double N, double extra,
                                  double attn, double rows, double head_rows) {
    const double D = c->hidden, I = c->intermediate;
    const double patch_in = (double)c->num_channels * c->tubelet_t * c->patch_h * c->patch_w;
    double f = 2 * gt * N * D * patch_in;
    f += extra;
    attn += 4 * rows * D * I;
    f += c->layers * attn;
    if (c->num_labels > 0) f += 2 * head_rows * D * c->num_labels;
    return f;
}

/* Position tables resized bicubically per temporal slice (positions.c): VideoMAE's and ViViT's
 * rule. one_slice: the table holds one frame's positions (ViViT Model 2). */
int tb_positions_bicubic(tubelet_state *s, int one_slice, tb_err *e);

#endif
