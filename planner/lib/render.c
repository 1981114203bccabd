/*
 * Renders a plan as a self-contained SVG (no scripts, no external fonts or images) meant to
 * show at a glance what bounds the step, from 8 to 8,192 GPUs: a verdict line; per-GPU load
 * bars (aggregated into columns where bars would get thin) against the lower bound and the
 * mean; with a cluster, the simulated step as its phases (DP synchronization and the update);
 * and the micro-group pipeline of the DP rank that finishes last, boxes labelled with their
 * largest task. Optionally wrapped in an HTML page with tables.
 */
#include "cz_analysis.h"
#include "cz_strbuf.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The lower bound the picture measures against: the bound under the plan's task freedom (block
 * and cooperative tasks), which is the atomic one for whole-matrix plans and files without it. */
static double bound_of(const cz_plan_metrics *m)
{
    return m->split_lower_bound > 0 ? m->split_lower_bound : m->lower_bound;
}

/* Appends s with the five XML special characters escaped (also right for HTML text). */
static void put_escaped(cz_strbuf *b, const char *s)
{
    for (; s && *s; s++) {
        switch (*s) {
        case '<':
            cz__strbuf_printf(b, "&lt;");
            break;
        case '>':
            cz__strbuf_printf(b, "&gt;");
            break;
        case '&':
            cz__strbuf_printf(b, "&amp;");
            break;
        case '"':
            cz__strbuf_printf(b, "&quot;");
            break;
        case '\'':
            cz__strbuf_printf(b, "&#39;");
            break;
        default:
            /* Control characters are not allowed in XML 1.0 text. */
            if ((unsigned char)*s < 0x20 && *s != '\t' && *s != '\n')
                cz__strbuf_printf(b, "?");
            else
                cz__strbuf_printf(b, "%c", *s);
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

/* Text width estimate for the generic sans-serif the SVG asks for: used to decide whether a
 * label fits inside a box and to keep axis labels apart. Generous (0.6 em per character) so
 * a wider fallback font still fits. */
static double text_w(size_t nchars, double font)
{
    return (double)nchars * font * 0.6;
}

/* Panel palettes, deliberately disjoint so a colour means one thing in the whole picture:
 * blues for GPUs in (a), purples and brown for DP collectives in (b), greens for the optimizer
 * update (the green phase of (b) is what the timeline enlarges), orange / yellow for its TP
 * all-to-alls; red dashed is the lower bound everywhere, black marks what sets the end. */
static const char *const rank_fill[2] = {"#4e79a7", "#a0cbe8"};
#define AGG_MAX_FILL "#c6dbef"
#define AGG_MEAN_FILL "#3b6a9a"
#define BUSIEST_FILL "#08306b"
#define LB_STROKE "#e15759"
#define MEAN_STROKE "#555555"
#define GRAD_FILL "#b07aa1"
#define FRAG_FILL "#9c755f"
#define UPDATE_FILL "#59a14f"
#define PARAM_FILL "#d4a6c8"
static const char *const compute_fill[2] = {"#59a14f", "#a6d99a"};
#define GATHER_FILL "#f28e2b"
#define SCATTER_FILL "#edc948"
#define ELEM_FILL "#bab0ac"
/* Cooperative tasks: drawn over the compute lanes of the TP ranks they span. */
#define COOP_FILL "#76b7b2"
#define COOP_STROKE "#1f5f5b"
#define COOP_AR_FILL "#e15759"
/* The expert ranks' part of a GPU's load, under the dense part of its bar. */
#define EXPERT_FILL "#f28e2b"

/* What the picture states about the plan, computed once. */
typedef struct render_facts {
    int ngpus;
    int spread;          /* the GPUs the work is spread over: ngpus, or a fully sharded plan's
                            schedule slots per stage times the stages */
    double mean;         /* mean GPU load, cost unit */
    int busiest;         /* GPU index with the largest load (first on ties) */
    int largest_task;    /* param id of the largest task (-1 when none) */
    int lb_by_task;      /* 1: the lower bound is the largest task, 0: total work / GPUs */
    int ties;            /* DP ranks of the critical stage computing within 0.5 % of the max */
    double tl_lb;        /* lower bound in the timeline's unit (0 when unknown) */
    int tl_lb_estimated; /* 1 when tl_lb was converted from another cost unit */
    double *expert;      /* a plan with expert groups: each GPU's expert part of its load (drawn
                            as the lower segment of its bar); NULL otherwise */
} render_facts;

static void facts_compute(render_facts *f, const cz_plan *plan, const cz_sim_result *sim,
                          const cz_svg_options *o)
{
    const cz_plan_metrics *m = &plan->metrics;
    memset(f, 0, sizeof *f);
    f->ngpus = plan->pp * plan->dp * plan->tp;
    f->largest_task = -1;
    for (int i = 0; m->gpu_load && i < f->ngpus; i++) {
        f->mean += m->gpu_load[i];
        if (m->gpu_load[i] > m->gpu_load[f->busiest])
            f->busiest = i;
    }
    f->mean /= f->ngpus;
    /* Among equally large tasks (a model's layers are alike) name one the busiest GPU's rank
     * owns, so that the verdict and the timeline speak of the same task. */
    int bs = f->busiest / plan->tp / plan->dp, bd = f->busiest / plan->tp % plan->dp;
    double best = -1.0;
    int best_here = 0;
    for (size_t i = 0; i < plan->nparams; i++) {
        const cz_plan_param *p = &plan->params[i];
        double c = p->def.kind == CZ_KIND_MATRIX ? p->cost : p->cost / plan->tp;
        int here = p->stage == bs && p->dp_owner == bd;
        if (c > best || (c == best && here && !best_here)) {
            best = c;
            best_here = here;
            f->largest_task = (int)i;
        }
    }
    /* A fully sharded plan's work is spread over its schedule's GPUs (one HSDP replica's when
     * the replicas compute redundantly). */
    f->spread = cz_plan_is_fsdp(plan) ? cz_plan_fsdp_slots(plan) * plan->pp : f->ngpus;
    f->lb_by_task = bound_of(m) == m->lower_bound && m->max_task_cost >= m->total_cost / f->spread;
    if (!sim)
        return;
    /* Ties: how many DP ranks of the critical stage have a GPU as busy as the busiest. */
    double stage_max = 0.0;
    int s = sim->critical_stage, R = plan->tp, D = plan->dp;
    for (int i = s * D * R; sim->gpu_busy && i < (s + 1) * D * R && i < sim->ngpus; i++)
        stage_max = fmax(stage_max, sim->gpu_busy[i]);
    for (int d = 0; sim->gpu_busy && d < D; d++) {
        double rb = 0.0;
        for (int t = 0; t < R && (s * D + d) * R + t < sim->ngpus; t++)
            rb = fmax(rb, sim->gpu_busy[(s * D + d) * R + t]);
        f->ties += rb >= stage_max * 0.995;
    }
    /* The planner's lower bound in the timeline's unit: without a cluster the timeline is in the
     * cost unit already; in seconds it is exact for plans costed in time and otherwise scaled by
     * the simulated seconds per cost unit over the whole plan (an estimate, marked as such). */
    if (!o->sim_in_seconds || plan->settings.unit == CZ_UNIT_TIME) {
        f->tl_lb = bound_of(m);
    } else if (m->total_cost > 0 && sim->gpu_busy) {
        double busy = 0.0;
        for (int i = 0; i < sim->ngpus; i++)
            busy += sim->gpu_busy[i];
        f->tl_lb = bound_of(m) * busy / m->total_cost;
        f->tl_lb_estimated = 1;
    }
}

/* A parameter's name short enough for a box: "L5 linear_fc1" for a layer's parameter (the
 * segment before a trailing "weight"/"bias"), the first segment otherwise ("embedding"). */
static const char *short_name(char *buf, size_t n, const cz_plan_param *p)
{
    const char *name = p->def.name ? p->def.name : "?";
    const char *end = name + strlen(name), *seg = end;
    /* Last segment; step back over a trailing weight/bias. */
    for (int pass = 0; pass < 2; pass++) {
        const char *stop = seg;
        seg = stop;
        while (seg > name && seg[-1] != '.')
            seg--;
        size_t len = (size_t)(stop - seg);
        if (pass == 0 && seg > name &&
            ((len == 6 && !strncmp(seg, "weight", 6)) || (len == 4 && !strncmp(seg, "bias", 4)))) {
            end = seg - 1;
            seg = end;
            continue;
        }
        end = stop;
        break;
    }
    if (p->def.layer >= 0)
        snprintf(buf, n, "L%d %.*s", p->def.layer, (int)(end - seg), seg);
    else {
        const char *dot = strchr(name, '.');
        snprintf(buf, n, "%.*s", (int)(dot ? dot - name : (ptrdiff_t)strlen(name)), name);
    }
    return buf;
}

static void gpu_coords(const cz_plan *plan, int gi, int *stage, int *dp, int *tp)
{
    int r = gi / plan->tp;
    *stage = r / plan->dp;
    *dp = r % plan->dp;
    *tp = gi % plan->tp;
}

/* Appends to a fixed buffer, truncating (the texts it builds are far below its size). */
static void cat(char *dst, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static void cat(char *dst, size_t n, const char *fmt, ...)
{
    size_t len = strlen(dst);
    if (len + 1 >= n)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(dst + len, n - len, fmt, ap);
    va_end(ap);
}

/* Writes text (unescaped) from x = 10 at baseline y, broken at spaces into lines that fit the
 * width; returns the baseline below the last line. attrs go into every <text> element. */
static int text_wrapped(cz_strbuf *b, int y, int font, int bold, const char *attrs,
                        const char *text, int width)
{
    double per_char = text_w(1, font) * (bold ? 1.1 : 1.0);
    size_t fit = (size_t)fmax(10.0, (width - 20) / per_char), len = strlen(text);
    char line[1024];
    while (len > 0) {
        size_t n = len;
        if (n > fit) {
            n = fit;
            while (n > 0 && text[n] != ' ')
                n--;
            if (n == 0)
                n = fit;
        }
        if (n >= sizeof line)
            n = sizeof line - 1;
        memcpy(line, text, n);
        line[n] = '\0';
        cz__strbuf_printf(b, "<text x=\"10\" y=\"%d\" font-size=\"%d\"%s%s>", y, font,
                          bold ? " font-weight=\"bold\"" : "", attrs ? attrs : "");
        put_escaped(b, line);
        cz__strbuf_printf(b, "</text>\n");
        y += font + 4;
        text += n;
        len -= n;
        while (len > 0 && *text == ' ') {
            text++;
            len--;
        }
    }
    return y;
}

/* Title, settings line and the verdict: what the step (or the plan's work) is bounded by.
 * Returns the y below them. */
static int svg_title(cz_strbuf *b, const cz_plan *plan, const cz_sim_result *sim,
                     const cz_svg_options *o, const render_facts *f, int width)
{
    const cz_plan_metrics *m = &plan->metrics;
    double ratio = bound_of(m) > 0 ? m->tp_makespan / bound_of(m) : 0.0;
    char buf[64], b2[64], name[96], text[1024] = "";
    cz_cost_unit u = plan->settings.unit;
    cat(text, sizeof text, "%.200s on %.200s (DP %d x TP %d x PP %d = %d GPUs",
        plan->model_name ? plan->model_name : "model",
        o->cluster_name ? o->cluster_name : (plan->cluster_name ? plan->cluster_name : "cluster"),
        plan->dp, plan->tp, plan->pp, f->ngpus);
    if (cz_plan_has_experts(plan))
        cat(text, sizeof text, "; experts over EP %d x ETP %d x expert-DP %d", plan->ep, plan->etp,
            plan->edp);
    cat(text, sizeof text, ")");
    int y = text_wrapped(b, 24, 16, 1, NULL, text, width) + 2;
    text[0] = '\0';
    cat(text, sizeof text, "%s, unit %s, dp %s", cz_optimizer_name(plan->settings.optimizer),
        cz_unit_name(u), cz_dp_strategy_name(plan->settings.dp));
    if (plan->settings.dp == CZ_DP_ALPHA)
        cat(text, sizeof text, " (alpha %g)", plan->settings.alpha);
    if (plan->settings.layout == CZ_LAYOUT_SPLIT)
        cat(text, sizeof text, ", split layout");
    if (cz_plan_is_fsdp(plan) && cz_plan_fsdp_replicas(plan) > 1)
        cat(text, sizeof text, ", fully sharded, HSDP %d replicas x %d shard ranks (%s)",
            cz_plan_fsdp_replicas(plan), cz_plan_fsdp_shard(plan),
            cz_hsdp_compute_name(plan->settings.hsdp));
    else if (cz_plan_is_fsdp(plan))
        cat(text, sizeof text, ", fully sharded (FSDP2)");
    cat(text, sizeof text,
        ", tp %s; DP imbalance %.3f, TP imbalance %.3f, makespan / lower bound %.3f",
        cz_tp_strategy_name(plan->settings.tp), m->dp_imbalance, m->tp_imbalance, ratio);
    if (cz_plan_has_experts(plan))
        cat(text, sizeof text, ", expert imbalance %.3f", m->expert_imbalance);
    if (sim && o->sim_in_seconds)
        cat(text, sizeof text, "; simulated step %.3f ms", sim->step_s * 1e3);
    if (o->fsdp)
        cat(text, sizeof text,
            "; simulated step %.3f ms (gradients %.3f, update %.3f of which all-to-alls %.3f, "
            "parameters %.3f)",
            o->fsdp->step_s * 1e3, o->fsdp->grad_s * 1e3, o->fsdp->update_s * 1e3,
            (o->fsdp->gather_s + o->fsdp->scatter_s) * 1e3, o->fsdp->param_s * 1e3);
    y = text_wrapped(b, y, 12, 0, NULL, text, width);
    text[0] = '\0';
    if (sim && o->sim_in_seconds && sim->step_s > 0) {
        double sync = sim->grad_sync_s + sim->frag_gather_s + sim->param_sync_s;
        int psync = (int)lround(100.0 * sync / sim->step_s);
        if (sync >= sim->local_s)
            cat(text, sizeof text,
                "Bound by DP synchronization: %d%% of the %.3f ms step is gradient and parameter "
                "traffic over DP; the optimizer update takes %.3f ms",
                psync, sim->step_s * 1e3, sim->local_s * 1e3);
        else
            cat(text, sizeof text,
                "Bound by the optimizer update: %.3f ms, %d%% of the %.3f ms step; DP "
                "synchronization takes %.3f ms",
                sim->local_s * 1e3, 100 - psync, sim->step_s * 1e3, sync * 1e3);
        cat(text, sizeof text, ", ended by the GPU of stage %d, DP %d, TP %d.", sim->critical_stage,
            sim->critical_dp, sim->critical_tp);
    } else {
        int s, d, t;
        gpu_coords(plan, f->busiest, &s, &d, &t);
        double bl = m->gpu_load ? m->gpu_load[f->busiest] : 0.0;
        cat(text, sizeof text,
            "Busiest GPU (stage %d, DP %d, TP %d): %s = %.2f x the lower bound %s, ", s, d, t,
            fmt_value(buf, sizeof buf, bl, u), bound_of(m) > 0 ? bl / bound_of(m) : 0.0,
            fmt_value(b2, sizeof b2, bound_of(m), u));
        if (f->lb_by_task && f->largest_task >= 0)
            cat(text, sizeof text, "set by the largest task (%s).",
                short_name(name, sizeof name, &plan->params[f->largest_task]));
        else if (bound_of(m) != m->lower_bound)
            cat(text, sizeof text,
                "the bound under block and cooperative tasks (atomic lower bound %s).",
                fmt_value(b2, sizeof b2, m->lower_bound, u));
        else
            cat(text, sizeof text, "set by the total work over %d GPUs.", f->spread);
    }
    return text_wrapped(b, y, 12, 1, " class=\"verdict\" fill=\"#222222\"", text, width);
}

/* Legend entry at (*x, *y), advanced past it; wraps to a new line before max_x. */
static void legend_item(cz_strbuf *b, double *x, int *y, int max_x, const char *fill,
                        const char *stroke, int dashed, const char *text)
{
    double need = 20 + text_w(strlen(text), 11);
    if (*x > 10 && *x + need > max_x) {
        *x = 10;
        *y += 16;
    }
    if (stroke)
        cz__strbuf_printf(b,
                          "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"%s\" "
                          "stroke-width=\"2\"%s/>",
                          *x, *y - 4, *x + 16, *y - 4, stroke,
                          dashed ? " stroke-dasharray=\"5,3\"" : "");
    else
        cz__strbuf_printf(b, "<rect x=\"%.1f\" y=\"%d\" width=\"12\" height=\"10\" fill=\"%s\"/>",
                          *x, *y - 9, fill);
    cz__strbuf_printf(b, "<text class=\"legend\" x=\"%.1f\" y=\"%d\" font-size=\"11\">", *x + 20,
                      *y);
    put_escaped(b, text);
    cz__strbuf_printf(b, "</text>\n");
    *x += need + 14;
}

/* Smallest "nice" step (1, 2, 5 times a power of ten) with step * unit_px >= min_px. */
static int nice_step(double unit_px, double min_px)
{
    for (int p = 1; p < 1000000000; p *= 10) {
        static const int mult[3] = {1, 2, 5};
        for (int k = 0; k < 3; k++)
            if (mult[k] * p * unit_px >= min_px)
                return mult[k] * p;
    }
    return 1000000000;
}

/* Axis ticks from 0 to top (inclusive) on [x0, x0 + plot_w] at baseline y: the smallest step of
 * 1, 2, 2.5 or 5 times a power of ten whose labels stay their width plus 16 px apart (10 ticks at
 * most), so labels never run into each other however narrow the picture. */
static void axis_ticks(cz_strbuf *b, double x0, double plot_w, int y, double top, cz_cost_unit u)
{
    static const double mult[4] = {1.0, 2.0, 2.5, 5.0};
    char buf[64];
    /* An infinite top (loads that overflowed) has no ticks, and would never end the search. */
    if (!(top > 0) || !isfinite(top))
        return;
    double step = top;
    /* From a step giving at most 10 ticks upwards; the first whose widest label fits wins. A
     * top so small that top / 10 underflows to 0 starts at top itself (p = 0 never grows). */
    double p = pow(10.0, floor(log10(top / 10.0)));
    if (!(p > 0))
        p = top;
    for (int found = 0; !found && p <= top; p *= 10.0)
        for (int k = 0; k < 4 && !found; k++) {
            double st = mult[k] * p, widest = 0.0;
            if (top / st > 10.0)
                continue;
            for (int i = 0; i * st <= top * (1 + 1e-9); i++)
                widest = fmax(widest, text_w(strlen(fmt_value(buf, sizeof buf, i * st, u)), 10));
            if (plot_w * st / top >= widest + 16) {
                step = st;
                found = 1;
            }
        }
    for (int k = 0; k * step <= top * (1 + 1e-9); k++) {
        double x = x0 + plot_w * (k * step) / top;
        cz__strbuf_printf(b,
                          "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#999999\"/>"
                          "<text class=\"axis-label\" x=\"%.1f\" y=\"%d\" font-size=\"10\" "
                          "text-anchor=\"middle\">%s</text>\n",
                          x, y, x, y + 4, x, y + 15, fmt_value(buf, sizeof buf, k * step, u));
    }
    cz__strbuf_printf(b, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"black\"/>\n",
                      x0, y, x0 + plot_w, y);
}

/* A panel heading at baseline y, wrapped to the width; returns how many pixels the wrapping
 * added below a one-line heading (what the rest of the panel moves down by). */
static int panel_heading(cz_strbuf *b, int y, const char *text, int width)
{
    return text_wrapped(b, y, 13, 1, NULL, text, width) - (y + 17);
}

/* A note centred under a plot when it fits in one line, else wrapped from the left; returns
 * the baseline below it. */
static int note_below(cz_strbuf *b, double cx, int y, const char *text, int width)
{
    if (text_w(strlen(text), 11) <= width - 20) {
        cz__strbuf_printf(b, "<text x=\"%.1f\" y=\"%d\" font-size=\"11\" text-anchor=\"middle\">",
                          cx, y);
        put_escaped(b, text);
        cz__strbuf_printf(b, "</text>\n");
        return y + 15;
    }
    return text_wrapped(b, y, 11, 0, NULL, text, width);
}

/* Panel (a): optimizer work per GPU. One bar per GPU while bars stay at least 3 px wide;
 * beyond that, one column per group of DP ranks showing the group's max, mean and min, so
 * that 8,192 GPUs draw as a few hundred shapes and the busiest GPU is still marked. */
/* The geometry of panel (a): plot area, columns (one per GPU, or aggregated k DP ranks to a
 * column when bars would be under 3 px) and the y scale. */
typedef struct loads_geom {
    int P, D, R;
    int left, right, height;
    double stage_gap, avail;
    int aggregate, k, cols; /* k DP ranks per column, cols columns per stage */
    double col_w, rank_px, gap;
    double ystep, top_val;
    int ngrid;
    double y_top, y0; /* the plot's top and baseline, once the header is placed */
    cz_cost_unit u;
} loads_geom;

static void loads_geom_init(loads_geom *g, const cz_plan *plan, const render_facts *f, int width)
{
    const cz_plan_metrics *m = &plan->metrics;
    int P = plan->pp, D = plan->dp, R = plan->tp;
    *g = (loads_geom){.P = P, .D = D, .R = R, .left = 90, .right = 20, .height = 220};
    g->u = plan->settings.unit;
    g->stage_gap = P > 1 ? 20.0 : 0.0;
    double plot_w = width - g->left - g->right;
    g->avail = plot_w - g->stage_gap * (P - 1);
    double per_gpu = g->avail / (D * R);
    g->aggregate = per_gpu / P < 3.0;
    /* Ranks per column: 1 in per-GPU mode; else the smallest power of two giving >= 5 px. */
    g->k = 1;
    if (g->aggregate)
        while (g->k < D && g->avail / (P * ((D + g->k - 1) / g->k)) < 5.0)
            g->k *= 2;
    g->cols = (D + g->k - 1) / g->k;   /* per stage */
    g->col_w = g->avail / P / g->cols; /* a column: k ranks, all TP ranks */
    g->rank_px = g->avail / P / D;     /* pixels per DP rank */
    g->gap =
        g->aggregate ? fmin(1.0, g->col_w * 0.15) : (D > 1 ? fmin(6.0, g->rank_px * 0.2) : 0.0);
    double maxv = 0.0;
    for (int i = 0; i < f->ngpus; i++)
        maxv = fmax(maxv, m->gpu_load[i]);
    /* The y grid: 3 to 5 lines at a round step (1, 2 or 5 times a power of ten). */
    double want = fmax(maxv, bound_of(m)) * 1.08;
    g->ystep = 1.0;
    if (want > 0) {
        double p10 = pow(10.0, floor(log10(want / 5.0)));
        g->ystep = p10 * (want / p10 <= 5.0    ? 1.0
                          : want / p10 <= 10.0 ? 2.0
                          : want / p10 <= 25.0 ? 5.0
                                               : 10.0);
    }
    g->ngrid = (int)ceil(want / g->ystep - 1e-9);
    g->ngrid = g->ngrid < 1 ? 1 : g->ngrid;
    g->top_val = g->ngrid * g->ystep;
}

/* The y of value v (negative values at the baseline). */
static double loads_y(const loads_geom *g, double v)
{
    return g->y0 - g->height * (v > 0 ? v : 0.0) / g->top_val;
}

/* Heading, legend and the busiest GPU's line; returns the top of the plot's header area. */
static int loads_header(cz_strbuf *b, const cz_plan *plan, const render_facts *f,
                        const loads_geom *g, int width, int top)
{
    const cz_plan_metrics *m = &plan->metrics;
    char buf[64], b2[64], text[512] = "";
    cz_cost_unit u = g->u;
    cat(text, sizeof text, "(a) optimizer work per GPU (%s)", cz_unit_name(u));
    if (g->aggregate)
        cat(text, sizeof text, ", %d GPUs in %d columns of %d DP rank%s x %d TP", f->ngpus,
            g->P * g->cols, g->k, g->k == 1 ? "" : "s", g->R);
    else
        cat(text, sizeof text, ", one bar per GPU, TP ranks side by side within each DP rank");
    cz__strbuf_printf(b, "<g id=\"loads\">\n");
    top += panel_heading(b, top + 16, text, width);
    double lx = 10;
    int ly = top + 34, lmax = width - g->right;
    if (g->aggregate) {
        legend_item(b, &lx, &ly, lmax, AGG_MAX_FILL, NULL, 0, "busiest GPU of the column");
        legend_item(b, &lx, &ly, lmax, AGG_MEAN_FILL, NULL, 0, "mean of the column");
        legend_item(b, &lx, &ly, lmax, NULL, "#000000", 0, "least busy");
    } else {
        legend_item(b, &lx, &ly, lmax, rank_fill[0], NULL, 0, "GPU (DP ranks alternate shades)");
    }
    legend_item(b, &lx, &ly, lmax, BUSIEST_FILL, NULL, 0, "busiest GPU");
    if (f->expert)
        legend_item(b, &lx, &ly, lmax, EXPERT_FILL, NULL, 0,
                    g->aggregate ? "expert work (mean of the column)"
                                 : "its expert rank's work (EP x ETP groups)");
    snprintf(b2, sizeof b2, "lower bound %s", fmt_value(buf, sizeof buf, bound_of(m), u));
    legend_item(b, &lx, &ly, lmax, NULL, LB_STROKE, 1, b2);
    snprintf(b2, sizeof b2, "mean %s", fmt_value(buf, sizeof buf, f->mean, u));
    legend_item(b, &lx, &ly, lmax, NULL, MEAN_STROKE, 0, b2);
    /* Legends may wrap on narrow pictures: everything below moves down with them. */
    top += ly - (top + 34);
    /* Busiest GPU, always named. */
    int bs, bd, bt;
    gpu_coords(plan, f->busiest, &bs, &bd, &bt);
    double bl = m->gpu_load[f->busiest];
    text[0] = '\0';
    cat(text, sizeof text,
        "\xe2\x96\xbc busiest GPU: stage %d, DP %d, TP %d with %s (%.2f x mean, %.2f x lower "
        "bound)",
        bs, bd, bt, fmt_value(buf, sizeof buf, bl, u), f->mean > 0 ? bl / f->mean : 0,
        bound_of(m) > 0 ? bl / bound_of(m) : 0);
    top += text_wrapped(b, top + 50, 11, 1, " class=\"busiest\"", text, width) - (top + 65);
    return top;
}

/* One bar per GPU of DP rank d0 of stage s (at stage offset sx); moves the busiest mark to its
 * bar when it is there. */
static void loads_gpu_bars(cz_strbuf *b, const cz_plan *plan, const render_facts *f,
                           const loads_geom *g, int s, int d0, double sx, double *mark_x,
                           double *mark_y)
{
    char buf[64];
    for (int t = 0; t < g->R; t++) {
        int gi = (s * g->D + d0) * g->R + t;
        double bw = (g->rank_px - g->gap) / g->R, x = sx + d0 * g->rank_px + t * bw;
        double v = plan->metrics.gpu_load[gi];
        cz__strbuf_printf(b,
                          "<rect class=\"bar\" x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" "
                          "height=\"%.2f\" fill=\"%s\"><title>stage %d, DP %d, TP %d: %s"
                          "</title></rect>\n",
                          x, loads_y(g, v), fmax(bw - (bw > 4 ? 0.5 : 0.0), 0.5),
                          g->y0 - loads_y(g, v),
                          gi == f->busiest ? BUSIEST_FILL : rank_fill[d0 % 2], s, d0, t,
                          fmt_value(buf, sizeof buf, v, g->u));
        if (f->expert && f->expert[gi] > 0)
            cz__strbuf_printf(b,
                              "<rect class=\"expert\" x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" "
                              "height=\"%.2f\" fill=\"%s\"><title>stage %d, DP %d, TP %d: "
                              "expert rank's work %s</title></rect>\n",
                              x, loads_y(g, f->expert[gi]), fmax(bw - (bw > 4 ? 0.5 : 0.0), 0.5),
                              g->y0 - loads_y(g, f->expert[gi]), EXPERT_FILL, s, d0, t,
                              fmt_value(buf, sizeof buf, f->expert[gi], g->u));
        if (gi == f->busiest) {
            *mark_x = x + bw / 2;
            *mark_y = loads_y(g, v);
        }
    }
}

/* Column c of stage s aggregated: the busiest GPU's bar, the mean's and a line at the least
 * busy; moves the busiest mark to it when the busiest GPU is in it. */
static void loads_column(cz_strbuf *b, const cz_plan *plan, const render_facts *f,
                         const loads_geom *g, int s, int c, double sx, double *mark_x,
                         double *mark_y)
{
    char buf[64], b2[64];
    int D = g->D, R = g->R, d0 = c * g->k, d1 = d0 + g->k < D ? d0 + g->k : D;
    double lo = INFINITY, hi = 0.0, sum = 0.0, esum = 0.0;
    int has_busiest = 0;
    for (int gi = (s * D + d0) * R; gi < (s * D + d1) * R; gi++) {
        double v = plan->metrics.gpu_load[gi];
        lo = fmin(lo, v);
        hi = fmax(hi, v);
        sum += v;
        esum += f->expert ? f->expert[gi] : 0.0;
        has_busiest |= gi == f->busiest;
    }
    double mean = sum / ((d1 - d0) * R), x = sx + c * g->col_w, w = g->col_w - g->gap;
    cz__strbuf_printf(b,
                      "<g class=\"agg\"><title>stage %d, DP %d..%d (%d GPUs): max %s, mean %s, "
                      "min ",
                      s, d0, d1 - 1, (d1 - d0) * R, fmt_value(buf, sizeof buf, hi, g->u),
                      fmt_value(b2, sizeof b2, mean, g->u));
    cz__strbuf_printf(b, "%s</title>", fmt_value(buf, sizeof buf, lo, g->u));
    cz__strbuf_printf(b,
                      "<rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" fill=\"%s\"/>"
                      "<rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" fill=\"%s\"/>"
                      "<line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\" stroke=\"#000000\"/>"
                      "</g>\n",
                      x, loads_y(g, hi), w, g->y0 - loads_y(g, hi),
                      has_busiest ? BUSIEST_FILL : AGG_MAX_FILL, x, loads_y(g, mean), w,
                      g->y0 - loads_y(g, mean), AGG_MEAN_FILL, x, loads_y(g, lo), x + w,
                      loads_y(g, lo));
    double emean = esum / ((d1 - d0) * R);
    if (emean > 0)
        cz__strbuf_printf(b,
                          "<rect class=\"expert\" x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" "
                          "height=\"%.2f\" fill=\"%s\"><title>mean expert work %s</title>"
                          "</rect>\n",
                          x + w / 4, loads_y(g, emean), w / 2, g->y0 - loads_y(g, emean),
                          EXPERT_FILL, fmt_value(buf, sizeof buf, emean, g->u));
    if (has_busiest) {
        *mark_x = x + w / 2;
        *mark_y = loads_y(g, hi);
    }
}

/* The x axis: stage separators, DP-rank ticks and their labels. A tick per labelled rank,
 * labels (as wide as the largest rank number) at least their width plus 10 px apart. */
static void loads_x_axis(cz_strbuf *b, const loads_geom *g)
{
    int P = g->P, D = g->D;
    double avail = g->avail, stage_gap = g->stage_gap, rank_px = g->rank_px;
    char num[16];
    int step = nice_step(rank_px, text_w((size_t)snprintf(num, sizeof num, "%d", D - 1), 10) + 10);
    if (g->aggregate && step < g->k)
        step = g->k;
    for (int s = 0; s < P; s++) {
        double sx = g->left + s * (avail / P + stage_gap), send = sx + avail / P;
        if (s > 0)
            cz__strbuf_printf(
                b,
                "<line class=\"stage-sep\" x1=\"%.2f\" y1=\"%.1f\" x2=\"%.2f\" y2=\"%.1f\" "
                "stroke=\"#777777\" stroke-dasharray=\"2,2\"/>\n",
                sx - stage_gap / 2, g->y_top, sx - stage_gap / 2, g->y0 + 30);
        for (int d = 0; d < D; d += step) {
            /* Under the middle of a rank's bars or column; at the start of a rank in a column
             * of several. */
            double x = g->aggregate && g->k > 1 ? sx + d * rank_px : sx + (d + 0.5) * rank_px;
            /* A label that would reach into the next stage's first label is left out. */
            if (d > 0 && s + 1 < P &&
                x + text_w((size_t)snprintf(num, sizeof num, "%d", d), 10) / 2 + 10 >
                    send + stage_gap - text_w(1, 10) / 2)
                continue;
            cz__strbuf_printf(
                b,
                "<line x1=\"%.2f\" y1=\"%.1f\" x2=\"%.2f\" y2=\"%.1f\" stroke=\"black\"/>"
                "<text class=\"xtick\" x=\"%.2f\" y=\"%.1f\" font-size=\"10\" "
                "text-anchor=\"middle\">%d</text>\n",
                x, g->y0, x, g->y0 + 4, x, g->y0 + 14, d);
        }
        if (P > 1)
            cz__strbuf_printf(b,
                              "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\" text-anchor=\"middle\">"
                              "stage %d: DP rank</text>\n",
                              sx + avail / P / 2, g->y0 + 28, s);
        else
            cz__strbuf_printf(b,
                              "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\" text-anchor=\"middle\">"
                              "DP rank</text>\n",
                              sx + avail / 2, g->y0 + 28);
    }
}

/* Panel (a): per-GPU loads against the lower bound and the mean, the busiest GPU marked. */
static int svg_loads(cz_strbuf *b, const cz_plan *plan, const render_facts *f, int width, int top,
                     int *bottom, cz_error *err)
{
    const cz_plan_metrics *m = &plan->metrics;
    if (!m->gpu_load)
        return cz__error_set(err, CZ_EINVALID,
                             "plan has no per-GPU loads (metrics.gpu_load); rebuild it with "
                             "'canzona plan'");
    loads_geom g;
    loads_geom_init(&g, plan, f, width);
    char buf[64];
    top = loads_header(b, plan, f, &g, width, top);
    g.y_top = top + 64;
    g.y0 = g.y_top + g.height;
    for (int q = 0; q <= g.ngrid; q++) {
        double v = g.ystep * q, y = g.y0 - g.height * v / g.top_val;
        cz__strbuf_printf(
            b,
            "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#dddddd\"/>"
            "<text x=\"%d\" y=\"%.1f\" font-size=\"10\" text-anchor=\"end\">%s</text>\n",
            g.left, y, width - g.right, y, g.left - 4, y + 3, fmt_value(buf, sizeof buf, v, g.u));
    }
    double mark_x = g.left, mark_y = g.y0;
    for (int s = 0; s < g.P; s++) {
        double sx = g.left + s * (g.avail / g.P + g.stage_gap);
        for (int c = 0; c < g.cols; c++) {
            if (g.aggregate)
                loads_column(b, plan, f, &g, s, c, sx, &mark_x, &mark_y);
            else
                loads_gpu_bars(b, plan, f, &g, s, c * g.k, sx, &mark_x, &mark_y);
        }
    }
    cz__strbuf_printf(
        b, "<path class=\"busiest-mark\" d=\"M %.2f %.2f l -5 -8 l 10 0 z\" fill=\"#000000\"/>\n",
        mark_x, mark_y - 1);
    cz__strbuf_printf(
        b,
        "<line id=\"lower-bound\" x1=\"%d\" y1=\"%.2f\" x2=\"%d\" y2=\"%.2f\" stroke=\"%s\" "
        "stroke-width=\"2\" stroke-dasharray=\"6,3\"><title>lower bound %s</title></line>\n"
        "<line id=\"mean\" x1=\"%d\" y1=\"%.2f\" x2=\"%d\" y2=\"%.2f\" stroke=\"%s\" "
        "stroke-width=\"1.5\"/>\n",
        g.left, loads_y(&g, bound_of(m)), width - g.right, loads_y(&g, bound_of(m)), LB_STROKE,
        fmt_value(buf, sizeof buf, bound_of(m), g.u), g.left, loads_y(&g, f->mean), width - g.right,
        loads_y(&g, f->mean), MEAN_STROKE);
    cz__strbuf_printf(b, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"black\"/>\n",
                      g.left, g.y0, width - g.right, g.y0);
    loads_x_axis(b, &g);
    cz__strbuf_printf(b, "</g>\n");
    *bottom = (int)(g.y0 + 36);
    return CZ_OK;
}

/* Panel (b), with a cluster only: the whole simulated step of the critical stage as its four
 * phases on one axis, so the drawn parts add up to the step in the title. Returns the bottom y;
 * *ux0 / *ux1 / *uy receive the update phase's extent and bottom (for the zoom into panel (c)). */
static int svg_phases(cz_strbuf *b, const cz_plan *plan, const cz_sim_result *sim, int width,
                      int top, double *ux0, double *ux1, int *uy)
{
    const int left = 150, right = 20, lane = 24;
    double plot_w = width - left - right, step = sim->step_s > 0 ? sim->step_s : 1.0;
    struct {
        const char *name, *fill;
        double v;
    } ph[4] = {
        {plan->settings.dp == CZ_DP_LAYERWISE ? "gradient all-reduce" : "gradient reduce-scatter",
         GRAD_FILL, sim->grad_sync_s},
        {"fragment gather", FRAG_FILL, sim->frag_gather_s},
        {"optimizer update", UPDATE_FILL, sim->local_s},
        {"parameter all-gather", PARAM_FILL, sim->param_sync_s},
    };
    char text[512] = "", label[128];
    cat(text, sizeof text, "(b) simulated step of stage %d: %.3f ms = ", sim->critical_stage,
        sim->step_s * 1e3);
    for (int i = 0, first = 1; i < 4; i++) {
        if (!(ph[i].v > 0) && i != 2)
            continue;
        cat(text, sizeof text, "%s%s %.3f", first ? "" : " + ", ph[i].name, ph[i].v * 1e3);
        first = 0;
    }
    cz__strbuf_printf(b, "<g id=\"step\">\n");
    top += panel_heading(b, top + 16, text, width);
    int y = top + 28;
    cz__strbuf_printf(
        b,
        "<text x=\"%d\" y=\"%d\" font-size=\"10\" text-anchor=\"end\">critical GPU</text>"
        "<text x=\"%d\" y=\"%d\" font-size=\"10\" text-anchor=\"end\">(stage %d, DP %d, TP "
        "%d)</text>\n",
        left - 4, y + 10, left - 4, y + 21, sim->critical_stage, sim->critical_dp,
        sim->critical_tp);
    /* Labels that do not fit their box go under the lane, each on the first of three rows
     * where it does not touch the previous label of that row. */
    double t = 0.0, row_end[3] = {-1e9, -1e9, -1e9};
    int rows_used = 0;
    for (int i = 0; i < 4; i++) {
        if (!(ph[i].v > 0))
            continue;
        double x = left + plot_w * t / step, w = plot_w * ph[i].v / step;
        int pct = (int)lround(100.0 * ph[i].v / step);
        if (i == 2) {
            *ux0 = x;
            *ux1 = x + w;
            *uy = y + lane;
        }
        cz__strbuf_printf(
            b,
            "<rect class=\"phase\" data-seconds=\"%.9g\" x=\"%.2f\" y=\"%d\" width=\"%.2f\" "
            "height=\"%d\" fill=\"%s\"%s><title>%s: %.3f ms (%d%% of the step)</title>"
            "</rect>\n",
            ph[i].v, x, y, fmax(w, 0.5), lane, ph[i].fill,
            i == 2 ? " stroke=\"#000000\" stroke-width=\"1\"" : "", ph[i].name, ph[i].v * 1e3, pct);
        snprintf(label, sizeof label, "%s %.1f ms (%d%%)", ph[i].name, ph[i].v * 1e3, pct);
        if (text_w(strlen(label), 11) + 6 > w)
            snprintf(label, sizeof label, "%s %.1f ms", ph[i].name, ph[i].v * 1e3);
        if (text_w(strlen(label), 11) + 6 <= w) {
            cz__strbuf_printf(b,
                              "<text class=\"phase-label\" x=\"%.2f\" y=\"%d\" font-size=\"11\" "
                              "text-anchor=\"middle\">%s</text>\n",
                              x + w / 2, y + 16, label);
        } else {
            snprintf(label, sizeof label, "%s %.1f ms (%d%%)", ph[i].name, ph[i].v * 1e3, pct);
            double lw = text_w(strlen(label), 10);
            double lx = fmax(10.0, fmin(x + w / 2 - lw / 2, width - right - lw));
            int row = 0;
            while (row < 2 && lx < row_end[row] + 8)
                row++;
            rows_used = rows_used > row + 1 ? rows_used : row + 1;
            cz__strbuf_printf(
                b,
                "<text class=\"phase-label\" x=\"%.2f\" y=\"%d\" font-size=\"10\">%s</text>"
                "\n",
                lx, y + lane + 12 + 12 * row, label);
            row_end[row] = lx + lw;
        }
        t += ph[i].v;
    }
    int y_axis = y + lane + 8 + 12 * rows_used;
    axis_ticks(b, left, plot_w, y_axis, step, CZ_UNIT_TIME);
    cz__strbuf_printf(b, "</g>\n");
    return y_axis + 22;
}

/* A task's load on each slot it occupies: a block or cooperative task its own cost. */
static double group_task_cost(const cz_plan *plan, const cz_plan_group *grp, int i)
{
    if (grp->task_cost && (cz_group_task_block(grp, i) >= 0 || cz_group_task_width(grp, i) > 1))
        return grp->task_cost[i];
    return plan->params[grp->task_param[i]].cost;
}

/* A task's short name: the parameter's, "[b]" for block b, " xk" for a cooperative task. */
static const char *task_short_name(char *buf, size_t n, const cz_plan *plan,
                                   const cz_plan_group *grp, int i)
{
    char name[96];
    int block = cz_group_task_block(grp, i), width = cz_group_task_width(grp, i);
    short_name(name, sizeof name, &plan->params[grp->task_param[i]]);
    snprintf(buf, n, "%s", name);
    if (block >= 0)
        cat(buf, n, "[%d]", block);
    if (width > 1)
        cat(buf, n, " x%d", width);
    return buf;
}

/* The label of one compute box: the largest task it runs and how many more (a cooperative
 * task counts on every slot it spans; a block task is named name[b]). */
static void cell_tasks(cz_strbuf *b, char *label, size_t n, const cz_plan *plan,
                       const cz_plan_group *grp, int t)
{
    int best = -1, count = 0;
    double best_cost = 0.0;
    char name[128];
    label[0] = '\0';
    for (int i = 0; grp && i < grp->ntasks; i++) {
        int pid = grp->task_param[i], slot = grp->task_slot[i];
        int width = cz_group_task_width(grp, i), block = cz_group_task_block(grp, i);
        if ((grp->nslots > 1 && (t < slot || t >= slot + width)) || pid < 0 ||
            (size_t)pid >= plan->nparams)
            continue;
        if (b && count < 12) {
            cz__strbuf_printf(b, "%s", count ? ", " : "; tasks: ");
            put_escaped(b, plan->params[pid].def.name);
            if (block >= 0)
                cz__strbuf_printf(b, "[%d]", block);
            if (width > 1) {
                int panels = cz_group_task_panels(grp, i);
                cz__strbuf_printf(b, " (cooperative on TP %d-%d, %d Gram panel%s)", slot,
                                  slot + width - 1, panels, panels == 1 ? "" : "s");
            }
        }
        count++;
        double c = group_task_cost(plan, grp, i);
        if (best < 0 || c > best_cost)
            best = i, best_cost = c;
    }
    if (b && count > 12)
        cz__strbuf_printf(b, ", ... (%d in all)", count);
    if (best >= 0)
        snprintf(label, n, count > 1 ? "%s +%d" : "%s",
                 task_short_name(name, sizeof name, plan, grp, best), count - 1);
}

/* The cooperative tasks of the timeline's DP rank, each one box across the compute lanes of
 * its k TP ranks (y0: the first compute lane's top, lane: its pitch); its red end is the time
 * its members wait on the all-reduces that the computation does not hide. */
static void timeline_coop(cz_strbuf *b, const cz_plan *plan, const cz_sim_result *sim,
                          const cz_rank_schedule *sc, int left, double plot_w, double top_val,
                          int y0, int lane, int h, cz_cost_unit u)
{
    char buf[64], buf2[64], name[160];
    for (int i = 0; i < sim->tl_ncoop; i++) {
        const cz_sim_coop *k = &sim->tl_coop[i];
        const cz_plan_group *grp =
            sc && k->group >= 0 && k->group < sc->ngroups ? &sc->groups[k->group] : NULL;
        if (!grp || k->task < 0 || k->task >= grp->ntasks || !(k->end > k->start))
            continue;
        double x = left + plot_w * k->start / top_val;
        double w = fmax(plot_w * (k->end - k->start) / top_val, 0.5);
        double war = fmin(plot_w * k->allreduce_s / top_val, w);
        int y = y0 + k->slot * lane, hh = (k->width - 1) * lane + h;
        task_short_name(name, sizeof name, plan, grp, k->task);
        cz__strbuf_printf(
            b,
            "<g class=\"coop\"><rect class=\"coop-task\" x=\"%.2f\" y=\"%d\" width=\"%.2f\" "
            "height=\"%d\" fill=\"%s\" stroke=\"%s\" "
            "stroke-width=\"1\"><title>group %d cooperative task ",
            x, y, w, hh, COOP_FILL, COOP_STROKE, k->group);
        put_escaped(b, plan->params[grp->task_param[k->task]].def.name);
        if (cz_group_task_block(grp, k->task) >= 0)
            cz__strbuf_printf(b, "[%d]", cz_group_task_block(grp, k->task));
        cz__strbuf_printf(
            b,
            " on TP %d-%d: %s, of which %s waiting on its Gram and norm all-reduces</title>"
            "</rect>\n",
            k->slot, k->slot + k->width - 1, fmt_value(buf, sizeof buf, k->end - k->start, u),
            fmt_value(buf2, sizeof buf2, k->allreduce_s, u));
        if (war > 0)
            cz__strbuf_printf(b,
                              "<rect class=\"coop-allreduce\" x=\"%.2f\" y=\"%d\" width=\"%.2f\" "
                              "height=\"%d\" fill=\"%s\"/>\n",
                              x + w - war, y, war, hh, COOP_AR_FILL);
        if (text_w(strlen(name), 8) + 3 <= w - war) {
            cz__strbuf_printf(b, "<text class=\"task-label\" x=\"%.2f\" y=\"%d\" font-size=\"8\">",
                              x + 1.5, y + hh / 2 + 3);
            put_escaped(b, name);
            cz__strbuf_printf(b, "</text>\n");
        }
        cz__strbuf_printf(b, "</g>\n");
    }
}

/* The lanes of panel (c) from y down: the TP group's shared gather lane, one compute lane per TP
 * rank (its elementwise work, then its boxes labelled with their largest task), the scatter
 * lane; returns the y below them. x maps times to pixels as XT: left + plot_w * t / top_val. */
static int timeline_lanes(cz_strbuf *b, const cz_plan *plan, const cz_sim_result *sim,
                          const cz_rank_schedule *sc, int left, double plot_w, double top_val,
                          int y, int end_tp, cz_cost_unit u)
{
    const int clane = 14, slane = 9;
    int R = sim->tl_tp, G = sim->tl_groups;
    char buf[64], label[128];
#define XT(v) (left + plot_w * (v) / top_val)
    for (int lane_i = 0; lane_i < R + 2; lane_i++) {
        int is_gather = lane_i == 0, is_scatter = lane_i == R + 1, t = lane_i - 1;
        int h = is_gather || is_scatter ? slane : clane;
        const char *bold = !is_gather && !is_scatter && t == end_tp ? " font-weight=\"bold\"" : "";
        if (is_gather || is_scatter)
            cz__strbuf_printf(b,
                              "<text x=\"%d\" y=\"%d\" font-size=\"9\" text-anchor=\"end\">TP %s"
                              "</text>\n",
                              left - 4, y + h - 1, is_gather ? "gather" : "scatter");
        else
            cz__strbuf_printf(
                b,
                "<text x=\"%d\" y=\"%d\" font-size=\"10\" text-anchor=\"end\"%s>TP %d "
                "compute%s</text>\n",
                left - 4, y + h - 3, bold, t, t == end_tp ? " (last)" : "");
        if (!is_gather && !is_scatter && sim->tl_elementwise[t] > 0)
            cz__strbuf_printf(
                b,
                "<rect class=\"elementwise\" x=\"%d\" y=\"%d\" width=\"%.2f\" height=\"%d\" "
                "fill=\"%s\"><title>elementwise (AdamW) %s</title></rect>\n",
                left, y, plot_w * sim->tl_elementwise[t] / top_val, h, ELEM_FILL,
                fmt_value(buf, sizeof buf, sim->tl_elementwise[t], u));
        for (int g = 0; g < G; g++) {
            cz_sim_span sp = is_gather    ? sim->tl_gather[g]
                             : is_scatter ? sim->tl_scatter[g]
                                          : sim->tl_compute[(size_t)g * R + t];
            if (!(sp.end > sp.start))
                continue;
            double x = XT(sp.start), w = fmax(plot_w * (sp.end - sp.start) / top_val, 0.5);
            const char *cls = is_gather ? "gather" : is_scatter ? "scatter" : "compute";
            const char *fill = is_gather    ? GATHER_FILL
                               : is_scatter ? SCATTER_FILL
                                            : compute_fill[g % 2];
            cz__strbuf_printf(b,
                              "<rect class=\"%s\" x=\"%.2f\" y=\"%d\" width=\"%.2f\" height=\"%d\" "
                              "fill=\"%s\"><title>group %d %s",
                              cls, x, y, w, h, fill, g, cls);
            if (!is_gather && !is_scatter)
                cz__strbuf_printf(b, ", TP %d", t);
            cz__strbuf_printf(b, ": %s", fmt_value(buf, sizeof buf, sp.end - sp.start, u));
            label[0] = '\0';
            if (!is_gather && !is_scatter)
                cell_tasks(b, label, sizeof label, plan, sc ? &sc->groups[g] : NULL, t);
            cz__strbuf_printf(b, "</title></rect>\n");
            if (is_gather || is_scatter)
                continue;
            if (!label[0] || text_w(strlen(label), 8) + 3 > w) {
                snprintf(label, sizeof label, "g%d", g);
                if (text_w(strlen(label), 8) + 3 > w)
                    continue;
            }
            cz__strbuf_printf(b, "<text class=\"task-label\" x=\"%.2f\" y=\"%d\" font-size=\"8\">",
                              x + 1.5, y + h - 4);
            put_escaped(b, label);
            cz__strbuf_printf(b, "</text>\n");
        }
        y += h + 3;
    }
#undef XT
    return y;
}

/* Panel (c): the optimizer update of the DP rank that finishes last: the shared gather and
 * scatter lanes of its TP group and one compute lane per TP rank, boxes labelled with their
 * largest task; the lower bound and the end of the update as vertical lines. */
static int svg_timeline(cz_strbuf *b, const cz_plan *plan, const cz_sim_result *sim,
                        const cz_svg_options *o, const render_facts *f, int width, int top,
                        const char *panel)
{
    const int left = 150, right = 20, clane = 14, slane = 9;
    int R = sim->tl_tp, G = sim->tl_groups;
    double plot_w = width - left - right;
    double end = 0.0;
    int end_tp = sim->critical_tp;
    for (int t = 0; t < R; t++)
        end = fmax(end, sim->tl_elementwise[t]);
    for (int g = 0; g < G; g++) {
        end = fmax(end, fmax(sim->tl_gather[g].end, sim->tl_scatter[g].end));
        for (int t = 0; t < R; t++)
            end = fmax(end, sim->tl_compute[(size_t)g * R + t].end);
    }
    double top_val = nice_ceiling(fmax(end, f->tl_lb) * 1.02);
    cz_cost_unit u = o->sim_in_seconds ? CZ_UNIT_TIME : plan->settings.unit;
    char buf[64], label[128];
    int r = sim->critical_stage * plan->dp + sim->critical_dp;
    const cz_rank_schedule *sc =
        r >= 0 && (size_t)r < plan->nschedules && plan->schedules[r].ngroups == G
            ? &plan->schedules[r]
            : NULL;
    char text[512] = "";
    cat(text, sizeof text,
        "%s optimizer update of DP rank %d (stage %d), the rank that finishes last", panel,
        sim->critical_dp, sim->critical_stage);
    if (f->ties > 1)
        cat(text, sizeof text, " (%d of %d ranks are within 0.5%% of its compute)", f->ties,
            plan->dp);
    cat(text, sizeof text, ": %s, %d micro-group%s",
        sim->pipelined ? "asynchronous pipeline" : "synchronous compute", G, G == 1 ? "" : "s");
    if (o->sim_in_seconds)
        cat(text, sizeof text, "; the optimizer update of (b) enlarged");
    cz__strbuf_printf(b, "<g id=\"timeline\">\n");
    top += panel_heading(b, top + 16, text, width);
    double lx = 10;
    int ly = top + 34, lmax = width - right;
    legend_item(b, &lx, &ly, lmax, GATHER_FILL, NULL, 0, "gather all-to-all");
    legend_item(b, &lx, &ly, lmax, compute_fill[0], NULL, 0, "compute, even group");
    legend_item(b, &lx, &ly, lmax, compute_fill[1], NULL, 0, "compute, odd group");
    legend_item(b, &lx, &ly, lmax, SCATTER_FILL, NULL, 0, "scatter all-to-all");
    legend_item(b, &lx, &ly, lmax, ELEM_FILL, NULL, 0, "elementwise (AdamW)");
    if (sim->tl_ncoop > 0) {
        legend_item(b, &lx, &ly, lmax, COOP_FILL, NULL, 0,
                    "cooperative task (one box across its TP ranks)");
        legend_item(b, &lx, &ly, lmax, COOP_AR_FILL, NULL, 0,
                    "its exposed Gram and norm all-reduces");
    }
    int y = ly + 18;
#define XT(v) (left + plot_w * (v) / top_val)
    /* Vertical guides first, so the boxes draw over them. */
    int lanes_h = 2 * (slane + 3) + R * (clane + 3);
    double xe = XT(end), xl = XT(f->tl_lb);
    if (f->tl_lb > 0) {
        snprintf(label, sizeof label, "%slower bound %s", f->tl_lb_estimated ? "~ " : "",
                 fmt_value(buf, sizeof buf, f->tl_lb, u));
        cz__strbuf_printf(
            b,
            "<line id=\"timeline-lower-bound\" x1=\"%.2f\" y1=\"%d\" x2=\"%.2f\" y2=\"%d\" "
            "stroke=\"%s\" stroke-width=\"2\" stroke-dasharray=\"6,3\"/>"
            "<text class=\"guide-label\" x=\"%.2f\" y=\"%d\" font-size=\"10\" fill=\"%s\" "
            "text-anchor=\"end\">%s</text>\n",
            xl, y - 2, xl, y + lanes_h + 2, LB_STROKE, xl - 3, y + lanes_h + 13, LB_STROKE, label);
    }
    snprintf(label, sizeof label, "update ends %s (TP %d)", fmt_value(buf, sizeof buf, end, u),
             end_tp);
    double lw = text_w(strlen(label), 10);
    cz__strbuf_printf(b,
                      "<line id=\"update-end\" x1=\"%.2f\" y1=\"%d\" x2=\"%.2f\" y2=\"%d\" "
                      "stroke=\"#000000\" stroke-width=\"1.5\"/>"
                      "<text class=\"guide-label\" x=\"%.2f\" y=\"%d\" font-size=\"10\" "
                      "font-weight=\"bold\">%s</text>\n",
                      xe, y - 2, xe, y + lanes_h + 2, fmin(xe + 3, width - right - lw),
                      y + lanes_h + (f->tl_lb > 0 && fabs(xe - xl) < lw + 10 ? 25 : 13), label);
    /* Lanes: the TP group's shared gather lane, one compute lane per TP rank, the scatter. */
    int first_compute_y = y + slane + 3;
    y = timeline_lanes(b, plan, sim, sc, left, plot_w, top_val, y, end_tp, u);
    timeline_coop(b, plan, sim, sc, left, plot_w, top_val, first_compute_y, clane + 3, clane, u);
#undef XT
    int y_axis = y + 30;
    axis_ticks(b, left, plot_w, y_axis, top_val, u);
    snprintf(text, sizeof text,
             "%s after the gradients are synchronized; boxes name their largest task (+ how many "
             "more)%s",
             o->sim_in_seconds ? "simulated time" : "cost-proportional time",
             o->sim_in_seconds ? ""
                               : ". No cluster given: the gradient and parameter synchronization "
                                 "over DP is not simulated (pass --cluster to see it)");
    y = note_below(b, left + plot_w / 2, y_axis + 30, text, width);
    cz__strbuf_printf(b, "</g>\n");
    return y + 6;
}

/* Panel (b) of a fully sharded plan: its busiest stage's micro-groups one after another, as
 * its makespan counts them. Every group's all-to-alls span the stage's schedule, so a group
 * lasts as long as its busiest slot; each bar is that, with the group's tasks and owners, and
 * the elementwise share of the busiest GPU follows. Returns the bottom y. */
static int svg_fsdp_groups(cz_strbuf *b, const cz_plan *plan, int width, int top)
{
    const int left = 150, right = 20, lane = 16;
    const cz_plan_metrics *m = &plan->metrics;
    int stage = 0;
    for (int s = 1; m->rank_makespan && s < plan->pp; s++)
        if (m->rank_makespan[(size_t)s * (size_t)plan->dp] >
            m->rank_makespan[(size_t)stage * (size_t)plan->dp])
            stage = s;
    if ((size_t)stage >= plan->nschedules)
        return top;
    const cz_rank_schedule *rs = &plan->schedules[stage];
    double span = m->rank_makespan ? m->rank_makespan[(size_t)stage * (size_t)plan->dp] : 0.0;
    double groups = 0.0; /* the groups' busiest slots, summed */
    double *max = calloc((size_t)rs->ngroups + 1, sizeof *max);
    if (!max)
        return top;
    for (int g = 0; g < rs->ngroups; g++) {
        for (int k = 0; rs->groups[g].load && k < rs->groups[g].nslots; k++)
            max[g] = fmax(max[g], rs->groups[g].load[k]);
        groups += max[g];
    }
    double top_val = nice_ceiling(fmax(span, groups) * 1.02), plot_w = width - left - right;
    cz_cost_unit u = plan->settings.unit;
    char text[512] = "", buf[64], label[160];
    cat(text, sizeof text,
        "(b) the micro-groups of stage %d over its %d GPUs: each waits for its busiest GPU (the "
        "all-to-alls span them all), so the makespan %s is their sum plus the busiest "
        "elementwise share",
        stage, cz_plan_fsdp_slots(plan), fmt_value(buf, sizeof buf, span, u));
    int y = text_wrapped(b, top + 18, 13, 1, NULL, text, width) + 4;
    double x = left;
    for (int g = 0; g < rs->ngroups; g++) {
        const cz_plan_group *gr = &rs->groups[g];
        int owners = 0;
        for (int k = 0; gr->load && k < gr->nslots; k++)
            owners += gr->load[k] > 0.0;
        double w = top_val > 0 ? plot_w * max[g] / top_val : 0.0;
        snprintf(label, sizeof label, "group %d: %d tasks on %d GPUs", gr->id, gr->ntasks, owners);
        cz__strbuf_printf(b, "<text x=\"%d\" y=\"%d\" font-size=\"11\" text-anchor=\"end\">",
                          left - 6, y + lane - 4);
        put_escaped(b, label);
        cz__strbuf_printf(b,
                          "</text>\n<rect x=\"%.2f\" y=\"%d\" width=\"%.2f\" height=\"%d\" "
                          "fill=\"%s\"><title>group %d: busiest GPU %s</title></rect>\n",
                          x, y, w, lane - 3, compute_fill[g % 2], gr->id,
                          fmt_value(buf, sizeof buf, max[g], u));
        x += w;
        y += lane;
    }
    double rest = span - groups;
    if (rest > 0 && top_val > 0) {
        cz__strbuf_printf(b,
                          "<text x=\"%d\" y=\"%d\" font-size=\"11\" text-anchor=\"end\">"
                          "elementwise</text>\n<rect x=\"%.2f\" y=\"%d\" width=\"%.2f\" "
                          "height=\"%d\" fill=\"%s\"><title>elementwise share %s</title></rect>\n",
                          left - 6, y + lane - 4, x, y, plot_w * rest / top_val, lane - 3,
                          rank_fill[1], fmt_value(buf, sizeof buf, rest, u));
        y += lane;
    }
    axis_ticks(b, left, plot_w, y + 4, top_val, u);
    free(max);
    return y + 36;
}

static int svg_body(cz_strbuf *b, const cz_plan *plan, const cz_sim_result *sim,
                    const cz_svg_options *opt, cz_error *err)
{
    cz_svg_options o = {0};
    if (opt)
        o = *opt;
    int width = o.width > 0 ? o.width : 1200;
    if (width < 400 || width > 20000)
        return cz__error_set(err, CZ_EINVALID, "width %d: expected 400 .. 20000 pixels", width);
    if (plan->dp < 1 || plan->tp < 1 || plan->pp < 1)
        return cz__error_set(err, CZ_EINVALID, "plan topology dp=%d tp=%d pp=%d: expected >= 1",
                             plan->dp, plan->tp, plan->pp);
    /* Body first (its height is known at the end), then the header in front of it. */
    cz_strbuf body = CZ_STRBUF_INIT;
    int rc = CZ_OK;
    render_facts f;
    facts_compute(&f, plan, sim, &o);
    if (cz_plan_has_experts(plan) && plan->metrics.gpu_load) {
        f.expert = malloc((size_t)f.ngpus * sizeof *f.expert);
        if (!f.expert) {
            rc = cz__error_set(err, CZ_ENOMEM, "out of memory rendering the plan");
            goto done;
        }
        if ((rc = cz__plan_expert_gpu_load(plan, f.expert, err)) != CZ_OK)
            goto done;
    }
    int height = svg_title(&body, plan, sim, &o, &f, width);
    if ((rc = svg_loads(&body, plan, &f, width, height - 4, &height, err)))
        goto done;
    if (cz_plan_is_fsdp(plan))
        height = svg_fsdp_groups(&body, plan, width, height + 6);
    if (sim && sim->tl_tp > 0) {
        const char *panel = "(b)";
        if (o.sim_in_seconds) {
            double ux0 = 0, ux1 = 0;
            int uy = 0;
            height = svg_phases(&body, plan, sim, width, height + 6, &ux0, &ux1, &uy);
            /* Zoom: the update phase widens into panel (c). */
            if (ux1 > ux0)
                cz__strbuf_printf(&body,
                                  "<path class=\"zoom\" d=\"M %.2f %d L 150 %d M %.2f %d L %d %d\" "
                                  "stroke=\"#999999\" stroke-dasharray=\"3,3\" fill=\"none\"/>\n",
                                  ux0, uy, height + 8, ux1, uy, width - 20, height + 8);
            panel = "(c)";
        }
        height = svg_timeline(&body, plan, sim, &o, &f, width, height + 6, panel);
    }
    height += 10;
    cz__strbuf_printf(b,
                      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
                      "viewBox=\"0 0 %d %d\" font-family=\"sans-serif\">\n"
                      "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
                      width, height, width, height);
    if (!body.failed && body.data)
        cz__strbuf_put(b, body.data, body.len);
    cz__strbuf_printf(b, "</svg>\n");
    if (body.failed || b->failed)
        rc = cz__error_set(err, CZ_ENOMEM, "out of memory rendering the plan");
done:
    free(f.expert);
    cz__strbuf_free(&body);
    return rc;
}

int cz__plan_render_svg(char **out, const cz_plan *plan, const cz_sim_result *sim,
                        const cz_svg_options *opt, cz_error *err)
{
    cz_strbuf b = CZ_STRBUF_INIT;
    *out = NULL;
    cz__strbuf_printf(&b, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    int rc = svg_body(&b, plan, sim, opt, err);
    if (rc) {
        cz__strbuf_free(&b);
        return rc;
    }
    *out = b.data;
    return CZ_OK;
}

static void html_tables(cz_strbuf *b, const cz_plan *plan, const cz_sim_result *sim,
                        const cz_svg_options *o, cz_costed *order)
{
    const cz_settings *s = &plan->settings;
    const cz_plan_metrics *m = &plan->metrics;
    cz_cost_unit u = s->unit;
    char buf[64];
    cz__strbuf_printf(b, "<h2>Settings</h2>\n<table>\n");
    cz__strbuf_printf(b, "<tr><th>model</th><td>");
    put_escaped(b, plan->model_name);
    cz__strbuf_printf(b, "</td></tr>\n<tr><th>cluster</th><td>");
    put_escaped(b, o->cluster_name ? o->cluster_name : plan->cluster_name);
    cz__strbuf_printf(b, "</td></tr>\n<tr><th>topology</th><td>DP %d x TP %d x PP %d</td></tr>\n",
                      plan->dp, plan->tp, plan->pp);
    cz__strbuf_printf(
        b,
        "<tr><th>optimizer</th><td>%s</td></tr>\n<tr><th>cost unit</th><td>%s</td></tr>\n"
        "<tr><th>DP strategy</th><td>%s (alpha %g)%s</td></tr>\n"
        "<tr><th>TP strategy</th><td>%s, capacity %s</td></tr>\n"
        "<tr><th>solver</th><td>%s</td></tr>\n",
        cz_optimizer_name(s->optimizer), cz_unit_name(u), cz_dp_strategy_name(s->dp), s->alpha,
        plan->dp_fell_back ? ", fell back to anchored" : "", cz_tp_strategy_name(s->tp),
        fmt_value(buf, sizeof buf, plan->capacity_used, u), cz_solver_name(s->solver));
    if (s->layout == CZ_LAYOUT_SPLIT)
        cz__strbuf_printf(b,
                          "<tr><th>buffer layout</th><td>split: matrix parameters in a buffer of "
                          "their own, elementwise parameters evenly sliced over DP</td></tr>\n");
    if (cz_plan_is_fsdp(plan))
        cz__strbuf_printf(
            b,
            "<tr><th>buffer layout</th><td>fsdp: every parameter Shard(0) over %d "
            "%s ranks, each matrix owned by one of %d GPUs%s%s</td></tr>\n",
            cz_plan_fsdp_shard(plan), cz_plan_fsdp_replicas(plan) > 1 ? "shard" : "DP",
            cz_plan_fsdp_slots(plan), cz_plan_fsdp_replicas(plan) > 1 ? "; HSDP, " : "",
            cz_plan_fsdp_replicas(plan) > 1 ? cz_hsdp_compute_name(plan->settings.hsdp) : "");
    if (o->fsdp)
        cz__strbuf_printf(b,
                          "<tr><th>simulated step</th><td>%.4f ms (optimizer %.4f ms)</td></tr>\n",
                          o->fsdp->step_s * 1e3, o->fsdp->opt_s * 1e3);
    cz__strbuf_printf(b,
                      "<tr><th>DP imbalance (max/mean)</th><td>%.4f</td></tr>\n"
                      "<tr><th>TP imbalance (max/mean)</th><td>%.4f</td></tr>\n",
                      m->dp_imbalance, m->tp_imbalance);
    cz__strbuf_printf(b, "<tr><th>TP makespan</th><td>%s</td></tr>\n",
                      fmt_value(buf, sizeof buf, m->tp_makespan, u));
    cz__strbuf_printf(b, "<tr><th>lower bound</th><td>%s</td></tr>\n",
                      fmt_value(buf, sizeof buf, bound_of(m), u));
    if (sim && o->sim_in_seconds)
        cz__strbuf_printf(
            b,
            "<tr><th>simulated step</th><td>%.4f ms (optimizer %.4f ms, communication "
            "%.4f ms)</td></tr>\n",
            sim->step_s * 1e3, sim->optimizer_s * 1e3, sim->comm_s * 1e3);
    cz__strbuf_printf(
        b, "</table>\n<h2>Per-rank loads</h2>\n<table>\n<tr><th>stage</th><th>DP rank</th>"
           "<th>DP load</th><th>TP makespan</th><th>groups</th><th>busiest GPU</th>"
           "<th>state memory (max GPU)</th></tr>\n");
    for (int r = 0; r < plan->pp * plan->dp; r++) {
        /* A fully sharded plan's groups are its stage's. */
        size_t k = cz_plan_is_fsdp(plan) ? (size_t)(r / plan->dp) : (size_t)r;
        int groups = k < plan->nschedules ? plan->schedules[k].ngroups : 0;
        double busiest = 0.0, mem = 0.0;
        for (int t = 0; t < plan->tp; t++) {
            if (m->gpu_load)
                busiest = fmax(busiest, m->gpu_load[r * plan->tp + t]);
            if (m->memory)
                mem = fmax(mem, m->memory[r * plan->tp + t]);
        }
        cz__strbuf_printf(b, "<tr><td>%d</td><td>%d</td>", r / plan->dp, r % plan->dp);
        cz__strbuf_printf(b, "<td>%s</td>",
                          fmt_value(buf, sizeof buf, m->dp_load ? m->dp_load[r] : 0, u));
        cz__strbuf_printf(
            b, "<td>%s</td>",
            fmt_value(buf, sizeof buf, m->rank_makespan ? m->rank_makespan[r] : 0, u));
        cz__strbuf_printf(b, "<td>%d</td><td>%s</td><td>%.3f GiB</td></tr>\n", groups,
                          fmt_value(buf, sizeof buf, busiest, u), mem / 1073741824.0);
    }
    if (cz_plan_has_experts(plan)) {
        cz__strbuf_printf(b,
                          "</table>\n<h2>Expert ranks (EP %d x ETP %d x expert-DP %d per stage, "
                          "expert imbalance %.4f)</h2>\n<table>\n<tr><th>stage</th><th>EP "
                          "rank</th><th>expert-DP rank</th><th>expert load</th><th>ETP "
                          "makespan</th><th>groups</th></tr>\n",
                          plan->ep, plan->etp, plan->edp, m->expert_imbalance);
        for (size_t x = 0; x < plan->nexpert_schedules; x++) {
            const cz_rank_schedule *rs = &plan->expert_schedules[x];
            cz__strbuf_printf(b, "<tr><td>%d</td><td>%d</td><td>%d</td>", rs->stage, rs->ep_rank,
                              rs->dp_rank);
            cz__strbuf_printf(
                b, "<td>%s</td>",
                fmt_value(buf, sizeof buf, m->expert_load ? m->expert_load[x] : 0, u));
            cz__strbuf_printf(b, "<td>%s</td><td>%d</td></tr>\n",
                              fmt_value(buf, sizeof buf,
                                        m->expert_rank_makespan ? m->expert_rank_makespan[x] : 0,
                                        u),
                              rs->ngroups);
        }
    }
    cz__strbuf_printf(
        b, "</table>\n<h2>Costliest parameters</h2>\n<table>\n<tr><th>#</th><th>name</th>"
           "<th>shape</th><th>kind</th><th>cost</th><th>DP owner</th></tr>\n");
    for (size_t i = 0; i < plan->nparams; i++)
        order[i] = (cz_costed){(int)i, plan->params[i].cost};
    cz__costed_sort(order, plan->nparams);
    size_t shown = plan->nparams < 20 ? plan->nparams : 20;
    for (size_t i = 0; i < shown; i++) {
        const cz_plan_param *p = &plan->params[order[i].id];
        cz__strbuf_printf(b, "<tr><td>%d</td><td>", p->id);
        put_escaped(b, p->def.name);
        if (p->def.ndim == 2)
            cz__strbuf_printf(b, "</td><td>%lld x %lld</td>", (long long)p->def.shape[0],
                              (long long)p->def.shape[1]);
        else
            cz__strbuf_printf(b, "</td><td>%lld</td>", (long long)p->def.shape[0]);
        cz__strbuf_printf(b, "<td>%s</td><td>%s</td><td>%d</td></tr>\n", cz__kind_name(p->def.kind),
                          fmt_value(buf, sizeof buf, p->cost, u), p->dp_owner);
    }
    cz__strbuf_printf(b, "</table>\n");
}

int cz__plan_render_html(char **out, const cz_plan *plan, const cz_sim_result *sim,
                         const cz_svg_options *opt, cz_error *err)
{
    cz_strbuf b = CZ_STRBUF_INIT;
    cz_svg_options o = {0};
    int rc = CZ_OK;
    size_t n = plan->nparams ? plan->nparams : 1;
    cz_costed *order = malloc(n * sizeof *order);
    *out = NULL;
    if (opt)
        o = *opt;
    if (!order) {
        rc = cz__error_set(err, CZ_ENOMEM, "out of memory rendering the plan");
        goto done;
    }
    cz__strbuf_printf(&b, "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\"/>\n"
                          "<title>canzona plan: ");
    put_escaped(&b, plan->model_name);
    cz__strbuf_printf(&b, " on ");
    put_escaped(&b, o.cluster_name ? o.cluster_name : plan->cluster_name);
    cz__strbuf_printf(&b,
                      "</title>\n<style>\nbody { font-family: sans-serif; margin: 1em; }\n"
                      "table { border-collapse: collapse; margin-bottom: 1em; }\n"
                      "td, th { border: 1px solid #cccccc; padding: 2px 8px; text-align: left; }\n"
                      "</style>\n</head>\n<body>\n<h1>canzona plan: ");
    put_escaped(&b, plan->model_name);
    cz__strbuf_printf(&b, "</h1>\n");
    if ((rc = svg_body(&b, plan, sim, &o, err)))
        goto done;
    html_tables(&b, plan, sim, &o, order);
    cz__strbuf_printf(&b, "</body>\n</html>\n");
    if (b.failed) {
        rc = cz__error_set(err, CZ_ENOMEM, "out of memory rendering the plan");
        goto done;
    }
    *out = b.data;
    b.data = NULL;
done:
    cz__strbuf_free(&b);
    free(order);
    return rc;
}
