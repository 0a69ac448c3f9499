/* Input files checked before a command's work (cli_inputs.h). */
#include <stdio.h>
#include <string.h>

#include "cli/cli_inputs.h"
#include "status.h"
#include "trace/input.h"

bool cli_inputs_readable(const char *prog, char *const *paths, size_t n)
{
    bool all = true;
    for (size_t i = 0; i < n; i++)
        if (trace_input_check(paths[i]) != COOP_OK) {
            fprintf(stderr, "%s: %s\n", prog, coop_last_error());
            all = false;
        }
    return all;
}

void cli_inputs_name_stdin(char **paths, size_t n)
{
    static char stdin_name[] = "/dev/stdin";
    for (size_t i = 0; i < n; i++)
        if (!strcmp(paths[i], "-"))
            paths[i] = stdin_name;
}
