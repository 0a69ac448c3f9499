/* Counting jansson's failed allocations; see json_alloc.h. */
#include <jansson.h>
#include <pthread.h>
#include <stdlib.h>

#include "trace/json_alloc.h"

static json_malloc_t next_malloc; /* what jansson called before the wrapper */
static _Thread_local unsigned long failures;

static void *counting_malloc(size_t size)
{
    void *p = next_malloc(size);
    if (!p)
        failures++;
    return p;
}

static void install(void)
{
    json_malloc_t m;
    json_free_t f;
    json_get_alloc_funcs(&m, &f);
    next_malloc = m ? m : malloc;
    json_set_alloc_funcs(counting_malloc, f ? f : free);
}

void json_alloc_watch(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, install);
}

unsigned long json_alloc_failures(void)
{
    return failures;
}
