/* Status strings, version, and the per-thread last error message. */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "coop.h"
#include "status.h"
#include "utf8.h"

static const char *const status_text[COOP_STATUS_COUNT] = {
    [COOP_OK] = "success",
    [COOP_ERR_NOMEM] = "out of device memory",
    [COOP_ERR_INVALID] = "invalid argument",
    [COOP_ERR_FOREIGN_PTR] = "pointer was not allocated by this pool",
    [COOP_ERR_DOUBLE_FREE] = "pointer was already freed",
    [COOP_ERR_INTERIOR_PTR] = "pointer is inside a block, not at its start",
    [COOP_ERR_BACKEND] = "device backend call failed",
    [COOP_ERR_NO_DRIVER] = "no CUDA driver",
    [COOP_ERR_UNSUPPORTED] = "not supported by this backend or build",
    [COOP_ERR_CORRUPT] = "allocator invariant violated",
    [COOP_ERR_HOST_NOMEM] = "out of host memory for allocator metadata",
    [COOP_ERR_BUSY] = "object is in use",
};

const char *coop_strerror(coop_status status)
{
    if ((unsigned)status >= COOP_STATUS_COUNT)
        return "unknown status";
    return status_text[status];
}

const char *coop_version(void)
{
    return COOP_VERSION_STRING;
}

/* One message per thread: PyTorch calls the allocator from several threads.
 * Room for an out-of-memory message that quotes the driver's. */
static _Thread_local char last_error[COOP_ERROR_MAX];
/* Messages set on this thread (coop_error_count), kept and restored with
 * the text: a failure that was dealt with and its message restored does
 * not count. */
static _Thread_local uint64_t errors_set;

const char *coop_last_error(void)
{
    return last_error;
}

int coop_vformat_message(char *buf, size_t cap, const char *fmt, va_list ap)
{
    int need = vsnprintf(buf, cap, fmt, ap);
    if (need >= 0 && (size_t)need >= cap)
        buf[utf8_whole_prefix(buf, cap - 1)] = '\0';
    return need;
}

int coop_format_message(char *buf, size_t cap, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int need = coop_vformat_message(buf, cap, fmt, ap);
    va_end(ap);
    return need;
}

void coop_copy_last_error(char *buf, size_t cap)
{
    coop_format_message(buf, cap, "%s", last_error);
}

void coop_set_error_message(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    coop_vformat_message(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    errors_set++;
}

uint64_t coop_error_count(void)
{
    return errors_set;
}

void coop_clear_error(void)
{
    last_error[0] = '\0';
}

/* A copy of the text, not snprintf: pool_process_pending_locked keeps and
 * restores the message on every allocation while frees are pending, where
 * snprintf's formatting machinery cost about 500 instructions a pair. Both
 * buffers are COOP_ERROR_MAX bytes and always terminated. */
static void copy_message(char *to, const char *from)
{
    memcpy(to, from, strlen(from) + 1);
}

coop_status coop_error_in(const char *fn, coop_status st)
{
    if (st == COOP_OK)
        return COOP_OK;
    size_t n = strlen(fn);
    if (strncmp(last_error, fn, n) == 0 && (last_error[n] == ':' || last_error[n] == '('))
        return st;
    char detail[COOP_ERROR_MAX];
    copy_message(detail, last_error[0] ? last_error : coop_strerror(st));
    coop_format_message(last_error, sizeof last_error, "%s: %s", fn, detail);
    return st;
}

void coop_error_keep(coop_error_kept *kept)
{
    copy_message(kept->text, last_error);
    kept->count = errors_set;
}

void coop_error_restore(const coop_error_kept *kept)
{
    copy_message(last_error, kept->text);
    errors_set = kept->count;
}
