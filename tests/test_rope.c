/* V-JEPA 2's 3D rotary embedding (kernels/rope.h): the kernel against its reference on awkward
 * head sizes, its backward against the forward's transpose, the columns it must leave alone, and
 * both against transformers' own rotation (tests/fixtures/rope, tools/make_vjepa2_fixtures.py). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "kernels/rope.h"
#include "parity.h"

static uint64_t rng = 777;
static float frand(void) { /* uniform in [-1, 1) */
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((rng >> 40) / 8388608.0 - 1.0);
}

static double max_rel(const float *a, const float *b, long n) {
    double d = check_max_abs_diff(a, b, n), s = check_max_abs(b, n);
    return d / (s > 1 ? s : 1);
}

/* rows of heads x hd in rows of ld floats (ld > heads hd: the padding must stay untouched) */
static void check_shape(int heads, int hd, int64_t rows, int n_pos) {
    const int64_t D = (int64_t)heads * hd, ld = D + 3, n = rows * ld;
    float *x = malloc(sizeof(float) * n), *y = malloc(sizeof(float) * n);
    float *a = malloc(sizeof(float) * n), *b = malloc(sizeof(float) * n);
    int32_t *pos = malloc(sizeof(int32_t) * 3 * rows);
    float *cs = malloc(sizeof(float) * (tb_rope_table_floats(hd, n_pos) + 1));
    for (int64_t i = 0; i < n; i++) x[i] = frand(), y[i] = frand();
    for (int64_t i = 0; i < 3 * rows; i++) pos[i] = (int32_t)((frand() + 1) * 0.5 * n_pos);
    pos[0] = n_pos - 1; /* the table's last row */
    tb_rope_table(cs, hd, n_pos);
    for (int backward = 0; backward < 2; backward++) {
        memcpy(a, x, sizeof(float) * n), memcpy(b, x, sizeof(float) * n);
        tb_rope(a, ld, rows, pos, heads, hd, cs, backward);
        tb_rope_ref(b, ld, rows, pos, heads, hd, backward);
        const double err = max_rel(a, b, n);
        CHECK(err < 2e-6, "rope %s heads %d hd %d: %.3g from the reference",
              backward ? "backward" : "forward", heads, hd, err);
        int same = 1; /* the unrotated tail of each head and the row padding */
        const int w = tb_rope_slice_width(hd);
        for (int64_t r = 0; r < rows; r++)
            for (int64_t c = 0; c < ld; c++)
                if ((c >= D || c % hd >= 3 * w) && a[r * ld + c] != x[r * ld + c]) same = 0;
        CHECK(same, "rope hd %d: columns past the three slices changed", hd);
    }
    /* the backward is the forward's transpose: <R x, y> = <x, R^T y> */
    memcpy(a, x, sizeof(float) * n), memcpy(b, y, sizeof(float) * n);
    tb_rope(a, ld, rows, pos, heads, hd, cs, 0);
    tb_rope(b, ld, rows, pos, heads, hd, cs, 1);
    double l = 0, r = 0, mag = 0;
    for (int64_t i = 0; i < n; i++)
        l += (double)a[i] * y[i], r += (double)x[i] * b[i], mag += fabs((double)x[i] * y[i]);
    CHECK(fabs(l - r) < 1e-5 * mag, "rope hd %d: <Rx, y> %.9g, <x, R^T y> %.9g", hd, l, r);
    free(x), free(y), free(a), free(b), free(pos), free(cs);
}

/* transformers' VJEPA2RoPEAttention rotation of x.npy (rows, heads, hd) at pos.npy (rows, 3) */
static void check_fixture(const char *name) {
    npy_array x = {0}, pos = {0}, want = {0}, wantb = {0};
    if (!parity_fixture_npy(name, "x.npy", &x) || !parity_fixture_npy(name, "pos.npy", &pos) ||
        !parity_fixture_npy(name, "out.npy", &want) ||
        !parity_fixture_npy(name, "grad.npy", &wantb))
        goto done;
    const int64_t rows = x.shape[0];
    const int heads = (int)x.shape[1], hd = (int)x.shape[2];
    int n_pos = 1;
    for (size_t i = 0; i < pos.numel; i++)
        if (((int32_t *)pos.data)[i] + 1 > n_pos) n_pos = ((int32_t *)pos.data)[i] + 1;
    float *cs = malloc(sizeof(float) * (tb_rope_table_floats(hd, n_pos) + 1));
    float *a = malloc(sizeof(float) * x.numel);
    tb_rope_table(cs, hd, n_pos);
    for (int backward = 0; backward < 2; backward++) {
        /* backward: the gradient of sum(out * x) w.r.t. the input, autograd's, from dy = x */
        memcpy(a, x.data, sizeof(float) * x.numel);
        tb_rope(a, (int64_t)heads * hd, rows, pos.data, heads, hd, cs, backward);
        const npy_array *w = backward ? &wantb : &want;
        const double err = max_rel(a, w->data, (long)x.numel);
        CHECK(err < 1e-5, "%s: rope %s %.3g from transformers", name,
              backward ? "backward" : "forward", err);
    }
    free(cs), free(a);
done:
    npy_free(&x), npy_free(&pos), npy_free(&want), npy_free(&wantb);
}

int main(int argc, char **argv) {
    check_cases(argc, argv);
    const int dims[] = {3, 6, 8, 10, 20, 26, 32, 64, 88}; /* slices 0 .. 28, remainders 0 .. 4 */
    for (size_t i = 0; i < sizeof dims / sizeof *dims; i++)
        if (check_select("check_shape(3, %d, 37, 17)", dims[i])) check_shape(3, dims[i], 37, 17);
    CASE(check_shape(1, 64, 1, 1)); /* position 0 only: the identity */
    CASE(check_fixture("rope/hd20"));
    CASE(check_fixture("rope/hd26"));
    CASE(check_fixture("rope/hd64"));
    return check_done();
}
