/* Internal error reporting: every failing path sets the thread's message. */
#ifndef COOP_STATUS_H
#define COOP_STATUS_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "coop.h"

/* vsnprintf into buf (cap bytes, at least 1), cut between UTF-8 characters:
 * a message quotes names, paths and configuration text of any length, and
 * a cut inside a character left a stray lead byte (invalid UTF-8, a U+FFFD
 * on a terminal, an invalid string in JSON, an error in Python's strict
 * decode). Every buffer a message is built in that may cut user text is
 * formatted this way (status.c). Returns what vsnprintf returns. */
int coop_vformat_message(char *buf, size_t cap, const char *fmt, va_list ap)
    __attribute__((format(printf, 3, 0)));
/* coop_vformat_message with the arguments given. */
int coop_format_message(char *buf, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Copies the thread's message into buf (cap bytes, at least 1), cut
 * between UTF-8 characters, so that a call can put what it was doing
 * before it: coop_set_error cannot format the message into itself. */
void coop_copy_last_error(char *buf, size_t cap);

/* Formats the thread's last error message (coop_vformat_message: a cut at
 * COOP_ERROR_MAX - 1 bytes falls between characters). */
void coop_set_error_message(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static inline coop_status coop_error_status(coop_status status)
{
    return status;
}

/* coop_set_error(status, fmt, ...): formats the thread's last error message
 * and evaluates to status, unchanged. A macro over an inline function so that
 * every caller, and a static analyser, sees that the status comes back as
 * given: after st = coop_set_error(COOP_ERR_..., ...), st is not COOP_OK. */
#define coop_set_error(status, ...) (coop_set_error_message(__VA_ARGS__), coop_error_status(status))
void coop_clear_error(void);
/* Returns st; where st is a failure, first puts "fn: " before the
 * thread's message, unless it begins with fn already (followed by ':' or
 * '('): a public call's failure names the call, whatever part of the
 * library (a backend, the arena) wrote the detail. An empty message
 * becomes coop_strerror(st). COOP_OK touches nothing, so a call returns
 * its status through it. Not counted as a new message (coop_error_count).
 * Kept off the malloc/free fast paths. */
coop_status coop_error_in(const char *fn, coop_status st);
/* How many messages coop_set_error has set on this thread, less those a
 * coop_error_restore took back: unchanged across a stretch of calls, when
 * none of them failed (a call that succeeds restores what it recovered
 * from). The remat API compares it around a recompute callback to tell
 * whether the callback's failure followed a refused library call, whose
 * message it then quotes. */
uint64_t coop_error_count(void);

/* The size of the thread's message buffer, terminator included. */
#define COOP_ERROR_MAX 1024

/* The thread's message, kept across internal work whose failures the call
 * recovers from (an event that could not be recorded now and is recorded
 * later, a stream that could not be asked and is taken as busy): coop.h
 * promises, as errno does, that a call that succeeds leaves the message as
 * it was, and a caller reading it after an earlier failure must not find a
 * backend's message about something that was dealt with. */
typedef struct coop_error_kept {
    char text[COOP_ERROR_MAX];
    uint64_t count; /* coop_error_count */
} coop_error_kept;

void coop_error_keep(coop_error_kept *kept);
/* Puts the kept message back. */
void coop_error_restore(const coop_error_kept *kept);

#endif
