/* getopt_long's two failures (an unknown option, a missing value), worded
 * once, so every command names the offending option the same way. */
#ifndef COOP_CLI_GETOPT_H
#define COOP_CLI_GETOPT_H

#include <getopt.h>

/* Prints "PROG: OPTION needs a value" (result ':') or, for result '?',
 * "PROG: unknown option 'OPTION'" to stderr, for getopt_long's result just
 * returned with argv and longopts as given to it (optind and optopt as it
 * left them). A long option is named better where longopts tell: "option
 * '--json' takes no value, got '--json=1'", "option '--p' is ambiguous:
 * --policy or --page", "unknown option '--jsn'; did you mean '--json'?"
 * (the nearest name, within an edit or two). Callers then print their usage
 * where they want it and return 2. */
void cli_getopt_error(const char *prog, int result, char *const argv[],
                      const struct option *longopts);

#endif
