/* tubelet tokenize: CLIP token ids of texts, as the model (and transformers' CLIPTokenizer)
 * sees them. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app.h"
#include "cli.h"
#include "tubelet_text.h"

int cmd_tokenize(int argc, char **argv) {
    const char *dir = NULL;
    int context = 0, json = 0, n_texts = 0;
    /* `--` ends the options: every argument after it is a text, even "-x" or "" */
    int end = 1;
    while (end < argc && strcmp(argv[end], "--")) end++;
    const char **texts = calloc((size_t)argc + 1, sizeof *texts);
    if (!texts) {
        fprintf(stderr, "error: out of memory\n");
        return 1;
    }
    const cli_option opts[] = {
        {"--model", CLI_STR, &dir, 0, 0, "DIR", "model directory with vocab.json and merges.txt\n"
                                                "(and tokenizer_config.json, special_tokens_map.json)"},
        {"--context", CLI_INT, &context, 2, 1 << 24, "N", "ids per text, truncated and padded\n"
                                                          "(default: the model's model_max_length, 77 for CLIP)"},
        {"--json", CLI_FLAG, &json, 0, 0, NULL, "print one JSON object: model, context, ids, lengths"},
        {0}};
    const cli_command cmd = {
        "tokenize", "tokenize --model DIR [--context N] [--json] [--] TEXT...",
        "Prints each text's CLIP token ids as a JSON list, one line per text: the start token,\n"
        "the byte-level BPE tokens of the text (truncated to context - 2), the end token, then\n"
        "the pad token up to the context length; the ids transformers' CLIPTokenizer gives with\n"
        "padding=\"max_length\", truncation=True (docs/zero-shot.md).\n",
        opts, texts, &n_texts, argc, "`--` ends the options, so that a text may start with '-' or be empty.\n"};
    int pr = cli_parse(&cmd, end, argv);
    for (int i = end + 1; pr < 0 && i < argc; i++) texts[n_texts++] = argv[i];
    if (pr < 0 && (!dir || !n_texts)) {
        fprintf(stderr, "error: %s\n\n", dir ? "give at least one TEXT" : "--model DIR is required");
        cli_print_help(&cmd, stderr);
        pr = 2;
    }
    tubelet_tokenizer *tok = NULL;
    char err[1024];
    if (pr < 0 && tubelet_tokenizer_load(&tok, dir, err, sizeof err)) {
        fprintf(stderr, "error: %s\n", err);
        pr = 1;
    }
    if (pr >= 0) {
        free(texts);
        return pr;
    }
    if (!context) context = tubelet_tokenizer_context(tok);
    int32_t *ids = malloc((size_t)n_texts * (size_t)context * sizeof *ids);
    int *lens = malloc((size_t)n_texts * sizeof *lens), rc = 0;
    if (!ids || !lens) {
        fprintf(stderr, "error: out of memory\n");
        rc = 1;
    }
    for (int t = 0; !rc && t < n_texts; t++) /* every text first: no partial output */
        if (tubelet_tokenizer_encode(tok, texts[t], strlen(texts[t]), context, ids + (size_t)t * context,
                                     &lens[t], err, sizeof err)) {
            fprintf(stderr, "error: text %d: %s\n", t + 1, err);
            rc = 1;
        }
    if (!rc && json) {
        printf("{\"model\": ");
        app_json_string(stdout, dir);
        printf(", \"context\": %d, \"ids\": [", context);
    }
    for (int t = 0; !rc && t < n_texts; t++) {
        printf(json ? (t ? ", [" : "[") : "[");
        for (int i = 0; i < context; i++) printf(i ? ", %d" : "%d", ids[(size_t)t * context + i]);
        printf(json ? "]" : "]\n");
    }
    if (!rc && json) {
        printf("], \"lengths\": [");
        for (int t = 0; t < n_texts; t++) printf(t ? ", %d" : "%d", lens[t]);
        printf("]}\n");
    }
    free(ids);
    free(lens);
    free(texts);
    tubelet_tokenizer_free(tok);
    return rc;
}
