/* tubelet_text.h — CLIP's byte-level BPE tokenizer, as transformers' default CLIPTokenizer (the
 * tokenizers-backed one, without ftfy) encodes text: the same ids for every input.
 *
 *   tubelet_tokenizer *tok;
 *   char err[1024];
 *   if (tubelet_tokenizer_load(&tok, "models/xclip", err, sizeof err)) { puts(err); return 1; }
 *   int ctx = tubelet_tokenizer_context(tok);             (model_max_length, 77 for CLIP)
 *   int32_t ids[77]; int n;
 *   tubelet_tokenizer_encode(tok, "a video of a cat", 16, ctx, ids, &n, err, sizeof err);
 *   tubelet_tokenizer_free(tok);
 *
 * The directory holds vocab.json and merges.txt, and optionally tokenizer_config.json and
 * special_tokens_map.json (bos, eos, pad, unk tokens, model_max_length, padding_side); the
 * defaults are CLIP's. Design and tests: docs/zero-shot.md. A tokenizer keeps a cache of
 * encoded words, so one tokenizer serves one thread at a time. Errors: a status from
 * tubelet_status, a message in err naming the file. */
#ifndef TUBELET_TEXT_H
#define TUBELET_TEXT_H

#include <stddef.h>
#include <stdint.h>

#include "tubelet.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tubelet_tokenizer tubelet_tokenizer;

/* Reads the tokenizer files of a model directory, validated (sizes, UTF-8, duplicates, merges
 * whose parts or result are not in the vocabulary); given a checkpoint file (X-CLIP's .pth), the
 * files beside it. */
int tubelet_tokenizer_load(tubelet_tokenizer **out, const char *dir, char *err, size_t errlen);

/* The context length the model expects (tokenizer_config.json's model_max_length; 77 when it
 * is absent or unbounded). */
int tubelet_tokenizer_context(const tubelet_tokenizer *t);

/* Encodes len bytes of UTF-8 text into ids[context] (context >= 2): the bos id, the text's tokens
 * truncated to context - 2, the eos id, then the pad id up to context (on the side
 * tokenizer_config.json's padding_side names; right by default) — what
 * tokenizer(text, padding="max_length", truncation=True, max_length=context) returns.
 * *n_tokens (if not NULL): the ids before padding. Text that is not valid UTF-8 is an error. */
int tubelet_tokenizer_encode(tubelet_tokenizer *t, const char *text, size_t len, int context,
                             int32_t *ids, int *n_tokens, char *err, size_t errlen);

void tubelet_tokenizer_free(tubelet_tokenizer *t);

/* ---- a video-text model (X-CLIP, model_type "xclip"; docs/zero-shot.md) ----
 *
 *   int P, ctx;
 *   tubelet_text_dims(m, &P, &ctx);                   (TUBELET_ERR_UNSUPPORTED: no text tower)
 *   tubelet_encode_text(m, ids, n, ctx, text, err, sizeof err);      ids (n, ctx) → text (n, P)
 *   tubelet_forward_text(s, pix, text, n, logits, NULL, NULL, err, sizeof err);  logits (B, n)
 *
 * The text embeddings depend on the texts only: encode a label set once, then score each clip
 * against it (the prompt generator adapts them to each clip inside tubelet_forward_text). */

/* The width of the text and video embeddings (projection_dim) and the longest token sequence
 * (text_config.max_position_embeddings). TUBELET_ERR_UNSUPPORTED for a model without texts. */
int tubelet_text_dims(const tubelet_model *m, int *embed_dim, int *context);

/* The number of token embeddings of the text tower (text_config.vocab_size); 0 without one. */
int tubelet_text_vocab_size(const tubelet_model *m);
/* 0 when every id of t's vocabulary is one of m's token embeddings; else TUBELET_ERR_FORMAT with
 * err naming vocab.json (a tokenizer of another model: every text would fail), or
 * TUBELET_ERR_UNSUPPORTED for a model without texts. Check once, after loading both. */
int tubelet_tokenizer_check(const tubelet_tokenizer *t, const tubelet_model *m, char *err,
                            size_t errlen);
/* n_texts token sequences (ids: n_texts x context, as tubelet_tokenizer_encode pads them) →
 * text_embeds (n_texts x embed_dim): the projected end-of-text state, as transformers'
 * XCLIPModel.get_text_features. The end-of-text token is the largest id of each sequence. */
int tubelet_encode_text(tubelet_model *m, const int32_t *ids, int n_texts, int context,
                        float *text_embeds, char *err, size_t errlen);

/* One pass over a batch of clips pix (the state's B x T x C x H x W) against n_texts text
 * embeddings from tubelet_encode_text: logits (B x n_texts) = XCLIPModel's logits_per_video;
 * video_embeds (B x embed_dim) and text_out (B x n_texts x embed_dim), the normalised
 * embeddings of its output, when not NULL. */
int tubelet_forward_text(tubelet_state *s, const float *pix, const float *text_embeds,
                         int n_texts, float *logits, float *video_embeds, float *text_out,
                         char *err, size_t errlen);

/* The video embeddings of a batch of clips (B x embed_dim) before normalising, as
 * XCLIPModel.get_video_features (no texts: without the prompt generator). */
int tubelet_encode_video(tubelet_state *s, const float *pix, float *video_embeds, char *err,
                         size_t errlen);

#ifdef __cplusplus
}
#endif

#endif
