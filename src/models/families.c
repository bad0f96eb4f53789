/* The registry of model families: each family file exports one tb_family_ops (family.h). A new
 * family adds its table here. */
#include <string.h>

#include "family.h"

extern const tb_family_ops tb_videomae_family, tb_timesformer_family, tb_vivit_family,
    tb_video_swin_family, tb_xclip_family, tb_vjepa2_family;

static const tb_family_ops *const families[] = {
    &tb_videomae_family,
    &tb_timesformer_family,
    &tb_vivit_family,
    &tb_video_swin_family,
    &tb_xclip_family,
    &tb_vjepa2_family,
};

const tb_family_ops *tb_family_ops_of(tb_family f) {
    for (size_t i = 0; i < sizeof families / sizeof *families; i++)
        if (families[i]->id == f) return families[i];
    return NULL;
}

const tb_preproc_defaults *tb_family_preprocess(const char *processor_class) {
    for (size_t i = 0; i < sizeof families / sizeof *families; i++) {
        const tb_preproc_defaults *d = families[i]->preprocess;
        if (d && !strncmp(processor_class, d->processor, strlen(d->processor))) return d;
    }
    return NULL;
}

const tb_family_ops *tb_family_at(int i) {
    return i >= 0 && i < (int)(sizeof families / sizeof *families) ? families[i] : NULL;
}
