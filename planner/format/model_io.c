/* Loading a model description (canzona.model/1): strict validation and repeat-block expansion.
 *
 * Repeat blocks expand in order; "{i}" in a block's prefix becomes that block's own iteration
 * index, and prefixes of nested blocks concatenate. A parameter's layer is its index among all
 * iterations of top-level repeat blocks, counted across them in file order (a second top-level
 * block continues where the first stopped), so nlayers is the sum of the top-level repeat counts
 * and every layer lies in [0, nlayers); parameters outside any repeat block have layer -1. */
#include "format_internal.h"

#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct expander {
    cz_json_ctx ctx;
    cz_param_def *params;
    char **paths; /* JSON path of each expanded parameter, for duplicate messages */
    size_t n, cap;
    int next_layer;
    int64_t elements; /* of the parameters expanded so far, at most CZ_MODEL_MAX_ELEMENTS */
} expander;

const char *cz__param_name_problem(const char *name)
{
    if (!name || !*name)
        return "is empty";
    if (name[0] == '.')
        return "starts with '.'";
    if (strlen(name) > CZ_PARAM_NAME_MAX)
        return "is longer than 200 bytes";
    for (const unsigned char *c = (const unsigned char *)name; *c; c++) {
        if (*c == '/')
            return "contains '/'";
        if (*c == '\\')
            return "contains '\\'";
        if (*c < 0x20 || *c == 0x7f)
            return "contains a control character";
    }
    return NULL;
}

static const char *const param_keys[] = {"name",   "shape", "tp_dim", "optimizer",
                                         "blocks", "heads", NULL};
static const char *const repeat_keys[] = {"repeat", "prefix", "params", NULL};

/* Expanded size of a params array, saturating above the limit; malformed entries count as one
 * (the validating pass reports them). */
static size_t count_expanded(const json_t *arr, int depth)
{
    size_t total = 0;
    size_t i;
    const json_t *e;
    if (depth > 64)
        return CZ_MODEL_MAX_PARAMS + 1;
    json_array_foreach(arr, i, e)
    {
        const json_t *rep = json_object_get(e, "repeat");
        const json_t *sub = json_object_get(e, "params");
        size_t add = 1;
        if (json_is_integer(rep) && json_integer_value(rep) > 0 && json_is_array(sub)) {
            size_t inner = count_expanded(sub, depth + 1);
            json_int_t r = json_integer_value(rep);
            add = (inner != 0 && (size_t)r > (CZ_MODEL_MAX_PARAMS + 1) / inner)
                      ? CZ_MODEL_MAX_PARAMS + 1
                      : inner * (size_t)r;
        }
        total += add;
        if (total > CZ_MODEL_MAX_PARAMS)
            return CZ_MODEL_MAX_PARAMS + 1;
    }
    return total;
}

size_t cz__model_count_params_json(const json_t *params)
{
    return count_expanded(params, 0);
}

static char *substitute_index(const char *prefix, int64_t index)
{
    char num[24];
    snprintf(num, sizeof num, "%" PRId64, index);
    size_t count = 0;
    for (const char *p = strstr(prefix, "{i}"); p; p = strstr(p + 3, "{i}"))
        count++;
    size_t len = strlen(prefix) + count * strlen(num) + 1;
    char *out = malloc(len);
    if (!out)
        return NULL;
    char *w = out;
    for (const char *p = prefix; *p;) {
        if (strncmp(p, "{i}", 3) == 0) {
            memcpy(w, num, strlen(num));
            w += strlen(num);
            p += 3;
        } else {
            *w++ = *p++;
        }
    }
    *w = '\0';
    return out;
}

static int parse_blocks(expander *x, const json_t *blocks, const char *path, cz_param_def *p)
{
    static const char *const keys[] = {"dim", "sizes", NULL};
    const cz_json_ctx *c = &x->ctx;
    char sub[CZ_JSON_PATH_MAX], el[CZ_JSON_PATH_MAX];
    const json_t *sizes;
    int rc = cz__json_check_object(c, blocks, path, keys);
    if (rc != CZ_OK)
        return rc;
    if (p->ndim != 2 || p->kind != CZ_KIND_MATRIX)
        return cz__json_fail(c, path,
                             "blocks are allowed only on 2-D matrix parameters; found a %d-D %s "
                             "parameter",
                             p->ndim, cz__kind_name(p->kind));
    if ((rc = cz__json_get_int(c, blocks, path, "dim", true, 0, 1, &p->block_dim)) != CZ_OK ||
        (rc = cz__json_get_array(c, blocks, path, "sizes", true, 1, &sizes)) != CZ_OK)
        return rc;
    cz__json_path_key(sub, path, "sizes");
    size_t n = json_array_size(sizes);
    if (n > CZ_MAX_BLOCKS)
        return cz__json_fail(c, sub, CZ_BLOCKS_LIMIT_FMT, p->name, (int)(n > INT_MAX ? INT_MAX : n),
                             CZ_MAX_BLOCKS);
    p->block_sizes = calloc(n, sizeof *p->block_sizes);
    if (!p->block_sizes)
        return cz__error_set(c->err, CZ_ENOMEM, "%s: out of memory", c->file);
    p->nblocks = (int)n;
    int64_t sum = 0;
    for (size_t i = 0; i < n; i++) {
        rc = cz__json_as_int64(c, json_array_get(sizes, i), cz__json_path_index(el, sub, i), 1,
                               INT64_MAX, &p->block_sizes[i]);
        if (rc != CZ_OK)
            return rc;
        sum = (sum > INT64_MAX - p->block_sizes[i]) ? INT64_MAX : sum + p->block_sizes[i];
    }
    if (sum != p->shape[p->block_dim])
        return cz__json_fail(c, sub,
                             "block sizes sum to %" PRId64 "; expected shape[%d] = %" PRId64, sum,
                             p->block_dim, p->shape[p->block_dim]);
    return CZ_OK;
}

/* "heads": {"dim", "size"}, after the blocks, which the heads must lie inside. */
static int parse_heads(expander *x, const json_t *heads, const char *path, cz_param_def *p)
{
    static const char *const keys[] = {"dim", "size", NULL};
    const cz_json_ctx *c = &x->ctx;
    char msg[512];
    int rc = cz__json_check_object(c, heads, path, keys);
    if (rc != CZ_OK)
        return rc;
    if (p->ndim != 2 || p->kind != CZ_KIND_MATRIX)
        return cz__json_fail(c, path,
                             "heads are allowed only on 2-D matrix parameters; found a %d-D %s "
                             "parameter",
                             p->ndim, cz__kind_name(p->kind));
    if ((rc = cz__json_get_int(c, heads, path, "dim", true, 0, 1, &p->head_dim)) != CZ_OK ||
        (rc = cz__json_get_int64(c, heads, path, "size", true, 1, INT64_MAX, &p->head_size)) !=
            CZ_OK)
        return rc;
    const char *problem = cz__heads_problem(p, 1, msg, sizeof msg);
    return problem ? cz__json_fail(c, path, "%s", problem) : CZ_OK;
}

static int parse_param(expander *x, const json_t *e, const char *path, const char *prefix,
                       int layer)
{
    const cz_json_ctx *c = &x->ctx;
    char sub[CZ_JSON_PATH_MAX], el[CZ_JSON_PATH_MAX];
    const char *name = NULL;
    const json_t *shape, *tp, *blocks;
    int rc = cz__json_check_object(c, e, path, param_keys);
    if (rc != CZ_OK)
        return rc;
    if (x->n == x->cap) {
        size_t ncap = x->cap ? x->cap * 2 : 64;
        cz_param_def *np = realloc(x->params, ncap * sizeof *np);
        if (!np)
            return cz__error_set(c->err, CZ_ENOMEM, "%s: out of memory", c->file);
        x->params = np;
        char **npaths = realloc(x->paths, ncap * sizeof *npaths);
        if (!npaths)
            return cz__error_set(c->err, CZ_ENOMEM, "%s: out of memory", c->file);
        x->paths = npaths;
        x->cap = ncap;
    }
    /* Count the entry before filling it so that a failure below frees what it holds. */
    cz_param_def *p = &x->params[x->n];
    memset(p, 0, sizeof *p);
    x->paths[x->n] = NULL;
    x->n++;
    p->block_dim = -1;
    p->layer = layer;

    if ((rc = cz__json_get_string(c, e, path, "name", true, &name)) != CZ_OK)
        return rc;
    if (name[0] == '\0')
        return cz__json_fail(c, cz__json_path_key(sub, path, "name"),
                             "expected a non-empty string, found \"\"");
    size_t plen = strlen(prefix), nlen = strlen(name);
    p->name = malloc(plen + nlen + 1);
    x->paths[x->n - 1] = cz__strdup(cz__json_path_key(sub, path, "name"));
    if (!p->name || !x->paths[x->n - 1])
        return cz__error_set(c->err, CZ_ENOMEM, "%s: out of memory", c->file);
    memcpy(p->name, prefix, plen);
    memcpy(p->name + plen, name, nlen + 1);
    /* The executor turns names into file names inside a folder: nothing may lead outside it. */
    const char *problem = cz__param_name_problem(p->name);
    if (problem)
        return cz__json_fail(c, cz__json_path_key(sub, path, "name"),
                             "parameter name \"%.*s\"%s %s; a name must be usable as a file name: "
                             "no '/', '\\' or control characters, no leading '.', at most %d bytes",
                             64, p->name, strlen(p->name) > 64 ? "..." : "", problem,
                             CZ_PARAM_NAME_MAX);

    if ((rc = cz__json_get_array(c, e, path, "shape", true, 0, &shape)) != CZ_OK)
        return rc;
    cz__json_path_key(sub, path, "shape");
    size_t nd = json_array_size(shape);
    if (nd < 1 || nd > 2)
        return cz__json_fail(c, sub, "expected 1 or 2 dimensions ([n] or [rows, cols]), found %zu",
                             nd);
    p->ndim = (int)nd;
    p->shape[1] = 1;
    for (size_t i = 0; i < nd; i++)
        if ((rc = cz__json_as_int64(c, json_array_get(shape, i), cz__json_path_index(el, sub, i), 1,
                                    INT64_MAX, &p->shape[i])) != CZ_OK)
            return rc;
    if (p->shape[0] > CZ_MODEL_MAX_ELEMENTS / p->shape[1])
        return cz__json_fail(c, sub,
                             "%" PRId64 " x %" PRId64 " elements; a model may hold at most %" PRId64
                             " (2^50) elements",
                             p->shape[0], p->shape[1], CZ_MODEL_MAX_ELEMENTS);
    /* Bounded in total too: bucket offsets and every sum over parameters build on it. */
    int64_t numel = p->shape[0] * p->shape[1];
    if (numel > CZ_MODEL_MAX_ELEMENTS - x->elements)
        return cz__json_fail(c, sub,
                             "the model's parameters up to this one hold more than %" PRId64
                             " (2^50) elements in total (%" PRId64 " before it, %" PRId64 " in it)",
                             CZ_MODEL_MAX_ELEMENTS, x->elements, numel);
    x->elements += numel;

    tp = json_object_get(e, "tp_dim");
    cz__json_path_key(sub, path, "tp_dim");
    if (!tp)
        return cz__json_fail(c, path, "missing required key \"tp_dim\" (0, 1 or null)");
    p->tp_dim = -1;
    if (!json_is_null(tp)) {
        if (!json_is_integer(tp) || json_integer_value(tp) < 0 ||
            json_integer_value(tp) >= p->ndim) {
            char found[96];
            cz__json_describe(tp, found, sizeof found);
            return cz__json_fail(c, sub, "expected %s for a %d-D parameter, found %s",
                                 p->ndim == 2 ? "0, 1 or null" : "0 or null", p->ndim, found);
        }
        p->tp_dim = (int)json_integer_value(tp);
    }

    int kind = p->ndim == 2 ? CZ_KIND_MATRIX : CZ_KIND_ELEMENTWISE;
    if ((rc = cz__json_get_enum(c, e, path, "optimizer", false, cz__kind_names, &kind)) != CZ_OK)
        return rc;
    if (kind == CZ_KIND_MATRIX && p->ndim != 2)
        return cz__json_fail(c, cz__json_path_key(sub, path, "optimizer"),
                             "a 1-D parameter cannot use the matrix optimizer; expected "
                             "\"elementwise\", found \"matrix\"");
    p->kind = (cz_param_kind)kind;

    blocks = json_object_get(e, "blocks");
    if (blocks &&
        (rc = parse_blocks(x, blocks, cz__json_path_key(sub, path, "blocks"), p)) != CZ_OK)
        return rc;
    const json_t *heads = json_object_get(e, "heads");
    if (heads)
        return parse_heads(x, heads, cz__json_path_key(sub, path, "heads"), p);
    return CZ_OK;
}

static int expand(expander *x, const json_t *arr, const char *path, const char *prefix, int layer,
                  int top)
{
    const cz_json_ctx *c = &x->ctx;
    char el[CZ_JSON_PATH_MAX], sub[CZ_JSON_PATH_MAX];
    size_t i;
    const json_t *e;
    json_array_foreach(arr, i, e)
    {
        int rc;
        cz__json_path_index(el, path, i);
        if (!json_is_object(e) || !json_object_get(e, "repeat")) {
            if ((rc = parse_param(x, e, el, prefix, layer)) != CZ_OK)
                return rc;
            continue;
        }
        int64_t reps = 0;
        const char *inner_prefix = NULL;
        const json_t *inner;
        if ((rc = cz__json_check_object(c, e, el, repeat_keys)) != CZ_OK ||
            (rc = cz__json_get_int64(c, e, el, "repeat", true, 1, INT_MAX, &reps)) != CZ_OK ||
            (rc = cz__json_get_string(c, e, el, "prefix", true, &inner_prefix)) != CZ_OK ||
            (rc = cz__json_get_array(c, e, el, "params", true, 1, &inner)) != CZ_OK)
            return rc;
        if (top && reps > INT_MAX - x->next_layer)
            return cz__json_fail(c, cz__json_path_key(sub, el, "repeat"),
                                 "too many layers in total");
        cz__json_path_key(sub, el, "params");
        for (int64_t r = 0; r < reps; r++) {
            char *own = substitute_index(inner_prefix, r);
            char *full = own ? malloc(strlen(prefix) + strlen(own) + 1) : NULL;
            if (!full) {
                free(own);
                return cz__error_set(c->err, CZ_ENOMEM, "%s: out of memory", c->file);
            }
            strcpy(full, prefix);
            strcat(full, own);
            free(own);
            rc = expand(x, inner, sub, full, top ? x->next_layer + (int)r : layer, 0);
            free(full);
            if (rc != CZ_OK)
                return rc;
        }
        if (top)
            x->next_layer += (int)reps;
    }
    return CZ_OK;
}

/* Duplicates are found by sorting (name, index) pairs: O(n log n) without a hash table. */
typedef struct name_ref {
    const char *name;
    size_t index;
} name_ref;

static int cmp_name_ref(const void *a, const void *b)
{
    const name_ref *x = a, *y = b;
    int c = strcmp(x->name, y->name);
    if (c)
        return c;
    return (x->index > y->index) - (x->index < y->index);
}

static int check_duplicates(expander *x)
{
    if (x->n < 2)
        return CZ_OK;
    name_ref *refs = malloc(x->n * sizeof *refs);
    if (!refs)
        return cz__error_set(x->ctx.err, CZ_ENOMEM, "%s: out of memory", x->ctx.file);
    for (size_t i = 0; i < x->n; i++)
        refs[i] = (name_ref){x->params[i].name, i};
    qsort(refs, x->n, sizeof *refs, cmp_name_ref);
    /* Report the duplicate that comes first in expansion order, whatever the sort did. */
    size_t first = SIZE_MAX, later = SIZE_MAX;
    for (size_t i = 1; i < x->n; i++)
        if (strcmp(refs[i].name, refs[i - 1].name) == 0 && refs[i].index < later &&
            (i < 2 || strcmp(refs[i - 2].name, refs[i].name) != 0)) {
            first = refs[i - 1].index;
            later = refs[i].index;
        }
    free(refs);
    if (later == SIZE_MAX)
        return CZ_OK;
    return cz__json_fail(&x->ctx, x->paths[later],
                         "duplicate parameter name \"%s\" (parameter %zu after expansion); first "
                         "defined at %s (parameter %zu)",
                         x->params[later].name, later, x->paths[first], first);
}

int cz_model_load(cz_model **out, const char *path, cz_error *err)
{
    json_t *root = NULL;
    char sha[65];
    *out = NULL;
    int rc;
    if ((rc = cz__json_load_file(&root, sha, path, err)) != CZ_OK)
        goto done;
    rc = cz__model_from_json(out, root, path, sha, err);
done:
    json_decref(root);
    return rc;
}

int cz_model_parse(cz_model **out, const char *json_text, const char *name, cz_error *err)
{
    json_error_t jerr;
    if (!out || !json_text)
        return cz__error_set(err, CZ_EINVALID, "cz_model_parse: out and json_text are required");
    *out = NULL;
    if (!name)
        name = "<model text>";
    /* The same parse rules as a file's (duplicate keys refused). */
    json_t *root = json_loads(json_text, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return cz__error_set(err, CZ_EPARSE, "%s:%d:%d: invalid JSON: %s", name, jerr.line,
                             jerr.column, jerr.text);
    int rc = cz__model_from_json(out, root, name, NULL, err);
    json_decref(root);
    return rc;
}

int cz__model_from_json(cz_model **out, const json_t *root, const char *path, const char *sha,
                        cz_error *err)
{
    static const char *const top_keys[] = {"schema",      "name",     "dtype", "params",
                                           "description", "megatron", NULL};
    cz_model *m = NULL;
    expander x = {.ctx = {path, err}};
    const char *name = NULL, *desc = NULL;
    const json_t *params;
    int dtype = 0;
    int rc;

    *out = NULL;
    if (!json_is_object(root)) {
        rc = cz__error_set(err, CZ_EINVALID, "%s: $: expected a JSON object", path);
        goto done;
    }
    if ((rc = cz__json_check_schema(&x.ctx, root, CZ_MODEL_SCHEMA)) != CZ_OK ||
        (rc = cz__json_check_object(&x.ctx, root, "$", top_keys)) != CZ_OK ||
        (rc = cz__json_get_string(&x.ctx, root, "$", "name", true, &name)) != CZ_OK ||
        (rc = cz__json_get_string(&x.ctx, root, "$", "description", false, &desc)) != CZ_OK ||
        (rc = cz__json_get_enum(&x.ctx, root, "$", "dtype", true, cz__dtype_names, &dtype)) !=
            CZ_OK ||
        (rc = cz__json_get_array(&x.ctx, root, "$", "params", true, 1, &params)) != CZ_OK)
        goto done;
    if (cz__model_count_params_json(params) > CZ_MODEL_MAX_PARAMS) {
        rc = cz__json_fail(&x.ctx, "$.params",
                           "expands to more than %zu parameters (or nests repeat blocks deeper "
                           "than 64)",
                           CZ_MODEL_MAX_PARAMS);
        goto done;
    }
    if ((rc = expand(&x, params, "$.params", "", -1, 1)) != CZ_OK)
        goto done;
    if (x.n == 0) {
        rc = cz__json_fail(&x.ctx, "$.params", "expands to no parameters");
        goto done;
    }
    if ((rc = check_duplicates(&x)) != CZ_OK)
        goto done;

    m = calloc(1, sizeof *m);
    if (!m || !(m->name = cz__strdup(name)) || !(m->source = cz__strdup(path))) {
        rc = cz__error_set(err, CZ_ENOMEM, "%s: out of memory", path);
        goto done;
    }
    if (sha) {
        memcpy(m->sha256, sha, 64);
        m->sha256[64] = '\0';
    } else if ((rc = cz__json_canonical_sha256(root, m->sha256, err)) != CZ_OK) {
        goto done;
    }
    m->dtype = (cz_dtype)dtype;
    m->nlayers = x.next_layer;
    m->nparams = x.n;
    m->params = x.params;
    x.params = NULL;
    if ((rc = cz__model_megatron_read(path, root, m, err)) != CZ_OK)
        goto done;
    *out = m;
    m = NULL;
done:
    for (size_t i = 0; x.params && i < x.n; i++) {
        free(x.params[i].name);
        free(x.params[i].block_sizes);
    }
    for (size_t i = 0; x.paths && i < x.n; i++)
        free(x.paths[i]);
    free(x.params);
    free(x.paths);
    cz_model_free(m);
    return rc;
}
