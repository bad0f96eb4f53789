/* tubelet info: what a model is and what it costs. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "tubelet_pretrain.h"

int cmd_info(int argc, char **argv) {
    const char *dir = NULL, *arch = NULL;
    int json = 0, list = 0, threads = 0;
    const cli_option opts[] = {
        {"--model", CLI_STR, &dir, 0, 0, "DIR", "Hugging Face model directory"},
        {"--arch", CLI_STR, &arch, 0, 0, "NAME", "built-in architecture, described without weights (see --list)"},
        {"--list", CLI_FLAG, &list, 0, 0, NULL, "list the built-in architectures"},
        CLI_THREADS_OPTION(&threads),
        {"--json", CLI_FLAG, &json, 0, 0, NULL, "print one JSON object"},
        {0}};
    const cli_command cmd = {
        "info", "info (--model DIR | --arch NAME | --list) [--threads N] [--json]",
        "Prints the model's family and variant, parameter count, the input shape it expects,\n"
        "tokens per clip and FLOPs per clip (2 x multiply-adds of every matmul, attention\n"
        "included), and the GEMM library and thread count in use.\n",
        opts, NULL, NULL, 0, NULL};
    int pr = cli_parse(&cmd, argc, argv);
    if (pr >= 0) return pr;
    if (list) {
        for (int i = 0; tubelet_arch_name(i); i++)
            printf(json ? "%s\"%s\"" : "%s%s", i ? (json ? ", " : "\n") : (json ? "[" : ""),
                   tubelet_arch_name(i));
        printf(json ? "]\n" : "\n");
        return 0;
    }
    if (!dir == !arch) {
        fprintf(stderr, "error: give exactly one of --model DIR or --arch NAME\n\n");
        cli_print_help(&cmd, stderr);
        return 2;
    }
    /* an architecture is described from its configuration: no weights are made */
    tubelet_model *m = NULL;
    if (dir) {
        if (!(m = cli_load(dir, NULL, threads))) return 1;
    } else {
        char err[1024];
        if (tubelet_model_describe(&m, arch, err, sizeof err)) {
            fprintf(stderr, "error: %s\n", err);
            return 1;
        }
        tubelet_model_set_threads(m, threads);
    }
    tubelet_model_info in;
    tubelet_model_get_info(m, &in);
    const char *name = dir ? dir : arch;
    if (json) {
        printf("{\"model\": \"%s\", \"family\": \"%s\", \"model_type\": \"%s\", \"variant\": \"%s\", "
               "\"params\": %lld, \"input_shape\": [1, %d, %d, %d, %d], \"tokens\": %lld, "
               "\"hidden_size\": %d, \"layers\": %d, \"temporal_layers\": %d, \"heads\": %d, "
               "\"intermediate_size\": %d, "
               "\"num_labels\": %d, \"patch\": [%d, %d, %d], \"flop_per_clip\": %.0f, "
               "\"gflop_per_clip\": %.3f, \"layer_scale_init_value\": %g, \"threads\": %d, "
               "\"gemm\": \"%s\", \"params_not_run\": %lld",
               name, in.family, in.model_type, in.variant, (long long)in.n_params, in.num_frames,
               in.num_channels, in.image_height, in.image_width, (long long)in.n_tokens,
               in.hidden_size, in.num_layers, in.num_temporal_layers, in.num_heads,
               in.intermediate_size, in.num_labels,
               in.tubelet_t, in.patch_h, in.patch_w, in.flop_per_clip, in.flop_per_clip / 1e9,
               in.layer_scale_init_value, tubelet_model_threads(m), tubelet_gemm_backend(),
               (long long)in.n_params_not_run);
        if (tubelet_model_is_pretraining(m)) { /* at VideoMAE's mask ratio 0.9 */
            double ev, ea, dec, f = tubelet_pretrain_flop(m, 0.9, &ev, &ea, &dec);
            printf(", \"decoder\": {\"layers\": %d, \"hidden_size\": %d, \"heads\": %d, "
                   "\"intermediate_size\": %d, \"norm_pix_loss\": %s}, \"pretrain_mask_ratio\": 0.9, "
                   "\"pretrain_gflop_encoder_visible\": %.3f, \"pretrain_gflop_encoder_all\": %.3f, "
                   "\"pretrain_gflop_decoder\": %.3f, \"pretrain_gflop_per_clip\": %.3f",
                   tubelet_pretrain_decoder(m, 0), tubelet_pretrain_decoder(m, 1),
                   tubelet_pretrain_decoder(m, 2), tubelet_pretrain_decoder(m, 3),
                   tubelet_pretrain_decoder(m, 4) ? "true" : "false", ev / 1e9, ea / 1e9,
                   dec / 1e9, f / 1e9);
        }
        if (in.num_stages > 0) {
            printf(", \"window_size\": [%d, %d, %d], \"stages\": [", in.window_size[0],
                   in.window_size[1], in.window_size[2]);
            for (int i = 0; i < in.num_stages; i++)
                printf("%s{\"depth\": %d, \"heads\": %d, \"width\": %d, \"intermediate_size\": %d, "
                       "\"tokens\": [%d, %d, %d], \"window\": [%d, %d, %d]}", i ? ", " : "",
                       in.stage[i].depth, in.stage[i].heads, in.stage[i].width, in.stage[i].mlp,
                       in.stage[i].tokens[0], in.stage[i].tokens[1], in.stage[i].tokens[2],
                       in.stage[i].window[0], in.stage[i].window[1], in.stage[i].window[2]);
            printf("]");
        }
        printf("}\n");
    } else {
        printf("model:        %s\n", name);
        printf("family:       %s (%s)\n", in.family, in.variant);
        printf("parameters:   %lld (%.1f M)\n", (long long)in.n_params, in.n_params / 1e6);
        if (in.n_params_not_run) /* V-JEPA 2's predictor: in its files, never run */
            printf("              %lld (%.1f M) with its predictor (%lld, in its files, never "
                   "run): transformers' count\n", (long long)(in.n_params + in.n_params_not_run),
                   (in.n_params + in.n_params_not_run) / 1e6, (long long)in.n_params_not_run);
        printf("input:        (batch, %d, %d, %d, %d) float32 pixel_values\n", in.num_frames,
               in.num_channels, in.image_height, in.image_width);
        printf("patch:        %d x %d x %d (frames x height x width)\n", in.tubelet_t,
               in.patch_h, in.patch_w);
        if (in.num_stages > 0) {
            /* a model in stages: hidden, heads and MLP above are the last stage's */
            printf("encoder:      %d stages, %d blocks, window %d x %d x %d (frames x rows x "
                   "columns of tokens)\n", in.num_stages, in.num_layers, in.window_size[0],
                   in.window_size[1], in.window_size[2]);
            for (int i = 0; i < in.num_stages; i++) {
                char w[48] = "";
                if (memcmp(in.stage[i].window, in.window_size, sizeof in.window_size))
                    snprintf(w, sizeof w, ", window %d x %d x %d", in.stage[i].window[0],
                             in.stage[i].window[1], in.stage[i].window[2]);
                printf("  stage %d:    %d block%s, width %d, %d head%s, MLP %d, tokens %d x %d x %d%s\n",
                       i + 1, in.stage[i].depth, in.stage[i].depth == 1 ? "" : "s",
                       in.stage[i].width, in.stage[i].heads, in.stage[i].heads == 1 ? "" : "s",
                       in.stage[i].mlp,
                       in.stage[i].tokens[0], in.stage[i].tokens[1], in.stage[i].tokens[2], w);
            }
        } else if (in.num_temporal_layers)
            printf("encoder:      %d spatial + %d temporal layers, hidden %d, %d heads, MLP %d\n",
                   in.num_layers, in.num_temporal_layers, in.hidden_size, in.num_heads,
                   in.intermediate_size);
        else
            printf("encoder:      %d layers, hidden %d, %d heads, MLP %d\n", in.num_layers,
                   in.hidden_size, in.num_heads, in.intermediate_size);
        if (in.layer_scale_init_value > 0)
            printf("layer scale:  lambda_1, lambda_2 per block (init %g)\n",
                   in.layer_scale_init_value);
        printf("tokens:       %lld per clip\n", (long long)in.n_tokens);
        printf("labels:       %d\n", in.num_labels);
        printf("cost:         %.2f GFLOP per clip\n", in.flop_per_clip / 1e9);
        if (tubelet_model_is_pretraining(m)) {
            double ev, ea, dec, f = tubelet_pretrain_flop(m, 0.9, &ev, &ea, &dec);
            printf("decoder:      %d layers, hidden %d, %d heads, MLP %d (norm_pix_loss %s)\n",
                   tubelet_pretrain_decoder(m, 0), tubelet_pretrain_decoder(m, 1),
                   tubelet_pretrain_decoder(m, 2), tubelet_pretrain_decoder(m, 3),
                   tubelet_pretrain_decoder(m, 4) ? "on" : "off");
            printf("pretraining:  mask ratio 0.9: encoder %.2f GFLOP over the visible tokens "
                   "(%.2f over all), decoder %.2f; %.2f GFLOP per clip forward\n", ev / 1e9,
                   ea / 1e9, dec / 1e9, f / 1e9);
        }
        printf("threads:      %d\n", tubelet_model_threads(m));
        printf("gemm:         %s\n", tubelet_gemm_backend());
    }
    tubelet_model_free(m);
    return 0;
}
