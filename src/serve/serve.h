/* tubelet serve's core (src/serve/): the HTTP server (server.c) and the parsing of a request's
 * parameters (params.c, fuzzed by tests/fuzz_serve.c). The command's options: src/cli/cmd_serve.c. */
#ifndef TB_SERVE_H
#define TB_SERVE_H

#include <stddef.h>

/* The parameters of one request, from its query string or its multipart fields. */
typedef struct {
    int top;            /* labels (default 5; timeline: 1) */
    int top_given;
    int clips, crops;   /* temporal and spatial views (default 1, 1) */
    int stride;         /* frame stride of sampling=clip / rate of hf-rate; 0: the default */
    char sampling[16];  /* "" = the model's default (hf, or an official checkpoint's clip) */
    char model[128];    /* "" = the first model */
    char name[256];     /* "video" in the answer: a multipart file's name, else "video" */
    char pool[8];       /* features: "cls", "mean", "none"; "" = the model's (as features) */
    double window, step; /* timeline: --window and --stride in seconds; 0 = their defaults */
} serve_params;

void serve_params_default(serve_params *p);
/* Sets one parameter from its text; 0, or -1 with err naming the parameter and the problem. */
int serve_param_set(serve_params *p, const char *key, const char *value, char *err, size_t errlen);

/* The most views (clips x crops) one request may ask for, the most labels. */
#define SERVE_MAX_CLIPS 16
#define SERVE_MAX_TOP 1000

#endif
