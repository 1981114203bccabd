/*
 * Harness: the Hugging Face config importer (cz__import_hf) and the model formatter.
 *
 * Any config.json must be imported or refused with a message, never crash, leak or overflow.
 * A config that imports must give a model the model loader accepts: the importer's output,
 * formatted as `canzona import-hf` writes it, is loaded back with cz_model_load, so that the
 * importer never writes a model the rest of the tool chain refuses. Imported models that
 * expand to more than FZ_MODEL_FAST_PARAMS parameters, yet within the loader's bound, are not
 * loaded back (see fz_model_is_slow).
 */
#include "fuzz_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    json_t *model_json = NULL;
    char *text = NULL;
    cz_model *model = NULL;
    cz_error err;
    cz_error_clear(&err);
    /* Every third input gets an explicit name; the others take the file-derived one. */
    const char *name = size % 3 == 0 ? "fuzz-model" : NULL;
    int rc = cz__import_hf(&model_json, fz_input_path(0, data, size), name, CZ_DTYPE_BF16, &err);
    if (rc != CZ_OK) {
        if (model_json)
            fz_fail("cz__import_hf failed (%d) but returned a model", rc);
        if (rc == CZ_EINTERNAL || !err.message[0])
            fz_fail("cz__import_hf failed (%d) without a usable message: %s", rc, err.message);
        return 0;
    }
    if (fz_model_is_slow(model_json))
        goto out;
    cz_error_clear(&err);
    if (cz__model_json_format(&text, model_json, &err) != CZ_OK)
        fz_fail("cz__model_json_format failed on an imported model: %s", err.message);
    const char *path = fz_input_path(1, (const uint8_t *)text, strlen(text));
    cz_error_clear(&err);
    if (cz_model_load(&model, path, &err) != CZ_OK)
        fz_fail("the model imported from this config does not load: %s", err.message);
out:
    cz_model_free(model);
    free(text);
    json_decref(model_json);
    return 0;
}
