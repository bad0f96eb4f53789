/* Procedural motion dataset: classes that only the order of the frames tells apart.
 *
 *   tb_synth_params sp = tb_synth_default_params();            // 64x64, 16 frames, 1-3 distractors
 *   uint8_t *rgb = malloc(tb_synth_clip_bytes(&sp));           // (T, S, S, 3) RGB24
 *   tb_err e;
 *   uint64_t cs = tb_synth_clip_seed(0, TB_SYNTH_TRAIN, TB_SYNTH_MOVE_LEFT, 7);
 *   if (tb_synth_render(&sp, TB_SYNTH_MOVE_LEFT, cs, rgb, NULL, &e)) { ... e.msg ... }
 *
 *   tb_synth_dataset_params dp = tb_synth_dataset_default_params();
 *   dp.dir = "data/synth";  dp.progress = my_cb;                // 12 classes x 100 clips, 80/20
 *   tb_synth_summary sum;
 *   if (tb_synth_write_dataset(&dp, &sum, &e)) { ... e.msg names the file ... }
 *
 * Classes come in pairs (2k, 2k+1). Clip class 2k+1 is *exactly* clip 2k of the same clip seed
 * played backwards: every random choice (shape, colours, background, path, distractors, noise,
 * flicker) depends on the clip seed and the pair only, and the frames are rendered in the pair's
 * canonical time and written in reverse for the odd class. So the set of frames of a clip never
 * reveals which of the two classes it belongs to; only their order does. See docs/synth.md.
 *
 * Rendering uses only +, -, *, /, sqrt and floor in IEEE single/double precision (sin, cos and
 * exp are polynomials here, not libm's), so the frames are bit-identical on every platform.
 * Nothing here prints or exits; errors fill a tb_err and return a tubelet_status. */
#ifndef TB_SYNTH_H
#define TB_SYNTH_H

#include <stddef.h>
#include <stdint.h>

#include "../common.h"

typedef enum {
    TB_SYNTH_MOVE_RIGHT = 0, TB_SYNTH_MOVE_LEFT,   /* translation along x (+ small drift) */
    TB_SYNTH_MOVE_DOWN, TB_SYNTH_MOVE_UP,          /* translation along y */
    TB_SYNTH_ROTATE_CW, TB_SYNTH_ROTATE_CCW,       /* spin in place, as seen on screen */
    TB_SYNTH_GROW, TB_SYNTH_SHRINK,                /* size x1.7-2.6, same sharpness throughout */
    TB_SYNTH_APPROACH, TB_SYNTH_RECEDE,            /* size + haze + defocus blur together */
    TB_SYNTH_ORBIT_CW, TB_SYNTH_ORBIT_CCW,         /* circular path, as seen on screen */
    TB_SYNTH_N_CLASSES
} tb_synth_class;

/* Class names ("move_right", ...), NULL outside [0, TB_SYNTH_N_CLASSES). */
const char *tb_synth_class_name(int class_id);
/* Class id of a name, -1 if unknown. */
int tb_synth_class_id(const char *name);
/* The class whose clips are this class's clips reversed (class_id ^ 1). */
static inline int tb_synth_opposite(int class_id) { return class_id ^ 1; }

typedef struct {
    int size;             /* frame side S in pixels, even, 16..512 (default 64) */
    int frames;           /* T, 4..256 (default 16) */
    int max_distractors;  /* distractors per clip are uniform in [1, max]; 0..3 (default 3; 0 = none) */
    float noise;          /* scale of per-pixel noise and brightness flicker, 0..4 (default 1; 0 = clean) */
} tb_synth_params;

tb_synth_params tb_synth_default_params(void);
/* TUBELET_ERR_ARG with a message naming the field when a value is out of range. */
int tb_synth_check_params(const tb_synth_params *p, tb_err *e);
/* Bytes of one rendered clip: frames * size * size * 3. */
size_t tb_synth_clip_bytes(const tb_synth_params *p);

/* Ground truth of the main object in one output frame (for tests and debugging). */
typedef struct {
    float x, y;     /* centre in pixels, x to the right, y down, (0, 0) = top-left corner */
    float radius;   /* pixels */
    float angle;    /* radians; increasing = clockwise on screen */
    float haze;     /* 0 = full contrast .. 1 = background colour (approach/recede) */
    float blur;     /* edge width in pixels (1 = sharp, antialiased) */
} tb_synth_truth;

enum { TB_SYNTH_TRAIN = 0, TB_SYNTH_VAL = 1 };

/* The seed of clip `index` of a class in a split (TB_SYNTH_TRAIN / TB_SYNTH_VAL) of the dataset
 * made with `seed`. Clip i of a split does not depend on --per-class or the validation share. */
uint64_t tb_synth_clip_seed(uint64_t seed, int split, int class_id, int index);

/* Renders one clip: rgb receives frames (T, S, S, 3) uint8, rows top to bottom. truth (T entries)
 * may be NULL. Same (params, class, clip_seed) -> same bytes. */
int tb_synth_render(const tb_synth_params *p, int class_id, uint64_t clip_seed, uint8_t *rgb,
                    tb_synth_truth *truth, tb_err *e);

/* ------------------------------------------------------------------ files */

typedef enum {
    TB_SYNTH_H264 = 0,   /* libx264 in .mp4, yuv420p, intra only, QP 30, 1 thread (default) */
    TB_SYNTH_MJPEG = 1,  /* FFmpeg's built-in MJPEG in .avi, yuvj420p, q 8: no libx264 needed */
} tb_synth_codec;

const char *tb_synth_codec_name(tb_synth_codec c);   /* "h264", "mjpeg" */
const char *tb_synth_codec_ext(tb_synth_codec c);    /* "mp4", "avi" */
int tb_synth_codec_from_name(const char *name);      /* -1 if unknown */
/* TUBELET_ERR_UNSUPPORTED naming the missing encoder if this FFmpeg cannot write codec c. */
int tb_synth_codec_check(tb_synth_codec c, tb_err *e);

/* Encodes frames (T, S, S, 3) RGB24 into one video file at path (the container follows the
 * codec, not the file name) at fps frames per second. Every frame is coded on its own (intra
 * only), so a clip and its reverse decode to the same frames in reverse order. Deterministic: the
 * same frames give the same bytes with the same FFmpeg/x264 build. On failure the partial file is
 * removed. */
int tb_synth_encode(const char *path, const uint8_t *rgb, int frames, int size, int fps,
                    tb_synth_codec codec, tb_err *e);

/* done clips of total, called after each clip is written, from the worker threads but never two
 * at a time. */
typedef void (*tb_synth_progress_fn)(void *user, int done, int total);

typedef struct {
    const char *dir;           /* output directory (created, parents too) */
    tb_synth_params clip;
    int per_class;             /* clips per class, 1..100000 (default 100) */
    int val_percent;           /* share of each class's clips in val, 0..100 (default 20) */
    uint64_t seed;             /* default 0 */
    int fps;                   /* 1..120 (default 8) */
    tb_synth_codec codec;      /* default TB_SYNTH_H264 */
    int n_threads;             /* clips encoded in parallel; 0 = OpenMP's default */
    int force;                 /* 1 = write into a non-empty directory that is not synth output */
    tb_synth_progress_fn progress;   /* NULL = none */
    void *progress_user;
} tb_synth_dataset_params;

tb_synth_dataset_params tb_synth_dataset_default_params(void);

typedef struct {
    int n_train, n_val;        /* clips written */
    int64_t video_bytes;       /* sum of the video files' sizes */
} tb_synth_summary;

/* Writes the dataset:
 *   DIR/synth.json                     what made it (also marks DIR as synth output)
 *   DIR/videos/{train,val}/<class>_<n>.<ext>   n = 0000.. within the class and split
 *   DIR/labels.txt                     the class names, one a line, in class-id order
 *   DIR/train.csv, DIR/val.csv         "path,label", paths relative to DIR, label = class name
 * Class c's clips 0 .. per_class-n_val-1 go to train, n_val = round(per_class*val_percent/100)
 * more to val; each split has its own clip seeds (tb_synth_clip_seed).
 * DIR must be missing, empty, or an earlier synth output (has synth.json); otherwise
 * TUBELET_ERR_ARG unless force. Old CSVs are removed first and the new ones written last (temp
 * file, fsync, rename) after the videos are on disk, so no CSV ever lists a missing or partial
 * file; each video is written under a temporary name and renamed. Video files of ours from an
 * earlier run (<class>_<digits>.mp4/.avi/.tmp under videos/train and videos/val) are removed. */
int tb_synth_write_dataset(const tb_synth_dataset_params *p, tb_synth_summary *sum, tb_err *e);

#endif
