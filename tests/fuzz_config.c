/* libFuzzer harness for config.json into a model: tb_config_parse, the config.json round trip
 * (tb_config_to_json, parsed again, must give the same config), then the config-only model
 * (tubelet_model_load of a directory holding just config.json, random_init) and, for small
 * models, a forward pass on one clip of the configured size.
 *
 * Invariants (abort() = a finding): a failure names config.json; an accepted config re-parses to
 * itself; the model built from it has as many parameters as its tensors hold, no more than the
 * sizes in the config allow and no fewer than the library's estimate (tb_config_weight_bytes),
 * a max_memory below that estimate refuses it, and its logits have the expected shape.
 *
 * Sizes: the config may ask for any size, so models whose parameters (by the bound below) exceed
 * MAX_PARAMS are only parsed, and only small models with few tokens run the forward pass.
 *
 * Build and run: tests/fuzz.sh (see its table); -rss_limit_mb=2048. */
#include "fuzz.h"

#include <float.h>
#include <math.h>

#include <cjson/cJSON.h>

#include "models/config.h"
#include "tubelet.h"

#define MAX_PARAMS (1 << 20)         /* built: 4 MB of float weights */
#define MAX_FORWARD_PARAMS (1 << 17) /* run: a few ms per forward under ASan */
#define MAX_TOKENS 128
#define MAX_ROUNDTRIP_LABELS 4096 /* keep one input fast */

static char g_dir[1024];
static char g_json[1100]; /* g_dir/config.json */

static void cleanup(void) {
    unlink(g_json);
    rmdir(g_dir);
}

static void setup(void) {
    fuzz_mkdtemp(g_dir, sizeof g_dir, "fuzz_config");
    fuzz_join(g_json, sizeof g_json, g_dir, "config.json");
    atexit(cleanup);
}

/* A number field of config.json object o (0 if absent), or entry i of a list field. The family's
 * own fields are private to its file (tb_config.fam): the bound reads them as the config.json
 * the config writes (tb_config_to_json), under their published names. */
static double field(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) ? v->valuedouble : 0;
}
static double entry(const cJSON *o, const char *key, int i) {
    const cJSON *v = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(o, key), i);
    return cJSON_IsNumber(v) ? v->valuedouble : 0;
}

/* An upper bound on the parameters a model of this config holds: per block at most three
 * attentions (TimeSformer axial) of 4 D^2 + 4 D and two projections of D^2 + D, the MLP, norms
 * and layer scales; the patch embedding; position, time and cls embeddings; the classifier;
 * the family's own parts, from its config.json j. */
static double param_bound_json(const tb_config *c, const cJSON *j) {
    double D = c->hidden, I = c->intermediate;
    double T = tb_grid_t(c, c->num_frames), H = tb_grid_h(c, c->image_h),
           W = tb_grid_w(c, c->image_w);
    double block = 16 * D * D + 2 * D * I + I + 64 * D;
    double embed = (double)c->num_channels * c->tubelet_t * c->patch_h * c->patch_w * D + D;
    double pos = (2 * T * H * W + c->num_frames + T + 32) * D;
    double extra = 0;
    const cJSON *arch = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "architectures"),
                                           0);
    const char *architecture = cJSON_IsString(arch) ? arch->valuestring : "";
    if (c->family == TB_VIDEO_SWIN) { /* each block's relative-position table, the merges */
        const double rel = (2 * entry(j, "window_size", 0) - 1) *
                           (2 * entry(j, "window_size", 1) - 1) *
                           (2 * entry(j, "window_size", 2) - 1);
        const int stages = cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(j, "depths"));
        for (int i = 0; i < stages; i++)
            extra += entry(j, "depths", i) * rel * entry(j, "num_heads", i) + 8 * D * D + 8 * D;
    }
    if (!strcmp(architecture, "VideoMAEForPreTraining")) { /* the decoder: its blocks,
                                                              encoder_to_decoder, norm, head */
        const double Dd = field(j, "decoder_hidden_size"),
                     Id = field(j, "decoder_intermediate_size");
        const double pix = (double)c->num_channels * c->tubelet_t * c->patch_h * c->patch_w;
        extra += field(j, "decoder_num_hidden_layers") *
                     (16 * Dd * Dd + 2 * Dd * Id + Id + 64 * Dd) +
                 D * Dd + 8 * Dd + (Dd + 1) * pix;
    }
    /* V-JEPA 2's attentive pooler: its blocks (MLP 4 D whatever mlp_ratio), the query */
    if (!strcmp(architecture, "VJEPA2ForVideoClassification"))
        extra += (field(j, "num_pooler_layers") + 1.0) * (24 * D * D + 68 * D) + D;
    if (c->family == TB_XCLIP) { /* the towers beside the vision one (its blocks: above) */
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(j, "text_config"),
                    *v = cJSON_GetObjectItemCaseSensitive(j, "vision_config");
        const double P = field(j, "projection_dim"), Dt = field(t, "hidden_size"),
                     It = field(t, "intermediate_size"), Mi = field(v, "mit_intermediate_size");
        extra += (field(t, "vocab_size") + field(t, "max_position_embeddings")) * Dt + /* embed */
                 field(t, "num_hidden_layers") * (16 * Dt * Dt + 2 * Dt * It + It + 64 * Dt) +
                 field(v, "mit_num_hidden_layers") * (16 * P * P + 2 * P * Mi + Mi + 64 * P) +
                 field(j, "prompt_layers") * (16 * P * P + 8 * P * P + 64 * P) +  /* prompts */
                 4 * P * (D + Dt) + c->num_frames * P + 64 * (D + Dt + P) + 8;   /* the rest */
    }
    return tb_n_blocks(c) * block + embed + pos + (c->num_labels + 1) * (D + 1) + 8 * D + extra;
}

static double param_bound(const tb_config *c) {
    char *text = tb_config_to_json(c);
    cJSON *j = text ? cJSON_Parse(text) : NULL;
    if (!j) abort();
    const double bound = param_bound_json(c, j);
    cJSON_Delete(j);
    free(text);
    return bound;
}

/* Known bug (issue 19, found by this harness): tb_config_to_json writes the dropouts and
 * layer_scale_init_value with cJSON, which prints 15 digits whenever those read back within
 * DBL_EPSILON (relative), so the last bit may change (seed double_last_bit.json: 5.0039215686274510
 * comes back as 5.0039215686274501). Until it prints every digit it needs, these are compared
 * within one rounding; set EXACT_JSON to 1 with the fix. */
#define EXACT_JSON 1

static int near(double a, double b) {
    if (EXACT_JSON) return a == b;
    return fabs(a - b) <= 2 * DBL_EPSILON * fmax(fabs(a), fabs(b));
}

static void same_config(const tb_config *a, const tb_config *b) {
    if (a->family != b->family || strcmp(a->model_type, b->model_type) ||
        a->image_h != b->image_h || a->image_w != b->image_w ||
        a->num_channels != b->num_channels || a->num_frames != b->num_frames ||
        a->tubelet_t != b->tubelet_t || a->patch_h != b->patch_h || a->patch_w != b->patch_w ||
        a->hidden != b->hidden || a->layers != b->layers || a->heads != b->heads ||
        a->intermediate != b->intermediate || a->act != b->act || a->ln_eps != b->ln_eps ||
        a->qkv_bias != b->qkv_bias || a->attn != b->attn ||
        a->num_labels != b->num_labels || !near(a->hidden_dropout, b->hidden_dropout) ||
        !near(a->attn_dropout, b->attn_dropout))
        abort();
    if (a->temporal_encoder != b->temporal_encoder ||
        (a->temporal_encoder && a->temporal_layers != b->temporal_layers))
        abort();
    for (int i = 0; i < a->num_labels; i++)
        if (strcmp(a->labels[i], b->labels[i])) abort();
}

static void roundtrip(const tb_config *c, const tb_log *log) {
    char *text = tb_config_to_json(c);
    if (!text) abort();
    tb_config d;
    tb_err e = {{0}};
    if (tb_config_parse(&d, text, "roundtrip.json", log, &e)) abort();
    same_config(c, &d);
    /* the family's own fields (private to its file): the config.json d writes is c's */
    char *again = tb_config_to_json(&d);
    if (!again || strcmp(text, again)) abort();
    free(again);
    tb_config_free(&d);
    free(text);
}

static void build_and_run(const tb_config *c) {
    tubelet_load_params lp = tubelet_load_default_params();
    lp.n_threads = 1;
    lp.log = fuzz_log;
    lp.random_init = 1;
    lp.seed = 1;
    tubelet_model *m = NULL;
    char err[512] = "";
    int rc = tubelet_model_load(&m, g_dir, &lp, err, sizeof err);
    if (rc) {
        /* parsed, so only the model can refuse it (e.g. a grid the attention cannot split) */
        if (m || !memchr(err, 0, sizeof err) || !err[0]) abort();
        return;
    }
    tubelet_model_info info;
    if (tubelet_model_get_info(m, &info)) abort();
    int64_t sum = 0;
    tubelet_shape sh;
    const float *data = NULL;
    for (int i = 0; tubelet_model_tensor(m, i, &sh, &data); i++) {
        int64_t n = tubelet_shape_numel(&sh);
        if (n < 1 || !data) abort();
        fuzz_touch(data, (size_t)n * sizeof(float));
        sum += n;
    }
    if (sum != info.n_params || (double)info.n_params > param_bound(c)) abort();
    /* the library's own estimate, which refuses models too large to allocate, is a lower bound */
    double need = tb_config_weight_bytes(c);
    if (need > 4.0 * (double)info.n_params) abort();
    if (need >= 2) { /* and a limit below it refuses the model before building it */
        tubelet_model *small = NULL;
        lp.max_memory = (int64_t)need - 1;
        rc = tubelet_model_load(&small, g_dir, &lp, err, sizeof err);
        if (rc != TUBELET_ERR_MEMORY || small || !strstr(err, g_dir)) abort();
    }

    double tokens = (double)tb_grid_t(c, c->num_frames) * tb_grid_h(c, c->image_h) *
                    tb_grid_w(c, c->image_w);
    if (param_bound(c) <= MAX_FORWARD_PARAMS && tokens <= MAX_TOKENS && (double)c->num_frames * c->num_channels * c->image_h *
                                        c->image_w <= (1 << 18)) {
        tubelet_state *s = NULL;
        rc = tubelet_state_new(&s, m, 1, c->num_frames, c->image_h, c->image_w, err, sizeof err);
        if (rc) {
            if (s || !err[0]) abort();
        } else {
            tubelet_shape ls;
            tubelet_state_logits_shape(s, &ls);
            /* one row per clip, or per frame for TimeSformer space_only; no classifier
             * (num_labels 0): the pooled features. X-CLIP: no classifier (its labels are
             * texts), each frame's pooled cls row */
            const int xclip = c->family == TB_XCLIP;
            int64_t rows = xclip ? c->num_frames
                           : c->family == TB_TIMESFORMER && c->attn == TB_ATTN_SPACE
                               ? tb_grid_t(c, c->num_frames) : 1;
            int64_t cols = c->num_labels > 0 && !xclip ? c->num_labels : c->hidden;
            if (ls.ndim != 2 || ls.dim[0] != rows || ls.dim[1] != cols) abort();
            size_t np = (size_t)c->num_frames * c->num_channels * c->image_h * c->image_w;
            float *px = malloc(np * sizeof(float));
            float *logits = malloc((size_t)(rows * cols) * sizeof(float));
            if (!px || !logits) abort();
            for (size_t i = 0; i < np; i++) px[i] = (float)((i * 7919) % 255) / 127.5f - 1.0f;
            if (tubelet_forward(s, px, logits, NULL, err, sizeof err)) abort();
            fuzz_touch(logits, (size_t)(rows * cols) * sizeof(float));
            free(px);
            free(logits);
            tubelet_state_free(s);
        }
    }
    tubelet_model_free(m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!g_dir[0]) setup();
    tb_log log = {fuzz_log, NULL};
    char *text = fuzz_strdup(data, size);
    tb_config c;
    tb_err e = {{0}};
    int rc = tb_config_parse(&c, text, g_json, &log, &e);
    free(text);
    if (rc) {
        fuzz_check_err(rc, &e, g_json);
        return 0;
    }
    if (c.num_labels < 0 || (c.num_labels > 0 && !c.labels)) abort();
    if (c.num_labels <= MAX_ROUNDTRIP_LABELS) roundtrip(&c, &log);
    if (param_bound(&c) <= MAX_PARAMS) {
        fuzz_put(g_json, data, size);
        build_and_run(&c);
        unlink(g_json);
    }
    tb_config_free(&c);
    return 0;
}
