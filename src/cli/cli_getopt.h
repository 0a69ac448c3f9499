/* getopt_long's two failures (an unknown option, a missing value), worded
 * once, so every command names the offending option the same way. */
#ifndef COOP_CLI_GETOPT_H
#define COOP_CLI_GETOPT_H

/* Prints "PROG: OPTION needs a value" (result ':') or "PROG: unknown option
 * 'OPTION'" (result '?') to stderr, for getopt_long's result just returned
 * with argv as given to it (optind and optopt as it left them). Callers then
 * print their usage where they want it and return 2. */
void cli_getopt_error(const char *prog, int result, char *const argv[]);

#endif
