/* Initialisation from an image model (image_init.c; docs/image-init.md): what the families'
 * image-init entries (tb_family_ops.image_open, image_copy) share. image_init.c calls no family;
 * model.c (tubelet_model_from_image) calls the family's entries. */
#ifndef TB_IMAGE_INIT_H
#define TB_IMAGE_INIT_H

#include "family.h"

/* The image model: its weights and the config fields the copies need. */
struct tb_vit {
    tb_weights *w;
    char dir[512];
    char prefix[8];       /* "vit." (ViTForImageClassification) or "" (ViTModel) */
    int new_names;        /* transformers 5's vit.layers.N.attention.q_proj, mlp.fc1 */
    int hidden, layers, heads, intermediate, patch, channels, image_h, image_w, qkv_bias;
    int swin;             /* an image Swin (model_type "swin"; prefix "swin." or "") */
    int window;           /*   its window_size (square windows) */
};


/* config.json readers: a positive integer (absent: def); an integer or a list of 1 to max
 * (absent: out and *n kept). tb_ii_list_text: "[2, 2, 6, 2]". */
int tb_ii_json_int(const struct cJSON *j, const char *key, int def, int *out, const char *path,
                   tb_err *e);
int tb_ii_json_ints(const struct cJSON *j, const char *key, int *out, int max, int *n,
                    const char *path, tb_err *e);
const char *tb_ii_list_text(char *buf, size_t size, const int *a, int n);

/* The writable buffer of the video model's parameter `name`; the image model's tensor
 * prefix+name of exactly this shape; a copy of one into the other; to+"weight"/"bias" <-
 * from+"weight"/"bias" of a Linear (out, in) or a LayerNorm (in = 0). */
int tb_ii_dst(tubelet_model *m, const char *name, int64_t numel, float **out, tb_err *e);
int tb_ii_src(tb_vit *v, const char *name, int ndim, const int64_t *shape, const float **out,
              tb_err *e);
int tb_ii_copy(tb_vit *v, tubelet_model *m, const char *to, const char *from, int ndim,
               const int64_t *shape, tb_err *e);
int tb_ii_copy_wb(tb_vit *v, tubelet_model *m, const char *to, const char *from, int64_t out,
                  int64_t in, int bias, tb_err *e);
/* A 2D filter E (DC, P) over tt frames, w (DC, tt, P): E / tt at every index (inflation) or E at
 * the central index tt / 2 and zeros elsewhere. */
void tb_ii_filter_over_time(float *w, const float *E, int64_t DC, int64_t tt, int64_t P,
                            int inflate);
/* --keep-head: the video model's classifier (to + "weight"/"bias") <- the image model's. */
int tb_ii_copy_head(tb_vit *v, tubelet_model *m, const char *to, tb_err *e);
/* tb_weights_each_unused's callback: warns of an image tensor not used by mistake. */
void tb_ii_report_unused(void *user, const char *name);

/* ---- an image ViT (ViTModel / ViTForImageClassification) into a ViT family ---- */

/* The ViT's config.json checked against c (hidden size, heads, MLP width, channels, patch,
 * layers); c takes the image model's activation, LayerNorm epsilon and q/k/v biases. */
int tb_ii_vit_open(tb_vit *v, const struct cJSON *j, const char *path, tb_config *c,
                   const tb_log *log, tb_err *e);
/* One attention step <- ViT layer l's layernorm_before and attention: ln + "weight"/"bias", attn
 * + "attention.{query,key,value}." (fused: attn + "attention.qkv.", q, k, v stacked) and attn +
 * "output.dense."; layernorm_after and the MLP under prefix p <- layer l's; a dense (D, D) set to
 * 0 or to the identity, bias 0. */
int tb_ii_copy_attention(tb_vit *v, tubelet_model *m, int l, const char *ln, const char *attn,
                         int fused, tb_err *e);
int tb_ii_copy_mlp(tb_vit *v, tubelet_model *m, int l, const char *p, tb_err *e);
int tb_ii_set_dense(tubelet_model *m, const char *p, int identity, tb_err *e);

/* How a ViT family lays out what the image ViT gives it. */
typedef struct {
    const char *prefix;      /* of its embeddings and final LayerNorm: "vivit." */
    int filter_2d;           /* 1: a Conv2d patch filter (TimeSformer), 0: a Conv3d over tubelet_t */
    int one_frame_positions; /* 1: a position table of one frame; 0: repeated over time */
    int (*blocks)(tb_vit *v, tubelet_model *m, tb_err *e); /* its encoder blocks */
} tb_ii_vit_layout;
/* The patch filter, cls token, positions, blocks, final LayerNorm and (keep_head) classifier. */
int tb_ii_vit_copy(tb_vit *v, tubelet_model *m, const tb_ii_vit_layout *l, int inflate,
                   int keep_head, tb_err *e);

#endif
