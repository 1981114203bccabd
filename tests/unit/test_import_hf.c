/* Tests of cz__import_hf and cz__model_json_format: the bundled Qwen3 models are exactly what the
 * importer makes of the bundled config.json copies, and hand-checked small configs give the
 * expected Megatron names, shapes and element counts. */
#include "cz_types.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char *src_path(const char *rel)
{
    const char *root = getenv("CZ_SOURCE_DIR");
    if (!root)
        root = ".";
    size_t n = strlen(root) + strlen(rel) + 2;
    char *p = malloc(n);
    ck_assert_ptr_nonnull(p);
    snprintf(p, n, "%s/%s", root, rel);
    return p;
}

static char *read_text(const char *path)
{
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot open %s (is CZ_SOURCE_DIR set?)", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    ck_assert_ptr_nonnull(s);
    ck_assert_uint_eq(fread(s, 1, (size_t)n, f), (size_t)n);
    s[n] = '\0';
    fclose(f);
    return s;
}

static json_t *import_ok(const char *rel, const char *name, cz_dtype dtype)
{
    char *path = src_path(rel);
    cz_error err;
    cz_error_clear(&err);
    json_t *m = NULL;
    int rc = cz__import_hf(&m, path, name, dtype, &err);
    ck_assert_msg(rc == 0, "import of %s failed: %s", rel, err.message);
    ck_assert_ptr_nonnull(m);
    free(path);
    return m;
}

static json_t *import_with(const char *rel, int tp, int divisible_by, cz_error *err)
{
    char *path = src_path(rel);
    cz_import_hf_options o;
    cz_import_hf_options_init(&o);
    o.tp_size = tp;
    o.vocab_divisible_by = divisible_by;
    cz_error_clear(err);
    json_t *m = NULL;
    int rc = cz__import_hf_opts(&m, path, &o, err);
    ck_assert_int_eq(rc != 0, m == NULL);
    ck_assert_int_eq(err->code, rc);
    free(path);
    return m;
}

static int import_fail(const char *rel, cz_error *err)
{
    char *path = src_path(rel);
    cz_error_clear(err);
    json_t *m = (json_t *)1;
    int rc = cz__import_hf(&m, path, NULL, CZ_DTYPE_BF16, err);
    ck_assert_msg(rc != 0, "import of %s should fail", rel);
    ck_assert_ptr_null(m);
    ck_assert_int_eq(err->code, rc);
    free(path);
    return rc;
}

/* Walks the params tree with repeat blocks expanded, like a model loader does. */
typedef struct walk {
    const char *want;    /* full name to find, or NULL */
    const json_t *found; /* the parameter object with that name */
    long long elements;  /* total elements of all parameters */
    long long nparams;   /* number of parameters */
    long long matrix;    /* elements of "matrix" parameters */
} walk;

static void walk_params(walk *w, const json_t *params, const char *prefix)
{
    for (size_t i = 0; i < json_array_size(params); i++) {
        const json_t *p = json_array_get(params, i);
        const json_t *rep = json_object_get(p, "repeat");
        if (rep) {
            const char *pre = json_string_value(json_object_get(p, "prefix"));
            ck_assert_ptr_nonnull(pre);
            for (json_int_t k = 0; k < json_integer_value(rep); k++) {
                char full[512], idx[32];
                snprintf(idx, sizeof idx, "%lld", (long long)k);
                const char *brace = strstr(pre, "{i}");
                if (brace)
                    snprintf(full, sizeof full, "%s%.*s%s%s", prefix, (int)(brace - pre), pre, idx,
                             brace + 3);
                else
                    snprintf(full, sizeof full, "%s%s", prefix, pre);
                walk_params(w, json_object_get(p, "params"), full);
            }
            continue;
        }
        char name[512];
        snprintf(name, sizeof name, "%s%s", prefix, json_string_value(json_object_get(p, "name")));
        const json_t *shape = json_object_get(p, "shape");
        long long n = 1;
        for (size_t d = 0; d < json_array_size(shape); d++)
            n *= (long long)json_integer_value(json_array_get(shape, d));
        w->elements += n;
        w->nparams++;
        if (!strcmp(json_string_value(json_object_get(p, "optimizer")), "matrix"))
            w->matrix += n;
        if (w->want && !strcmp(name, w->want))
            w->found = p;
    }
}

static walk walk_model(const json_t *m, const char *want)
{
    walk w = {.want = want};
    walk_params(&w, json_object_get(m, "params"), "");
    return w;
}

static const json_t *find(const json_t *m, const char *name)
{
    walk w = walk_model(m, name);
    ck_assert_msg(w.found != NULL, "parameter %s not found", name);
    return w.found;
}

static void assert_absent(const json_t *m, const char *name)
{
    walk w = walk_model(m, name);
    ck_assert_msg(w.found == NULL, "parameter %s should not exist", name);
}

static void assert_shape(const json_t *p, long long r, long long c)
{
    const json_t *s = json_object_get(p, "shape");
    ck_assert_uint_eq(json_array_size(s), c < 0 ? 1 : 2);
    ck_assert_int_eq(json_integer_value(json_array_get(s, 0)), r);
    if (c >= 0)
        ck_assert_int_eq(json_integer_value(json_array_get(s, 1)), c);
}

static void assert_tp(const json_t *p, int tp_dim, const char *optimizer)
{
    const json_t *t = json_object_get(p, "tp_dim");
    if (tp_dim < 0)
        ck_assert(json_is_null(t));
    else
        ck_assert_int_eq(json_integer_value(t), tp_dim);
    ck_assert_str_eq(json_string_value(json_object_get(p, "optimizer")), optimizer);
}

static void assert_blocks(const json_t *p, long long a, long long b, long long c)
{
    const json_t *bl = json_object_get(p, "blocks");
    ck_assert_ptr_nonnull(bl);
    ck_assert_int_eq(json_integer_value(json_object_get(bl, "dim")), 0);
    const json_t *s = json_object_get(bl, "sizes");
    ck_assert_uint_eq(json_array_size(s), c < 0 ? 2 : 3);
    ck_assert_int_eq(json_integer_value(json_array_get(s, 0)), a);
    ck_assert_int_eq(json_integer_value(json_array_get(s, 1)), b);
    if (c >= 0)
        ck_assert_int_eq(json_integer_value(json_array_get(s, 2)), c);
}

/* ---- the bundled Qwen3 models ---- */

static const char *const qwen3[] = {"qwen3-0.6b", "qwen3-1.7b", "qwen3-4b",     "qwen3-8b",
                                    "qwen3-14b",  "qwen3-32b",  "qwen3-30b-a3b"};
/* Total parameters including embeddings, counted independently from the config.json values
 * (Hugging Face tensors: q, k, v, o, q_norm, k_norm, gate, up, down, norms); they agree with the
 * published sizes 0.6B, 1.7B, 4.0B, 8.2B, 14.8B, 32.8B and 30.5B. */
static const long long qwen3_total[] = {596049920LL,   1720574976LL,  4022468096LL, 8190735360LL,
                                        14768307200LL, 32762123264LL, 30532122624LL};

START_TEST(test_bundled_equal)
{
    char rel[256];
    snprintf(rel, sizeof rel, "plans/hf/%s.config.json", qwen3[_i]);
    /* The bundled files keep the config's vocabulary (see docs/FORMATS.md section 4). */
    cz_error ierr;
    json_t *imported = import_with(rel, 1, 1, &ierr);
    ck_assert_msg(imported != NULL, "%s", ierr.message);

    snprintf(rel, sizeof rel, "plans/models/%s.json", qwen3[_i]);
    char *path = src_path(rel);
    json_error_t jerr;
    json_t *bundled = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
    ck_assert_msg(bundled != NULL, "%s: %s", path, jerr.text);
    ck_assert_msg(json_equal(imported, bundled), "%s differs from its import", rel);

    /* Byte for byte, too: the bundled files are the importer's formatted output. */
    char *text = NULL;
    cz_error err;
    ck_assert_int_eq(cz__model_json_format(&text, imported, &err), 0);
    char *file = read_text(path);
    ck_assert_str_eq(text, file);

    walk w = walk_model(bundled, NULL);
    ck_assert_int_eq(w.elements, qwen3_total[_i]);
    ck_assert_str_eq(json_string_value(json_object_get(bundled, "name")), qwen3[_i]);

    free(file);
    free(text);
    free(path);
    json_decref(bundled);
    json_decref(imported);
}
END_TEST

START_TEST(test_qwen3_32b_shapes)
{
    json_t *m = import_ok("plans/hf/qwen3-32b.config.json", NULL, CZ_DTYPE_BF16);
    /* 64 heads x 128 = 8192 != hidden 5120: Q is wider than the residual stream. */
    const json_t *qkv = find(m, "decoder.layers.63.self_attention.linear_qkv.weight");
    assert_shape(qkv, 8192 + 2 * 1024, 5120);
    assert_tp(qkv, 0, "matrix");
    assert_blocks(qkv, 8192, 1024, 1024);
    const json_t *proj = find(m, "decoder.layers.0.self_attention.linear_proj.weight");
    assert_shape(proj, 5120, 8192);
    assert_tp(proj, 1, "matrix");
    const json_t *fc1 = find(m, "decoder.layers.5.mlp.linear_fc1.weight");
    assert_shape(fc1, 51200, 5120);
    assert_blocks(fc1, 25600, 25600, -1);
    assert_shape(find(m, "decoder.layers.5.mlp.linear_fc2.weight"), 5120, 25600);
    assert_shape(find(m, "decoder.layers.7.self_attention.q_layernorm.weight"), 128, -1);
    assert_tp(find(m, "output_layer.weight"), 0, "elementwise");
    assert_tp(find(m, "embedding.word_embeddings.weight"), 0, "elementwise");
    assert_absent(m, "decoder.layers.64.self_attention.linear_qkv.weight");
    assert_absent(m, "decoder.layers.0.self_attention.linear_qkv.bias");
    /* embedding, 64 x 8 per layer, final norm, output layer */
    ck_assert_int_eq(walk_model(m, NULL).nparams, 1 + 64 * 8 + 1 + 1);
    /* Order: embedding first, output layer last. */
    const json_t *params = json_object_get(m, "params");
    ck_assert_str_eq(json_string_value(json_object_get(json_array_get(params, 0), "name")),
                     "embedding.word_embeddings.weight");
    ck_assert_str_eq(json_string_value(json_object_get(json_array_get(params, 3), "name")),
                     "output_layer.weight");
    json_decref(m);
}
END_TEST

/* Llama-3.1-70B from its public config (plans/hf/llama-3.1-70b.config.json): the bundled file
 * is the importer's output, and its size is the one counted by hand from the config: per layer
 * q 8192^2 + k and v 1024 x 8192 each + o 8192^2 + gate, up and down 28672 x 8192 each + two
 * norms of 8192 = 855 654 400, times 80, plus the untied embedding and output layer (128256 x
 * 8192 each) and the final norm: 70 553 706 496 (published: 70.6B). */
START_TEST(test_llama31_70b_bundled)
{
    cz_error ierr;
    json_t *imported = import_with("plans/hf/llama-3.1-70b.config.json", 1, 1, &ierr);
    ck_assert_msg(imported != NULL, "%s", ierr.message);
    char *path = src_path("plans/models/llama-3.1-70b.json");
    char *text = NULL, *file = read_text(path);
    cz_error err;
    ck_assert_int_eq(cz__model_json_format(&text, imported, &err), 0);
    ck_assert_str_eq(text, file);
    ck_assert_int_eq(walk_model(imported, NULL).elements, 70553706496LL);
    const json_t *fc1 = find(imported, "decoder.layers.79.mlp.linear_fc1.weight");
    assert_shape(fc1, 2 * 28672, 8192);
    assert_blocks(fc1, 28672, 28672, -1);
    assert_blocks(find(imported, "decoder.layers.0.self_attention.linear_qkv.weight"), 8192, 1024,
                  1024);
    assert_tp(find(imported, "output_layer.weight"), 0, "elementwise");
    free(file);
    free(text);
    free(path);
    json_decref(imported);
}
END_TEST

START_TEST(test_qwen3_tied_has_no_output_layer)
{
    json_t *m = import_ok("plans/hf/qwen3-0.6b.config.json", "custom", CZ_DTYPE_FP32);
    assert_absent(m, "output_layer.weight");
    ck_assert_str_eq(json_string_value(json_object_get(m, "name")), "custom");
    ck_assert_str_eq(json_string_value(json_object_get(m, "dtype")), "fp32");
    /* 16 heads x 128 = 2048 != hidden 1024 */
    assert_shape(find(m, "decoder.layers.27.self_attention.linear_qkv.weight"), 2048 + 2 * 1024,
                 1024);
    json_decref(m);
}
END_TEST

START_TEST(test_qwen3_moe_experts)
{
    json_t *m = import_ok("plans/hf/qwen3-30b-a3b.config.json", NULL, CZ_DTYPE_BF16);
    const json_t *router = find(m, "decoder.layers.47.mlp.router.weight");
    assert_shape(router, 128, 2048);
    assert_tp(router, -1, "elementwise");
    const json_t *fc1 =
        find(m, "decoder.layers.47.mlp.experts.local_experts.127.linear_fc1.weight");
    assert_shape(fc1, 1536, 2048);
    assert_tp(fc1, 0, "matrix");
    assert_blocks(fc1, 768, 768, -1);
    const json_t *fc2 = find(m, "decoder.layers.0.mlp.experts.local_experts.0.linear_fc2.weight");
    assert_shape(fc2, 2048, 768);
    assert_tp(fc2, 1, "matrix");
    assert_shape(find(m, "decoder.layers.3.pre_mlp_layernorm.weight"), 2048, -1);
    assert_absent(m, "decoder.layers.0.mlp.linear_fc1.weight");
    assert_absent(m, "decoder.layers.0.mlp.experts.local_experts.128.linear_fc1.weight");
    /* 32 heads x 128 = 4096, 4 KV heads x 128 = 512 */
    assert_blocks(find(m, "decoder.layers.0.self_attention.linear_qkv.weight"), 4096, 512, 512);
    json_decref(m);
}
END_TEST

/* The other bundled MoE models: exactly the importer's output of their configs, with totals
 * counted by hand. Qwen3-235B-A22B (plans/hf/qwen3-235b-a22b.config.json, the public config of
 * Qwen/Qwen3-235B-A22B): per layer linear_qkv (64 x 128 + 2 x 4 x 128) x 4096 = 37 748 736,
 * linear_proj 4096 x 8192 = 33 554 432, QK-norms 2 x 128, two layer norms of 4096, a router
 * 128 x 4096 = 524 288 and 128 experts of 3 x 1536 x 4096 = 2 415 919 104; 94 layers, the untied
 * embedding and output layer 151936 x 4096 each and the final norm: 235 093 634 560 (published
 * 235B). test-moe (plans/hf/test-moe.config.json, the small MoE of the executor's tests): hidden
 * 128, 2 layers of 4 heads and 2 KV heads of 32 (linear_qkv 256 x 128, linear_proj 128 x 128),
 * 8 experts of 3 x 64 x 128, vocabulary 512: 625 408. */
static const struct {
    const char *name;
    long long total;
} moe_bundled[] = {{"qwen3-235b-a22b", 235093634560LL}, {"test-moe", 625408LL}};

START_TEST(test_moe_bundled)
{
    char rel[256];
    snprintf(rel, sizeof rel, "plans/hf/%s.config.json", moe_bundled[_i].name);
    cz_error ierr;
    char *path = src_path(rel);
    cz_import_hf_options o;
    cz_import_hf_options_init(&o);
    o.vocab_divisible_by = 1;
    o.dtype = !strcmp(moe_bundled[_i].name, "test-moe") ? CZ_DTYPE_FP32 : CZ_DTYPE_BF16;
    json_t *imported = NULL;
    ck_assert_msg(cz__import_hf_opts(&imported, path, &o, &ierr) == 0, "%s", ierr.message);
    free(path);
    snprintf(rel, sizeof rel, "plans/models/%s.json", moe_bundled[_i].name);
    path = src_path(rel);
    char *text = NULL, *file = read_text(path);
    cz_error err;
    ck_assert_int_eq(cz__model_json_format(&text, imported, &err), 0);
    ck_assert_str_eq(text, file);
    ck_assert_int_eq(walk_model(imported, NULL).elements, moe_bundled[_i].total);
    free(file);
    free(text);
    free(path);
    json_decref(imported);
}
END_TEST

/* DeepSeek-V3 from its public config (plans/hf/deepseek-v3.config.json). Counted by hand from
 * Hugging Face's DeepseekV3 modules: per layer the attention is input_layernorm 7168 + q_a_proj
 * 1536 x 7168 (11 010 048) + q_a_layernorm 1536 + q_b_proj 128 x (128 + 64) x 1536
 * (37 748 736) + kv_a_proj_with_mqa (512 + 64) x 7168 (4 128 768) + kv_a_layernorm 512 +
 * kv_b_proj 128 x (128 + 128) x 512 (16 777 216) + o_proj 7168 x 128 x 128 (117 440 512) =
 * 187 114 496, and post_attention_layernorm 7168; layers 0-2 (first_k_dense_replace 3) a dense
 * MLP of 3 x 7168 x 18432 = 396 361 728; layers 3-60 a router 256 x 7168 (1 835 008), 256
 * experts of 3 x 2048 x 7168 (11 274 289 152) and one shared expert of 3 x 2048 x 7168
 * (44 040 192) = 11 320 164 352; the untied embedding and lm_head 129280 x 7168 each
 * (926 679 040) and the final norm 7168: in all 671 026 404 352 (published: 671B without the
 * multi-token-prediction module). Parameters: 2 + 1 + 3 x 11 + 58 x (8 + 1 + 1 + 512 + 2)
 * = 30 428. */
START_TEST(test_deepseek_v3)
{
    cz_error ierr;
    json_t *m = import_with("plans/hf/deepseek-v3.config.json", 1, 1, &ierr);
    ck_assert_msg(m != NULL, "%s", ierr.message);
    walk w = walk_model(m, NULL);
    ck_assert_int_eq(w.elements, 671026404352LL);
    ck_assert_int_eq(w.nparams, 30428);
    /* The bundled file is the importer's output. */
    char *path = src_path("plans/models/deepseek-v3.json");
    char *text = NULL, *file = read_text(path);
    cz_error err;
    ck_assert_int_eq(cz__model_json_format(&text, m, &err), 0);
    ck_assert_str_eq(text, file);
    free(file);
    free(text);
    free(path);
    /* MLA as Megatron-Core's MLASelfAttention registers it: the down projections duplicated
     * (replicated over TP), the up projections column-parallel with the LoRA norms fused. */
    const json_t *qd = find(m, "decoder.layers.0.self_attention.linear_q_down_proj.weight");
    assert_shape(qd, 1536, 7168);
    assert_tp(qd, -1, "matrix");
    assert_shape(find(m, "decoder.layers.0.self_attention.linear_q_up_proj.layer_norm_weight"),
                 1536, -1);
    const json_t *qu = find(m, "decoder.layers.60.self_attention.linear_q_up_proj.weight");
    assert_shape(qu, 128 * 192, 1536);
    assert_tp(qu, 0, "matrix");
    const json_t *kvd = find(m, "decoder.layers.3.self_attention.linear_kv_down_proj.weight");
    assert_shape(kvd, 512 + 64, 7168);
    assert_tp(kvd, -1, "matrix");
    const json_t *kvu = find(m, "decoder.layers.3.self_attention.linear_kv_up_proj.weight");
    assert_shape(kvu, 128 * 256, 512);
    assert_tp(kvu, 0, "matrix");
    assert_tp(find(m, "decoder.layers.3.self_attention.linear_kv_up_proj.layer_norm_weight"), -1,
              "elementwise");
    const json_t *proj = find(m, "decoder.layers.3.self_attention.linear_proj.weight");
    assert_shape(proj, 7168, 128 * 128);
    assert_tp(proj, 1, "matrix");
    assert_absent(m, "decoder.layers.0.self_attention.linear_qkv.weight");
    assert_absent(m, "decoder.layers.0.self_attention.linear_q_proj.weight");
    /* Three leading dense layers, then MoE layers with a router, 256 routed experts and the
     * shared expert; the router's expert bias is a buffer, not a parameter. */
    assert_shape(find(m, "decoder.layers.2.mlp.linear_fc1.weight"), 2 * 18432, 7168);
    assert_absent(m, "decoder.layers.3.mlp.linear_fc1.weight");
    assert_absent(m, "decoder.layers.2.mlp.router.weight");
    assert_shape(find(m, "decoder.layers.3.mlp.router.weight"), 256, 7168);
    assert_absent(m, "decoder.layers.3.mlp.router.expert_bias");
    const json_t *e = find(m, "decoder.layers.60.mlp.experts.local_experts.255.linear_fc1.weight");
    assert_shape(e, 2 * 2048, 7168);
    assert_blocks(e, 2048, 2048, -1);
    assert_absent(m, "decoder.layers.60.mlp.experts.local_experts.256.linear_fc1.weight");
    assert_shape(find(m, "decoder.layers.60.mlp.shared_experts.linear_fc2.weight"), 7168, 2048);
    assert_absent(m, "decoder.layers.60.mlp.shared_experts.gate_weight");
    assert_shape(find(m, "decoder.layers.60.pre_mlp_layernorm.weight"), 7168, -1);
    assert_shape(find(m, "decoder.layers.0.input_layernorm.weight"), 7168, -1);
    assert_absent(m, "decoder.layers.61.input_layernorm.weight"); /* no MTP layer */
    json_decref(m);
}
END_TEST

/* The expert model-parallel size the job will use is checked against the experts (EP 3 does
 * not divide 256), and a dense model has none to split; Kimi K2's model_type is DeepSeek-V3's
 * architecture, and a config without a q LoRA rank gets one column-parallel linear_q_proj. */
START_TEST(test_deepseek_ep_and_variants)
{
    char *path = src_path("plans/hf/deepseek-v3.config.json");
    cz_import_hf_options o;
    cz_import_hf_options_init(&o);
    cz_error err;
    json_t *m = NULL;
    o.ep_size = 3;
    ck_assert_int_eq(cz__import_hf_opts(&m, path, &o, &err), CZ_EINVALID);
    ck_assert_ptr_null(m);
    ck_assert_msg(strstr(err.message, "n_routed_experts (256)") &&
                      strstr(err.message, "expert model-parallel size (3)"),
                  "%s", err.message);
    o.ep_size = 64;
    ck_assert_int_eq(cz__import_hf_opts(&m, path, &o, &err), 0);
    json_decref(m);
    free(path);
    path = src_path("plans/hf/qwen3-8b.config.json");
    o.ep_size = 2;
    m = NULL;
    ck_assert_int_eq(cz__import_hf_opts(&m, path, &o, &err), CZ_EINVALID);
    ck_assert_msg(strstr(err.message, "no MoE layer"), "%s", err.message);
    free(path);

    m = import_ok("tests/data/hf/kimi-tiny.config.json", NULL, CZ_DTYPE_BF16);
    ck_assert_str_eq(json_string_value(json_object_get(m, "name")), "kimi-tiny");
    assert_shape(find(m, "decoder.layers.0.mlp.linear_fc1.weight"), 2 * 96, 64);
    assert_shape(find(m, "decoder.layers.1.mlp.experts.local_experts.5.linear_fc2.weight"), 64, 16);
    /* two shared experts of 16 make one MLP of 32 */
    assert_shape(find(m, "decoder.layers.2.mlp.shared_experts.linear_fc1.weight"), 2 * 32, 64);
    /* no q LoRA: one column-parallel projection of 4 heads x (8 + 4) rows */
    const json_t *q = find(m, "decoder.layers.2.self_attention.linear_q_proj.weight");
    assert_shape(q, 4 * 12, 64);
    assert_tp(q, 0, "matrix");
    assert_absent(m, "decoder.layers.2.self_attention.linear_q_down_proj.weight");
    assert_shape(find(m, "decoder.layers.2.self_attention.linear_kv_up_proj.weight"), 4 * (8 + 8),
                 16);
    json_decref(m);
}
END_TEST

/* ---- hand-written small configs ---- */

START_TEST(test_mixtral)
{
    json_t *m = import_ok("tests/data/hf/mixtral-tiny.config.json", NULL, CZ_DTYPE_BF16);
    ck_assert_str_eq(json_string_value(json_object_get(m, "name")), "mixtral-tiny");
    /* hidden 64, 4 heads of 16, 2 KV heads: Q 64 rows, K and V 32 each */
    const json_t *qkv = find(m, "decoder.layers.1.self_attention.linear_qkv.weight");
    assert_shape(qkv, 128, 64);
    assert_blocks(qkv, 64, 32, 32);
    assert_absent(m, "decoder.layers.0.self_attention.q_layernorm.weight");
    assert_absent(m, "decoder.layers.0.self_attention.linear_qkv.bias");
    assert_shape(find(m, "decoder.layers.1.mlp.router.weight"), 4, 64);
    /* Mixtral's intermediate_size is the per-expert FFN width. */
    const json_t *fc1 = find(m, "decoder.layers.1.mlp.experts.local_experts.3.linear_fc1.weight");
    assert_shape(fc1, 448, 64);
    assert_blocks(fc1, 224, 224, -1);
    assert_shape(find(m, "decoder.layers.0.mlp.experts.local_experts.0.linear_fc2.weight"), 64,
                 224);
    assert_absent(m, "decoder.layers.0.mlp.experts.local_experts.4.linear_fc2.weight");
    assert_absent(m, "decoder.layers.2.mlp.router.weight");
    /* vocab_size 1000, padded by default to a multiple of 128 (TP 1) */
    assert_shape(find(m, "output_layer.weight"), 1024, 64);
    /* per layer: 64 + 8192 + 4096 + 64 + 256 + 4 x (28672 + 14336) = 184704;
     * 2 layers + embedding 65536 + final norm 64 + output 65536 */
    walk w = walk_model(m, NULL);
    ck_assert_int_eq(w.elements, 2 * 184704 + 65536 + 64 + 65536);
    ck_assert_int_eq(w.matrix, 2 * (8192 + 4096 + 4 * (28672 + 14336)));
    json_decref(m);
}
END_TEST

START_TEST(test_llama_bias)
{
    json_t *m = import_ok("tests/data/hf/llama-bias.config.json", NULL, CZ_DTYPE_FP16);
    /* name from _name_or_path "example/Tiny-Llama-Bias/", lowercased */
    ck_assert_str_eq(json_string_value(json_object_get(m, "name")), "tiny-llama-bias");
    ck_assert_str_eq(json_string_value(json_object_get(m, "dtype")), "fp16");
    /* num_key_value_heads absent: = 4 heads; head_dim absent: 64 / 4 = 16 */
    const json_t *qkv = find(m, "decoder.layers.2.self_attention.linear_qkv.weight");
    assert_shape(qkv, 192, 64);
    assert_blocks(qkv, 64, 64, 64);
    const json_t *qb = find(m, "decoder.layers.2.self_attention.linear_qkv.bias");
    assert_shape(qb, 192, -1);
    assert_tp(qb, 0, "elementwise");
    /* Llama's attention_bias also gives o_proj a bias, replicated across TP. */
    const json_t *pb = find(m, "decoder.layers.0.self_attention.linear_proj.bias");
    assert_shape(pb, 64, -1);
    assert_tp(pb, -1, "elementwise");
    assert_absent(m, "decoder.layers.0.self_attention.q_layernorm.weight");
    assert_absent(m, "decoder.layers.0.mlp.linear_fc1.bias");
    assert_absent(m, "output_layer.weight");
    const json_t *fc1 = find(m, "decoder.layers.1.mlp.linear_fc1.weight");
    assert_shape(fc1, 256, 64);
    assert_blocks(fc1, 128, 128, -1);
    /* per layer 64 + 12288 + 192 + 4096 + 64 + 64 + 16384 + 8192 = 41344 */
    walk w = walk_model(m, NULL);
    /* tied embedding: vocab_size 500 padded to 512 */
    ck_assert_int_eq(w.elements, 3 * 41344 + 512 * 64 + 64);
    ck_assert_int_eq(w.nparams, 1 + 3 * 8 + 1);
    /* The final norm closes the list when embeddings are tied. */
    const json_t *params = json_object_get(m, "params");
    ck_assert_str_eq(json_string_value(json_object_get(
                         json_array_get(params, json_array_size(params) - 1), "name")),
                     "decoder.final_layernorm.weight");
    json_decref(m);
}
END_TEST

START_TEST(test_qwen2_moe_mixed_layers)
{
    json_t *m = import_ok("tests/data/hf/qwen2-moe-mixed.config.json", NULL, CZ_DTYPE_BF16);
    /* Layer 0 is dense (mlp_only_layers), 1 and 2 sparse: one block per layer. */
    const json_t *params = json_object_get(m, "params");
    ck_assert_uint_eq(json_array_size(params), 1 + 3 + 2);
    const json_t *b1 = json_array_get(params, 2);
    ck_assert_int_eq(json_integer_value(json_object_get(b1, "repeat")), 1);
    ck_assert_str_eq(json_string_value(json_object_get(b1, "prefix")), "decoder.layers.1.");
    assert_shape(find(m, "decoder.layers.0.mlp.linear_fc1.weight"), 320, 64);
    assert_absent(m, "decoder.layers.0.mlp.router.weight");
    assert_absent(m, "decoder.layers.1.mlp.linear_fc1.weight");
    assert_shape(find(m, "decoder.layers.2.mlp.router.weight"), 8, 64);
    assert_shape(find(m, "decoder.layers.2.mlp.experts.local_experts.7.linear_fc1.weight"), 64, 64);
    /* Qwen2 always has a Q/K/V bias, never an output bias, and no QK norm. */
    assert_shape(find(m, "decoder.layers.1.self_attention.linear_qkv.bias"), 192, -1);
    assert_absent(m, "decoder.layers.1.self_attention.linear_proj.bias");
    assert_absent(m, "decoder.layers.1.self_attention.q_layernorm.weight");
    const json_t *sfc1 = find(m, "decoder.layers.1.mlp.shared_experts.linear_fc1.weight");
    assert_shape(sfc1, 192, 64);
    assert_blocks(sfc1, 96, 96, -1);
    assert_shape(find(m, "decoder.layers.1.mlp.shared_experts.linear_fc2.weight"), 64, 96);
    const json_t *gate = find(m, "decoder.layers.2.mlp.shared_experts.gate_weight");
    assert_shape(gate, 1, 64);
    assert_tp(gate, -1, "elementwise");
    /* dense layer 47424, sparse layers 84864, embeddings 2 x 384 x 64 (vocab_size 300 padded
     * to 384), final norm 64 */
    ck_assert_int_eq(walk_model(m, NULL).elements, 47424 + 2 * 84864 + 2 * 384 * 64 + 64);
    json_decref(m);
}
END_TEST

/* ---- Megatron's vocabulary padding and TP rules ---- */

static long long megatron_int(const json_t *m, const char *key)
{
    const json_t *v = json_object_get(json_object_get(m, "megatron"), key);
    ck_assert_msg(json_is_integer(v), "megatron.%s missing", key);
    return (long long)json_integer_value(v);
}

/* Megatron-LM's _vocab_size_with_padding: round up to make_vocab_size_divisible_by (128) x TP.
 * Llama-3.1's 128256 is 1002 x 128; Qwen3's 151936 is 1187 x 128. */
static const struct {
    const char *config;
    int tp;
    long long padded;
} padding_cases[] = {
    {"tests/data/hf/llama-3.1-8b.config.json", 1, 128256},
    {"tests/data/hf/llama-3.1-8b.config.json", 4, 128512}, /* 251 x 512 */
    {"tests/data/hf/llama-3.1-8b.config.json", 8, 129024}, /* 126 x 1024 */
    {"plans/hf/qwen3-8b.config.json", 1, 151936},
    {"plans/hf/qwen3-8b.config.json", 4, 152064}, /* 297 x 512 */
    {"plans/hf/qwen3-8b.config.json", 8, 152576}, /* 149 x 1024 */
};

START_TEST(test_vocab_padding_recorded)
{
    cz_error err;
    json_t *m = import_with(padding_cases[_i].config, padding_cases[_i].tp, 128, &err);
    ck_assert_msg(m != NULL, "%s", err.message);
    long long want = padding_cases[_i].padded;
    const json_t *shape = json_object_get(find(m, "embedding.word_embeddings.weight"), "shape");
    ck_assert_int_eq(json_integer_value(json_array_get(shape, 0)), want);
    shape = json_object_get(find(m, "output_layer.weight"), "shape");
    ck_assert_int_eq(json_integer_value(json_array_get(shape, 0)), want);
    ck_assert_int_eq(megatron_int(m, "padded_vocab_size"), want);
    ck_assert_int_eq(megatron_int(m, "tensor_model_parallel_size"), padding_cases[_i].tp);
    ck_assert_int_eq(megatron_int(m, "make_vocab_size_divisible_by"), 128);
    json_decref(m);
}
END_TEST

START_TEST(test_vocab_padding_off)
{
    cz_error err;
    /* 1 keeps only the multiple of TP that the vocab-parallel embedding needs. */
    json_t *m = import_with("tests/data/hf/llama-bias.config.json", 1, 1, &err);
    ck_assert_msg(m != NULL, "%s", err.message);
    assert_shape(find(m, "embedding.word_embeddings.weight"), 500, 64);
    json_decref(m);
    m = import_with("tests/data/hf/llama-bias.config.json", 4, 1, &err);
    ck_assert_msg(m != NULL, "%s", err.message);
    assert_shape(find(m, "embedding.word_embeddings.weight"), 500, 64);
    json_decref(m);
    m = import_with("tests/data/hf/mixtral-tiny.config.json", 2, 1, &err);
    ck_assert_msg(m != NULL, "%s", err.message);
    assert_shape(find(m, "output_layer.weight"), 1000, 64);
    json_decref(m);
    m = import_with("tests/data/hf/llama-3.1-8b.config.json", 8, 1, &err);
    ck_assert_msg(m != NULL, "%s", err.message);
    assert_shape(find(m, "output_layer.weight"), 128256, 4096);
    ck_assert_int_eq(megatron_int(m, "num_attention_heads"), 32);
    ck_assert_int_eq(megatron_int(m, "num_query_groups"), 8);
    json_decref(m);
}
END_TEST

START_TEST(test_heads_not_divisible_by_tp)
{
    cz_error err;
    /* Qwen2.5-7B: 28 query heads, 4 KV heads. TP 8 gives 3.5 heads per rank. */
    ck_assert_ptr_null(import_with("tests/data/hf/qwen2.5-7b.config.json", 8, 128, &err));
    ck_assert_int_eq(err.code, CZ_EINVALID);
    ck_assert_ptr_nonnull(strstr(err.message, "qwen2.5-7b.config.json"));
    ck_assert_ptr_nonnull(strstr(err.message, "$.num_attention_heads (28)"));
    ck_assert_ptr_nonnull(strstr(err.message, "tensor-parallel size (8)"));
    ck_assert_ptr_nonnull(strstr(err.message, "1, 2, 4"));
    json_t *m = import_with("tests/data/hf/qwen2.5-7b.config.json", 4, 128, &err);
    ck_assert_msg(m != NULL, "%s", err.message);
    json_decref(m);
    /* Llama-3.1-70B: 64 heads but 8 KV heads; TP 16 splits a KV head. */
    ck_assert_ptr_null(import_with("tests/data/hf/llama-3.1-70b.config.json", 16, 128, &err));
    ck_assert_ptr_nonnull(strstr(err.message, "$.num_key_value_heads (the KV heads, 8)"));
    ck_assert_ptr_nonnull(strstr(err.message, "tensor-parallel size (16)"));
    m = import_with("tests/data/hf/llama-3.1-70b.config.json", 8, 128, &err);
    ck_assert_msg(m != NULL, "%s", err.message);
    json_decref(m);
}
END_TEST

START_TEST(test_ffn_not_divisible_by_tp)
{
    cz_error err;
    ck_assert_ptr_null(import_with("tests/data/hf/odd-ffn.config.json", 4, 128, &err));
    ck_assert_int_eq(err.code, CZ_EINVALID);
    ck_assert_ptr_nonnull(strstr(err.message, "$.intermediate_size (150)"));
    ck_assert_ptr_nonnull(strstr(err.message, "tensor-parallel size (4)"));
    json_t *m = import_with("tests/data/hf/odd-ffn.config.json", 2, 128, &err);
    ck_assert_msg(m != NULL, "%s", err.message);
    json_decref(m);
    /* The experts' FFN follows the same rule (expert TP defaults to TP). */
    ck_assert_ptr_null(import_with("tests/data/hf/moe-odd-ffn.config.json", 4, 1, &err));
    ck_assert_ptr_nonnull(strstr(err.message, "$.moe_intermediate_size (30)"));
    m = import_with("tests/data/hf/moe-odd-ffn.config.json", 2, 1, &err);
    ck_assert_msg(m != NULL, "%s", err.message);
    json_decref(m);
}
END_TEST

START_TEST(test_split_options)
{
    /* Megatron's Muon orthogonalizes the fused gate/up matrix whole: --split-gate-up no writes
     * linear_fc1 without blocks (dense, experts and shared experts alike); --split-qkv no does
     * the same for linear_qkv. Shapes and element counts do not change. */
    char *path = src_path("tests/data/hf/qwen2-moe-mixed.config.json");
    cz_import_hf_options o;
    cz_error err;
    json_t *plain = import_ok("tests/data/hf/qwen2-moe-mixed.config.json", NULL, CZ_DTYPE_BF16);
    static const char *const fc1[] = {
        "decoder.layers.0.mlp.linear_fc1.weight",
        "decoder.layers.1.mlp.experts.local_experts.3.linear_fc1.weight",
        "decoder.layers.2.mlp.shared_experts.linear_fc1.weight"};
    static const char *const qkv = "decoder.layers.1.self_attention.linear_qkv.weight";
    for (int variant = 0; variant < 2; variant++) {
        cz_import_hf_options_init(&o);
        if (variant == 0)
            o.split_gate_up = 0;
        else
            o.split_qkv = 0;
        json_t *m = NULL;
        ck_assert_msg(cz__import_hf_opts(&m, path, &o, &err) == 0, "%s", err.message);
        for (int i = 0; i < 3; i++) {
            const json_t *p = find(m, fc1[i]);
            ck_assert_msg((json_object_get(p, "blocks") == NULL) == (variant == 0), "%s", fc1[i]);
            ck_assert(json_equal(json_object_get(p, "shape"),
                                 json_object_get(find(plain, fc1[i]), "shape")));
        }
        ck_assert((json_object_get(find(m, qkv), "blocks") == NULL) == (variant == 1));
        ck_assert_int_eq(walk_model(m, NULL).elements, walk_model(plain, NULL).elements);
        json_decref(m);
    }
    json_decref(plain);
    free(path);
}
END_TEST

START_TEST(test_per_head)
{
    /* --per-head: heads of head_dim on the fused QKV (inside its blocks) with qkv and qkvo,
     * on linear_proj's columns with qkvo only; MLA's Q and KV up-projections by their per-head
     * row counts; the model loads (heads whole in every block), and shapes do not change. */
    static const struct {
        const char *config, *param;
        int from, dim;
    } want[] = {
        {"tests/data/hf/qwen2-moe-mixed.config.json",
         "decoder.layers.1.self_attention.linear_qkv.weight", CZ_PER_HEAD_QKV, 0},
        {"tests/data/hf/qwen2-moe-mixed.config.json",
         "decoder.layers.1.self_attention.linear_proj.weight", CZ_PER_HEAD_QKVO, 1},
        {"tests/data/hf/kimi-tiny.config.json",
         "decoder.layers.0.self_attention.linear_kv_up_proj.weight", CZ_PER_HEAD_QKV, 0},
        {"tests/data/hf/kimi-tiny.config.json",
         "decoder.layers.0.self_attention.linear_proj.weight", CZ_PER_HEAD_QKVO, 1},
    };
    char dir[512];
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/cz_per_head_XXXXXX", tmp && *tmp ? tmp : "/tmp");
    ck_assert_ptr_nonnull(mkdtemp(dir));
    for (int mode = CZ_PER_HEAD_NONE; mode <= CZ_PER_HEAD_QKVO; mode++)
        for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
            char *path = src_path(want[i].config);
            cz_import_hf_options o;
            cz_error err;
            cz_import_hf_options_init(&o);
            o.per_head = mode;
            json_t *m = NULL;
            ck_assert_msg(cz__import_hf_opts(&m, path, &o, &err) == 0, "%s", err.message);
            const json_t *p = find(m, want[i].param), *h = json_object_get(p, "heads");
            ck_assert_msg((h != NULL) == (mode >= want[i].from), "%s mode %d", want[i].param, mode);
            if (h) {
                ck_assert_int_eq(json_integer_value(json_object_get(h, "dim")), want[i].dim);
                int64_t rows = json_integer_value(json_array_get(json_object_get(p, "shape"), 0));
                int64_t cols = json_integer_value(json_array_get(json_object_get(p, "shape"), 1));
                int64_t size = json_integer_value(json_object_get(h, "size"));
                ck_assert_int_eq((want[i].dim == 0 ? rows : cols) % size, 0);
                ck_assert_int_gt(size, 1);
            }
            /* What the loader says about the heads: written as the model file would be. */
            char *text = NULL, file[4096];
            ck_assert_int_eq(cz__model_json_format(&text, m, &err), 0);
            snprintf(file, sizeof file, "%s/per_head_%d_%zu.json", dir, mode, i);
            FILE *f = fopen(file, "w");
            ck_assert_ptr_nonnull(f);
            fputs(text, f);
            fclose(f);
            cz_model *model = NULL;
            ck_assert_msg(cz_model_load(&model, file, &err) == 0, "%s", err.message);
            cz_model_free(model);
            remove(file);
            cz_free(text);
            json_decref(m);
            free(path);
        }
    rmdir(dir);
}
END_TEST

/* ---- errors ---- */

START_TEST(test_unknown_model_type)
{
    cz_error err;
    ck_assert_int_eq(import_fail("tests/data/hf/unknown-arch.config.json", &err), CZ_EUNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(err.message, "unknown-arch.config.json"));
    ck_assert_ptr_nonnull(strstr(err.message, "$.model_type"));
    ck_assert_ptr_nonnull(strstr(err.message, "gemma2"));
    ck_assert_ptr_nonnull(strstr(err.message, "qwen3_moe"));
    ck_assert_ptr_nonnull(strstr(err.message, "mixtral"));
}
END_TEST

START_TEST(test_unknown_architecture)
{
    cz_error err;
    ck_assert_int_eq(import_fail("tests/data/hf/unknown-arch-only.config.json", &err),
                     CZ_EUNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(err.message, "$.architectures[0]"));
    ck_assert_ptr_nonnull(strstr(err.message, "FalconForCausalLM"));
    ck_assert_ptr_nonnull(strstr(err.message, "LlamaForCausalLM"));
}
END_TEST

START_TEST(test_missing_field)
{
    cz_error err;
    ck_assert_int_eq(import_fail("tests/data/hf/missing-hidden.config.json", &err), CZ_EINVALID);
    ck_assert_ptr_nonnull(strstr(err.message, "missing-hidden.config.json"));
    ck_assert_ptr_nonnull(strstr(err.message, "$.hidden_size"));
}
END_TEST

START_TEST(test_wrong_type)
{
    cz_error err;
    ck_assert_int_eq(import_fail("tests/data/hf/wrong-type.config.json", &err), CZ_EINVALID);
    ck_assert_ptr_nonnull(strstr(err.message, "$.num_attention_heads"));
    ck_assert_ptr_nonnull(strstr(err.message, "a string"));
}
END_TEST

START_TEST(test_bad_mlp_only_layers)
{
    cz_error err;
    ck_assert_int_eq(import_fail("tests/data/hf/bad-mlp-only.config.json", &err), CZ_EINVALID);
    ck_assert_ptr_nonnull(strstr(err.message, "$.mlp_only_layers[1]"));
}
END_TEST

START_TEST(test_not_json_and_missing_file)
{
    cz_error err;
    ck_assert_int_eq(import_fail("tests/data/hf/not-json.config.json", &err), CZ_EPARSE);
    ck_assert_ptr_nonnull(strstr(err.message, "not-json.config.json:"));
    ck_assert_int_eq(import_fail("tests/data/hf/no-such-file.json", &err), CZ_EIO);
    ck_assert_ptr_nonnull(strstr(err.message, "no-such-file.json"));
}
END_TEST

START_TEST(test_format_layout)
{
    json_t *m = import_ok("tests/data/hf/llama-bias.config.json", "x", CZ_DTYPE_BF16);
    char *text = NULL;
    cz_error err;
    ck_assert_int_eq(cz__model_json_format(&text, m, &err), 0);
    /* one parameter per line, key order as built, trailing newline */
    ck_assert_ptr_nonnull(strstr(text, "\n    {\"name\": \"embedding.word_embeddings.weight\", "
                                       "\"shape\": [512, 64], \"tp_dim\": 0, \"optimizer\": "
                                       "\"elementwise\"},\n"));
    ck_assert_ptr_nonnull(
        strstr(text, "{\n  \"schema\": \"canzona.model/1\",\n  \"name\": \"x\","));
    ck_assert_int_eq(text[strlen(text) - 1], '\n');
    json_error_t jerr;
    json_t *back = json_loads(text, JSON_REJECT_DUPLICATES, &jerr);
    ck_assert_ptr_nonnull(back);
    ck_assert(json_equal(back, m));
    json_decref(back);
    free(text);
    json_decref(m);
}
END_TEST

static Suite *import_hf_suite(void)
{
    Suite *s = suite_create("import_hf");
    TCase *t = tcase_create("bundled");
    tcase_add_loop_test(t, test_bundled_equal, 0, (int)(sizeof qwen3 / sizeof qwen3[0]));
    tcase_add_test(t, test_qwen3_32b_shapes);
    tcase_add_test(t, test_llama31_70b_bundled);
    tcase_add_loop_test(t, test_moe_bundled, 0, (int)(sizeof moe_bundled / sizeof moe_bundled[0]));
    tcase_add_test(t, test_deepseek_v3);
    tcase_add_test(t, test_deepseek_ep_and_variants);
    tcase_add_test(t, test_qwen3_tied_has_no_output_layer);
    tcase_add_test(t, test_qwen3_moe_experts);
    suite_add_tcase(s, t);
    t = tcase_create("small");
    tcase_add_test(t, test_mixtral);
    tcase_add_test(t, test_llama_bias);
    tcase_add_test(t, test_qwen2_moe_mixed_layers);
    tcase_add_test(t, test_format_layout);
    suite_add_tcase(s, t);
    t = tcase_create("megatron");
    tcase_add_loop_test(t, test_vocab_padding_recorded, 0,
                        (int)(sizeof padding_cases / sizeof padding_cases[0]));
    tcase_add_test(t, test_vocab_padding_off);
    tcase_add_test(t, test_heads_not_divisible_by_tp);
    tcase_add_test(t, test_ffn_not_divisible_by_tp);
    tcase_add_test(t, test_split_options);
    tcase_add_test(t, test_per_head);
    suite_add_tcase(s, t);
    t = tcase_create("errors");
    tcase_add_test(t, test_unknown_model_type);
    tcase_add_test(t, test_unknown_architecture);
    tcase_add_test(t, test_missing_field);
    tcase_add_test(t, test_wrong_type);
    tcase_add_test(t, test_bad_mlp_only_layers);
    tcase_add_test(t, test_not_json_and_missing_file);
    suite_add_tcase(s, t);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(import_hf_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
