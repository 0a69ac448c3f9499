/* coop: command-line entry point; dispatches to one subcommand. */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "coop.h"
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

/* Results reach stdout through stdio's buffer, so a failed write (a full
 * disk, /dev/full) shows only in fflush and ferror: checked here once for
 * every command, which would otherwise exit 0 with its results lost. A
 * command that already failed has said why; its status stands. */
static int check_stdout(const char *name, int rc)
{
    errno = 0;
    bool flush_failed = fflush(stdout) != 0;
    int err = errno;
    if (rc == 0 && (flush_failed || ferror(stdout))) {
        fprintf(stderr, "coop%s%s: writing standard output failed%s%s\n", name ? " " : "",
                name ? name : "", err ? ": " : "", err ? strerror(err) : "");
        rc = 1;
    }
    return rc;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        usage(stdout);
        return check_stdout(NULL, 0);
    }
    if (!strcmp(argv[1], "--version")) {
        printf("coop %s\n", coop_version());
        return check_stdout(NULL, 0);
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name))
            return check_stdout(commands[i].name, commands[i].run(argc - 1, argv + 1));
    fprintf(stderr, "coop: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
