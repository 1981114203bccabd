/* Megatron-Core's rules that tie a model to its tensor-parallel size.
 *
 * The shapes in a model description already carry most of them: every dimension a parameter
 * splits across TP must divide by TP (ColumnParallelLinear, RowParallelLinear and
 * VocabParallelEmbedding divide it exactly), which the planner checks parameter by parameter.
 * Two rules are invisible in the shapes and are checked here from the model's "megatron"
 * record: attention heads and query groups (KV heads) are dealt whole to the TP ranks, so a
 * QKV matrix whose rows divide by TP can still be refused (28 heads of 128 at TP 8 give 448
 * rows per rank but 3.5 heads); and the vocabulary is padded by Megatron to a multiple of
 * make_vocab_size_divisible_by * TP, so a model padded for one TP has the wrong embedding
 * shape at another. */
#include "format_internal.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

int64_t cz__megatron_padded_vocab(int64_t vocab, int64_t divisible_by, int64_t tp)
{
    if (vocab < 1 || divisible_by < 1 || tp < 1 || divisible_by > INT64_MAX / tp)
        return -1;
    int64_t multiple = divisible_by * tp;
    int64_t rem = vocab % multiple;
    if (rem == 0)
        return vocab;
    if (vocab > INT64_MAX - (multiple - rem))
        return -1;
    return vocab + (multiple - rem);
}

int64_t cz__gcd64(int64_t a, int64_t b)
{
    while (b) {
        int64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

/* "1, 2, 4": the TP sizes (up to 64, the largest TP group anyone builds) that divide n. */
static void tp_choices(char *buf, size_t n, int64_t value)
{
    size_t len = 0;
    buf[0] = '\0';
    for (int64_t t = 1; t <= 64 && t <= value; t++) {
        if (value % t)
            continue;
        int w = snprintf(buf + len, n - len, "%s%" PRId64, len ? ", " : "", t);
        if (w < 0 || (size_t)w >= n - len)
            break;
        len += (size_t)w;
    }
}

int cz__megatron_check_heads(const char *where, const char *heads_key, int64_t heads,
                             const char *groups_key, int64_t groups, int64_t tp, cz_error *err)
{
    char ok[128];
    if (heads <= 0 || tp <= 1)
        return CZ_OK;
    if (groups <= 0)
        groups = heads;
    tp_choices(ok, sizeof ok, cz__gcd64(heads, groups));
    if (heads % tp)
        return cz__error_set(err, CZ_EINVALID,
                             "%s: %s (%" PRId64
                             ") must be a multiple of the tensor-parallel size (%" PRId64
                             "): Megatron-Core gives each TP rank whole attention heads; TP sizes "
                             "this model allows: %s",
                             where, heads_key, heads, tp, ok);
    if (groups % tp)
        return cz__error_set(err, CZ_EINVALID,
                             "%s: %s (the KV heads, %" PRId64
                             ") must be a multiple of the tensor-parallel size (%" PRId64
                             "): Megatron-Core gives each TP rank whole query groups; TP sizes "
                             "this model allows: %s",
                             where, groups_key, groups, tp, ok);
    return CZ_OK;
}

int cz__model_check_megatron(const cz_model *m, int tp, const char *cluster, cz_error *err)
{
    const cz_megatron_info *g = &m->megatron;
    const char *mfile = m->source ? m->source : m->name ? m->name : "(in memory)";
    const char *cfile = cluster ? cluster : "the cluster";
    int rc =
        cz__megatron_check_heads(mfile, "$.megatron.num_attention_heads", g->num_attention_heads,
                                 "$.megatron.num_query_groups", g->num_query_groups, tp, err);
    if (rc != CZ_OK) {
        /* Say where the TP size came from: the message above names only the model. */
        if (err) {
            size_t len = strlen(err->message);
            snprintf(err->message + len, sizeof err->message - len, " (TP %d from %s)", tp, cfile);
        }
        return rc;
    }
    if (g->padded_vocab_size <= 0)
        return CZ_OK;
    int64_t want = cz__megatron_padded_vocab(g->vocab_size, g->make_vocab_size_divisible_by, tp);
    if (want == g->padded_vocab_size)
        return CZ_OK;
    return cz__error_set(
        err, CZ_EMISMATCH,
        "%s: the vocabulary of %" PRId64 " is padded to %" PRId64
        " rows (a multiple of make_vocab_size_divisible_by %" PRId64 " x TP %" PRId64
        "), but %s has TP %d, at which Megatron-LM pads it to %" PRId64 " (a multiple of %" PRId64
        " x %d), so the embedding and output layer "
        "would not match the job's; re-import the model with `canzona import-hf "
        "--tp-size %d`",
        mfile, g->vocab_size, g->padded_vocab_size, g->make_vocab_size_divisible_by,
        g->tensor_model_parallel_size, cfile, tp, want, g->make_vocab_size_divisible_by, tp, tp);
}

/* ---- the model's "megatron" record ---- */

static int record_pair(const cz_json_ctx *c, const json_t *rec, const char *a, const char *b)
{
    bool has_a = json_object_get(rec, a) != NULL, has_b = json_object_get(rec, b) != NULL;
    if (has_a == has_b)
        return CZ_OK;
    return cz__json_fail(c, "$.megatron", "\"%s\" is given without \"%s\"; give both or neither",
                         has_a ? a : b, has_a ? b : a);
}

int cz__model_megatron_read(const char *file, const json_t *root, cz_model *m, cz_error *err)
{
    static const char *const keys[] = {"num_attention_heads",
                                       "num_query_groups",
                                       "vocab_size",
                                       "make_vocab_size_divisible_by",
                                       "tensor_model_parallel_size",
                                       "padded_vocab_size",
                                       NULL};
    static const char *const vocab_keys[] = {
        "make_vocab_size_divisible_by", "tensor_model_parallel_size", "padded_vocab_size", NULL};
    const cz_json_ctx ctx = {file, err}, *c = &ctx;
    cz_megatron_info g = {0};
    const json_t *rec = NULL;
    int rc = cz__json_get_object(c, root, "$", "megatron", false, keys, &rec);
    if (rc != CZ_OK || !rec)
        return rc;
    if ((rc = record_pair(c, rec, "num_attention_heads", "num_query_groups")) != CZ_OK)
        return rc;
    for (int i = 0; vocab_keys[i]; i++)
        if ((rc = record_pair(c, rec, "vocab_size", vocab_keys[i])) != CZ_OK)
            return rc;
    const int64_t max = (int64_t)1 << 40;
    if ((rc = cz__json_get_int64(c, rec, "$.megatron", "num_attention_heads", false, 1, max,
                                 &g.num_attention_heads)) != CZ_OK ||
        (rc = cz__json_get_int64(c, rec, "$.megatron", "num_query_groups", false, 1, max,
                                 &g.num_query_groups)) != CZ_OK ||
        (rc = cz__json_get_int64(c, rec, "$.megatron", "vocab_size", false, 1, max,
                                 &g.vocab_size)) != CZ_OK ||
        (rc = cz__json_get_int64(c, rec, "$.megatron", "make_vocab_size_divisible_by", false, 1,
                                 max, &g.make_vocab_size_divisible_by)) != CZ_OK ||
        (rc = cz__json_get_int64(c, rec, "$.megatron", "tensor_model_parallel_size", false, 1,
                                 1 << 20, &g.tensor_model_parallel_size)) != CZ_OK ||
        (rc = cz__json_get_int64(c, rec, "$.megatron", "padded_vocab_size", false, 1, max,
                                 &g.padded_vocab_size)) != CZ_OK)
        return rc;
    if (g.num_attention_heads && g.num_attention_heads % g.num_query_groups)
        return cz__json_fail(c, "$.megatron.num_query_groups",
                             "%" PRId64 " query groups do not divide %" PRId64
                             " attention heads; Megatron-Core needs num_attention_heads to be a "
                             "multiple of num_query_groups",
                             g.num_query_groups, g.num_attention_heads);
    if (g.vocab_size) {
        int64_t want = cz__megatron_padded_vocab(g.vocab_size, g.make_vocab_size_divisible_by,
                                                 g.tensor_model_parallel_size);
        if (want != g.padded_vocab_size)
            return cz__json_fail(
                c, "$.megatron.padded_vocab_size",
                "expected %" PRId64 " (vocab_size %" PRId64
                " rounded up to a multiple of make_vocab_size_divisible_by %" PRId64
                " x tensor_model_parallel_size %" PRId64 "), found %" PRId64,
                want, g.vocab_size, g.make_vocab_size_divisible_by, g.tensor_model_parallel_size,
                g.padded_vocab_size);
        /* The record must describe the shapes it sits beside. */
        for (size_t i = 0; i < m->nparams; i++) {
            const cz_param_def *p = &m->params[i];
            if (strcmp(p->name, "embedding.word_embeddings.weight") &&
                strcmp(p->name, "output_layer.weight"))
                continue;
            if (p->shape[0] != g.padded_vocab_size)
                return cz__json_fail(c, "$.megatron.padded_vocab_size",
                                     "%" PRId64 " does not match the %" PRId64
                                     " rows of parameter \"%s\"",
                                     g.padded_vocab_size, p->shape[0], p->name);
        }
    }
    m->megatron = g;
    return CZ_OK;
}
