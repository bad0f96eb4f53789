/* tubelet: video vision transformers (ViViT, TimeSformer, VideoMAE, Video Swin) in C.
 *
 * Usage:
 *     tubelet_model *m;
 *     char err[1024];
 *     tubelet_load_params lp = tubelet_load_default_params();
 *     if (tubelet_model_load(&m, "path/to/model_dir", &lp, err, sizeof err)) { puts(err); ... }
 *     tubelet_state *s;
 *     tubelet_state_new(&s, m, batch, frames, height, width, err, sizeof err);
 *     tubelet_shape ls; tubelet_state_logits_shape(s, &ls);      // e.g. (B, num_labels)
 *     float *logits = malloc(tubelet_shape_numel(&ls) * sizeof(float));
 *     tubelet_forward(s, pixel_values, logits, NULL, err, sizeof err);
 *     tubelet_state_free(s); tubelet_model_free(m);
 *
 * Ownership and threads: a tubelet_model holds the weights (read-only once loaded, memory-mapped
 * where the file allows) and may be shared by several tubelet_state objects, one per thread of
 * use. A state holds the activation arena for one input shape. Training keeps the model
 * read-only too: gradients live in a caller-owned tubelet_grads bound to a state, so several
 * states may run tubelet_forward and tubelet_forward_backward on one model concurrently, as long
 * as no two of them share a tubelet_grads and nothing updates the weights (an optimiser step,
 * tubelet_model_set_threads) meanwhile. Every function returns TUBELET_OK (0) or a status code,
 * and writes a human-readable message naming the file and the problem into err.
 * The library never prints and never exits; warnings go to the log callback in tubelet_load_params.
 */
#ifndef TUBELET_H
#define TUBELET_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TUBELET_VERSION "0.1.0"

typedef enum {
    TUBELET_OK = 0,
    TUBELET_ERR_ARG = 1,         /* a bad argument from the caller */
    TUBELET_ERR_IO = 2,          /* file missing or unreadable */
    TUBELET_ERR_FORMAT = 3,      /* a file exists but is malformed */
    TUBELET_ERR_CONFIG = 4,      /* config.json names something unsupported or inconsistent */
    TUBELET_ERR_SHAPE = 5,       /* a tensor or input has the wrong shape */
    TUBELET_ERR_MISSING = 6,     /* a required tensor is missing */
    TUBELET_ERR_MEMORY = 7,      /* allocation failed */
    TUBELET_ERR_VALUE = 8,       /* NaN/inf or out-of-range values */
    TUBELET_ERR_UNSUPPORTED = 9,
    TUBELET_INTERRUPTED = 10,    /* stopped on request (tubelet_train_params.stop) */
} tubelet_status;

/* Warning sink: level 1 = warning, 2 = info. user is tubelet_load_params.log_user. */
typedef void (*tubelet_log_fn)(void *user, int level, const char *msg);

typedef struct {
    int n_threads;           /* 0 = all cores; sets the GEMM library and our own loops; at most
                                tubelet_max_threads() (TUBELET_ERR_ARG above it) */
    tubelet_log_fn log;      /* NULL = warnings are dropped */
    void *log_user;
    int no_mmap;             /* 1 = copy weights into memory instead of mapping the file (needed
                                to train: the weights must be writable) */
    /* for training */
    int random_init;         /* 1 = a directory without weights starts from random weights */
    uint64_t seed;           /*     drawn with this seed */
    int num_labels;          /* > 0: use these classes (labels[0..num_labels)); a classifier of
                                another size in the checkpoint is re-initialised with a warning */
    const char *const *labels;
    /* inference in reduced precision (docs/precision.md): every linear layer's weight is
     * converted once at load and its f32 copy dropped; training needs TUBELET_PRECISION_FP32 */
    int precision;           /* TUBELET_PRECISION_FP32 (0, default), _BF16 or _INT8 (with the
                                activation scales of the directory's int8_scales.json where it
                                has one: static int8, tubelet_calib_*; else dynamic, said at
                                the info level) */
    int precision_reference; /* 1 = the portable path (rounded values through f32 sgemm) even
                                where the CPU has AVX512-BF16 / AVX512-VNNI (for tests) */
    int train_precision;     /* training (docs/training.md): TUBELET_PRECISION_FP32 (0, default)
                                or _BF16 = mixed precision, as torch.autocast(bfloat16): the
                                weights, gradients and optimiser state stay f32; every product
                                of the linear layers, forward and backward, takes bf16 operands
                                (f32 accumulation), and attention's forward too where the CPU
                                runs bf16 faster than f32 (AVX512-BF16 without AMX). No loss
                                scaling: bf16 has f32's exponent range */
    int inference;           /* 1 = forward passes only: fp32 weights too are packed once into
                                oneDNN's matmul layout, with bias, activation and residual fused
                                into each product (faster); the model can then not train or be
                                saved. Reduced precisions always pack. */
    int64_t max_memory;      /* bytes a model may need before anything is allocated: 0 = the
                                machine's memory (or its cgroup limit), < 0 = no check; a config
                                whose sizes need more is refused with the figure */
    const char *config;      /* a config.json for an official checkpoint file (.pth, .pyth;
                                docs/checkpoints.md); NULL: the config.json beside the file, or
                                one inferred from its tensors */
    const char *device;      /* the backend that runs the model: NULL or "cpu"; "cuda" in a
                                build with CUDA=1 (fp32 inference and training on an NVIDIA
                                GPU, unverified on a GPU so far: docs/cuda.md); a name this
                                build lacks is refused (TUBELET_ERR_ARG), and "cuda" on a
                                machine without a GPU at load (TUBELET_ERR_UNSUPPORTED) */
} tubelet_load_params;

enum { TUBELET_PRECISION_FP32 = 0, TUBELET_PRECISION_BF16 = 1, TUBELET_PRECISION_INT8 = 2 };
/* "fp32", "bf16", "int8"; NULL for another value. */
const char *tubelet_precision_name(int precision);
/* The precision named s, or -1. */
int tubelet_precision_parse(const char *s);

tubelet_load_params tubelet_load_default_params(void);

/* The mean over rows of the softmax of each row of logits (rows x n) into p (n doubles): one
 * clip's prediction from its views, or from TimeSformer space_only's per-frame rows. */
void tubelet_mean_softmax(const float *logits, int64_t rows, int64_t n, double *p);

typedef struct tubelet_model tubelet_model;
typedef struct tubelet_state tubelet_state;

/* Loads a Hugging Face model directory: config.json plus model.safetensors or
 * model.safetensors.index.json with its shards; or an official checkpoint file as published
 * (TimeSformer .pyth, VideoMAE .pth: docs/checkpoints.md), read without running any of it. */
int tubelet_model_load(tubelet_model **out, const char *dir, const tubelet_load_params *params,
                       char *err, size_t errlen);

/* Builds a model with random weights at a named architecture's shapes ("videomae-base",
 * "timesformer-base", "vivit-base", ...); see tubelet_arch_name(). */
int tubelet_model_random(tubelet_model **out, const char *arch, uint64_t seed,
                         const tubelet_load_params *params, char *err, size_t errlen);
/* A named architecture described from its configuration alone, with no weights made (instant,
 * where random weights for ViT-B take seconds): for tubelet_model_get_info, the FLOP counts, the
 * labels, tubelet_model_tensor's names and shapes (their data is NULL) and the pretraining sizes.
 * It cannot run, train, save or export: those refuse it with TUBELET_ERR_UNSUPPORTED. */
int tubelet_model_describe(tubelet_model **out, const char *arch, char *err, size_t errlen);

/* A video model initialised from a Hugging Face image ViT (docs/image-init.md): video is a
 * directory holding config.json (weights there are ignored) or a built-in architecture name;
 * vit_dir a ViTModel / ViTForImageClassification directory of the same hidden size, heads, MLP
 * width, channels and patch size. The image weights go into every block whose structure
 * matches, the positions are repeated over time (resized bicubically to the video's grid), the
 * tubelet filter gets the central-frame or inflated patch filter; the rest is initialised
 * randomly with `seed` as the references do. Save it with tubelet_model_save.
 * A Video Swin config takes a Hugging Face SwinModel / SwinForImageClassification directory of
 * the same embed_dim, depths, heads, spatial window and patch instead (docs/video-swin.md). */
enum { TUBELET_TUBELET_DEFAULT = -1, TUBELET_TUBELET_CENTRAL = 0, TUBELET_TUBELET_INFLATE = 1 };
typedef struct {
    int tubelet_init; /* TUBELET_TUBELET_CENTRAL (E at index t/2, 0 elsewhere; the ViViT paper's
                         best), TUBELET_TUBELET_INFLATE (E/t at every index) or
                         TUBELET_TUBELET_DEFAULT (the default: central for ViViT, inflation for
                         Video Swin, as each paper does) */
    int keep_head;    /* 1 = copy the image model's classifier (num_labels must match) */
    uint64_t seed;    /* the random initialisation of what is not copied */
} tubelet_image_init_params;
tubelet_image_init_params tubelet_image_init_default_params(void);
int tubelet_model_from_image(tubelet_model **out, const char *video, const char *vit_dir,
                             const tubelet_image_init_params *ip,
                             const tubelet_load_params *params, char *err, size_t errlen);

/* Names of the built-in architectures, NULL past the end. */
const char *tubelet_arch_name(int i);

void tubelet_model_free(tubelet_model *m);

/* Writes the model as a Hugging Face directory: dir/config.json and dir/model.safetensors (each
 * written to a temporary file, synced and renamed). dir must exist. */
int tubelet_model_save(const tubelet_model *m, const char *dir, char *err, size_t errlen);
/* Writes the model as a new Hugging Face directory out (which must not exist), whole under a
 * temporary name beside it and then renamed into place: config.json, model.safetensors and, for
 * a model read from an official checkpoint file, preprocessor_config.json with the
 * normalisation its authors trained with (where the family has one), with the crop, mean and std
 * of the file's own training config where it carries one (docs/checkpoints.md). */
int tubelet_model_export(const tubelet_model *m, const char *out, char *err, size_t errlen);
/* 1 if path is a regular file (an official checkpoint as published: TimeSformer .pyth, VideoMAE
 * .pth, Video Swin .pth, ViViT's Flax msgpack), 0 for a model directory or anything else. */
int tubelet_checkpoint_is_file(const char *path);
/* The frame stride the checkpoint file at path was trained with, from its own training config
 * (pySlowFast's DATA.SAMPLING_RATE, VideoMAE's args.sampling_rate); 0 when it says nothing, for
 * a directory, or when the file cannot be read (loading it then reports why). */
int tubelet_checkpoint_sampling_rate(const char *path);

/* Threads the model's forward uses (GEMM library and our loops). 0 = all cores; a count above
 * tubelet_max_threads() is lowered to it. A state made before the call runs with at most
 * max(the count it was made with, the cores). */
void tubelet_model_set_threads(tubelet_model *m, int n_threads);
/* The most threads a model takes: 4 x the CPUs this process may use (its affinity mask, as
 * omp_get_num_procs counts them). Enough to oversubscribe the CPUs (several MPI ranks on one
 * machine); more would only size per-thread buffers for threads that never run. */
int tubelet_max_threads(void);
int tubelet_model_threads(const tubelet_model *m);
/* The GEMM library in use, e.g. "oneDNN 2.6.3 (sgemm)". */
const char *tubelet_gemm_backend(void);

#define TUBELET_MAX_STAGES 4   /* stages of tubelet_model_info (Video Swin's) */

typedef struct {
    const char *family;      /* "videomae", "timesformer", "vivit", "video_swin" */
    const char *variant;     /* e.g. "divided_space_time", "model1_spatio_temporal",
                                "model2_factorised_encoder", "mean_pooling" */
    const char *model_type;  /* config.json's model_type */
    int64_t n_params;
    int num_frames, image_height, image_width, num_channels;
    int hidden_size, num_layers, num_heads, intermediate_size;
    int num_labels;
    int tubelet_t, patch_h, patch_w;  /* tubelet_t = 1 for 2D patches */
    int64_t n_tokens;        /* tokens per clip entering the (first) encoder, cls included */
    double flop_per_clip;    /* 2 * multiply-adds of every matmul, attention included */
    /* config.json's training-time dropout rates (Hugging Face's defaults: 0) */
    float hidden_dropout_prob, attention_probs_dropout_prob;
    /* ViViT Model 2 (factorised encoder): blocks of the temporal encoder, which follows the
     * num_layers blocks of the spatial one; 0 for every other model */
    int num_temporal_layers;
    /* VideoMAE layer scale (config.json "layer_scale_init_value"; the STMixer backbone's
     * init_values): its initial value, 0 when the blocks have none */
    double layer_scale_init_value;
    int precision;           /* TUBELET_PRECISION_* of the linear layers */
    int precision_native;    /* 1: AVX512-BF16 / VNNI kernels; 0: the portable path (or fp32) */
    int packed;              /* 1: linear weights packed for inference (tubelet_load_params) */
    size_t linear_weight_bytes; /* bytes the linear layers' weights take in that precision */
    int int8_static;         /* 1: int8 activations with the calibrated scales of the model
                                directory's int8_scales.json; 0: dynamic (or not int8) */
    /* what TUBELET_TUBELET_DEFAULT means for the family in tubelet_model_from_image:
     * TUBELET_TUBELET_INFLATE (Video Swin) or TUBELET_TUBELET_CENTRAL (the others) */
    int tubelet_init_default;
    /* parameters the family's files carry that never run (V-JEPA 2's predictor, for JEPA
     * pretraining): n_params + this is the reference's count (transformers'); 0 for the others */
    int64_t n_params_not_run;
    /* Models in stages (Video Swin; 0 stages for every other family): stage i's blocks, heads,
     * width and MLP width, its token grid (frames x rows x columns) for config.json's input, and
     * the attention window there (window_size, shrunk to the grid where the grid is smaller) */
    int num_stages;
    struct {
        int depth, heads, width, mlp;
        int tokens[3], window[3];
    } stage[TUBELET_MAX_STAGES];
    int window_size[3];      /* config.json's window_size: frames, rows, columns of tokens */
} tubelet_model_info;

int tubelet_model_get_info(const tubelet_model *m, tubelet_model_info *info);

/* flop_per_clip for an input of frames x height x width instead of config.json's. */
double tubelet_model_flop_per_clip(const tubelet_model *m, int frames, int height, int width);

/* Label of class i from config.json's id2label, or NULL. */
const char *tubelet_model_label(const tubelet_model *m, int i);

typedef struct {
    int ndim;
    int64_t dim[6];
} tubelet_shape;

static inline int64_t tubelet_shape_numel(const tubelet_shape *s) {
    int64_t n = 1;
    for (int i = 0; i < s->ndim; i++) n *= s->dim[i];
    return n;
}

/* A per-shape activation arena. Input is pixel_values (batch, frames, channels, height, width). */
int tubelet_state_new(tubelet_state **out, tubelet_model *m, int batch, int frames, int height,
                      int width, char *err, size_t errlen);
void tubelet_state_free(tubelet_state *s);
void tubelet_state_logits_shape(const tubelet_state *s, tubelet_shape *shape);
void tubelet_state_hidden_shape(const tubelet_state *s, tubelet_shape *shape);
/* 1 if the state was made for exactly this input shape. */
int tubelet_state_matches(const tubelet_state *s, int batch, int frames, int height, int width);
/* Bytes of activation memory the state holds (training buffers included). */
size_t tubelet_state_bytes(const tubelet_state *s);

/* Runs the model. pixels: float32 (batch, frames, channels, height, width), row-major.
 * logits: receives the *ForVideoClassification output (NULL to skip the head).
 * hidden: receives the base model's last_hidden_state (NULL to skip). */
int tubelet_forward(tubelet_state *s, const float *pixels, float *logits, float *hidden,
                    char *err, size_t errlen);

/* The vector the classifier reads, (batch, hidden_size) into pooled: VideoMAE's fc_norm of the
 * mean of the tokens (the original codebases' forward_features), the final-normed cls token
 * (TimeSformer, ViViT Models 1 and 2), the mean of the tokens (ViViT Models 3 and 4, Video
 * Swin). TUBELET_ERR_UNSUPPORTED for X-CLIP and TimeSformer space_only (a row per frame). */
int tubelet_forward_pooled(tubelet_state *s, const float *pixels, float *pooled, char *err,
                           size_t errlen);

/* Features. tubelet_forward_hidden runs the embedding and the first `layer` blocks and writes
 * their output into hidden (Hugging Face's hidden_states[layer]: 0 = embeddings, no final
 * LayerNorm); layer = -1 gives last_hidden_state. hidden has tubelet_state_hidden_shape.
 * ViViT Model 2 (factorised encoder): only layer = -1 (TUBELET_ERR_UNSUPPORTED otherwise); its
 * last_hidden_state is the temporal encoder's (batch, 1 + t, hidden_size). */
int tubelet_forward_hidden(tubelet_state *s, const float *pixels, int layer, float *hidden,
                           char *err, size_t errlen);
/* Patch-token grid of the state's input: frames / tubelet, rows, columns. */
void tubelet_state_grid(const tubelet_state *s, int *t, int *h, int *w);
/* 1 if the model has a cls token (TimeSformer, ViViT Models 1 and 2), 0 for VideoMAE and ViViT
 * Models 3 and 4. */
int tubelet_state_has_cls(const tubelet_state *s);
/* hidden → (batch, hidden_size, t, h, w) feature map of the patch tokens (cls dropped), the
 * layout VideoMAE/STMixer backbones hand to a detector. For TimeSformer space_only, batch
 * counts clips, not frames. ViViT Model 2's hidden state has no patch tokens: zeros. */
void tubelet_feature_map(const tubelet_state *s, const float *hidden, float *out);
/* Multi-level features for a detector, from one forward pass (the STMixer backbone:
 * docs/stmixer-backbone.md). Level i, written to out[i], is a feature map laid out as
 * tubelet_feature_map's, shape tubelet_state_feature_shape. layers NULL: every level is the last
 * hidden state (final LayerNorm applied), as STMixer's features = [x, x, x, x]; otherwise level i
 * is hidden_states[layers[i]] (0 = embeddings, L = the output of the first L blocks, no final
 * LayerNorm; -1 = the last hidden state): ViTDet-style blocks 3, 5, 7, 11 (0-based) are layers
 * {4, 6, 8, 12}. 1 <= n_levels <= 64. Not for ViViT Model 2 (TUBELET_ERR_UNSUPPORTED). */
int tubelet_forward_features(tubelet_state *s, const float *pixels, int n_levels,
                             const int *layers, float *const *out, char *err, size_t errlen);
/* Shape of one level: (batch, hidden_size, t, h, w) of tubelet_state_grid. */
void tubelet_state_feature_shape(const tubelet_state *s, tubelet_shape *shape);
/* Shape of feature level `level` of tubelet_forward_features: Video Swin's stage `level` output
 * (batch, width of the stage, t, h, w), 0 <= level < its stages (TUBELET_ERR_ARG beyond); for the
 * other families every level has tubelet_state_feature_shape. */
int tubelet_state_level_shape(const tubelet_state *s, int level, tubelet_shape *shape);
enum { TUBELET_POOL_CLS = 0, TUBELET_POOL_MEAN = 1 };
/* hidden → (batch, hidden_size): the cls token, or the mean of the patch tokens (ViViT Model 2:
 * the temporal encoder's cls token, or the mean of its frame tokens). TUBELET_ERR_ARG for an
 * unknown mode, or TUBELET_POOL_CLS on a model without a cls token (tubelet_state_has_cls). */
int tubelet_pool(const tubelet_state *s, const float *hidden, int mode, float *out);

/* ---- training ----
 * Gradients live outside the model, in a tubelet_grads the caller owns: one buffer per parameter,
 * in the model's parameter order (tubelet_model_tensor). A state made for training
 * (tubelet_state_enable_training) is bound to one tubelet_grads and keeps the activations the
 * backward pass needs; tubelet_forward_backward runs forward, mean cross-entropy against labels
 * (int64, one per logits row) and backward, adding into those gradients and writing nothing of
 * the model (see "Ownership and threads" above). */
typedef struct tubelet_grads tubelet_grads;
/* Zeroed gradients for every parameter of m (TUBELET_ERR_UNSUPPORTED for a model loaded for
 * inference or in reduced precision). */
int tubelet_grads_new(tubelet_grads **out, const tubelet_model *m, char *err, size_t errlen);
/* Zeroed gradients of the probe's parameters only (tubelet_model_tensor_is_probe): what training
 * over a frozen encoder needs, without a buffer the size of the encoder (V-JEPA 2 ViT-L: 1.2 GB);
 * tubelet_grads_at gives NULL for every other parameter. A state bound to them trains with its
 * encoder frozen (tubelet_state_freeze_encoder(s, 0) is refused); pretraining refuses them.
 * TUBELET_ERR_UNSUPPORTED for the families that cannot freeze their encoder. */
int tubelet_grads_new_probe(tubelet_grads **out, const tubelet_model *m, char *err,
                            size_t errlen);
void tubelet_grads_free(tubelet_grads *g);
void tubelet_grads_zero(tubelet_grads *g);
/* The gradient of parameter i, shaped as tubelet_model_tensor says; NULL past the end, and for
 * an encoder tensor of probe-only gradients. On a device backend (cuda) the gradients live in
 * the device's memory, and the first call after a backward copies all of them to the host (so
 * one thread at a time reads a tubelet_grads). */
float *tubelet_grads_at(const tubelet_grads *g, int i);
/* After gradients were written through tubelet_grads_at (a data-parallel sum over ranks): a
 * device backend's copy of them refreshed from those values, for the optimiser that reads them
 * there; nothing on the CPU. A status, and err naming the problem. */
int tubelet_grads_changed(tubelet_grads *g, char *err, size_t errlen);
const tubelet_model *tubelet_grads_model(const tubelet_grads *g);
int tubelet_model_n_tensors(const tubelet_model *m);
/* Name of parameter i (NULL past the end), its shape and values. */
const char *tubelet_model_tensor(const tubelet_model *m, int i, tubelet_shape *shape,
                                 const float **data);
/* Parameter i's values for an optimiser to update (NULL past the end, or for a model loaded for
 * inference). They are writable when the model was loaded with no_mmap, or built (random, from
 * an image model). */
float *tubelet_model_tensor_writable(tubelet_model *m, int i);
/* How an optimiser treats parameter i, as its family says: returns 1 if it takes weight decay
 * (matrices and filters; not norms, biases, positions, cls or mask tokens), 0 if not, -1 past the
 * end; *layer (if not NULL): its depth for layer-wise learning-rate decay, 0 the embeddings,
 * 1 .. depth the blocks, depth + 1 the final norms and the classifier (depth: num_layers +
 * num_temporal_layers of tubelet_model_info). */
int tubelet_model_tensor_group(const tubelet_model *m, int i, int *layer);
/* After parameters were written there (an optimiser step): a device backend's copy of them
 * (device "cuda") refreshed from those values, so that the next pass sees them; nothing to do on
 * the CPU. A status, and err naming the problem. */
int tubelet_model_weights_changed(tubelet_model *m, char *err, size_t errlen);
/* Binds s to the gradients g (made for s's model; TUBELET_ERR_ARG otherwise) and makes its
 * training buffers. checkpoint_blocks = 1: gradient checkpointing — each block keeps only its
 * input and is run again during the backward pass (less memory, about one more forward of
 * compute). g must outlive the state's training use. */
/* 1 if tensor i of m is trained with the encoder frozen (tubelet_state_freeze_encoder): the
 * classifier and what lies between the encoder's last hidden state and it (V-JEPA 2's attentive
 * pooler, VideoMAE's fc_norm); 0 for the encoder's own. */
int tubelet_model_tensor_is_probe(const tubelet_model *m, int i);
/* The frozen-encoder protocol (V-JEPA 2's attentive probe, a linear probe): on a training state,
 * tubelet_forward_backward runs the encoder as tubelet_forward does (no dropout, drop path or
 * kept activations) and the backward stops at its last hidden state: only the probe tensors get
 * gradients (the others stay zero; with tubelet_grads_new_probe's gradients, which freeze the
 * encoder on their own, they have none). Call after tubelet_state_enable_training (with
 * checkpoint_blocks 1, the encoder's kept inputs are all it allocates).
 * TUBELET_ERR_UNSUPPORTED for the families with their own runner (Video Swin, X-CLIP). */
int tubelet_state_freeze_encoder(tubelet_state *s, int on, char *err, size_t errlen);
/* With the encoder frozen, its output depends on the clip only: the output of the last
 * tubelet_forward_backward (the rows entering the final norm: tubelet_state_hidden_shape's rows x
 * hidden, host memory) is copied into out; tubelet_state_set_encoder_output hands such an output
 * (held by the caller until that call returns) to the next tubelet_forward_backward, which then
 * skips the encoder (its pixels are not read) and gives the same loss and gradients.
 * TUBELET_ERR_ARG unless the encoder is frozen; one encoder stage only. */
int tubelet_state_encoder_output(const tubelet_state *s, float *out, char *err, size_t errlen);
int tubelet_state_set_encoder_output(tubelet_state *s, const float *x, char *err, size_t errlen);
int tubelet_state_enable_training(tubelet_state *s, int checkpoint_blocks, tubelet_grads *g,
                                  char *err, size_t errlen);
/* The gradients s is bound to; NULL for a state not made for training. */
tubelet_grads *tubelet_state_grads(const tubelet_state *s);
/* Drop path (stochastic depth) at rate * l / (L - 1) for block l; the masks of a step are a
 * function of (seed, step) only. Set before each tubelet_forward_backward. Default 0. */
void tubelet_state_set_drop_path(tubelet_state *s, float rate, uint64_t seed, int64_t step);
/* Called by tubelet_forward_backward after the backward of encoder block l (from the last block
 * to block 0): the gradients of blocks l + 1 and later, and of the head, are final then, so a
 * data-parallel trainer can start summing them over its ranks while earlier blocks still
 * compute. NULL (the default) for none. On a device backend (cuda) the gradients reach the
 * host (tubelet_grads_at) only after tubelet_forward_backward returns. */
typedef void (*tubelet_block_grad_fn)(void *user, int block);
void tubelet_state_set_block_grad_hook(tubelet_state *s, tubelet_block_grad_fn fn, void *user);
/* Dropout as Hugging Face applies it in training mode: hidden_p wherever the family's modules
 * apply nn.Dropout(hidden_dropout_prob) (embeddings, attention and MLP outputs, ...; see
 * docs/training.md), attn_p on the attention probabilities. The masks of a step are a function
 * of (seed, step) only and are regenerated in the backward pass, never stored. Rates outside
 * (0, 1] mean off. Set before each tubelet_forward_backward; default 0 (off). tubelet_forward
 * never drops (evaluation mode), even on a training state. */
void tubelet_state_set_dropout(tubelet_state *s, float hidden_p, float attn_p, uint64_t seed,
                               int64_t step);
/* Label smoothing eps of the training loss (PyTorch semantics; default 0). */
void tubelet_state_set_label_smoothing(tubelet_state *s, float eps);
int tubelet_forward_backward(tubelet_state *s, const float *pixels, const int64_t *labels,
                             float *loss, float *logits, char *err, size_t errlen);

/* ---- static int8: calibration (docs/precision.md, "Static int8") ----
 * Records the range of the input of every linear layer of an fp32 model over a few clips and
 * writes dir/int8_scales.json; a model loaded from dir with precision int8 then quantises each
 * layer's activations with that fixed scale and zero point instead of their range in each call.
 *     tubelet_load_params lp = tubelet_load_default_params();
 *     lp.inference = 1;                          // fp32, the linear layers packed as int8 packs
 *     tubelet_model_load(&m, dir, &lp, ...);  tubelet_state_new(&s, m, 1, ...);
 *     tubelet_calib *c;
 *     tubelet_calib_new(&c, m, 100, err, sizeof err);
 *     for each clip: tubelet_calib_observe(c, s, pixels, err, sizeof err);
 *     tubelet_calib_write(c, dir, err, sizeof err);
 *     tubelet_calib_free(c);
 * Estimator: at percentile 100 each layer's range is the min and max of its input over every
 * observed batch (NNCF's MINMAX: no calibration value is clipped); at P < 100 the mean over the
 * batches of each batch's (100 - P)-th and P-th percentiles (NNCF's MEAN_QUANTILE; its default
 * outlier probability 1e-4 is P = 99.99). The range is widened to hold 0; scale = (max - min) /
 * 255, zero point round(-min / scale). m must outlive the session. */
typedef struct tubelet_calib tubelet_calib;
/* m: loaded with precision fp32 and inference = 1 (TUBELET_ERR_ARG otherwise); percentile in
 * [50, 100]. */
int tubelet_calib_new(tubelet_calib **out, tubelet_model *m, double percentile, char *err,
                      size_t errlen);
/* Runs the model on one batch (pixels as tubelet_forward's) through s, a state of the
 * calibrated model, and records each linear layer's input: one sample of the estimator. */
int tubelet_calib_observe(tubelet_calib *c, tubelet_state *s, const float *pixels, char *err,
                          size_t errlen);
/* The linear layers calibrated, and layer i's name ("patch_embed", "blocks.0.attn.qkv", ..., "head"; NULL past the end), and the
 * range, scale and zero point the batches observed so far give (0s before any). */
int tubelet_calib_n_layers(const tubelet_calib *c);
const char *tubelet_calib_layer(const tubelet_calib *c, int i, float *lo, float *hi,
                                float *scale, int *zero_point);
/* Writes dir/int8_scales.json (a temporary file beside it, synced, then renamed: never a part
 * of one). TUBELET_ERR_ARG before any batch. */
int tubelet_calib_write(const tubelet_calib *c, const char *dir, char *err, size_t errlen);
void tubelet_calib_free(tubelet_calib *c);

/* Profiling: when on, tubelet_forward adds the wall time of each kind of work (embed,
 * layernorm, qkv, attention, ...) to per-state counters; turning it on resets them.
 * tubelet_state_profile fills up to max names and milliseconds and returns how many. */
void tubelet_state_set_profiling(tubelet_state *s, int on);
int tubelet_state_profile(const tubelet_state *s, const char **names, double *ms, int max);

#ifdef __cplusplus
}
#endif
#endif
