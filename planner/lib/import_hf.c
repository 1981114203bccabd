/* Import of Hugging Face config.json files into canzona.model/1 descriptions.
 *
 * A config.json holds only hyper-parameters; the parameter list is a fact of the training
 * framework. We write what Megatron-Core (with Transformer Engine layers) registers for the
 * same architecture: input RMSNorms fused into the following linear layer
 * (`linear_qkv.layer_norm_weight`, `linear_fc1.layer_norm_weight`), Q/K/V fused into one
 * column-parallel matrix and gate/up fused into `linear_fc1`, each fusion declared as
 * blocks so that matrix optimizers treat the parts as independent matrices. MoE experts are
 * whole matrices named as Megatron-Core's SequentialMLP names them
 * (mlp.experts.local_experts.<e>.*), by which the planner finds them and their EP ranks.
 *
 * DeepSeek-V3 (and Kimi K2, the same architecture) use multi-head latent attention, as
 * Megatron-Core's MLASelfAttention with the Transformer Engine layer spec and qk_layernorm
 * registers it (megatron/core/transformer/multi_latent_attention.py, models/gpt/
 * gpt_layer_specs.py): input_layernorm, then linear_q_down_proj (a duplicated TELinear, so
 * replicated over TP), linear_q_up_proj with the q LoRA norm fused (column-parallel),
 * linear_kv_down_proj (duplicated), linear_kv_up_proj with the KV LoRA norm fused
 * (column-parallel), linear_proj (row-parallel); without a q LoRA rank one column-parallel
 * linear_q_proj. The first first_k_dense_replace layers are dense; the others MoE with
 * n_shared_experts shared experts as one MLP of n_shared_experts x moe_intermediate_size. The
 * router's expert bias (aux-loss-free balancing) is a buffer in Megatron-Core, not a
 * parameter, and the multi-token-prediction layers (num_nextn_predict_layers) are not part of
 * Hugging Face's model: neither is imported. */
#include "cz_json_build.h"
#include "cz_strbuf.h"
#include "cz_types.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A config.json is a few kilobytes; anything near this is not one. */
#define CZ_HF_CONFIG_MAX_BYTES ((size_t)16 << 20)

/* Bounds every hyper-parameter so that shape products stay far from int64 overflow. */
#define HF_MAX_DIM ((int64_t)1 << 24)
/* Deepest model imported: about a hundred times the deepest transformer trained so far. A
 * config beyond it is corrupt, and expanding it would take seconds to make millions of
 * parameters no plan needs. */
#define HF_MAX_LAYERS ((int64_t)1 << 14)

typedef enum hf_family {
    HF_LLAMA,
    HF_MISTRAL,
    HF_QWEN2,
    HF_QWEN3,
    HF_QWEN2_MOE,
    HF_QWEN3_MOE,
    HF_MIXTRAL,
    HF_DEEPSEEK_V3
} hf_family;

static const struct {
    const char *model_type;
    const char *architecture;
    hf_family family;
} hf_families[] = {
    {"llama", "LlamaForCausalLM", HF_LLAMA},
    {"mistral", "MistralForCausalLM", HF_MISTRAL},
    {"qwen2", "Qwen2ForCausalLM", HF_QWEN2},
    {"qwen3", "Qwen3ForCausalLM", HF_QWEN3},
    {"qwen2_moe", "Qwen2MoeForCausalLM", HF_QWEN2_MOE},
    {"qwen3_moe", "Qwen3MoeForCausalLM", HF_QWEN3_MOE},
    {"mixtral", "MixtralForCausalLM", HF_MIXTRAL},
    {"deepseek_v3", "DeepseekV3ForCausalLM", HF_DEEPSEEK_V3},
    {"kimi_k2", "DeepseekV3ForCausalLM", HF_DEEPSEEK_V3},
};
#define HF_NFAMILIES (sizeof hf_families / sizeof hf_families[0])
#define HF_SUPPORTED                                                                               \
    "llama (LlamaForCausalLM), mistral (MistralForCausalLM), qwen2 (Qwen2ForCausalLM), qwen3 "     \
    "(Qwen3ForCausalLM), qwen2_moe (Qwen2MoeForCausalLM), qwen3_moe (Qwen3MoeForCausalLM), "       \
    "mixtral (MixtralForCausalLM), deepseek_v3 (DeepseekV3ForCausalLM), kimi_k2 "                  \
    "(DeepseekV3ForCausalLM)"

typedef struct hf_config {
    const char *path;
    size_t family_index;
    int64_t hidden, ffn, layers, heads, kv_heads, head_dim, vocab;
    int64_t padded_vocab;          /* Megatron's padding for the job's TP size */
    bool split_qkv, split_gate_up; /* declare the fusions as blocks (see the options) */
    int per_head;                  /* CZ_PER_HEAD_*: which projections get "heads" */
    bool tie, qkv_bias, proj_bias, mlp_bias, qk_norm;
    int64_t experts, moe_ffn, shared_ffn, sparse_step;
    bool shared_gate; /* Qwen2-MoE's sigmoid gate on the shared expert */
    bool *moe_layer;  /* per layer */
    int64_t nmoe;     /* number of MoE layers */
    /* Multi-head latent attention (DeepSeek-V3): LoRA ranks (q_lora 0: no q LoRA) and head
     * dimensions of the no-position and rotary parts of Q and K and of V. */
    bool mla;
    int64_t q_lora, kv_lora, qk_nope, qk_rope, v_head;
    int64_t first_dense, moe_freq; /* DeepSeek's MoE layer rule */
} hf_config;

static const char *hf_type_name(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT:
        return "an object";
    case JSON_ARRAY:
        return "an array";
    case JSON_STRING:
        return "a string";
    case JSON_INTEGER:
        return "an integer";
    case JSON_REAL:
        return "a real number";
    case JSON_TRUE:
    case JSON_FALSE:
        return "a boolean";
    case JSON_NULL:
        return "null";
    }
    return "an unknown value";
}

/* Reads an integer key. Absent (or null, which config.json uses for "not set") gives def when
 * the key is optional. */
static int hf_get_int(const hf_config *c, const json_t *root, const char *key, bool required,
                      int64_t def, int64_t min, int64_t *out, cz_error *err)
{
    const json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v)) {
        if (required)
            return cz__error_set(err, CZ_EINVALID,
                                 "%s: missing required key $.%s (an integer from %" PRId64
                                 " to %" PRId64 ")",
                                 c->path, key, min, HF_MAX_DIM);
        *out = def;
        return 0;
    }
    if (!json_is_integer(v))
        return cz__error_set(err, CZ_EINVALID, "%s: $.%s: expected an integer, found %s", c->path,
                             key, hf_type_name(v));
    json_int_t x = json_integer_value(v);
    if (x < min || x > HF_MAX_DIM)
        return cz__error_set(err, CZ_EINVALID,
                             "%s: $.%s: expected an integer from %" PRId64 " to %" PRId64
                             ", found %" JSON_INTEGER_FORMAT,
                             c->path, key, min, HF_MAX_DIM, x);
    *out = (int64_t)x;
    return 0;
}

static int hf_get_bool(const hf_config *c, const json_t *root, const char *key, bool def, bool *out,
                       cz_error *err)
{
    const json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v)) {
        *out = def;
        return 0;
    }
    if (!json_is_boolean(v))
        return cz__error_set(err, CZ_EINVALID, "%s: $.%s: expected true or false, found %s",
                             c->path, key, hf_type_name(v));
    *out = json_is_true(v);
    return 0;
}

/* The experts each token is routed to (num_experts_per_tok, which every MoE family names so):
 * at most the routed experts the config has (experts_key), or the config is not of a model that
 * runs. It shapes no parameter, so it is only checked. */
static int hf_check_topk(const hf_config *c, const json_t *root, const char *experts_key,
                         cz_error *err)
{
    int64_t topk = 0;
    int rc = hf_get_int(c, root, "num_experts_per_tok", false, 0, 1, &topk, err);
    if (rc || c->experts == 0 || topk <= c->experts)
        return rc;
    return cz__error_set(err, CZ_EINVALID,
                         "%s: $.num_experts_per_tok (%" PRId64 ") exceeds $.%s (%" PRId64
                         "): a token cannot be routed to more experts than the layer has",
                         c->path, topk, experts_key, c->experts);
}

/* Finds the family from model_type, or from architectures[0] when model_type is absent. */
static int hf_family_find(hf_config *c, const json_t *root, cz_error *err)
{
    const json_t *mt = json_object_get(root, "model_type");
    if (mt) {
        if (!json_is_string(mt))
            return cz__error_set(err, CZ_EINVALID, "%s: $.model_type: expected a string, found %s",
                                 c->path, hf_type_name(mt));
        for (size_t i = 0; i < HF_NFAMILIES; i++)
            if (!strcmp(json_string_value(mt), hf_families[i].model_type)) {
                c->family_index = i;
                return 0;
            }
        return cz__error_set(err, CZ_EUNSUPPORTED,
                             "%s: $.model_type is \"%s\", which import-hf does not support; "
                             "supported: " HF_SUPPORTED,
                             c->path, json_string_value(mt));
    }
    const json_t *archs = json_object_get(root, "architectures");
    if (!archs)
        return cz__error_set(err, CZ_EINVALID,
                             "%s: neither $.model_type nor $.architectures is present; one of "
                             "them must name the architecture (supported: " HF_SUPPORTED ")",
                             c->path);
    const json_t *a0 = json_array_get(archs, 0);
    if (!json_is_array(archs) || !json_is_string(a0))
        return cz__error_set(err, CZ_EINVALID,
                             "%s: $.architectures: expected an array of strings, found %s", c->path,
                             json_is_array(archs) ? "an empty array" : hf_type_name(archs));
    for (size_t i = 0; i < HF_NFAMILIES; i++)
        if (!strcmp(json_string_value(a0), hf_families[i].architecture)) {
            c->family_index = i;
            return 0;
        }
    return cz__error_set(err, CZ_EUNSUPPORTED,
                         "%s: $.architectures[0] is \"%s\", which import-hf does not support; "
                         "supported: " HF_SUPPORTED,
                         c->path, json_string_value(a0));
}

static int hf_moe_layers(hf_config *c, const json_t *root, cz_error *err)
{
    c->moe_layer = calloc((size_t)c->layers, sizeof *c->moe_layer);
    if (!c->moe_layer)
        return cz__error_set(err, CZ_ENOMEM, "out of memory");
    hf_family f = hf_families[c->family_index].family;
    if (f == HF_MIXTRAL) {
        for (int64_t l = 0; l < c->layers; l++)
            c->moe_layer[l] = true;
        c->nmoe = c->layers;
        return 0;
    }
    if (f == HF_DEEPSEEK_V3) {
        /* Hugging Face's DeepseekV3DecoderLayer: MoE when layer_idx >= first_k_dense_replace
         * and layer_idx % moe_layer_freq == 0. */
        c->nmoe = 0;
        for (int64_t l = 0; l < c->layers; l++) {
            c->moe_layer[l] = c->experts > 0 && l >= c->first_dense && l % c->moe_freq == 0;
            c->nmoe += c->moe_layer[l];
        }
        return 0;
    }
    /* Qwen MoE: the Hugging Face rule, layer l is sparse unless listed in mlp_only_layers and
     * when (l + 1) is a multiple of decoder_sparse_step. */
    bool *dense_only = calloc((size_t)c->layers, sizeof *dense_only);
    if (!dense_only)
        return cz__error_set(err, CZ_ENOMEM, "out of memory");
    int rc = 0;
    const json_t *mol = json_object_get(root, "mlp_only_layers");
    if (mol && !json_is_null(mol)) {
        if (!json_is_array(mol)) {
            rc =
                cz__error_set(err, CZ_EINVALID,
                              "%s: $.mlp_only_layers: expected an array of layer indices, found %s",
                              c->path, hf_type_name(mol));
            goto done;
        }
        for (size_t i = 0; i < json_array_size(mol); i++) {
            const json_t *v = json_array_get(mol, i);
            if (!json_is_integer(v) || json_integer_value(v) < 0 ||
                json_integer_value(v) >= c->layers) {
                rc =
                    cz__error_set(err, CZ_EINVALID,
                                  "%s: $.mlp_only_layers[%zu]: expected a layer index from 0 to "
                                  "%" PRId64 " (num_hidden_layers - 1), found %s",
                                  c->path, i, c->layers - 1,
                                  json_is_integer(v) ? "an integer out of range" : hf_type_name(v));
                goto done;
            }
            dense_only[json_integer_value(v)] = true;
        }
    }
    c->nmoe = 0;
    for (int64_t l = 0; l < c->layers; l++) {
        c->moe_layer[l] = !dense_only[l] && c->experts > 0 && (l + 1) % c->sparse_step == 0;
        c->nmoe += c->moe_layer[l];
    }
done:
    free(dense_only);
    return rc;
}

/* The counts below are of non-negative config values: they saturate at INT64_MAX. */
#define hf_sat_add cz__i64_sat_add
#define hf_sat_mul cz__i64_sat_mul

/* Parameters and elements of the model hf_layer and cz__import_hf would write, counted before
 * anything is built: a config with millions of layers or experts is refused here instead of
 * exhausting memory, and only models the loader accepts are written. Mirrors hf_layer. */
/* The attention block's parameters and elements, as hf_layer writes it (both forms). */
static void hf_attention_size(const hf_config *c, int64_t *n, int64_t *e)
{
    const int64_t h = c->hidden, d = c->head_dim;
    if (c->mla) {
        const int64_t qh = hf_sat_mul(c->heads, hf_sat_add(c->qk_nope, c->qk_rope));
        const int64_t kvh = hf_sat_mul(c->heads, hf_sat_add(c->qk_nope, c->v_head));
        *n = c->q_lora > 0 ? 8 : 5;
        *e = hf_sat_add(h, hf_sat_mul(hf_sat_add(c->kv_lora, c->qk_rope), h));
        *e = hf_sat_add(*e, hf_sat_add(c->kv_lora, hf_sat_mul(kvh, c->kv_lora)));
        *e = hf_sat_add(*e, hf_sat_mul(h, hf_sat_mul(c->heads, c->v_head)));
        if (c->q_lora > 0)
            *e = hf_sat_add(*e, hf_sat_add(hf_sat_mul(c->q_lora, h),
                                           hf_sat_add(c->q_lora, hf_sat_mul(qh, c->q_lora))));
        else
            *e = hf_sat_add(*e, hf_sat_mul(qh, h));
        return;
    }
    const int64_t q = hf_sat_mul(c->heads, d), kv = hf_sat_mul(c->kv_heads, d);
    const int64_t qkv = hf_sat_add(q, hf_sat_mul(2, kv));
    *n = 3 + c->qkv_bias + 2 * c->qk_norm + c->proj_bias;
    *e = hf_sat_add(h, hf_sat_mul(qkv, h));
    *e = hf_sat_add(*e, hf_sat_mul(h, q));
    *e =
        hf_sat_add(*e, (c->qkv_bias ? qkv : 0) + (c->qk_norm ? 2 * d : 0) + (c->proj_bias ? h : 0));
}

static int hf_check_size(const hf_config *c, cz_error *err)
{
    const int64_t h = c->hidden;
    int64_t common_n, common_e;
    hf_attention_size(c, &common_n, &common_e);
    int64_t dense_n = common_n + 3 + 2 * c->mlp_bias;
    int64_t dense_e = hf_sat_add(common_e, hf_sat_mul(3, hf_sat_mul(c->ffn, h)));
    dense_e = hf_sat_add(dense_e, h + (c->mlp_bias ? 2 * c->ffn + h : 0));
    int64_t moe_n = hf_sat_add(common_n + 2 + (c->shared_ffn > 0 ? 2 + c->shared_gate : 0),
                               hf_sat_mul(2, c->experts));
    int64_t expert_e = hf_sat_mul(3, hf_sat_mul(c->moe_ffn, h));
    int64_t moe_e = hf_sat_add(common_e, h + hf_sat_mul(c->experts, h));
    moe_e = hf_sat_add(moe_e, hf_sat_mul(c->experts, expert_e));
    if (c->shared_ffn > 0)
        moe_e = hf_sat_add(
            moe_e, hf_sat_add(hf_sat_mul(3, hf_sat_mul(c->shared_ffn, h)), c->shared_gate ? h : 0));
    int64_t ndense = c->layers - c->nmoe;
    int64_t nparams = hf_sat_add(hf_sat_mul(ndense, dense_n), hf_sat_mul(c->nmoe, moe_n));
    nparams = hf_sat_add(nparams, c->tie ? 2 : 3);
    int64_t nelems = hf_sat_add(hf_sat_mul(ndense, dense_e), hf_sat_mul(c->nmoe, moe_e));
    nelems = hf_sat_add(nelems, hf_sat_add(hf_sat_mul(c->tie ? 1 : 2, hf_sat_mul(c->vocab, h)), h));
    if (nparams > (int64_t)CZ_MODEL_MAX_PARAMS)
        return cz__error_set(
            err, CZ_EINVALID,
            "%s: $.num_hidden_layers (%" PRId64 ") and the experts per layer (%" PRId64
            ") make %s%" PRId64 " parameters; a canzona model holds at most %zu",
            c->path, c->layers, c->experts, nparams == INT64_MAX ? "more than " : "", nparams,
            CZ_MODEL_MAX_PARAMS);
    if (nelems > CZ_MODEL_MAX_ELEMENTS)
        return cz__error_set(
            err, CZ_EINVALID,
            "%s: the sizes (hidden %" PRId64 ", vocabulary %" PRId64 ", %" PRId64
            " layers, FFN %" PRId64 ", %" PRId64 " experts of FFN %" PRId64 ") make %s%" PRId64
            " elements; a canzona model holds at most %" PRId64 " (2^50)",
            c->path, h, c->vocab, c->layers, c->ffn, c->experts, c->moe_ffn,
            nelems == INT64_MAX ? "more than " : "", nelems, CZ_MODEL_MAX_ELEMENTS);
    return 0;
}

/* MLA's sizes: q_lora_rank (null or absent: no q LoRA, as DeepSeek-V2-Lite), kv_lora_rank,
 * qk_nope_head_dim, qk_rope_head_dim, v_head_dim. */
static int hf_mla_read(hf_config *c, const json_t *root, cz_error *err)
{
    int rc;
    if ((rc = hf_get_int(c, root, "q_lora_rank", false, 0, 1, &c->q_lora, err)) ||
        (rc = hf_get_int(c, root, "kv_lora_rank", true, 0, 1, &c->kv_lora, err)) ||
        (rc = hf_get_int(c, root, "qk_nope_head_dim", true, 0, 1, &c->qk_nope, err)) ||
        (rc = hf_get_int(c, root, "qk_rope_head_dim", true, 0, 1, &c->qk_rope, err)) ||
        (rc = hf_get_int(c, root, "v_head_dim", true, 0, 1, &c->v_head, err)))
        return rc;
    return CZ_OK;
}

static int hf_config_read(hf_config *c, const json_t *root, cz_error *err)
{
    int rc;
    if ((rc = hf_family_find(c, root, err)))
        return rc;
    hf_family f = hf_families[c->family_index].family;
    bool moe = f == HF_QWEN2_MOE || f == HF_QWEN3_MOE || f == HF_MIXTRAL || f == HF_DEEPSEEK_V3;
    c->mla = f == HF_DEEPSEEK_V3;

    if ((rc = hf_get_int(c, root, "hidden_size", true, 0, 1, &c->hidden, err)) ||
        (rc = hf_get_int(c, root, "num_hidden_layers", true, 0, 1, &c->layers, err)) ||
        (rc = hf_get_int(c, root, "num_attention_heads", true, 0, 1, &c->heads, err)) ||
        (rc = hf_get_int(c, root, "num_key_value_heads", false, c->heads, 1, &c->kv_heads, err)) ||
        (rc = hf_get_int(c, root, "vocab_size", true, 0, 1, &c->vocab, err)) ||
        (rc = hf_get_bool(c, root, "tie_word_embeddings", false, &c->tie, err)))
        return rc;
    /* Refused before anything per layer is allocated; hf_check_size counts the parameters
     * exactly once everything is read. */
    if (c->layers > HF_MAX_LAYERS)
        return cz__error_set(err, CZ_EINVALID,
                             "%s: $.num_hidden_layers: expected at most %" PRId64
                             " layers, found %" PRId64 " (a corrupt config?)",
                             c->path, HF_MAX_LAYERS, c->layers);
    if (c->mla && (rc = hf_mla_read(c, root, err)))
        return rc;
    const json_t *hd = json_object_get(root, "head_dim");
    if (c->mla) /* MLA's head sizes are qk_nope + qk_rope and v_head_dim: no head_dim */
        hd = NULL;
    if (!c->mla && (!hd || json_is_null(hd)) && c->hidden % c->heads)
        return cz__error_set(err, CZ_EINVALID,
                             "%s: $.head_dim is absent and $.hidden_size (%" PRId64
                             ") is not a multiple of $.num_attention_heads (%" PRId64 ")",
                             c->path, c->hidden, c->heads);
    if (c->mla)
        c->head_dim = c->qk_nope + c->qk_rope;
    else if ((rc = hf_get_int(c, root, "head_dim", false, c->hidden / c->heads, 1, &c->head_dim,
                              err)))
        return rc;
    if (c->kv_heads > c->heads || c->heads % c->kv_heads)
        return cz__error_set(err, CZ_EINVALID,
                             "%s: $.num_key_value_heads (%" PRId64
                             ") must divide $.num_attention_heads (%" PRId64 ")",
                             c->path, c->kv_heads, c->heads);

    /* Biases follow the Hugging Face modelling code: Qwen2 hard-codes a Q/K/V bias and no
     * output bias; Llama and Qwen3 put attention_bias on Q/K/V and on o_proj; Mistral and
     * Mixtral have no biases. */
    bool attention_bias = false;
    switch (f) {
    case HF_QWEN2:
    case HF_QWEN2_MOE:
        c->qkv_bias = true;
        break;
    case HF_DEEPSEEK_V3:
        /* MLA's projections have no bias; a config asking for one is not this model. */
        if ((rc = hf_get_bool(c, root, "attention_bias", false, &attention_bias, err)))
            return rc;
        if (attention_bias)
            return cz__error_set(err, CZ_EUNSUPPORTED,
                                 "%s: $.attention_bias is true; Megatron-Core's multi-latent "
                                 "attention has no projection biases",
                                 c->path);
        break;
    case HF_LLAMA:
    case HF_QWEN3:
    case HF_QWEN3_MOE:
        if ((rc = hf_get_bool(c, root, "attention_bias", false, &attention_bias, err)))
            return rc;
        c->qkv_bias = c->proj_bias = attention_bias;
        break;
    case HF_MISTRAL:
    case HF_MIXTRAL:
        break;
    }
    if (f == HF_LLAMA && (rc = hf_get_bool(c, root, "mlp_bias", false, &c->mlp_bias, err)))
        return rc;
    c->qk_norm = f == HF_QWEN3 || f == HF_QWEN3_MOE;

    c->sparse_step = 1;
    const char *experts_key = NULL; /* the family's key of the routed experts' count */
    if (f == HF_MIXTRAL) {
        experts_key = "num_local_experts";
        if ((rc = hf_get_int(c, root, "num_local_experts", true, 0, 1, &c->experts, err)) ||
            (rc = hf_get_int(c, root, "intermediate_size", true, 0, 1, &c->moe_ffn, err)))
            return rc;
    } else if (f == HF_DEEPSEEK_V3) {
        int64_t shared = 0;
        experts_key = "n_routed_experts";
        if ((rc = hf_get_int(c, root, "n_routed_experts", false, 0, 0, &c->experts, err)) ||
            (rc =
                 hf_get_int(c, root, "first_k_dense_replace", false, 0, 0, &c->first_dense, err)) ||
            (rc = hf_get_int(c, root, "moe_layer_freq", false, 1, 1, &c->moe_freq, err)) ||
            (rc = hf_get_int(c, root, "n_shared_experts", false, 0, 0, &shared, err)))
            return rc;
        if (c->experts > 0 &&
            (rc = hf_get_int(c, root, "moe_intermediate_size", true, 0, 1, &c->moe_ffn, err)))
            return rc;
        /* Megatron-Core's shared experts are one MLP of all of them together
         * (moe_shared_expert_intermediate_size = n_shared_experts x moe_intermediate_size). */
        c->shared_ffn = hf_sat_mul(shared, c->moe_ffn);
        if (c->shared_ffn > HF_MAX_DIM)
            return cz__error_set(err, CZ_EINVALID,
                                 "%s: $.n_shared_experts (%" PRId64 ") x $.moe_intermediate_size "
                                 "(%" PRId64 ") exceeds %" PRId64,
                                 c->path, shared, c->moe_ffn, HF_MAX_DIM);
    } else if (moe) {
        experts_key = "num_experts";
        if ((rc = hf_get_int(c, root, "num_experts", true, 0, 0, &c->experts, err)) ||
            (rc = hf_get_int(c, root, "decoder_sparse_step", false, 1, 1, &c->sparse_step, err)))
            return rc;
        if (c->experts > 0 &&
            (rc = hf_get_int(c, root, "moe_intermediate_size", true, 0, 1, &c->moe_ffn, err)))
            return rc;
        if (f == HF_QWEN2_MOE && (rc = hf_get_int(c, root, "shared_expert_intermediate_size", false,
                                                  0, 0, &c->shared_ffn, err)))
            return rc;
        c->shared_gate = f == HF_QWEN2_MOE;
    }
    if (moe && (rc = hf_check_topk(c, root, experts_key, err)))
        return rc;
    if (moe) {
        if ((rc = hf_moe_layers(c, root, err)))
            return rc;
    }
    if (c->nmoe < c->layers &&
        (rc = hf_get_int(c, root, "intermediate_size", true, 0, 1, &c->ffn, err)))
        return rc;
    return hf_check_size(c, err);
}

/* ---- building the description ---- */

static void hf_set(json_t *obj, const char *key, json_t *value, bool *ok)
{
    if (cz__json_put(obj, key, value)) /* value is released either way */
        *ok = false;
}

static void hf_add(json_t *arr, json_t *value, bool *ok)
{
    if (cz__json_push(arr, value))
        *ok = false;
}

/* One parameter; cols < 0 makes it 1-D, tp_dim < 0 replicated. */
static json_t *hf_param(const char *name, int64_t rows, int64_t cols, int tp_dim, bool matrix,
                        bool *ok)
{
    json_t *p = json_object();
    json_t *shape = json_array();
    hf_add(shape, json_integer(rows), ok);
    if (cols >= 0)
        hf_add(shape, json_integer(cols), ok);
    hf_set(p, "name", json_string(name), ok);
    hf_set(p, "shape", shape, ok);
    hf_set(p, "tp_dim", tp_dim < 0 ? json_null() : json_integer(tp_dim), ok);
    hf_set(p, "optimizer",
           json_string(cz__kind_name(matrix ? CZ_KIND_MATRIX : CZ_KIND_ELEMENTWISE)), ok);
    if (!p)
        *ok = false;
    return p;
}

/* Declares row blocks (fused Q/K/V or gate/up) on a matrix parameter. */
static void hf_blocks(json_t *p, int64_t a, int64_t b, int64_t c, bool *ok)
{
    json_t *blocks = json_object();
    json_t *sizes = json_array();
    hf_add(sizes, json_integer(a), ok);
    hf_add(sizes, json_integer(b), ok);
    if (c > 0)
        hf_add(sizes, json_integer(c), ok);
    hf_set(blocks, "dim", json_integer(0), ok);
    hf_set(blocks, "sizes", sizes, ok);
    hf_set(p, "blocks", blocks, ok);
}

/* Per-head Muon on p: heads of `size` rows (dim 0) or columns (dim 1); nothing unless asked. */
static void hf_heads(json_t *p, const hf_config *c, int from, int dim, int64_t size, bool *ok)
{
    if (c->per_head < from)
        return;
    json_t *heads = json_object();
    hf_set(heads, "dim", json_integer(dim), ok);
    hf_set(heads, "size", json_integer(size), ok);
    hf_set(p, "heads", heads, ok);
}

static json_t *hf_repeat(int64_t n, const char *prefix, json_t *params, bool *ok)
{
    json_t *r = json_object();
    hf_set(r, "repeat", json_integer(n), ok);
    hf_set(r, "prefix", json_string(prefix), ok);
    hf_set(r, "params", params, ok);
    if (!r)
        *ok = false;
    return r;
}

/* A SwiGLU MLP: fused gate/up (column-parallel) then down (row-parallel). */
static void hf_swiglu(json_t *arr, const char *prefix, int64_t hidden, int64_t ffn, bool split,
                      bool *ok)
{
    char name[128];
    snprintf(name, sizeof name, "%slinear_fc1.weight", prefix);
    json_t *fc1 = hf_param(name, 2 * ffn, hidden, 0, true, ok);
    if (split)
        hf_blocks(fc1, ffn, ffn, 0, ok);
    hf_add(arr, fc1, ok);
    snprintf(name, sizeof name, "%slinear_fc2.weight", prefix);
    hf_add(arr, hf_param(name, hidden, ffn, 1, true, ok), ok);
}

/* Megatron-Core's MLASelfAttention (TE spec, qk_layernorm), in forward order. */
static void hf_mla(json_t *a, const hf_config *c, bool *ok)
{
    const int64_t h = c->hidden, qh = c->heads * (c->qk_nope + c->qk_rope);
    hf_add(a, hf_param("input_layernorm.weight", h, -1, -1, false, ok), ok);
    if (c->q_lora > 0) {
        hf_add(a, hf_param("self_attention.linear_q_down_proj.weight", c->q_lora, h, -1, true, ok),
               ok);
        hf_add(a,
               hf_param("self_attention.linear_q_up_proj.layer_norm_weight", c->q_lora, -1, -1,
                        false, ok),
               ok);
    }
    /* Each head's Q rows are its no-position and rotary parts together. */
    json_t *q = c->q_lora > 0
                    ? hf_param("self_attention.linear_q_up_proj.weight", qh, c->q_lora, 0, true, ok)
                    : hf_param("self_attention.linear_q_proj.weight", qh, h, 0, true, ok);
    hf_heads(q, c, CZ_PER_HEAD_QKV, 0, c->qk_nope + c->qk_rope, ok);
    hf_add(a, q, ok);
    hf_add(a,
           hf_param("self_attention.linear_kv_down_proj.weight", c->kv_lora + c->qk_rope, h, -1,
                    true, ok),
           ok);
    hf_add(a,
           hf_param("self_attention.linear_kv_up_proj.layer_norm_weight", c->kv_lora, -1, -1, false,
                    ok),
           ok);
    /* Hugging Face's kv_b_proj rows are per head [K no-position part; V]: a head is both. */
    json_t *kv = hf_param("self_attention.linear_kv_up_proj.weight",
                          c->heads * (c->qk_nope + c->v_head), c->kv_lora, 0, true, ok);
    hf_heads(kv, c, CZ_PER_HEAD_QKV, 0, c->qk_nope + c->v_head, ok);
    hf_add(a, kv, ok);
    json_t *o = hf_param("self_attention.linear_proj.weight", h, c->heads * c->v_head, 1, true, ok);
    hf_heads(o, c, CZ_PER_HEAD_QKVO, 1, c->v_head, ok);
    hf_add(a, o, ok);
}

/* A layer's attention of grouped-query heads (linear_qkv, its norms and biases, linear_proj). */
static void hf_attention(json_t *a, const hf_config *c, bool *ok)
{
    const int64_t h = c->hidden, d = c->head_dim;
    const int64_t q = c->heads * d, kv = c->kv_heads * d;
    hf_add(a, hf_param("self_attention.linear_qkv.layer_norm_weight", h, -1, -1, false, ok), ok);
    json_t *qkv = hf_param("self_attention.linear_qkv.weight", q + 2 * kv, h, 0, true, ok);
    if (c->split_qkv)
        hf_blocks(qkv, q, kv, kv, ok);
    hf_heads(qkv, c, CZ_PER_HEAD_QKV, 0, d, ok);
    hf_add(a, qkv, ok);
    if (c->qkv_bias)
        hf_add(a, hf_param("self_attention.linear_qkv.bias", q + 2 * kv, -1, 0, false, ok), ok);
    if (c->qk_norm) {
        hf_add(a, hf_param("self_attention.q_layernorm.weight", d, -1, -1, false, ok), ok);
        hf_add(a, hf_param("self_attention.k_layernorm.weight", d, -1, -1, false, ok), ok);
    }
    json_t *o = hf_param("self_attention.linear_proj.weight", h, q, 1, true, ok);
    hf_heads(o, c, CZ_PER_HEAD_QKVO, 1, d, ok);
    hf_add(a, o, ok);
    if (c->proj_bias)
        hf_add(a, hf_param("self_attention.linear_proj.bias", h, -1, -1, false, ok), ok);
}

static json_t *hf_layer(const hf_config *c, bool moe, bool *ok)
{
    const int64_t h = c->hidden;
    json_t *a = json_array();
    if (!a)
        *ok = false;

    if (c->mla)
        hf_mla(a, c, ok);
    else
        hf_attention(a, c, ok);
    if (!moe) {
        hf_add(a, hf_param("mlp.linear_fc1.layer_norm_weight", h, -1, -1, false, ok), ok);
        json_t *fc1 = hf_param("mlp.linear_fc1.weight", 2 * c->ffn, h, 0, true, ok);
        if (c->split_gate_up)
            hf_blocks(fc1, c->ffn, c->ffn, 0, ok);
        hf_add(a, fc1, ok);
        if (c->mlp_bias)
            hf_add(a, hf_param("mlp.linear_fc1.bias", 2 * c->ffn, -1, 0, false, ok), ok);
        hf_add(a, hf_param("mlp.linear_fc2.weight", h, c->ffn, 1, true, ok), ok);
        if (c->mlp_bias)
            hf_add(a, hf_param("mlp.linear_fc2.bias", h, -1, -1, false, ok), ok);
        return a;
    }

    /* Megatron's MoELayer registers router, experts, shared experts in this order. */
    hf_add(a, hf_param("pre_mlp_layernorm.weight", h, -1, -1, false, ok), ok);
    hf_add(a, hf_param("mlp.router.weight", c->experts, h, -1, false, ok), ok);
    json_t *expert = json_array();
    hf_swiglu(expert, "", h, c->moe_ffn, c->split_gate_up, ok);
    hf_add(a, hf_repeat(c->experts, "mlp.experts.local_experts.{i}.", expert, ok), ok);
    if (c->shared_ffn > 0) {
        hf_swiglu(a, "mlp.shared_experts.", h, c->shared_ffn, c->split_gate_up, ok);
        /* Qwen2-MoE's shared_expert_gate, Linear(hidden, 1): Megatron's gate_weight. */
        if (c->shared_gate)
            hf_add(a, hf_param("mlp.shared_experts.gate_weight", 1, h, -1, false, ok), ok);
    }
    return a;
}

static void hf_lower(char *s)
{
    for (; *s; s++)
        *s = (char)tolower((unsigned char)*s);
}

/* The model's default name: see cz__import_hf in cz_analysis.h. */
static char *hf_default_name(const char *path, const json_t *root)
{
    const json_t *nop = json_object_get(root, "_name_or_path");
    char *name = NULL;
    if (json_is_string(nop) && json_string_length(nop) > 0) {
        char *s = cz__strdup(json_string_value(nop));
        if (!s)
            return NULL;
        size_t n = strlen(s);
        while (n > 0 && s[n - 1] == '/')
            s[--n] = '\0';
        const char *slash = strrchr(s, '/');
        name = cz__strdup(slash ? slash + 1 : s);
        free(s);
        if (name && !*name) {
            free(name);
            name = NULL;
        } else if (!name) {
            return NULL;
        }
    }
    if (!name) {
        char *s = cz__strdup(path);
        if (!s)
            return NULL;
        size_t n = strlen(s);
        while (n > 1 && s[n - 1] == '/')
            s[--n] = '\0';
        char *slash = strrchr(s, '/');
        char *base = slash ? slash + 1 : s;
        size_t bn = strlen(base);
        if (bn > 5 && !strcmp(base + bn - 5, ".json"))
            base[bn -= 5] = '\0';
        if (bn > 7 && !strcmp(base + bn - 7, ".config"))
            base[bn -= 7] = '\0';
        /* A file called plainly config.json takes its folder's name (Qwen3-8B/config.json). */
        if (!strcmp(base, "config") && slash && slash != s) {
            *slash = '\0';
            char *parent = strrchr(s, '/');
            base = parent ? parent + 1 : s;
        }
        name = cz__strdup(*base ? base : "model");
        free(s);
        if (!name)
            return NULL;
    }
    hf_lower(name);
    return name;
}

static const char *hf_basename(const char *path)
{
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

static char *hf_description(const hf_config *c)
{
    char moe[256] = "";
    char ffn[64] = "";
    if (c->nmoe > 0) {
        int n = snprintf(moe, sizeof moe,
                         ", %" PRId64 " MoE layers of %" PRId64 " experts with FFN %" PRId64,
                         c->nmoe, c->experts, c->moe_ffn);
        if (c->shared_ffn > 0 && n > 0 && (size_t)n < sizeof moe)
            snprintf(moe + n, sizeof moe - (size_t)n, " plus a shared expert with FFN %" PRId64,
                     c->shared_ffn);
    }
    if (c->nmoe < c->layers && c->nmoe > 0)
        snprintf(ffn, sizeof ffn, ", %" PRId64 " dense layers of FFN %" PRId64, c->layers - c->nmoe,
                 c->ffn);
    else if (c->nmoe < c->layers)
        snprintf(ffn, sizeof ffn, ", FFN %" PRId64, c->ffn);
    char pad[64] = "";
    if (c->padded_vocab != c->vocab)
        snprintf(pad, sizeof pad, " (padded to %" PRId64 ")", c->padded_vocab);
    char buf[1024], heads[256];
    if (c->mla) {
        char ql[64] = "no q LoRA";
        if (c->q_lora > 0)
            snprintf(ql, sizeof ql, "q LoRA rank %" PRId64, c->q_lora);
        snprintf(heads, sizeof heads,
                 "%" PRId64 " attention heads of multi-head latent attention (%s, KV LoRA rank "
                 "%" PRId64 ", Q/K heads of %" PRId64 " + %" PRId64 " rotary, V heads of %" PRId64
                 ")",
                 c->heads, ql, c->kv_lora, c->qk_nope, c->qk_rope, c->v_head);
    } else {
        snprintf(heads, sizeof heads,
                 "%" PRId64 " attention heads and %" PRId64 " KV heads of dimension %" PRId64,
                 c->heads, c->kv_heads, c->head_dim);
    }
    snprintf(buf, sizeof buf,
             "%s imported from %s by canzona import-hf: %" PRId64 " layers, hidden %" PRId64
             ", %s%s%s, vocabulary %" PRId64 "%s%s%s.",
             hf_families[c->family_index].architecture, hf_basename(c->path), c->layers, c->hidden,
             heads, ffn, moe, c->vocab, pad, c->qkv_bias ? ", Q/K/V bias" : "",
             c->tie ? ", tied input and output embeddings" : "");
    return cz__strdup(buf);
}

/* Megatron-Core splits these sizes across the TP ranks (heads and query groups whole, the
 * column-parallel fc1 and row-parallel fc2 by rows and columns of the FFN). */
/* Megatron-Core gives every EP rank the same number of whole experts (moe_layer.py:
 * num_moe_experts % ep_size == 0). */
static int hf_check_ep(const hf_config *c, int64_t ep, cz_error *err)
{
    if (ep <= 1)
        return 0;
    hf_family f = hf_families[c->family_index].family;
    const char *key = f == HF_MIXTRAL       ? "num_local_experts"
                      : f == HF_DEEPSEEK_V3 ? "n_routed_experts"
                                            : "num_experts";
    if (c->nmoe == 0)
        return cz__error_set(err, CZ_EINVALID,
                             "%s: expert model-parallel size %" PRId64
                             " given, but the model has no MoE layer: expert parallelism needs "
                             "experts (Megatron-LM: \"num_experts must be non None to use expert "
                             "model parallelism\")",
                             c->path, ep);
    if (c->experts % ep)
        return cz__error_set(err, CZ_EINVALID,
                             "%s: $.%s (%" PRId64
                             ") must be a multiple of the expert model-parallel size (%" PRId64
                             "): Megatron-Core gives every EP rank the same number of whole "
                             "experts (moe_layer.py: num_moe_experts %% ep_size == 0)",
                             c->path, key, c->experts, ep);
    return 0;
}

static int hf_check_tp(const hf_config *c, int64_t tp, cz_error *err)
{
    int rc = cz__megatron_check_heads(c->path, "$.num_attention_heads", c->heads,
                                      "$.num_key_value_heads", c->kv_heads, tp, err);
    if (rc)
        return rc;
    static const char *const ffn_keys[] = {"intermediate_size", "moe_intermediate_size",
                                           "shared_expert_intermediate_size"};
    hf_family f = hf_families[c->family_index].family;
    const int64_t sizes[] = {c->nmoe < c->layers ? c->ffn : 0, c->nmoe > 0 ? c->moe_ffn : 0,
                             c->shared_ffn};
    for (int i = 0; i < 3; i++) {
        if (sizes[i] <= 0 || sizes[i] % tp == 0)
            continue;
        /* Mixtral's experts take their FFN from intermediate_size; DeepSeek's shared experts
         * are n_shared_experts of moe_intermediate_size. */
        const char *key = f == HF_MIXTRAL && i == 1       ? "intermediate_size"
                          : f == HF_DEEPSEEK_V3 && i == 2 ? "moe_intermediate_size"
                                                          : ffn_keys[i];
        return cz__error_set(err, CZ_EINVALID,
                             "%s: $.%s (%" PRId64
                             ") must be a multiple of the tensor-parallel size (%" PRId64
                             "): Megatron-Core splits the FFN of the column-parallel linear_fc1 "
                             "and the row-parallel linear_fc2 evenly across TP ranks",
                             c->path, key, sizes[i], tp);
    }
    return 0;
}

void cz_import_hf_options_init(cz_import_hf_options *o)
{
    static const cz_import_hf_options defaults = CZ_IMPORT_HF_OPTIONS_INIT;
    memcpy(o, &defaults, sizeof *o);
}

int cz__import_hf(json_t **out_model, const char *config_path, const char *name, cz_dtype dtype,
                  cz_error *err)
{
    cz_import_hf_options o;
    cz_import_hf_options_init(&o);
    o.name = name;
    o.dtype = dtype;
    return cz__import_hf_opts(out_model, config_path, &o, err);
}

static int hf_nomem(cz_error *err, const char *config_path)
{
    return cz__error_set(err, CZ_ENOMEM, "out of memory while importing %s", config_path);
}

/* The options a caller may get wrong, each refused with what is allowed. */
static int hf_options_check(const cz_import_hf_options *o, cz_error *err)
{
    if (o->tp_size < 1 || o->tp_size > (1 << 20))
        return cz__error_set(err, CZ_EINVALID,
                             "the tensor-parallel size must be from 1 to 1048576, got %d",
                             o->tp_size);
    if (o->ep_size < 1 || o->ep_size > (1 << 20))
        return cz__error_set(err, CZ_EINVALID,
                             "the expert model-parallel size must be from 1 to 1048576, got %d",
                             o->ep_size);
    if (o->vocab_divisible_by < 1 || o->vocab_divisible_by > (1 << 20))
        return cz__error_set(err, CZ_EINVALID,
                             "make_vocab_size_divisible_by must be from 1 to 1048576, got %d",
                             o->vocab_divisible_by);
    if (!cz_dtype_name(o->dtype))
        return cz__error_set(err, CZ_EINVALID, "cz__import_hf: unknown dtype %d", (int)o->dtype);
    if (o->per_head < CZ_PER_HEAD_NONE || o->per_head > CZ_PER_HEAD_QKVO)
        return cz__error_set(err, CZ_EINVALID,
                             "per_head = %d; expected CZ_PER_HEAD_NONE (0), CZ_PER_HEAD_QKV (1) "
                             "or CZ_PER_HEAD_QKVO (2)",
                             o->per_head);
    if (o->name && !*o->name)
        return cz__error_set(err, CZ_EINVALID, "the model name must not be empty");
    return CZ_OK;
}

/* The config file as a JSON object (*root, a new reference). */
static int hf_load(json_t **root, const char *config_path, cz_error *err)
{
    json_error_t jerr;
    char *text = NULL;
    size_t text_len = 0;
    int rc;
    *root = NULL;
    if ((rc = cz__file_read_all(config_path, CZ_HF_CONFIG_MAX_BYTES, &text, &text_len, err)))
        return rc;
    *root = json_loadb(text, text_len, JSON_REJECT_DUPLICATES, &jerr);
    free(text);
    if (!*root)
        return cz__error_set(err, CZ_EPARSE, "%s:%d:%d: not valid JSON: %s", config_path, jerr.line,
                             jerr.column, jerr.text);
    if (!json_is_object(*root))
        return cz__error_set(err, CZ_EINVALID, "%s: $: expected a JSON object, found %s",
                             config_path, hf_type_name(*root));
    return CZ_OK;
}

/* The model description: header, Megatron record, embedding, the layers (one repeat block
 * when all alike), final norm and output layer. *ok turns false on any allocation failure. */
static json_t *hf_model_json(const hf_config *c, const cz_import_hf_options *o, const char *name,
                             const char *description, bool *ok)
{
    json_t *model = json_object();
    json_t *params = json_array();
    hf_set(model, "schema", json_string(CZ_MODEL_SCHEMA), ok);
    hf_set(model, "name", json_string(name), ok);
    hf_set(model, "dtype", json_string(cz_dtype_name(o->dtype)), ok);
    hf_set(model, "description", json_string(description), ok);
    json_t *mg = json_object();
    hf_set(mg, "num_attention_heads", json_integer(c->heads), ok);
    hf_set(mg, "num_query_groups", json_integer(c->kv_heads), ok);
    hf_set(mg, "vocab_size", json_integer(c->vocab), ok);
    hf_set(mg, "make_vocab_size_divisible_by", json_integer(o->vocab_divisible_by), ok);
    hf_set(mg, "tensor_model_parallel_size", json_integer(o->tp_size), ok);
    hf_set(mg, "padded_vocab_size", json_integer(c->padded_vocab), ok);
    hf_set(model, "megatron", mg, ok);
    hf_add(params,
           hf_param("embedding.word_embeddings.weight", c->padded_vocab, c->hidden, 0, false, ok),
           ok);
    bool uniform = true;
    for (int64_t l = 1; l < c->layers; l++)
        if (c->moe_layer && c->moe_layer[l] != c->moe_layer[0])
            uniform = false;
    if (uniform) {
        json_t *layer = hf_layer(c, c->moe_layer && c->moe_layer[0], ok);
        hf_add(params, hf_repeat(c->layers, "decoder.layers.{i}.", layer, ok), ok);
    } else {
        /* {i} counts inside one repeat block only, so mixed dense/MoE stacks are written as
         * one block per layer with the layer number spelled out. */
        for (int64_t l = 0; l < c->layers && *ok; l++) {
            char prefix[64];
            snprintf(prefix, sizeof prefix, "decoder.layers.%" PRId64 ".", l);
            json_t *layer = hf_layer(c, c->moe_layer[l], ok);
            hf_add(params, hf_repeat(1, prefix, layer, ok), ok);
        }
    }
    hf_add(params, hf_param("decoder.final_layernorm.weight", c->hidden, -1, -1, false, ok), ok);
    if (!c->tie)
        hf_add(params, hf_param("output_layer.weight", c->padded_vocab, c->hidden, 0, false, ok),
               ok);
    hf_set(model, "params", params, ok);
    if (!model)
        *ok = false;
    return model;
}

/* What we write must load: the loader's own checks, not a copy of them. */
static int hf_check_loads(const json_t *model, const char *config_path, cz_error *err)
{
    cz_model *check = NULL;
    size_t shown_len = strlen(config_path) + sizeof " (imported)";
    char *shown = malloc(shown_len);
    if (!shown)
        return hf_nomem(err, config_path);
    snprintf(shown, shown_len, "%s (imported)", config_path);
    int rc = cz__model_from_json(&check, model, shown, NULL, err);
    free(shown);
    cz_model_free(check);
    return rc;
}

int cz__import_hf_opts(json_t **out_model, const char *config_path, const cz_import_hf_options *o,
                       cz_error *err)
{
    int rc = 0;
    bool ok = true;
    json_t *root = NULL, *model = NULL;
    char *derived = NULL, *description = NULL;
    hf_config c = {.path = config_path,
                   .split_qkv = o && o->split_qkv,
                   .split_gate_up = o && o->split_gate_up,
                   .per_head = o ? o->per_head : CZ_PER_HEAD_NONE};

    if (!out_model || !config_path || !o)
        return cz__error_set(err, CZ_EINVALID,
                             "cz__import_hf: out_model, config_path and options are needed");
    *out_model = NULL;
    if ((rc = hf_options_check(o, err)) != CZ_OK)
        return rc;
    const char *name = o->name;
    if ((rc = hf_load(&root, config_path, err)) != CZ_OK ||
        (rc = hf_config_read(&c, root, err)) != CZ_OK ||
        (rc = hf_check_tp(&c, o->tp_size, err)) != CZ_OK ||
        (rc = hf_check_ep(&c, o->ep_size, err)) != CZ_OK)
        goto done;
    c.padded_vocab = cz__megatron_padded_vocab(c.vocab, o->vocab_divisible_by, o->tp_size);
    if (c.padded_vocab < 1 || c.padded_vocab > HF_MAX_DIM) {
        rc =
            cz__error_set(err, CZ_EINVALID,
                          "%s: $.vocab_size %" PRId64 " padded to a multiple of %d x TP %d exceeds "
                          "%" PRId64 "; use a smaller --make-vocab-size-divisible-by",
                          config_path, c.vocab, o->vocab_divisible_by, o->tp_size, HF_MAX_DIM);
        goto done;
    }
    if (!name) {
        name = derived = hf_default_name(config_path, root);
        if (!derived) {
            rc = hf_nomem(err, config_path);
            goto done;
        }
    }
    description = hf_description(&c);
    if (!description) {
        rc = hf_nomem(err, config_path);
        goto done;
    }
    model = hf_model_json(&c, o, name, description, &ok);
    if (!ok) {
        rc = hf_nomem(err, config_path);
        goto done;
    }
    if ((rc = hf_check_loads(model, config_path, err)) != CZ_OK)
        goto done;
    *out_model = model;
    model = NULL;
done:
    json_decref(model);
    json_decref(root);
    free(derived);
    free(description);
    free(c.moe_layer);
    return rc;
}

/* ---- formatting ---- */

static void hf_indent(cz_strbuf *b, int depth)
{
    for (int i = 0; i < depth; i++)
        cz__strbuf_put(b, "  ", 2);
}

static void hf_put_json(cz_strbuf *b, const json_t *v)
{
    /* Without JSON_INDENT or JSON_COMPACT jansson writes one line with ", " and ": ". */
    char *s = json_dumps(v, JSON_ENCODE_ANY | JSON_PRESERVE_ORDER);
    if (!s) {
        b->failed = 1;
        return;
    }
    cz__strbuf_puts(b, s);
    free(s);
}

/* A value spreads over several lines when it holds an array of objects or arrays (a params
 * list); parameters themselves stay on one line. */
static bool hf_spreads(const json_t *v)
{
    if (json_is_array(v)) {
        for (size_t i = 0; i < json_array_size(v); i++) {
            const json_t *e = json_array_get(v, i);
            if (json_is_object(e) || json_is_array(e))
                return true;
        }
        return false;
    }
    if (json_is_object(v)) {
        const char *key;
        const json_t *value;
        json_object_foreach((json_t *)v, key, value) if (hf_spreads(value)) return true;
    }
    return false;
}

static void hf_emit(cz_strbuf *b, const json_t *v, int depth)
{
    if (!hf_spreads(v)) {
        hf_put_json(b, v);
        return;
    }
    if (json_is_array(v)) {
        cz__strbuf_puts(b, "[\n");
        for (size_t i = 0; i < json_array_size(v); i++) {
            hf_indent(b, depth + 1);
            hf_emit(b, json_array_get(v, i), depth + 1);
            cz__strbuf_puts(b, i + 1 < json_array_size(v) ? ",\n" : "\n");
        }
        hf_indent(b, depth);
        cz__strbuf_puts(b, "]");
        return;
    }
    cz__strbuf_puts(b, "{\n");
    void *it = json_object_iter((json_t *)v);
    while (it) {
        json_t *key = json_string(json_object_iter_key(it));
        hf_indent(b, depth + 1);
        if (!key)
            b->failed = 1;
        else
            hf_put_json(b, key);
        json_decref(key);
        cz__strbuf_puts(b, ": ");
        hf_emit(b, json_object_iter_value(it), depth + 1);
        it = json_object_iter_next((json_t *)v, it);
        cz__strbuf_puts(b, it ? ",\n" : "\n");
    }
    hf_indent(b, depth);
    cz__strbuf_puts(b, "}");
}

int cz__model_json_format(char **out, const json_t *model, cz_error *err)
{
    if (!out || !model)
        return cz__error_set(err, CZ_EINVALID, "cz__model_json_format: out and model are needed");
    cz_strbuf b = CZ_STRBUF_INIT;
    hf_emit(&b, model, 0);
    cz__strbuf_puts(&b, "\n");
    if (b.failed) {
        cz__strbuf_free(&b);
        *out = NULL;
        return cz__error_set(err, CZ_ENOMEM, "out of memory while formatting a model description");
    }
    *out = b.data;
    return 0;
}
