/* canzona import-hf: writes a model description from a Hugging Face config.json. */
#include "commands.h"
#include "cz_types.h"
#include "file_io.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void import_hf_usage(FILE *f)
{
    fprintf(f,
            "usage: canzona import-hf CONFIG.json [-o MODEL.json] [--name NAME]\n"
            "                         [--dtype bf16|fp16|fp32]\n\n"
            "Reads a Hugging Face config.json and writes the canzona.model/1 description of the\n"
            "same model with Megatron-Core parameter names: fused Q/K/V and gate/up matrices\n"
            "(declared as blocks), TE-fused layer norms, experts as whole matrices.\n"
            "Supported model_type: llama, mistral, qwen2, qwen3, qwen2_moe, qwen3_moe, mixtral\n"
            "(or the matching architectures[0] when model_type is absent).\n\n"
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
            "  -h, --help         show this help\n\n"
            "See docs/FORMATS.md for the model format and the naming conventions.\n");
}

int cz_cmd_import_hf(int argc, char **argv)
{
    const char *config = NULL, *output = NULL, *name = NULL;
    cz_dtype dtype = CZ_DTYPE_BF16;

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            import_hf_usage(stdout);
            return 0;
        }
        if (!strcmp(a, "-o") || !strcmp(a, "--output") || !strcmp(a, "--name") ||
            !strcmp(a, "--dtype")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "canzona import-hf: option %s needs a value\n", a);
                return 2;
            }
            const char *v = argv[++i];
            if (!strcmp(a, "--name")) {
                name = v;
            } else if (!strcmp(a, "--dtype")) {
                if (cz_dtype_parse(v, &dtype)) {
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
            fprintf(stderr, "canzona import-hf: unknown option '%s' (see --help)\n", a);
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
    if (name && !*name) {
        fprintf(stderr, "canzona import-hf: --name must not be empty\n");
        return 2;
    }

    cz_error err;
    cz_error_clear(&err);
    json_t *model = NULL;
    char *text = NULL;
    int status = 1;
    const char *inputs[] = {config}, *what[] = {"the config"};
    if (cz_file_check_output(output, inputs, what, 1, &err) ||
        cz_import_hf(&model, config, name, dtype, &err) ||
        cz_model_json_format(&text, model, &err) ||
        cz_file_write(output ? output : "-", text, strlen(text), &err)) {
        fprintf(stderr, "canzona import-hf: %s\n", err.message);
        goto done;
    }
    status = 0;
done:
    free(text);
    json_decref(model);
    return status;
}
