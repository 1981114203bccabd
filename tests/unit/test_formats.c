/* Model, cluster and plan formats: loading, error messages, plan write/read round trips. */
#include "cz_test_util.h"
#include "json_util.h"

#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char tmpdir[256];

static void make_tmpdir(void)
{
    ck_assert_ptr_nonnull(czt_tmpdir_make(tmpdir, sizeof tmpdir, "cz_formats"));
}

static void remove_tmpdir(void)
{
    czt_tmpdir_remove(tmpdir);
}

static const char *data_path(char *buf, size_t n, const char *rel)
{
    const char *src = getenv("CZ_SOURCE_DIR");
    snprintf(buf, n, "%s/tests/data/%s", src ? src : ".", rel);
    return buf;
}

/* Writes text to <tmpdir>/<name>, turning every ' into " so cases read like JSON. */
static const char *write_tmp(char *buf, size_t n, const char *name, const char *text)
{
    snprintf(buf, n, "%s/%s", tmpdir, name);
    FILE *f = fopen(buf, "w");
    ck_assert_ptr_nonnull(f);
    for (const char *p = text; *p; p++)
        fputc(*p == '\'' ? '"' : *p, f);
    fclose(f);
    return buf;
}

static void assert_contains(const char *msg, const char *needle)
{
    ck_assert_msg(strstr(msg, needle) != NULL, "message \"%s\" lacks \"%s\"", msg, needle);
}

/* ---------------------------------------------------------------------------------------- */
/* model                                                                                     */

START_TEST(test_model_tiny)
{
    char path[512];
    cz_model *m = NULL;
    cz_error err;
    cz_error_clear(&err);
    int rc = cz_model_load(&m, data_path(path, sizeof path, "model_tiny.json"), &err);
    ck_assert_msg(rc == CZ_OK, "%s", err.message);
    ck_assert_str_eq(m->name, "tiny");
    ck_assert_str_eq(m->source, path);
    ck_assert_int_eq(m->dtype, CZ_DTYPE_BF16);
    /* computed independently: Python json.dumps(sort_keys, compact separators) + hashlib */
    ck_assert_str_eq(m->sha256, "6340dfb65ce82d7d53d4a83727833448e3b239245c266ab5e541fc017523172a");
    ck_assert_uint_eq(m->nparams, 11);
    ck_assert_int_eq(m->nlayers, 3);
    static const struct {
        const char *name;
        int ndim;
        long long rows, cols;
        int tp_dim, kind, layer;
    } want[] = {
        {"embed", 2, 100, 16, 0, CZ_KIND_ELEMENTWISE, -1},
        {"layers.0.qkv", 2, 48, 16, 0, CZ_KIND_MATRIX, 0},
        {"layers.0.norm", 1, 16, 1, -1, CZ_KIND_ELEMENTWISE, 0},
        {"layers.0.experts.0.w", 2, 32, 16, 1, CZ_KIND_MATRIX, 0},
        {"layers.0.experts.1.w", 2, 32, 16, 1, CZ_KIND_MATRIX, 0},
        {"layers.1.qkv", 2, 48, 16, 0, CZ_KIND_MATRIX, 1},
        {"layers.1.norm", 1, 16, 1, -1, CZ_KIND_ELEMENTWISE, 1},
        {"layers.1.experts.0.w", 2, 32, 16, 1, CZ_KIND_MATRIX, 1},
        {"layers.1.experts.1.w", 2, 32, 16, 1, CZ_KIND_MATRIX, 1},
        {"extra0.proj", 2, 16, 16, -1, CZ_KIND_MATRIX, 2},
        {"head", 2, 100, 16, 0, CZ_KIND_ELEMENTWISE, -1},
    };
    for (size_t i = 0; i < 11; i++) {
        const cz_param_def *p = &m->params[i];
        ck_assert_str_eq(p->name, want[i].name);
        ck_assert_int_eq(p->ndim, want[i].ndim);
        ck_assert_int_eq(p->shape[0], want[i].rows);
        ck_assert_int_eq(p->shape[1], want[i].cols);
        ck_assert_int_eq(p->tp_dim, want[i].tp_dim);
        ck_assert_int_eq(p->kind, want[i].kind);
        ck_assert_int_eq(p->layer, want[i].layer);
        if (strstr(p->name, "qkv")) {
            ck_assert_int_eq(p->block_dim, 0);
            ck_assert_int_eq(p->nblocks, 3);
            for (int b = 0; b < 3; b++)
                ck_assert_int_eq(p->block_sizes[b], 16);
        } else {
            ck_assert_int_eq(p->block_dim, -1);
            ck_assert_int_eq(p->nblocks, 0);
            ck_assert_ptr_null(p->block_sizes);
        }
    }
    cz_model_free(m);
}
END_TEST

/* The hash covers content, not layout: key order and whitespace do not change it. */
START_TEST(test_model_hash_canonical)
{
    char path[512], ref[512];
    cz_model *a = NULL, *b = NULL;
    cz_error err;
    write_tmp(path, sizeof path, "m1.json",
              "{'params':[{'tp_dim':null,'shape':[4,4],'name':'w'}],'dtype':'fp32',"
              "'name':'x','schema':'canzona.model/1'}");
    write_tmp(ref, sizeof ref, "m2.json",
              "{\n  'schema': 'canzona.model/1',\n  'name': 'x',\n  'dtype': 'fp32',\n"
              "  'params': [ { 'name': 'w', 'shape': [4, 4], 'tp_dim': null } ]\n}\n");
    ck_assert_int_eq(cz_model_load(&a, path, &err), CZ_OK);
    ck_assert_int_eq(cz_model_load(&b, ref, &err), CZ_OK);
    ck_assert_str_eq(a->sha256, b->sha256);
    ck_assert_int_eq(a->dtype, CZ_DTYPE_FP32);
    ck_assert_int_eq(a->nlayers, 0);
    ck_assert_int_eq(a->params[0].layer, -1);
    cz_model_free(a);
    cz_model_free(b);
}
END_TEST

typedef struct bad_case {
    const char *json; /* ' stands for " */
    int code;
    const char *needle1, *needle2;
} bad_case;

#define P1(x) "{'schema':'canzona.model/1','name':'m','dtype':'bf16','params':[" x "]}"
#define W44 "{'name':'w','shape':[4,4],'tp_dim':null}"

static const bad_case bad_models[] = {
    {"{'schema':'canzona.model/1','name':'m','dtype':'bf16','params':[" W44 "],'foo':1}",
     CZ_EINVALID, "$: unknown key \"foo\"", "expected one of"},
    {"{'schema':'canzona.model/7','name':'m','dtype':'bf16','params':[" W44 "]}", CZ_EUNSUPPORTED,
     "$.schema: unsupported schema version \"canzona.model/7\"", NULL},
    {"{'schema':'canzona.cluster/1','name':'m','dtype':'bf16','params':[" W44 "]}", CZ_EINVALID,
     "$.schema: expected \"canzona.model/1\"", NULL},
    {"{'name':'m','dtype':'bf16','params':[" W44 "]}", CZ_EINVALID,
     "$: missing required key \"schema\"", NULL},
    {"{'schema':'canzona.model/1','name':3,'dtype':'bf16','params':[" W44 "]}", CZ_EINVALID,
     "$.name: expected a string, found 3", NULL},
    {"{'schema':'canzona.model/1','name':'m','dtype':'int8','params':[" W44 "]}", CZ_EINVALID,
     "$.dtype: expected one of \"bf16\", \"fp16\", \"fp32\", found \"int8\"", NULL},
    {"{'schema':'canzona.model/1','name':'m','dtype':'bf16','params':[]}", CZ_EINVALID,
     "$.params: expected a non-empty array", NULL},
    {"{'schema':'canzona.model/1','name':'m','dtype':'bf16','params':{}}", CZ_EINVALID,
     "$.params: expected a non-empty array, found an object", NULL},
    {P1(W44 ",{'name':'v','shape':[4,-4],'tp_dim':null}"), CZ_EINVALID,
     "$.params[1].shape[1]: expected a positive integer, found -4", NULL},
    {P1("{'name':'v','shape':[0],'tp_dim':null}"), CZ_EINVALID,
     "$.params[0].shape[0]: expected a positive integer, found 0", NULL},
    {P1("{'name':'v','shape':[2.5, 3],'tp_dim':null}"), CZ_EINVALID,
     "$.params[0].shape[0]: expected a positive integer, found 2.5", NULL},
    {P1("{'name':'v','shape':[],'tp_dim':null}"), CZ_EINVALID,
     "$.params[0].shape: expected 1 or 2 dimensions", "found 0"},
    {P1("{'name':'v','shape':[2,3,4],'tp_dim':null}"), CZ_EINVALID,
     "$.params[0].shape: expected 1 or 2 dimensions", "found 3"},
    {P1("{'name':'v','shape':[2,3],'tp_dim':2}"), CZ_EINVALID,
     "$.params[0].tp_dim: expected 0, 1 or null for a 2-D parameter, found 2", NULL},
    {P1("{'name':'v','shape':[2],'tp_dim':1}"), CZ_EINVALID,
     "$.params[0].tp_dim: expected 0 or null for a 1-D parameter, found 1", NULL},
    {P1("{'name':'v','shape':[2,3]}"), CZ_EINVALID, "$.params[0]: missing required key \"tp_dim\"",
     NULL},
    {P1("{'name':'v','shape':[2],'tp_dim':0,'optimizer':'matrix'}"), CZ_EINVALID,
     "$.params[0].optimizer: a 1-D parameter cannot use the matrix optimizer", NULL},
    {P1("{'name':'v','shape':[2,3],'tp_dim':0,'optimizer':'adam'}"), CZ_EINVALID,
     "$.params[0].optimizer: expected one of \"matrix\", \"elementwise\"", NULL},
    {P1("{'name':'v','shape':[6,3],'tp_dim':0,'blocks':{'dim':0,'sizes':[2,2,3]}}"), CZ_EINVALID,
     "$.params[0].blocks.sizes: block sizes sum to 7; expected shape[0] = 6", NULL},
    {P1("{'name':'v','shape':[6,3],'tp_dim':0,'blocks':{'dim':0,'sizes':[6,0]}}"), CZ_EINVALID,
     "$.params[0].blocks.sizes[1]: expected a positive integer, found 0", NULL},
    {P1("{'name':'v','shape':[6,3],'tp_dim':0,'blocks':{'dim':2,'sizes':[6]}}"), CZ_EINVALID,
     "$.params[0].blocks.dim: expected an integer in [0, 1], found 2", NULL},
    {P1("{'name':'v','shape':[6,3],'tp_dim':0,'optimizer':'elementwise','blocks':{'dim':0,"
        "'sizes':[6]}}"),
     CZ_EINVALID, "$.params[0].blocks: blocks are allowed only on 2-D matrix parameters", NULL},
    /* Per-head Muon: heads inside blocks, along their dimension, of a size that divides. */
    {P1("{'name':'v','shape':[6,3],'tp_dim':0,'heads':{'dim':0,'size':4}}"), CZ_EINVALID,
     "$.params[0].heads: 'v': shape[0] = 6 is not a multiple of the head size 4", NULL},
    {P1("{'name':'v','shape':[8,3],'tp_dim':0,'blocks':{'dim':0,'sizes':[4,2,2]},"
        "'heads':{'dim':0,'size':4}}"),
     CZ_EINVALID, "$.params[0].heads: 'v': block 1 has 2 rows or columns along dim 0",
     "not a multiple of the head size 4"},
    {P1("{'name':'v','shape':[8,3],'tp_dim':0,'blocks':{'dim':0,'sizes':[4,4]},"
        "'heads':{'dim':1,'size':1}}"),
     CZ_EINVALID, "$.params[0].heads: 'v': heads along dim 1 but blocks along dim 0", NULL},
    {P1("{'name':'v','shape':[8,3],'tp_dim':0,'heads':{'dim':0,'size':0}}"), CZ_EINVALID,
     "$.params[0].heads.size: expected a positive integer, found 0", NULL},
    {P1("{'name':'v','shape':[8,3],'tp_dim':0,'heads':{'dim':0,'size':2,'count':4}}"), CZ_EINVALID,
     "$.params[0].heads: unknown key \"count\"", NULL},
    {P1("{'name':'v','shape':[8,3],'tp_dim':0,'optimizer':'elementwise','heads':{'dim':0,"
        "'size':2}}"),
     CZ_EINVALID, "$.params[0].heads: heads are allowed only on 2-D matrix parameters", NULL},
    {P1("{'name':'v','shape':[6,3],'tp_dim':0,'size':3}"), CZ_EINVALID,
     "$.params[0]: unknown key \"size\"", NULL},
    {P1("{'name':'','shape':[6,3],'tp_dim':0}"), CZ_EINVALID,
     "$.params[0].name: expected a non-empty string", NULL},
    {P1(W44 ",{'name':'x','shape':[1],'tp_dim':null}," W44), CZ_EINVALID,
     "$.params[2].name: duplicate parameter name \"w\"", "first defined at $.params[0].name"},
    {P1("{'repeat':2,'prefix':'layer.','params':[" W44 "]}"), CZ_EINVALID,
     "$.params[0].params[0].name: duplicate parameter name \"layer.w\"",
     "(parameter 1 after expansion)"},
    {P1("{'repeat':0,'prefix':'l{i}.','params':[" W44 "]}"), CZ_EINVALID,
     "$.params[0].repeat: expected an integer in [1, 2147483647], found 0", NULL},
    {P1("{'repeat':2,'prefix':'l{i}.','params':[" W44 "],'x':1}"), CZ_EINVALID,
     "$.params[0]: unknown key \"x\"", NULL},
    {P1("{'repeat':2,'params':[" W44 "]}"), CZ_EINVALID,
     "$.params[0]: missing required key \"prefix\"", NULL},
    {P1("{'repeat':2,'prefix':'a{i}.','params':[{'repeat':3,'prefix':'b{i}.','params':[" W44
        ",{'name':'q','shape':[3,-1],'tp_dim':0}]}]}"),
     CZ_EINVALID, "$.params[0].params[0].params[1].shape[1]", "found -1"},
    {P1("{'repeat':100000,'prefix':'a{i}.','params':[{'repeat':100000,'prefix':'b{i}.',"
        "'params':[" W44 "]}]}"),
     CZ_EINVALID, "$.params: expands to more than", NULL},
    {"['canzona.model/1']", CZ_EINVALID, "$: expected a JSON object, found an array", NULL},
    {"{'schema':'canzona.model/1','schema':'canzona.model/1'}", CZ_EPARSE, ":1:", "invalid JSON"},
};

START_TEST(test_model_bad)
{
    const bad_case *bc = &bad_models[_i];
    char path[512];
    cz_model *m = (cz_model *)&m; /* must be reset to NULL on failure */
    cz_error err;
    cz_error_clear(&err);
    write_tmp(path, sizeof path, "bad_model.json", bc->json);
    int rc = cz_model_load(&m, path, &err);
    ck_assert_msg(rc == bc->code, "case %d: rc %d, want %d (%s)", _i, rc, bc->code, err.message);
    ck_assert_int_eq(err.code, bc->code);
    ck_assert_ptr_null(m);
    assert_contains(err.message, path);
    assert_contains(err.message, bc->needle1);
    if (bc->needle2)
        assert_contains(err.message, bc->needle2);
}
END_TEST

START_TEST(test_model_bad_files)
{
    char path[512];
    cz_model *m = NULL;
    cz_error err;
    char want[600];

    ck_assert_int_eq(cz_model_load(&m, data_path(path, sizeof path, "bad/model_syntax.json"), &err),
                     CZ_EPARSE);
    snprintf(want, sizeof want, "%s:4:", path); /* the missing comma is noticed on line 4 */
    assert_contains(err.message, want);
    assert_contains(err.message, "invalid JSON");

    ck_assert_int_eq(
        cz_model_load(&m, data_path(path, sizeof path, "bad/model_version.json"), &err),
        CZ_EUNSUPPORTED);
    assert_contains(err.message, "$.schema");

    ck_assert_int_eq(
        cz_model_load(&m, data_path(path, sizeof path, "bad/model_negative_dim.json"), &err),
        CZ_EINVALID);
    snprintf(want, sizeof want, "%s: $.params[3].shape[1]: expected a positive integer, found -4",
             path);
    ck_assert_str_eq(err.message, want);

    ck_assert_int_eq(cz_model_load(&m, data_path(path, sizeof path, "bad/no_such_file.json"), &err),
                     CZ_EIO);
    assert_contains(err.message, path);
    assert_contains(err.message, strerror(ENOENT));
    ck_assert_ptr_null(m);
}
END_TEST

/* ---------------------------------------------------------------------------------------- */
/* cluster                                                                                   */

START_TEST(test_cluster_tiny)
{
    char path[512];
    cz_cluster *c = NULL;
    cz_error err;
    int rc = cz_cluster_load(&c, data_path(path, sizeof path, "cluster_tiny.json"), &err);
    ck_assert_msg(rc == CZ_OK, "%s", err.message);
    ck_assert_str_eq(c->name, "tiny-cluster");
    ck_assert_str_eq(c->source, path);
    ck_assert_str_eq(c->sha256, "807d4efea7300839083068435cdb450e2c75c892325c4ea14d32f1c045655709");
    ck_assert_int_eq(c->gpus, 8);
    ck_assert_int_eq(c->dp, 2);
    ck_assert_int_eq(c->tp, 2);
    ck_assert_int_eq(c->pp, 2);
    ck_assert_int_eq(c->gpus_per_node, 4);
    ck_assert_str_eq(c->device.name, "test-gpu");
    ck_assert_double_eq(c->device.matmul_tflops, 700.0);
    ck_assert_double_eq(c->device.mem_gbps, 2500.5);
    ck_assert_double_eq(c->device.memory_gib, 80.0);
    ck_assert_double_eq(c->links.intra_node_gbps, 450.0);
    ck_assert_double_eq(c->links.inter_node_gbps, 50.0);
    ck_assert_double_eq(c->links.latency_us, 0.0);
    ck_assert_int_eq(c->bucket_size, 1000);
    ck_assert_int_eq(c->bucket_align, 64);
    cz_cluster_free(c);
}
END_TEST

#define CL(top, dev, links)                                                                        \
    "{'schema':'canzona.cluster/1','name':'c'," top ",'device':{" dev "},'links':{" links "}}"
#define TOP_OK "'gpus':4,'dp':2,'tp':2,'pp':1,'gpus_per_node':4"
#define DEV_OK "'name':'g','matmul_tflops':100,'mem_gbps':1000.5,'memory_gib':40"
#define LNK_OK "'intra_node_gbps':100,'inter_node_gbps':10,'latency_us':2.5"

static const bad_case bad_clusters[] = {
    {CL("'gpus':16,'dp':2,'tp':2,'pp':2,'gpus_per_node':4", DEV_OK, LNK_OK), CZ_EINVALID,
     "$: dp*tp*pp = 2*2*2 = 8 does not match gpus = 16", NULL},
    {CL(TOP_OK, "'name':'g','matmul_tflops':0,'mem_gbps':1,'memory_gib':1", LNK_OK), CZ_EINVALID,
     "$.device.matmul_tflops: expected a positive number, found 0", NULL},
    {CL(TOP_OK, "'name':'g','matmul_tflops':1,'mem_gbps':'fast','memory_gib':1", LNK_OK),
     CZ_EINVALID, "$.device.mem_gbps: expected a positive number, found \"fast\"", NULL},
    {CL(TOP_OK, DEV_OK, "'intra_node_gbps':1,'inter_node_gbps':1,'latency_us':-1"), CZ_EINVALID,
     "$.links.latency_us: expected a non-negative number, found -1", NULL},
    {CL(TOP_OK, DEV_OK, LNK_OK ",'jitter':1"), CZ_EINVALID, "$.links: unknown key \"jitter\"",
     NULL},
    {CL(TOP_OK ",'buckets':{'size':0}", DEV_OK, LNK_OK), CZ_EINVALID,
     "$.buckets.size: expected a positive integer, found 0", NULL},
    {CL(TOP_OK ",'buckets':{'size':10,'align':-64}", DEV_OK, LNK_OK), CZ_EINVALID,
     "$.buckets.align: expected an integer in [1, 2147483647], found -64", NULL},
    {CL("'gpus':'4','dp':2,'tp':2,'pp':1,'gpus_per_node':4", DEV_OK, LNK_OK), CZ_EINVALID,
     "$.gpus: expected a positive integer, found \"4\"", NULL},
    {CL("'gpus':4,'dp':2,'tp':2,'pp':1", DEV_OK, LNK_OK), CZ_EINVALID,
     "$: missing required key \"gpus_per_node\"", NULL},
    {"{'schema':'canzona.cluster/3','name':'c'}", CZ_EUNSUPPORTED,
     "$.schema: unsupported schema version", NULL},
    {"{'schema':'canzona.cluster/1','name':'c'," TOP_OK ",'links':{" LNK_OK "}}", CZ_EINVALID,
     "$: missing required key \"device\"", NULL},
    {CL("'gpus':4,'dp':2147483647,'tp':2147483647,'pp':2147483647,'gpus_per_node':4", DEV_OK,
        LNK_OK),
     CZ_EINVALID, "$: dp*tp*pp = 2147483647*2147483647*2147483647 overflows", NULL},
};

START_TEST(test_cluster_bad)
{
    const bad_case *bc = &bad_clusters[_i];
    char path[512];
    cz_cluster *c = (cz_cluster *)&c;
    cz_error err;
    cz_error_clear(&err);
    write_tmp(path, sizeof path, "bad_cluster.json", bc->json);
    int rc = cz_cluster_load(&c, path, &err);
    ck_assert_msg(rc == bc->code, "case %d: rc %d, want %d (%s)", _i, rc, bc->code, err.message);
    ck_assert_ptr_null(c);
    assert_contains(err.message, path);
    assert_contains(err.message, bc->needle1);
    if (bc->needle2)
        assert_contains(err.message, bc->needle2);
}
END_TEST

START_TEST(test_cluster_defaults_and_fixture)
{
    char path[512], want[700];
    cz_cluster *c = NULL;
    cz_error err;
    write_tmp(path, sizeof path, "c.json", CL(TOP_OK, DEV_OK, LNK_OK));
    ck_assert_int_eq(cz_cluster_load(&c, path, &err), CZ_OK);
    ck_assert_int_eq(c->bucket_size, 0);
    ck_assert_int_eq(c->bucket_align, 64);
    ck_assert_double_eq(c->links.latency_us, 2.5);
    cz_cluster_free(c);
    c = NULL;
    ck_assert_int_eq(
        cz_cluster_load(&c, data_path(path, sizeof path, "bad/cluster_mismatch.json"), &err),
        CZ_EINVALID);
    snprintf(want, sizeof want, "%s: $: dp*tp*pp = 8*4*1 = 32 does not match gpus = 64", path);
    ck_assert_str_eq(err.message, want);
}
END_TEST

/* ---------------------------------------------------------------------------------------- */
/* plan                                                                                      */

static int64_t *i64s(int n, const int64_t *v)
{
    int64_t *a = malloc((size_t)n * sizeof *a);
    memcpy(a, v, (size_t)n * sizeof *a);
    return a;
}

static double *dbls(int n, const double *v)
{
    double *a = malloc((size_t)n * sizeof *a);
    memcpy(a, v, (size_t)n * sizeof *a);
    return a;
}

static void set_group(cz_plan_group *g, int id, int nslots, int ntasks, const int *param,
                      const int *slot, const double *load)
{
    g->id = id;
    g->nslots = nslots;
    g->ntasks = ntasks;
    g->task_param = malloc((size_t)(ntasks ? ntasks : 1) * sizeof(int));
    g->task_slot = malloc((size_t)(ntasks ? ntasks : 1) * sizeof(int));
    memcpy(g->task_param, param, (size_t)ntasks * sizeof(int));
    memcpy(g->task_slot, slot, (size_t)ntasks * sizeof(int));
    g->load = dbls(nslots, load);
}

/* dp 2, tp 2, pp 1; five params in two buckets; rank 0 has two groups, rank 1 one. Values are
 * arbitrary but distinct, with reals that need all 17 digits to round-trip. */
static cz_plan *make_plan(void)
{
    cz_plan *p = calloc(1, sizeof *p);
    cz_settings_init(&p->settings);
    p->settings.optimizer = CZ_OPTIM_SOAP;
    p->settings.unit = CZ_UNIT_FLOPS;
    p->settings.alpha = 0.3;
    p->settings.alpha_numel_loads = 1;
    p->settings.capacity = 1e9;
    p->settings.seed = 42;
    p->settings.ns_steps = 6;
    p->capacity_used = 123456.5;
    p->dp_fell_back = 1;
    p->plan_seconds = 3.25; /* must not be written */
    p->generator = strdup("canzona");
    p->generator_version = strdup(CZ_VERSION);
    p->model_name = strdup("tiny");
    p->model_sha256 = strdup("6340dfb65ce82d7d53d4a83727833448e3b239245c266ab5e541fc017523172a");
    p->cluster_name = strdup("tiny-cluster");
    p->cluster_sha256 = strdup("807d4efea7300839083068435cdb450e2c75c892325c4ea14d32f1c045655709");
    p->dtype = CZ_DTYPE_FP16;
    p->dp = 2;
    p->tp = 2;
    p->pp = 1;
    p->gpus_per_node = 8;
    p->bucket_size = 40000000;
    p->bucket_align = 64;

    static const struct {
        const char *name;
        int ndim;
        int64_t shape[2], local[2];
        int tp_dim, kind, layer, bucket;
        int64_t offset, numel;
        double cost;
        int owner;
    } spec[] = {
        {"embed", 2, {8, 4}, {4, 4}, 0, CZ_KIND_ELEMENTWISE, -1, 1, 128, 16, 0.1, 1},
        {"l0.qkv", 2, {6, 4}, {3, 4}, 0, CZ_KIND_MATRIX, 0, 1, 0, 12, 1234.5678901234567, 0},
        {"l0.norm", 1, {4, 1}, {4, 1}, -1, CZ_KIND_ELEMENTWISE, 0, 0, 128, 4, 1e-300, 1},
        {"l0.out", 2, {4, 4}, {4, 2}, 1, CZ_KIND_MATRIX, 0, 0, 64, 8, 2.0 / 3.0, 1},
        {"l1.w", 2, {4, 4}, {2, 4}, 0, CZ_KIND_MATRIX, 1, 0, 0, 8, 7e20, 0},
    };
    p->nparams = 5;
    p->params = calloc(5, sizeof *p->params);
    for (int i = 0; i < 5; i++) {
        cz_plan_param *q = &p->params[i];
        q->id = i;
        q->def.name = strdup(spec[i].name);
        q->def.ndim = spec[i].ndim;
        memcpy(q->def.shape, spec[i].shape, sizeof q->def.shape);
        memcpy(q->local_shape, spec[i].local, sizeof q->local_shape);
        q->def.tp_dim = spec[i].tp_dim;
        q->def.kind = (cz_param_kind)spec[i].kind;
        q->def.block_dim = -1;
        q->def.layer = spec[i].layer;
        q->stage = 0;
        q->bucket = spec[i].bucket;
        q->offset = spec[i].offset;
        q->numel = spec[i].numel;
        q->cost = spec[i].cost;
        q->dp_owner = spec[i].owner;
    }
    p->params[1].def.block_dim = 0;
    p->params[1].def.nblocks = 3;
    p->params[1].def.block_sizes = i64s(3, (int64_t[]){2, 2, 2});
    p->params[1].def.head_dim = 0; /* per-head: the round trip keeps the heads */
    p->params[1].def.head_size = 2;

    p->nbuckets = 2;
    p->buckets = calloc(2, sizeof *p->buckets);
    p->buckets[0] =
        (cz_plan_bucket){0, 0, 0, 192, i64s(4, (int64_t[]){0, 64, 64, 192}), 0, 0, 0, -1};
    p->buckets[1] =
        (cz_plan_bucket){1, 0, 192, 144, i64s(4, (int64_t[]){0, 128, 128, 144}), 0, 0, 0, -1};

    p->nschedules = 2;
    p->schedules = calloc(2, sizeof *p->schedules);
    p->schedules[0] = (cz_rank_schedule){0, 0, 2, calloc(2, sizeof(cz_plan_group)), 0};
    set_group(&p->schedules[0].groups[0], 0, 2, 1, (int[]){1}, (int[]){0},
              (double[]){1234.5678901234567, 0});
    set_group(&p->schedules[0].groups[1], 1, 2, 1, (int[]){4}, (int[]){1}, (double[]){0, 7e20});
    p->schedules[1] = (cz_rank_schedule){0, 1, 1, calloc(1, sizeof(cz_plan_group)), 0};
    set_group(&p->schedules[1].groups[0], 0, 2, 1, (int[]){3}, (int[]){0},
              (double[]){2.0 / 3.0, 0});

    cz_plan_metrics *m = &p->metrics;
    m->dp_load = dbls(2, (double[]){7e20 + 1234.5678901234567, 2.0 / 3.0 + 0.1});
    m->dp_imbalance = 1.9999999999999982;
    m->rank_makespan = dbls(2, (double[]){7.0000000000000012e20, 0.7});
    m->tp_makespan = 7.0000000000000012e20;
    m->tp_imbalance = 3.5;
    m->gpu_load = dbls(4, (double[]){1.25, 7e20, 0.3, 0.05});
    m->total_cost = 7e20;
    m->max_task_cost = 7e20;
    m->lower_bound = 7e20;
    m->memory = dbls(4, (double[]){1024, 2048.5, 0, 1e12});
    m->predicted_step_s = 0.012345678901234568;
    return p;
}

static void assert_plans_equal(const cz_plan *a, const cz_plan *b)
{
    ck_assert_str_eq(a->generator, b->generator);
    ck_assert_str_eq(a->generator_version, b->generator_version);
    ck_assert_str_eq(a->model_name, b->model_name);
    ck_assert_str_eq(a->model_sha256, b->model_sha256);
    ck_assert_str_eq(a->cluster_name, b->cluster_name);
    ck_assert_str_eq(a->cluster_sha256, b->cluster_sha256);
    ck_assert_int_eq(a->dtype, b->dtype);
    ck_assert_int_eq(a->settings.optimizer, b->settings.optimizer);
    ck_assert_int_eq(a->settings.unit, b->settings.unit);
    ck_assert_int_eq(a->settings.dp, b->settings.dp);
    ck_assert_double_eq(a->settings.alpha, b->settings.alpha);
    ck_assert_int_eq(a->settings.alpha_numel_loads, b->settings.alpha_numel_loads);
    ck_assert_int_eq(a->settings.layerwise_order, b->settings.layerwise_order);
    ck_assert_int_eq(a->settings.tp, b->settings.tp);
    ck_assert_double_eq(a->settings.capacity, b->settings.capacity);
    ck_assert_int_eq(a->settings.solver, b->settings.solver);
    ck_assert_double_eq(a->settings.time_limit_s, b->settings.time_limit_s);
    ck_assert_uint_eq(a->settings.seed, b->settings.seed);
    ck_assert_int_eq(a->settings.ns_steps, b->settings.ns_steps);
    ck_assert_int_eq(a->settings.max_precond_dim, b->settings.max_precond_dim);
    ck_assert_int_eq(a->settings.precondition_frequency, b->settings.precondition_frequency);
    ck_assert_double_eq(a->capacity_used, b->capacity_used);
    ck_assert_int_eq(a->dp_fell_back, b->dp_fell_back);
    ck_assert_int_eq(a->dp, b->dp);
    ck_assert_int_eq(a->tp, b->tp);
    ck_assert_int_eq(a->pp, b->pp);
    ck_assert_int_eq(a->gpus_per_node, b->gpus_per_node);
    ck_assert_int_eq(a->bucket_size, b->bucket_size);
    ck_assert_int_eq(a->bucket_align, b->bucket_align);
    ck_assert_uint_eq(a->nparams, b->nparams);
    for (size_t i = 0; i < a->nparams; i++) {
        const cz_plan_param *x = &a->params[i], *y = &b->params[i];
        ck_assert_int_eq(x->id, y->id);
        ck_assert_str_eq(x->def.name, y->def.name);
        ck_assert_int_eq(x->def.ndim, y->def.ndim);
        for (int d = 0; d < 2; d++) {
            ck_assert_int_eq(x->def.shape[d], y->def.shape[d]);
            ck_assert_int_eq(x->local_shape[d], y->local_shape[d]);
        }
        ck_assert_int_eq(x->def.tp_dim, y->def.tp_dim);
        ck_assert_int_eq(x->def.kind, y->def.kind);
        ck_assert_int_eq(x->def.block_dim, y->def.block_dim);
        ck_assert_int_eq(x->def.nblocks, y->def.nblocks);
        for (int k = 0; k < x->def.nblocks; k++)
            ck_assert_int_eq(x->def.block_sizes[k], y->def.block_sizes[k]);
        ck_assert_int_eq(x->def.head_size, y->def.head_size);
        if (x->def.head_size > 0)
            ck_assert_int_eq(x->def.head_dim, y->def.head_dim);
        ck_assert_int_eq(x->def.layer, y->def.layer);
        ck_assert_int_eq(x->stage, y->stage);
        ck_assert_int_eq(x->bucket, y->bucket);
        ck_assert_int_eq(x->offset, y->offset);
        ck_assert_int_eq(x->numel, y->numel);
        ck_assert_double_eq(x->cost, y->cost); /* exact: 17 digits round-trip */
        ck_assert_int_eq(x->dp_owner, y->dp_owner);
    }
    ck_assert_uint_eq(a->nbuckets, b->nbuckets);
    for (size_t i = 0; i < a->nbuckets; i++) {
        ck_assert_int_eq(a->buckets[i].id, b->buckets[i].id);
        ck_assert_int_eq(a->buckets[i].stage, b->buckets[i].stage);
        ck_assert_int_eq(a->buckets[i].offset, b->buckets[i].offset);
        ck_assert_int_eq(a->buckets[i].size, b->buckets[i].size);
        for (int r = 0; r < 2 * a->dp; r++)
            ck_assert_int_eq(a->buckets[i].ranges[r], b->buckets[i].ranges[r]);
    }
    ck_assert_uint_eq(a->nschedules, b->nschedules);
    for (size_t i = 0; i < a->nschedules; i++) {
        const cz_rank_schedule *x = &a->schedules[i], *y = &b->schedules[i];
        ck_assert_int_eq(x->stage, y->stage);
        ck_assert_int_eq(x->dp_rank, y->dp_rank);
        ck_assert_int_eq(x->ngroups, y->ngroups);
        for (int g = 0; g < x->ngroups; g++) {
            const cz_plan_group *u = &x->groups[g], *v = &y->groups[g];
            ck_assert_int_eq(u->id, v->id);
            ck_assert_int_eq(u->nslots, v->nslots);
            ck_assert_int_eq(u->ntasks, v->ntasks);
            for (int t = 0; t < u->ntasks; t++) {
                ck_assert_int_eq(u->task_param[t], v->task_param[t]);
                ck_assert_int_eq(u->task_slot[t], v->task_slot[t]);
            }
            for (int k = 0; k < u->nslots; k++)
                ck_assert_double_eq(u->load[k], v->load[k]);
        }
    }
    const cz_plan_metrics *m = &a->metrics, *n = &b->metrics;
    size_t ranks = (size_t)a->pp * a->dp, gpus = ranks * a->tp;
    for (size_t i = 0; i < ranks; i++) {
        ck_assert_double_eq(m->dp_load[i], n->dp_load[i]);
        ck_assert_double_eq(m->rank_makespan[i], n->rank_makespan[i]);
    }
    for (size_t i = 0; i < gpus; i++) {
        ck_assert_double_eq(m->gpu_load[i], n->gpu_load[i]);
        ck_assert_double_eq(m->memory[i], n->memory[i]);
    }
    ck_assert_double_eq(m->dp_imbalance, n->dp_imbalance);
    ck_assert_double_eq(m->tp_makespan, n->tp_makespan);
    ck_assert_double_eq(m->tp_imbalance, n->tp_imbalance);
    ck_assert_double_eq(m->total_cost, n->total_cost);
    ck_assert_double_eq(m->max_task_cost, n->max_task_cost);
    ck_assert_double_eq(m->lower_bound, n->lower_bound);
    ck_assert_double_eq(m->predicted_step_s, n->predicted_step_s);
}

START_TEST(test_plan_round_trip)
{
    char a[512], b[512];
    cz_error err;
    cz_plan *p = make_plan(), *q = NULL;
    snprintf(a, sizeof a, "%s/plan_a.json", tmpdir);
    snprintf(b, sizeof b, "%s/plan_b.json", tmpdir);
    ck_assert_msg(cz_plan_write(p, a, &err) == CZ_OK, "%s", err.message);
    ck_assert_msg(cz_plan_read(&q, a, &err) == CZ_OK, "%s", err.message);
    assert_plans_equal(p, q);
    ck_assert_double_eq(q->plan_seconds, 0.0);
    ck_assert_msg(cz_plan_write(q, b, &err) == CZ_OK, "%s", err.message);
    size_t la = 0, lb = 0;
    char *ta = czt_slurp(a, &la), *tb = czt_slurp(b, &lb);
    ck_assert_uint_eq(la, lb);
    ck_assert_int_eq(memcmp(ta, tb, la), 0);
    /* fixed key order: the file starts with the schema, then the generator */
    const char *head = "{\n \"schema\": \"canzona.plan/1\",\n \"generator\": {";
    ck_assert_int_eq(strncmp(ta, head, strlen(head)), 0);
    ck_assert_ptr_null(strstr(ta, "plan_seconds"));
    ck_assert_ptr_nonnull(strstr(ta, "\"alpha_loads\": \"numel\""));
    ck_assert_ptr_nonnull(strstr(ta, "\"dp_fell_back\": true"));
    ck_assert_ptr_nonnull(strstr(ta, "\"tp_dim\": null"));
    ck_assert_int_eq(ta[la - 1], '\n');
    /* key order of a parameter object as the contract lists it */
    const char *id = strstr(ta, "\"id\": 1,"), *nm = strstr(id, "\"name\""),
               *bl = strstr(id, "\"blocks\""), *ow = strstr(id, "\"dp_owner\"");
    ck_assert(id && nm && bl && ow && id < nm && nm < bl && bl < ow);
    free(ta);
    free(tb);
    cz_plan_free(p);
    cz_plan_free(q);
}
END_TEST

/* The split layout is recorded (settings.layout, each bucket's buffer) and read back; a unified
 * plan names neither, so it is what earlier versions wrote. */
START_TEST(test_plan_layout_round_trip)
{
    char a[512], b[512];
    cz_error err;
    cz_plan *p = make_plan(), *q = NULL;
    snprintf(a, sizeof a, "%s/plan_unified.json", tmpdir);
    snprintf(b, sizeof b, "%s/plan_split.json", tmpdir);
    ck_assert_msg(cz_plan_write(p, a, &err) == CZ_OK, "%s", err.message);
    size_t la = 0;
    char *ta = czt_slurp(a, &la);
    ck_assert_ptr_null(strstr(ta, "\"layout\""));
    ck_assert_ptr_null(strstr(ta, "\"buffer\""));
    free(ta);
    ck_assert_msg(cz_plan_read(&q, a, &err) == CZ_OK, "%s", err.message);
    ck_assert_int_eq(q->settings.layout, CZ_LAYOUT_UNIFIED);
    cz_plan_free(q);
    q = NULL;

    p->settings.layout = CZ_LAYOUT_SPLIT;
    p->buckets[0].elementwise = 1;
    ck_assert_msg(cz_plan_write(p, b, &err) == CZ_OK, "%s", err.message);
    ta = czt_slurp(b, &la);
    ck_assert_ptr_nonnull(strstr(ta, "\"layout\": \"split\""));
    ck_assert_ptr_nonnull(strstr(ta, "\"buffer\": \"elementwise\""));
    ck_assert_ptr_nonnull(strstr(ta, "\"buffer\": \"matrix\""));
    free(ta);
    ck_assert_msg(cz_plan_read(&q, b, &err) == CZ_OK, "%s", err.message);
    ck_assert_int_eq(q->settings.layout, CZ_LAYOUT_SPLIT);
    ck_assert_int_eq(q->buckets[0].elementwise, 1);
    ck_assert_int_eq(q->buckets[1].elementwise, 0);
    cz_plan_free(p);
    cz_plan_free(q);
}
END_TEST

/* Tasks are stored per slot in the file; reading lists slot 0's tasks first, then slot 1's. */
START_TEST(test_plan_slot_order)
{
    char a[512];
    cz_error err;
    cz_plan *p = make_plan(), *q = NULL;
    cz_plan_group *g = &p->schedules[0].groups[1];
    free(g->task_param);
    free(g->task_slot);
    g->ntasks = 3;
    g->task_param = malloc(3 * sizeof(int));
    g->task_slot = malloc(3 * sizeof(int));
    memcpy(g->task_param, (int[]){4, 1, 3}, 3 * sizeof(int));
    memcpy(g->task_slot, (int[]){1, 0, 1}, 3 * sizeof(int));
    snprintf(a, sizeof a, "%s/plan_order.json", tmpdir);
    ck_assert_msg(cz_plan_write(p, a, &err) == CZ_OK, "%s", err.message);
    json_error_t jerr;
    json_t *root = json_load_file(a, 0, &jerr);
    ck_assert_ptr_nonnull(root);
    json_t *want = json_loads("[[1], [4, 3]]", 0, &jerr);
    json_t *slots = json_object_get(
        json_array_get(
            json_object_get(json_array_get(json_object_get(root, "tp_schedule"), 0), "groups"), 1),
        "slots");
    ck_assert(json_equal(slots, want));
    json_decref(want);
    json_decref(root);
    ck_assert_msg(cz_plan_read(&q, a, &err) == CZ_OK, "%s", err.message);
    const cz_plan_group *h = &q->schedules[0].groups[1];
    ck_assert_int_eq(h->ntasks, 3);
    ck_assert_int_eq(h->task_param[0], 1);
    ck_assert_int_eq(h->task_slot[0], 0);
    ck_assert_int_eq(h->task_param[1], 4);
    ck_assert_int_eq(h->task_slot[1], 1);
    ck_assert_int_eq(h->task_param[2], 3);
    ck_assert_int_eq(h->task_slot[2], 1);
    cz_plan_free(p);
    cz_plan_free(q);
}
END_TEST

/* Cooperative and block tasks make a version 2 file: objects in the slot lists, a cooperative
 * task in each of its slots with its Gram panel count. The reader rebuilds one execution order
 * that every slot's list follows (here the hosted task 3 that slot 1 lists first comes before
 * the cooperative task), reads an absent count as 1, and refuses slot lists that order shared
 * cooperative tasks differently, objects in a version 1 file, and panel counts that no
 * executor can run. */
/* The hand-built plan with, in group 1, the hosted tasks 3 (slot 1) and 1 (slot 0) and the
 * cooperative task 4 over both slots (3 Gram panels, cost 2.5). */
static cz_plan *make_split_tasks_plan(void)
{
    cz_plan *p = make_plan();
    p->settings.optimizer = CZ_OPTIM_MUON;
    cz_plan_group *g = &p->schedules[0].groups[1];
    free(g->task_param);
    free(g->task_slot);
    g->ntasks = 3;
    g->task_param = malloc(3 * sizeof(int));
    g->task_slot = malloc(3 * sizeof(int));
    g->task_block = malloc(3 * sizeof(int));
    g->task_width = malloc(3 * sizeof(int));
    g->task_panels = malloc(3 * sizeof(int));
    g->task_cost = malloc(3 * sizeof(double));
    memcpy(g->task_param, (int[]){3, 4, 1}, 3 * sizeof(int));
    memcpy(g->task_slot, (int[]){1, 0, 0}, 3 * sizeof(int));
    memcpy(g->task_block, (int[]){-1, -1, -1}, 3 * sizeof(int));
    memcpy(g->task_width, (int[]){1, 2, 1}, 3 * sizeof(int));
    memcpy(g->task_panels, (int[]){1, 3, 1}, 3 * sizeof(int));
    memcpy(g->task_cost, (double[]){0, 2.5, 0}, 3 * sizeof(double));
    return p;
}

/* A cooperative task is one task only when every slot it spans lists it with the same cost:
 * the reader itself refuses two costs (its ordering test compares them), so no later check
 * (the structural check's slot loads) is left to notice that the slots disagree. */
START_TEST(test_plan_reader_coop_costs_agree)
{
    char a[512], b[512];
    cz_error err;
    cz_plan *p = make_split_tasks_plan(), *q = NULL;
    snprintf(a, sizeof a, "%s/plan_coop_cost.json", tmpdir);
    snprintf(b, sizeof b, "%s/plan_coop_cost_bad.json", tmpdir);
    ck_assert_msg(cz_plan_write(p, a, &err) == CZ_OK, "%s", err.message);
    json_error_t jerr;
    json_t *root = json_load_file(a, JSON_PRESERVE_ORDER, &jerr);
    ck_assert_ptr_nonnull(root);
    json_t *slots = json_object_get(
        json_array_get(
            json_object_get(json_array_get(json_object_get(root, "tp_schedule"), 0), "groups"), 1),
        "slots");
    /* Slot 1 lists the cooperative task second, with another cost than slot 0's. */
    json_t *c1 = json_array_get(json_array_get(slots, 1), 1);
    ck_assert_int_eq(json_integer_value(json_object_get(c1, "width")), 2);
    json_object_set_new(c1, "cost", json_real(2.75));
    json_object_del(root, "content_sha256");
    ck_assert_int_eq(json_dump_file(root, b, JSON_PRESERVE_ORDER), 0);
    ck_assert_int_eq(cz_plan_read(&q, b, &err), CZ_EINVALID);
    ck_assert_ptr_null(q);
    assert_contains(err.message, "with the same cost and panels, by every slot it spans");
    assert_contains(err.message, "$.tp_schedule[0].groups[1].slots[0][0]");
    /* The same cost again reads. */
    json_object_set_new(c1, "cost", json_real(2.5));
    ck_assert_int_eq(json_dump_file(root, b, JSON_PRESERVE_ORDER), 0);
    ck_assert_msg(cz_plan_read(&q, b, &err) == CZ_OK, "%s", err.message);
    json_decref(root);
    cz_plan_free(p);
    cz_plan_free(q);
}
END_TEST

START_TEST(test_plan_split_tasks)
{
    char a[512], b[512];
    cz_error err;
    cz_plan *p = make_split_tasks_plan(), *q = NULL;
    snprintf(a, sizeof a, "%s/plan_split.json", tmpdir);
    snprintf(b, sizeof b, "%s/plan_split_bad.json", tmpdir);
    ck_assert_msg(cz_plan_write(p, a, &err) == CZ_OK, "%s", err.message);
    json_error_t jerr;
    json_t *root = json_load_file(a, JSON_PRESERVE_ORDER, &jerr);
    ck_assert_ptr_nonnull(root);
    ck_assert_str_eq(json_string_value(json_object_get(root, "schema")), CZ_PLAN_SCHEMA_SPLIT);
    json_t *want = json_loads("[[{\"param\": 4, \"width\": 2, \"panels\": 3, \"cost\": 2.5}, 1], "
                              "[3, {\"param\": 4, \"width\": 2, \"panels\": 3, \"cost\": 2.5}]]",
                              0, &jerr);
    json_t *slots = json_object_get(
        json_array_get(
            json_object_get(json_array_get(json_object_get(root, "tp_schedule"), 0), "groups"), 1),
        "slots");
    ck_assert(json_equal(slots, want));
    json_decref(want);
    ck_assert_msg(cz_plan_read(&q, a, &err) == CZ_OK, "%s", err.message);
    const cz_plan_group *h = &q->schedules[0].groups[1];
    ck_assert_int_eq(h->ntasks, 3);
    /* Slot 0's list starts with the cooperative task, which waits until slot 1 reaches it:
     * slot 1's hosted 3 comes first, then the cooperative task, then slot 0's 1. */
    ck_assert_int_eq(h->task_param[0], 3);
    ck_assert_int_eq(h->task_slot[0], 1);
    ck_assert_int_eq(h->task_param[1], 4);
    ck_assert_int_eq(h->task_slot[1], 0);
    ck_assert_int_eq(h->task_width[1], 2);
    ck_assert_int_eq(cz_group_task_panels(h, 1), 3);
    ck_assert(h->task_cost[1] == 2.5);
    ck_assert_int_eq(h->task_param[2], 1);
    ck_assert_int_eq(h->task_width[2], 1);
    ck_assert_int_eq(cz_group_task_panels(h, 2), 1);
    ck_assert_int_eq(h->task_block[2], -1);
    cz_plan_free(q);
    q = NULL;

    /* Panel counts as read: absent is 1 (a plan written before the key ran one panel), else 1
     * to min(8, a); only a cooperative task has one. The cooperative task (param 4, 4 x 4:
     * a = 4) is edited in both its slots, the hosted 3 (slot 1's first) made an object. */
    json_t *c0 = json_array_get(json_array_get(slots, 0), 0);
    json_t *c1 = json_array_get(json_array_get(slots, 1), 1);
    static const struct {
        int coop;        /* the cooperative task's "panels"; -1: no key */
        int hosted;      /* the hosted task's; -1: written as its id */
        const char *msg; /* NULL: read, with the count coop (1 when -1) */
    } cases[] = {
        {-1, -1, NULL},
        {4, -1, NULL},
        {5, -1, "more than the 4 rows of the task's Gram"},
        {9, -1, "expected an integer in [1, 8], found 9"},
        {0, -1, "expected an integer in [1, 8], found 0"},
        {3, 2, "only for a cooperative task"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        for (json_t **c = (json_t *[]){c0, c1, NULL}; *c; c++) {
            if (cases[i].coop < 0)
                json_object_del(*c, "panels");
            else
                json_object_set_new(*c, "panels", json_integer(cases[i].coop));
        }
        json_array_set_new(json_array_get(slots, 1), 0,
                           cases[i].hosted < 0 ? json_integer(3)
                                               : json_pack("{s:i, s:i, s:f}", "param", 3, "panels",
                                                           cases[i].hosted, "cost", 2.0 / 3.0));
        ck_assert_int_eq(json_dump_file(root, b, JSON_PRESERVE_ORDER), 0);
        int rc = cz_plan_read(&q, b, &err);
        if (!cases[i].msg) {
            ck_assert_msg(rc == CZ_OK, "case %zu: %s", i, err.message);
            ck_assert_int_eq(cz_group_task_panels(&q->schedules[0].groups[1], 1),
                             cases[i].coop < 0 ? 1 : cases[i].coop);
            cz_plan_free(q);
            q = NULL;
            continue;
        }
        ck_assert_int_eq(rc, CZ_EINVALID);
        ck_assert_ptr_null(q);
        assert_contains(err.message, cases[i].msg);
        assert_contains(err.message, ".panels");
    }
    /* The two slots of the cooperative task disagree on its count: not the same task. */
    json_array_set_new(json_array_get(slots, 1), 0, json_integer(3));
    json_object_set_new(c0, "panels", json_integer(3));
    json_object_set_new(c1, "panels", json_integer(2));
    ck_assert_int_eq(json_dump_file(root, b, JSON_PRESERVE_ORDER), 0);
    ck_assert_int_eq(cz_plan_read(&q, b, &err), CZ_EINVALID);
    assert_contains(err.message, "in one order");
    json_object_set_new(c1, "panels", json_integer(3));

    /* Two cooperative tasks listed in opposite orders by their two slots: no order works. */
    json_t *s0 = json_array_get(slots, 0), *s1 = json_array_get(slots, 1);
    json_array_set_new(s0, 1, json_pack("{s:i, s:i, s:f}", "param", 2, "width", 2, "cost", 1.0));
    json_array_set_new(s1, 0, json_pack("{s:i, s:i, s:f}", "param", 2, "width", 2, "cost", 1.0));
    ck_assert_int_eq(json_dump_file(root, b, JSON_PRESERVE_ORDER), 0);
    ck_assert_int_eq(cz_plan_read(&q, b, &err), CZ_EINVALID);
    ck_assert_ptr_null(q);
    assert_contains(err.message, "in one order");

    /* The same objects under version 1. */
    json_array_set_new(s1, 0, json_integer(3));
    json_array_set_new(s0, 1, json_integer(1));
    json_object_set_new(root, "schema", json_string(CZ_PLAN_SCHEMA));
    ck_assert_int_eq(json_dump_file(root, b, JSON_PRESERVE_ORDER), 0);
    ck_assert_int_eq(cz_plan_read(&q, b, &err), CZ_EINVALID);
    assert_contains(err.message, "needs schema");
    json_decref(root);
    cz_plan_free(p);
}
END_TEST

static int count_tmp_leftovers(void)
{
    DIR *d = opendir(tmpdir);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        n += strstr(e->d_name, ".tmp.") != NULL;
    closedir(d);
    return n;
}

START_TEST(test_plan_write_failure_keeps_old_file)
{
    char a[512], bad[512];
    cz_error err;
    cz_plan *p = make_plan();
    snprintf(a, sizeof a, "%s/plan_keep.json", tmpdir);
    ck_assert_int_eq(cz_plan_write(p, a, &err), CZ_OK);
    size_t l0 = 0, l1 = 0;
    char *before = czt_slurp(a, &l0);

    /* a folder that does not exist */
    snprintf(bad, sizeof bad, "%s/no/such/dir/plan.json", tmpdir);
    ck_assert_int_eq(cz_plan_write(p, bad, &err), CZ_EIO);
    assert_contains(err.message, bad);
    assert_contains(err.message, strerror(ENOENT));

    /* rename fails (the target is a non-empty folder): the temporary file must go */
    snprintf(bad, sizeof bad, "%s/adir", tmpdir);
    ck_assert_int_eq(mkdir(bad, 0700), 0);
    char inner[600];
    snprintf(inner, sizeof inner, "%s/x", bad);
    fclose(fopen(inner, "w"));
    ck_assert_int_eq(cz_plan_write(p, bad, &err), CZ_EIO);
    remove(inner);
    ck_assert_int_eq(count_tmp_leftovers(), 0);

    /* an inconsistent plan is refused before anything is written; the old file stays */
    p->settings.ns_steps = 9;
    p->nschedules = 1;
    ck_assert_int_eq(cz_plan_write(p, a, &err), CZ_EINTERNAL);
    p->nschedules = 2;
    p->metrics.tp_imbalance = 0.0 / 0.0;
    ck_assert_int_eq(cz_plan_write(p, a, &err), CZ_EINTERNAL);
    assert_contains(err.message, "metrics.tp.imbalance");
    char *after = czt_slurp(a, &l1);
    ck_assert_uint_eq(l0, l1);
    ck_assert_int_eq(memcmp(before, after, l0), 0);
    ck_assert_int_eq(count_tmp_leftovers(), 0);
    free(before);
    free(after);
    cz_plan_free(p);
}
END_TEST

/* Plan mutations applied with jansson to a valid written plan; each must be refused. */
typedef struct plan_case {
    const char *what;
    int code;
    const char *needle;
} plan_case;

static const plan_case plan_cases[] = {
    {"schema", CZ_EUNSUPPORTED, "$.schema: unsupported schema version \"canzona.plan/5\""},
    {"unknown_top", CZ_EINVALID, "$: unknown key \"extra\""},
    {"unknown_param_key", CZ_EINVALID, "$.params[2]: unknown key \"color\""},
    {"slot_id", CZ_EINVALID,
     "$.tp_schedule[0].groups[1].slots[1][0]: expected an integer in "
     "[0, 4], found 99"},
    {"slot_count", CZ_EINVALID, "$.tp_schedule[1].groups[0].slots: expected 2 slots"},
    {"load_len", CZ_EINVALID, "$.tp_schedule[0].groups[0].load: expected 2 values"},
    {"param_id", CZ_EINVALID, "$.params[3].id: expected the parameter's index 3, found 4"},
    {"bucket_id", CZ_EINVALID, "$.buckets[1].id: expected the bucket's index 1, found 0"},
    {"ranges_len", CZ_EINVALID, "$.buckets[0].ranges: expected 2 [start, end] pairs"},
    {"range_end", CZ_EINVALID, "$.buckets[0].ranges[1][1]: expected an integer in [64, 192]"},
    {"dp_owner", CZ_EINVALID, "$.params[0].dp_owner: expected an integer in [-1, 1], found 2"},
    {"bucket_ref", CZ_EINVALID, "$.params[4].bucket: expected an integer in [0, 1], found 2"},
    {"sched_len", CZ_EINVALID, "$.tp_schedule: expected 2 entries (pp*dp = 1*2), found 1"},
    {"sched_rank", CZ_EINVALID, "$.tp_schedule[1].dp_rank: expected an integer in [1, 1]"},
    {"gpu_load_len", CZ_EINVALID, "$.metrics.tp.gpu_load: expected 4 values (pp*dp*tp), found 3"},
    {"memory_type", CZ_EINVALID,
     "$.metrics.memory[0]: expected a non-negative number, found "
     "\"big\""},
    {"sha", CZ_EINVALID, "$.inputs.model.sha256: expected 64 lowercase hexadecimal digits"},
    {"settings_enum", CZ_EINVALID, "$.settings.tp_strategy: expected one of \"sc\""},
    {"missing_metrics", CZ_EINVALID, "$: missing required key \"metrics\""},
    {"tp_dim_1d", CZ_EINVALID,
     "$.params[2].tp_dim: expected 0 or null for a 1-D parameter, found 1"},
    {"layout_enum", CZ_EINVALID, "$.settings.layout: expected one of \"unified\""},
    {"buffer_in_unified", CZ_EINVALID,
     "$.buckets[1].buffer: a bucket's buffer is given only in a plan whose $.settings.layout is "
     "\"split\""},
    {"split_without_buffer", CZ_EINVALID, "$.buckets[0]: missing required key \"buffer\""},
    {"buffer_enum", CZ_EINVALID, "$.buckets[0].buffer: expected one of \"matrix\""},
};

static void mutate(json_t *root, const char *what)
{
    json_t *params = json_object_get(root, "params");
    json_t *buckets = json_object_get(root, "buckets");
    json_t *sched = json_object_get(root, "tp_schedule");
    json_t *metrics = json_object_get(root, "metrics");
    json_t *g01 = json_array_get(json_object_get(json_array_get(sched, 0), "groups"), 1);
    if (!strcmp(what, "schema"))
        json_object_set_new(root, "schema", json_string("canzona.plan/5"));
    else if (!strcmp(what, "unknown_top"))
        json_object_set_new(root, "extra", json_integer(1));
    else if (!strcmp(what, "unknown_param_key"))
        json_object_set_new(json_array_get(params, 2), "color", json_string("red"));
    else if (!strcmp(what, "slot_id"))
        json_array_set_new(json_array_get(json_object_get(g01, "slots"), 1), 0, json_integer(99));
    else if (!strcmp(what, "slot_count"))
        json_array_remove(
            json_object_get(json_array_get(json_object_get(json_array_get(sched, 1), "groups"), 0),
                            "slots"),
            1);
    else if (!strcmp(what, "load_len"))
        json_array_append_new(
            json_object_get(json_array_get(json_object_get(json_array_get(sched, 0), "groups"), 0),
                            "load"),
            json_real(1.0));
    else if (!strcmp(what, "param_id"))
        json_object_set_new(json_array_get(params, 3), "id", json_integer(4));
    else if (!strcmp(what, "bucket_id"))
        json_object_set_new(json_array_get(buckets, 1), "id", json_integer(0));
    else if (!strcmp(what, "ranges_len"))
        json_array_remove(json_object_get(json_array_get(buckets, 0), "ranges"), 0);
    else if (!strcmp(what, "range_end"))
        json_array_set_new(json_array_get(json_object_get(json_array_get(buckets, 0), "ranges"), 1),
                           1, json_integer(500));
    else if (!strcmp(what, "dp_owner"))
        json_object_set_new(json_array_get(params, 0), "dp_owner", json_integer(2));
    else if (!strcmp(what, "bucket_ref"))
        json_object_set_new(json_array_get(params, 4), "bucket", json_integer(2));
    else if (!strcmp(what, "sched_len"))
        json_array_remove(sched, 1);
    else if (!strcmp(what, "sched_rank"))
        json_object_set_new(json_array_get(sched, 1), "dp_rank", json_integer(0));
    else if (!strcmp(what, "gpu_load_len"))
        json_array_remove(json_object_get(json_object_get(metrics, "tp"), "gpu_load"), 0);
    else if (!strcmp(what, "memory_type"))
        json_array_set_new(json_object_get(metrics, "memory"), 0, json_string("big"));
    else if (!strcmp(what, "sha"))
        json_object_set_new(json_object_get(json_object_get(root, "inputs"), "model"), "sha256",
                            json_string("XYZ"));
    else if (!strcmp(what, "settings_enum"))
        json_object_set_new(json_object_get(root, "settings"), "tp_strategy", json_string("magic"));
    else if (!strcmp(what, "tp_dim_1d"))
        json_object_set_new(json_array_get(params, 2), "tp_dim", json_integer(1));
    else if (!strcmp(what, "missing_metrics"))
        json_object_del(root, "metrics");
    else if (!strcmp(what, "layout_enum"))
        json_object_set_new(json_object_get(root, "settings"), "layout", json_string("mixed"));
    else if (!strcmp(what, "buffer_in_unified"))
        json_object_set_new(json_array_get(buckets, 1), "buffer", json_string("matrix"));
    else if (!strcmp(what, "split_without_buffer"))
        json_object_set_new(json_object_get(root, "settings"), "layout", json_string("split"));
    else if (!strcmp(what, "buffer_enum")) {
        json_object_set_new(json_object_get(root, "settings"), "layout", json_string("split"));
        json_object_set_new(json_array_get(buckets, 0), "buffer", json_string("dense"));
    } else
        ck_abort_msg("unknown mutation %s", what);
}

START_TEST(test_plan_read_bad)
{
    const plan_case *pc = &plan_cases[_i];
    char a[512], b[512];
    cz_error err;
    cz_plan *p = make_plan(), *q = (cz_plan *)&q;
    snprintf(a, sizeof a, "%s/plan_good.json", tmpdir);
    snprintf(b, sizeof b, "%s/plan_bad.json", tmpdir);
    ck_assert_int_eq(cz_plan_write(p, a, &err), CZ_OK);
    cz_plan_free(p);
    json_error_t jerr;
    json_t *root = json_load_file(a, JSON_PRESERVE_ORDER, &jerr);
    ck_assert_ptr_nonnull(root);
    mutate(root, pc->what);
    ck_assert_int_eq(json_dump_file(root, b, JSON_PRESERVE_ORDER | JSON_INDENT(1)), 0);
    json_decref(root);
    int rc = cz_plan_read(&q, b, &err);
    ck_assert_msg(rc == pc->code, "%s: rc %d, want %d (%s)", pc->what, rc, pc->code, err.message);
    ck_assert_ptr_null(q);
    assert_contains(err.message, b);
    assert_contains(err.message, pc->needle);
}
END_TEST

/* sc and tp == 1 plans have one slot per group. */
START_TEST(test_plan_sc_one_slot)
{
    char a[512];
    cz_error err;
    cz_plan *p = make_plan(), *q = NULL;
    p->settings.tp = CZ_TP_SC;
    for (size_t s = 0; s < p->nschedules; s++)
        for (int g = 0; g < p->schedules[s].ngroups; g++) {
            cz_plan_group *gr = &p->schedules[s].groups[g];
            gr->nslots = 1;
            for (int t = 0; t < gr->ntasks; t++)
                gr->task_slot[t] = 0;
        }
    snprintf(a, sizeof a, "%s/plan_sc.json", tmpdir);
    ck_assert_msg(cz_plan_write(p, a, &err) == CZ_OK, "%s", err.message);
    ck_assert_msg(cz_plan_read(&q, a, &err) == CZ_OK, "%s", err.message);
    ck_assert_int_eq(q->schedules[0].groups[1].nslots, 1);
    ck_assert_int_eq(q->schedules[0].groups[1].task_param[0], 4);
    cz_plan_free(q);
    q = NULL;
    /* the same file claiming rollback needs two slots per group */
    p->settings.tp = CZ_TP_ROLLBACK;
    ck_assert_int_eq(cz_plan_write(p, a, &err), CZ_OK);
    ck_assert_int_eq(cz_plan_read(&q, a, &err), CZ_EINVALID);
    assert_contains(err.message, "$.tp_schedule[0].groups[0].slots: expected 2 slots");
    cz_plan_free(p);
}
END_TEST

static void setup(void)
{
    make_tmpdir();
}

static void teardown(void)
{
    if (getenv("CZ_KEEP_TMP"))
        return;
    remove_tmpdir();
}

int main(void)
{
    Suite *s = suite_create("formats");
    TCase *tm = tcase_create("model");
    tcase_add_checked_fixture(tm, setup, teardown);
    tcase_add_test(tm, test_model_tiny);
    tcase_add_test(tm, test_model_hash_canonical);
    tcase_add_loop_test(tm, test_model_bad, 0, (int)(sizeof bad_models / sizeof bad_models[0]));
    tcase_add_test(tm, test_model_bad_files);
    suite_add_tcase(s, tm);
    TCase *tc = tcase_create("cluster");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_cluster_tiny);
    tcase_add_loop_test(tc, test_cluster_bad, 0,
                        (int)(sizeof bad_clusters / sizeof bad_clusters[0]));
    tcase_add_test(tc, test_cluster_defaults_and_fixture);
    suite_add_tcase(s, tc);
    TCase *tp = tcase_create("plan");
    tcase_add_checked_fixture(tp, setup, teardown);
    tcase_add_test(tp, test_plan_round_trip);
    tcase_add_test(tp, test_plan_layout_round_trip);
    tcase_add_test(tp, test_plan_slot_order);
    tcase_add_test(tp, test_plan_split_tasks);
    tcase_add_test(tp, test_plan_reader_coop_costs_agree);
    tcase_add_test(tp, test_plan_write_failure_keeps_old_file);
    tcase_add_loop_test(tp, test_plan_read_bad, 0, (int)(sizeof plan_cases / sizeof plan_cases[0]));
    tcase_add_test(tp, test_plan_sc_one_slot);
    suite_add_tcase(s, tp);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
