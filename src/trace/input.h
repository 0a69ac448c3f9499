/*
 * Reading trace files, compressed or not: every reader goes through here, so
 * `.gz` is transparent everywhere (zlib's gzread passes plain files through
 * unchanged). Three ways in: a line stream (text formats, bounded memory),
 * the whole file at once (a pickle from a pipe), and a regular file read
 * twice in pieces (a pickle: its memo scanned, then parsed through a window).
 */
#ifndef COOP_TRACE_INPUT_H
#define COOP_TRACE_INPUT_H

#include <stddef.h>
#include <stdint.h>

#include <sys/stat.h>
#include <zlib.h>

#include "coop.h"

/* Longest line the line reader accepts (bytes, newline excluded). */
#define TRACE_INPUT_MAX_LINE ((size_t)1 << 20)

/* Largest file trace_input_slurp loads and trace_input_each reads
 * (decompressed bytes): a guard against gzip bombs; real snapshots are a
 * few hundred MB at most. Parsing a pickle takes up to PKL_MEMORY_PER_BYTE
 * (24) bytes per byte on top, so 1 GiB bounds a hostile file at about 25 GB
 * where 4 GiB allowed 100. A file read twice rather than held leaves 24 of
 * those 25 bytes: the limit stays. */
#define TRACE_INPUT_MAX_SLURP ((size_t)1 << 30)

/* A gzip stream that inflates to more than TRACE_INPUT_BOMB_RATIO times the
 * compressed bytes read so far, once past TRACE_INPUT_BOMB_MIN decompressed
 * bytes, is refused as a gzip bomb: deflate reaches about 1000x, so a few
 * hundred KB of repeated lines would make a line reader build GBs of events
 * (and a slurped pickle 24 bytes of parse state per byte). Real traces and
 * snapshots compress 3-20x; a file past the limit can still be read
 * decompressed (gunzip), where memory follows the file's size. */
#define TRACE_INPUT_BOMB_RATIO 200
#define TRACE_INPUT_BOMB_MIN ((uint64_t)64 << 20)

typedef struct trace_input {
    gzFile gz;
    const char *path; /* borrowed: the caller keeps it alive */
    char *buf;        /* raw bytes read and not yet consumed */
    size_t cap, start, end;
    uint64_t line; /* number of the line last returned (1-based) */
    int at_eof;
} trace_input;

/* Reports bad input on the line last returned: sets the thread's error to
 * "PATH:LINE: what" (what formatted from fmt, cut at 383 bytes between
 * UTF-8 characters, trace_input_escape'd) and returns COOP_ERR_INVALID.
 * Every line-oriented reader words its errors this way. */
coop_status trace_input_error(const trace_input *in, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Copies text into out (cap bytes, at least 1; cut to fit, between UTF-8
 * characters), control
 * characters written as \xNN: a field quoted in a message must show what the
 * file holds (a CR left by CR CR LF line ends moved the terminal's cursor,
 * and "stream '0\r'" read as "stream '0'"). trace_input_error applies it. */
void trace_input_escape(char *out, size_t cap, const char *text);

/* Parses the whole field text as an unsigned number (text_parse_u64); on
 * failure reports "PATH:LINE: NAME 'TEXT' is negative / is not an unsigned
 * number (no sign allowed) ("-0") / out of range / not a number" through
 * trace_input_error. */
coop_status trace_input_u64(const trace_input *in, const char *name, const char *text,
                            uint64_t *out);

/* trace_input_u64 for a size: also "PATH:LINE: NAME N is too large (sizes
 * must be below 2^56)" for N >= TRACE_SIZE_LIMIT. */
coop_status trace_input_size(const trace_input *in, const char *name, const char *text,
                             uint64_t *out);

/* The longest path "cannot open" messages quote whole, and the buffer
 * trace_input_shown_path writes to. */
#define TRACE_INPUT_SHOWN_PATH 512

/* path as a "PATH: cannot open: reason" message quotes it: whole if shorter
 * than TRACE_INPUT_SHOWN_PATH bytes, else its start and end around "...",
 * each cut on a UTF-8 character boundary, written to out. A path may be
 * 4095 bytes and the error buffer holds 1024: the reason after a whole one
 * was cut off. Returns path itself or out. */
const char *trace_input_shown_path(char out[TRACE_INPUT_SHOWN_PATH], const char *path);

/* Whether path can be opened for reading, before a command spends its work
 * on the files given before it: "PATH: cannot open: reason" for a path
 * that does not exist, a directory, or a regular file that cannot be
 * opened. A FIFO or device passes unopened: opening one twice could take
 * a writer's first bytes or show it its reader leaving. The file itself is
 * read (and judged) later; this only moves the cheapest failure first. */
coop_status trace_input_check(const char *path);

/* Refuses a file whose first (decompressed) bytes p[0..n) are the magic
 * number of a compressor zlib does not read (zstd and its skippable frames,
 * bzip2, xz, lz4 and its legacy frame): "PATH: compressed with NAME: coop
 * reads plain files and gzip only: decompress it first (NAME -d)"; a zip
 * archive: "PATH: a zip archive: ... extract it first (unzip)". Format detection and the line
 * reader (coop sim reads logs without detection) both check. */
coop_status trace_input_check_start(const char *path, const unsigned char *p, size_t n);

/* 3 if p[0..n) starts with a UTF-8 byte order mark, else 0: the line reader
 * and format detection skip one at the start of a file (Windows editors and
 * spreadsheets' "CSV UTF-8" write it); line numbers are unchanged. */
size_t trace_input_bom_length(const unsigned char *p, size_t n);

/* Opens path for line reading. Errors: "PATH: cannot open: reason". */
coop_status trace_input_open(trace_input *in, const char *path);

/* Returns the next line in *line (NUL-terminated, without "\n" or "\r\n"),
 * its length in *len, and advances in->line. At the end of the file *line is
 * NULL and COOP_OK is returned. The line stays valid until the next call.
 * A UTF-8 byte order mark before the first line is skipped.
 * Errors: a file compressed otherwise than with gzip
 * (trace_input_check_start), a line longer than TRACE_INPUT_MAX_LINE, a NUL byte inside a line
 * (binary data), a last line without its newline (a file cut short: text
 * traces, CSVs and JSON-lines logs all end with one), a read error, a
 * truncated/corrupt gzip stream or one inflating past TRACE_INPUT_BOMB_RATIO,
 * each as "PATH:LINE: what". */
coop_status trace_input_line(trace_input *in, char **line, size_t *len);

/* Closes the file and frees the buffer; safe on a zeroed or closed input. */
void trace_input_close(trace_input *in);

/* Reads all of path (decompressed) into a malloc'ed buffer *data of *len
 * bytes, plus one NUL byte after the end. Errors as above, or a file larger
 * than TRACE_INPUT_MAX_SLURP (or inflating past TRACE_INPUT_BOMB_RATIO). */
coop_status trace_input_slurp(const char *path, unsigned char **data, size_t *len);

/* A running 64-bit hash of a byte stream, the same whatever pieces it is
 * fed in: what the second read of a file is checked against the first
 * with. A word changed always changes it (each step is a bijection of the
 * hash so far and of the word). About a quarter of zlib's crc32's
 * instructions: 2.0% more for `coop replay` of a snapshot, where crc32
 * added 8.1% (docs/replay.md). */
typedef struct trace_input_hash {
    uint64_t h;
    unsigned char part[8]; /* a word begun */
    unsigned have;         /* bytes of it */
} trace_input_hash;

/* A regular file the snapshot reader reads twice rather than whole (a pipe,
 * read once, is read whole: trace_input_slurp), held open from before its
 * first read to after its second: both reads read the one file descriptor
 * (the second from offset 0 again), so they read the same file by
 * construction. A file renamed over path in between is not seen: the file
 * that was opened is read both times. A file written in place is refused
 * as changed (trace_input_stream_open, trace_input_stream_finish). */
typedef struct trace_input_stream {
    const char *path;        /* borrowed */
    int fd;                  /* the file, opened once; -1 when none is held */
    gzFile gz;               /* the second read, on a dup of fd */
    struct stat was;         /* fstat(fd) before the first read */
    uint64_t len;            /* decompressed bytes of the first read */
    uint64_t got;            /* of the second read so far */
    trace_input_hash first;  /* of the first read's bytes */
    trace_input_hash second; /* of the second read's so far */
} trace_input_stream;

/* Opens path into s if it is a regular file (1), held until
 * trace_input_stream_close; 0 (nothing held, s closed) for anything else, or
 * a regular file that cannot be opened: the caller reads path whole by name
 * (trace_input_slurp), which reports why it cannot. Only a path that stat()
 * shows as a regular file is opened (without blocking, and the descriptor
 * checked with fstat): a FIFO opened to be looked at could show its writer
 * its reader leaving. */
int trace_input_rereadable(trace_input_stream *s, const char *path);

/* Feeds n bytes at p to x (zeroed to start). */
void trace_input_hash_bytes(trace_input_hash *x, const unsigned char *p, size_t n);

/* Whether a and b were fed the same bytes (their lengths aside: a caller
 * that needs them equal compares them). */
int trace_input_hash_equal(const trace_input_hash *a, const trace_input_hash *b);

/* Reads all of the held file (decompressed) as trace_input_slurp does, with
 * the same refusals at the same bytes (its limits included), but hands each
 * piece read to piece instead of keeping it: memory is one piece (16 MiB at
 * most). *len gets the bytes read; s keeps their count and hash for the
 * second read's end. piece's error ends the read. */
coop_status trace_input_each(trace_input_stream *s,
                             coop_status (*piece)(void *ctx, const unsigned char *p, size_t n),
                             void *ctx, size_t *len);

/* For tests: if set, called by trace_input_stream_open before it starts the
 * second read (where a test changes the file between the two reads). */
extern void (*trace_input_reread_hook)(const char *path);

/* For tests: if set, called with each piece the second read got, before it
 * is hashed (where a test writes the file during the second
 * read, or changes the bytes as a write the file's times did not show
 * would). */
extern void (*trace_input_second_read_hook)(const char *path, unsigned char *p, size_t n);

/* Starts the second read of the held file, from its first (decompressed)
 * byte: no limits are checked again. fstat of the descriptor must still give
 * the size and modification time it gave before the first read: a
 * file written (or truncated) between the two reads is refused, as its
 * second read would not match the first one's scan. Errors: "PATH: cannot
 * open: reason", "PATH: the file changed while it was read: modified between
 * its first read and its second". */
coop_status trace_input_stream_open(trace_input_stream *s);

/* Reads up to cap bytes into buf, *got of them (fewer only at the end of the
 * file). Errors as trace_input_line's read errors, without a line. */
coop_status trace_input_stream_read(trace_input_stream *s, unsigned char *buf, size_t cap,
                                    size_t *got);

/* Ends the second read, after its reader used what it wanted: reads what
 * is left of the file (to one byte past the first read's length at most)
 * and refuses a file written in place while it was read (the same length
 * included): "PATH: the file changed while it was read: modified during its
 * second read" (fstat's size or modification time moved since before the
 * first read), "PATH: the file changed while it was read: its
 * second read did not give the bytes of its first" (another length or
 * hash: a write the modification time did not show, set back, in the
 * clock tick of the one before, or on a file system with coarse times). Read errors as
 * trace_input_stream_read's where fstat shows no change (a gzip file cut
 * during the read fails its read, and is reported as changed). The caller
 * discards what it made of the second read on any error. */
coop_status trace_input_stream_finish(trace_input_stream *s);

/* After the second read's reader failed with failed (its message set),
 * while the read was open: reads the rest of the file as
 * trace_input_stream_finish does and returns its refusal of a file that
 * changed while it was read, whose bytes the reader's error is about (a
 * write that made them unparsable); else failed, its message kept (a read
 * error of the rest is not reported: the reader's error stands). */
coop_status trace_input_stream_failed(trace_input_stream *s, coop_status failed);

/* Closes the second read and the held file; safe on a zeroed or closed
 * stream and on one trace_input_rereadable did not hold. */
void trace_input_stream_close(trace_input_stream *s);

/* Reads up to cap decompressed bytes from the start of path into buf (for
 * format detection); *len gets the count (less than cap at the end). */
coop_status trace_input_peek(const char *path, unsigned char *buf, size_t cap, size_t *len);

#endif
