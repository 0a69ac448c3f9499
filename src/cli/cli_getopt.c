/* getopt_long's failures, worded once: see cli_getopt.h. */
#include "cli/cli_getopt.h"

#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

/* Whether arg is a cluster of short options (-xyz) holding c. */
static bool short_cluster_has(const char *arg, int c)
{
    return arg && arg[0] == '-' && arg[1] && arg[1] != '-' && strchr(arg + 1, c);
}

void cli_getopt_error(const char *prog, int result, char *const argv[])
{
    if (result == ':') {
        fprintf(stderr, "%s: %s needs a value\n", prog, argv[optind - 1]);
        return;
    }
    /* An unknown short option sits in a cluster: the argument getopt just
     * passed when it was the cluster's last letter, else the one it is
     * still in (argv[optind - 1] is then the argument before). Otherwise
     * the argument just passed is the long option at fault (unknown, or
     * given a value it does not take). */
    if (optopt && (short_cluster_has(argv[optind - 1], optopt) ||
                   (argv[optind] && short_cluster_has(argv[optind], optopt))))
        fprintf(stderr, "%s: unknown option '-%c'\n", prog, optopt);
    else
        fprintf(stderr, "%s: unknown option '%s'\n", prog, argv[optind - 1]);
}
