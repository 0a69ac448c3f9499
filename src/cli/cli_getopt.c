/* getopt_long's failures, worded once: see cli_getopt.h. */
#include "cli/cli_getopt.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

/* Whether arg is a cluster of short options (-xyz) holding c. */
static bool short_cluster_has(const char *arg, int c)
{
    return arg && arg[0] == '-' && arg[1] && arg[1] != '-' && strchr(arg + 1, c);
}

/* Edit distance (insertions, deletions, substitutions) between a[0..n) and
 * b, or a large number for names longer than any option is. */
static size_t edit_distance(const char *a, size_t n, const char *b)
{
    enum { LONGEST = 64 };
    size_t m = strlen(b), row[LONGEST + 1];
    if (n > LONGEST || m > LONGEST)
        return (size_t)-1;
    for (size_t j = 0; j <= m; j++)
        row[j] = j;
    for (size_t i = 1; i <= n; i++) {
        size_t diagonal = row[0];
        row[0] = i;
        for (size_t j = 1; j <= m; j++) {
            size_t up = row[j];
            size_t best = diagonal + (a[i - 1] != b[j - 1]);
            best = up + 1 < best ? up + 1 : best;
            best = row[j - 1] + 1 < best ? row[j - 1] + 1 : best;
            row[j] = best;
            diagonal = up;
        }
    }
    return row[m];
}

/* A long option getopt refused: a value it takes none of, a prefix of
 * several, or no option at all (the nearest named when it is close). */
static void long_option_error(const char *prog, const char *arg, const struct option *longopts)
{
    const char *name = arg + 2, *eq = strchr(name, '=');
    size_t n = eq ? (size_t)(eq - name) : strlen(name);
    size_t prefixed = 0;
    const struct option *match = NULL;
    for (const struct option *o = longopts; o && o->name; o++)
        if (!strncmp(o->name, name, n)) {
            if (strlen(o->name) == n) { /* exact: no ambiguity */
                match = o;
                prefixed = 1;
                break;
            }
            match = prefixed++ ? match : o;
        }
    if (prefixed == 1 && eq && match->has_arg == no_argument) {
        fprintf(stderr, "%s: option '--%s' takes no value, got '%s'\n", prog, match->name, arg);
        return;
    }
    if (prefixed > 1) {
        fprintf(stderr, "%s: option '--%.*s' is ambiguous: ", prog, (int)n, name);
        size_t said = 0;
        for (const struct option *o = longopts; o->name; o++)
            if (!strncmp(o->name, name, n))
                fprintf(stderr, "%s--%s", said++ ? (said == prefixed ? " or " : ", ") : "",
                        o->name);
        fputc('\n', stderr);
        return;
    }
    /* a slip of a letter or two (but not a name of two letters, which
     * is as near to any short name) */
    const struct option *nearest = NULL;
    size_t best = n / 3 + 1 < 3 ? n / 3 + 1 : 3;
    for (const struct option *o = longopts; o && o->name; o++) {
        size_t d = edit_distance(name, n, o->name);
        if (d <= best && (!nearest || d < best)) {
            nearest = o;
            best = d;
        }
    }
    if (nearest)
        fprintf(stderr, "%s: unknown option '--%.*s'; did you mean '--%s'?\n", prog, (int)n, name,
                nearest->name);
    else
        fprintf(stderr, "%s: unknown option '%s'\n", prog, arg);
}

void cli_getopt_error(const char *prog, int result, char *const argv[],
                      const struct option *longopts)
{
    if (result == ':') {
        fprintf(stderr, "%s: %s needs a value\n", prog, argv[optind - 1]);
        return;
    }
    /* An unknown short option sits in a cluster: the argument getopt just
     * passed when it was the cluster's last letter, else the one it is
     * still in (argv[optind - 1] is then the argument before). Otherwise
     * the argument just passed is the long option at fault (unknown,
     * ambiguous, or given a value it does not take). */
    const char *arg = argv[optind - 1];
    if (optopt && (short_cluster_has(arg, optopt) ||
                   (argv[optind] && short_cluster_has(argv[optind], optopt))))
        fprintf(stderr, "%s: unknown option '-%c'\n", prog, optopt);
    else if (!strncmp(arg, "--", 2) && arg[2])
        long_option_error(prog, arg, longopts);
    else
        fprintf(stderr, "%s: unknown option '%s'\n", prog, arg);
}
