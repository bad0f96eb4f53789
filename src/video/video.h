/* Video input: decode (FFmpeg), sample frame indices, preprocess into pixel_values.
 *
 *   tb_video *v;  tb_err e;
 *   tb_video_params vp = tb_video_default_params();
 *   if (tb_video_open(&v, "clip.mp4", &vp, &e)) { ... e.msg names the file ... }
 *   const tb_video_info *in = tb_video_get_info(v);          // exact frame count, fps, size after rotation
 *   int64_t idx[16]; tb_sample_result sr;
 *   tb_sample_params sp = {.mode = TB_SAMPLE_CLIP, .num_frames = 16, .stride = 4, .n_clips = 1};
 *   tb_sample_indices(&sp, in->n_frames, idx, &sr, &e);       // sr.n_padded > 0: video too short
 *   uint8_t *rgb = malloc(16 * in->height * in->width * 3);
 *   tb_video_decode(v, idx, 16, rgb, &e);                      // one pass, seeks forward over gaps
 *   tb_preproc_config pc;  tb_preproc_config_load(&pc, "model_dir/preprocessor_config.json", &log, &e);
 *   tb_preproc *pp;  tb_preproc_new(&pp, &pc, in->height, in->width, &e);
 *   float *px = malloc(tb_preproc_out_numel(pp, 16) * sizeof(float));   // (T, C, H, W)
 *   tb_preproc_run(pp, rgb, 16, TB_CROP_CENTER, px, &e);
 *   tb_preproc_free(pp); tb_video_close(v);
 *
 * Frame index i means the i-th frame in presentation (pts) order of the chosen video stream, the
 * numbering torchcodec's exact mode and decord use. Frames come out as RGB24 (H, W, 3), rows top to
 * bottom, after the container's rotation (display matrix) has been applied.
 * Nothing here prints or exits; FFmpeg's own log is silenced (see tb_video_open). */
#ifndef TB_VIDEO_H
#define TB_VIDEO_H

#include <stddef.h>
#include <stdint.h>

#include "../common.h"

/* ------------------------------------------------------------------ decoding */

typedef struct tb_video tb_video;

typedef struct {
    int n_threads;     /* decoder threads; 0 = FFmpeg decides (one per core) */
    int no_index;      /* 1 = skip the packet scan: n_frames is the container's claim (or 0),
                          no seeking; for tb_video_stream_* over long files */
    int64_t max_pixels; /* refuse frames larger than this (width * height); 0 = 2^26 */
    int low_delay;     /* live sources: slice threads only (frame threads hold back a frame
                          per thread) */
    tb_log log;        /* warnings (e.g. container frame count disagrees with the stream) */
    /* A server's bounds on what it decodes (0: none): a stream that declares a larger side is
     * refused at open, and decoding stops at the first frame (or sequence header) larger, at the
     * max_frames+1-th frame decoded, or once interrupt returns non-zero (polled per packet and
     * per frame); each is an error naming the file. max_side also caps the decoder's buffers
     * (its max_pixels), so that memory stays bounded whatever the stream switches to. */
    int max_side;
    int64_t max_frames;
    int (*interrupt)(void *);
    void *interrupt_user;
} tb_video_params;

tb_video_params tb_video_default_params(void);

typedef struct {
    int width, height;             /* of the frames tb_video_decode returns (after rotation) */
    int coded_width, coded_height; /* as stored */
    int rotation;                  /* clockwise degrees applied to the stored picture: 0/90/180/270 */
    int64_t n_frames;              /* exact: the stream's packets counted (0 if no_index and unknown) */
    int64_t n_frames_header;       /* what the container claims; 0 = it does not say */
    double fps;                    /* average: n_frames / duration when known, else the stream's rate */
    double duration;               /* seconds from the first to the end of the last frame */
    char codec[32];                /* e.g. "h264" */
    char pix_fmt[32];              /* e.g. "yuv420p" */
    char container[64];            /* e.g. "mov,mp4,m4a,3gp,3g2,mj2" */
    int has_audio;
} tb_video_info;

/* Opens path, picks the best video stream, scans its packets once (demux only, no decoding) to
 * count frames exactly and to index keyframes for seeking, and opens the decoder.
 * Errors: TUBELET_ERR_IO (missing/unreadable), TUBELET_ERR_FORMAT (not a media file, no video
 * stream, zero frames, truncated before any frame), TUBELET_ERR_UNSUPPORTED (no decoder, absurd
 * dimensions). Every message starts with the path. */
int tb_video_open(tb_video **out, const char *path, const tb_video_params *p, tb_err *e);

/* Where a video comes from: a file (path), or bytes in memory read through FFmpeg's custom I/O
 * (data, size; they must outlive the tb_video), which opens no file and no URL, or a URL that
 * FFmpeg's own protocols open (a network stream, "pipe:0", a device with format "v4l2") through
 * exactly the protocols listed in `protocols` (FFmpeg's protocol whitelist, required with url;
 * "none" for a device). name is for messages only (NULL: "<memory>", or the url). The same bytes
 * decode to the same frames whichever way they come. The strings must outlive the tb_video. */
typedef struct {
    const char *path;
    const void *data;
    size_t size;
    const char *name;
    const char *url;          /* opened by FFmpeg (live sources: tb_video_read) */
    const char *protocols;    /* url: the protocol whitelist, e.g. "rtsp,rtp,udp,tcp" */
    const char *format;       /* url: the input format by name (e.g. "v4l2"), NULL: probed */
    int (*interrupt)(void *); /* url: FFmpeg's blocking calls give up once this returns non-zero
                                 (it is polled about every 100 ms while they wait) */
    void *interrupt_user;
    int64_t *bytes_read;      /* url, optional: the bytes read from the source so far, updated
                                 before each call of interrupt from the open's first read on (a
                                 live source's timeout counts from the last byte, not the last
                                 frame: a low-bitrate stream's frames wait in the demuxer for the
                                 bytes of the next ones, and the open reads seconds of it) */
} tb_video_src;
int tb_video_open_src(tb_video **out, const tb_video_src *src, const tb_video_params *p,
                      tb_err *e);
/* The name messages use: the path, the memory source's name, or "<memory>". */
const char *tb_video_src_name(const tb_video_src *src);
void tb_video_close(tb_video *v);
const tb_video_info *tb_video_get_info(const tb_video *v);

/* Presentation time (seconds from the stream start) of frame i; -1 outside [0, n_frames). */
double tb_video_frame_time(const tb_video *v, int64_t i);
/* The frame on screen at time t (the last frame starting at or before t), clamped to the video. */
int64_t tb_video_frame_at_time(const tb_video *v, double t);

/* Decodes frames idx[0..n) (any order, repeats allowed, each in [0, n_frames)) into
 * rgb[k * height * width * 3]. One forward pass over the sorted unique indices; it seeks to the
 * keyframe before a target whenever that keyframe lies beyond the current position, and decodes
 * (without converting) the frames in between otherwise. Frames the stream cannot produce (a
 * truncated or corrupt tail) are an error naming the file and the index. */
int tb_video_decode(tb_video *v, const int64_t *idx, int n, uint8_t *rgb, tb_err *e);

/* Live reading: the next frame in decode order (frame i is the decoder's i-th output, as in
 * no_index streaming), converted into rgb (height x width x 3), or decoded only when rgb is NULL.
 * Returns 1 with a frame, 0 at the end of the stream (e->msg then says why: the end of the input,
 * or the read error that ended it), 2 when a pause (tb_video_pause) ended the read with every
 * frame the demuxer held handed out (read again: the stream goes on), or -status. */
int tb_video_read(tb_video *v, uint8_t *rgb, tb_err *e);
/* A live MPEG-TS source's frame waits in the demuxer until the next frame's packets begin (a
 * video PES has no length) and in the parser until the next access unit starts, so the last
 * frames before the sender goes quiet come out only at the end of the input. 1 if v is such a
 * source (MPEG-TS), where an interrupt from the source's callback (tb_video_src.interrupt) that
 * follows tb_video_pause(v) hands those frames out and then lets tb_video_read return 2, instead
 * of ending the input. Called from the interrupt callback, on the reading thread; the caller
 * pauses after a silence only, as a pause inside a PES (the sender stopped mid-frame) would cut
 * that frame short. */
int tb_video_can_pause(const tb_video *v);
void tb_video_pause(tb_video *v);
/* Counters since open (for tests and progress): frames out of the decoder, frames converted to
 * RGB, seeks, packets read while decoding. */
typedef struct {
    int64_t frames_decoded, frames_converted, seeks, packets_read;
} tb_video_stats;
void tb_video_get_stats(const tb_video *v, tb_video_stats *s);

/* Streaming: consecutive windows over a long video with memory bounded by one window.
 * Window w holds frames first + j*stride, j < num_frames, with first = w * hop. Frames shared by
 * consecutive windows are kept, the rest decoded in one forward pass (no seeking, no index
 * needed). The last window is padded by repeating its last real frame; *n_real says how many are
 * real. Returns 1 when a window was written, 0 after the last one, or a negative -status.
 * hop must be a multiple of stride or at least a window (num_frames * stride). A later
 * tb_video_decode ends the stream. */
typedef struct {
    int num_frames, stride, hop;
} tb_stream_params;
int tb_video_stream_begin(tb_video *v, const tb_stream_params *sp, tb_err *e);
int tb_video_stream_next(tb_video *v, uint8_t *rgb, int64_t *first, int *n_real, tb_err *e);

/* ------------------------------------------------------------------ sampling */

typedef enum {
    TB_SAMPLE_CLIP = 0,  /* VideoMAE/Kinetics test loader: frames 0, s, 2s, ... of the video, padded
                            with the last one to num_frames; clip k of n_clips starts at
                            int(k * (L - T) / (n_clips - 1)) of those L strided frames; n_clips = 1
                            takes the centred one, int((L - T) / 2) */
    TB_SAMPLE_UNIFORM,   /* TSN segments: frame floor((i + 0.5) * F / T) */
    TB_SAMPLE_HF,        /* transformers 5.x video-classification pipeline (video processor's
                            default_sample_indices_fn): floor(i * F / T) */
    TB_SAMPLE_HF_RATE,   /* the same pipeline's legacy image-processor path with
                            frame_sampling_rate r = stride: linspace(0, T*r - 1, T) truncated */
} tb_sample_mode;

typedef struct {
    tb_sample_mode mode;
    int num_frames;  /* T */
    int stride;      /* CLIP: frame stride (VideoMAE-K400: 4); HF_RATE: frame_sampling_rate */
    int n_clips;     /* CLIP: temporal views (1 = centred clip) */
    int clip;        /* CLIP: which view, 0 .. n_clips-1 */
} tb_sample_params;

typedef struct {
    int n_padded;    /* positions that repeat a frame because the video is too short (0 normally) */
    int n_distinct;  /* distinct frame indices among the T */
} tb_sample_result;

/* Fills idx[0..num_frames) for a video of n_frames (>= 1) frames. */
int tb_sample_indices(const tb_sample_params *p, int64_t n_frames, int64_t *idx,
                      tb_sample_result *r, tb_err *e);
/* "clip", "uniform", "hf", "hf-rate" -> mode; -1 if unknown. */
int tb_sample_mode_from_name(const char *name);
const char *tb_sample_mode_name(tb_sample_mode m);

/* ------------------------------------------------------------------ preprocessing */

typedef enum { TB_RESAMPLE_NEAREST = 0, TB_RESAMPLE_LANCZOS = 1, TB_RESAMPLE_BILINEAR = 2,
               TB_RESAMPLE_BICUBIC = 3 } tb_resample;   /* PIL's numbering, as in the json */

typedef struct {
    char processor_class[64];  /* image_processor_type / video_processor_type / feature_extractor_type */
    int do_resize;
    int shortest_edge;         /* > 0: resize the short side to this, long = int(S * long / short) */
    int size_h, size_w;        /* else: resize to exactly this */
    tb_resample resample;
    int do_center_crop;
    int crop_h, crop_w;
    int do_rescale;
    double rescale_factor;
    int offset;                /* ViViT: x * rescale_factor - 1 */
    int do_normalize;
    float mean[3], std[3];
    int float_resize;          /* 1: each frame rescaled to float first (x / (1 / rescale_factor))
                                  and then resized as torch.nn.functional.interpolate(bilinear,
                                  align_corners=False, antialias=False) does it on floats: the
                                  temporal-localisation feature scripts' way (VideoMAE V2's
                                  extract_tad_feature.py); bilinear only. Not in the JSON. */
} tb_preproc_config;

/* Defaults of transformers' VideoMAE processors (shortest_edge 224, crop 224, bilinear, 1/255,
 * ImageNet-standard mean/std 0.5). */
void tb_preproc_config_default(tb_preproc_config *c);
/* Parses preprocessor_config.json (or video_preprocessor_config.json): sizes as {shortest_edge},
 * {height, width} or an int, crop_size likewise, the do_* flags, rescale_factor, offset,
 * image_mean/image_std (3 numbers or one), resample; the processor class decides defaults
 * (Vivit*: shortest_edge 256, 1/127.5, offset, mean/std 0.5). Unknown keys are warnings. */
int tb_preproc_config_load(tb_preproc_config *c, const char *path, const tb_log *log, tb_err *e);
/* The file of a model directory that transformers 5's AutoVideoProcessor reads, in its order:
 * processor_config.json when it nests a "video_processor", else video_preprocessor_config.json,
 * else preprocessor_config.json; 1 and its path in path (n bytes), or 0 if none. */
int tb_preproc_config_file(const char *dir, char *path, size_t n);
/* Loads that file (the nested object of processor_config.json); TUBELET_ERR_IO if none. */
int tb_preproc_config_load_dir(tb_preproc_config *c, const char *dir, const tb_log *log,
                               tb_err *e);
int tb_preproc_config_parse(tb_preproc_config *c, const char *json, const char *name,
                            const tb_log *log, tb_err *e);

/* preprocessor_config.json text for c (malloc'd), as Hugging Face writes it. */
char *tb_preproc_config_to_json(const tb_preproc_config *c);

typedef enum { TB_CROP_CENTER = 0, TB_CROP_FIRST = 1, TB_CROP_LAST = 2 } tb_crop_pos;
/* FIRST/LAST: left/right for landscape frames, top/bottom for portrait (height >= width), along
 * the long side only, as VideoMAE's 3-crop test; the other axis stays centred. */

typedef struct tb_preproc tb_preproc;
/* The config inside the public tubelet_preprocessor (include/tubelet_video.h). */
typedef struct tubelet_preprocessor tubelet_preprocessor;
const tb_preproc_config *tb_preprocessor_config(const tubelet_preprocessor *p);

/* Plans preprocessing for frames of in_h x in_w: resize filter weights and scratch buffers are
 * made once here, nothing is allocated per frame. */
int tb_preproc_new(tb_preproc **out, const tb_preproc_config *c, int in_h, int in_w, tb_err *e);
void tb_preproc_free(tb_preproc *p);
/* Output size of one frame (after resize and crop). */
void tb_preproc_out_size(const tb_preproc *p, int *out_h, int *out_w);
size_t tb_preproc_out_numel(const tb_preproc *p, int n_frames);
/* rgb: n frames (in_h, in_w, 3) uint8. out: (n, 3, out_h, out_w) float32. */
int tb_preproc_run(tb_preproc *p, const uint8_t *rgb, int n, tb_crop_pos pos, float *out, tb_err *e);

/* The resize step alone (uint8 -> uint8, HWC, 3 channels), exposed for tests: PyTorch's uint8
 * antialiased kernel (what torchvision runs on CPUs with AVX2), separable, horizontal pass first. */
int tb_resize_u8(const uint8_t *in, int in_h, int in_w, uint8_t *out, int out_h, int out_w,
                 tb_resample mode, tb_err *e);

#endif
