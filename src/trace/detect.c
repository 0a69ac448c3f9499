/* Choosing a reader by a file's content, whatever its name. */
#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include "status.h"
#include "trace/input.h"
#include "trace/spool.h"
#include "trace/trace.h"

#define PEEK_BYTES 4096

const char *trace_format_name(trace_format format)
{
    switch (format) {
    case TRACE_FORMAT_PICKLE:
        return "pickle";
    case TRACE_FORMAT_TEXT:
        return "text";
    case TRACE_FORMAT_MINIMALLOC:
        return "minimalloc";
    case TRACE_FORMAT_DTR:
        return "dtr";
    }
    return "unknown";
}

static int starts_with(const unsigned char *p, size_t n, const char *prefix)
{
    size_t m = strlen(prefix);
    return n >= m && memcmp(p, prefix, m) == 0;
}

/* Whether the first line is a CSV header of lower-case names, one of them
 * "size" (minimalloc's columns come in any order and under several names;
 * its reader says which it does not know). */
static int csv_header(const unsigned char *p, size_t n)
{
    size_t end = 0;
    while (end < n && p[end] != '\n' && p[end] != '\r')
        end++;
    int commas = 0;
    for (size_t i = 0; i < end; i++) {
        if (p[i] == ',')
            commas++;
        else if (!(islower(p[i]) || p[i] == '_' || p[i] == ' ' || p[i] == '\t'))
            return 0;
    }
    for (size_t i = 0; i + 4 <= end; i++)
        if (!memcmp(p + i, "size", 4) && (i == 0 || p[i - 1] == ',' || p[i - 1] == ' ') &&
            (i + 4 == end || p[i + 4] == ',' || p[i + 4] == ' '))
            return commas > 0;
    return 0;
}

static coop_status detect_kept(const char *path, trace_format *out)
{
    unsigned char buf[PEEK_BYTES];
    size_t n;
    coop_status st = trace_input_peek(path, buf, sizeof buf, &n);
    if (st != COOP_OK)
        return st;
    if (n == 0)
        return coop_set_error(COOP_ERR_INVALID, "%s: empty file", path);
    if ((st = trace_input_check_start(path, buf, n)) != COOP_OK)
        return st;
    if (buf[0] == 0x80) { /* pickle PROTO opcode: protocol 2 or later */
        *out = TRACE_FORMAT_PICKLE;
        return COOP_OK;
    }
    size_t i = trace_input_bom_length(buf, n);
    while (i < n && (buf[i] == ' ' || buf[i] == '\t' || buf[i] == '\r' || buf[i] == '\n'))
        i++;
    const unsigned char *p = buf + i;
    n -= i;
    if (n > 0 && (p[0] == '#' || starts_with(p, n, "coop-trace"))) {
        *out = TRACE_FORMAT_TEXT; /* only text traces have comments */
        return COOP_OK;
    }
    if (csv_header(p, n)) {
        *out = TRACE_FORMAT_MINIMALLOC;
        return COOP_OK;
    }
    if (n > 0 && p[0] == '{') {
        *out = TRACE_FORMAT_DTR;
        return COOP_OK;
    }
    char shown[64] = "";
    size_t k = 0;
    for (size_t j = 0; j < n && j < 12 && k + 5 < sizeof shown; j++)
        k += (size_t)snprintf(shown + k, sizeof shown - k, isprint(p[j]) ? "%c" : "\\x%02x", p[j]);
    return coop_set_error(COOP_ERR_INVALID,
                          "%s: unknown trace format (starts with \"%s\"): expected a PyTorch "
                          "memory snapshot pickle, a coop text trace ('coop-trace 1'), a "
                          "minimalloc CSV (a header such as 'id,lower,upper,size') or a DTR log "
                          "(JSON lines)",
                          path, n ? shown : "only blank space");
}

coop_status trace_detect_format(const char *path, trace_format *out)
{
    /* The format is read from the first bytes, then the reader opens the
     * file again: a pipe is kept whole first, so that both read all of it. */
    coop_status st = trace_spool_keep(path);
    if (st != COOP_OK)
        return st;
    st = detect_kept(path, out);
    if (st != COOP_OK) /* the caller drops the copy only after a success */
        trace_spool_drop(path);
    return st;
}

coop_status trace_read_as(const char *path, trace_format format, trace *out)
{
    switch (format) {
    case TRACE_FORMAT_PICKLE:
        return trace_read_pickle(path, out);
    case TRACE_FORMAT_TEXT:
        return trace_read_text(path, out);
    case TRACE_FORMAT_MINIMALLOC:
        return trace_read_minimalloc(path, out);
    case TRACE_FORMAT_DTR:
        return trace_read_dtr(path, out);
    }
    *out = (trace){0};
    return coop_set_error(COOP_ERR_INVALID, "%s: unknown trace format", path);
}

coop_status trace_read(const char *path, trace *out)
{
    *out = (trace){0};
    trace_format format;
    coop_status st = trace_detect_format(path, &format);
    if (st != COOP_OK)
        return st;
    st = trace_read_as(path, format, out);
    trace_spool_drop(path); /* read whole: a pipe's copy is not needed again */
    return st;
}
