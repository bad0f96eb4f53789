/* CLIP's byte-level BPE tokenizer (public API: include/tubelet_text.h); the steps the tests
 * check one by one. transformers' CLIPTokenizer (tokenizers backend) does, for one text:
 *   1. added tokens: the special tokens (bos, eos, pad, unk) found verbatim in the text become
 *      their ids; the text between them goes through 2-5;
 *   2. normalise: NFC (utf8proc), every run of \s to one space, lowercase (char by char);
 *   3. pre-tokenise: the matches of TB_CLIP_SPLIT (PCRE2, Unicode properties), non-matches
 *      dropped; each piece's bytes mapped to GPT-2's printable characters;
 *   4. BPE: a piece's characters, the last one with "</w>", as vocabulary ids (a character not
 *      in it is the unk id), merged lowest merge rank first, leftmost first among equal ranks;
 *   5. bos + ids (truncated to context - 2) + eos, padded with the pad id. */
#ifndef TB_CLIP_TOKENIZER_H
#define TB_CLIP_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "common.h"
#include "tubelet_text.h"

/* The fast tokenizer's regexes (tokenizers' Oniguruma), compiled by PCRE2 with TB_CLIP_PCRE2:
 * the normaliser's whitespace; the Split pre-tokeniser's pattern (behaviour "removed",
 * inverted: the matches are the pieces); then the ByteLevel pre-tokeniser's own split (GPT-2's
 * pattern, use_regex) of each piece, which only changes the special tokens' pieces
 * ("<|endoftext|>" to "<|", "endoftext", "|>"). Oniguruma's \s is Unicode's White_Space, which
 * lacks U+180E since Unicode 6.3; PCRE2's \s still holds it, so TB_CLIP_SPACE takes it out. */
#define TB_CLIP_PCRE2 (PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK)
#define TB_CLIP_SPACE "[^\\S\\x{180E}]"
#define TB_CLIP_NOT_SLN "(?:[^\\s\\p{L}\\p{N}]|\\x{180E})" /* [^\s\p{L}\p{N}] */
#define TB_CLIP_LETTER "\\p{L}"
#define TB_CLIP_NUMBER "\\p{N}"
#define TB_CLIP_SPLIT "<\\|startoftext\\|>|<\\|endoftext\\|>|'s|'t|'re|'ve|'m|'ll|'d|[\\p{L}]+|[\\p{N}]|" TB_CLIP_NOT_SLN "+"
#define TB_CLIP_BYTELEVEL "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?" TB_CLIP_NOT_SLN "+|" TB_CLIP_SPACE "+(?=" TB_CLIP_SPACE "|\\z)|" TB_CLIP_SPACE "+"

/* Limits on the files and the text (CLIP's vocab.json is 1.6 MB, merges.txt 0.5 MB). */
#define TB_CLIP_MAX_FILE (64u << 20)
#define TB_CLIP_MAX_TOKEN 4096      /* bytes of one vocabulary entry */
#define TB_CLIP_MAX_TEXT (1u << 20) /* bytes of one text (a CLIP text is 77 tokens) */

/* Step 2: the normalised text (malloc'd, NUL-terminated) of len bytes of valid UTF-8. */
int tb_clip_normalize(const tubelet_tokenizer *t, const char *text, size_t len, char **out,
                      size_t *out_len, tb_err *e);

/* Step 3 on normalised text: calls piece(user, bytes, n) for each piece, its bytes mapped to
 * GPT-2's characters (UTF-8), until piece returns non-zero. */
typedef int (*tb_clip_piece_fn)(void *user, const char *piece, size_t n);
int tb_clip_pretokenize(const tubelet_tokenizer *t, const char *norm, size_t len,
                        tb_clip_piece_fn piece, void *user, tb_err *e);

/* The lowercase of code point c as tokenizers' Lowercase (Rust's char::to_lowercase): the
 * number of code points written to out (1 or 2). */
int tb_clip_lower(uint32_t c, uint32_t out[3]);

#endif
