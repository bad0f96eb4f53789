/* libFuzzer harness for the files of a training run (src/train/run_config.h): each input is
 * parsed as a train config (`tubelet train --config`, tb_train_config_parse) and as a
 * checkpoint's trainer_state.json (tb_trainer_state_parse), and what is accepted is written
 * back, re-parsed and checked against the run it describes (tb_trainer_state_check), as
 * `tubelet train --resume` does.
 *
 * Invariants (abort() = a finding): a failure names the file; every accepted number is within
 * the range the trainer relies on (no later cast or index can overflow); the JSON the library
 * writes re-parses to the same values; a state is accepted by the run it records exactly when
 * its step count is the one that run reaches after its epoch, and refused, naming the file, by a
 * run with another batch size.
 *
 * Build and run: tests/fuzz.sh (see its table). */
#include "fuzz.h"

#include <float.h>
#include <math.h>

#include "train/run_config.h"

#define NAME "trainer_state.json"

/* Known bug (issue 19, found by this harness): run_config.c writes doubles with cJSON, which
 * prints 15 digits whenever those read back within DBL_EPSILON (relative), so the last bit may
 * change: `train --lr 0.00020999999999999998` (Python's repr of 3e-4 * 0.7) then `--resume` is
 * refused as "trained with --lr 0.00021000000000000001" (seed trainer_state_lr_last_bit.json).
 * Until the writer prints every digit it needs, values are compared within one rounding and
 * the resume check of a written state runs only where its numbers came back exactly; set
 * EXACT_JSON to 1 with the fix. */
#define EXACT_JSON 1

static int near(double a, double b) {
    if (EXACT_JSON) return a == b;
    return fabs(a - b) <= 2 * DBL_EPSILON * fmax(fabs(a), fabs(b));
}

static int in(double x, double lo, double hi) { return x >= lo && x <= hi; }

static void check_config(const tb_train_config *c) {
    if (!in(c->weight_decay, 0, 100) || !in(c->warmup_epochs, 0, 1e5) || !in(c->min_lr, 0, 10) ||
        !in(c->layer_decay, 1e-6, 1) || !in(c->clip_grad, 0, 1e9) ||
        !in(c->min_scale, 1e-3, 1) || c->accum < 1 || c->accum > 4096 ||
        (c->hflip != 0 && c->hflip != 1) || (c->checkpointing != 0 && c->checkpointing != 1) ||
        !(c->label_smoothing >= 0 && c->label_smoothing < 1) ||
        !(c->drop_path >= 0 && c->drop_path < 1))
        abort();
    /* dropout: -1 (the model's value) or a probability */
    if (!(c->hidden_dropout == -1 || in(c->hidden_dropout, 0, 1)) ||
        !(c->attn_dropout == -1 || in(c->attn_dropout, 0, 1)))
        abort();
}

static void same_config(const tb_train_config *a, const tb_train_config *b) {
    if (!near(a->weight_decay, b->weight_decay) || !near(a->warmup_epochs, b->warmup_epochs) ||
        !near(a->min_lr, b->min_lr) || !near(a->layer_decay, b->layer_decay) ||
        !near(a->clip_grad, b->clip_grad) || !near(a->min_scale, b->min_scale) ||
        a->accum != b->accum || a->hflip != b->hflip || a->checkpointing != b->checkpointing ||
        !near(a->label_smoothing, b->label_smoothing) || !near(a->drop_path, b->drop_path) ||
        !near(a->hidden_dropout, b->hidden_dropout) || !near(a->attn_dropout, b->attn_dropout))
        abort();
}

static void fuzz_train_config(const char *text) {
    tb_train_config c;
    tb_train_config_default(&c);
    tb_err e = {{0}};
    int rc = tb_train_config_parse(&c, text, "config.json", &e);
    if (rc) {
        fuzz_check_err(rc, &e, "config.json");
        return;
    }
    check_config(&c);
    /* -1 (unset) is never written: the trainer puts the model's dropout there first */
    if (c.hidden_dropout < 0) c.hidden_dropout = 0.1;
    if (c.attn_dropout < 0) c.attn_dropout = 0;
    char *json = tb_train_config_to_json(&c);
    if (!json) abort();
    tb_train_config d;
    tb_train_config_default(&d);
    if (tb_train_config_parse(&d, json, "written.json", &e)) abort();
    same_config(&c, &d);
    free(json);
}

static void check_against_run(const tb_trainer_state *s) {
    const tb_run_settings *r = &s->run;
    int64_t spe = tb_steps_per_epoch(r->n_train, r->batch, r->cfg.accum);
    if (spe < 1) abort();
    int consistent = s->epoch <= r->epochs && s->step == (int64_t)s->epoch * spe;
    tb_err e = {{0}};
    int rc = tb_trainer_state_check(s, r, s->step, NAME, &e);
    if (consistent != (rc == 0)) abort();
    if (rc) fuzz_check_err(rc, &e, NAME);
    /* the optimiser file must hold the same step */
    rc = tb_trainer_state_check(s, r, s->step + 1, NAME, &e);
    fuzz_check_err(rc, &e, NAME);
    /* another batch size is another run */
    tb_run_settings other = *r;
    other.batch = r->batch < 4096 ? r->batch + 1 : r->batch - 1;
    rc = tb_trainer_state_check(s, &other, s->step, NAME, &e);
    fuzz_check_err(rc, &e, NAME);
}

/* Every double of two run settings identical (the other fields are compared above). */
static int exactly(const tb_run_settings *a, const tb_run_settings *b) {
    const tb_train_config *x = &a->cfg, *y = &b->cfg;
    return a->lr == b->lr && x->weight_decay == y->weight_decay &&
           x->warmup_epochs == y->warmup_epochs && x->min_lr == y->min_lr &&
           x->layer_decay == y->layer_decay && x->clip_grad == y->clip_grad &&
           x->min_scale == y->min_scale && x->label_smoothing == y->label_smoothing &&
           x->drop_path == y->drop_path && x->hidden_dropout == y->hidden_dropout &&
           x->attn_dropout == y->attn_dropout;
}

static void fuzz_trainer_state(const char *text) {
    tb_trainer_state s;
    tb_err e = {{0}};
    int rc = tb_trainer_state_parse(&s, text, NAME, &e);
    if (rc) {
        fuzz_check_err(rc, &e, NAME);
        return;
    }
    if (!in(s.epoch, 0, 1e5) || s.step < 0) abort();
    if (!s.has_settings) return;
    const tb_run_settings *r = &s.run;
    if (!in(r->epochs, 1, 1e5) || !in(r->batch, 1, 4096) || r->seed < 0 || r->n_train < 1 ||
        !(r->lr > 0 && r->lr <= 10))
        abort();
    check_config(&r->cfg);
    check_against_run(&s);
    /* a state without the dropout keys reads as -1 (the model's value), which the trainer
     * never writes: it records the values it used */
    if (r->cfg.hidden_dropout < 0 || r->cfg.attn_dropout < 0) return;

    char *json = tb_trainer_state_to_json(&s);
    if (!json) abort();
    tb_trainer_state t;
    if (tb_trainer_state_parse(&t, json, "written.json", &e)) abort();
    if (t.epoch != s.epoch || t.step != s.step || !t.has_settings || t.run.epochs != r->epochs ||
        t.run.batch != r->batch || t.run.seed != r->seed || t.run.n_train != r->n_train ||
        !near(t.run.lr, r->lr))
        abort();
    same_config(&t.run.cfg, &r->cfg);
    /* the written state resumes the run it came from */
    if (EXACT_JSON || exactly(&t.run, r)) {
        tb_err e2 = {{0}};
        int a = tb_trainer_state_check(&s, r, s.step, NAME, &e);
        int b = tb_trainer_state_check(&t, r, t.step, NAME, &e2);
        if ((a == 0) != (b == 0)) abort();
    }
    free(json);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = fuzz_strdup(data, size);
    fuzz_train_config(text);
    fuzz_trainer_state(text);
    free(text);
    return 0;
}
