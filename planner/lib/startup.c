/* The cluster-wide start-up model (canzona inspect --startup; docs/PERF.md section 16): how
 * many bytes each rank's cz_executor_create reads, and how long that takes, for a plan file
 * (every rank reads and parses all of it) and for a split plan folder (a rank reads the header,
 * three index records and three lines of its stage's parts: their lengths come from the
 * index, so the figures are the bytes the reader will read).
 *
 * Time of one rank: fixed + bytes / parse rate + bytes / its read bandwidth, the rates as
 * measured with canzona-startup (CZ_STARTUP_PARSE_MB_S, CZ_STARTUP_FIXED_S); the cluster's
 * start-up is at least the slowest rank's and at least the bytes of all ranks over the file
 * system's aggregate bandwidth (every rank reads at once). */
#include "cz_analysis.h"
#include "cz_format.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

void cz__startup_model_init(cz_startup_model *m)
{
    *m = (cz_startup_model){.parse_mb_s = CZ_STARTUP_PARSE_MB_S,
                            .fixed_s = CZ_STARTUP_FIXED_S,
                            .read_gbps = 2.0,
                            .fs_gbps = 100.0};
}

static double rank_seconds(const cz_startup_model *m, double bytes)
{
    return m->fixed_s + bytes / (m->parse_mb_s * 1e6) + bytes / (m->read_gbps * 1e9);
}

static int file_size(const char *path, double *out, cz_error *err)
{
    struct stat st;
    if (stat(path, &st) != 0)
        return cz__error_set(err, CZ_EIO, "%s: cannot read: %s", path, strerror(errno));
    *out = (double)st.st_size;
    return CZ_OK;
}

/* Record k of index file f (opened), its line's length. */
static int record_len(FILE *f, const char *path, size_t k, double *len, cz_error *err)
{
    char rec[CZ_SLICE_INDEX_RECORD + 1];
    unsigned long long off, n;
    if (fseek(f, (long)(k * CZ_SLICE_INDEX_RECORD), SEEK_SET) != 0 ||
        fread(rec, 1, CZ_SLICE_INDEX_RECORD, f) != CZ_SLICE_INDEX_RECORD)
        return cz__error_set(err, CZ_EINVALID, "%s: record %zu is missing", path, k);
    rec[CZ_SLICE_INDEX_RECORD] = '\0';
    if (sscanf(rec, "%19llu %19llu", &off, &n) != 2)
        return cz__error_set(err, CZ_EINVALID, "%s: record %zu is not \"OFFSET LENGTH\"", path, k);
    *len = (double)n;
    return CZ_OK;
}

/* Every rank's bytes of the folder: the header, its three records, its three lines. */
static int folder_bytes(const cz_plan *p, const char *dir, double header, double *bytes,
                        cz_error *err)
{
    size_t per_stage = (size_t)p->dp * (size_t)p->tp,
           first = cz_plan_has_experts(p) ? (size_t)p->ep : 1;
    int rc = CZ_OK;
    for (int s = 0; s < p->pp && rc == CZ_OK; s++) {
        char path[4200];
        snprintf(path, sizeof path, "%s/stage-%d.index", dir, s);
        FILE *f = fopen(path, "rb");
        if (!f)
            return cz__error_set(err, CZ_EIO, "%s: cannot open: %s", path, strerror(errno));
        for (size_t l = 0; l < per_stage && rc == CZ_OK; l++) {
            size_t dp_rank = l / (size_t)p->tp, e = 0, x = 0;
            double a = 0, b = 0, c = 0;
            int three = cz_plan_has_experts(p);
            if (three) {
                e = l / (size_t)p->etp % (size_t)p->ep;
                x = first + (size_t)p->dp + l / ((size_t)p->etp * (size_t)p->ep) * (size_t)p->ep +
                    e;
            }
            if ((rc = record_len(f, path, e, &a, err)) != CZ_OK ||
                (rc = record_len(f, path, first + dp_rank, &b, err)) != CZ_OK ||
                (three && (rc = record_len(f, path, x, &c, err)) != CZ_OK))
                break;
            bytes[(size_t)s * per_stage + l] =
                header + (2 + three) * (double)CZ_SLICE_INDEX_RECORD + a + b + c;
        }
        fclose(f);
    }
    return rc;
}

/* The figures of one form from each rank's bytes. */
static void summarize(const cz_startup_model *m, const double *bytes, size_t n,
                      cz_startup_form *out)
{
    *out = (cz_startup_form){.min_bytes = bytes[0], .max_bytes = bytes[0]};
    for (size_t r = 0; r < n; r++) {
        out->total_bytes += bytes[r];
        if (bytes[r] > out->max_bytes)
            out->max_bytes = bytes[r], out->max_rank = (long)r;
        if (bytes[r] < out->min_bytes)
            out->min_bytes = bytes[r], out->min_rank = (long)r;
    }
    out->max_rank_s = rank_seconds(m, out->max_bytes);
    out->min_rank_s = rank_seconds(m, out->min_bytes);
    double fs = out->total_bytes / (m->fs_gbps * 1e9);
    out->cluster_s = fs > out->max_rank_s ? fs : out->max_rank_s;
}

int cz__startup_report(const cz_plan *p, const char *plan_path, const char *dir,
                       const cz_startup_model *m, cz_startup_report *out, cz_error *err)
{
    size_t n = (size_t)p->dp * (size_t)p->tp * (size_t)p->pp;
    double whole = 0, header = 0;
    double *bytes = NULL;
    int rc;
    *out = (cz_startup_report){.gpus = (long)n, .model = *m};
    if ((rc = file_size(plan_path, &whole, err)) != CZ_OK)
        return rc;
    if (!(bytes = malloc((n ? n : 1) * sizeof *bytes)))
        return cz__error_set(err, CZ_ENOMEM, "out of memory for %zu ranks", n);
    for (size_t r = 0; r < n; r++)
        bytes[r] = whole;
    summarize(m, bytes, n, &out->whole);
    if (dir) {
        char path[4200];
        snprintf(path, sizeof path, "%s/header.json", dir);
        if ((rc = file_size(path, &header, err)) != CZ_OK ||
            (rc = folder_bytes(p, dir, header, bytes, err)) != CZ_OK)
            goto done;
        summarize(m, bytes, n, &out->split);
        out->has_split = 1;
    }
done:
    free(bytes);
    return rc;
}
