/* Newton-Schulz coefficient sets for Muon's orthogonalization: the named ones and tables read
 * from text (docs/EXECUTOR.md, "Newton-Schulz coefficients"). Here in the format layer because
 * the planner prices as many iterations as the set implies and plan files record the set. */
#include "cz_format.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Polar Express (Amsel, Persson, Musco, Gower, arXiv 2505.16932, Algorithm 1): the degree-5
 * polynomials p_t(x) = a x + b x^3 + c x^5 whose composition is the worst-case optimal
 * approximation of 1 on [l, 1], l = 1e-3, one per iteration. The paper lists 8 rows; the
 * bundled set is its first 5 (its 5-iteration schedule). Algorithm 1 replaces every row but the
 * last of the 8 by p(x / 1.01) (a / 1.01, b / 1.01^3, c / 1.01^5: a safety margin for rounding)
 * and normalizes X by 1.01 ||X||_F + 1e-7. We normalize by ||X||_F + eps like every set, so the
 * normalization's extra 1 / 1.01 is folded into the first row (x / 1.01 once more), which
 * gives Algorithm 1's iterates up to the eps term. */
#define PE_SAFE(a, b, c)                                                                           \
    {(a) / 1.01, (b) / (1.01 * 1.01 * 1.01), (c) / (1.01 * 1.01 * 1.01 * 1.01 * 1.01)}
#define PE_FIRST(a, b, c)                                                                          \
    PE_SAFE((a) / 1.01, (b) / (1.01 * 1.01 * 1.01), (c) / (1.01 * 1.01 * 1.01 * 1.01 * 1.01))

/* "jordan": the quintic of Keller Jordan's Muon (a, b, c) = (3.4445, -4.7750, 2.0315), which
 * pushes singular values into roughly [0.7, 1.2] in 5 steps. "cubic": the classic Newton-Schulz
 * iteration X = 1.5 X - 0.5 X X^T X (b = -0.5, c = 0), which converges to exactly 1 but needs
 * more steps from small singular values. Both repeat their one triple every iteration. */
static const cz_ns_coeffs cz_ns_table[] = {
    {"jordan", 1, {{3.4445, -4.7750, 2.0315}}},
    {"cubic", 1, {{1.5, -0.5, 0.0}}},
    {"polar_express",
     5,
     {PE_FIRST(8.28721201814563, -23.595886519098837, 17.300387312530933),
      PE_SAFE(4.107059111542203, -2.9478499167379106, 0.5448431082926601),
      PE_SAFE(3.9486908534822946, -2.908902115962949, 0.5518191394370137),
      PE_SAFE(3.3184196573706015, -2.488488024314874, 0.51004894012372),
      PE_SAFE(2.300652019954817, -1.6689039845747493, 0.4188073119525673)}},
};

const cz_ns_coeffs *cz__ns_coeffs_find(const char *name)
{
    if (!name)
        return &cz_ns_table[0];
    for (size_t i = 0; i < sizeof cz_ns_table / sizeof cz_ns_table[0]; i++)
        if (strcmp(cz_ns_table[i].name, name) == 0)
            return &cz_ns_table[i];
    return NULL;
}

const char *cz__ns_coeffs_names(void)
{
    return "jordan, cubic, polar_express";
}

static const char *skip_space(const char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    return s;
}

/* One finite number at *s, then the separator sep (or, for the last of a row, ';' or the end). */
static int read_number(const char **s, double *out, int row, int col, const char *text,
                       cz_error *err)
{
    const char *p = skip_space(*s);
    char *end = NULL;
    errno = 0;
    double v = strtod(p, &end);
    if (end == p || errno == ERANGE || !isfinite(v))
        return cz__error_set(err, CZ_EINVALID,
                             "Newton-Schulz coefficients '%s': row %d, entry %d is not a finite "
                             "number; expected a name (%s) or rows 'a,b,c' separated by ';'",
                             text, row + 1, col + 1, cz__ns_coeffs_names());
    *out = v;
    *s = skip_space(end);
    return CZ_OK;
}

int cz__ns_coeffs_parse(const char *text, cz_ns_coeffs *out, cz_error *err)
{
    const cz_ns_coeffs *named = cz__ns_coeffs_find(text);
    if (named) {
        *out = *named;
        return CZ_OK;
    }
    *out = (cz_ns_coeffs){0};
    const char *s = skip_space(text);
    if (!*s || isalpha((unsigned char)*s))
        return cz__error_set(err, CZ_EINVALID,
                             "unknown Newton-Schulz coefficient set '%s' (known: %s; or a table "
                             "of rows 'a,b,c' separated by ';', one row per iteration)",
                             text, cz__ns_coeffs_names());
    for (;;) {
        if (out->rows == CZ_NS_MAX_ROWS)
            return cz__error_set(err, CZ_EINVALID,
                                 "Newton-Schulz coefficients '%.60s...': more than %d rows; "
                                 "expected at most %d (one per iteration)",
                                 text, CZ_NS_MAX_ROWS, CZ_NS_MAX_ROWS);
        cz_ns_triple *t = &out->row[out->rows];
        double *v[3] = {&t->a, &t->b, &t->c};
        for (int j = 0; j < 3; j++) {
            int rc = read_number(&s, v[j], out->rows, j, text, err);
            if (rc != CZ_OK)
                return rc;
            if (j < 2 && *s++ != ',')
                return cz__error_set(err, CZ_EINVALID,
                                     "Newton-Schulz coefficients '%s': row %d has fewer than 3 "
                                     "numbers; expected 'a,b,c'",
                                     text, out->rows + 1);
        }
        out->rows++;
        if (!*s)
            return CZ_OK;
        if (*s++ != ';')
            return cz__error_set(err, CZ_EINVALID,
                                 "Newton-Schulz coefficients '%s': row %d has more than 3 "
                                 "numbers or an unexpected character; expected 'a,b,c' rows "
                                 "separated by ';'",
                                 text, out->rows);
        s = skip_space(s);
        if (!*s) /* a trailing ';' ends the table */
            return CZ_OK;
    }
}

int cz__ns_coeffs_check_steps(const cz_ns_coeffs *k, int ns_steps, const char *text, cz_error *err)
{
    if (ns_steps < 0 || ns_steps > CZ_NS_MAX_STEPS)
        return cz__error_set(err, CZ_EINVALID, "ns_steps = %d; expected 0..%d", ns_steps,
                             CZ_NS_MAX_STEPS);
    if (k->rows > 1 && ns_steps != k->rows)
        return cz__error_set(err, CZ_EINVALID,
                             "ns_steps = %d, but the Newton-Schulz coefficient table '%.60s' has "
                             "%d rows, one per iteration; set ns_steps to %d (or leave it unset "
                             "where the interface allows) or give a single triple",
                             ns_steps, text ? text : "", k->rows, k->rows);
    return CZ_OK;
}

void cz__ns_coeffs_format(const cz_ns_coeffs *k, char *buf)
{
    size_t at = 0;
    if (k->name) {
        snprintf(buf, CZ_NS_TEXT_MAX, "%s", k->name);
        return;
    }
    buf[0] = '\0';
    for (int i = 0; i < k->rows; i++)
        at += (size_t)snprintf(buf + at, CZ_NS_TEXT_MAX - at, "%s%.17g,%.17g,%.17g", i ? ";" : "",
                               k->row[i].a, k->row[i].b, k->row[i].c);
}
