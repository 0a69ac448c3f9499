/*
 * The words of the remat API's failures deep inside a call: which public
 * call (remat_call_name), which tensor and how large. A message from a
 * helper shared by several calls names the call the owner made, as the
 * owner reads it, not the helper.
 */
#include <stdarg.h>
#include <stdio.h>

#include "remat/remat_internal.h"
#include "status.h"

const char *remat_describe_new(const coop_remat *r, size_t bytes, char *buf, size_t size)
{
    if (r->placing_outputs) /* counted from 1, as the reader counts */
        snprintf(buf, size, "output %zu of %zu (%zu bytes)", r->placing_output + 1,
                 r->placing_outputs, bytes);
    else
        snprintf(buf, size, "a tensor of %zu bytes", bytes);
    return buf;
}

const char *remat_describe(const coop_remat *r, const coop_tensor *t, bool recomputing, char *buf,
                           size_t size)
{
    if (!recomputing)
        return remat_describe_new(r, t->size, buf, size);
    const coop_tensor *asked = r->num_frames ? r->frames[0].t : t;
    if (asked == t)
        snprintf(buf, size, "tensor %p (%zu bytes)", (const void *)t, t->size);
    else
        snprintf(buf, size, "tensor %p (%zu bytes), an input recomputed for tensor %p",
                 (const void *)t, t->size, (const void *)asked);
    return buf;
}

coop_status remat_host_nomem(const coop_remat *r, const char *fmt, ...)
{
    char what[COOP_ERROR_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return coop_set_error(COOP_ERR_HOST_NOMEM, "%s: out of host memory %s", remat_call_name(r),
                          what);
}

coop_status remat_placing_failed(const coop_remat *r, const coop_tensor *t, coop_status st)
{
    coop_error_kept pool_words; /* the pool's message, which the new one quotes */
    coop_error_keep(&pool_words);
    char who[REMAT_DESCRIBE_MAX];
    return coop_set_error(st, "%s: placing %s: %s", remat_call_name(r),
                          remat_describe(r, t, r->num_frames > 0, who, sizeof who),
                          pool_words.text);
}
