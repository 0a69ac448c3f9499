/* getopt_long's failures, worded once: see cli_getopt.h. */
#include "cli/cli_getopt.h"

#include <getopt.h>
#include <stdio.h>
#include <string.h>

void cli_getopt_error(const char *prog, int result, char *const argv[])
{
    if (result == ':')
        fprintf(stderr, "%s: %s needs a value\n", prog, argv[optind - 1]);
    /* a long option is the argument getopt just passed; a short one may sit
     * inside a cluster (-xyz), named by optopt */
    else if (!strncmp(argv[optind - 1], "--", 2))
        fprintf(stderr, "%s: unknown option '%s'\n", prog, argv[optind - 1]);
    else
        fprintf(stderr, "%s: unknown option '-%c'\n", prog, optopt);
}
