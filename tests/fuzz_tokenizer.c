/* libFuzzer harness for the CLIP tokenizer (src/text/clip_tokenizer.c): its files and its text.
 *
 * The first byte picks the mode:
 *   even: the files. Bytes 1-2 and 3-4 (little-endian) are the lengths of vocab.json and
 *         merges.txt, taken from the rest, then tokenizer_config.json up to a 0 byte, and the
 *         remainder is a text; the four files go to a private directory and are loaded; what
 *         loads encodes the text.
 *   odd:  the text. The rest is encoded with the fixture tokenizer
 *         (tests/fixtures/tokenizer/clip_small) at its context 77 and at 3.
 *
 * Invariants (abort() = a finding): a failed load names the file in its message; an encoding
 * either fails with a message or gives context ids, at most context of them before the padding,
 * the padding one id; the same text encodes to the same ids again (the word cache).
 *
 * Build and run: tests/fuzz.sh (see its table). */
#include "fuzz.h"

#include "text/clip_tokenizer.h"

static tubelet_tokenizer *fixture;
static char dir[256];

static void check_encode(tubelet_tokenizer *t, const uint8_t *text, size_t n, int context) {
    int32_t a[77], b[77];
    int na = -1, nb = -1;
    char err[1024];
    err[0] = 0;
    int rc = tubelet_tokenizer_encode(t, (const char *)text, n, context, a, &na, err, sizeof err);
    if (rc) {
        if (!err[0] || !memchr(err, 0, sizeof err)) abort();
        return;
    }
    if (na < 2 || na > context) abort();
    int right = 1, left = 1; /* the padding is one id, on the right or (padding_side) the left */
    for (int i = na; i < context; i++) right &= a[i] == a[context - 1];
    for (int i = 0; i < context - na; i++) left &= a[i] == a[0];
    if (!right && !left) abort();
    if (tubelet_tokenizer_encode(t, (const char *)text, n, context, b, &nb, err, sizeof err) || nb != na ||
        memcmp(a, b, (size_t)context * sizeof *a))
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!fixture) {
        char err[1024];
        if (tubelet_tokenizer_load(&fixture, "tests/fixtures/tokenizer/clip_small", err, sizeof err)) abort();
        fuzz_mkdtemp(dir, sizeof dir, "tokenizer");
    }
    if (size < 1) return 0;
    if (data[0] & 1) {
        check_encode(fixture, data + 1, size - 1, 77);
        check_encode(fixture, data + 1, size - 1, 3);
        return 0;
    }
    if (size < 5) return 0;
    size_t nv = data[1] | (size_t)data[2] << 8, nm = data[3] | (size_t)data[4] << 8;
    const uint8_t *p = data + 5, *end = data + size;
    if (nv > (size_t)(end - p)) nv = (size_t)(end - p);
    const uint8_t *v = p;
    p += nv;
    if (nm > (size_t)(end - p)) nm = (size_t)(end - p);
    const uint8_t *m = p;
    p += nm;
    const uint8_t *z = memchr(p, 0, (size_t)(end - p));
    const uint8_t *c = p;
    size_t nc = z ? (size_t)(z - p) : (size_t)(end - p);
    p = z ? z + 1 : end;
    char path[512];
    fuzz_join(path, sizeof path, dir, "vocab.json");
    fuzz_put(path, v, nv);
    fuzz_join(path, sizeof path, dir, "merges.txt");
    fuzz_put(path, m, nm);
    fuzz_join(path, sizeof path, dir, "tokenizer_config.json");
    fuzz_put(path, c, nc);
    tubelet_tokenizer *t = NULL;
    char err[1024];
    err[0] = 0;
    int rc = tubelet_tokenizer_load(&t, dir, err, sizeof err);
    if (rc) {
        if (t || !strstr(err, dir)) abort(); /* the message names the file */
        return 0;
    }
    check_encode(t, p, (size_t)(end - p), 77);
    check_encode(t, p, (size_t)(end - p), 4);
    tubelet_tokenizer_free(t);
    return 0;
}
