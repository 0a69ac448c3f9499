/*
 * The coop command's output files and standard output.
 *
 * A file a command writes (convert's OUT, replay's --timeline) appears only
 * when complete: it is written to a fresh hidden file beside it (mkstemp in
 * the same directory, so the rename stays on one file system) and renamed
 * over it at the end; a failure removes the temporary file and leaves an
 * existing file as it was, and so does SIGINT, SIGTERM, SIGHUP or SIGPIPE
 * ending the command (a handler removes the file, then the signal ends the
 * command as it would have; ignored signals stay ignored). A symbolic link
 * stays one (its target is replaced); a new file gets the umask's
 * permissions, a replaced one keeps its own. Paths that are not regular
 * files (a device such as /dev/null or /dev/full, a FIFO) are written
 * directly: there is nothing to rename over.
 *
 * Standard output: results reach it through stdio's buffer, so a failed
 * write (a full disk, a closed pipe with SIGPIPE ignored) shows only in
 * fflush and ferror. cli_stdout_ok after each row lets a command stop at
 * the first lost row, and cli_stdout_finish says so once, with the reason.
 */
#ifndef COOP_CLI_OUTPUT_H
#define COOP_CLI_OUTPUT_H

#include <stdbool.h>
#include <stdio.h>

typedef struct cli_output {
    char *tmp;    /* the temporary file (malloc'ed); NULL when written directly */
    char *target; /* the file the rename replaces (links resolved), malloc'ed */
    int fd;       /* tmp, open for writing; -1 when written directly */
} cli_output;

/* Prepares an output for path: a temporary file beside it, open on fd; or,
 * when path exists and is not a regular file, nothing (tmp NULL): the
 * caller opens path itself (a FIFO's reader must see one open and close).
 * NULL on success, else why not (strerror's text, or a sentence for a
 * dangling symbolic link or no host memory, errno then ENOMEM); *o is then
 * zeroed and nothing was created. */
const char *cli_output_open(cli_output *o, const char *path);

/* Renames the temporary file over the target (the caller has closed fd and
 * checked its own writes). NULL on success, else why not; the temporary
 * file is then removed. Frees o either way. */
const char *cli_output_commit(cli_output *o);

/* Removes the temporary file (the target is left as it was) and frees o.
 * The caller has closed fd. Safe on a zeroed o. */
void cli_output_discard(cli_output *o);

/* Opens /dev/null on whichever of descriptors 0, 1 and 2 is closed, in
 * the direction that keeps it failing: otherwise the first file a command
 * opens became descriptor 1, and its rows went into that file (replay's
 * --timeline, with stdout closed, got the JSON rows). Called first. */
void cli_reserve_standard_fds(void);

/* Flushes stdout: false once a write to it has failed (the reason kept
 * for cli_stdout_finish). A command stops there: its rows are lost. */
bool cli_stdout_ok(void);

/* Flushes and closes stdout at exit. When a write to it failed, says so
 * on stderr once ("coop NAME: writing standard output failed: reason";
 * name NULL: "coop: ...") and returns 1 where rc was 0; a command that
 * already failed keeps its status (rc). */
int cli_stdout_finish(const char *name, int rc);

#endif
