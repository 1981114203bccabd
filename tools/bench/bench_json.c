/* canzona-bench's JSON reports, written as every output of the project is: to a temporary
 * file renamed into place (cz__file_write), ending in a newline. */
#include "bench.h"
#include "cz_format.h"

#include <stdlib.h>
#include <string.h>

int cz_bench_write_json(const char *path, const json_t *root, cz_error *err)
{
    char *text = json_dumps(root, JSON_INDENT(2) | JSON_SORT_KEYS);
    if (!text)
        return cz__error_set(err, CZ_ENOMEM, "out of memory for the JSON report %s", path);
    size_t len = strlen(text);
    char *line = realloc(text, len + 2);
    if (!line) {
        free(text);
        return cz__error_set(err, CZ_ENOMEM, "out of memory for the JSON report %s", path);
    }
    line[len] = '\n';
    int rc = cz__file_write(path, line, len + 1, err);
    free(line);
    return rc;
}
