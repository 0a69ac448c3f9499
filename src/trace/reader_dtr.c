/*
 * DTR operator log reader: JSON lines (jansson), gzip-transparent (zlib).
 *
 * Grammar enforced here (simrd's parse_file is the reference):
 *   CONSTANT NAME                   followed by MEMORY for that NAME
 *   CALL NAME ARGS RESULT TIME      followed, per result in order, by MEMORY
 *                                   then ALIAS for that result
 *   MUTATE NAME ARGS MUTATE TIME
 *   COPY DST SRC | COPY_FROM DST SRC | RELEASE NAME | ANNOTATE ANNOTATION
 * MEMORY and TIME are decimal strings in the authors' logs; plain integers
 * are accepted too. Whether names are bound when used is checked by the
 * consumer (it knows the instruction's line).
 */
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "growable.h"
#include "status.h"
#include "trace/dtr_log.h"
#include "trace/event.h"
#include "trace/input.h"
#include "trace/json_alloc.h"
#include "trace/name_table.h"
#include "utf8.h"

/* The sum of a log's MEMORY values is below this (2^63 bytes, 8 EiB): then
 * no sum of tensors live at once, the simulator's peak or budget, wraps. */
#define DTR_MEMORY_TOTAL_LIMIT ((uint64_t)1 << 63)

/* The TIME of every CALL and MUTATE, counted once per output, adds up to
 * less than this (2^61 ns, 73 years): each output's storage counts its op's
 * time in its compute, so then no sum the simulator forms over ops or
 * storages wraps: its base compute, a class's or component's compute (int64),
 * and its logical clock (base + recompute, the recompute at most
 * SIM_REMAT_LIMIT_MAX plus one op). Before, two TIMEs of 2^63
 * gave a base compute of 0 and runs that thrashed on the first recompute. */
#define DTR_TIME_TOTAL_LIMIT ((uint64_t)1 << 61)

/* The first capacity (items) of the log's arrays (GROW_ARRAY). */
#define LOG_ARRAY_FIRST 64

/* ---- parser state ----------------------------------------------------- */

typedef struct parser {
    const char *file;
    uint32_t line;
    dtr_log *log;
    size_t instrs_cap, args_cap, results_cap, mutates_cap;
    name_table names, ops;
    /* results of the last CALL still waiting for MEMORY / ALIAS lines:
     * pending_next counts lines consumed, 2 per result */
    dtr_instr *pending_call;
    uint32_t pending_next;
    dtr_instr *pending_constant; /* CONSTANT waiting for its MEMORY */
    uint64_t memory_total;       /* of every MEMORY line so far: below DTR_MEMORY_TOTAL_LIMIT */
    uint64_t time_total;         /* TIME x outputs so far: below DTR_TIME_TOTAL_LIMIT */
    char line_error[256];
} parser;

static coop_status fail(parser *p, const char *what)
{
    char shown[512]; /* names and jansson's excerpt may hold control characters */
    trace_input_escape(shown, sizeof shown, what);
    return coop_set_error(COOP_ERR_INVALID, "%s:%" PRIu32 ": %s", p->file, p->line, shown);
}

/* fail with the message formatted from fmt, cut between UTF-8 characters:
 * the names and INSTRUCTION it quotes may be of any length. */
static coop_status failf(parser *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static coop_status failf(parser *p, const char *fmt, ...)
{
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    coop_vformat_message(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return fail(p, msg);
}

/* How much of s a message shows: at most max bytes, cut between UTF-8
 * characters (a cut inside one left a stray lead byte). */
static int shown_length(const char *s, size_t max)
{
    size_t len = strlen(s);
    return (int)(len > max ? utf8_whole_prefix(s, max) : len);
}

static coop_status fail_host(parser *p)
{
    return coop_set_error(COOP_ERR_HOST_NOMEM, "%s:%" PRIu32 ": out of host memory", p->file,
                          p->line);
}

/* A field holding a string, or NULL (message in p->line_error). */
static const char *string_field(parser *p, json_t *obj, const char *key)
{
    json_t *v = json_object_get(obj, key);
    if (!v) {
        snprintf(p->line_error, sizeof p->line_error, "missing field %s", key);
        return NULL;
    }
    if (!json_is_string(v)) {
        snprintf(p->line_error, sizeof p->line_error, "field %s is not a string", key);
        return NULL;
    }
    return json_string_value(v);
}

/* v shown in a message: a string quoted (cut to 40 bytes, between UTF-8
 * characters: a cut inside one left a stray lead byte before the "..."), a
 * number, or its JSON type. */
static void describe(const json_t *v, char *out, size_t cap)
{
    if (json_is_string(v)) {
        const char *s = json_string_value(v);
        int cut = shown_length(s, 40);
        snprintf(out, cap, "\"%.*s%s\"", cut, s, s[cut] ? "..." : "");
    } else if (json_is_integer(v))
        snprintf(out, cap, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
    else if (json_is_real(v))
        snprintf(out, cap, "%.17g", json_real_value(v));
    else
        snprintf(out, cap, "%s",
                 json_is_true(v)    ? "true"
                 : json_is_false(v) ? "false"
                 : json_is_null(v)  ? "null"
                 : json_is_array(v) ? "an array"
                                    : "an object");
}

/* A non-negative integer given as a decimal string or a JSON integer. A
 * decimal string past 2^64-1 is out of range (it was "not a non-negative
 * integer", which it is); any other refused value is shown. */
static int uint_field(parser *p, json_t *obj, const char *key, uint64_t *out)
{
    json_t *v = json_object_get(obj, key);
    if (!v) {
        snprintf(p->line_error, sizeof p->line_error, "missing field %s", key);
        return -1;
    }
    if (json_is_integer(v) && json_integer_value(v) >= 0) {
        *out = (uint64_t)json_integer_value(v);
        return 0;
    }
    /* shown only once refused: every MEMORY and TIME of a log comes here,
     * and describing each cost about 1,000 instructions (snprintf) */
    char shown[64];
    if (json_is_string(v)) {
        const char *s = json_string_value(v);
        char *end;
        errno = 0;
        unsigned long long x = strtoull(s, &end, 10);
        if (*s >= '0' && *s <= '9' && !*end) {
            if (!errno) {
                *out = x;
                return 0;
            }
            describe(v, shown, sizeof shown);
            snprintf(p->line_error, sizeof p->line_error,
                     "field %s %s is out of range (at most 2^64-1)", key, shown);
            return -1;
        }
    }
    describe(v, shown, sizeof shown);
    snprintf(p->line_error, sizeof p->line_error, "field %s is not a non-negative integer: %s", key,
             shown);
    return -1;
}

/* A MEMORY field: a size below TRACE_SIZE_LIMIT, counted in the log's total. */
static int memory_field(parser *p, json_t *obj, uint64_t *out)
{
    if (uint_field(p, obj, "MEMORY", out))
        return -1;
    if (*out >= TRACE_SIZE_LIMIT) {
        snprintf(p->line_error, sizeof p->line_error,
                 "MEMORY %" PRIu64 " is too large (sizes must be below 2^56)", *out);
        return -1;
    }
    if (*out >= DTR_MEMORY_TOTAL_LIMIT - p->memory_total) {
        snprintf(p->line_error, sizeof p->line_error,
                 "the MEMORY values add up to 2^63 bytes or more");
        return -1;
    }
    p->memory_total += *out;
    return 0;
}

/* Counts an op's TIME once per output (at least once) in the log's total,
 * or fails (message in p->line_error) where the total would reach
 * DTR_TIME_TOTAL_LIMIT. */
static int count_time(parser *p, uint64_t time_ns, uint32_t outputs)
{
    uint64_t n = outputs ? outputs : 1;
    if (time_ns > (DTR_TIME_TOTAL_LIMIT - p->time_total - 1) / n) {
        snprintf(p->line_error, sizeof p->line_error,
                 "TIME %" PRIu64 ": the TIME values (each once per output) add up to 2^61 ns "
                 "or more",
                 time_ns);
        return -1;
    }
    p->time_total += time_ns * n;
    return 0;
}

/* A signed integer given as a decimal string or a JSON integer (ALIAS). */
static int int_field(parser *p, json_t *obj, const char *key, int64_t *out)
{
    json_t *v = json_object_get(obj, key);
    if (v && json_is_integer(v)) {
        *out = json_integer_value(v);
        return 0;
    }
    if (v && json_is_string(v)) {
        const char *s = json_string_value(v);
        char *end;
        errno = 0;
        long long x = strtoll(s, &end, 10);
        /* a decimal integer, as MEMORY and TIME: strtoll also took
         * leading spaces and a plus sign */
        if ((*s == '-' || (*s >= '0' && *s <= '9')) && !*end && !errno) {
            *out = x;
            return 0;
        }
    }
    snprintf(p->line_error, sizeof p->line_error, "field %s is %s", key,
             v ? "not an integer" : "missing");
    return -1;
}

/* Interns s: a name's id, or "more than N distinct names" / out of memory. */
static coop_status intern(parser *p, name_table *t, const char *s, uint32_t *id)
{
    int r = name_table_intern(t, s, id);
    if (r == NAME_TABLE_FULL) {
        snprintf(p->line_error, sizeof p->line_error, "more than %" PRIu32 " distinct names",
                 (uint32_t)NAME_TABLE_MAX);
        return fail(p, p->line_error);
    }
    return r ? fail_host(p) : COOP_OK;
}

/* Appends the names of a JSON array of strings to log->args. Invalid input
 * and running out of memory are told apart (COOP_ERR_INVALID, _HOST_NOMEM). */
static coop_status name_list(parser *p, json_t *obj, const char *key, uint32_t *first,
                             uint32_t *count)
{
    json_t *arr = json_object_get(obj, key);
    if (!arr || !json_is_array(arr)) {
        snprintf(p->line_error, sizeof p->line_error, "field %s is %s", key,
                 arr ? "not an array" : "missing");
        return fail(p, p->line_error);
    }
    dtr_log *log = p->log;
    size_t n = json_array_size(arr);
    if (n > UINT32_MAX - log->num_args) /* instructions index args with 32 bits */
        return fail(p, "more than 2^32 - 1 tensor arguments in the log");
    if (GROW_ARRAY(log->args, p->args_cap, log->num_args + n, LOG_ARRAY_FIRST))
        return fail_host(p);
    *first = (uint32_t)log->num_args;
    *count = (uint32_t)n;
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_array_get(arr, i);
        if (!json_is_string(v)) {
            snprintf(p->line_error, sizeof p->line_error, "%s[%zu] is not a string", key, i);
            return fail(p, p->line_error);
        }
        coop_status st = intern(p, &p->names, json_string_value(v), &log->args[log->num_args++]);
        if (st != COOP_OK)
            return st;
    }
    return COOP_OK;
}

static dtr_instr *new_instr(parser *p, dtr_kind kind)
{
    dtr_log *log = p->log;
    if (GROW_ARRAY(log->instrs, p->instrs_cap, log->num_instrs + 1, LOG_ARRAY_FIRST))
        return NULL;
    dtr_instr *in = &log->instrs[log->num_instrs++];
    *in = (dtr_instr){.kind = kind, .line = p->line};
    return in;
}

/* ---- one line ---------------------------------------------------------- */

/* MEMORY / ALIAS lines belong to the preceding CONSTANT or CALL. */
static coop_status attach_detail(parser *p, json_t *obj, const char *instr)
{
    const char *name = string_field(p, obj, "NAME");
    if (!name)
        return fail(p, p->line_error);
    int is_memory = !strcmp(instr, "MEMORY");
    uint32_t id;
    coop_status st = intern(p, &p->names, name, &id);
    if (st != COOP_OK)
        return st;
    if (p->pending_constant) {
        if (!is_memory)
            return fail(p, "ALIAS after CONSTANT (expected MEMORY)");
        if (id != p->pending_constant->name)
            return failf(p, "MEMORY for %s, expected it for CONSTANT %s", name,
                         p->names.names[p->pending_constant->name]);
        if (memory_field(p, obj, &p->pending_constant->memory))
            return fail(p, p->line_error);
        p->pending_constant = NULL;
        return COOP_OK;
    }
    if (!p->pending_call)
        return failf(p, "%s line without a preceding CALL or CONSTANT", instr);
    dtr_instr *call = p->pending_call;
    dtr_result *r = &p->log->results[call->first_result + p->pending_next / 2];
    int want_memory = p->pending_next % 2 == 0;
    if (is_memory != want_memory)
        return failf(p, "%s for %s, expected %s (CALL on line %" PRIu32 ")", instr, name,
                     want_memory ? "MEMORY" : "ALIAS", call->line);
    if (id != r->name)
        return failf(p, "%s for %s, expected it for result %s of CALL on line %" PRIu32, instr,
                     name, p->names.names[r->name], call->line);
    if (is_memory) {
        if (memory_field(p, obj, &r->memory))
            return fail(p, p->line_error);
    } else {
        int64_t alias;
        if (int_field(p, obj, "ALIAS", &alias))
            return fail(p, p->line_error);
        if (alias < -1 || alias >= (int64_t)call->num_args)
            return failf(p,
                         "ALIAS %" PRId64 " of %s is not -1 or an argument index (0..%" PRIu32 ")",
                         alias, name, call->num_args ? call->num_args - 1 : 0);
        r->alias = (int32_t)alias;
    }
    if (++p->pending_next == 2 * call->num_results)
        p->pending_call = NULL;
    return COOP_OK;
}

static coop_status parse_call(parser *p, json_t *obj, dtr_kind kind)
{
    dtr_instr *in = new_instr(p, kind);
    if (!in)
        return fail_host(p);
    const char *op = string_field(p, obj, "NAME");
    if (!op || uint_field(p, obj, "TIME", &in->time_ns))
        return fail(p, p->line_error);
    coop_status st = name_list(p, obj, "ARGS", &in->first_arg, &in->num_args);
    if (st != COOP_OK)
        return st;
    if ((st = intern(p, &p->ops, op, &in->op)) != COOP_OK)
        return st;
    dtr_log *log = p->log;
    if (kind == DTR_MUTATE) {
        json_t *arr = json_object_get(obj, "MUTATE");
        if (!arr || !json_is_array(arr))
            return fail(p, "field MUTATE is missing or not an array");
        size_t n = json_array_size(arr);
        if (n > UINT32_MAX - log->num_mutates)
            return fail(p, "more than 2^32 - 1 MUTATE indices in the log");
        if (GROW_ARRAY(log->mutates, p->mutates_cap, log->num_mutates + n, LOG_ARRAY_FIRST))
            return fail_host(p);
        in->first_mutate = (uint32_t)log->num_mutates;
        in->num_mutates = (uint32_t)n;
        for (size_t i = 0; i < n; i++) {
            json_t *v = json_array_get(arr, i);
            if (!json_is_integer(v) || json_integer_value(v) < 0 ||
                json_integer_value(v) >= (json_int_t)in->num_args)
                return fail(p, "MUTATE index is not an argument index");
            log->mutates[log->num_mutates++] = (uint32_t)json_integer_value(v);
        }
        return count_time(p, in->time_ns, in->num_mutates) ? fail(p, p->line_error) : COOP_OK;
    }
    uint32_t first, n;
    size_t before = log->num_args;
    st = name_list(p, obj, "RESULT", &first, &n);
    if (st != COOP_OK)
        return st;
    if (n == 0)
        return fail(p, "CALL with an empty RESULT list");
    if (count_time(p, in->time_ns, n))
        return fail(p, p->line_error);
    if (n > UINT32_MAX - log->num_results)
        return fail(p, "more than 2^32 - 1 results in the log");
    if (GROW_ARRAY(log->results, p->results_cap, log->num_results + n, LOG_ARRAY_FIRST))
        return fail_host(p);
    in->first_result = (uint32_t)log->num_results;
    in->num_results = n;
    for (uint32_t i = 0; i < n; i++)
        log->results[log->num_results++] =
            (dtr_result){.name = log->args[first + i], .alias = DTR_FRESH};
    log->num_args = before; /* result names were staged in args */
    p->pending_call = in;
    p->pending_next = 0;
    return COOP_OK;
}

static coop_status parse_line(parser *p, const char *text, size_t len)
{
    /* JSON's whitespace, trailing or the whole line: a line of spaces or
     * tabs is blank too (jansson said "'[' or '{' expected near end of file") */
    while (len && (text[len - 1] == '\n' || text[len - 1] == '\r' || text[len - 1] == ' ' ||
                   text[len - 1] == '\t'))
        len--;
    if (!len)
        return COOP_OK; /* blank lines carry nothing */
    json_error_t jerr;
    unsigned long failed_before = json_alloc_failures();
    /* a key given twice is refused: jansson would keep the last one, a
     * MEMORY or NAME the line states two ways read as one of them silently */
    json_t *obj = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    if (json_alloc_failures() != failed_before) { /* not the line's fault (json_alloc.h) */
        json_decref(obj);
        return fail_host(p);
    }
    if (!obj) /* jansson's text fits, whole: it leaves out a long "near '...'" */
        return failf(p, "invalid JSON at column %d: %s", jerr.column, jerr.text);
    coop_status st = COOP_OK;
    const char *instr = json_is_object(obj) ? string_field(p, obj, "INSTRUCTION") : NULL;
    if (!instr) {
        st = fail(p, json_is_object(obj) ? p->line_error : "line is not a JSON object");
        goto out;
    }
    int is_detail = !strcmp(instr, "MEMORY") || !strcmp(instr, "ALIAS");
    if (is_detail) {
        st = attach_detail(p, obj, instr);
        goto out;
    }
    if (p->pending_call || p->pending_constant) {
        st = failf(p, "%s before the MEMORY/ALIAS lines of the %s on line %" PRIu32, instr,
                   p->pending_call ? "CALL" : "CONSTANT",
                   p->pending_call ? p->pending_call->line : p->pending_constant->line);
        goto out;
    }
    if (!strcmp(instr, "CALL")) {
        st = parse_call(p, obj, DTR_CALL);
    } else if (!strcmp(instr, "MUTATE")) {
        st = parse_call(p, obj, DTR_MUTATE);
    } else if (!strcmp(instr, "CONSTANT") || !strcmp(instr, "RELEASE")) {
        int is_constant = instr[1] == 'O';
        const char *name = string_field(p, obj, "NAME");
        dtr_instr *in = name ? new_instr(p, is_constant ? DTR_CONSTANT : DTR_RELEASE) : NULL;
        if (!name)
            st = fail(p, p->line_error);
        else if (!in)
            st = fail_host(p);
        else if ((st = intern(p, &p->names, name, &in->name)) == COOP_OK && is_constant)
            p->pending_constant = in;
    } else if (!strcmp(instr, "COPY") || !strcmp(instr, "COPY_FROM")) {
        const char *dst = string_field(p, obj, "DST");
        const char *src = dst ? string_field(p, obj, "SRC") : NULL;
        dtr_instr *in = src ? new_instr(p, instr[4] ? DTR_COPY_FROM : DTR_COPY) : NULL;
        if (!src)
            st = fail(p, p->line_error);
        else if (!in)
            st = fail_host(p);
        else if ((st = intern(p, &p->names, dst, &in->name)) == COOP_OK)
            st = intern(p, &p->names, src, &in->src);
    } else if (!strcmp(instr, "ANNOTATE")) {
        const char *a = string_field(p, obj, "ANNOTATION");
        dtr_instr *in = a ? new_instr(p, DTR_ANNOTATE) : NULL;
        if (!a) {
            st = fail(p, p->line_error);
        } else if (!in) {
            st = fail_host(p);
        } else {
            in->annotation = !strcmp(a, "START")      ? DTR_ANNOT_START
                             : !strcmp(a, "BACKWARD") ? DTR_ANNOT_BACKWARD
                                                      : DTR_ANNOT_OTHER;
            if (in->annotation == DTR_ANNOT_START && !p->log->start)
                p->log->start = p->log->num_instrs;
        }
    } else {
        st = failf(p, "unknown INSTRUCTION \"%.*s\"", shown_length(instr, 64), instr);
    }
out:
    json_decref(obj);
    return st;
}

/* ---- drivers ----------------------------------------------------------- */

static coop_status finish(parser *p, coop_status st)
{
    dtr_log *log = p->log;
    if (st == COOP_OK && (p->pending_call || p->pending_constant)) {
        p->line++;
        st = fail(p, "log ends before the MEMORY/ALIAS lines of the last CALL or CONSTANT");
    }
    /* an empty or blank file is no program (coop sim ran it as one of 0
     * bytes, 'ok'; replay and convert call it an empty file) */
    if (st == COOP_OK && !log->num_instrs)
        st = coop_set_error(COOP_ERR_INVALID, "%s: no instructions: the log is empty or blank",
                            p->file);
    if (st == COOP_OK) {
        log->names = name_table_take_names(&p->names, &log->num_names);
        log->op_names = name_table_take_names(&p->ops, &log->num_op_names);
        log->path = strdup(p->file);
        if (!log->path)
            st = coop_set_error(COOP_ERR_HOST_NOMEM, "%s: out of host memory", p->file);
    }
    name_table_free(&p->names);
    name_table_free(&p->ops);
    if (st != COOP_OK)
        dtr_log_free(log);
    return st;
}

coop_status dtr_log_parse_buffer(const char *name, const char *text, size_t len, dtr_log *out)
{
    *out = (dtr_log){0};
    parser p = {.file = name, .log = out};
    coop_status st = COOP_OK;
    size_t pos = 0;
    json_alloc_watch();
    while (st == COOP_OK && pos < len) {
        const char *nl = memchr(text + pos, '\n', len - pos);
        size_t end = nl ? (size_t)(nl - text) : len;
        p.line++;
        st = parse_line(&p, text + pos, end - pos);
        pos = end + 1;
    }
    return finish(&p, st);
}

/* Reads through trace_input_line, as the other line formats do: it bounds a
 * line at TRACE_INPUT_MAX_LINE (a long line used to grow without limit, and
 * jansson copied it again), refuses NUL bytes (strlen-based reading dropped
 * the rest of such a line) and a last line without its newline, and reports
 * a gzip stream that ends early (Z_BUF_ERROR, which was taken for the end of
 * the file) as truncation. */
coop_status dtr_log_read(const char *path, dtr_log *out)
{
    *out = (dtr_log){0};
    parser p = {.file = path, .log = out};
    json_alloc_watch();
    trace_input in;
    coop_status st = trace_input_open(&in, path);
    while (st == COOP_OK) {
        char *line;
        size_t len;
        if ((st = trace_input_line(&in, &line, &len)) != COOP_OK || !line)
            break;
        if (in.line > UINT32_MAX) { /* instructions keep 32-bit line numbers */
            st = trace_input_error(&in, "more than %" PRIu32 " lines", UINT32_MAX);
            break;
        }
        p.line = (uint32_t)in.line;
        st = parse_line(&p, line, len);
    }
    trace_input_close(&in);
    return finish(&p, st);
}

void dtr_log_free(dtr_log *log)
{
    if (!log)
        return;
    for (uint32_t i = 0; i < log->num_names; i++)
        free(log->names[i]);
    for (uint32_t i = 0; i < log->num_op_names; i++)
        free(log->op_names[i]);
    free(log->names);
    free(log->op_names);
    free(log->instrs);
    free(log->args);
    free(log->results);
    free(log->mutates);
    free(log->path);
    *log = (dtr_log){0};
}
