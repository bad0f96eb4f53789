/* The training configs inside official checkpoints. See ckpt_cfg.h. Every scan works on
 * (pointer, length) spans of the text, which need not be NUL-terminated; a value is copied into
 * a fixed buffer before it is parsed as a number. */
#include "ckpt_cfg.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MAX_VALUE 256   /* a value's text; a block list's items joined by ", " */
#define MAX_SCAN 4096   /* how far after img_norm_cfg / data_preprocessor "mean=" may be */

typedef struct {
    const char *s;
    size_t n;
} span;

void tb_ckpt_cfg_init(tb_ckpt_cfg *c) { memset(c, 0, sizeof *c); }

static size_t bounded(size_t len) { return len < TB_CKPT_CFG_MAX_TEXT ? len : TB_CKPT_CFG_MAX_TEXT; }

/* The line of t[0, len) at *pos, without its "\n" or "\r\n"; *pos moves past it. */
static int next_line(const char *t, size_t len, size_t *pos, span *l) {
    if (*pos >= len) return 0;
    const char *s = t + *pos, *nl = memchr(s, '\n', len - *pos);
    size_t n = nl ? (size_t)(nl - s) : len - *pos;
    *pos += n + (nl != NULL);
    if (n && s[n - 1] == '\r') n--;
    l->s = s, l->n = n;
    return 1;
}

static size_t indent(span l) {
    size_t i = 0;
    while (i < l.n && l.s[i] == ' ') i++;
    return i;
}

/* Without surrounding blanks and one pair of quotes ('divided_space_time'). */
static span trim(span v) {
    while (v.n && (v.s[0] == ' ' || v.s[0] == '\t')) v.s++, v.n--;
    while (v.n && (v.s[v.n - 1] == ' ' || v.s[v.n - 1] == '\t')) v.n--;
    if (v.n >= 2 && (v.s[0] == '\'' || v.s[0] == '"') && v.s[v.n - 1] == v.s[0]) v.s++, v.n -= 2;
    return v;
}

/* Line l holds "<key>:" at column at, then nothing or a space and the value (*value, trimmed). */
static int is_key(span l, size_t at, const char *key, span *value) {
    const size_t k = strlen(key);
    if (l.n - at < k + 1 || memcmp(l.s + at, key, k) || l.s[at + k] != ':') return 0;
    if (at + k + 1 < l.n && l.s[at + k + 1] != ' ') return 0;
    *value = trim((span){l.s + at + k + 1, l.n - at - k - 1});
    return 1;
}

static int copy(char *out, size_t cap, span v) {
    if (v.n + 1 > cap) return 0;
    memcpy(out, v.s, v.n);
    out[v.n] = 0;
    return 1;
}

/* A block list's "- item" lines from *pos (at indent >= ind), joined into out by ", ". */
static int block_list(const char *t, size_t len, size_t pos, size_t ind, char *out, size_t cap) {
    size_t n = 0;
    span l;
    out[0] = 0;
    while (next_line(t, len, &pos, &l)) {
        const size_t i = indent(l);
        if (i < ind || i + 1 >= l.n || l.s[i] != '-' || l.s[i + 1] != ' ') break;
        span item = trim((span){l.s + i + 2, l.n - i - 2});
        if (n + item.n + 3 > cap) return 0;
        if (n) out[n++] = ',', out[n++] = ' ';
        memcpy(out + n, item.s, item.n);
        n += item.n;
        out[n] = 0;
    }
    return n > 0;
}

/* KEY's value in a flow mapping "{K: v, KEY: [a, b], ...}" (PyYAML before 5.1 writes a section of
 * scalars so), copied into out; 1 if found. Entries split at commas outside brackets and quotes. */
static int flow_get(span m, const char *key, char *out, size_t cap) {
    if (m.n < 2 || m.s[0] != '{' || m.s[m.n - 1] != '}') return 0;
    size_t start = 1, depth = 0;
    char quote = 0;
    for (size_t i = 1; i < m.n; i++) {
        const char ch = m.s[i];
        if (quote) {
            if (ch == quote) quote = 0;
            continue;
        }
        if (ch == '\'' || ch == '"') quote = ch;
        else if (ch == '[' || ch == '{') depth++;
        else if ((ch == ']' || ch == '}') && depth) depth--;
        else if ((ch == ',' && !depth) || i == m.n - 1) {
            span entry = trim((span){m.s + start, i - start}), v;
            if (is_key(entry, 0, key, &v)) return copy(out, cap, v);
            start = i + 1;
        }
    }
    return 0;
}

/* The value of SECTION.KEY (a section at column 0, its keys at the indent of its first key, or
 * a flow mapping on the section's line), copied into out; 1 if found. */
static int yaml_get(const char *t, size_t len, const char *section, const char *key, char *out,
                    size_t cap) {
    size_t pos = 0, key_indent = 0;
    int in = 0;
    span l, v;
    while (next_line(t, len, &pos, &l)) {
        const size_t ind = indent(l);
        if (ind == l.n) continue; /* blank */
        if (ind == 0) {           /* a top-level key: the section begins, or another one */
            in = is_key(l, 0, section, &v);
            if (in && v.n) return flow_get(v, key, out, cap);
            key_indent = 0;
            continue;
        }
        if (!in) continue;
        if (!key_indent) key_indent = ind;
        if (ind != key_indent || !is_key(l, ind, key, &v)) continue;
        return v.n ? copy(out, cap, v) : block_list(t, len, pos, ind, out, cap);
    }
    return 0;
}

static int to_int(const char *s, int lo, int hi, int *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (end == s || *end || errno || v < lo || v > hi) return 0;
    *out = (int)v;
    return 1;
}

static const char *skip_blank(const char *p) {
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
    return p;
}

/* "[a, b, c]" or "a, b, c" (one number: all three), each / scale within [lo, hi]. */
static int to_floats3(const char *s, double scale, double lo, double hi, float out[3]) {
    const char *p = skip_blank(s);
    if (*p == '[') p++;
    double v[3];
    int n = 0;
    for (;;) {
        p = skip_blank(p);
        if (*p == ']' || !*p) break;
        if (n == 3) return 0;
        char *end;
        const double x = strtod(p, &end);
        if (end == p || !isfinite(x)) return 0;
        v[n++] = x;
        p = skip_blank(end);
        if (*p == ',') p++;
        else if (*p != ']' && *p) return 0;
    }
    if (n != 3 && n != 1) return 0;
    float r[3];
    for (int i = 0; i < 3; i++) {
        const double x = v[n == 1 ? 0 : i] / scale;
        if (!(x >= lo && x <= hi)) return 0;
        r[i] = (float)x;
    }
    memcpy(out, r, sizeof r);
    return 1;
}

static int word(const char *s) {
    if (!*s) return 0;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || *s == '_')) return 0;
    return 1;
}

int tb_ckpt_cfg_slowfast(tb_ckpt_cfg *c, const char *text, size_t len) {
    if (!text) return 0;
    len = bounded(len);
    char v[MAX_VALUE];
    int set = 0;
    const struct { const char *section, *key; int *dst; int hi; } want[] = {
        {"DATA", "NUM_FRAMES", &c->frames, 1 << 14},
        {"DATA", "SAMPLING_RATE", &c->sampling_rate, 1 << 12},
        {"DATA", "TRAIN_CROP_SIZE", &c->train_crop, 1 << 14},
        {"DATA", "TEST_CROP_SIZE", &c->test_crop, 1 << 14},
        {"MODEL", "NUM_CLASSES", &c->num_classes, 1 << 24},
    };
    for (size_t i = 0; i < sizeof want / sizeof *want; i++)
        if (yaml_get(text, len, want[i].section, want[i].key, v, sizeof v))
            set += to_int(v, 1, want[i].hi, want[i].dst);
    if (yaml_get(text, len, "DATA", "MEAN", v, sizeof v) && to_floats3(v, 1, 0, 1, c->mean))
        c->have_mean = 1, set++;
    if (yaml_get(text, len, "DATA", "STD", v, sizeof v) && to_floats3(v, 1, 1e-6, 1, c->std))
        c->have_std = 1, set++;
    if (yaml_get(text, len, "TIMESFORMER", "ATTENTION_TYPE", v, sizeof v) && word(v) &&
        copy(c->attention_type, sizeof c->attention_type, (span){v, strlen(v)}))
        set++;
    return set;
}

/* The first "<name>=" in t[0, len) that does not continue an identifier. */
static const char *find_assign(const char *t, size_t len, const char *name) {
    const size_t k = strlen(name);
    for (const char *p = t; (size_t)(p - t) < len;) {
        const char *q = memmem(p, len - (size_t)(p - t), name, k);
        if (!q) return NULL;
        const char before = q > t ? q[-1] : ' ';
        if (!((before >= 'a' && before <= 'z') || (before >= 'A' && before <= 'Z') ||
              (before >= '0' && before <= '9') || before == '_'))
            return q;
        p = q + 1;
    }
    return NULL;
}

/* "<name>=[...]" within t[0, len): the list copied (bounded) and parsed in 0-255 units. */
static int mm_list(const char *t, size_t len, const char *name, double lo, float out[3]) {
    const char *p = find_assign(t, len, name);
    if (!p) return 0;
    span rest = {p + strlen(name), len - (size_t)(p + strlen(name) - t)};
    const char *close = memchr(rest.s, ']', rest.n < MAX_VALUE ? rest.n : MAX_VALUE);
    char v[MAX_VALUE + 1];
    if (!close || !copy(v, sizeof v, (span){rest.s, (size_t)(close - rest.s) + 1})) return 0;
    return to_floats3(v, 255, lo, 1, out);
}

int tb_ckpt_cfg_mmcv(tb_ckpt_cfg *c, const char *text, size_t len) {
    if (!text) return 0;
    len = bounded(len);
    static const char *const owners[] = {"img_norm_cfg", "data_preprocessor"};
    for (int k = 0; k < 2; k++) {
        const char *o = memmem(text, len, owners[k], strlen(owners[k]));
        if (!o) continue;
        size_t n = len - (size_t)(o - text);
        if (n > MAX_SCAN) n = MAX_SCAN;
        float mean[3], std[3];
        if (mm_list(o, n, "mean=", 0, mean) && mm_list(o, n, "std=", 1e-6, std)) {
            memcpy(c->mean, mean, sizeof mean), memcpy(c->std, std, sizeof std);
            c->have_mean = c->have_std = 1;
            return 2;
        }
    }
    return 0;
}
