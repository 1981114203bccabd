/*
 * Slot packing: one task onto the TP slots of a rank, the model shared by the slot-fill DP
 * partition (dp_fill.c) and the packed TP schedule (microgroups.c).
 *
 * A task of width k occupies an aligned run of k slots (j k .. j k + k - 1) and starts when the
 * run's busiest slot is free, so it tops every slot of the run at base + its per-slot cost. Among
 * the widths and runs that stay within the target T it takes the one spending the least slot
 * time, counting as spent the gap it leaves under itself on the run's less loaded slots: a
 * split that strands idle time is no cheaper than one that does not. Ties go to the fullest run
 * that fits (best fit keeps the emptier runs whole for larger tasks), then to the first.
 */
#include "cz_algorithms.h"

#include <math.h>

bool cz__slot_place(const cz_task_table *tt, int nslots, double *load, const double *cw, double T,
                    int *width, int *slot)
{
    double best = INFINITY, best_base = -1.0;
    int bw = -1, bs = -1;
    for (int w = 0; w < tt->nwidths; w++) {
        int k = tt->widths[w];
        double c = cw[w];
        if (!isfinite(c) || k > nslots)
            continue;
        for (int s = 0; s + k <= nslots; s += k) {
            double base = 0.0, gap = 0.0;
            for (int j = s; j < s + k; j++)
                base = load[j] > base ? load[j] : base;
            if (base + c > T)
                continue;
            for (int j = s; j < s + k; j++)
                gap += base - load[j];
            double score = k * c + gap;
            if (score < best * (1.0 - 1e-12) ||
                (score <= best * (1.0 + 1e-12) && base > best_base * (1.0 + 1e-12)))
                best = score, best_base = base, bw = w, bs = s;
        }
    }
    if (bw < 0)
        return false;
    int k = tt->widths[bw];
    for (int j = bs; j < bs + k; j++)
        load[j] = best_base + cw[bw];
    *width = bw;
    *slot = bs;
    return true;
}
