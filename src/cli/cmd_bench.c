/* coop bench: placeholder until its owner lands it (returns a usage error). */
#include <stdio.h>

#include "cli/commands.h"

int cmd_bench(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "coop bench: not built yet\n");
    return 2;
}
