/* CLIP's byte-level BPE tokenizer: the steps are listed in clip_tokenizer.h, the design and the
 * parity tests in docs/zero-shot.md. Unicode comes from Debian's libraries: PCRE2 (the classes
 * \s, \p{L}, \p{N} of the pre-tokenising pattern) and utf8proc (NFC, lowercase, UTF-8 checks). */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "text/clip_tokenizer.h"

#include "rng.h"

#include <cjson/cJSON.h>
#include <limits.h>
#include <stddef.h>
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <utf8proc.h>

#define CACHE_MAX_WORD 256   /* bytes: longer pieces are not cached */
#define CACHE_MAX_ENTRIES 8192
#define MAX_ADDED 64

typedef struct { char *key; uint32_t len; int32_t id; } vslot;      /* vocabulary: token -> id */
typedef struct { uint64_t pair; int32_t rank, id; } mslot;          /* merges: (a, b) -> rank, a+b */
typedef struct { char *key; uint32_t len, n; int32_t *ids; } cslot; /* cache: piece -> ids */
/* An added token: matched verbatim in the raw text, or (normalized) in the normalised text as
 * its own normalised form, as tokenizers' AddedVocabulary does. */
typedef struct { char *text; size_t len; int32_t id; int normalized; } added;

struct tubelet_tokenizer {
    vslot *vocab; size_t vcap;
    mslot *merges; size_t mcap;
    cslot *cache; size_t ccap, ncache;
    added add[MAX_ADDED]; int nadd;
    int32_t bos, eos, pad, unk;
    int context, pad_left;
    int32_t max_id;        /* vocab.json's largest id, */
    char *vocab_path;      /* and its path, for tubelet_tokenizer_check */
    uint64_t seed;         /* of the tables' hashes */
    pcre2_code *split, *bytelevel, *spaces;
    char byte_chr[256][3]; uint8_t byte_len[256];
};

/* The tables' hashes are seeded (tb_hash_seed at load): vocab.json, merges.txt and the texts are
 * input, and must not be able to make every key collide. */
static uint64_t hash_bytes(const tubelet_tokenizer *t, const char *s, size_t n) {
    return tb_hash_bytes(t->seed, s, n);
}
static uint64_t hash_pair(const tubelet_tokenizer *t, uint64_t p) { return tb_mix64(p ^ t->seed); }

static size_t table_cap(size_t n) { /* a power of two, at most half full */
    size_t c = 16;
    while (c < 2 * n) c *= 2;
    return c;
}

static vslot *vocab_slot(const tubelet_tokenizer *t, const char *s, size_t n) {
    size_t m = t->vcap - 1;
    for (size_t i = hash_bytes(t, s, n) & m;; i = (i + 1) & m) {
        vslot *v = &t->vocab[i];
        if (!v->key || (v->len == n && memcmp(v->key, s, n) == 0)) return v;
    }
}
static int32_t vocab_id(const tubelet_tokenizer *t, const char *s, size_t n) {
    const vslot *v = vocab_slot(t, s, n);
    return v->key ? v->id : -1;
}
static mslot *merge_slot(const tubelet_tokenizer *t, uint64_t pair) {
    size_t m = t->mcap - 1;
    for (size_t i = hash_pair(t, pair) & m;; i = (i + 1) & m)
        if (t->merges[i].rank < 0 || t->merges[i].pair == pair) return &t->merges[i];
}
static uint64_t pair_of(int32_t a, int32_t b) { return (uint64_t)(uint32_t)a << 32 | (uint32_t)b; }

/* 0 if s[0..n) is valid UTF-8 (no surrogates), else the byte offset + 1 of the first bad one. */
static size_t utf8_bad(const char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        utf8proc_int32_t c;
        utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)s + i, (utf8proc_ssize_t)(n - i), &c);
        if (k <= 0) return i + 1;
        i += (size_t)k;
    }
    return 0;
}

/* ---- loading ---- */

static int read_json(const char *dir, const char *name, int optional, cJSON **out, tb_err *e) {
    char path[4096];
    *out = NULL;
    if (snprintf(path, sizeof path, "%s/%s", dir, name) >= (int)sizeof path)
        return tb_fail(e, TUBELET_ERR_ARG, "%s: path too long", dir);
    if (optional && tb_check_regular(path, NULL) != TUBELET_OK) return TUBELET_OK;
    char *buf;
    size_t n;
    int rc = tb_read_file(path, &buf, &n, TB_CLIP_MAX_FILE, e);
    if (rc) return rc;
    size_t bad = utf8_bad(buf, n);
    if (bad) {
        free(buf);
        return tb_fail(e, TUBELET_ERR_FORMAT, "%s: not valid UTF-8 (byte %zu)", path, bad - 1);
    }
    /* cJSON ends a string at an escaped NUL, so a token or label with one would be cut short
     * silently: refuse it (an escape is \\u0000 after an even run of backslashes) */
    for (const char *q = buf; (q = strstr(q, "u0000")) != NULL; q++) {
        size_t k = 0;
        while (q - k > buf && q[-1 - (ptrdiff_t)k] == '\\') k++;
        if (k % 2) {
            const size_t at = (size_t)(q - buf);
            free(buf);
            return tb_fail(e, TUBELET_ERR_FORMAT, "%s: a string holds \\u0000 (NUL, byte %zu), "
                           "which no token may hold", path, at - 1);
        }
    }
    *out = cJSON_ParseWithLength(buf, n);
    free(buf);
    if (!*out) return tb_fail(e, TUBELET_ERR_FORMAT, "%s: not valid JSON", path);
    return TUBELET_OK;
}

static int cmp_id(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

static int load_vocab(tubelet_tokenizer *t, const char *dir, tb_err *e) {
    cJSON *j;
    int rc = read_json(dir, "vocab.json", 0, &j, e);
    if (rc) return rc;
    if (!cJSON_IsObject(j) || !j->child) {
        cJSON_Delete(j);
        return tb_fail(e, TUBELET_ERR_FORMAT, "%s/vocab.json: not a non-empty object of token: id", dir);
    }
    size_t n = 0;
    for (cJSON *it = j->child; it; it = it->next) n++;
    t->vcap = table_cap(n);
    t->vocab = calloc(t->vcap, sizeof *t->vocab);
    int32_t *ids = malloc(n * sizeof *ids);
    if (!t->vocab || !ids) {
        cJSON_Delete(j);
        free(ids);
        return tb_fail(e, TUBELET_ERR_MEMORY, "%s/vocab.json: out of memory (%zu tokens)", dir, n);
    }
    size_t k = 0;
    for (cJSON *it = j->child; it; it = it->next, k++) {
        size_t len = strlen(it->string);
        double d = cJSON_IsNumber(it) ? it->valuedouble : -1;
        if (len == 0 || len > TB_CLIP_MAX_TOKEN)
            rc = tb_fail(e, TUBELET_ERR_FORMAT, "%s/vocab.json: token %zu is empty or longer than %d bytes", dir, k, TB_CLIP_MAX_TOKEN);
        else if (!(d >= 0 && d < INT32_MAX && d == (double)(int32_t)d))
            rc = tb_fail(e, TUBELET_ERR_FORMAT, "%s/vocab.json: token \"%.64s\": the id is not an integer in [0, 2^31-1)", dir, it->string);
        if (rc) break;
        vslot *v = vocab_slot(t, it->string, len);
        if (v->key) {
            rc = tb_fail(e, TUBELET_ERR_FORMAT, "%s/vocab.json: token \"%.64s\" appears twice", dir, it->string);
            break;
        }
        if (!(v->key = malloc(len + 1))) {
            rc = tb_fail(e, TUBELET_ERR_MEMORY, "%s/vocab.json: out of memory", dir);
            break;
        }
        memcpy(v->key, it->string, len + 1);
        v->len = (uint32_t)len;
        v->id = ids[k] = (int32_t)d;
        if (v->id > t->max_id) t->max_id = v->id;
    }
    cJSON_Delete(j);
    if (!rc) { /* two tokens with one id: the ids would not decode */
        qsort(ids, n, sizeof *ids, cmp_id);
        for (size_t i = 1; i < n && !rc; i++)
            if (ids[i] == ids[i - 1])
                rc = tb_fail(e, TUBELET_ERR_FORMAT, "%s/vocab.json: id %d is given to two tokens", dir, ids[i]);
    }
    free(ids);
    return rc;
}

/* merges.txt as transformers 5.23 reads it (tokenizers' BPE::from_file): lines (without their
 * "\n" or "\r\n"); those starting with "#version" skipped; each other line exactly two parts
 * split at one ' ' (a line starting with '#' is a merge like any other), ranked in file order.
 * Both parts and their concatenation must be in the vocabulary. tokenizers keeps the last of a
 * repeated merge; we refuse it. */
static int load_merges(tubelet_tokenizer *t, const char *dir, tb_err *e) {
    char path[4096];
    if (snprintf(path, sizeof path, "%s/merges.txt", dir) >= (int)sizeof path)
        return tb_fail(e, TUBELET_ERR_ARG, "%s: path too long", dir);
    char *buf;
    size_t n;
    int rc = tb_read_file(path, &buf, &n, TB_CLIP_MAX_FILE, e);
    if (rc) return rc;
    size_t bad = utf8_bad(buf, n), lines = 1;
    if (bad) {
        free(buf);
        return tb_fail(e, TUBELET_ERR_FORMAT, "%s: not valid UTF-8 (byte %zu)", path, bad - 1);
    }
    for (size_t i = 0; i < n; i++) lines += buf[i] == '\n';
    t->mcap = table_cap(lines);
    if (!(t->merges = malloc(t->mcap * sizeof *t->merges))) {
        free(buf);
        return tb_fail(e, TUBELET_ERR_MEMORY, "%s: out of memory", path);
    }
    for (size_t i = 0; i < t->mcap; i++) t->merges[i].rank = -1;
    int32_t rank = 0;
    char *line = buf, *end = buf + n, joined[2 * TB_CLIP_MAX_TOKEN + 1];
    for (size_t ln = 1; line < end && !rc; ln++) {
        char *nl = memchr(line, '\n', (size_t)(end - line)), *q = nl ? nl : end;
        char *a = line;
        line = q + 1;
        if (q > a && q[-1] == '\r' && nl) q--;
        if ((size_t)(q - a) >= 8 && memcmp(a, "#version", 8) == 0) continue;
        char *ae = memchr(a, ' ', (size_t)(q - a)), *b = ae ? ae + 1 : q, *be = q;
        if (!ae || memchr(b, ' ', (size_t)(q - b))) {
            rc = tb_fail(e, TUBELET_ERR_FORMAT, "%s: line %zu is not two tokens \"a b\"", path, ln);
            break;
        }
        size_t na = (size_t)(ae - a), nb = (size_t)(be - b);
        int32_t ia = vocab_id(t, a, na), ib = vocab_id(t, b, nb), ij = -1;
        if (na + nb <= sizeof joined - 1) {
            memcpy(joined, a, na);
            memcpy(joined + na, b, nb);
            ij = vocab_id(t, joined, na + nb);
        }
        if (ia < 0 || ib < 0 || ij < 0) {
            rc = tb_fail(e, TUBELET_ERR_FORMAT, "%s: line %zu: \"%.*s\" is not in vocab.json", path, ln,
                         ia < 0 ? (int)(na > 64 ? 64 : na) : ib < 0 ? (int)(nb > 64 ? 64 : nb) : (int)((na + nb) > 64 ? 64 : na + nb),
                         ia < 0 ? a : ib < 0 ? b : joined);
            break;
        }
        mslot *m = merge_slot(t, pair_of(ia, ib));
        if (m->rank >= 0) {
            rc = tb_fail(e, TUBELET_ERR_FORMAT, "%s: line %zu repeats merge %d", path, ln, m->rank + 1);
            break;
        }
        *m = (mslot){pair_of(ia, ib), rank++, ij};
    }
    free(buf);
    return rc;
}

/* A special token's text: a string, or an object with "content" (as tokenizer_config.json and
 * special_tokens_map.json write AddedToken). */
static const char *token_text(const cJSON *j, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    if (cJSON_IsObject(v)) v = cJSON_GetObjectItemCaseSensitive(v, "content");
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static int add_special(tubelet_tokenizer *t, const char *file, const char *role, const char *text,
                       int32_t *id, tb_err *e) {
    size_t len = strlen(text);
    *id = len ? vocab_id(t, text, len) : -1;
    if (*id < 0)
        return tb_fail(e, TUBELET_ERR_FORMAT, "%s: the %s \"%.64s\" is not in vocab.json", file, role, text);
    for (int i = 0; i < t->nadd; i++)
        if (t->add[i].len == len && memcmp(t->add[i].text, text, len) == 0) return TUBELET_OK;
    if (t->nadd == MAX_ADDED) return tb_fail(e, TUBELET_ERR_FORMAT, "%s: more than %d special tokens", file, MAX_ADDED);
    if (!(t->add[t->nadd].text = strdup(text))) return tb_fail(e, TUBELET_ERR_MEMORY, "%s: out of memory", file);
    t->add[t->nadd].len = len;
    t->add[t->nadd++].id = *id;
    return TUBELET_OK;
}

/* tokenizer_config.json's added_tokens_decoder: {"id": {"content", "normalized", "lstrip",
 * "rstrip", "single_word", "special"}}; each token must be the vocabulary's at that id. */
static int load_added(tubelet_tokenizer *t, const char *file, const cJSON *dec, tb_err *e) {
    if (!dec) return TUBELET_OK;
    if (!cJSON_IsObject(dec)) return tb_fail(e, TUBELET_ERR_FORMAT, "%s: added_tokens_decoder is not an object", file);
    for (const cJSON *it = dec->child; it; it = it->next) {
        const char *text = token_text(dec, it->string);
        char *endp;
        long id = strtol(it->string, &endp, 10);
        if (!text || !*it->string || *endp || vocab_id(t, text, strlen(text)) != id)
            return tb_fail(e, TUBELET_ERR_FORMAT, "%s: added_tokens_decoder \"%.16s\": not a token of vocab.json at that id", file, it->string);
        static const char *unsupported[3] = {"lstrip", "rstrip", "single_word"};
        for (int k = 0; k < 3; k++)
            if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(it, unsupported[k])))
                return tb_fail(e, TUBELET_ERR_UNSUPPORTED, "%s: added token \"%.64s\" has %s (not supported)", file, text, unsupported[k]);
        int32_t got;
        int rc = add_special(t, file, "added token", text, &got, e);
        if (rc) return rc;
        for (int i = 0; i < t->nadd; i++)
            if (!strcmp(t->add[i].text, text))
                t->add[i].normalized = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(it, "normalized"));
    }
    return TUBELET_OK;
}

static int load_config(tubelet_tokenizer *t, const char *dir, tb_err *e) {
    static const char *roles[4] = {"bos_token", "eos_token", "pad_token", "unk_token"};
    const char *tok[4] = {"<|startoftext|>", "<|endoftext|>", "<|endoftext|>", "<|endoftext|>"};
    const char *from[4] = {"defaults", "defaults", "defaults", "defaults"};
    cJSON *cfg, *map;
    int rc = read_json(dir, "tokenizer_config.json", 1, &cfg, e);
    if (!rc) rc = read_json(dir, "special_tokens_map.json", 1, &map, e);
    if (rc) {
        cJSON_Delete(cfg);
        return rc;
    }
    const cJSON *v;
    /* a token given but of no text (a number, {"content": 5}) is an error, not the default */
    const cJSON *files[2] = {cfg, map};
    const char *names[2] = {"tokenizer_config.json", "special_tokens_map.json"};
    for (int f = 0; f < 2; f++)
        for (int i = 0; i < 4 && !rc; i++) {
            const cJSON *c = cJSON_GetObjectItemCaseSensitive(files[f], roles[i]);
            if (c && !cJSON_IsNull(c) && !token_text(files[f], roles[i]))
                rc = tb_fail(e, TUBELET_ERR_FORMAT, "%s/%s: %s is neither a string nor "
                             "{\"content\": a string}", dir, names[f], roles[i]);
        }
    for (int i = 0; i < 4 && !rc; i++) { /* special_tokens_map.json wins, as in transformers */
        if (token_text(cfg, roles[i])) tok[i] = token_text(cfg, roles[i]), from[i] = "tokenizer_config.json";
        if (token_text(map, roles[i])) tok[i] = token_text(map, roles[i]), from[i] = "special_tokens_map.json";
    }
    t->context = 77;
    if ((v = cJSON_GetObjectItemCaseSensitive(cfg, "model_max_length")) && cJSON_IsNumber(v) &&
        v->valuedouble < 1e6) { /* transformers writes 1e30 for "no limit" */
        if (!(v->valuedouble >= 2 && v->valuedouble == (int)v->valuedouble))
            rc = tb_fail(e, TUBELET_ERR_FORMAT, "%s/tokenizer_config.json: model_max_length %g is not an integer >= 2", dir, v->valuedouble);
        t->context = (int)v->valuedouble;
    }
    if (!rc && (v = cJSON_GetObjectItemCaseSensitive(cfg, "padding_side")) && cJSON_IsString(v)) {
        if (strcmp(v->valuestring, "left") && strcmp(v->valuestring, "right"))
            rc = tb_fail(e, TUBELET_ERR_FORMAT, "%s/tokenizer_config.json: padding_side \"%.32s\" is not left or right", dir, v->valuestring);
        t->pad_left = strcmp(v->valuestring, "left") == 0;
    }
    if (!rc && (v = cJSON_GetObjectItemCaseSensitive(cfg, "truncation_side")) && cJSON_IsString(v) &&
        strcmp(v->valuestring, "right"))
        rc = tb_fail(e, TUBELET_ERR_UNSUPPORTED, "%s/tokenizer_config.json: truncation_side \"%.32s\" (only right is supported)", dir, v->valuestring);
    int32_t *ids[4] = {&t->bos, &t->eos, &t->pad, &t->unk};
    for (int i = 0; i < 4 && !rc; i++) {
        char file[4200];
        snprintf(file, sizeof file, "%s/%s", dir, from[i]);
        rc = add_special(t, file, roles[i], tok[i], ids[i], e);
    }
    if (!rc) {
        char file[4200];
        snprintf(file, sizeof file, "%s/tokenizer_config.json", dir);
        rc = load_added(t, file, cJSON_GetObjectItemCaseSensitive(cfg, "added_tokens_decoder"), e);
    }
    cJSON_Delete(cfg);
    cJSON_Delete(map);
    return rc;
}

static void byte_map(tubelet_tokenizer *t) { /* GPT-2's bytes_to_unicode */
    int extra = 0;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
        utf8proc_int32_t c = printable ? b : 256 + extra++;
        t->byte_len[b] = (uint8_t)utf8proc_encode_char(c, (utf8proc_uint8_t *)t->byte_chr[b]);
    }
}

static pcre2_code *compile(const char *pattern) {
    int err;
    PCRE2_SIZE off;
    return pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED, TB_CLIP_PCRE2, &err, &off, NULL);
}

int tubelet_tokenizer_load(tubelet_tokenizer **out, const char *path, char *err, size_t errlen) {
    tb_err e = {{0}};
    *out = NULL;
    /* a checkpoint file (X-CLIP's .pth): its tokenizer files are beside it, as its config.json */
    struct stat st;
    char beside[4096];
    const char *dir = path;
    if (stat(path, &st) == 0 && S_ISREG(st.st_mode)) {
        const char *slash = strrchr(path, '/');
        snprintf(beside, sizeof beside, "%.*s", slash ? (int)(slash - path) + (slash == path) : 1,
                 slash ? path : ".");
        dir = beside;
        char vocab[4200];
        snprintf(vocab, sizeof vocab, "%s/vocab.json", dir);
        if (access(vocab, F_OK) != 0) {
            if (err && errlen)
                snprintf(err, errlen, "%s: a checkpoint file holds no tokenizer: put its vocab.json "
                         "and merges.txt (CLIP's, e.g. microsoft/xclip-base-patch32's) beside it, "
                         "in %s", path, dir);
            return TUBELET_ERR_IO;
        }
    }
    tubelet_tokenizer *t = calloc(1, sizeof *t);
    if (t) t->seed = tb_hash_seed(t);
    if (t && asprintf(&t->vocab_path, "%s/vocab.json", dir) < 0) t->vocab_path = NULL;
    int rc = t && t->vocab_path ? load_vocab(t, dir, &e)
                                : tb_fail(&e, TUBELET_ERR_MEMORY, "%s: out of memory", dir);
    if (!rc) rc = load_merges(t, dir, &e);
    if (!rc) rc = load_config(t, dir, &e);
    if (!rc) {
        t->split = compile(TB_CLIP_SPLIT);
        t->bytelevel = compile(TB_CLIP_BYTELEVEL);
        t->spaces = compile(TB_CLIP_SPACE "+");
        if (!t->split || !t->bytelevel || !t->spaces) rc = tb_fail(&e, TUBELET_ERR_UNSUPPORTED, "PCRE2 lacks Unicode support");
    }
    for (int i = 0; !rc && i < t->nadd; i++) { /* a normalized token is matched as its normal form */
        if (!t->add[i].normalized) continue;
        char *norm;
        size_t n;
        rc = tb_clip_normalize(t, t->add[i].text, t->add[i].len, &norm, &n, &e);
        if (!rc && !n) {
            free(norm);
            rc = tb_fail(&e, TUBELET_ERR_FORMAT, "%s/tokenizer_config.json: added token \"%.64s\" normalises to nothing", dir, t->add[i].text);
        }
        if (rc) break;
        free(t->add[i].text);
        t->add[i].text = norm, t->add[i].len = n;
    }
    if (rc) {
        tubelet_tokenizer_free(t);
        if (err && errlen) snprintf(err, errlen, "%s", e.msg);
        return rc;
    }
    byte_map(t);
    *out = t;
    return TUBELET_OK;
}

int tubelet_tokenizer_context(const tubelet_tokenizer *t) { return t->context; }

static void cache_clear(tubelet_tokenizer *t) {
    for (size_t i = 0; i < t->ccap; i++) {
        free(t->cache[i].key);
        free(t->cache[i].ids);
        t->cache[i] = (cslot){0};
    }
    t->ncache = 0;
}

void tubelet_tokenizer_free(tubelet_tokenizer *t) {
    if (!t) return;
    for (size_t i = 0; i < t->vcap; i++) free(t->vocab[i].key);
    free(t->vocab);
    free(t->merges);
    if (t->cache) cache_clear(t);
    free(t->cache);
    for (int i = 0; i < t->nadd; i++) free(t->add[i].text);
    pcre2_code_free(t->split);
    pcre2_code_free(t->bytelevel);
    pcre2_code_free(t->spaces);
    free(t->vocab_path);
    free(t);
}

int tubelet_tokenizer_check(const tubelet_tokenizer *t, const tubelet_model *m, char *err,
                            size_t errlen) {
    const int vocab = tubelet_text_vocab_size(m);
    int rc = TUBELET_OK;
    if (!vocab) rc = TUBELET_ERR_UNSUPPORTED;
    else if (t->max_id >= vocab) rc = TUBELET_ERR_FORMAT;
    if (rc == TUBELET_ERR_UNSUPPORTED && err && errlen)
        snprintf(err, errlen, "%s: the model has no text tower", t->vocab_path);
    if (rc == TUBELET_ERR_FORMAT && err && errlen)
        snprintf(err, errlen, "%s: id %d is past the model's %d token embeddings (config.json "
                 "text_config.vocab_size): the tokenizer of another model?", t->vocab_path,
                 (int)t->max_id, vocab);
    return rc;
}

/* ---- steps 2 and 3 ---- */

int tb_clip_lower(uint32_t c, uint32_t out[3]) {
    if (c == 0x130) { /* the one unconditional two-code-point lowercase (SpecialCasing.txt) */
        out[0] = 0x69, out[1] = 0x307;
        return 2;
    }
    out[0] = (uint32_t)utf8proc_tolower((utf8proc_int32_t)c);
    return 1;
}

int tb_clip_normalize(const tubelet_tokenizer *t, const char *text, size_t len, char **out,
                      size_t *out_len, tb_err *e) {
    *out = NULL;
    utf8proc_uint8_t *nfc = NULL;
    utf8proc_ssize_t n = len ? utf8proc_map((const utf8proc_uint8_t *)text, (utf8proc_ssize_t)len, &nfc,
                                            UTF8PROC_STABLE | UTF8PROC_COMPOSE) : 0;
    if (n < 0) return tb_fail(e, TUBELET_ERR_VALUE, "text: %s", utf8proc_errmsg(n));
    /* runs of whitespace to one space: never longer than the input */
    PCRE2_SIZE sn = (PCRE2_SIZE)n + 1;
    char *sp = malloc(sn), *low = NULL;
    pcre2_match_data *md = pcre2_match_data_create(1, NULL);
    int rc = TUBELET_OK;
    if (!sp || !md || (n && pcre2_substitute(t->spaces, nfc, (PCRE2_SIZE)n, 0, PCRE2_SUBSTITUTE_GLOBAL | PCRE2_NO_UTF_CHECK,
                                             md, NULL, (PCRE2_SPTR) " ", 1, (PCRE2_UCHAR *)sp, &sn) < 0))
        rc = tb_fail(e, TUBELET_ERR_MEMORY, "text: out of memory normalising %zu bytes", len);
    if (!n) sn = 0;
    /* lowercase, one code point at a time: at most 3 bytes out per byte in */
    size_t m = 0;
    if (!rc && !(low = malloc(3 * sn + 1))) rc = tb_fail(e, TUBELET_ERR_MEMORY, "text: out of memory");
    for (size_t i = 0; !rc && i < sn;) {
        utf8proc_int32_t c;
        i += (size_t)utf8proc_iterate((const utf8proc_uint8_t *)sp + i, (utf8proc_ssize_t)(sn - i), &c);
        uint32_t lc[3];
        int k = tb_clip_lower((uint32_t)c, lc);
        for (int j = 0; j < k; j++) m += (size_t)utf8proc_encode_char((utf8proc_int32_t)lc[j], (utf8proc_uint8_t *)low + m);
    }
    free(nfc);
    free(sp);
    pcre2_match_data_free(md);
    if (rc) {
        free(low);
        return rc;
    }
    low[m] = 0;
    *out = low;
    *out_len = m;
    return TUBELET_OK;
}

/* The piece norm[a, b) mapped to GPT-2's characters, to the callback (its result). */
static int emit_piece(const tubelet_tokenizer *t, const char *norm, size_t a, size_t b, char *mapped,
                      tb_clip_piece_fn piece, void *user) {
    size_t m = 0;
    for (size_t i = a; i < b; i++) {
        uint8_t c = (uint8_t)norm[i];
        memcpy(mapped + m, t->byte_chr[c], t->byte_len[c]);
        m += t->byte_len[c];
    }
    return m ? piece(user, mapped, m) : 0;
}

int tb_clip_pretokenize(const tubelet_tokenizer *t, const char *norm, size_t len,
                        tb_clip_piece_fn piece, void *user, tb_err *e) {
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(t->split, NULL);
    pcre2_match_data *md2 = pcre2_match_data_create_from_pattern(t->bytelevel, NULL);
    char *mapped = malloc(2 * len + 1);
    int rc = TUBELET_OK, stop = 0;
    if (!md || !md2 || !mapped) rc = tb_fail(e, TUBELET_ERR_MEMORY, "text: out of memory");
    for (size_t at = 0; !rc && !stop && at < len;) {
        int r = pcre2_match(t->split, (PCRE2_SPTR)norm, len, at, PCRE2_NO_UTF_CHECK, md, NULL);
        if (r == PCRE2_ERROR_NOMATCH) break;
        if (r < 0) {
            rc = tb_fail(e, TUBELET_ERR_VALUE, "text: PCRE2 error %d", r);
            break;
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        size_t s = ov[0], end = ov[1], pos = s;
        at = end > s ? end : s + 1; /* the pattern has no empty match */
        /* the ByteLevel split of the piece, its matches and the gaps between them kept */
        while (!stop && pos < end) {
            r = pcre2_match(t->bytelevel, (PCRE2_SPTR)norm, end, pos, PCRE2_NO_UTF_CHECK, md2, NULL);
            if (r < 0) break;
            PCRE2_SIZE *o2 = pcre2_get_ovector_pointer(md2);
            size_t a = o2[0], b = o2[1] > o2[0] ? o2[1] : o2[0] + 1;
            if (a > pos) stop = emit_piece(t, norm, pos, a, mapped, piece, user);
            if (!stop) stop = emit_piece(t, norm, a, b, mapped, piece, user);
            pos = b;
        }
        if (!stop && pos < end) stop = emit_piece(t, norm, pos, end, mapped, piece, user);
    }
    pcre2_match_data_free(md);
    pcre2_match_data_free(md2);
    free(mapped);
    return rc;
}

/* ---- step 4: BPE of one piece ---- */

typedef struct { int32_t rank, pos, id; } cand;

static int cand_less(const cand *a, const cand *b) { return a->rank < b->rank || (a->rank == b->rank && a->pos < b->pos); }
static void heap_push(cand *h, int *n, cand c) {
    int i = (*n)++;
    while (i > 0 && cand_less(&c, &h[(i - 1) / 2])) h[i] = h[(i - 1) / 2], i = (i - 1) / 2;
    h[i] = c;
}
static cand heap_pop(cand *h, int *n) {
    cand top = h[0], last = h[--*n];
    int i = 0;
    for (;;) {
        int c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && cand_less(&h[c + 1], &h[c])) c++;
        if (!cand_less(&h[c], &last)) break;
        h[i] = h[c], i = c;
    }
    if (*n) h[i] = last;
    return top;
}

/* ids of a mapped piece (n bytes, n_chars characters) into out (n_chars slots); the count. */
static int bpe(const tubelet_tokenizer *t, const char *p, size_t n, int n_chars, int32_t *out,
               int32_t *next, int32_t *prev, cand *heap) {
    char buf[8];
    int k = 0;
    for (size_t i = 0; i < n; k++) {
        size_t cl = 1;
        while (i + cl < n && ((uint8_t)p[i + cl] & 0xC0) == 0x80) cl++;
        int32_t id;
        if (i + cl == n) { /* the last character ends the word */
            memcpy(buf, p + i, cl);
            memcpy(buf + cl, "</w>", 4);
            id = vocab_id(t, buf, cl + 4);
        } else {
            id = vocab_id(t, p + i, cl);
        }
        out[k] = id >= 0 ? id : t->unk;
        prev[k] = k - 1;
        next[k] = k + 1;
        i += cl;
    }
    (void)n_chars;
    next[k - 1] = -1;
    int nh = 0;
    for (int i = 0; i + 1 < k; i++) {
        const mslot *m = merge_slot(t, pair_of(out[i], out[i + 1]));
        if (m->rank >= 0) heap_push(heap, &nh, (cand){m->rank, i, m->id});
    }
    while (nh) {
        cand c = heap_pop(heap, &nh);
        int a = c.pos, b = next[a];
        if (out[a] < 0 || b < 0) continue;
        const mslot *m = merge_slot(t, pair_of(out[a], out[b]));
        if (m->rank < 0 || m->id != c.id) continue; /* a stale candidate */
        out[a] = c.id;
        out[b] = -1;
        next[a] = next[b];
        if (next[b] >= 0) prev[next[b]] = a;
        if (prev[a] >= 0) {
            const mslot *l = merge_slot(t, pair_of(out[prev[a]], out[a]));
            if (l->rank >= 0) heap_push(heap, &nh, (cand){l->rank, prev[a], l->id});
        }
        if (next[a] >= 0) {
            const mslot *r = merge_slot(t, pair_of(out[a], out[next[a]]));
            if (r->rank >= 0) heap_push(heap, &nh, (cand){r->rank, a, r->id});
        }
    }
    int w = 0;
    for (int i = 0; i >= 0; i = next[i]) out[w++] = out[i];
    return w;
}

/* ---- encoding ---- */

typedef struct {
    tubelet_tokenizer *t;
    int32_t *ids;            /* the tokens go here */
    int n, cap;              /* cap: context - 2, the truncation */
    int32_t *work;           /* BPE scratch: 12 int32 per character of a piece (grown) */
    size_t work_chars;
    int rc;
    tb_err *e;
} enc;

static void cache_put(tubelet_tokenizer *t, const char *p, size_t n, const int32_t *ids, int k) {
    if (n > CACHE_MAX_WORD) return;
    if (!t->cache && !(t->cache = calloc(t->ccap = table_cap(CACHE_MAX_ENTRIES), sizeof *t->cache))) return;
    if (t->ncache == CACHE_MAX_ENTRIES) cache_clear(t);
    size_t m = t->ccap - 1, i = hash_bytes(t, p, n) & m;
    while (t->cache[i].key) i = (i + 1) & m;
    cslot c = {malloc(n), (uint32_t)n, (uint32_t)k, malloc((size_t)k * sizeof *ids)};
    if (!c.key || !c.ids) {
        free(c.key);
        free(c.ids);
        return;
    }
    memcpy(c.key, p, n);
    memcpy(c.ids, ids, (size_t)k * sizeof *ids);
    t->cache[i] = c;
    t->ncache++;
}
static const cslot *cache_get(const tubelet_tokenizer *t, const char *p, size_t n) {
    if (!t->cache) return NULL;
    size_t m = t->ccap - 1;
    for (size_t i = hash_bytes(t, p, n) & m; t->cache[i].key; i = (i + 1) & m)
        if (t->cache[i].len == n && memcmp(t->cache[i].key, p, n) == 0) return &t->cache[i];
    return NULL;
}

static void emit(enc *s, const int32_t *ids, int k) {
    for (int i = 0; i < k && s->n < s->cap; i++) s->ids[s->n++] = ids[i];
}

static int on_piece(void *user, const char *p, size_t n) {
    enc *s = user;
    const cslot *c = cache_get(s->t, p, n);
    if (c) {
        emit(s, c->ids, (int)c->n);
        return s->n == s->cap;
    }
    int chars = 0;
    for (size_t i = 0; i < n; i++) chars += ((uint8_t)p[i] & 0xC0) != 0x80;
    if ((size_t)chars > s->work_chars) {
        int32_t *w = realloc(s->work, (size_t)chars * 12 * sizeof *w);
        if (!w) {
            s->rc = tb_fail(s->e, TUBELET_ERR_MEMORY, "text: out of memory (a piece of %d characters)", chars);
            return 1;
        }
        s->work = w, s->work_chars = (size_t)chars;
    }
    int32_t *out = s->work, *next = out + chars, *prev = next + chars;
    cand *heap = (cand *)(prev + chars); /* at most 3 candidates per character */
    int k = bpe(s->t, p, n, chars, out, next, prev, heap);
    cache_put(s->t, p, n, out, k);
    emit(s, out, k);
    return s->n == s->cap;
}

/* The leftmost added token of the given kind in text[at, len), the longest at one start: its
 * offset (len if none), *n its length, *id its id. */
static size_t find_added(const tubelet_tokenizer *t, int normalized, const char *text, size_t len,
                         size_t at, size_t *n, int32_t *id) {
    size_t best = len;
    *n = 0;
    for (int i = 0; i < t->nadd; i++) {
        if (t->add[i].normalized != normalized) continue;
        const char *f = memmem(text + at, len - at, t->add[i].text, t->add[i].len);
        size_t o = f ? (size_t)(f - text) : len;
        if (f && (o < best || (o == best && t->add[i].len > *n))) best = o, *n = t->add[i].len, *id = t->add[i].id;
    }
    return best;
}

/* The text segment [p, p+n) between verbatim added tokens: step 2, the normalised added tokens,
 * steps 3-4 between them. */
static int encode_segment(enc *s, const char *p, size_t n) {
    char *norm;
    size_t m;
    int rc = tb_clip_normalize(s->t, p, n, &norm, &m, s->e);
    for (size_t at = 0; !rc && at < m && s->n < s->cap;) {
        size_t k;
        int32_t id;
        size_t o = find_added(s->t, 1, norm, m, at, &k, &id);
        if (o > at) rc = tb_clip_pretokenize(s->t, norm + at, o - at, on_piece, s, s->e);
        if (!rc) rc = s->rc;
        if (!rc && k) emit(s, &id, 1);
        at = o + k;
    }
    free(norm);
    return rc;
}

int tubelet_tokenizer_encode(tubelet_tokenizer *t, const char *text, size_t len, int context,
                             int32_t *ids, int *n_tokens, char *err, size_t errlen) {
    tb_err e = {{0}};
    int rc = TUBELET_OK;
    size_t bad;
    if (context < 2 || context > (1 << 24))
        rc = tb_fail(&e, TUBELET_ERR_ARG, "context %d is not in [2, 2^24]", context);
    else if (len > TB_CLIP_MAX_TEXT)
        rc = tb_fail(&e, TUBELET_ERR_ARG, "text of %zu bytes (limit %u)", len, TB_CLIP_MAX_TEXT);
    else if ((bad = utf8_bad(text, len)))
        rc = tb_fail(&e, TUBELET_ERR_VALUE, "text is not valid UTF-8 (byte %zu)", bad - 1);
    enc s = {t, ids + 1, 0, context - 2, NULL, 0, 0, &e};
    size_t at = 0;
    while (!rc && at < len && s.n < s.cap) {
        size_t best_len;
        int32_t best_id;
        size_t best = find_added(t, 0, text, len, at, &best_len, &best_id);
        if (best > at) rc = encode_segment(&s, text + at, best - at);
        if (!rc && best_len) emit(&s, &best_id, 1);
        at = best + best_len;
    }
    free(s.work);
    if (rc) {
        if (err && errlen) snprintf(err, errlen, "%s", e.msg);
        return rc;
    }
    int n = s.n + 2;
    ids[0] = t->bos;
    ids[n - 1] = t->eos;
    for (int i = n; i < context; i++) ids[i] = t->pad;
    if (t->pad_left && n < context) {
        memmove(ids + (context - n), ids, (size_t)n * sizeof *ids);
        for (int i = 0; i < context - n; i++) ids[i] = t->pad;
    }
    if (n_tokens) *n_tokens = n;
    return TUBELET_OK;
}
