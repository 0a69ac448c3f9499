/* The --wrap allocation wrappers of host_alloc_fault.h. Each forwards to
 * __real_X, which is the C library's (or, under ASan, the sanitizer's
 * interceptor beneath it). Single-threaded tests only: the counters are
 * plain variables. */
#include "host_alloc_fault.h"

#include <jansson.h>
#include <malloc.h>
#include <stdlib.h>

void *__real_malloc(size_t size);
void *__real_calloc(size_t n, size_t size);
void *__real_realloc(void *p, size_t size);
void __real_free(void *p);
char *__real_strdup(const char *s);
void *__real_aligned_alloc(size_t align, size_t size);

void *__wrap_malloc(size_t size);
void *__wrap_calloc(size_t n, size_t size);
void *__wrap_realloc(void *p, size_t size);
void __wrap_free(void *p);
char *__wrap_strdup(const char *s);
void *__wrap_aligned_alloc(size_t align, size_t size);

static long live;            /* blocks out through the wrappers */
static long calls;           /* allocation calls since arming */
static long fail_at;         /* the call to fail; 0: disarmed */
static bool hit;             /* the armed call was reached */
static long long bytes;      /* usable bytes of the blocks live through the wrappers */
static long long peak_bytes; /* the most since host_fault_peak_reset */
static long allocations;     /* blocks handed out (realloc: moved or made) */

/* Adds delta to the live bytes and raises the peak. malloc_usable_size is
 * what the block holds (glibc and the sanitizers' allocators both have it). */
static void count_bytes(long long delta)
{
    bytes += delta;
    if (bytes > peak_bytes)
        peak_bytes = bytes;
}

/* Counts one allocation call; true if this one must fail. */
static bool inject(void)
{
    if (!fail_at)
        return false;
    calls++;
    if (calls != fail_at)
        return false;
    hit = true;
    return true;
}

/* Counts p, a block handed out (NULL: none), and returns it. */
static void *counted(void *p)
{
    if (p) {
        live++;
        allocations++;
        count_bytes((long long)malloc_usable_size(p));
    }
    return p;
}

void *__wrap_malloc(size_t size)
{
    if (inject())
        return NULL;
    return counted(__real_malloc(size));
}

void *__wrap_calloc(size_t n, size_t size)
{
    if (inject())
        return NULL;
    return counted(__real_calloc(n, size));
}

/* realloc(p, 0) is not counted as a free (glibc frees, others allocate):
 * the code under test never asks for 0 bytes (growable arrays start at a
 * positive capacity). */
void *__wrap_realloc(void *p, size_t size)
{
    if (inject())
        return NULL; /* the old block stays allocated */
    long long before = p ? (long long)malloc_usable_size(p) : 0;
    void *q = __real_realloc(p, size);
    if (q && !p)
        live++; /* realloc(NULL, n) is malloc(n) */
    if (q) {
        allocations += q != p;
        count_bytes((long long)malloc_usable_size(q) - before);
    }
    return q;
}

void __wrap_free(void *p)
{
    if (p) {
        live--;
        count_bytes(-(long long)malloc_usable_size(p));
    }
    __real_free(p);
}

char *__wrap_strdup(const char *s)
{
    if (inject())
        return NULL;
    return counted(__real_strdup(s));
}

void *__wrap_aligned_alloc(size_t align, size_t size)
{
    if (inject())
        return NULL;
    return counted(__real_aligned_alloc(align, size));
}

/* jansson's allocations are counted but never failed: jansson reports an
 * allocation failing inside its lexer as a syntax error ("string or '}'
 * expected"), so a reader cannot tell it from bad input. */
static void *json_counted_malloc(size_t size)
{
    return counted(__real_malloc(size));
}

void host_fault_install(void)
{
    json_set_alloc_funcs(json_counted_malloc, __wrap_free);
}

long host_fault_live(void)
{
    return live;
}

void host_fault_peak_reset(void)
{
    peak_bytes = bytes;
}

long long host_fault_peak_bytes(void)
{
    return peak_bytes;
}

long long host_fault_bytes(void)
{
    return bytes;
}

long host_fault_allocations(void)
{
    return allocations;
}

void host_fault_arm(long n)
{
    calls = 0;
    hit = false;
    fail_at = n;
}

bool host_fault_disarm(void)
{
    fail_at = 0;
    return hit;
}
