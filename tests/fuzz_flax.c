/* libFuzzer harness for the Flax msgpack reader (docs/checkpoints.md): the input as a whole
 * checkpoint file through fx_open_mem (the bounded header walk, msgpack-c, the parameters'
 * tree and every ndarray extension), every accepted float array read in full so that a bad
 * bound shows up under ASan.
 *
 * Build and run: tests/fuzz.sh fuzz_flax (seeds: tests/fuzz/corpus/fuzz_flax/, the Flax
 * fixtures and the malicious catalogue tests/attacks/flax/). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "io/flax_file.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    tb_err e = {{0}};
    fx_file *f = NULL;
    if (fx_open_mem(&f, data, size, "fuzz.msgpack", &e) != TUBELET_OK) {
        if (!e.msg[0]) abort(); /* every failure explains itself */
        return 0;
    }
    for (int i = 0; i < fx_count(f); i++) {
        const tf_tensor *t = fx_at(f, i);
        const int64_t n = tf_numel(t);
        if (!t->contiguous || t->base < data || t->base > data + size) abort();
        if (fx_find(f, t->name) != t) abort(); /* sorted, no duplicates */
        if (n <= 0 || n > (1 << 22)) continue;
        float *buf = malloc(sizeof(float) * (size_t)n);
        if (!buf) abort();
        if (tf_to_f32(t, buf) == TUBELET_OK) {
            volatile float s = 0;
            for (int64_t k = 0; k < n; k++) s += buf[k];
        }
        free(buf);
    }
    fx_close(f);
    return 0;
}
