/* coop: command-line entry point; dispatches to one subcommand. */
#include <stdio.h>
#include <string.h>

#include "coop.h"
#include "cli/cli_output.h"
#include "cli/commands.h"

typedef struct command {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
} command;

static const command commands[] = {
    {"replay", cmd_replay, "replay allocation traces through coop and its peers"},
    {"sim", cmd_sim, "simulate rematerialization on operator logs under a memory budget"},
    {"convert", cmd_convert, "convert a trace (snapshot, csv, DTR log) to coop's text format"},
    {"bench", cmd_bench, "time malloc+free pairs against jemalloc"},
};

static void usage(FILE *out)
{
    fprintf(out, "usage: coop COMMAND [OPTIONS] [ARGS]\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(out, "  %-8s %s\n", commands[i].name, commands[i].summary);
    fprintf(out, "\n'coop COMMAND --help' describes one command. 'coop replay' with no trace\n"
                 "runs the bundled traces.\n");
}

int main(int argc, char **argv)
{
    cli_reserve_standard_fds();
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        usage(stdout);
        return cli_stdout_finish(NULL, 0);
    }
    if (!strcmp(argv[1], "--version")) {
        printf("coop %s\n", coop_version());
        return cli_stdout_finish(NULL, 0);
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name))
            return cli_stdout_finish(commands[i].name, commands[i].run(argc - 1, argv + 1));
    fprintf(stderr, "coop: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
