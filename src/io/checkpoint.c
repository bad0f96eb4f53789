/* Official checkpoints as Hugging Face models. See checkpoint.h. */
#include "checkpoint.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint_flax.h"
#include "ckpt_cfg.h"
#include "flax_file.h"
#include "torch_file.h"

/* ---- name maps: official name (after the model's prefix) -> Hugging Face name ----
 * '#' in `from` is a number (a block, a stage: at most two). In `to`, '#' is the first, '$' the
 * second, '%' twice the first and '^' twice the first plus one (Video Swin's stage i is
 * torchvision's features[2i], its patch merging features[2i + 1]). A pattern ending in '.' takes
 * the rest of the name with it (weight, bias). part k > 0: the k-th third along dimension 0 (a
 * fused qkv split into q, k, v; HALF1, HALF2: its halves, a fused kv split into k, v); TRANSPOSE:
 * a matrix transposed (a parameter used as x @ P into a linear layer's weight). */
enum { TRANSPOSE = -1, HALF1 = 4, HALF2 = 5 }; /* HALF1/2: the first/second half along dim 0 */
typedef struct {
    const char *from, *to;
    int part;
} map_row;

/* facebookresearch/TimeSformer timesformer/models/vit.py, as transformers'
 * convert_timesformer_to_pytorch.py renames it. */
static const map_row TIMESFORMER_MAP[] = {
    {"cls_token", "timesformer.embeddings.cls_token", 0},
    {"pos_embed", "timesformer.embeddings.position_embeddings", 0},
    {"time_embed", "timesformer.embeddings.time_embeddings", 0},
    {"patch_embed.proj.", "timesformer.embeddings.patch_embeddings.projection.", 0},
    {"blocks.#.norm1.", "timesformer.encoder.layer.#.layernorm_before.", 0},
    {"blocks.#.attn.qkv.", "timesformer.encoder.layer.#.attention.attention.qkv.", 0},
    {"blocks.#.attn.proj.", "timesformer.encoder.layer.#.attention.output.dense.", 0},
    {"blocks.#.temporal_norm1.", "timesformer.encoder.layer.#.temporal_layernorm.", 0},
    {"blocks.#.temporal_attn.qkv.", "timesformer.encoder.layer.#.temporal_attention.attention.qkv.", 0},
    {"blocks.#.temporal_attn.proj.", "timesformer.encoder.layer.#.temporal_attention.output.dense.", 0},
    {"blocks.#.temporal_fc.", "timesformer.encoder.layer.#.temporal_dense.", 0},
    {"blocks.#.norm2.", "timesformer.encoder.layer.#.layernorm_after.", 0},
    {"blocks.#.mlp.fc1.", "timesformer.encoder.layer.#.intermediate.dense.", 0},
    {"blocks.#.mlp.fc2.", "timesformer.encoder.layer.#.output.dense.", 0},
    {"norm.", "timesformer.layernorm.", 0},
    {"head.", "classifier.", 0},
    {NULL, NULL, 0},
};

/* MCG-NJU/VideoMAE modeling_finetune.py / modeling_pretrain.py (the encoder), as transformers'
 * convert_videomae_to_pytorch.py renames it; STMixer's backbone has the same names, and its
 * layer scale gamma_1, gamma_2 become BEiT's lambda_1, lambda_2 (docs/stmixer-backbone.md). */
static const map_row VIDEOMAE_MAP[] = {
    {"patch_embed.proj.", "videomae.embeddings.patch_embeddings.projection.", 0},
    {"blocks.#.norm1.", "videomae.encoder.layer.#.layernorm_before.", 0},
    {"blocks.#.attn.qkv.weight", "videomae.encoder.layer.#.attention.attention.query.weight", 1},
    {"blocks.#.attn.qkv.weight", "videomae.encoder.layer.#.attention.attention.key.weight", 2},
    {"blocks.#.attn.qkv.weight", "videomae.encoder.layer.#.attention.attention.value.weight", 3},
    {"blocks.#.attn.q_bias", "videomae.encoder.layer.#.attention.attention.q_bias", 0},
    {"blocks.#.attn.v_bias", "videomae.encoder.layer.#.attention.attention.v_bias", 0},
    {"blocks.#.attn.proj.", "videomae.encoder.layer.#.attention.output.dense.", 0},
    {"blocks.#.norm2.", "videomae.encoder.layer.#.layernorm_after.", 0},
    {"blocks.#.mlp.fc1.", "videomae.encoder.layer.#.intermediate.dense.", 0},
    {"blocks.#.mlp.fc2.", "videomae.encoder.layer.#.output.dense.", 0},
    {"blocks.#.gamma_1", "videomae.encoder.layer.#.lambda_1", 0},
    {"blocks.#.gamma_2", "videomae.encoder.layer.#.lambda_2", 0},
    {"norm.", "videomae.layernorm.", 0},
    {"fc_norm.", "fc_norm.", 0},
    {"head.", "classifier.", 0},
    {NULL, NULL, 0},
};

/* Parts of a pretraining checkpoint that tubelet's encoder-only models do not use. */
static const char *const VIDEOMAE_DROPPED[] = {"decoder.", "mask_token", "encoder_to_decoder.", NULL};

/* torchvision's models/video/swin_transformer.py (SwinTransformer3d, swin3d_t/s/b): tubelet's own
 * names (docs/video-swin.md), so the map is the identity; it lists the layout. */
static const map_row SWIN_TORCHVISION_MAP[] = {
    {"patch_embed.proj.", "patch_embed.proj.", 0},
    {"patch_embed.norm.", "patch_embed.norm.", 0},
    {"features.#.#.norm1.", "features.#.$.norm1.", 0},
    {"features.#.#.attn.qkv.", "features.#.$.attn.qkv.", 0},
    {"features.#.#.attn.proj.", "features.#.$.attn.proj.", 0},
    {"features.#.#.attn.relative_position_bias_table", "features.#.$.attn.relative_position_bias_table", 0},
    {"features.#.#.norm2.", "features.#.$.norm2.", 0},
    {"features.#.#.mlp.0.", "features.#.$.mlp.0.", 0},
    {"features.#.#.mlp.3.", "features.#.$.mlp.3.", 0},
    {"features.#.norm.", "features.#.norm.", 0},
    {"features.#.reduction.", "features.#.reduction.", 0},
    {"norm.", "norm.", 0},
    {"head.", "head.", 0},
    {NULL, NULL, 0},
};

/* SwinTransformer/Video-Swin-Transformer mmaction/models/backbones/swin_transformer.py (mmaction2
 * 0.x; mmaction2 1.x's swin.py has the same names, its final norm is norm<last out_index>), under
 * the recognizer's "backbone."; as tools/convert_video_swin.py renames them. */
static const map_row SWIN_MMACTION2_MAP[] = {
    {"patch_embed.proj.", "patch_embed.proj.", 0},
    {"patch_embed.norm.", "patch_embed.norm.", 0},
    {"layers.#.blocks.#.norm1.", "features.%.$.norm1.", 0},
    {"layers.#.blocks.#.attn.qkv.", "features.%.$.attn.qkv.", 0},
    {"layers.#.blocks.#.attn.proj.", "features.%.$.attn.proj.", 0},
    {"layers.#.blocks.#.attn.relative_position_bias_table", "features.%.$.attn.relative_position_bias_table", 0},
    {"layers.#.blocks.#.norm2.", "features.%.$.norm2.", 0},
    {"layers.#.blocks.#.mlp.fc1.", "features.%.$.mlp.0.", 0},
    {"layers.#.blocks.#.mlp.fc2.", "features.%.$.mlp.3.", 0},
    {"layers.#.downsample.norm.", "features.^.norm.", 0},
    {"layers.#.downsample.reduction.", "features.^.reduction.", 0},
    {"norm.", "norm.", 0},
    {"norm#.", "norm.", 0},
    {NULL, NULL, 0},
};

/* mmaction2's I3DHead, beside the backbone. */
static const map_row SWIN_MMACTION2_HEAD[] = {
    {"cls_head.fc_cls.", "head.", 0},
    {NULL, NULL, 0},
};

/* microsoft/VideoX X-CLIP/models/xclip.py (OpenAI CLIP's names, the MIT, the prompt generator),
 * as transformers' convert_x_clip_original_pytorch_to_hf.py renames it: the fused in_proj of
 * every attention split into q, k, v, and the two projections transposed. The prompt
 * generator's decoder layers, its alpha and logit_scale keep their names (no row). */
#define XC_BLOCK(from, to)                                                                         \
    {from "ln_1.", to "layer_norm1.", 0}, {from "ln_2.", to "layer_norm2.", 0},                    \
    {from "mlp.c_fc.", to "mlp.fc1.", 0}, {from "mlp.c_proj.", to "mlp.fc2.", 0},                  \
    {from "attn.out_proj.", to "self_attn.out_proj.", 0},                                          \
    {from "attn.in_proj_weight", to "self_attn.q_proj.weight", 1},                                 \
    {from "attn.in_proj_weight", to "self_attn.k_proj.weight", 2},                                 \
    {from "attn.in_proj_weight", to "self_attn.v_proj.weight", 3},                                 \
    {from "attn.in_proj_bias", to "self_attn.q_proj.bias", 1},                                     \
    {from "attn.in_proj_bias", to "self_attn.k_proj.bias", 2},                                     \
    {from "attn.in_proj_bias", to "self_attn.v_proj.bias", 3}
static const map_row XCLIP_MAP[] = {
    {"visual.conv1.weight", "vision_model.embeddings.patch_embedding.weight", 0},
    {"visual.class_embedding", "vision_model.embeddings.class_embedding", 0},
    {"visual.positional_embedding", "vision_model.embeddings.position_embedding.weight", 0},
    {"visual.ln_pre.", "vision_model.pre_layernorm.", 0},
    {"visual.ln_post.", "vision_model.post_layernorm.", 0},
    {"visual.proj", "visual_projection.weight", TRANSPOSE},
    XC_BLOCK("visual.transformer.resblocks.#.", "vision_model.encoder.layers.#."),
    {"visual.transformer.resblocks.#.message_fc.", "vision_model.encoder.layers.#.message_fc.", 0},
    {"visual.transformer.resblocks.#.message_ln.", "vision_model.encoder.layers.#.message_ln.", 0},
    {"visual.transformer.resblocks.#.message_attn.out_proj.",
     "vision_model.encoder.layers.#.message_attn.out_proj.", 0},
    {"visual.transformer.resblocks.#.message_attn.in_proj_weight",
     "vision_model.encoder.layers.#.message_attn.q_proj.weight", 1},
    {"visual.transformer.resblocks.#.message_attn.in_proj_weight",
     "vision_model.encoder.layers.#.message_attn.k_proj.weight", 2},
    {"visual.transformer.resblocks.#.message_attn.in_proj_weight",
     "vision_model.encoder.layers.#.message_attn.v_proj.weight", 3},
    {"visual.transformer.resblocks.#.message_attn.in_proj_bias",
     "vision_model.encoder.layers.#.message_attn.q_proj.bias", 1},
    {"visual.transformer.resblocks.#.message_attn.in_proj_bias",
     "vision_model.encoder.layers.#.message_attn.k_proj.bias", 2},
    {"visual.transformer.resblocks.#.message_attn.in_proj_bias",
     "vision_model.encoder.layers.#.message_attn.v_proj.bias", 3},
    {"token_embedding.weight", "text_model.embeddings.token_embedding.weight", 0},
    {"positional_embedding", "text_model.embeddings.position_embedding.weight", 0},
    XC_BLOCK("transformer.resblocks.#.", "text_model.encoder.layers.#."),
    {"ln_final.", "text_model.final_layer_norm.", 0},
    {"text_projection", "text_projection.weight", TRANSPOSE},
    {"mit.positional_embedding", "mit.position_embedding", 0},
    XC_BLOCK("mit.resblocks.#.", "mit.encoder.layers.#."),
    {"prompts_visual_proj", "prompts_visual_projection", 0},
    {"prompts_visual_ln.", "prompts_visual_layernorm.", 0},
    {"prompts_generator.norm.", "prompts_generator.layernorm.", 0},
    {NULL, NULL, 0},
};
#undef XC_BLOCK

/* Buffers both Video Swins store and rebuild from the window size (int64). */
static const char SWIN_DROPPED_SUFFIX[] = "attn.relative_position_index";

/* Heads of the published ViT sizes (head size 64, but ViT-H/g): hidden size -> heads. */
static const int KNOWN_HEADS[][2] = {{192, 3}, {384, 6}, {768, 12}, {1024, 16}, {1280, 16}, {1408, 16}};

/* Matches name against pattern; the numbers go to num[0], num[1], the rest of a '.'-ended
 * pattern to *rest. */
static int match(const char *pat, const char *name, long num[2], const char **rest) {
    int k = 0;
    num[0] = num[1] = -1, *rest = "";
    while (*pat) {
        if (*pat == '#') {
            if (*name < '0' || *name > '9' || k == 2) return 0;
            char *end;
            num[k++] = strtol(name, &end, 10);
            if (end - name > 6) return 0;
            name = end, pat++;
            continue;
        }
        if (*pat != *name) return 0;
        if (pat[0] == '.' && !pat[1]) {
            *rest = name + 1;
            return **rest && !strchr(*rest, '.');
        }
        pat++, name++;
    }
    return *name == 0;
}

static void render(char *out, size_t cap, const char *to, const long num[2], const char *rest) {
    size_t n = 0;
    for (const char *p = to; *p && n + 1 < cap; p++) {
        if (strchr("#$%^", *p)) { /* *p is not the NUL, which strchr would find */
            const long v = *p == '#' ? num[0] : *p == '$' ? num[1] : 2 * num[0] + (*p == '^');
            n += (size_t)snprintf(out + n, cap - n, "%ld", v);
        } else {
            out[n++] = *p;
        }
        if (n >= cap) n = cap - 1;
    }
    out[n] = 0;
    snprintf(out + n, cap - n, "%s", rest);
}

/* ---- what the converted tensors hold on to ---- */
typedef struct {
    tf_file *f;
    tf_file *probe;   /* V-JEPA 2: the attentive probe's own file (TUBELET_VJEPA2_PROBE) */
    st_tensor *ts;
    int n, cap;
    char **names;   /* one per ts */
    void **owned;   /* converted copies */
    int n_owned;
    void *keep;       /* what the tensors of another reader point into (checkpoint_flax.c) */
    void (*keep_free)(void *keep);
} holder;

static void holder_free(void *p) {
    holder *h = p;
    if (!h) return;
    for (int i = 0; i < h->n; i++) free(h->names[i]);
    for (int i = 0; i < h->n_owned; i++) tb_free(h->owned[i]);
    free(h->names), free(h->owned), free(h->ts);
    tf_close(h->f);
    tf_close(h->probe);
    if (h->keep_free) h->keep_free(h->keep);
    free(h);
}

/* Adds t (or its third `part` along dimension 0) under name: in place when contiguous f32, f16
 * or bf16 (weights.c converts the halves), else copied into float32. */
static int add_tensor(holder *h, const char *name, const tf_tensor *src, int part, const char *path,
                      tb_err *e) {
    tf_tensor t = *src;
    if (part == TRANSPOSE) {
        if (t.ndim != 2)
            return tb_fail(e, TUBELET_ERR_SHAPE, "%s: tensor '%s' has %d dimensions; a projection "
                           "matrix has 2", path, src->name, t.ndim);
        const int64_t n = t.shape[0], st = t.stride[0];
        t.shape[0] = t.shape[1], t.stride[0] = t.stride[1], t.shape[1] = n, t.stride[1] = st;
        t.contiguous = t.shape[0] <= 1 || t.shape[1] <= 1 ? t.contiguous : 0;
    } else if (part) {
        const int n = part >= HALF1 ? 2 : 3, k = part >= HALF1 ? part - HALF1 : part - 1;
        if (t.ndim < 1 || t.shape[0] % n)
            return tb_fail(e, TUBELET_ERR_SHAPE, "%s: tensor '%s' cannot be split in %s along "
                           "its first dimension", path, src->name, n == 2 ? "two" : "three");
        t.shape[0] /= n;
        t.base += (size_t)(k * t.shape[0] * t.stride[0]) * tp_dtype_size(t.dtype);
    }
    if (t.dtype != TP_F32 && t.dtype != TP_F16 && t.dtype != TP_BF16 && t.dtype != TP_F64)
        return tb_fail(e, TUBELET_ERR_FORMAT, "%s: tensor '%s' has dtype %s; weights must be "
                       "float32, float16, bfloat16 or float64", path, src->name, tp_dtype_name(t.dtype));
    if (h->n == h->cap) {
        int cap = h->cap ? 2 * h->cap : 64;
        st_tensor *ts = realloc(h->ts, sizeof *ts * (size_t)cap);
        if (ts) h->ts = ts;
        char **nm = realloc(h->names, sizeof *nm * (size_t)cap);
        if (nm) h->names = nm;
        if (!ts || !nm) return tb_fail(e, TUBELET_ERR_MEMORY, "%s: out of memory", path);
        h->cap = cap;
    }
    st_tensor *o = &h->ts[h->n];
    memset(o, 0, sizeof *o);
    if (!(h->names[h->n] = strdup(name))) return tb_fail(e, TUBELET_ERR_MEMORY, "%s: out of memory", path);
    h->n++;
    o->name = h->names[h->n - 1];
    o->ndim = t.ndim;
    for (int i = 0; i < t.ndim; i++) o->shape[i] = t.shape[i];
    const size_t numel = (size_t)tf_numel(&t);
    if (t.contiguous && t.dtype != TP_F64) {
        o->dtype = t.dtype == TP_F32 ? ST_F32 : t.dtype == TP_F16 ? ST_F16 : ST_BF16;
        o->data = t.base, o->nbytes = numel * tp_dtype_size(t.dtype);
        return TUBELET_OK;
    }
    float *buf = tb_alloc(numel ? numel * sizeof(float) : 1);
    void **ow = realloc(h->owned, sizeof *ow * (size_t)(h->n_owned + 1));
    if (ow) h->owned = ow;
    if (!buf || !ow) {
        tb_free(buf);
        return tb_fail(e, TUBELET_ERR_MEMORY, "%s: out of memory", path);
    }
    h->owned[h->n_owned++] = buf;
    tf_to_f32(&t, buf);
    o->dtype = ST_F32, o->data = buf, o->nbytes = numel * sizeof(float);
    return TUBELET_OK;
}

/* ---- the model inside the state dict ---- */
struct kind;

typedef struct {
    const struct kind *kind; /* which codebase's model (KINDS), NULL: none found */
    char prefix[128];   /* before patch_embed.proj.weight: "model.", "module.encoder.", ... */
    const tf_file *f;
    const char *probe_path; /* V-JEPA 2: TUBELET_VJEPA2_PROBE, or NULL */
    int online;             /* V-JEPA 2: the encoder is "encoder", not "target_encoder" */
    int fell_back;          /* V-JEPA 2: "target_encoder" was asked for, the file has "encoder" only */
} layout;

static const struct kind *kind_of(const tf_file *f, const char *prefix, const char *key,
                                  int ndim);

/* The patch embedding's name in each codebase (KINDS' keys). */
static const char *const PATCH_KEYS[] = {"patch_embed.proj.weight", "visual.conv1.weight"};

static int vjepa2_layout(const tf_file *f, const char *path, layout *l, tb_err *e);

static int find_layout(const tf_file *f, const char *path, layout *l, tb_err *e) {
    memset(l, 0, sizeof *l);
    l->f = f;
    if (tf_nested(f)) return vjepa2_layout(f, path, l, e);
    const char *found = NULL;
    for (int i = 0; i < tf_count(f); i++) {
        const tf_tensor *t = tf_at(f, i);
        for (size_t q = 0; q < sizeof PATCH_KEYS / sizeof *PATCH_KEYS; q++) {
            const char *key = PATCH_KEYS[q];
            size_t n = strlen(t->name), k = strlen(key);
            if (n < k || strcmp(t->name + n - k, key) || (n > k && t->name[n - k - 1] != '.'))
                continue;
            if (n - k >= sizeof l->prefix || !strncmp(t->name, "decoder", 7)) continue;
            if (l->kind)
                return tb_fail(e, TUBELET_ERR_FORMAT, "%s: two models' patch embeddings ('%s%s' "
                               "and '%s'); give a file with one", path, l->prefix, found, t->name);
            memcpy(l->prefix, t->name, n - k);
            l->prefix[n - k] = 0;
            found = key;
            if (!(l->kind = kind_of(f, l->prefix, key, (int)t->ndim)))
                return tb_fail(e, TUBELET_ERR_FORMAT, "%s: '%s' is neither a 2D (TimeSformer, "
                               "X-CLIP) nor a 3D (VideoMAE, Video Swin) patch embedding", path,
                               t->name);
        }
    }
    if (!l->kind)
        return tb_fail(e, TUBELET_ERR_FORMAT, "%s: no patch_embed.proj.weight or "
                       "visual.conv1.weight: not a TimeSformer, VideoMAE, Video Swin or X-CLIP "
                       "state dict", path);
    return TUBELET_OK;
}

/* The tensor <prefix><name>, or NULL. */
static const tf_tensor *get(const layout *l, const char *name) {
    char full[400];
    snprintf(full, sizeof full, "%s%s", l->prefix, name);
    return tf_find(l->f, full);
}

static int n_blocks(const layout *l) {
    int n = 0;
    char name[64];
    for (;;) {
        snprintf(name, sizeof name, "blocks.%d.norm1.weight", n);
        if (!get(l, name)) return n;
        n++;
    }
}

static int heads_for(int D, const char *path, const tb_log *log, tb_err *e, int *heads) {
    for (size_t i = 0; i < sizeof KNOWN_HEADS / sizeof *KNOWN_HEADS; i++)
        if (KNOWN_HEADS[i][0] == D) return *heads = KNOWN_HEADS[i][1], TUBELET_OK;
    if (D % 64 == 0) {
        *heads = D / 64;
        tb_warn(log, "%s: hidden size %d: assuming %d attention heads of 64 (pass --config with "
                "num_attention_heads if not)", path, D, *heads);
        return TUBELET_OK;
    }
    return tb_fail(e, TUBELET_ERR_CONFIG, "%s: the number of attention heads of hidden size %d "
                   "cannot be inferred; pass --config FILE (a config.json with "
                   "num_attention_heads)", path, D);
}

/* What the file's own training config says (docs/checkpoints.md): pySlowFast's "cfg" YAML
 * (TimeSformer), the config text mmcv / mmengine keep in "meta" (mmaction2), the argparse
 * Namespace "args" of VideoMAE's scripts (num_frames, input_size, sampling_rate). */
static void file_cfg(const tf_file *f, tb_ckpt_cfg *c) {
    tb_ckpt_cfg_init(c);
    const tp_value *root = tf_root(f), *v = tp_dict_get(root, "cfg");
    if (v && v->kind == TP_STR) tb_ckpt_cfg_slowfast(c, v->s, v->len);
    const tp_value *meta = tp_dict_get(root, "meta");
    static const char *const meta_keys[] = {"config", "cfg"}; /* mmcv 1.x, mmengine */
    for (int k = 0; k < 2; k++)
        if ((v = tp_dict_get(meta, meta_keys[k])) && v->kind == TP_STR) {
            tb_ckpt_cfg_mmcv(c, v->s, v->len);
            break;
        }
    const tp_value *args = tp_dict_get(root, "args");
    if (!args || args->kind != TP_OBJECT || args->n < 1) return;
    static const char *const arg_keys[] = {"num_frames", "input_size", "sampling_rate"};
    int *dst[] = {&c->frames, &c->train_crop, &c->sampling_rate};
    for (int k = 0; k < 3; k++)
        if ((v = tp_dict_get(args->items[0], arg_keys[k])) && v->kind == TP_INT && v->i > 0 &&
            v->i <= 1 << 14)
            *dst[k] = (int)v->i;
}

static int timesformer_config(const layout *l, const char *path, const tb_log *log, cJSON *j,
                              tb_err *e) {
    const tf_tensor *pw = get(l, "patch_embed.proj.weight"), *pos = get(l, "pos_embed"),
                    *time = get(l, "time_embed"), *fc1 = get(l, "blocks.0.mlp.fc1.weight"),
                    *head = get(l, "head.weight");
    if (!pos || pos->ndim != 3 || !fc1 || fc1->ndim != 2)
        return tb_fail(e, TUBELET_ERR_FORMAT, "%s: a TimeSformer without %s", path,
                       !pos || pos->ndim != 3 ? "pos_embed (1, N + 1, D)" : "blocks.0.mlp.fc1.weight");
    const int D = (int)pw->shape[0];
    const int64_t N = pos->shape[1] - 1, g = (int64_t)llround(sqrt((double)N));
    if (g * g != N)
        return tb_fail(e, TUBELET_ERR_CONFIG, "%s: %lld patches are not a square grid; pass "
                       "--config FILE with image_size", path, (long long)N);
    int heads, frames;
    int rc = heads_for(D, path, log, e, &heads);
    if (rc) return rc;
    const char *attn = get(l, "blocks.0.temporal_fc.weight") ? "divided_space_time"
                       : time                                ? "joint_space_time"
                                                             : "space_only";
    tb_ckpt_cfg cfg;
    file_cfg(l->f, &cfg);
    /* the run's cfg names the attention; the tensors must be those of that attention */
    if (cfg.attention_type[0] && strcmp(cfg.attention_type, attn))
        return tb_fail(e, TUBELET_ERR_CONFIG, "%s: its pySlowFast cfg says TIMESFORMER."
                       "ATTENTION_TYPE %s but its tensors are those of %s; pass --config FILE (a "
                       "config.json with attention_type)", path, cfg.attention_type, attn);
    if (time && time->ndim == 3) {
        frames = (int)time->shape[1];
        if (cfg.frames && cfg.frames != frames)
            tb_warn(log, "%s: its pySlowFast cfg says DATA.NUM_FRAMES %d, its time embeddings hold "
                    "%d frames: using %d", path, cfg.frames, frames, frames);
    } else { /* space_only: the frames are not in the weights; pySlowFast's cfg may say */
        frames = cfg.frames;
        if (frames <= 0)
            return tb_fail(e, TUBELET_ERR_CONFIG, "%s: a space-only TimeSformer does not record "
                           "its number of frames; pass --config FILE (a config.json with "
                           "num_frames and attention_type \"space_only\")", path);
    }
    cJSON_AddStringToObject(j, "model_type", "timesformer");
    cJSON_AddNumberToObject(j, "image_size", (double)(g * pw->shape[2]));
    cJSON_AddNumberToObject(j, "patch_size", (double)pw->shape[2]);
    cJSON_AddNumberToObject(j, "num_channels", (double)pw->shape[1]);
    cJSON_AddNumberToObject(j, "num_frames", frames);
    cJSON_AddNumberToObject(j, "hidden_size", D);
    cJSON_AddNumberToObject(j, "num_hidden_layers", n_blocks(l));
    cJSON_AddNumberToObject(j, "num_attention_heads", heads);
    cJSON_AddNumberToObject(j, "intermediate_size", (double)fc1->shape[0]);
    cJSON_AddStringToObject(j, "attention_type", attn);
    cJSON_AddBoolToObject(j, "qkv_bias", get(l, "blocks.0.attn.qkv.bias") != NULL);
    cJSON_AddNumberToObject(j, "num_labels", head ? (double)head->shape[0] : 0);
    return TUBELET_OK;
}

static int videomae_config(const layout *l, const char *path, const tb_log *log, cJSON *j,
                           tb_err *e) {
    const tf_tensor *pw = get(l, "patch_embed.proj.weight"), *fc1 = get(l, "blocks.0.mlp.fc1.weight"),
                    *head = get(l, "head.weight");
    if (get(l, "pos_embed"))
        return tb_fail(e, TUBELET_ERR_UNSUPPORTED, "%s: learned position embeddings "
                       "(use_learnable_pos_emb) are not supported; tubelet's VideoMAE uses the "
                       "fixed sinusoid table", path);
    if (!fc1 || fc1->ndim != 2)
        return tb_fail(e, TUBELET_ERR_FORMAT, "%s: a VideoMAE without blocks.0.mlp.fc1.weight", path);
    const int D = (int)pw->shape[0];
    int heads;
    int rc = heads_for(D, path, log, e, &heads);
    if (rc) return rc;
    /* the sinusoid positions are not stored: frames and size are those of VideoMAE's args (its
     * scripts' --num_frames, --input_size) or of every published VideoMAE (16 x 224 x 224) */
    tb_ckpt_cfg cfg;
    file_cfg(l->f, &cfg);
    if (!cfg.frames || !cfg.train_crop)
        tb_warn(log, "%s: VideoMAE checkpoints without their args do not record their input size: "
                "assuming 16 frames of 224 x 224 (pass --config FILE, or put a config.json beside "
                "the file, if not)", path);
    cJSON_AddStringToObject(j, "model_type", "videomae");
    cJSON_AddNumberToObject(j, "image_size", cfg.train_crop ? cfg.train_crop : 224);
    cJSON_AddNumberToObject(j, "patch_size", (double)pw->shape[3]);
    cJSON_AddNumberToObject(j, "tubelet_size", (double)pw->shape[2]);
    cJSON_AddNumberToObject(j, "num_channels", (double)pw->shape[1]);
    cJSON_AddNumberToObject(j, "num_frames", cfg.frames ? cfg.frames : 16);
    cJSON_AddNumberToObject(j, "hidden_size", D);
    cJSON_AddNumberToObject(j, "num_hidden_layers", n_blocks(l));
    cJSON_AddNumberToObject(j, "num_attention_heads", heads);
    cJSON_AddNumberToObject(j, "intermediate_size", (double)fc1->shape[0]);
    cJSON_AddBoolToObject(j, "qkv_bias", get(l, "blocks.0.attn.q_bias") != NULL);
    cJSON_AddBoolToObject(j, "use_mean_pooling", get(l, "fc_norm.weight") != NULL);
    /* the original's fc_norm is norm_layer (eps 1e-6), not transformers' nn.LayerNorm (1e-5) */
    cJSON_AddNumberToObject(j, "fc_norm_eps", 1e-6);
    if (get(l, "blocks.0.gamma_1")) cJSON_AddNumberToObject(j, "layer_scale_init_value", 0.1);
    cJSON_AddNumberToObject(j, "num_labels", head ? (double)head->shape[0] : 0);
    return TUBELET_OK;
}

#define SWIN_MAX_STAGES 4 /* as models/video_swin.c's TB_SWIN_MAX_STAGES */

/* A converted tensor by its (torchvision) name, or NULL. */
static const st_tensor *held(const holder *h, const char *name) {
    for (int i = 0; i < h->n; i++)
        if (!strcmp(h->names[i], name)) return &h->ts[i];
    return NULL;
}

/* Video Swin (docs/video-swin.md) from its tensors under torchvision's names: patch and
 * embed_dim from the patch embedding, the stages and their depths from the block numbers, each
 * stage's heads from its relative-position table's columns, the MLP ratio, the classes. The
 * window is not in the shapes (the table has (2 w_t - 1)(2 w_h - 1)(2 w_w - 1) rows, which many
 * windows share): every published Video Swin uses 8x7x7, whose 2535 rows are recognised; any
 * other count needs a config.json. */
static int swin_config(const holder *h, const char *path, cJSON *j, tb_err *e) {
    const st_tensor *pw = held(h, "patch_embed.proj.weight"), *fc1 = held(h, "features.0.0.mlp.0.weight"),
                    *head = held(h, "head.weight");
    if (!pw || pw->ndim != 5 || !fc1 || fc1->ndim != 2 || pw->shape[0] < 1)
        return tb_fail(e, TUBELET_ERR_FORMAT, "%s: a Video Swin without %s", path,
                       !fc1 || fc1->ndim != 2 ? "its first block's MLP" : "a 3D patch embedding");
    int depths[SWIN_MAX_STAGES], heads[SWIN_MAX_STAGES], stages = 0;
    int64_t rows = -1;
    char name[128];
    for (;; stages++) {
        snprintf(name, sizeof name, "features.%d.0.norm1.weight", 2 * stages);
        if (!held(h, name)) break;
        if (stages == SWIN_MAX_STAGES)
            return tb_fail(e, TUBELET_ERR_UNSUPPORTED, "%s: a Video Swin of more than %d stages",
                           path, SWIN_MAX_STAGES);
        int d = 1; /* blocks 0 .. d - 1 exist */
        for (; d < 1024; d++) {
            snprintf(name, sizeof name, "features.%d.%d.norm1.weight", 2 * stages, d);
            if (!held(h, name)) break;
        }
        snprintf(name, sizeof name, "features.%d.0.attn.relative_position_bias_table", 2 * stages);
        const st_tensor *table = held(h, name);
        if (!table || table->ndim != 2 || table->shape[1] < 1 || table->shape[1] > 1024)
            return tb_fail(e, TUBELET_ERR_FORMAT, "%s: stage %d has no relative-position table "
                           "(rows, heads)", path, stages);
        if (rows >= 0 && table->shape[0] != rows)
            return tb_fail(e, TUBELET_ERR_FORMAT, "%s: the relative-position tables of stages 0 "
                           "and %d have %lld and %lld rows: two window sizes", path, stages,
                           (long long)rows, (long long)table->shape[0]);
        rows = table->shape[0], depths[stages] = d, heads[stages] = (int)table->shape[1];
    }
    if (!stages) return tb_fail(e, TUBELET_ERR_FORMAT, "%s: a Video Swin without blocks", path);
    if (rows != 15 * 13 * 13)
        return tb_fail(e, TUBELET_ERR_CONFIG, "%s: its relative-position tables have %lld rows, "
                       "not the 2535 = (2*8-1)(2*7-1)(2*7-1) of the 8x7x7 window of every published "
                       "Video Swin, and the window size cannot be inferred from the rows; pass "
                       "--config FILE (a config.json with \"model_type\": \"video_swin\" and "
                       "window_size, docs/video-swin.md) or put it beside the file as config.json",
                       path, (long long)rows);
    const int window[3] = {8, 7, 7};
    const int patch[3] = {(int)pw->shape[2], (int)pw->shape[3], (int)pw->shape[4]};
    cJSON_AddStringToObject(j, "model_type", "video_swin");
    cJSON_AddItemToObject(j, "patch_size", cJSON_CreateIntArray(patch, 3));
    cJSON_AddNumberToObject(j, "embed_dim", (double)pw->shape[0]);
    cJSON_AddItemToObject(j, "depths", cJSON_CreateIntArray(depths, stages));
    cJSON_AddItemToObject(j, "num_heads", cJSON_CreateIntArray(heads, stages));
    cJSON_AddItemToObject(j, "window_size", cJSON_CreateIntArray(window, 3));
    cJSON_AddNumberToObject(j, "mlp_ratio", (double)fc1->shape[0] / (double)pw->shape[0]);
    cJSON_AddNumberToObject(j, "num_channels", (double)pw->shape[1]);
    /* not in the weights: torchvision's and the paper's clip (docs/video-swin.md) */
    cJSON_AddNumberToObject(j, "num_frames", 32);
    cJSON_AddNumberToObject(j, "image_size", 224);
    cJSON_AddNumberToObject(j, "layer_norm_eps", 1e-5); /* nn.LayerNorm's, in both codebases */
    cJSON_AddNumberToObject(j, "num_labels", head ? (double)head->shape[0] : 0);
    return TUBELET_OK;
}

/* What both original ViT codebases build: LayerNorms with eps 1e-6, exact GELU. */
static int vit_tail(cJSON *j) {
    cJSON_AddNumberToObject(j, "layer_norm_eps", 1e-6);
    cJSON_AddStringToObject(j, "hidden_act", "gelu");
    return TUBELET_OK;
}

static int timesformer_infer(const layout *l, const holder *h, const char *path,
                             const tb_log *log, cJSON *j, tb_err *e) {
    (void)h;
    int rc = timesformer_config(l, path, log, j, e);
    return rc ? rc : vit_tail(j);
}

static int videomae_infer(const layout *l, const holder *h, const char *path, const tb_log *log,
                          cJSON *j, tb_err *e) {
    (void)h;
    int rc = videomae_config(l, path, log, j, e);
    return rc ? rc : vit_tail(j);
}

static int swin_infer(const layout *l, const holder *h, const char *path, const tb_log *log,
                      cJSON *j, tb_err *e) {
    (void)l, (void)log;
    return swin_config(h, path, j, e);
}

/* X-CLIP's .pth stores no hyper-parameters, and its head counts are in no shape: its
 * config.json comes beside the file or from --config. */
static int xclip_infer(const layout *l, const holder *h, const char *path, const tb_log *log,
                       cJSON *j, tb_err *e) {
    (void)l, (void)h, (void)log, (void)j;
    return tb_fail(e, TUBELET_ERR_CONFIG, "%s: an X-CLIP state dict (microsoft/VideoX) holds no "
                   "configuration; put its config.json (transformers' XCLIPConfig, e.g. "
                   "microsoft/xclip-base-patch32's) beside it or pass --config FILE", path);
}

/* ---- the codebases whose state dicts tubelet reads: one row each ---- */
typedef struct kind {
    const char *model_type; /* the tubelet family it loads as */
    const char *key;        /* its patch embedding's weight (PATCH_KEYS): the prefix before it */
    int ndim;               /* of its patch embedding's weight */
    const char *probe;      /* a tensor under the prefix that tells it apart (NULL: any other) */
    const map_row *map;     /* its names under the prefix */
    const map_row *outside; /* its names beside the prefix (mmaction2's head), or NULL */
    const char *const *dropped_prefixes; /* tensors not loaded (a pretraining decoder) */
    const char *dropped_suffix;          /* tensors not loaded (Video Swin's index buffers) */
    int (*infer)(const layout *l, const holder *h, const char *path, const tb_log *log, cJSON *j,
                 tb_err *e);    /* config.json from the shapes */
    int (*map_all)(const layout *l, holder *h, const char *path, const tb_log *log,
                   tb_err *e);  /* the whole renaming, instead of map and outside (V-JEPA 2) */
} kind;

/* In detection order: a 3D patch embedding with relative-position tables beside it is a Video
 * Swin's, torchvision's (features.0.0...) or mmaction2's (layers.0.blocks.0...); else VideoMAE's. */
static const kind KINDS[] = {
    {"timesformer", "patch_embed.proj.weight", 4, NULL, TIMESFORMER_MAP, NULL, NULL, NULL,
     timesformer_infer, NULL},
    {"video_swin", "patch_embed.proj.weight", 5, "features.0.0.attn.relative_position_bias_table",
     SWIN_TORCHVISION_MAP, NULL, NULL, SWIN_DROPPED_SUFFIX, swin_infer, NULL},
    {"video_swin", "patch_embed.proj.weight", 5,
     "layers.0.blocks.0.attn.relative_position_bias_table", SWIN_MMACTION2_MAP,
     SWIN_MMACTION2_HEAD, NULL, SWIN_DROPPED_SUFFIX, swin_infer, NULL},
    {"videomae", "patch_embed.proj.weight", 5, NULL, VIDEOMAE_MAP, NULL, VIDEOMAE_DROPPED, NULL,
     videomae_infer, NULL},
    {"xclip", "visual.conv1.weight", 4, NULL, XCLIP_MAP, NULL, NULL, NULL, xclip_infer, NULL},
};

static const kind *kind_of(const tf_file *f, const char *prefix, const char *key, int ndim) {
    for (size_t i = 0; i < sizeof KINDS / sizeof *KINDS; i++) {
        const kind *k = &KINDS[i];
        if (k->ndim != ndim || strcmp(k->key, key)) continue;
        if (!k->probe) return k;
        char probe[400];
        snprintf(probe, sizeof probe, "%s%s", prefix, k->probe);
        if (tf_find(f, probe)) return k;
    }
    return NULL;
}

/* ---- facebookresearch/vjepa2: several state dicts side by side in one file ----
 * Its pretraining checkpoints (vitl.pt, vith.pt, vitg.pt, vitg-384.pt) hold "encoder",
 * "target_encoder" (the EMA copy its evaluations read: checkpoint_key target_encoder) and
 * "predictor", their names under "module." and "backbone."; its attentive probes
 * (ssv2-vitl-16x2x3.pt, diving48-vitl-256.pt, ...) hold a "classifiers" list of
 * AttentiveClassifier state dicts (src/models/attentive_pooler.py), read from a second file
 * (TUBELET_VJEPA2_PROBE) or from the same one. Names as transformers' VJEPA2ForVideoClassification
 * has them; Meta's fused qkv and the cross-attention's kv are split, the position tables of the
 * RoPE models (pos_embed, predictor_pos_embed: unused) dropped, the predictor's mask tokens
 * (a ParameterList of (1, 1, P)) stacked into one (n, 1, 1, P). docs/vjepa2.md. */
#define VJ_QKV(from, to, q, k, v)                                                                  \
    {from "qkv.weight", to q ".weight", 1}, {from "qkv.weight", to k ".weight", 2},                \
    {from "qkv.weight", to v ".weight", 3}, {from "qkv.bias", to q ".bias", 1},                    \
    {from "qkv.bias", to k ".bias", 2}, {from "qkv.bias", to v ".bias", 3}
static const map_row VJEPA2_ENCODER_MAP[] = {
    {"patch_embed.proj.", "vjepa2.encoder.embeddings.patch_embeddings.proj.", 0},
    {"blocks.#.norm1.", "vjepa2.encoder.layer.#.norm1.", 0},
    VJ_QKV("blocks.#.attn.", "vjepa2.encoder.layer.#.attention.", "query", "key", "value"),
    {"blocks.#.attn.proj.", "vjepa2.encoder.layer.#.attention.proj.", 0},
    {"blocks.#.norm2.", "vjepa2.encoder.layer.#.norm2.", 0},
    {"blocks.#.mlp.fc1.", "vjepa2.encoder.layer.#.mlp.fc1.", 0},
    {"blocks.#.mlp.fc2.", "vjepa2.encoder.layer.#.mlp.fc2.", 0},
    {"norm.", "vjepa2.encoder.layernorm.", 0},
    {NULL, NULL, 0},
};

/* src/models/predictor.py (loaded, not run: it serves JEPA pretraining) */
static const map_row VJEPA2_PREDICTOR_MAP[] = {
    {"predictor_embed.", "vjepa2.predictor.embeddings.predictor_embeddings.", 0},
    {"predictor_blocks.#.norm1.", "vjepa2.predictor.layer.#.norm1.", 0},
    VJ_QKV("predictor_blocks.#.attn.", "vjepa2.predictor.layer.#.attention.", "query", "key",
           "value"),
    {"predictor_blocks.#.attn.proj.", "vjepa2.predictor.layer.#.attention.proj.", 0},
    {"predictor_blocks.#.norm2.", "vjepa2.predictor.layer.#.norm2.", 0},
    {"predictor_blocks.#.mlp.fc1.", "vjepa2.predictor.layer.#.mlp.fc1.", 0},
    {"predictor_blocks.#.mlp.fc2.", "vjepa2.predictor.layer.#.mlp.fc2.", 0},
    {"predictor_norm.", "vjepa2.predictor.layernorm.", 0},
    {"predictor_proj.", "vjepa2.predictor.proj.", 0},
    {NULL, NULL, 0},
};

/* AttentiveClassifier: pooler (depth - 1 Blocks, then a CrossAttentionBlock), linear */
#define VJ_POOL "pooler.self_attention_layers.#."
#define VJ_CROSS "pooler.cross_attention_layer."
static const map_row VJEPA2_PROBE_MAP[] = {
    {"pooler.query_tokens", "pooler.query_tokens", 0},
    {"pooler.blocks.#.norm1.", VJ_POOL "layer_norm1.", 0},
    VJ_QKV("pooler.blocks.#.attn.", VJ_POOL "self_attn.", "q_proj", "k_proj", "v_proj"),
    {"pooler.blocks.#.attn.proj.", VJ_POOL "self_attn.out_proj.", 0},
    {"pooler.blocks.#.norm2.", VJ_POOL "layer_norm2.", 0},
    {"pooler.blocks.#.mlp.fc1.", VJ_POOL "mlp.fc1.", 0},
    {"pooler.blocks.#.mlp.fc2.", VJ_POOL "mlp.fc2.", 0},
    {"pooler.cross_attention_block.norm1.", VJ_CROSS "layer_norm1.", 0},
    {"pooler.cross_attention_block.xattn.q.", VJ_CROSS "cross_attn.q_proj.", 0},
    {"pooler.cross_attention_block.xattn.kv.weight", VJ_CROSS "cross_attn.k_proj.weight", HALF1},
    {"pooler.cross_attention_block.xattn.kv.weight", VJ_CROSS "cross_attn.v_proj.weight", HALF2},
    {"pooler.cross_attention_block.xattn.kv.bias", VJ_CROSS "cross_attn.k_proj.bias", HALF1},
    {"pooler.cross_attention_block.xattn.kv.bias", VJ_CROSS "cross_attn.v_proj.bias", HALF2},
    {"pooler.cross_attention_block.norm2.", VJ_CROSS "layer_norm2.", 0},
    {"pooler.cross_attention_block.mlp.fc1.", VJ_CROSS "mlp.fc1.", 0},
    {"pooler.cross_attention_block.mlp.fc2.", VJ_CROSS "mlp.fc2.", 0},
    {"linear.", "classifier.", 0},
    {NULL, NULL, 0},
};
#undef VJ_QKV
#undef VJ_POOL
#undef VJ_CROSS

#define VJ_MAX_MASK_TOKENS 1024

static const map_row NO_ROWS[] = {{NULL, NULL, 0}};

/* name without its leading "module." and "backbone." (hub/backbones.py's _clean_backbone_key) */
static const char *vjepa2_strip(const char *name) {
    for (;;) {
        if (!strncmp(name, "module.", 7)) name += 7;
        else if (!strncmp(name, "backbone.", 9)) name += 9;
        else return name;
    }
}

static int starts(const char *s, const char *prefix) { return !strncmp(s, prefix, strlen(prefix)); }

/* The encoder's prefix under root ("target_encoder" or "encoder"): 0 none, 1 found, -1 two. */
static int vjepa2_find_encoder(const tf_file *f, const char *root, layout *l) {
    const size_t nr = strlen(root);
    int found = 0;
    for (int i = 0; i < tf_count(f); i++) {
        const char *name = tf_at(f, i)->name;
        if (strncmp(name, root, nr) || name[nr] != '.') continue;
        const char *rel = vjepa2_strip(name + nr + 1);
        if (strcmp(rel, "patch_embed.proj.weight") || (size_t)(rel - name) >= sizeof l->prefix) continue;
        if (found++) return -1;
        memcpy(l->prefix, name, (size_t)(rel - name));
        l->prefix[rel - name] = 0;
    }
    return found;
}

static const kind VJEPA2_KIND;

/* The encoder a nested file's model is read from: "target_encoder" unless TUBELET_VJEPA2_ENCODER
 * says "encoder"; a file with "encoder" only (a hub copy) gives that one. */
static int vjepa2_layout(const tf_file *f, const char *path, layout *l, tb_err *e) {
    const char *want = getenv("TUBELET_VJEPA2_ENCODER"), *probe = getenv("TUBELET_VJEPA2_PROBE");
    if (want && *want && strcmp(want, "target_encoder") && strcmp(want, "encoder"))
        return tb_fail(e, TUBELET_ERR_CONFIG, "TUBELET_VJEPA2_ENCODER is '%s': it names the "
                       "encoder of a V-JEPA 2 checkpoint, \"target_encoder\" (the default) or "
                       "\"encoder\"", want);
    l->online = want && !strcmp(want, "encoder");
    l->probe_path = probe && *probe ? probe : NULL;
    int found = vjepa2_find_encoder(f, l->online ? "encoder" : "target_encoder", l);
    if (!found && !l->online && !(want && *want)) {
        found = vjepa2_find_encoder(f, "encoder", l);
        l->online = l->fell_back = found != 0;
    }
    if (found < 0)
        return tb_fail(e, TUBELET_ERR_FORMAT, "%s: two patch embeddings under '%s' (with and "
                       "without module./backbone.); give a file with one", path,
                       l->online ? "encoder" : "target_encoder");
    if (!found) {
        int probe_only = 0;
        for (int i = 0; i < tf_count(f) && !probe_only; i++)
            probe_only = starts(tf_at(f, i)->name, "classifiers.");
        if (probe_only)
            return tb_fail(e, TUBELET_ERR_FORMAT, "%s: a V-JEPA 2 attentive probe (its "
                           "'classifiers') without an encoder: give the encoder's checkpoint "
                           "(vitl.pt, vitg-384.pt, ...) as the model and this file in "
                           "TUBELET_VJEPA2_PROBE (docs/vjepa2.md)", path);
        return tb_fail(e, TUBELET_ERR_FORMAT, "%s: state dicts side by side, but no '%s' with "
                       "a patch_embed.proj.weight (a facebookresearch/vjepa2 checkpoint holds "
                       "'target_encoder' and 'encoder')", path,
                       want && *want ? want : "target_encoder");
    }
    char full[400];
    snprintf(full, sizeof full, "%spatch_embed.proj.weight", l->prefix);
    const tf_tensor *pw = tf_find(f, full);
    if (!pw || pw->ndim != 5)
        return tb_fail(e, TUBELET_ERR_UNSUPPORTED, "%s: '%s' is not a 3D (tubelet) patch "
                       "embedding: only V-JEPA 2's video encoders are supported", path, full);
    l->kind = &VJEPA2_KIND;
    return TUBELET_OK;
}

/* Adds t under the map's name for rel (every row that matches: qkv gives three), or under its
 * own name when no row does, so that loading reports it as unexpected. */
static int map_one(holder *h, const tf_tensor *t, const char *rel, const map_row *map,
                   const char *path, tb_err *e) {
    int hits = 0;
    for (const map_row *r = map; r->from; r++) {
        long num[2];
        const char *rest;
        if (!match(r->from, rel, num, &rest)) continue;
        char name[400];
        render(name, sizeof name, r->to, num, rest);
        int rc = add_tensor(h, name, t, r->part, path, e);
        if (rc) return rc;
        hits++;
    }
    if (hits) return TUBELET_OK;
    int rc = add_tensor(h, t->name, t, 0, path, e);
    return rc == TUBELET_ERR_FORMAT ? TUBELET_OK : rc; /* an integer buffer nobody asks for */
}

/* The predictor's mask tokens, mask_tokens.0 .. n-1 of (1, 1, P) each, as one (n, 1, 1, P). */
static int vjepa2_mask_tokens(holder *h, const tf_tensor *const *tok, int n, const char *path,
                              tb_err *e) {
    int64_t P = -1;
    for (int i = 0; i < n; i++) {
        if (!tok[i])
            return tb_fail(e, TUBELET_ERR_FORMAT, "%s: the predictor's mask_tokens.%d is missing "
                           "(there are %d)", path, i, n);
        const tf_tensor *t = tok[i];
        if (t->ndim != 3 || t->shape[0] != 1 || t->shape[1] != 1 || t->shape[2] < 1 ||
            (P >= 0 && t->shape[2] != P))
            return tb_fail(e, TUBELET_ERR_SHAPE, "%s: the predictor's mask_tokens.%d is not "
                           "(1, 1, %lld)", path, i, (long long)(P >= 0 ? P : t->shape[2]));
        if (t->dtype != TP_F32 && t->dtype != TP_F16 && t->dtype != TP_BF16 && t->dtype != TP_F64)
            return tb_fail(e, TUBELET_ERR_FORMAT, "%s: the predictor's mask_tokens.%d has dtype "
                           "%s", path, i, tp_dtype_name(t->dtype));
        P = t->shape[2];
    }
    if (P > (1 << 20)) return tb_fail(e, TUBELET_ERR_SHAPE, "%s: mask tokens of %lld", path, (long long)P);
    float *buf = tb_alloc((size_t)n * (size_t)P * sizeof(float));
    void **ow = realloc(h->owned, sizeof *ow * (size_t)(h->n_owned + 1));
    if (ow) h->owned = ow;
    if (!buf || !ow) {
        tb_free(buf);
        return tb_fail(e, TUBELET_ERR_MEMORY, "%s: out of memory", path);
    }
    h->owned[h->n_owned++] = buf;
    for (int i = 0; i < n; i++) tf_to_f32(tok[i], buf + (size_t)i * (size_t)P);
    tf_tensor all = {0};
    all.name = "mask_tokens", all.dtype = TP_F32, all.ndim = 4, all.contiguous = 1;
    all.shape[0] = n, all.shape[1] = all.shape[2] = 1, all.shape[3] = P;
    all.stride[3] = 1, all.stride[2] = all.stride[1] = P, all.stride[0] = P;
    all.base = (const uint8_t *)buf;
    return add_tensor(h, "vjepa2.predictor.embeddings.mask_tokens", &all, 0, path, e);
}

/* The probe's tensors: f's classifiers[0] ("classifiers.0." of a nested file; a bare
 * AttentiveClassifier state dict is taken whole). Returns the number of other classifiers. */
static int vjepa2_probe(holder *h, const tf_file *f, const char *path, int *others, tb_err *e) {
    const int nested = tf_nested(f);
    int n = 0;
    *others = 0;
    for (int i = 0; i < tf_count(f); i++) {
        const tf_tensor *t = tf_at(f, i);
        const char *rel = t->name;
        if (nested) {
            if (!starts(rel, "classifiers.")) continue;
            if (!starts(rel, "classifiers.0.")) {
                const long k = strtol(rel + 12, NULL, 10);
                if (k > *others && k < 1000) *others = (int)k;
                continue;
            }
            rel += 14;
        }
        int rc = map_one(h, t, vjepa2_strip(rel), VJEPA2_PROBE_MAP, path, e);
        if (rc) return rc;
        n++;
    }
    if (!n)
        return tb_fail(e, TUBELET_ERR_FORMAT, "%s: no attentive probe (classifiers[0], or an "
                       "AttentiveClassifier state dict)", path);
    return TUBELET_OK;
}

static int vjepa2_map(const layout *l, holder *h, const char *path, const tb_log *log, tb_err *e) {
    const tf_file *f = l->f;
    const char *mine = l->online ? "encoder." : "target_encoder.",
               *other = l->online ? "target_encoder." : "encoder.";
    const tf_tensor *masks[VJ_MAX_MASK_TOKENS] = {0};
    int n_masks = 0, rc = TUBELET_OK, others = 0, has_probe = 0;
    for (int i = 0; i < tf_count(f) && !rc; i++) {
        const tf_tensor *t = tf_at(f, i);
        const char *name = t->name;
        if (starts(name, mine)) { /* each name stripped of its own module./backbone. */
            const char *rel = vjepa2_strip(name + strlen(mine));
            if (strcmp(rel, "pos_embed")) rc = map_one(h, t, rel, VJEPA2_ENCODER_MAP, path, e);
        } else if (starts(name, other)) {
            continue;
        } else if (starts(name, "predictor.")) {
            const char *rel = vjepa2_strip(name + 10), *rest;
            long num[2];
            if (!strcmp(rel, "predictor_pos_embed")) continue;
            if (match("mask_tokens.#", rel, num, &rest)) {
                if (num[0] < 0 || num[0] >= VJ_MAX_MASK_TOKENS || masks[num[0]])
                    return tb_fail(e, TUBELET_ERR_FORMAT, "%s: predictor mask token '%s' out of "
                                   "range or repeated", path, name);
                masks[num[0]] = t;
                if (num[0] + 1 > n_masks) n_masks = (int)num[0] + 1;
                continue;
            }
            rc = map_one(h, t, rel, VJEPA2_PREDICTOR_MAP, path, e);
        } else if (starts(name, "classifiers.")) {
            has_probe = 1; /* below, unless TUBELET_VJEPA2_PROBE replaces it */
        } else {
            rc = map_one(h, t, name, NO_ROWS, path, e); /* kept: loading reports it */
        }
    }
    if (!rc && n_masks) rc = vjepa2_mask_tokens(h, masks, n_masks, path, e);
    if (!rc && l->probe_path) {
        if (has_probe)
            tb_warn(log, "%s: its own classifiers are replaced by TUBELET_VJEPA2_PROBE's (%s)",
                    path, l->probe_path);
        rc = tf_open(&h->probe, l->probe_path, e);
        if (!rc) rc = vjepa2_probe(h, h->probe, l->probe_path, &others, e);
    } else if (!rc && has_probe) {
        rc = vjepa2_probe(h, f, path, &others, e);
    }
    if (!rc && others)
        tb_warn(log, "%s: %d attentive classifiers; the first (classifiers[0]) is read",
                l->probe_path ? l->probe_path : path, others + 1);
    if (!rc && l->fell_back)
        tb_warn(log, "%s: no 'target_encoder': reading 'encoder' (the evaluations read the "
                "target encoder)", path);
    /* two names that became one (a key with and without module.): refused, not overwritten */
    tb_strmap seen = {0};
    for (int i = 0; i < h->n && !rc; i++) {
        const int had = tb_strmap_add(&seen, h->names[i], i);
        if (had < 0) rc = tb_fail(e, TUBELET_ERR_MEMORY, "%s: out of memory", path);
        else if (had != i)
            rc = tb_fail(e, TUBELET_ERR_FORMAT, "%s: two tensors become '%s' (the same name with "
                         "and without module./backbone.?)", path, h->names[i]);
    }
    tb_strmap_free(&seen);
    return rc;
}

/* A size or a clip length in a checkpoint's file name: "vitg-384.pt" (crop 384),
 * "ssv2-vitl-16x2x3.pt" (16 frames per clip, 2 segments, 3 views). */
static void vjepa2_name_hints(const char *path, int *crop, int *frames) {
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    for (const char *p = base; *p; p++) {
        if (p != base && p[-1] != '-' && p[-1] != '_') continue;
        char *end;
        const long v = strtol(p, &end, 10);
        if (end == p || v < 1 || v > 8192) continue;
        if (*end == 'x' && end[1] >= '0' && end[1] <= '9') {
            if (frames) *frames = (int)v;
        } else if ((*end == '-' || *end == '_' || *end == '.' || !*end) && v >= 32 && crop) {
            *crop = (int)v;
        }
    }
    if (frames && !*frames && strstr(base, "diving48")) *frames = 32; /* its eval configs' diving48.yaml */
}

static int count_numbered(const holder *h, const char *fmt) {
    char name[200];
    int n = 0;
    for (;; n++) {
        snprintf(name, sizeof name, fmt, n);
        if (!held(h, name) || n > 100000) return n;
    }
}

/* Heads of V-JEPA 2's encoders (ViT-L, ViT-H: 16; ViT-g: 22); none is in a shape. */
static const int VJEPA2_HEADS[][2] = {{1024, 16}, {1280, 16}, {1408, 22}};

static int vjepa2_infer(const layout *l, const holder *h, const char *path, const tb_log *log,
                        cJSON *j, tb_err *e) {
    const st_tensor *pw = held(h, "vjepa2.encoder.embeddings.patch_embeddings.proj.weight"),
                    *fc1 = held(h, "vjepa2.encoder.layer.0.mlp.fc1.weight"),
                    *cls = held(h, "classifier.weight"),
                    *pe = held(h, "vjepa2.predictor.embeddings.predictor_embeddings.weight"),
                    *pfc1 = held(h, "vjepa2.predictor.layer.0.mlp.fc1.weight"),
                    *masks = held(h, "vjepa2.predictor.embeddings.mask_tokens");
    if (!pw || pw->ndim != 5 || !fc1 || fc1->ndim != 2 || pw->shape[0] < 1)
        return tb_fail(e, TUBELET_ERR_FORMAT, "%s: a V-JEPA 2 encoder without %s", path,
                       !fc1 || fc1->ndim != 2 ? "blocks.0.mlp.fc1.weight" : "its patch embedding");
    if (pw->shape[3] != pw->shape[4])
        return tb_fail(e, TUBELET_ERR_UNSUPPORTED, "%s: a patch of %lld x %lld: V-JEPA 2's are "
                       "square", path, (long long)pw->shape[3], (long long)pw->shape[4]);
    const int D = (int)pw->shape[0];
    int heads = 0;
    for (size_t i = 0; i < sizeof VJEPA2_HEADS / sizeof *VJEPA2_HEADS; i++)
        if (VJEPA2_HEADS[i][0] == D) heads = VJEPA2_HEADS[i][1];
    if (!heads && D % 64 == 0) {
        heads = D / 64;
        tb_warn(log, "%s: hidden size %d: assuming %d attention heads of 64 (pass --config with "
                "num_attention_heads if not)", path, D, heads);
    }
    if (!heads)
        return tb_fail(e, TUBELET_ERR_CONFIG, "%s: the number of attention heads of hidden size %d "
                       "cannot be inferred; pass --config FILE (a config.json with "
                       "\"model_type\": \"vjepa2\" and num_attention_heads)", path, D);
    int crop = 0, frames = 0;
    vjepa2_name_hints(path, &crop, NULL);
    if (l->probe_path) vjepa2_name_hints(l->probe_path, &crop, &frames);
    else if (cls) vjepa2_name_hints(path, NULL, &frames);
    const int patch = (int)pw->shape[3];
    if (!crop || crop % patch) crop = 256; /* every published V-JEPA 2 but vitg-384 */
    cJSON_AddStringToObject(j, "model_type", "vjepa2");
    cJSON *arch = cJSON_AddArrayToObject(j, "architectures");
    cJSON_AddItemToArray(arch, cJSON_CreateString(cls ? "VJEPA2ForVideoClassification" : "VJEPA2Model"));
    cJSON_AddNumberToObject(j, "crop_size", crop);
    cJSON_AddNumberToObject(j, "frames_per_clip", frames ? frames : 64);
    cJSON_AddNumberToObject(j, "patch_size", patch);
    cJSON_AddNumberToObject(j, "tubelet_size", (double)pw->shape[2]);
    cJSON_AddNumberToObject(j, "in_chans", (double)pw->shape[1]);
    cJSON_AddNumberToObject(j, "hidden_size", D);
    cJSON_AddNumberToObject(j, "num_hidden_layers", count_numbered(h, "vjepa2.encoder.layer.%d.norm1.weight"));
    cJSON_AddNumberToObject(j, "num_attention_heads", heads);
    cJSON_AddNumberToObject(j, "mlp_ratio", (double)fc1->shape[0] / D);
    cJSON_AddBoolToObject(j, "qkv_bias", held(h, "vjepa2.encoder.layer.0.attention.query.bias") != NULL);
    cJSON_AddNumberToObject(j, "layer_norm_eps", 1e-6);
    cJSON_AddStringToObject(j, "hidden_act", "gelu");
    if (pe && pe->ndim == 2 && pe->shape[0] > 0) {
        const int P = (int)pe->shape[0];
        cJSON_AddNumberToObject(j, "pred_hidden_size", P);
        cJSON_AddNumberToObject(j, "pred_num_hidden_layers",
                                count_numbered(h, "vjepa2.predictor.layer.%d.norm1.weight"));
        /* not in a shape either; Meta's predictors are 384 wide with 12 heads of 32 */
        cJSON_AddNumberToObject(j, "pred_num_attention_heads", P % 32 == 0 ? P / 32 : 1);
        if (pfc1 && pfc1->ndim == 2) cJSON_AddNumberToObject(j, "pred_mlp_ratio", (double)pfc1->shape[0] / P);
        if (masks) cJSON_AddNumberToObject(j, "pred_num_mask_tokens", (double)masks->shape[0]);
    }
    if (cls && cls->ndim == 2) {
        cJSON_AddNumberToObject(j, "num_pooler_layers",
                                count_numbered(h, "pooler.self_attention_layers.%d.layer_norm1.weight"));
        /* the probe's heads are in no shape: every eval config of the repository says
         * num_heads 16 (ViT-g's 22-head encoder too) */
        cJSON_AddNumberToObject(j, "pooler_num_attention_heads", D % 16 == 0 ? 16 : heads);
        cJSON_AddNumberToObject(j, "num_labels", (double)cls->shape[0]);
    }
    return TUBELET_OK;
}

static const kind VJEPA2_KIND = {"vjepa2", "patch_embed.proj.weight", 5, NULL, VJEPA2_ENCODER_MAP,
                                 NULL, NULL, NULL, vjepa2_infer, vjepa2_map};

static int infer_config(const layout *l, const holder *h, const char *path, const tb_log *log,
                        char **out, tb_err *e) {
    cJSON *j = cJSON_CreateObject();
    if (!j) return tb_fail(e, TUBELET_ERR_MEMORY, "%s: out of memory", path);
    int rc = l->kind->infer(l, h, path, log, j, e);
    *out = rc ? NULL : cJSON_Print(j);
    cJSON_Delete(j);
    if (!rc && !*out) rc = tb_fail(e, TUBELET_ERR_MEMORY, "%s: out of memory", path);
    return rc;
}

static int dropped(const layout *l, const char *rel) {
    const char *suffix = l->kind->dropped_suffix;
    if (suffix) {
        const size_t n = strlen(rel), k = strlen(suffix);
        if (n >= k && !strcmp(rel + n - k, suffix)) return 1;
    }
    for (const char *const *p = l->kind->dropped_prefixes; p && *p; p++)
        if (!strncmp(rel, *p, strlen(*p))) return 1;
    return 0;
}

/* Length of the prefix's part before a trailing "encoder." (a pretraining checkpoint's decoder
 * sits beside it) or "backbone." (mmaction2's cls_head sits beside it). */
static size_t outer_len(const char *prefix) {
    const size_t np = strlen(prefix);
    static const char *const inner[] = {"encoder.", "backbone."};
    for (int k = 0; k < 2; k++) {
        const size_t n = strlen(inner[k]);
        if (np >= n && !strcmp(prefix + np - n, inner[k])) return np - n;
    }
    return np;
}

/* Every tensor through the family's table (and, beside the prefix, mmaction2's head). A tensor
 * outside the model's prefix or not in the table keeps its name, so that loading reports it as
 * unexpected; the pretraining decoder and Video Swin's index buffers are dropped. */
static int map_tensors(const layout *l, holder *h, const char *path, tb_err *e) {
    const map_row *map = l->kind->map, *outside = l->kind->outside;
    const size_t np = strlen(l->prefix), outer = outer_len(l->prefix);
    for (int i = 0; i < tf_count(l->f); i++) {
        const tf_tensor *t = tf_at(l->f, i);
        const int in = !strncmp(t->name, l->prefix, np), near = !strncmp(t->name, l->prefix, outer);
        int hits = 0;
        const char *rel = in ? t->name + np : t->name + outer;
        if ((in || near) && dropped(l, rel)) continue;
        for (const map_row *r = in ? map : near ? outside : NULL; r && r->from; r++) {
            long num[2];
            const char *rest;
            if (!match(r->from, rel, num, &rest)) continue;
            char name[400];
            render(name, sizeof name, r->to, num, rest);
            int rc = add_tensor(h, name, t, r->part, path, e);
            if (rc) return rc;
            hits++;
        }
        if (!hits) {
            int rc = add_tensor(h, t->name, t, 0, path, e);
            if (rc == TUBELET_ERR_FORMAT) continue; /* an integer buffer nobody asks for */
            if (rc) return rc;
        }
    }
    return TUBELET_OK;
}

int tb_ckpt_is_file(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

tb_ckpt_format tb_ckpt_detect(const char *path) {
    if (!tb_ckpt_is_file(path)) return TB_CKPT_DIR;
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    uint8_t b[1];
    const int flax = fd >= 0 && read(fd, b, 1) == 1 && fx_sniff(b, 1);
    if (fd >= 0) close(fd);
    return flax ? TB_CKPT_FLAX : TB_CKPT_TORCH; /* unreadable: torch_file.c says why */
}

/* config.json in the checkpoint's directory, if there is one. */
static char *beside(const char *path) {
    const char *slash = strrchr(path, '/');
    size_t n = slash ? (size_t)(slash - path + 1) : 0;
    char *p = malloc(n + sizeof "config.json");
    if (!p) return NULL;
    memcpy(p, path, n);
    memcpy(p + n, "config.json", sizeof "config.json");
    struct stat st;
    if (stat(p, &st) != 0 || !S_ISREG(st.st_mode)) {
        free(p);
        return NULL;
    }
    return p;
}

/* checkpoint_flax.c adds its tensors (views of the msgpack file) through the same holder. */
static int add_plain(void *h, const char *name, const tf_tensor *t, const char *path, tb_err *e) {
    return add_tensor(h, name, t, 0, path, e);
}

int tb_ckpt_open(const char *path, tb_ckpt_format fmt, const char *config_path, const tb_log *log, char **config_json,
                 char **config_name, tb_weights **w, tb_err *e) {
    *config_json = NULL, *config_name = NULL, *w = NULL;
    holder *h = calloc(1, sizeof *h);
    if (!h) return tb_fail(e, TUBELET_ERR_MEMORY, "%s: out of memory", path);
    char *cfg = config_path ? strdup(config_path) : beside(path), *flax_config = NULL;
    const int flax = fmt == TB_CKPT_FLAX; /* ViViT's scenic checkpoints (msgpack) */
    int rc = TUBELET_OK;
    layout l = {NULL, "", NULL, NULL, 0, 0};
    if (flax) {
        h->keep_free = tb_flax_ckpt_free;
        rc = tb_flax_ckpt_read(path, log, add_plain, h, &h->keep, cfg ? NULL : &flax_config, e);
    } else {
        rc = tf_open(&h->f, path, e);
        if (!rc) rc = find_layout(h->f, path, &l, e);
        if (!rc) rc = l.kind->map_all ? l.kind->map_all(&l, h, path, log, e) : map_tensors(&l, h, path, e);
    }
    if (config_path && !cfg) rc = rc ? rc : tb_fail(e, TUBELET_ERR_MEMORY, "out of memory");
    if (!rc && cfg) {
        rc = tb_read_file(cfg, config_json, NULL, 1 << 24, e);
        *config_name = cfg, cfg = NULL;
    } else if (!rc) {
        if (flax) *config_json = flax_config, flax_config = NULL;
        else rc = infer_config(&l, h, path, log, config_json, e);
        size_t n = strlen(path) + 32;
        if (!rc && (*config_name = malloc(n))) snprintf(*config_name, n, "%s (inferred config)", path);
        else if (!rc) rc = tb_fail(e, TUBELET_ERR_MEMORY, "out of memory");
    }
    free(cfg), free(flax_config);
    if (rc) {
        holder_free(h);
        free(*config_json), free(*config_name);
        *config_json = NULL, *config_name = NULL;
        return rc;
    }
    return tb_weights_from_tensors(w, path, h->ts, h->n, h, holder_free, e);
}

/* transformers' VideoMAEImageProcessor settings: resize the short side, centre crop, 1/255,
 * normalise. */
static char *processor_json(int shortest, int crop, const float mean[3], const float std[3]) {
    const char *fmt =
        "{\n  \"image_processor_type\": \"VideoMAEImageProcessor\",\n  \"do_resize\": true,\n"
        "  \"size\": {\"shortest_edge\": %d},\n  \"resample\": 2,\n  \"do_center_crop\": true,\n"
        "  \"crop_size\": {\"height\": %d, \"width\": %d},\n  \"do_rescale\": true,\n"
        "  \"rescale_factor\": 0.00392156862745098,\n  \"do_normalize\": true,\n"
        "  \"image_mean\": [%.7g, %.7g, %.7g],\n  \"image_std\": [%.7g, %.7g, %.7g]\n}\n";
    char *s = malloc(1024);
    if (s)
        snprintf(s, 1024, fmt, shortest, crop, crop, mean[0], mean[1], mean[2], std[0], std[1],
                 std[2]);
    return s;
}

/* What each family's code trains and tests with, before a checkpoint's own config is read. */
typedef struct {
    const char *model_type;
    int shortest, crop;
    float mean[3], std[3];
    int fixed_crop;   /* 1: the checkpoint's own crop does not replace the family's */
    const char *json; /* the whole preprocessor_config.json, when it is not VideoMAE's processor */
} family_input;

static const family_input FAMILY_INPUT[] = {
    /* MCG-NJU/VideoMAE: short side 224, crop 224, ImageNet's mean and std */
    {"videomae", 224, 224, {0.485f, 0.456f, 0.406f}, {0.229f, 0.224f, 0.225f}, 0, NULL},
    /* pySlowFast's defaults (DATA.MEAN, DATA.STD), its 3-crop test at 224 */
    {"timesformer", 224, 224, {0.45f, 0.45f, 0.45f}, {0.225f, 0.225f, 0.225f}, 0, NULL},
    /* torchvision's Swin3D_*_Weights transforms (tools/convert_video_swin.py) */
    {"video_swin", 256, 224, {0.485f, 0.456f, 0.406f}, {0.229f, 0.224f, 0.225f}, 1, NULL},
    /* microsoft/VideoX X-CLIP (its datasets/pipeline.py; microsoft/xclip-base-patch32's
     * preprocessor_config.json): 224, crop 224, CLIP's mean and std */
    {"xclip", 224, 224, {0.48145466f, 0.4578275f, 0.40821073f},
     {0.26862954f, 0.26130258f, 0.27577711f}, 0, NULL},
    /* scenic (dmvr): shortest side 256, crop 224, zero-centred */
    {"vivit", 0, 0, {0}, {0}, 0,
     "{\n  \"image_processor_type\": \"VivitImageProcessor\",\n  \"do_resize\": true,\n"
     "  \"size\": {\"shortest_edge\": 256},\n  \"resample\": 2,\n"
     "  \"do_center_crop\": true,\n  \"crop_size\": {\"height\": 224, \"width\": 224},\n"
     "  \"do_rescale\": true,\n  \"rescale_factor\": 0.00784313725490196,\n"
     "  \"offset\": true,\n  \"do_normalize\": false,\n"
     "  \"image_mean\": [0.5, 0.5, 0.5],\n  \"image_std\": [0.5, 0.5, 0.5]\n}\n"},
};

static const family_input *family_input_of(const char *model_type) {
    for (size_t i = 0; i < sizeof FAMILY_INPUT / sizeof *FAMILY_INPUT; i++)
        if (!strcmp(model_type, FAMILY_INPUT[i].model_type)) return &FAMILY_INPUT[i];
    return NULL;
}

/* transformers' VJEPA2VideoProcessor: the short side resized to int(crop * 256 / 224) (its
 * __init__ derives it from crop_size), bilinear, centre crop, 1/255, ImageNet's mean and std:
 * what facebookresearch/vjepa2's evals/video_classification_frozen transforms do at test time. */
static char *vjepa2_processor_json(int crop) {
    const char *fmt =
        "{\n  \"video_processor_type\": \"VJEPA2VideoProcessor\",\n  \"do_resize\": true,\n"
        "  \"size\": {\"shortest_edge\": %d},\n  \"resample\": 2,\n  \"do_center_crop\": true,\n"
        "  \"crop_size\": {\"height\": %d, \"width\": %d},\n  \"do_rescale\": true,\n"
        "  \"rescale_factor\": 0.00392156862745098,\n  \"do_normalize\": true,\n"
        "  \"image_mean\": [0.485, 0.456, 0.406],\n  \"image_std\": [0.229, 0.224, 0.225]\n}\n";
    char *s = malloc(1024);
    if (s) snprintf(s, 1024, fmt, (int)((double)crop * 256 / 224), crop, crop);
    return s;
}

char *tb_ckpt_preprocessor_json(const char *model_type) {
    if (model_type && !strcmp(model_type, "vjepa2")) return vjepa2_processor_json(256);
    const family_input *f = family_input_of(model_type);
    if (!f) return NULL;
    return f->json ? strdup(f->json) : processor_json(f->shortest, f->crop, f->mean, f->std);
}

int tb_ckpt_read_cfg(const char *path, tb_ckpt_cfg *cfg, const char **model_type, tb_err *e) {
    tb_ckpt_cfg_init(cfg);
    if (tb_ckpt_detect(path) == TB_CKPT_FLAX) { /* scenic's train state holds no data config */
        if (model_type) *model_type = "vivit";
        return TUBELET_OK;
    }
    tf_file *f = NULL;
    layout l;
    int rc = tf_open_names(&f, path, e);
    if (!rc) rc = find_layout(f, path, &l, e);
    if (!rc) {
        file_cfg(f, cfg);
        if (model_type) *model_type = l.kind->model_type;
    }
    tf_close(f);
    return rc;
}

/* image_size of the config.json beside path (vision_config's, as X-CLIP nests it; V-JEPA 2's
 * crop_size); 0 if none. */
static int beside_image_size(const char *path) {
    char *cfg = beside(path), *text = NULL;
    tb_err e = {{0}};
    int size = 0;
    if (cfg && tb_read_file(cfg, &text, NULL, 1 << 24, &e) == TUBELET_OK) {
        cJSON *j = cJSON_Parse(text), *v = cJSON_GetObjectItemCaseSensitive(j, "vision_config");
        const cJSON *o = cJSON_IsObject(v) ? v : j;
        v = cJSON_GetObjectItemCaseSensitive(o, "image_size");
        if (!v) v = cJSON_GetObjectItemCaseSensitive(o, "crop_size"); /* V-JEPA 2's name */
        if (cJSON_IsNumber(v) && v->valuedouble >= 1 && v->valuedouble <= 65536)
            size = (int)v->valuedouble;
        cJSON_Delete(j);
    }
    free(text), free(cfg);
    return size;
}

int tb_ckpt_preprocessor_for(const char *path, int image_size, char **json, tb_err *e) {
    tb_ckpt_cfg c;
    const char *type = NULL;
    *json = NULL;
    int rc = tb_ckpt_read_cfg(path, &c, &type, e);
    if (rc) return rc;
    if (type && !strcmp(type, "vjepa2")) { /* no training config in the file: its name's size */
        int crop = image_size ? image_size : beside_image_size(path);
        if (!crop) vjepa2_name_hints(path, &crop, NULL);
        *json = vjepa2_processor_json(crop >= 1 && crop <= 65536 ? crop : 256);
        return *json ? TUBELET_OK : tb_fail(e, TUBELET_ERR_MEMORY, "%s: out of memory", path);
    }
    const family_input *f = family_input_of(type);
    if (f && !f->json) {
        family_input in = *f;
        /* the run's own values: its test crop (else its training crop) with the short side
         * resized to it, as pySlowFast's and VideoMAE's multi-crop tests do; its mean and std.
         * Without them, the model's own size (a file of a size other than the family's: X-CLIP's
         * .pth holds no config, its config.json gives the size) */
        int crop = c.test_crop ? c.test_crop : c.train_crop;
        if (!crop && !in.fixed_crop) crop = image_size ? image_size : beside_image_size(path);
        if (crop && !in.fixed_crop) in.crop = in.shortest = crop;
        if (c.have_mean) memcpy(in.mean, c.mean, sizeof in.mean);
        if (c.have_std) memcpy(in.std, c.std, sizeof in.std);
        *json = processor_json(in.shortest, in.crop, in.mean, in.std);
        return *json ? TUBELET_OK : tb_fail(e, TUBELET_ERR_MEMORY, "%s: out of memory", path);
    }
    *json = tb_ckpt_preprocessor_json(type);
    return *json ? TUBELET_OK : tb_fail(e, TUBELET_ERR_MEMORY, "%s: out of memory", path);
}
