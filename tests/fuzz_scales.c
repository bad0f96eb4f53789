/* libFuzzer harness for int8_scales.json (static int8, docs/precision.md): tb_scales_parse
 * against a fixed small model's layers, then, for an accepted file, tb_scales_to_json of what
 * was read, parsed again.
 *
 * Invariants (abort() = a finding): a failure names the file; an accepted file gives a valid
 * scale (finite, in [1e-30, 1e30]) and zero point (an integer in [0, 255]) for every layer; its
 * values written and read back are the same bits.
 *
 * Build and run: tests/fuzz.sh fuzz_scales (see its table). */
#include "fuzz.h"

#include "io/int8_scales.h"

#define PATH "model/int8_scales.json"

static const char *const names[] = {"patch_embed", "blocks.0.attn.qkv", "blocks.0.attn.out",
                                    "blocks.0.fc1", "blocks.0.fc2", "head"};
static const int64_t outs[] = {8, 24, 8, 32, 8, 3}, ins[] = {48, 8, 8, 8, 32, 8};
static const tb_scales_model model = {"vivit model1_spatio_temporal (vivit), hidden 8", 6, names,
                                      outs, ins};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > TB_SCALES_MAX_BYTES) return 0; /* refused by size before it is read */
    tb_log log = {fuzz_log, NULL};
    char *text = fuzz_strdup(data, size);
    tb_act_quant q[6], r[6];
    tb_err e = {{0}};
    int rc = tb_scales_parse(text, PATH, &model, q, &log, &e);
    free(text);
    if (rc) {
        fuzz_check_err(rc, &e, PATH);
        return 0;
    }
    for (int i = 0; i < model.n; i++)
        if (!tb_act_quant_valid(q[i].scale, q[i].zero_point)) abort();
    const tb_scales_meta meta = {100, 1};
    char *again = tb_scales_to_json(&model, q, &meta);
    if (!again) abort();
    if (tb_scales_parse(again, "again.json", &model, r, &log, &e)) abort();
    for (int i = 0; i < model.n; i++)
        if (memcmp(&q[i].scale, &r[i].scale, sizeof(float)) || q[i].zero_point != r[i].zero_point)
            abort();
    free(again);
    return 0;
}
