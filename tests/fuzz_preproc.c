/* libFuzzer harness for preprocessor_config.json: tb_preproc_config_load (the input as a file)
 * and tb_preproc_config_parse (the input as a string) must agree; an accepted config must
 * survive tb_preproc_config_to_json unchanged; it is then planned and run on small frames.
 *
 * Invariants (abort() = a finding): a failure names the file; load and parse give the same
 * result; the JSON the library writes re-parses to the same config; tb_preproc_new on a small
 * frame either fails with a message or gives an output of the planned size that
 * tb_preproc_run fills at every crop position.
 *
 * Sizes: the config may ask for frames of up to 65536 pixels a side; configs whose resize or
 * crop exceeds MAX_SIDE are parsed but not planned.
 *
 * Build and run: tests/fuzz.sh (see its table). */
#include "fuzz.h"

#include "video/video.h"

#define MAX_SIDE 96

static char g_dir[1024];
static char g_file[1100]; /* g_dir/preprocessor_config.json */

static void cleanup(void) {
    unlink(g_file);
    rmdir(g_dir);
}

static void setup(void) {
    fuzz_mkdtemp(g_dir, sizeof g_dir, "fuzz_preproc");
    fuzz_join(g_file, sizeof g_file, g_dir, "preprocessor_config.json");
    atexit(cleanup);
}

static void same(const tb_preproc_config *a, const tb_preproc_config *b) {
    if (strcmp(a->processor_class, b->processor_class) || a->do_resize != b->do_resize ||
        a->shortest_edge != b->shortest_edge || a->size_h != b->size_h ||
        a->size_w != b->size_w || a->resample != b->resample ||
        a->do_center_crop != b->do_center_crop || a->crop_h != b->crop_h ||
        a->crop_w != b->crop_w || a->do_rescale != b->do_rescale ||
        a->rescale_factor != b->rescale_factor || a->offset != b->offset ||
        a->do_normalize != b->do_normalize)
        abort();
    for (int i = 0; i < 3; i++)
        if (a->mean[i] != b->mean[i] || a->std[i] != b->std[i]) abort();
}

static void run_on(const tb_preproc_config *c, int h, int w) {
    tb_preproc *p = NULL;
    tb_err e = {{0}};
    if (tb_preproc_new(&p, c, h, w, &e)) {
        if (p || !e.msg[0] || !memchr(e.msg, 0, sizeof e.msg)) abort();
        return;
    }
    int oh = 0, ow = 0;
    tb_preproc_out_size(p, &oh, &ow);
    if (oh < 1 || ow < 1 || tb_preproc_out_numel(p, 2) != (size_t)2 * 3 * oh * ow) abort();
    uint8_t *img = malloc((size_t)2 * h * w * 3);
    float *out = malloc(tb_preproc_out_numel(p, 2) * sizeof(float));
    if (!img || !out) abort();
    for (size_t i = 0; i < (size_t)2 * h * w * 3; i++) img[i] = (uint8_t)(i * 37 + (i >> 5));
    for (int pos = 0; pos < 3; pos++) {
        if (tb_preproc_run(p, img, 2, (tb_crop_pos)pos, out, &e)) abort();
        fuzz_touch(out, tb_preproc_out_numel(p, 2) * sizeof(float));
    }
    free(img);
    free(out);
    tb_preproc_free(p);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!g_dir[0]) setup();
    tb_log log = {fuzz_log, NULL};
    fuzz_put(g_file, data, size);

    tb_preproc_config c, s;
    tb_err e = {{0}}, es = {{0}};
    int rc = tb_preproc_config_load(&c, g_file, &log, &e);
    char *text = fuzz_strdup(data, size);
    int rs = tb_preproc_config_parse(&s, text, "string.json", &log, &es);
    free(text);
    if (rc) fuzz_check_err(rc, &e, g_file);
    if (rs) fuzz_check_err(rs, &es, "string.json");
    /* a file with a NUL byte reads as its text up to the NUL, as the string does */
    if (rc != rs) abort();
    if (rc) return 0;
    same(&c, &s);

    char *json = tb_preproc_config_to_json(&c);
    if (!json) abort();
    tb_preproc_config r;
    if (tb_preproc_config_parse(&r, json, "roundtrip.json", &log, &e)) abort();
    same(&c, &r);
    free(json);

    int big = c.shortest_edge > MAX_SIDE || c.size_h > MAX_SIDE || c.size_w > MAX_SIDE ||
              (c.do_center_crop && (c.crop_h > MAX_SIDE || c.crop_w > MAX_SIDE));
    if (!big) {
        run_on(&c, 7, 11);  /* landscape, odd sizes */
        run_on(&c, 13, 5);  /* portrait */
        run_on(&c, 1, 1);
    }
    return 0;
}
