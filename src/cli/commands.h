/* Subcommands of the coop command: each parses its own arguments and returns
 * the process exit status (0 ok, 1 the work failed, 2 usage or input error). */
#ifndef COOP_CLI_COMMANDS_H
#define COOP_CLI_COMMANDS_H

int cmd_bench(int argc, char **argv);
int cmd_replay(int argc, char **argv);
int cmd_convert(int argc, char **argv);
int cmd_sim(int argc, char **argv);

#endif
