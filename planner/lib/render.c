/*
 * Renders a plan as a self-contained SVG (no scripts, no external fonts or images): per-GPU
 * load bars against the lower bound and the mean, and the micro-group pipeline of the DP rank
 * that finishes last, as simulated. Optionally wrapped in an HTML page with tables.
 */
#include "cz_types.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A growing string; `failed` makes every later append a no-op so callers check once. */
typedef struct sbuf {
    char *data;
    size_t len, cap;
    int failed;
} sbuf;

static void sb_grow(sbuf *b, size_t extra)
{
    if (b->failed || b->len + extra + 1 <= b->cap)
        return;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + extra + 1)
        cap *= 2;
    char *d = realloc(b->data, cap);
    if (!d) {
        b->failed = 1;
        return;
    }
    b->data = d;
    b->cap = cap;
}

static void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void sb_printf(sbuf *b, const char *fmt, ...)
{
    if (b->failed)
        return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) {
        b->failed = 1;
        return;
    }
    sb_grow(b, (size_t)n);
    if (b->failed)
        return;
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

/* Appends s with the five XML special characters escaped (also right for HTML text). */
static void sb_escape(sbuf *b, const char *s)
{
    for (; s && *s; s++) {
        switch (*s) {
        case '<':
            sb_printf(b, "&lt;");
            break;
        case '>':
            sb_printf(b, "&gt;");
            break;
        case '&':
            sb_printf(b, "&amp;");
            break;
        case '"':
            sb_printf(b, "&quot;");
            break;
        case '\'':
            sb_printf(b, "&#39;");
            break;
        default:
            /* Control characters are not allowed in XML 1.0 text. */
            if ((unsigned char)*s < 0x20 && *s != '\t' && *s != '\n')
                sb_printf(b, "?");
            else
                sb_printf(b, "%c", *s);
        }
    }
}

/* A value with a readable scale in the plan's cost unit (or seconds). */
static const char *fmt_value(char *buf, size_t n, double v, cz_cost_unit unit)
{
    double a = fabs(v);
    switch (unit) {
    case CZ_UNIT_TIME:
        if (a >= 1.0 || a == 0.0)
            snprintf(buf, n, "%.3g s", v);
        else if (a >= 1e-3)
            snprintf(buf, n, "%.3g ms", v * 1e3);
        else
            snprintf(buf, n, "%.3g us", v * 1e6);
        break;
    case CZ_UNIT_FLOPS:
        if (a >= 1e12)
            snprintf(buf, n, "%.3g TFLOP", v / 1e12);
        else if (a >= 1e9)
            snprintf(buf, n, "%.3g GFLOP", v / 1e9);
        else
            snprintf(buf, n, "%.3g MFLOP", v / 1e6);
        break;
    case CZ_UNIT_NUMEL:
    default:
        if (a >= 1e9)
            snprintf(buf, n, "%.3g G elem", v / 1e9);
        else if (a >= 1e6)
            snprintf(buf, n, "%.3g M elem", v / 1e6);
        else
            snprintf(buf, n, "%.3g elem", v);
        break;
    }
    return buf;
}

/* A round axis maximum (1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6 or 8 times a power of ten) at or
 * above v, so that the data fills most of the axis. */
static double nice_ceiling(double v)
{
    static const double steps[] = {1.0, 1.2, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0};
    if (!(v > 0))
        return 1.0;
    double p = pow(10.0, floor(log10(v)));
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++)
        if (steps[i] * p >= v * (1 - 1e-12))
            return steps[i] * p;
    return 10.0 * p;
}

static double vmax(const double *v, size_t n)
{
    double m = 0.0;
    for (size_t i = 0; v && i < n; i++)
        m = v[i] > m ? v[i] : m;
    return m;
}

static const char *const group_colors[2] = {"#4e79a7", "#76b7b2"};

static void svg_title(sbuf *b, const cz_plan *plan, const cz_sim_result *sim,
                      const cz_render_options *o, int width)
{
    const cz_plan_metrics *m = &plan->metrics;
    double ratio = m->lower_bound > 0 ? m->tp_makespan / m->lower_bound : 0.0;
    sb_printf(b, "<text x=\"%d\" y=\"24\" font-size=\"16\" font-weight=\"bold\">", 10);
    sb_escape(b, plan->model_name ? plan->model_name : "model");
    sb_printf(b, " on ");
    sb_escape(b, o->cluster_name ? o->cluster_name
                                 : (plan->cluster_name ? plan->cluster_name : "cluster"));
    sb_printf(b, " (DP %d x TP %d x PP %d)</text>\n", plan->dp, plan->tp, plan->pp);
    sb_printf(b, "<text x=\"10\" y=\"44\" font-size=\"12\">optimizer %s, unit %s, dp %s",
              cz_optimizer_name(plan->settings.optimizer), cz_unit_name(plan->settings.unit),
              cz_dp_strategy_name(plan->settings.dp));
    if (plan->settings.dp == CZ_DP_ALPHA)
        sb_printf(b, " (alpha %g)", plan->settings.alpha);
    sb_printf(b, ", tp %s; DP imbalance %.3f, TP imbalance %.3f, makespan / lower bound %.3f",
              cz_tp_strategy_name(plan->settings.tp), m->dp_imbalance, m->tp_imbalance, ratio);
    if (sim && o->sim_in_seconds)
        sb_printf(b, "; simulated step %.3f ms", sim->step_s * 1e3);
    sb_printf(b, "</text>\n");
    (void)width;
}

/* Panel (a): one bar per GPU, grouped per DP rank, TP ranks side by side. */
static int svg_loads(sbuf *b, const cz_plan *plan, int width, int top, cz_error *err)
{
    const cz_plan_metrics *m = &plan->metrics;
    int ngpus = plan->pp * plan->dp * plan->tp, nranks = plan->pp * plan->dp;
    if (!m->gpu_load)
        return cz_error_set(err, CZ_EINVALID,
                            "plan has no per-GPU loads (metrics.gpu_load); rebuild it with "
                            "'canzona plan'");
    const int left = 90, right = 20, height = 260;
    double plot_w = width - left - right;
    double gap = nranks > 1 ? fmin(6.0, plot_w * 0.2 / nranks) : 0.0;
    double bar_w = (plot_w - gap * (nranks - 1)) / ngpus;
    double mean = 0.0;
    for (int i = 0; i < ngpus; i++)
        mean += m->gpu_load[i];
    mean /= ngpus;
    double top_val = nice_ceiling(fmax(vmax(m->gpu_load, (size_t)ngpus), m->lower_bound) * 1.05);
    double y0 = top + 30 + height; /* baseline */
    char buf[64];
    cz_cost_unit u = plan->settings.unit;
    sb_printf(b,
              "<g id=\"loads\">\n<text x=\"%d\" y=\"%d\" font-size=\"13\" "
              "font-weight=\"bold\">(a) optimizer work per GPU (%s), grouped by DP rank"
              "</text>\n",
              10, top + 16, cz_unit_name(u));
    for (int k = 0; k <= 4; k++) {
        double v = top_val * k / 4.0, y = y0 - height * k / 4.0;
        sb_printf(b,
                  "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#dddddd\"/>"
                  "<text x=\"%d\" y=\"%.1f\" font-size=\"10\" text-anchor=\"end\">%s</text>\n",
                  left, y, width - right, y, left - 4, y + 3, fmt_value(buf, sizeof buf, v, u));
    }
    for (int r = 0; r < nranks; r++) {
        for (int t = 0; t < plan->tp; t++) {
            int gi = r * plan->tp + t;
            double v = m->gpu_load[gi] > 0 ? m->gpu_load[gi] : 0.0;
            double h = height * v / top_val, x = left + r * gap + gi * bar_w;
            sb_printf(b,
                      "<rect class=\"bar\" x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" "
                      "fill=\"%s\"><title>stage %d, DP %d, TP %d: %s</title></rect>\n",
                      x, y0 - h, fmax(bar_w - (bar_w > 3 ? 0.5 : 0.0), 0.3), h, group_colors[r % 2],
                      r / plan->dp, r % plan->dp, t, fmt_value(buf, sizeof buf, v, u));
        }
    }
    double ylb = y0 - height * m->lower_bound / top_val, ymean = y0 - height * mean / top_val;
    sb_printf(b,
              "<line x1=\"%d\" y1=\"%.2f\" x2=\"%d\" y2=\"%.2f\" stroke=\"#e15759\" "
              "stroke-width=\"1.5\" stroke-dasharray=\"6,3\"/>\n"
              "<line x1=\"%d\" y1=\"%.2f\" x2=\"%d\" y2=\"%.2f\" stroke=\"#59a14f\" "
              "stroke-width=\"1.5\"/>\n",
              left, ylb, width - right, ylb, left, ymean, width - right, ymean);
    sb_printf(b,
              "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"black\"/>\n"
              "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\" text-anchor=\"middle\">GPUs: DP rank "
              "0 .. %d, TP ranks side by side within each rank</text>\n",
              left, y0, width - right, y0, left + plot_w / 2, y0 + 16, nranks - 1);
    sb_printf(b,
              "<rect x=\"%d\" y=\"%d\" width=\"14\" height=\"3\" fill=\"#e15759\"/>"
              "<text x=\"%d\" y=\"%d\" font-size=\"11\">lower bound %s</text>\n",
              width - 360, top + 8, width - 340, top + 12,
              fmt_value(buf, sizeof buf, m->lower_bound, u));
    sb_printf(b,
              "<rect x=\"%d\" y=\"%d\" width=\"14\" height=\"3\" fill=\"#59a14f\"/>"
              "<text x=\"%d\" y=\"%d\" font-size=\"11\">mean %s</text></g>\n",
              width - 180, top + 8, width - 160, top + 12, fmt_value(buf, sizeof buf, mean, u));
    return CZ_OK;
}

/* Panel (b): per TP rank three lanes (gather / compute / scatter), one box per group. */
static int svg_timeline(sbuf *b, const cz_plan *plan, const cz_sim_result *sim,
                        const cz_render_options *o, int width, int top)
{
    const int left = 150, right = 20, lane = 9;
    int R = sim->tl_tp, G = sim->tl_groups;
    double plot_w = width - left - right;
    double end = 0.0;
    for (int t = 0; t < R; t++)
        end = fmax(end, sim->tl_elementwise[t]);
    for (int g = 0; g < G; g++) {
        end = fmax(end, fmax(sim->tl_gather[g].end, sim->tl_scatter[g].end));
        for (int t = 0; t < R; t++)
            end = fmax(end, sim->tl_compute[(size_t)g * R + t].end);
    }
    double top_val = nice_ceiling(end);
    cz_cost_unit u = o->sim_in_seconds ? CZ_UNIT_TIME : plan->settings.unit;
    char buf[64];
    sb_printf(b,
              "<g id=\"timeline\">\n<text x=\"10\" y=\"%d\" font-size=\"13\" "
              "font-weight=\"bold\">(b) micro-group pipeline of DP rank %d (stage %d), %s "
              "(%d group%s)</text>\n",
              top + 16, sim->critical_dp, sim->critical_stage,
              sim->pipelined ? "asynchronous" : "synchronous compute", G, G == 1 ? "" : "s");
    int y_start = top + 30;
    static const char *const lane_names[3] = {"gather", "compute", "scatter"};
    for (int t = 0; t < R; t++) {
        for (int l = 0; l < 3; l++) {
            int y = y_start + (t * 3 + l) * (lane + 2) + t * 6;
            sb_printf(b,
                      "<text x=\"%d\" y=\"%d\" font-size=\"9\" text-anchor=\"end\">TP %d %s"
                      "</text>\n",
                      left - 4, y + lane - 1, t, lane_names[l]);
            if (l == 1 && sim->tl_elementwise[t] > 0)
                sb_printf(b,
                          "<rect class=\"elementwise\" x=\"%d\" y=\"%d\" width=\"%.2f\" "
                          "height=\"%d\" fill=\"#bab0ac\"><title>elementwise (AdamW) %s</title>"
                          "</rect>\n",
                          left, y, plot_w * sim->tl_elementwise[t] / top_val, lane,
                          fmt_value(buf, sizeof buf, sim->tl_elementwise[t], u));
            for (int g = 0; g < G; g++) {
                cz_sim_span sp = l == 0   ? sim->tl_gather[g]
                                 : l == 1 ? sim->tl_compute[(size_t)g * R + t]
                                          : sim->tl_scatter[g];
                if (!(sp.end > sp.start))
                    continue;
                const char *fill = l == 1 ? group_colors[g % 2] : (l == 0 ? "#f28e2b" : "#edc948");
                sb_printf(b,
                          "<rect class=\"%s\" x=\"%.2f\" y=\"%d\" width=\"%.2f\" height=\"%d\" "
                          "fill=\"%s\"><title>group %d %s: %s</title></rect>\n",
                          lane_names[l], left + plot_w * sp.start / top_val, y,
                          fmax(plot_w * (sp.end - sp.start) / top_val, 0.3), lane, fill, g,
                          lane_names[l], fmt_value(buf, sizeof buf, sp.end - sp.start, u));
            }
        }
    }
    int y_axis = y_start + R * (3 * (lane + 2) + 6) + 4;
    for (int k = 0; k <= 5; k++) {
        double x = left + plot_w * k / 5.0;
        sb_printf(b,
                  "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#999999\"/>"
                  "<text x=\"%.1f\" y=\"%d\" font-size=\"10\" text-anchor=\"middle\">%s</text>\n",
                  x, y_axis, x, y_axis + 4, x, y_axis + 15,
                  fmt_value(buf, sizeof buf, top_val * k / 5.0, u));
    }
    sb_printf(b,
              "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"black\"/>\n"
              "<text x=\"%.1f\" y=\"%d\" font-size=\"11\" text-anchor=\"middle\">%s after the "
              "gradients are synchronized</text>\n",
              left, y_axis, width - right, y_axis, left + plot_w / 2, y_axis + 30,
              o->sim_in_seconds ? "simulated time" : "cost-proportional time (no cluster given)");
    int ly = y_axis + 44;
    static const char *const legend_fill[5] = {"#f28e2b", "#4e79a7", "#76b7b2", "#edc948",
                                               "#bab0ac"};
    static const char *const legend_text[5] = {"gather all-to-all", "compute (even group)",
                                               "compute (odd group)", "scatter all-to-all",
                                               "elementwise (AdamW)"};
    for (int k = 0; k < 5; k++)
        sb_printf(b,
                  "<rect x=\"%d\" y=\"%d\" width=\"12\" height=\"10\" fill=\"%s\"/>"
                  "<text x=\"%d\" y=\"%d\" font-size=\"11\">%s</text>\n",
                  left + k * 170, ly, legend_fill[k], left + k * 170 + 16, ly + 9, legend_text[k]);
    sb_printf(b, "</g>\n");
    return ly + 20;
}

static int svg_body(sbuf *b, const cz_plan *plan, const cz_sim_result *sim,
                    const cz_render_options *opt, cz_error *err)
{
    cz_render_options o = {0};
    if (opt)
        o = *opt;
    int width = o.width > 0 ? o.width : 1200;
    if (width < 400 || width > 20000)
        return cz_error_set(err, CZ_EINVALID, "width %d: expected 400 .. 20000 pixels", width);
    if (plan->dp < 1 || plan->tp < 1 || plan->pp < 1)
        return cz_error_set(err, CZ_EINVALID, "plan topology dp=%d tp=%d pp=%d: expected >= 1",
                            plan->dp, plan->tp, plan->pp);
    /* Body first (its height is known at the end), then the header in front of it. */
    sbuf body = {0};
    int rc = CZ_OK;
    svg_title(&body, plan, sim, &o, width);
    if ((rc = svg_loads(&body, plan, width, 56, err)))
        goto done;
    int height = 56 + 340;
    if (sim && sim->tl_tp > 0)
        height = svg_timeline(&body, plan, sim, &o, width, height);
    height += 10;
    sb_printf(b,
              "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
              "viewBox=\"0 0 %d %d\" font-family=\"sans-serif\">\n"
              "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
              width, height, width, height);
    if (!body.failed && body.data)
        sb_printf(b, "%s", body.data);
    sb_printf(b, "</svg>\n");
    if (body.failed || b->failed)
        rc = cz_error_set(err, CZ_ENOMEM, "out of memory rendering the plan");
done:
    free(body.data);
    return rc;
}

int cz_plan_render_svg(char **out, const cz_plan *plan, const cz_sim_result *sim,
                       const cz_render_options *opt, cz_error *err)
{
    sbuf b = {0};
    *out = NULL;
    sb_printf(&b, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    int rc = svg_body(&b, plan, sim, opt, err);
    if (rc) {
        free(b.data);
        return rc;
    }
    *out = b.data;
    return CZ_OK;
}

static int cmp_cost_desc(const void *a, const void *b, void *ctx)
{
    const cz_plan *plan = ctx;
    double ca = plan->params[*(const int *)a].cost, cb = plan->params[*(const int *)b].cost;
    if (ca != cb)
        return ca < cb ? 1 : -1;
    return *(const int *)a - *(const int *)b;
}

/* qsort has no context argument; a small merge sort keeps ties in id order. */
static void sort_ids(int *ids, int *tmp, size_t n, const cz_plan *plan)
{
    if (n < 2)
        return;
    size_t h = n / 2;
    sort_ids(ids, tmp, h, plan);
    sort_ids(ids + h, tmp, n - h, plan);
    size_t i = 0, j = h, k = 0;
    while (i < h && j < n)
        tmp[k++] = cmp_cost_desc(&ids[j], &ids[i], (void *)plan) < 0 ? ids[j++] : ids[i++];
    while (i < h)
        tmp[k++] = ids[i++];
    while (j < n)
        tmp[k++] = ids[j++];
    memcpy(ids, tmp, n * sizeof *ids);
}

static void html_tables(sbuf *b, const cz_plan *plan, const cz_sim_result *sim,
                        const cz_render_options *o, int *ids, int *tmp)
{
    const cz_settings *s = &plan->settings;
    const cz_plan_metrics *m = &plan->metrics;
    cz_cost_unit u = s->unit;
    char buf[64];
    sb_printf(b, "<h2>Settings</h2>\n<table>\n");
    sb_printf(b, "<tr><th>model</th><td>");
    sb_escape(b, plan->model_name);
    sb_printf(b, "</td></tr>\n<tr><th>cluster</th><td>");
    sb_escape(b, o->cluster_name ? o->cluster_name : plan->cluster_name);
    sb_printf(b, "</td></tr>\n<tr><th>topology</th><td>DP %d x TP %d x PP %d</td></tr>\n", plan->dp,
              plan->tp, plan->pp);
    sb_printf(b,
              "<tr><th>optimizer</th><td>%s</td></tr>\n<tr><th>cost unit</th><td>%s</td></tr>\n"
              "<tr><th>DP strategy</th><td>%s (alpha %g)%s</td></tr>\n"
              "<tr><th>TP strategy</th><td>%s, capacity %s</td></tr>\n"
              "<tr><th>solver</th><td>%s</td></tr>\n",
              cz_optimizer_name(s->optimizer), cz_unit_name(u), cz_dp_strategy_name(s->dp),
              s->alpha, plan->dp_fell_back ? ", fell back to anchored" : "",
              cz_tp_strategy_name(s->tp), fmt_value(buf, sizeof buf, plan->capacity_used, u),
              cz_solver_name(s->solver));
    sb_printf(b,
              "<tr><th>DP imbalance (max/mean)</th><td>%.4f</td></tr>\n"
              "<tr><th>TP imbalance (max/mean)</th><td>%.4f</td></tr>\n",
              m->dp_imbalance, m->tp_imbalance);
    sb_printf(b, "<tr><th>TP makespan</th><td>%s</td></tr>\n",
              fmt_value(buf, sizeof buf, m->tp_makespan, u));
    sb_printf(b, "<tr><th>lower bound</th><td>%s</td></tr>\n",
              fmt_value(buf, sizeof buf, m->lower_bound, u));
    if (sim && o->sim_in_seconds)
        sb_printf(b,
                  "<tr><th>simulated step</th><td>%.4f ms (optimizer %.4f ms, communication "
                  "%.4f ms)</td></tr>\n",
                  sim->step_s * 1e3, sim->optimizer_s * 1e3, sim->comm_s * 1e3);
    sb_printf(b, "</table>\n<h2>Per-rank loads</h2>\n<table>\n<tr><th>stage</th><th>DP rank</th>"
                 "<th>DP load</th><th>TP makespan</th><th>groups</th><th>busiest GPU</th>"
                 "<th>state memory (max GPU)</th></tr>\n");
    for (int r = 0; r < plan->pp * plan->dp; r++) {
        int groups = (size_t)r < plan->nschedules ? plan->schedules[r].ngroups : 0;
        double busiest = 0.0, mem = 0.0;
        for (int t = 0; t < plan->tp; t++) {
            if (m->gpu_load)
                busiest = fmax(busiest, m->gpu_load[r * plan->tp + t]);
            if (m->memory)
                mem = fmax(mem, m->memory[r * plan->tp + t]);
        }
        sb_printf(b, "<tr><td>%d</td><td>%d</td>", r / plan->dp, r % plan->dp);
        sb_printf(b, "<td>%s</td>", fmt_value(buf, sizeof buf, m->dp_load ? m->dp_load[r] : 0, u));
        sb_printf(b, "<td>%s</td>",
                  fmt_value(buf, sizeof buf, m->rank_makespan ? m->rank_makespan[r] : 0, u));
        sb_printf(b, "<td>%d</td><td>%s</td><td>%.3f GiB</td></tr>\n", groups,
                  fmt_value(buf, sizeof buf, busiest, u), mem / 1073741824.0);
    }
    sb_printf(b, "</table>\n<h2>Costliest parameters</h2>\n<table>\n<tr><th>#</th><th>name</th>"
                 "<th>shape</th><th>kind</th><th>cost</th><th>DP owner</th></tr>\n");
    for (size_t i = 0; i < plan->nparams; i++)
        ids[i] = (int)i;
    sort_ids(ids, tmp, plan->nparams, plan);
    size_t shown = plan->nparams < 20 ? plan->nparams : 20;
    for (size_t i = 0; i < shown; i++) {
        const cz_plan_param *p = &plan->params[ids[i]];
        sb_printf(b, "<tr><td>%d</td><td>", p->id);
        sb_escape(b, p->name);
        if (p->ndim == 2)
            sb_printf(b, "</td><td>%lld x %lld</td>", (long long)p->shape[0],
                      (long long)p->shape[1]);
        else
            sb_printf(b, "</td><td>%lld</td>", (long long)p->shape[0]);
        sb_printf(b, "<td>%s</td><td>%s</td><td>%d</td></tr>\n",
                  p->kind == CZ_KIND_MATRIX ? "matrix" : "elementwise",
                  fmt_value(buf, sizeof buf, p->cost, u), p->dp_owner);
    }
    sb_printf(b, "</table>\n");
}

int cz_plan_render_html(char **out, const cz_plan *plan, const cz_sim_result *sim,
                        const cz_render_options *opt, cz_error *err)
{
    sbuf b = {0};
    cz_render_options o = {0};
    int rc = CZ_OK;
    size_t n = plan->nparams ? plan->nparams : 1;
    int *ids = malloc(n * sizeof *ids), *tmp = malloc(n * sizeof *tmp);
    *out = NULL;
    if (opt)
        o = *opt;
    if (!ids || !tmp) {
        rc = cz_error_set(err, CZ_ENOMEM, "out of memory rendering the plan");
        goto done;
    }
    sb_printf(&b, "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\"/>\n"
                  "<title>canzona plan: ");
    sb_escape(&b, plan->model_name);
    sb_printf(&b, " on ");
    sb_escape(&b, o.cluster_name ? o.cluster_name : plan->cluster_name);
    sb_printf(&b, "</title>\n<style>\nbody { font-family: sans-serif; margin: 1em; }\n"
                  "table { border-collapse: collapse; margin-bottom: 1em; }\n"
                  "td, th { border: 1px solid #cccccc; padding: 2px 8px; text-align: left; }\n"
                  "</style>\n</head>\n<body>\n<h1>canzona plan: ");
    sb_escape(&b, plan->model_name);
    sb_printf(&b, "</h1>\n");
    if ((rc = svg_body(&b, plan, sim, &o, err)))
        goto done;
    html_tables(&b, plan, sim, &o, ids, tmp);
    sb_printf(&b, "</body>\n</html>\n");
    if (b.failed) {
        rc = cz_error_set(err, CZ_ENOMEM, "out of memory rendering the plan");
        goto done;
    }
    *out = b.data;
    b.data = NULL;
done:
    free(b.data);
    free(ids);
    free(tmp);
    return rc;
}
