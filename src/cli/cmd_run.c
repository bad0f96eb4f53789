/* tubelet run: pixel_values (.npy) → logits (.npy) [+ last_hidden_state]; for a video-text model
 * (X-CLIP), with --text: logits_per_video [+ the text and video embeddings]. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "tubelet_io.h"
#include "tubelet_pretrain.h"
#include "tubelet_text.h"

static int write_npy(const char *path, const tubelet_shape *sh, const float *data) {
    char err[1024];
    if (tubelet_npy_write(path, TUBELET_F32, sh->ndim, sh->dim, data, err, sizeof err)) {
        fprintf(stderr, "error: %s\n", err);
        return 1;
    }
    return 0;
}

int cmd_run(int argc, char **argv) {
    const char *dir = NULL, *input = NULL, *logits_path = NULL, *hidden_path = NULL;
    const char *mask_path = NULL, *text_embeds_path = NULL, *video_embeds_path = NULL;
    const char *prec_s = NULL;
    cli_list texts = {calloc((size_t)argc + 1, sizeof(char *)), 0};
    if (!texts.items) return 1;
    int precision = 0, reference = 0, threads = 0;
    const cli_option opts[] = {
        {"--model", CLI_STR, &dir, 0, 0, "DIR", "model directory"},
        {"--input", CLI_STR, &input, 0, 0, "X.npy", "pixel_values (float32; float64 is converted)"},
        {"--logits", CLI_STR, &logits_path, 0, 0, "L.npy", "where to write the logits"},
        {"--hidden", CLI_STR, &hidden_path, 0, 0, "H.npy", "also write the base model's last_hidden_state"},
        {"--mask", CLI_STR, &mask_path, 0, 0, "M.npy",
         "VideoMAEForPreTraining: bool_masked_pos, bool or uint8 (B, num_patches);\n"
         "writes the masked tokens' reconstructed patches, prints \"loss X\""},
        {"--text", CLI_LIST, &texts, 0, 0, "TEXT",
         "X-CLIP: a text to score the video against (repeat for several);\n"
         "the logits are then logits_per_video, (batch, texts)"},
        {"--text-embeds", CLI_STR, &text_embeds_path, 0, 0, "T.npy",
         "X-CLIP: also write text_embeds, (batch, texts, projection_dim)"},
        {"--video-embeds", CLI_STR, &video_embeds_path, 0, 0, "V.npy",
         "X-CLIP: also write video_embeds, (batch, projection_dim)"},
        CLI_THREADS_OPTION(&threads),
        CLI_DEVICE_OPTION,
        CLI_PRECISION_OPTION(&prec_s),
        {0}};
    const cli_command cmd = {
        "run", "run --model DIR --input X.npy --logits L.npy [--hidden H.npy] [--threads N]\n"
        "                   [--text TEXT]... [--text-embeds T.npy] [--video-embeds V.npy]",
        "Runs the model in DIR (Hugging Face config.json + model.safetensors) on X, float32\n"
        "pixel_values of shape (batch, frames, channels, height, width), and writes the\n"
        "logits *ForVideoClassification returns (float32, normally (batch, num_labels)).\n"
        "An X-CLIP model (XCLIPModel) scores X against the --text texts, tokenized with DIR's\n"
        "vocab.json and merges.txt, and writes logits_per_video (docs/zero-shot.md).\n",
        opts, NULL, NULL, 0, NULL};
    int pr = cli_parse(&cmd, argc, argv);
    if (pr >= 0) return free(texts.items), pr;
    if (!dir || !input || !logits_path) {
        fprintf(stderr, "error: tubelet run needs --model, --input and --logits\n\n");
        cli_print_help(&cmd, stderr);
        return free(texts.items), 2;
    }
    if ((text_embeds_path || video_embeds_path) && !texts.n) {
        fprintf(stderr, "error: --text-embeds and --video-embeds need --text\n");
        return free(texts.items), 2;
    }
    if (!cli_precision(prec_s, &precision, &reference)) return free(texts.items), 2;
    if (mask_path)
        return free(texts.items), cli_pretrain_batch(dir, input, mask_path, logits_path, NULL,
                                                     threads, TUBELET_PRECISION_FP32);

    int rc = 1;
    tubelet_model *m = NULL;
    tubelet_state *s = NULL;
    float *logits = NULL, *hidden = NULL, *pix = NULL, *text = NULL, *tout = NULL, *vout = NULL;
    int P = 0;
    tubelet_array x = {0};
    char err[1024];
    if (!(m = cli_load_precision(dir, NULL, threads, precision, reference, 0))) goto done;
    if (tubelet_model_is_pretraining(m)) { /* its forward pools the encoder: no logits */
        fprintf(stderr, "error: %s is a VideoMAEForPreTraining checkpoint: it has no classifier "
                "head; give the masked positions (--mask MASK.npy) for its reconstruction "
                "logits, take its encoder's features (tubelet features), or fine-tune it "
                "(tubelet train --model %s)\n", dir, dir);
        goto done;
    }
    if (tubelet_text_dims(m, NULL, NULL) == 0 && !texts.n) {
        fprintf(stderr, "error: %s is a video-text model (X-CLIP): give the texts to score the "
                "video against with --text (docs/zero-shot.md)\n", dir);
        goto done;
    }
    if (texts.n && cli_encode_texts(m, dir, texts.items, texts.n, &text, &P)) goto done;
    if (tubelet_npy_read(&x, input, err, sizeof err)) {
        fprintf(stderr, "error: %s\n", err);
        goto done;
    }
    tubelet_model_info info;
    tubelet_model_get_info(m, &info);
    if (x.ndim != 5 || x.shape[2] != info.num_channels) {
        fprintf(stderr,
                "error: %s: pixel_values must have shape (batch, frames, %d, height, width); "
                "this array has %d dimensions",
                input, info.num_channels, x.ndim);
        for (int i = 0; i < x.ndim; i++) fprintf(stderr, "%s%lld", i ? " x " : " (", (long long)x.shape[i]);
        fprintf(stderr, "%s\n", x.ndim ? ")" : "");
        goto done;
    }
    if (x.dtype == TUBELET_F32) pix = x.data;
    else if (x.dtype == TUBELET_F64) {
        if (!(pix = malloc(sizeof(float) * x.numel))) goto oom;
        for (size_t i = 0; i < x.numel; i++) pix[i] = (float)((double *)x.data)[i];
    } else {
        fprintf(stderr, "error: %s: pixel_values must be float32\n", input);
        goto done;
    }
    if (x.shape[0] > 4096 || x.shape[1] > 65536 || x.shape[3] > 16384 || x.shape[4] > 16384) {
        fprintf(stderr, "error: %s: input shape is out of range\n", input);
        goto done;
    }
    if (tubelet_state_new(&s, m, (int)x.shape[0], (int)x.shape[1], (int)x.shape[3],
                          (int)x.shape[4], err, sizeof err)) {
        fprintf(stderr, "error: %s: %s\n", input, err);
        goto done;
    }
    if (texts.n) { /* X-CLIP: logits_per_video and the embeddings */
        const int64_t B = x.shape[0], n = texts.n;
        const tubelet_shape ls = {2, {B, n}}, ts = {3, {B, n, P}}, vs = {2, {B, P}};
        logits = malloc(sizeof(float) * (size_t)(B * n));
        tout = text_embeds_path ? malloc(sizeof(float) * (size_t)(B * n * P)) : NULL;
        vout = video_embeds_path ? malloc(sizeof(float) * (size_t)(B * P)) : NULL;
        if (!logits || (text_embeds_path && !tout) || (video_embeds_path && !vout)) goto oom;
        if (tubelet_forward_text(s, pix, text, texts.n, logits, vout, tout, err, sizeof err)) {
            fprintf(stderr, "error: %s: %s\n", input, err);
            goto done;
        }
        if (write_npy(logits_path, &ls, logits)) goto done;
        if ((text_embeds_path && write_npy(text_embeds_path, &ts, tout)) ||
            (video_embeds_path && write_npy(video_embeds_path, &vs, vout))) {
            unlink(logits_path); /* all outputs or none */
            if (text_embeds_path) unlink(text_embeds_path);
            goto done;
        }
        rc = 0;
        goto done;
    }
    tubelet_shape ls, hs;
    tubelet_state_logits_shape(s, &ls);
    tubelet_state_hidden_shape(s, &hs);
    logits = malloc(sizeof(float) * (size_t)tubelet_shape_numel(&ls));
    if (hidden_path) hidden = malloc(sizeof(float) * (size_t)tubelet_shape_numel(&hs));
    if (!logits || (hidden_path && !hidden)) goto oom;
    if (tubelet_forward(s, pix, logits, hidden, err, sizeof err)) {
        fprintf(stderr, "error: %s: %s\n", input, err);
        goto done;
    }
    if (write_npy(logits_path, &ls, logits)) goto done;
    if (hidden_path && write_npy(hidden_path, &hs, hidden)) {
        unlink(logits_path); /* all outputs or none */
        goto done;
    }
    rc = 0;
    goto done;
oom:
    fprintf(stderr, "error: out of memory\n");
done:
    if (pix != x.data) free(pix);
    tubelet_array_free(&x);
    free(logits);
    free(hidden);
    free(text), free(tout), free(vout), free(texts.items);
    tubelet_state_free(s);
    tubelet_model_free(m);
    return rc;
}
