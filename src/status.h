/* Internal error reporting: every failing path sets the thread's message. */
#ifndef COOP_STATUS_H
#define COOP_STATUS_H

#include "coop.h"

/* Formats the thread's last error message. */
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

#endif
