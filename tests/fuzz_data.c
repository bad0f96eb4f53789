/* libFuzzer harness for the training data list: tb_dataset_load on a train CSV and its
 * labels.txt. The input is split at the first SEPARATOR: what comes before is train.csv, what
 * follows is labels.txt (no separator: no labels.txt, so the classes are the CSV's labels). The
 * CSV is loaded three ways: paths beside the CSV, paths confined to a data root (--data-root),
 * and against a fixed class list, as when the classes come from a checkpoint.
 *
 * Invariants (abort() = a finding): a failure names the CSV or labels.txt and leaves an empty
 * dataset; a loaded dataset has at least one row, every row an absolute path (the CSV sits in an
 * absolute directory) and a label that indexes the classes; with a data root, every path lies
 * under the root and has no ".." component; classes taken from the CSV are sorted, distinct,
 * and each used by some row.
 *
 * Build and run: tests/fuzz.sh (see its table). */
#include "fuzz.h"

#include "train/data.h"

#define SEPARATOR "\n#### labels.txt\n"

static char g_dir[1024];
static char g_csv[1100];    /* g_dir/train.csv */
static char g_labels[1100]; /* g_dir/labels.txt */
static char g_root[1100];   /* g_dir/root (need not exist: paths are only resolved) */

static void cleanup(void) {
    unlink(g_csv);
    unlink(g_labels);
    rmdir(g_dir);
}

static void setup(void) {
    fuzz_mkdtemp(g_dir, sizeof g_dir, "fuzz_data");
    fuzz_join(g_csv, sizeof g_csv, g_dir, "train.csv");
    fuzz_join(g_labels, sizeof g_labels, g_dir, "labels.txt");
    fuzz_join(g_root, sizeof g_root, g_dir, "root");
    atexit(cleanup);
}

/* path is root/..., and no component of it is "..". */
static void check_confined(const char *path) {
    size_t rl = strlen(g_root);
    if (strncmp(path, g_root, rl) || path[rl] != '/') abort();
    for (const char *p = path + rl; p; p = strchr(p + 1, '/'))
        if (!strncmp(p, "/..", 3) && (p[3] == '/' || p[3] == 0)) abort();
}

static void check_loaded(const tb_dataset *d, int from_csv) {
    if (d->n < 1 || !d->paths || !d->labels || d->n_classes < 1 || !d->classes) abort();
    char *used = calloc((size_t)d->n_classes, 1);
    if (!used) abort();
    for (int i = 0; i < d->n; i++) {
        const char *p = d->paths[i];
        if (!p || !p[0]) abort();
        /* resolved against the CSV's directory, which is absolute */
        if (g_dir[0] == '/' && p[0] != '/') abort();
        if (d->labels[i] < 0 || d->labels[i] >= d->n_classes) abort();
        used[d->labels[i]] = 1;
    }
    for (int k = 0; k < d->n_classes; k++) {
        if (!d->classes[k] || !d->classes[k][0]) abort();
        fuzz_touch(d->classes[k], strlen(d->classes[k]));
        if (from_csv && (!used[k] || (k > 0 && strcmp(d->classes[k - 1], d->classes[k]) >= 0)))
            abort();
    }
    free(used);
}

static void check_failed(int rc, const tb_err *e, const tb_dataset *d) {
    if (rc == 0) abort();
    if (!memchr(e->msg, 0, sizeof e->msg)) abort();
    if (!strstr(e->msg, g_csv) && !strstr(e->msg, g_labels)) abort();
    if (d->n || d->paths || d->labels || d->classes || d->n_classes) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!g_dir[0]) setup();
    const uint8_t *sep = memmem(data, size, SEPARATOR, strlen(SEPARATOR));
    size_t csv_len = sep ? (size_t)(sep - data) : size;
    fuzz_put(g_csv, data, csv_len);
    if (sep) {
        size_t off = csv_len + strlen(SEPARATOR);
        fuzz_put(g_labels, data + off, size - off);
    } else {
        unlink(g_labels);
    }

    tb_dataset d;
    tb_err e = {{0}};
    int rc = tb_dataset_load(&d, g_csv, NULL, NULL, 0, &e);
    if (rc) check_failed(rc, &e, &d);
    else {
        check_loaded(&d, !sep);
        tb_dataset_free(&d);
    }

    rc = tb_dataset_load(&d, g_csv, g_root, NULL, 0, &e);
    if (rc) check_failed(rc, &e, &d);
    else {
        check_loaded(&d, !sep);
        for (int i = 0; i < d.n; i++) check_confined(d.paths[i]);
        tb_dataset_free(&d);
    }

    char *classes[] = {"a", "b", "c"};
    rc = tb_dataset_load(&d, g_csv, NULL, classes, 3, &e);
    if (rc) check_failed(rc, &e, &d);
    else {
        check_loaded(&d, 0);
        if (d.classes != classes || d.owns_classes) abort();
        tb_dataset_free(&d);
    }
    return 0;
}
