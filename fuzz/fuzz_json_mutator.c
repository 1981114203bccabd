/*
 * A structure-aware mutator for the JSON harnesses (fz_json_mutate, their
 * LLVMFuzzerCustomMutator through fuzz_json_custom.c), linked into every harness whose input is
 * a JSON document (model, cluster, plan, plan_exec, import_hf); the safetensors harness edits
 * its header with the same edits (fz_json_edit).
 *
 * Byte-level mutations mostly break a JSON file's syntax and so mostly test the parser. This
 * mutator parses the input with jansson, edits one to three values of the tree (integers
 * nudged, doubled, negated, set to 0, INT_MAX, INT64_MAX/MIN, 2^52 ± 1 or to another integer
 * of the document; reals scaled; array elements dropped, duplicated, swapped, moved or the array
 * reversed; strings replaced by another string of the document or by one of the formats' names;
 * object members dropped, or objects replaced by another object of the document) and writes
 * the document back, so that edited inputs reach the readers' semantic checks and what runs
 * after them. One call in four, and every input that does not parse, is left to libFuzzer's
 * byte-level mutator, which keeps the parser and the error paths covered.
 */
#include "cz_types.h"
#include "fuzz_util.h"

#include <jansson.h>
#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

size_t LLVMFuzzerMutate(uint8_t *data, size_t size, size_t max_size);

typedef struct node_ref {
    json_t *value;
    json_t *parent;  /* NULL for the root */
    const char *key; /* member name when parent is an object */
    size_t index;    /* position when parent is an array */
} node_ref;

typedef struct tree {
    node_ref *nodes;
    size_t n, cap;
    int oom;
} tree;

static uint64_t rng_next(uint64_t *s)
{
    /* splitmix64: libFuzzer hands one seed per call; the edits must depend on it only. */
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static size_t rng_below(uint64_t *s, size_t n)
{
    return n ? (size_t)(rng_next(s) % n) : 0;
}

static void collect(tree *t, json_t *v, json_t *parent, const char *key, size_t index)
{
    if (t->n == t->cap) {
        size_t cap = t->cap ? 2 * t->cap : 256;
        node_ref *grown = realloc(t->nodes, cap * sizeof *grown);
        if (!grown) {
            t->oom = 1;
            return;
        }
        t->nodes = grown;
        t->cap = cap;
    }
    t->nodes[t->n++] = (node_ref){v, parent, key, index};
    if (json_is_object(v)) {
        const char *k;
        json_t *c;
        json_object_foreach(v, k, c) collect(t, c, v, k, 0);
    } else if (json_is_array(v)) {
        size_t i;
        json_t *c;
        json_array_foreach(v, i, c) collect(t, c, v, NULL, i);
    }
}

/* A random node of the given jansson type, or NULL when the tree has none. */
static json_t *pick_of_type(const tree *t, json_type type, uint64_t *s)
{
    for (int tries = 0; tries < 64; tries++) {
        const node_ref *r = &t->nodes[rng_below(s, t->n)];
        if (json_typeof(r->value) == type)
            return r->value;
    }
    return NULL;
}

static json_int_t edit_integer(const tree *t, json_int_t v, uint64_t *s)
{
    json_t *other;
    switch (rng_below(s, 12)) {
    case 0:
        return v == INT64_MAX ? v : v + 1;
    case 1:
        return v == INT64_MIN ? v : v - 1;
    case 2:
        return v == INT64_MIN ? v : -v;
    case 3:
        return 0;
    case 4:
        return v > INT64_MAX / 2 || v < INT64_MIN / 2 ? v : 2 * v;
    case 5:
        return v / 2;
    case 6:
        return (json_int_t)INT_MAX + (json_int_t)rng_below(s, 3) - 1;
    case 7: /* the int64 range's ends, or the plan reader's limit on element counts (2^52,
             * CZ_PLAN_MAX_ELEMENTS) and its neighbours, where sums just fit or just do not */
        switch (rng_below(s, 3)) {
        case 0:
            return INT64_MAX;
        case 1:
            return INT64_MIN;
        default:
            return ((json_int_t)1 << 52) + (json_int_t)rng_below(s, 3) - 1;
        }
    case 8:
        return (json_int_t)rng_below(s, 8) - 1;
    case 9:
        other = pick_of_type(t, JSON_INTEGER, s);
        return other ? json_integer_value(other) : v;
    case 10:
        other = pick_of_type(t, JSON_INTEGER, s);
        if (other) {
            json_int_t o = json_integer_value(other);
            if ((o > 0 && v <= INT64_MAX - o) || (o <= 0 && v >= INT64_MIN - o))
                return v + o;
        }
        return v;
    default: {
        json_int_t d = (json_int_t)rng_below(s, 129) - 64;
        return (d > 0 && v > INT64_MAX - d) || (d < 0 && v < INT64_MIN - d) ? v : v + d;
    }
    }
}

static double edit_real(const tree *t, double v, uint64_t *s)
{
    json_t *other;
    switch (rng_below(s, 7)) {
    case 0:
        return v * 2;
    case 1:
        return -v;
    case 2:
        return 0;
    case 3:
        return v * (1 + 1e-6);
    case 4:
        return 1e308;
    case 5:
        other = pick_of_type(t, JSON_REAL, s);
        return other ? json_real_value(other) : v;
    default:
        return v / 3;
    }
}

static const char *const FZ_NAMES[] = {"llama",
                                       "mistral",
                                       "qwen2",
                                       "qwen3",
                                       "qwen2_moe",
                                       "qwen3_moe",
                                       "mixtral",
                                       "canzona.model/1",
                                       "canzona.cluster/1",
                                       "canzona.plan/1",
                                       "canzona.plan/2",
                                       "matrix",
                                       "elementwise",
                                       "alpha",
                                       "anchored",
                                       "even",
                                       "layerwise",
                                       "tpaware",
                                       "joint",
                                       "sc",
                                       "rollback",
                                       "slot",
                                       "single",
                                       "none",
                                       "muon",
                                       "soap",
                                       "shampoo",
                                       "adamw",
                                       "bf16",
                                       "fp16",
                                       "fp32",
                                       "numel",
                                       "flops",
                                       "time",
                                       "greedy",
                                       "ilp",
                                       "",
                                       NULL};

static json_t *edit_string(const tree *t, const json_t *v, uint64_t *s)
{
    size_t nnames = sizeof FZ_NAMES / sizeof FZ_NAMES[0] - 1;
    json_t *other;
    switch (rng_below(s, 3)) {
    case 0:
        return json_string(FZ_NAMES[rng_below(s, nnames)]);
    case 1:
        other = pick_of_type(t, JSON_STRING, s);
        return json_string(json_string_value(other ? other : v));
    default: {
        /* Keep a prefix: names that collide after truncation, and empty strings. */
        char buf[128];
        snprintf(buf, sizeof buf, "%s", json_string_value(v));
        buf[rng_below(s, strlen(buf) + 1)] = '\0';
        return json_string(buf);
    }
    }
}

/* Edits an array in place; returns 0 when it made a change. */
static int edit_array(const tree *t, json_t *a, uint64_t *s)
{
    size_t n = json_array_size(a);
    if (n == 0) {
        json_t *any = t->nodes[rng_below(s, t->n)].value;
        return json_array_append_new(a, json_deep_copy(any));
    }
    size_t i = rng_below(s, n), j = rng_below(s, n);
    json_t *x, *y;
    switch (rng_below(s, 5)) {
    case 0:
        return json_array_remove(a, i);
    case 1:
        return json_array_insert_new(a, j, json_deep_copy(json_array_get(a, i)));
    case 2:
        x = json_incref(json_array_get(a, i));
        y = json_incref(json_array_get(a, j));
        json_array_set_new(a, i, y);
        json_array_set_new(a, j, x);
        return 0;
    case 3:
        x = json_incref(json_array_get(a, i));
        json_array_remove(a, i);
        return json_array_insert_new(a, j < n - 1 ? j : n - 1, x);
    default:
        for (size_t k = 0; k < n / 2; k++) {
            x = json_incref(json_array_get(a, k));
            y = json_incref(json_array_get(a, n - 1 - k));
            json_array_set_new(a, k, y);
            json_array_set_new(a, n - 1 - k, x);
        }
        return 0;
    }
}

static void replace(const node_ref *r, json_t *nv)
{
    if (!nv)
        return;
    if (json_is_object(r->parent))
        json_object_set_new(r->parent, r->key, nv);
    else if (json_is_array(r->parent))
        json_array_set_new(r->parent, r->index, nv);
    else
        json_decref(nv);
}

static void mutate_once(json_t *root, uint64_t *s)
{
    tree t = {0};
    collect(&t, root, NULL, NULL, 0);
    if (t.oom || t.n < 2)
        goto out;
    const node_ref *r = &t.nodes[1 + rng_below(s, t.n - 1)];
    switch (json_typeof(r->value)) {
    case JSON_INTEGER:
        replace(r, json_integer(edit_integer(&t, json_integer_value(r->value), s)));
        break;
    case JSON_REAL:
        replace(r, json_real(edit_real(&t, json_real_value(r->value), s)));
        break;
    case JSON_STRING:
        replace(r, edit_string(&t, r->value, s));
        break;
    case JSON_TRUE:
    case JSON_FALSE:
        replace(r, json_boolean(!json_is_true(r->value)));
        break;
    case JSON_NULL:
        replace(r, json_integer((json_int_t)rng_below(s, 2)));
        break;
    case JSON_ARRAY:
        edit_array(&t, r->value, s);
        break;
    case JSON_OBJECT:
        if (rng_below(s, 4) == 0 && json_object_size(r->value) > 0) {
            /* Dropping a member: the readers must name the missing key. */
            size_t k = rng_below(s, json_object_size(r->value));
            const char *key;
            json_t *c;
            json_object_foreach(r->value, key, c)
            {
                if (k-- == 0) {
                    json_object_del(r->value, key);
                    break;
                }
            }
        } else if (r->parent) {
            /* Swap in a copy of another object of the plan (a param for a param, ...). */
            json_t *other = pick_of_type(&t, JSON_OBJECT, s);
            if (other && other != root && other != r->value)
                replace(r, json_deep_copy(other));
        }
        break;
    }
out:
    free(t.nodes);
}

/* A plan records a hash of its content that its consumers check (docs/FORMATS.md): an edited
 * plan with its old hash would only ever exercise that check. One edit in eight keeps the stale
 * hash so the check itself stays covered; the others get the hash of the edited content, made
 * by the library's own function, and reach the checks behind it. */
static void rehash_plan(json_t *root, uint64_t *s)
{
    const char *schema = json_string_value(json_object_get(root, "schema"));
    if (!schema || strncmp(schema, "canzona.plan/", 13) != 0 ||
        !json_is_string(json_object_get(root, "content_sha256")) || rng_below(s, 8) == 0)
        return;
    char hex[65];
    cz_error err;
    if (cz__plan_json_content_hash(root, hex, &err) == CZ_OK)
        json_object_set_new(root, "content_sha256", json_string(hex));
}

/* Writes the edited document into data (at most max bytes); returns its length, or 0 when it
 * does not fit. */
static size_t reserialize(const json_t *root, uint8_t *data, size_t max)
{
    char *text = json_dumps(root, JSON_COMPACT);
    size_t len = text ? strlen(text) : 0;
    if (len == 0 || len > max) {
        free(text);
        return 0;
    }
    memcpy(data, text, len);
    free(text);
    return len;
}

void fz_json_edit(json_t *root, uint64_t *s)
{
    size_t edits = 1 + rng_below(s, 3);
    for (size_t i = 0; i < edits; i++)
        mutate_once(root, s);
}

size_t fz_json_mutate(uint8_t *data, size_t size, size_t max_size, unsigned int seed)
{
    json_error_t je;
    uint64_t s = seed;
    json_t *root = rng_below(&s, 4) == 0 ? NULL : json_loadb((const char *)data, size, 0, &je);
    if (!json_is_object(root)) {
        json_decref(root);
        return LLVMFuzzerMutate(data, size, max_size);
    }
    fz_json_edit(root, &s);
    rehash_plan(root, &s);
    size_t len = reserialize(root, data, max_size);
    json_decref(root);
    return len ? len : LLVMFuzzerMutate(data, size, max_size);
}
