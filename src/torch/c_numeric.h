/*
 * The fraction of COOP_ALLOC_CONF read and written in the "C" locale,
 * whatever the host program set with setlocale: strtod and printf follow
 * LC_NUMERIC, so in a locale whose decimal point is ',' (de_DE) strtod
 * stopped at the '.' of "fraction:0.25" (the key was refused) and
 * coop_torch_normalize_conf wrote "fraction:0,25", whose comma splits the
 * key:value list. uselocale changes the calling thread's locale only, so
 * other threads keep theirs while the number is converted. newlocale of
 * "C" returns glibc's static C locale; where it could fail, the conversion
 * happens in the thread's locale, as it did before.
 */
#ifndef COOP_TORCH_C_NUMERIC_H
#define COOP_TORCH_C_NUMERIC_H

#include <locale.h>
#include <stdio.h>
#include <stdlib.h>

/* strtod in the "C" locale. */
static inline double c_numeric_strtod(const char *s, char **end)
{
    locale_t c = newlocale(LC_NUMERIC_MASK, "C", (locale_t)0);
    locale_t old = c ? uselocale(c) : (locale_t)0;
    double v = strtod(s, end);
    if (c) {
        uselocale(old);
        freelocale(c);
    }
    return v;
}

/* Longest text c_numeric_format_g writes for a double, NUL included
 * ("-2.2250738585072014e-308"). */
#define C_NUMERIC_G_MAX 25

/* snprintf(buf, size, "%s%.*g", prefix, digits, v) in the "C" locale, with
 * the fewest digits (6 or more, as %g's) that read back as v: %g's six
 * wrote 0.1234567 and 0.1234568 as the same 0.123457, so two
 * configurations compared as text (coop_torch_normalize_conf) were one,
 * and the text read back as another fraction. 17 always reads back. */
static inline void c_numeric_format_g(char *buf, size_t size, const char *prefix, double v)
{
    locale_t c = newlocale(LC_NUMERIC_MASK, "C", (locale_t)0);
    locale_t old = c ? uselocale(c) : (locale_t)0;
    char digits[C_NUMERIC_G_MAX];
    for (int precision = 6; precision <= 17; precision++) {
        snprintf(digits, sizeof digits, "%.*g", precision, v);
        if (strtod(digits, NULL) == v)
            break;
    }
    snprintf(buf, size, "%s%s", prefix, digits);
    if (c) {
        uselocale(old);
        freelocale(c);
    }
}

#endif
