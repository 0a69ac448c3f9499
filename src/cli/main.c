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
    fprintf(out, "\n'coop COMMAND --help' (or 'coop help COMMAND') describes one command.\n"
                 "'coop replay' with no trace runs the bundled traces.\n"
                 "'coop --version' prints the version.\n");
}

static const command *find_command(const char *name)
{
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(name, commands[i].name))
            return &commands[i];
    return NULL;
}

/* 'coop help [COMMAND]', as git and pip spell it: the usage, or the
 * command's own --help. */
static int help(int argc, char **argv)
{
    if (argc < 3) {
        usage(stdout);
        return cli_stdout_finish(NULL, 0);
    }
    if (argc > 3) {
        fprintf(stderr, "coop help: one command at most, got '%s' and '%s'\n", argv[2], argv[3]);
        return 2;
    }
    const command *c = find_command(argv[2]);
    if (!c) {
        fprintf(stderr, "coop help: unknown command '%s'\n", argv[2]);
        usage(stderr);
        return 2;
    }
    char *help_argv[] = {argv[2], "--help", NULL};
    return cli_stdout_finish(c->name, c->run(2, help_argv));
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
    if (!strcmp(argv[1], "help"))
        return help(argc, argv);
    const command *c = find_command(argv[1]);
    if (c)
        return cli_stdout_finish(c->name, c->run(argc - 1, argv + 1));
    fprintf(stderr, "coop: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
