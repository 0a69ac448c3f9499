/* The input files of a command, checked before its work: coop sim and coop
 * replay read their files one after another and print each file's rows as
 * they go, so a missing path at the end of a long list used to cost the
 * whole run of the files before it. */
#ifndef COOP_CLI_INPUTS_H
#define COOP_CLI_INPUTS_H

#include <stdbool.h>
#include <stddef.h>

#include "status.h"
#include "trace/trace.h"

/* Whether every path can be opened for reading (trace_input_check) and no
 * pipe (FIFO, '-' as /dev/stdin) is named twice, for a pipe can be read once.
 * Prints "PROG: PATH: cannot open: reason" to stderr for each one that
 * cannot, "PROG: PATH: a pipe named twice (as EARLIER before it): ..."
 * for each repeated pipe, and returns false if any; the caller exits 2
 * before any output. */
bool cli_inputs_readable(const char *prog, char *const *paths, size_t n);

/* Replaces each "-" among paths by "/dev/stdin", the name under which the
 * readers open standard input (a pipe there is kept whole first, spool.h)
 * and under which errors and rows then name it. Returns false, after
 * "PROG: '-' is standard input, a terminal here: ..." on stderr, when a "-"
 * is given and standard input is a terminal; the caller exits 2. */
bool cli_inputs_name_stdin(const char *prog, char **paths, size_t n);

/* The input among paths that the output path out names (the same file by
 * another path or a link, or an input '-' redirected from it), or NULL:
 * writing out would replace that input, before it is read or for good.
 * out "-" (standard output) and an out that does not exist name none. */
const char *cli_input_named_by(const char *out, char *const *paths, size_t n);

/* A snapshot holds one history per device and a command reads one: where
 * another device has events too (devices_with_events > 1), prints "PROG:
 * PATH: read device D, the first with events; K other device(s) have
 * events too (ANOTHER)" to stderr, ANOTHER saying how to read another.
 * For a device picked by the first-with-events default only. */
void cli_note_device_read(const char *prog, const char *path, size_t device,
                          size_t devices_with_events, const char *another);

/* --device's value, as coop convert and coop replay take it: the whole
 * text, decimal or 0x hex, 0 to 65536 (strtol took leading spaces and a
 * sign: " 1", "+1" and "-0" read as devices). True with *device set; else
 * prints "PROG: --device 'TEXT' is not a device number (...)" to stderr
 * and returns false (the caller exits 2). */
bool cli_parse_device(const char *prog, const char *text, int *device);

/* Reads the trace at path, its format detected (*format, where not NULL);
 * device >= 0 reads that device of a PyTorch snapshot (trace_read_pickle_device),
 * -1 the first with events. A device given for another format is
 * COOP_ERR_INVALID, "PATH: --device applies to PyTorch snapshots only". A
 * pipe's copy (spool.h) is dropped once read. */
coop_status cli_read_trace(const char *path, int device, trace *out, trace_format *format);

/* cli_read_trace for a path whose format the caller detected already
 * (trace_detect_format succeeded: this drops the pipe's copy it kept), so
 * that a file is not detected twice. */
coop_status cli_read_trace_as(const char *path, int device, trace_format format, trace *out);

#endif
