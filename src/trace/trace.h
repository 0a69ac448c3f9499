/*
 * Trace readers: one per format, each producing a struct trace (event.h).
 *
 * Every reader takes a path to a plain or gzip-compressed file (zlib reads
 * both the same way; the name's suffix does not matter) and loads the whole
 * trace. On success *out owns the trace (release it with trace_free). On
 * failure *out is zeroed, nothing leaks, and coop_last_error() says what is
 * wrong and where: "FILE:LINE: what" for text formats, "FILE: byte OFFSET:
 * what" for pickles (offsets count decompressed bytes). Statuses:
 * COOP_ERR_INVALID for unreadable or malformed input, COOP_ERR_HOST_NOMEM
 * when memory runs out.
 *
 * Every reader yields the canonical form built by trace_builder_finish:
 * live-at-start allocations first (as TRACE_ALLOC events, in live_at_start
 * order), then the trace's events, with ids numbered 0.. in order of first
 * appearance; free events (TRACE_FREE_REQUESTED, TRACE_FREE) repeat their
 * alloc's size, addr and stream.
 */
#ifndef COOP_TRACE_H
#define COOP_TRACE_H

#include "coop.h"
#include "trace/event.h"

typedef enum trace_format {
    TRACE_FORMAT_PICKLE = 0, /* PyTorch memory snapshot (starts with byte 0x80) */
    TRACE_FORMAT_TEXT,       /* coop text trace (header "coop-trace 1") */
    TRACE_FORMAT_MINIMALLOC, /* minimalloc CSV (header "id,lower,upper,size") */
    TRACE_FORMAT_DTR         /* DTR prototype op log (JSON object per line) */
} trace_format;

/* The format's name as users write it: "pickle", "text", "minimalloc", "dtr". */
const char *trace_format_name(trace_format format);

/* Detects a file's format from its first decompressed bytes: byte 0x80 is a
 * pickle, "coop-trace" (after optional '#' comment lines and blank lines) a
 * text trace, "id,lower,upper,size" a minimalloc CSV, '{' a DTR log. A
 * pipe (FIFO) is first read whole into a temporary copy that the reader then
 * opens under the same name (spool.h), so a pipe can be read only once in
 * all. On success the copy stays kept for the caller, who drops it
 * (trace_spool_drop) after its last read; on failure nothing is kept. */
coop_status trace_detect_format(const char *path, trace_format *out);

/* Reads any supported format (trace_detect_format, then trace_read_as), and
 * then forgets a pipe's copy. */
coop_status trace_read(const char *path, trace *out);

/* Reads path with the reader of format, which trace_detect_format gave (for
 * a caller that looks at the format first, without detecting it twice). A
 * pipe's copy stays kept: trace_spool_drop(path) after the last read. */
coop_status trace_read_as(const char *path, trace_format format, trace *out);

/* PyTorch memory snapshot pickle (torch.cuda.memory._dump_snapshot()). Only
 * plain-data pickle opcodes are accepted (pickle.h): anything that would
 * import or call is refused, so reading a snapshot never runs code. Events:
 * device_traces entries alloc / free_requested / free_completed (paired by
 * address and stream), segment_alloc / segment_free / segment_map /
 * segment_unmap, oom; other actions are skipped. Blocks freed without a
 * recorded alloc, and blocks allocated in the final `segments` but never
 * allocated in the trace, are live at start (ordered by address), except a
 * listed one over bytes a block of the trace held: allocated after the
 * trace (another thread's, between PyTorch's two copies); the final
 * `segments` become final_segments; `allocator_settings` set
 * has_torch_settings and torch_settings (torch_settings.h). Reads the first
 * device with events. */
coop_status trace_read_pickle(const char *path, trace *out);

/* PyTorch's key for a TRACE_TORCH_* bit of trace.torch_settings
 * ("expandable_segments", ...), or NULL for another value. */
const char *trace_torch_setting_name(unsigned bit);
/* The TRACE_TORCH_* bit of PyTorch's key name, or 0 for another name. */
unsigned trace_torch_setting_bit(const char *name);

/* As trace_read_pickle, for one device (device_traces index); device < 0
 * picks the first device with events. */
coop_status trace_read_pickle_device(const char *path, int device, trace *out);

/* trace_read_pickle_device with every dict of the pickle read whole, none
 * sealed as it is parsed (pkl_parse_sealed): more memory, the same result.
 * For the tests that hold the two to the same trace and the same errors. */
coop_status trace_read_pickle_unsealed(const char *path, int device, trace *out);

/* coop text trace (traces/README.md): streamed line by line; the file's ids
 * may be reused after their F line and are mapped to dense ids. */
coop_status trace_read_text(const char *path, trace *out);

/* minimalloc CSV: a header naming the columns (any of those minimalloc
 * reads: "id,lower,upper,size", "buffer,start,end,size", ...; see
 * reader_minimalloc.c), then one buffer per row, live over [lower, upper).
 * Each buffer becomes an alloc at lower and a free at upper, ordered by
 * time, frees before allocs at equal times, then by name. time_us holds the
 * CSV's logical time. */
coop_status trace_read_minimalloc(const char *path, trace *out);

/* Writes t as a coop text trace to path, or to standard output if path is
 * "-". A path ending in ".gz" is gzip-compressed. Reading the result back
 * with trace_read_text gives t again, field for field. */
coop_status trace_write_text(const trace *t, const char *path_or_dash);

/* As trace_write_text, compressing or not as asked whatever the name
 * (for writing to a temporary name before renaming). */
coop_status trace_write_text_to(const trace *t, const char *path, bool gzip);

/* Releases everything a reader allocated in *t and zeroes it. */
void trace_free(trace *t);

/* ---- DTR operator logs (remat work: src/trace/dtr_events.c) ---- */

/* Reads a DTR JSONL op log (plain or gzip) as the allocations the logged
 * program makes with no budget: fresh CALL results and constants allocate,
 * views and in-place mutations do not, a storage is freed with the last name
 * bound to it. cost_ns carries the producing op's time. Errors name
 * PATH:LINE. */
coop_status trace_read_dtr(const char *path, trace *out);

/* ---- end DTR operator logs ---- */

#endif
