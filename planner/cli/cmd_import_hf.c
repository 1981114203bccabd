/* canzona import-hf: writes a model description from a Hugging Face config.json. */
#include "commands.h"
#include "cz_types.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void import_hf_usage(FILE *f)
{
    fprintf(f,
            "usage: canzona import-hf CONFIG.json [-o MODEL.json] [--name NAME]\n"
            "                         [--dtype bf16|fp16|fp32] [--tp-size N] [--ep-size N]\n"
            "                         [--make-vocab-size-divisible-by N]\n"
            "                         [--split-qkv yes|no] [--split-gate-up yes|no]\n"
            "                         [--per-head none|qkv|qkvo]\n\n"
            "Reads a Hugging Face config.json and writes the canzona.model/1 description of the\n"
            "same model with Megatron-Core parameter names: fused Q/K/V and gate/up matrices\n"
            "(declared as blocks), TE-fused layer norms, experts as whole matrices of\n"
            "mlp.experts.local_experts.<e>.\n"
            "Supported model_type: llama, mistral, qwen2, qwen3, qwen2_moe, qwen3_moe, mixtral,\n"
            "deepseek_v3 and kimi_k2 (multi-head latent attention, shared experts, leading dense\n"
            "layers), or the matching architectures[0] when model_type is absent.\n\n"
            "options:\n"
            "  -o, --output FILE  write the description to FILE (a regular file atomically: a\n"
            "                     temporary file in the same folder, then rename; FILE is left\n"
            "                     untouched on error; a device or FIFO is written in place, a\n"
            "                     symbolic link is followed); default or '-': standard output\n"
            "  --name NAME        the model's name; default: the basename of the config's\n"
            "                     _name_or_path, else the file name without .json and .config\n"
            "                     (a file named config.json takes its folder's name), lowercased\n"
            "  --dtype TYPE       parameter/gradient type of the training job: bf16 (default),\n"
            "                     fp16 or fp32\n"
            "  --tp-size N        the job's tensor-parallel size (default 1): the vocabulary is\n"
            "                     padded for it, and head counts and FFN sizes Megatron-Core\n"
            "                     cannot split across N ranks are refused\n"
            "  --ep-size N        the job's expert model-parallel size (default 1): a number of\n"
            "                     routed experts that N does not divide is refused\n"
            "  --make-vocab-size-divisible-by N\n"
            "                     Megatron-LM's option of that name (default 128): the\n"
            "                     vocabulary is padded to a multiple of N x TP; 1 leaves only\n"
            "                     the multiple of TP that the vocab-parallel embedding needs\n"
            "  --split-qkv yes|no whether the matrix optimizer treats Q, K and V of the fused\n"
            "                     linear_qkv as separate matrices (default yes, as Megatron's\n"
            "                     Muon does)\n"
            "  --split-gate-up yes|no\n"
            "                     whether gate and up of the fused linear_fc1 are separate\n"
            "                     matrices (default yes; Megatron's Muon keeps them fused: no)\n"
            "  --per-head none|qkv|qkvo\n"
            "                     per-head Muon: each attention head of the Q, K and V\n"
            "                     projections (qkv), and of the output projection too (qkvo),\n"
            "                     is orthogonalized on its own (\"heads\"); default none\n"
            "  -h, --help         show this help\n\n"
            "See docs/FORMATS.md for the model format and the naming conventions.\n");
}

int cz_cmd_import_hf(int argc, char **argv)
{
    const char *config = NULL, *output = NULL;
    cz_import_hf_options opts;
    cz_import_hf_options_init(&opts);

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            import_hf_usage(stdout);
            return 0;
        }
        if (!strcmp(a, "-o") || !strcmp(a, "--output") || !strcmp(a, "--name") ||
            !strcmp(a, "--dtype") || !strcmp(a, "--tp-size") || !strcmp(a, "--ep-size") ||
            !strcmp(a, "--make-vocab-size-divisible-by") || !strcmp(a, "--split-qkv") ||
            !strcmp(a, "--split-gate-up") || !strcmp(a, "--per-head")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "canzona import-hf: option %s needs a value\n", a);
                return 2;
            }
            const char *v = argv[++i];
            if (!strcmp(a, "--name")) {
                opts.name = v;
            } else if (!strcmp(a, "--per-head")) {
                if (!strcmp(v, "none") || !strcmp(v, "qkv") || !strcmp(v, "qkvo")) {
                    opts.per_head = !strcmp(v, "qkv")    ? CZ_PER_HEAD_QKV
                                    : !strcmp(v, "qkvo") ? CZ_PER_HEAD_QKVO
                                                         : CZ_PER_HEAD_NONE;
                } else {
                    fprintf(stderr,
                            "canzona import-hf: --per-head '%s': expected none, qkv or qkvo\n", v);
                    return 2;
                }
            } else if (!strcmp(a, "--split-qkv") || !strcmp(a, "--split-gate-up")) {
                if (strcmp(v, "yes") && strcmp(v, "no")) {
                    fprintf(stderr, "canzona import-hf: %s '%s': expected yes or no\n", a, v);
                    return 2;
                }
                *(!strcmp(a, "--split-qkv") ? &opts.split_qkv : &opts.split_gate_up) =
                    !strcmp(v, "yes");
            } else if (!strcmp(a, "--tp-size") || !strcmp(a, "--ep-size") ||
                       !strcmp(a, "--make-vocab-size-divisible-by")) {
                char *end;
                errno = 0;
                long n = strtol(v, &end, 10);
                if (errno || end == v || *end || n < 1 || n > (1 << 20)) {
                    fprintf(stderr,
                            "canzona import-hf: %s '%s': expected a whole number from 1 to "
                            "1048576\n",
                            a, v);
                    return 2;
                }
                if (!strcmp(a, "--tp-size"))
                    opts.tp_size = (int)n;
                else if (!strcmp(a, "--ep-size"))
                    opts.ep_size = (int)n;
                else
                    opts.vocab_divisible_by = (int)n;
            } else if (!strcmp(a, "--dtype")) {
                if (cz_dtype_parse(v, &opts.dtype)) {
                    fprintf(stderr,
                            "canzona import-hf: --dtype '%s' is unknown; use bf16, fp16 or fp32\n",
                            v);
                    return 2;
                }
            } else {
                output = v;
            }
            continue;
        }
        if (a[0] == '-' && a[1] != '\0') {
            fprintf(
                stderr,
                "canzona import-hf: unrecognized option '%s' (see 'canzona import-hf --help')\n",
                a);
            return 2;
        }
        if (config) {
            fprintf(stderr, "canzona import-hf: one config.json at a time ('%s' and '%s')\n",
                    config, a);
            return 2;
        }
        config = a;
    }
    if (!config) {
        import_hf_usage(stderr);
        return 2;
    }
    if (opts.name && !*opts.name) {
        fprintf(stderr, "canzona import-hf: --name must not be empty\n");
        return 2;
    }

    cz_error err;
    cz_error_clear(&err);
    char *text = NULL;
    int status = 1;
    const char *inputs[] = {config}, *what[] = {"the config"};
    if (cz__file_check_output(output, inputs, what, 1, &err) ||
        cz_model_import_hf(&text, config, &opts, &err) ||
        cz__file_write(output ? output : "-", text, strlen(text), &err)) {
        fprintf(stderr, "canzona import-hf: %s\n", err.message);
        goto done;
    }
    status = 0;
done:
    cz_free(text);
    return status;
}
