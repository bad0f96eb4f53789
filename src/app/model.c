/* Loading a model for a command or the server (app.h), its default thread count, an official
 * checkpoint's own frame stride. */
#include <stdio.h>

#include "app.h"

tubelet_model *app_load(const char *dir, const char *arch, tubelet_load_params *lp) {
    char err[1024];
    tubelet_model *m = NULL;
    lp->log = app_log;
    int rc = dir ? tubelet_model_load(&m, dir, lp, err, sizeof err)
                 : tubelet_model_random(&m, arch, 42, lp, err, sizeof err);
    if (rc) fprintf(stderr, "error: %s\n", err);
    return rc ? NULL : m;
}

void app_default_threads(tubelet_model *m, int threads) {
    tubelet_model_info mi;
    tubelet_model_get_info(m, &mi);
    if (!threads && mi.flop_per_clip < APP_SMALL_MODEL_FLOP) tubelet_model_set_threads(m, 1);
}

int app_ckpt_stride(const char *model) {
    const int stride = model ? tubelet_checkpoint_sampling_rate(model) : 0;
    if (stride)
        fprintf(stderr, "note: %s: sampling clips of one frame in %d, as its training config "
                "says (--sampling, --stride to change)\n", model, stride);
    return stride;
}
