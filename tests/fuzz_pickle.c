/* libFuzzer harness for the checkpoint readers (docs/checkpoints.md): the training-config readers
 * (io/ckpt_cfg.h: pySlowFast YAML, mmcv text) and the restricted unpickler on the raw input, then
 * the input as a whole torch checkpoint file (zip through libzip, or the legacy format), its "cfg"
 * read again, every accepted float tensor read in full through its strides so that a bad bound
 * shows up under ASan.
 *
 * Build and run: tests/fuzz.sh fuzz_pickle (seeds: tests/fuzz/corpus/fuzz_pickle/, the
 * checkpoint fixtures and the malicious catalogue tests/attacks/checkpoints/). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "io/ckpt_cfg.h"
#include "io/torch_file.h"
#include "io/torch_pickle.h"

/* What the training-config readers may set: within their bounds, or left at 0. */
static void check_cfg(const char *text, size_t len, int slowfast) {
    tb_ckpt_cfg c;
    tb_ckpt_cfg_init(&c);
    int set = slowfast ? tb_ckpt_cfg_slowfast(&c, text, len) : tb_ckpt_cfg_mmcv(&c, text, len);
    if (set < 0 || set > 9 || c.frames < 0 || c.sampling_rate < 0 || c.train_crop < 0 ||
        c.test_crop < 0 || c.num_classes < 0 || !memchr(c.attention_type, 0, sizeof c.attention_type))
        abort();
    for (int i = 0; i < 3; i++)
        if (!(c.mean[i] >= 0 && c.mean[i] <= 1 && c.std[i] >= 0 && c.std[i] <= 1)) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    /* the input as a pySlowFast cfg and as an mmcv config text too */
    check_cfg((const char *)data, size, 1);
    check_cfg((const char *)data, size, 0);
    tb_err e = {{0}};
    tp_pickle *p = NULL;
    size_t used = 0;
    if (tp_parse(&p, data, size, &used, &e) == TUBELET_OK) {
        if (used > size || !p->root) abort();
        tp_free(p);
    } else if (!e.msg[0]) {
        abort(); /* every failure explains itself */
    }
    tf_file *f = NULL;
    memset(&e, 0, sizeof e);
    if (tf_open_mem(&f, data, size, "fuzz.pth", &e) != TUBELET_OK) {
        if (!e.msg[0]) abort();
        return 0;
    }
    const char *cfg = tf_root_string(f, "cfg");
    if (cfg) check_cfg(cfg, strlen(cfg), 1);
    for (int i = 0; i < tf_count(f); i++) {
        const tf_tensor *t = tf_at(f, i);
        const int64_t n = tf_numel(t);
        if (n <= 0 || n > (1 << 22)) continue;
        float *buf = malloc(sizeof(float) * (size_t)n);
        if (!buf) abort();
        if (tf_to_f32(t, buf) == TUBELET_OK) {
            volatile float s = 0;
            for (int64_t k = 0; k < n; k++) s += buf[k];
        }
        free(buf);
    }
    tf_close(f);
    return 0;
}
