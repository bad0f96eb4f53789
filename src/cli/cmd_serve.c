/* tubelet serve: the options of the HTTP inference server (src/serve/server.c, docs/serve.md). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "serve.h"

int cmd_serve(int argc, char **argv) {
    serve_config c = {.host = "127.0.0.1", .port = 8080, .workers = 2, .max_batch = 4,
                          .max_wait_ms = 5, .queue = 16, .max_frames = 108000, .max_side = 4096,
                          .timeout_s = 30, .drain_s = 30, .header_timeout_s = 10,
                          .min_rate = 1024, .max_connections = 10000};
    double max_body_mb = 512;
    const char *prec_s = NULL, *model_help = NULL, *log_format = "text";
    /* --model repeats: taken out of argv here, cli_parse sees the other options */
    const char **models = calloc((size_t)argc, sizeof(char *));
    char **rest = calloc((size_t)argc + 1, sizeof(char *));
    if (!models || !rest) return free(models), free(rest), 1;
    int n_rest = 0;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--model") && i + 1 < argc) models[c.n_models++] = argv[++i];
        else if (!strncmp(argv[i], "--model=", 8)) models[c.n_models++] = argv[i] + 8;
        else rest[n_rest++] = argv[i];
    }
    const cli_option opts[] = {
        {"--model", CLI_STR, &model_help, 0, 0, "[NAME=]DIR",
         "a model to serve (a Hugging Face directory or an official checkpoint);\n"
         "repeat it for several, named by NAME or the directory's name; the\n"
         "first answers requests that name none"},
        {"--host", CLI_STR, &c.host, 0, 0, "ADDR", "address to listen on (default 127.0.0.1: this machine only)"},
        {"--port", CLI_INT, &c.port, 0, 65535, "N", "TCP port (default 8080; 0: any free one, printed)"},
        {"--threads", CLI_INT, &c.threads, 0, 1024, "N", "model threads (default: all cores; 1 for a model\nof under 2 GFLOP per clip, whose clips cost more to decode)"},
        {"--workers", CLI_INT, &c.workers, 1, 256, "N", "videos decoded at once (default 2)"},
        {"--max-batch", CLI_INT, &c.max_batch, 1, 64, "N", "requests per forward pass at most (default 4)"},
        {"--max-wait-ms", CLI_INT, &c.max_wait_ms, 0, 10000, "MS",
         "how long the first request of a batch waits for others (default 5)"},
        {"--queue", CLI_INT, &c.queue, 1, 4096, "N",
         "requests admitted at once (once their body is in: decoding,\nwaiting for or in the model); the next gets 503 (default 16)"},
        {"--max-body", CLI_REAL, &max_body_mb, 0.001, 1 << 20, "MB", "largest body accepted, 413 above (default 512)"},
        {"--max-frames", CLI_INT, &c.max_frames, 1, 1 << 30, "N", "most frames a video may have, 422 above (default 108000)"},
        {"--max-side", CLI_INT, &c.max_side, 16, 1 << 16, "PX", "largest width or height of a video, 422 above (default 4096)"},
        {"--timeout", CLI_INT, &c.timeout_s, 1, 3600, "S", "a connection idle this long is closed (default 30)"},
        {"--header-timeout", CLI_INT, &c.header_timeout_s, 1, 3600, "S",
         "a request's headers must arrive within this, and an idle\nkept-alive connection is closed after it (default 10)"},
        {"--min-rate", CLI_REAL, &c.min_rate, 0, 1e12, "B/S",
         "a body slower than this on average past --header-timeout\nis cut off (default 1024 bytes/s)"},
        {"--max-connections", CLI_INT, &c.max_connections, 16, 1 << 20, "N",
         "open connections at most (default 10000, fewer if the\ndescriptor limit says so; printed at start)"},
        {"--log-format", CLI_STR, &log_format, 0, 0, "F",
         "the access log on stderr, a line per request: text\n(default) or json"},
        {"--drain", CLI_INT, &c.drain_s, 0, 3600, "S",
         "on SIGTERM/SIGINT, how long requests in flight may finish (default 30)"},
        {"--api-key", CLI_STR, &c.api_key, 0, 0, "KEY",
         "every endpoint but /health wants Authorization: Bearer KEY"},
        {"--cors", CLI_STR, &c.cors, 0, 0, "ORIGIN", "answer with CORS headers for ORIGIN (default: none)"},
        CLI_PRECISION_OPTION(&prec_s),
        {0}};
    const cli_command cmd = {
        "serve",
        "serve --model [NAME=]DIR [--model ...] [--host ADDR] [--port N] [--max-batch N]\n"
        "                        [--max-wait-ms MS] [--queue N] [--api-key KEY] [options]",
        "An HTTP/1.1 inference server (docs/serve.md): GET /health, GET /v1/models,\n"
        "POST /v1/classify (the video as the body or as the multipart field 'video';\n"
        "answers as classify --json), POST /v1/features (.npy or JSON), POST /v1/timeline\n"
        "(as timeline --json), GET /metrics (Prometheus). A zero-shot model (X-CLIP) takes\n"
        "the parameters labels=a,b,c and template (as classify --labels). Requests are decoded\n"
        "in parallel and batched dynamically for one model executor. One event loop serves\n"
        "every connection; slow clients are cut by --header-timeout and --min-rate. An access\n"
        "log line per request goes to stderr. SIGTERM or SIGINT stops it: no new connections,\n"
        "the requests in flight finish (--drain; then 503), exit 0.\n",
        opts, NULL, NULL, 0, NULL};
    int pr = cli_parse(&cmd, n_rest, rest);
    int bad = pr >= 0 ? pr : 0;
    if (pr < 0 && model_help) models[c.n_models++] = model_help;
    if (pr < 0 && !c.n_models) {
        fprintf(stderr, "error: tubelet serve needs --model DIR\n\n");
        cli_print_help(&cmd, stderr);
        bad = 2;
    }
    if (pr < 0 && !bad && !cli_precision(prec_s, &c.precision, &c.reference)) bad = 2;
    if (pr < 0 && !bad && strcmp(log_format, "text") && strcmp(log_format, "json")) {
        fprintf(stderr, "error: --log-format is text or json, not '%s'\n", log_format);
        bad = 2;
    }
    c.log_json = !strcmp(log_format, "json");
    const char *world = getenv("OMPI_COMM_WORLD_SIZE");
    if (pr < 0 && !bad && (world || getenv("PMI_RANK") || getenv("PMIX_RANK"))) {
        fprintf(stderr, "error: tubelet serve is one process: start it without mpirun (it was "
                "started as one of %s ranks)\n", world ? world : "several");
        bad = 2;
    }
    if (pr >= 0 || bad) return free(models), free(rest), bad;
    c.models = models;
    c.max_body = max_body_mb * 1024 * 1024;
    int rc = serve_run(&c);
    free(models), free(rest);
    return rc;
}
