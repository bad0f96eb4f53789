#include "views.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

int views_preproc_config(const char *model_dir, tb_preproc_config *pc, char *err, size_t errlen) {
    char path[1200];
    tb_err e = {{0}};
    tb_log log = {cli_log, NULL};
    snprintf(path, sizeof path, "%s/preprocessor_config.json", model_dir);
    if (access(path, F_OK) != 0) {
        snprintf(path, sizeof path, "%s/video_preprocessor_config.json", model_dir);
        if (access(path, F_OK) != 0) {
            fprintf(stderr,
                    "warning: %s has no preprocessor_config.json; using the VideoMAE processor "
                    "defaults (shortest edge 224, centre crop 224, mean/std 0.5)\n", model_dir);
            tb_preproc_config_default(pc);
            return 0;
        }
    }
    if (tb_preproc_config_load(pc, path, &log, &e)) {
        snprintf(err, errlen, "%s", e.msg);
        return 1;
    }
    return 0;
}

void views_free(views *v) {
    free(v->pixels);
    free(v->indices);
    memset(v, 0, sizeof *v);
}

int views_load(views *v, const char *path, const tb_preproc_config *pc, const views_opts *o,
               int model_frames, char *err, size_t errlen) {
    memset(v, 0, sizeof *v);
    tb_err e = {{0}};
    tb_video *vid = NULL;
    tb_preproc *pp = NULL;
    uint8_t *rgb = NULL;
    int rc = 1;
    tb_video_params vp = tb_video_default_params();
    vp.n_threads = o->threads;
    vp.log = (tb_log){cli_log, NULL};
    int mode = tb_sample_mode_from_name(o->sampling);
    if (mode < 0) {
        snprintf(err, errlen, "unknown sampling '%s' (clip, uniform, hf or hf-rate)", o->sampling);
        return 1;
    }
    if (tb_video_open(&vid, path, &vp, &e)) goto fail;
    const tb_video_info *in = tb_video_get_info(vid);
    const int T = o->num_frames > 0 ? o->num_frames : model_frames;
    const int clips = o->clips > 0 ? o->clips : 1, crops = o->crops == 3 ? 3 : 1;
    v->n_frames = in->n_frames, v->fps = in->fps, v->width = in->width, v->height = in->height;
    v->T = T, v->C = 3, v->n_views = clips * crops;
    v->indices = malloc(sizeof(int64_t) * (size_t)clips * T);
    if (!v->indices) goto oom;
    for (int c = 0; c < clips; c++) {
        tb_sample_params sp = {(tb_sample_mode)mode, T, o->stride, clips, c};
        if (sp.stride <= 0) sp.stride = mode == TB_SAMPLE_CLIP ? 4 : 1;
        tb_sample_result sr;
        if (tb_sample_indices(&sp, in->n_frames, v->indices + (size_t)c * T, &sr, &e)) {
            tb_prefix(&e, 1, "%s: ", path);
            goto fail;
        }
        if (sr.n_padded > v->n_padded) v->n_padded = sr.n_padded;
    }
    const size_t frame = (size_t)in->height * in->width * 3;
    rgb = malloc(frame * (size_t)clips * T);
    if (!rgb) goto oom;
    if (tb_video_decode(vid, v->indices, clips * T, rgb, &e)) goto fail;
    if (tb_preproc_new(&pp, pc, in->height, in->width, &e)) {
        tb_prefix(&e, 1, "%s: ", path);
        goto fail;
    }
    tb_preproc_out_size(pp, &v->H, &v->W);
    const size_t per_view = tb_preproc_out_numel(pp, T);
    v->pixels = malloc(sizeof(float) * per_view * (size_t)v->n_views);
    if (!v->pixels) goto oom;
    static const tb_crop_pos one[1] = {TB_CROP_CENTER},
                             three[3] = {TB_CROP_FIRST, TB_CROP_CENTER, TB_CROP_LAST};
    for (int c = 0; c < clips; c++)
        for (int k = 0; k < crops; k++)
            if (tb_preproc_run(pp, rgb + frame * (size_t)c * T, T, crops == 3 ? three[k] : one[0],
                               v->pixels + per_view * (size_t)(c * crops + k), &e)) {
                tb_prefix(&e, 1, "%s: ", path);
                goto fail;
            }
    rc = 0;
    goto done;
oom:
    tb_fail(&e, TUBELET_ERR_MEMORY, "%s: out of memory", path);
fail:
    snprintf(err, errlen, "%s", e.msg);
    views_free(v);
done:
    free(rgb);
    tb_preproc_free(pp);
    tb_video_close(vid);
    return rc;
}
