/* Which frames a clip is made of: the sampling rules of the reference loaders.
 * Every mode works for any n_frames >= 1; a video too short for the clip repeats frames the way
 * the reference does (VideoMAE appends its last strided frame; the others repeat by their
 * formula), and the result says how many positions did. */
#include <math.h>
#include <string.h>

#include "video.h"

static const char *const mode_names[] = {"clip", "uniform", "hf", "hf-rate"};

int tb_sample_mode_from_name(const char *name) {
    for (int i = 0; i < (int)(sizeof mode_names / sizeof mode_names[0]); i++)
        if (name && strcmp(name, mode_names[i]) == 0) return i;
    return -1;
}

const char *tb_sample_mode_name(tb_sample_mode m) {
    if ((int)m < 0 || (int)m >= (int)(sizeof mode_names / sizeof mode_names[0])) return "?";
    return mode_names[m];
}

/* VideoMAE (kinetics.py, test mode): all_index = range(0, F, s), appended with its last element
 * up to T; view k of K starts at int(k * max(L - T, 0) / (K - 1)). K = 1 is undefined there
 * (division by zero); we take the centred window, int(max(L - T, 0) / 2). */
static void sample_clip(int64_t F, int T, int s, int K, int k, int64_t *idx) {
    int64_t L = (F + s - 1) / s;   /* strided frames available */
    int64_t Lp = L < T ? T : L;    /* after padding */
    double step;
    int64_t start;
    if (K <= 1) {
        step = (double)(Lp - T) / 2.0;
        start = (int64_t)step;
    } else {
        step = (double)(Lp - T) / (double)(K - 1);
        if (step < 0) step = 0;
        start = (int64_t)((double)k * step);
    }
    for (int i = 0; i < T; i++) {
        int64_t j = start + i;     /* position in the padded strided list */
        if (j > L - 1) j = L - 1;  /* padding repeats the last strided frame */
        idx[i] = j * s;
    }
}

int tb_sample_indices(const tb_sample_params *p, int64_t F, int64_t *idx, tb_sample_result *r,
                      tb_err *e) {
    if (!p || !idx) return tb_fail(e, TUBELET_ERR_ARG, "tb_sample_indices: NULL argument");
    int T = p->num_frames;
    if (T < 1 || T > 65536)
        return tb_fail(e, TUBELET_ERR_ARG, "sampling: num_frames must be in [1, 65536], got %d", T);
    if (F < 1) return tb_fail(e, TUBELET_ERR_ARG, "sampling: the video has no frames");
    int s = p->stride;
    switch (p->mode) {
    case TB_SAMPLE_CLIP:
        if (s < 1) return tb_fail(e, TUBELET_ERR_ARG, "sampling clip: stride must be >= 1, got %d", s);
        if (p->n_clips < 1 || p->clip < 0 || p->clip >= p->n_clips)
            return tb_fail(e, TUBELET_ERR_ARG, "sampling clip: clip %d of %d views is out of range",
                           p->clip, p->n_clips);
        sample_clip(F, T, s, p->n_clips, p->clip, idx);
        break;
    case TB_SAMPLE_UNIFORM:
        /* floor((i + 0.5) * F / T), in exact integer arithmetic: floor((2i + 1) F / 2T) */
        for (int i = 0; i < T; i++) idx[i] = (int64_t)(((2 * (__int128)i + 1) * F) / (2 * (__int128)T));
        break;
    case TB_SAMPLE_HF:
        /* np.arange(T) * F // T (transformers.video_utils.default_sample_indices_fn) */
        for (int i = 0; i < T; i++) idx[i] = (int64_t)(((__int128)i * F) / T);
        break;
    case TB_SAMPLE_HF_RATE: {
        /* np.linspace(0, T*r - 1, num=T, dtype=np.int64): y = i * ((T*r-1)/(T-1)), last = stop,
         * floored; frames past the end are what read_video_pyav silently drops: we repeat the
         * last frame instead and report it. */
        if (s < 1) return tb_fail(e, TUBELET_ERR_ARG, "sampling hf-rate: rate must be >= 1, got %d", s);
        double stop = (double)T * s - 1;
        double step = T > 1 ? stop / (double)(T - 1) : 0;
        for (int i = 0; i < T; i++) {
            double y = T > 1 ? (i == T - 1 ? stop : (double)i * step) : 0;
            int64_t j = (int64_t)floor(y);
            idx[i] = j > F - 1 ? F - 1 : j;
        }
        break;
    }
    default:
        return tb_fail(e, TUBELET_ERR_ARG, "sampling: unknown mode %d", (int)p->mode);
    }
    /* every mode yields a non-decreasing sequence: count distinct values */
    int distinct = 0;
    for (int i = 0; i < T; i++)
        if (i == 0 || idx[i] != idx[i - 1]) distinct++;
    if (r) {
        r->n_distinct = distinct;
        r->n_padded = T - distinct;
    }
    return TUBELET_OK;
}
