/*
 * The benchmarks' median: of an even count, the mean of the two middle
 * values (the upper one alone leans the figure toward the slower batches).
 */
#ifndef COOP_CLI_BENCH_MEDIAN_H
#define COOP_CLI_BENCH_MEDIAN_H

#include <stddef.h>
#include <stdlib.h>

static inline int bench_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The median of v[0..n), n >= 1; sorts v. */
static inline double bench_median(double *v, size_t n)
{
    qsort(v, n, sizeof *v, bench_cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

#endif
