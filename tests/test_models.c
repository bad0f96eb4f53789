/* Parity with Hugging Face transformers: every fixture in tests/fixtures/list.txt is a random-
 * weight model directory written by tools/make_fixtures.py with its input and the logits and
 * last_hidden_state PyTorch computed (in float64). Tolerance: max abs error <= 1e-4 * max(1,
 * max |expected|), per output. Runs with 1 and 2 threads. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "parity.h"
#include "io/npy.h"
#include "tubelet.h"

static int load_npy(const char *dir, const char *name, npy_array *a) {
    char path[1024];
    tb_err e = {{0}};
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (npy_read(path, a, &e)) {
        printf("cannot read %s: %s\n", path, e.msg);
        return 0;
    }
    return 1;
}

static void run_fixture(const char *name) {
    char dir[1024], err[1024];
    snprintf(dir, sizeof dir, "%s/%s", parity_fixtures_dir(), name);
    npy_array x = {0}, lg = {0}, hd = {0};
    if (!load_npy(dir, "input.npy", &x) || !load_npy(dir, "logits.npy", &lg) ||
        !load_npy(dir, "hidden.npy", &hd)) {
        CHECK(0, "%s: fixture files unreadable", name);
        goto done;
    }
    for (int threads = 1; threads <= 2; threads++) {
        tubelet_load_params lp = tubelet_load_default_params();
        lp.n_threads = threads;
        lp.no_mmap = threads == 2; /* exercise both loading paths */
        tubelet_model *m = NULL;
        tubelet_state *s = NULL;
        int rc = tubelet_model_load(&m, dir, &lp, err, sizeof err);
        CHECK(rc == 0, "%s: load failed: %s", name, err);
        if (rc) break;
        rc = tubelet_state_new(&s, m, (int)x.shape[0], (int)x.shape[1], (int)x.shape[3],
                               (int)x.shape[4], err, sizeof err);
        CHECK(rc == 0, "%s: state failed: %s", name, err);
        if (!rc) {
            tubelet_shape ls, hs;
            tubelet_state_logits_shape(s, &ls);
            tubelet_state_hidden_shape(s, &hs);
            CHECK(parity_same_shape(&ls, &lg), "%s: logits shape differs from the reference", name);
            CHECK(parity_same_shape(&hs, &hd), "%s: hidden shape differs from the reference", name);
            if (parity_same_shape(&ls, &lg) && parity_same_shape(&hs, &hd)) {
                float *l = malloc(sizeof(float) * lg.numel), *h = malloc(sizeof(float) * hd.numel);
                rc = tubelet_forward(s, x.data, l, h, err, sizeof err);
                CHECK(rc == 0, "%s: forward failed: %s", name, err);
                if (!rc) {
                    parity_compare(name, "logits", threads, l, &lg);
                    parity_compare(name, "hidden", threads, h, &hd);
                }
                /* hidden_states[1]: the output of block 1, no final LayerNorm (not for ViViT
                 * Model 2, whose first block runs on per-frame sequences) */
                npy_array h1 = {0};
                char h1_path[1100];
                snprintf(h1_path, sizeof h1_path, "%s/hidden_layer1.npy", dir);
                if (threads == 1 && access(h1_path, F_OK) == 0 &&
                    load_npy(dir, "hidden_layer1.npy", &h1)) {
                    rc = tubelet_forward_hidden(s, x.data, 1, h, err, sizeof err);
                    CHECK(rc == 0 && h1.numel == hd.numel, "%s: forward_hidden(1) failed: %s",
                          name, err);
                    if (!rc && h1.numel == hd.numel) parity_compare(name, "layer1", threads, h, &h1);
                    npy_free(&h1);
                }
                free(l), free(h);
            }
        }
        tubelet_state_free(s);
        tubelet_model_free(m);
    }
done:
    npy_free(&x), npy_free(&lg), npy_free(&hd);
}

int main(void) {
    char path[1024], line[256];
    snprintf(path, sizeof path, "%s/list.txt", parity_fixtures_dir());
    FILE *f = fopen(path, "r");
    CHECK(f != NULL, "cannot open %s", path);
    int n = 0;
    while (f && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\r\n")] = 0;
        if (!line[0] || line[0] == '#') continue;
        run_fixture(line);
        n++;
    }
    if (f) fclose(f);
    CHECK(n >= 10, "only %d fixtures listed", n);
    return check_done();
}
