/* Per-shape run state: the token layout of the input and one activation arena, planned once. */
#ifndef TB_STATE_H
#define TB_STATE_H

#include "model.h"

/* What one block's backward pass needs from its forward pass. Attention step k (in block order;
 * s->step[k] its groups): */
typedef struct {
    float *x_in;                 /* block input = input of step 0 (rows, D) */
    float *x_step[TB_MAX_STEPS]; /* input of step k > 0 (rows, D) */
    float *x_mid;                /* after the attention steps, the MLP's input (rows, D) */
    float *qkv[TB_MAX_STEPS];    /* step k's q|k|v (rows, 3D) */
    float *o[TB_MAX_STEPS];      /*   attention output (group rows, D) */
    float *p[TB_MAX_STEPS];      /*   output projection before the step's dense (group rows, D) */
    float *h;                    /* fc1 output before the activation (rows, intermediate) */
    float *keep[TB_MAX_STEPS], *keep_mlp; /* drop path of this training step (NULL: none) */
} tb_layer_acts;

/* Training buffers of a state: kept activations, and the gradient flowing backward. */
typedef struct tubelet_train {
    const tb_weightset *g;     /* the gradients the backward adds into: those of grads (the
                                  pretraining decoder's state: a view of them, pretrain.c) */
    tubelet_grads *grads;      /* bound by tubelet_state_enable_training (the caller's) */
    tb_layer_acts *layer;
    float *x_final;            /* input of the head (rows, D) */
    float *dx, *da;            /* dL/d residual stream, dL/d normalised input (rows, D) */
    float *dqkv, *dqkv_g;      /* (rows, 3D) and group-major (group rows, 3D) */
    float *d_o, *dp, *dp2;     /* (group rows, D) */
    float *dmlp;               /* (rows, intermediate) */
    float *demb;               /* (B n_patch, D) */
    float *frames, *dframes;   /* ViViT Model 2: the frames' cls rows entering the spatial
                                  encoder's final LayerNorm, and their gradient (B n_t, D) */
    float *dlogits, *dpooled;  /* (n_seq, labels), (n_seq, D) */
    float *scratch;            /* attention backward tiles */
    int checkpoint;            /* gradient checkpointing: blocks recomputed in the backward */
    float label_smoothing;
    float drop_path;           /* stochastic depth rate of the last block */
    uint64_t dp_seed;
    int64_t dp_step;
    float hidden_dropout, attn_dropout; /* dropout rates (0 = off) */
    uint64_t dropout_key;      /* of this step: a function of (seed, step) */
    int frozen_encoder;        /* tubelet_state_freeze_encoder: the encoder runs as in inference,
                                  the backward stops at its last hidden state */
    const float *given_output; /* tubelet_state_set_encoder_output: the next step's encoder
                                  output (host memory, rows x D), the encoder not run */
    int active;                /* 1 while tubelet_forward_backward runs: only then do drop path
                                  and dropout apply (tubelet_forward on this state is eval mode) */
    void (*block_grad)(void *user, int block); /* tubelet_state_set_block_grad_hook */
    void *block_grad_user;
    float *keep_arena;         /* drop path's factors of this step, in the backend's memory */
    int64_t *labels;           /* the step's labels copied there (a backend whose memory is not
                                  the host's; tubelet_forward_backward) */
    float *arena;
    size_t arena_floats;
} tubelet_train;

/* Time spent per kind of work, when profiling is on (tubelet bench --profile); PROF_B_*: the
 * same kinds in the backward pass of a training step (recomputations under checkpointing count
 * as forward work). */
enum { PROF_EMBED, PROF_NORM, PROF_QKV, PROF_ATTN, PROF_PROJ, PROF_FC1, PROF_ACT, PROF_FC2,
       PROF_OTHER, PROF_LOSS, PROF_B_EMBED, PROF_B_NORM, PROF_B_QKV, PROF_B_ATTN, PROF_B_PROJ,
       PROF_B_FC1, PROF_B_ACT, PROF_B_FC2, PROF_B_OTHER, PROF_N };

/* The sequences one encoder runs over. ViViT Model 2 has two encoders: the spatial one over a
 * sequence per frame (stage 0), the temporal one over a sequence per clip (stage 1); the other
 * models have one stage. */
typedef struct {
    float *x;                  /* its residual stream (rows, D) */
    int64_t n_seq, seq_len, rows;
} tb_stage;

struct tubelet_state {
    int profile;
    double prof_ms[PROF_N];
    tubelet_model *m;
    tb_backend be;             /* the backend its passes run on (TB_RUN): its own instance
                                  (fork) where the backend has one, else the model's */
    int max_threads;           /* the per-thread scratch is sized for this many threads: the
                                  model's count at creation or the cores, whichever is more */
    int B, T, H, W;
    float *pix;                /* the pass's copy of the caller's pixels (tb_state_pixels), in
                                  the backend's memory; NULL where that is the host's */
    int64_t grid_t, grid_h, grid_w; /* token grid: frames / tubelet, rows, columns of patches */
    int64_t n_patch;           /* patches per clip: grid_t * grid_h * grid_w */
    /* the stage running now (stages[0] after planning): */
    int64_t n_seq, seq_len;    /* sequences the encoder sees (B, or B*T for space_only and the
                                  spatial encoder of ViViT Model 2) */
    int64_t rows;              /* token rows in total: n_seq * seq_len */
    tb_grouping joint;         /* contiguous: each sequence attends to itself */
    int n_steps;               /* attention steps per block (TimeSformer: 1, 2 or 3; ViViT
                                  Model 3: 2; every other model 1) */
    tb_step_kind step_kind[TB_MAX_STEPS]; /* each step's weights */
    tb_grouping step[TB_MAX_STEPS];       /* each step's groups (joint: contiguous sequences) */
    float *step_weight[TB_MAX_STEPS];     /* per row: 1 / the number of the step's groups it is
                                             in (the cls token); NULL: every row in one group */
    int32_t *step_rows[TB_MAX_STEPS];     /* the index tables (owned; NULL: contiguous groups;
                                             ViViT Model 4 keeps its head groups' here) */
    int64_t *step_start[TB_MAX_STEPS];
    /* ViViT Model 4 (factorised dot-product attention): its one step (over whole clips) splits
     * its heads, the first half attending within head_group[0] (each frame's tokens), the second
     * within head_group[1] (each position's tokens); split_heads 0 for every other model */
    int split_heads;
    tb_grouping head_group[2];
    tb_stage stages[2];        /* the encoders' sequences (ViViT Model 2: 2; others: 1) */
    int n_stages, stage;
    const float *pos, *time_pos; /* position tables for this input's grid (the model's, or */
    float *pos_owned;            /*   resized ones owned here: positions.c) */
    size_t pos_owned_bytes;      /* its size: the planner shares it with the backend (the
                                    family's positions hook only computes it) */
    /* activations (the arena) */
    float *arena;
    size_t arena_floats;
    float *patches;            /* (B n_patch, C t ph pw) */
    float *emb;                /* (B n_patch, D) */
    float *x;                  /* residual stream (rows, D) */
    float *a;                  /* normalised input of a sub-layer (rows, D) */
    float *qkv;                /* (rows, 3D) */
    float *o, *p, *p2;         /* attention output, projected, projected twice (group rows, D) */
    float *mlp;                /* (rows, intermediate) */
    float *pooled;             /* (n_seq, D) */
    float *logits;             /* the head's output (tubelet_state_logits_shape), copied out */
    float *scratch;            /* attention tiles */
    tb_lowp_ctx *lowp;         /* packed weights: primitives and scratch (else NULL) */
    int kern_status;           /* the first failure of a table entry in this pass (the attention */
    const char *kern_what;     /*   refusing its groups) and which: tb_pass_status reports it */
    tubelet_train *train;      /* NULL unless tubelet_state_enable_training */
    /* VideoMAE pretraining (tb_state_new_visible): the encoder runs over n_visible tokens per
     * clip, the rows vis_rows (B n_visible, into the B n_patch embedded tokens, set per step by
     * tb_state_set_visible); x_all holds every embedded token (B n_patch, D) */
    int64_t n_visible;
    int32_t *vis_rows;
    float *x_all;
    int32_t *map_rows;         /* (B n_patch) each patch token's row, grid order: feature maps */
    void *fam;                 /* a whole-model family's own plan and buffers (video_swin.c) */
};

/* Threads a pass of s runs with: the model's count (tubelet_model_set_threads), at most the
 * max_threads its scratch was sized for. */
static inline int tb_state_threads(const tubelet_state *s) {
    return s->m->n_threads < s->max_threads ? s->m->n_threads : s->max_threads;
}

/* Keeps the first failure (rc != 0) of a table entry in this pass, what naming the entry, for
 * tb_pass_status: the pass runs on (its outputs are not valid) and reports it when it ends. */
static inline void tb_state_kernel_failed(tubelet_state *s, int rc, const char *what) {
    if (rc && !s->kern_status) s->kern_status = rc, s->kern_what = what;
}

/* Dropout sites: where Hugging Face applies nn.Dropout (docs/training.md, "Dropout"). A mask is
 * keyed by (step key, layer, site); layer -1 is the embeddings. */
enum {
    TB_DROP_EMB,        /* embeddings after the positions (ViViT; TimeSformer's pos_drop) */
    TB_DROP_EMB_TIME,   /* TimeSformer's time_drop, after the time embeddings; ViViT Model 2's
                           temporal encoder's embeddings */
    TB_DROP_ATTN_OUT,   /* attention output dense (TB_STEP_MAIN: the block's main attention) */
    TB_DROP_ATTN_T_OUT, /* TB_STEP_TEMPORAL_OR_LOCAL (temporal, local): attention output dense */
    TB_DROP_MLP_ACT,    /* TimeSformer: the intermediate, after the activation */
    TB_DROP_MLP_OUT,    /* the MLP's output dense */
    TB_DROP_PROBS,      /* attention probabilities (TB_STEP_MAIN; ViViT Model 4: spatial heads) */
    TB_DROP_PROBS_T,    /* attention probabilities (TB_STEP_TEMPORAL_OR_LOCAL; ViViT Model 4:
                           temporal heads) */
    TB_DROP_ATTN_W_OUT, /* TimeSformer axial: width attention output dense */
    TB_DROP_PROBS_W,    /* attention probabilities (width) */
};

/* 1 if hidden dropout applies in the current pass (a training step with a rate > 0). */
int tb_state_hidden_dropout_on(const tubelet_state *s);
/* Hidden dropout at (layer, site) on x[0..n), elements [first, first + n) of the site's tensor;
 * a no-op unless tb_state_hidden_dropout_on. The same call on the gradient is the backward. */
void tb_state_dropout(const tubelet_state *s, int layer, int site, float *x, int64_t n,
                      int64_t first);

/* VideoMAE's fixed positions (videomae.c): the sinusoid table of n_pos rows of D. */
void tb_sinusoid_table(float *t, int64_t n_pos, int64_t D);
/* src (h0, w0, D) → dst (h1, w1, D), bicubic, align_corners = False (positions.c). */
void tb_resize_bicubic(float *dst, int64_t h1, int64_t w1, const float *src, int64_t h0,
                       int64_t w0, int64_t D);

/* A table the plan computed on the host (attention groups, visible tokens, feature-map rows,
 * resized positions, Video Swin's windows), handed to the state's backend instance once, as the
 * model's tensors are to the model's: a GPU keeps its copy, so that no forward copies it again
 * (its entries refuse a host pointer nothing uploaded). The CPU's table has no upload: nothing
 * happens. Sharing it again after the host rewrote it refreshes the copy; tb_state_unshare
 * forgets it, before it is freed. Here, beside the state, so that the planner
 * and the family runners it calls both reach it from below (no call circle). */
static inline int tb_state_share(tubelet_state *s, const void *table, size_t bytes, tb_err *e) {
    return table && s->be.k->upload ? TB_RUN(&s->be, upload, table, bytes, e) : TUBELET_OK;
}
static inline void tb_state_unshare(const tubelet_state *s, const void *table) {
    if (table && s->be.k->release) TB_RUN(&s->be, release, table);
}

#endif
