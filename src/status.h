/* Internal error reporting: every failing path sets the thread's message. */
#ifndef COOP_STATUS_H
#define COOP_STATUS_H

#include "coop.h"

/* Formats the thread's last error message and returns status unchanged. */
coop_status coop_set_error(coop_status status, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void coop_clear_error(void);

#endif
