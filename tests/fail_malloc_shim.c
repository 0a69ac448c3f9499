/*
 * An LD_PRELOAD module that makes one host allocation of a whole process
 * fail: tests/cli_host_oom_test.sh runs the coop command under it. The
 * cmocka sweeps (tests/host_alloc_fault.h) wrap only the statically linked
 * code; this one also reaches the allocations the C library makes for the
 * program (strdup, realpath, fopen's FILE, stdio buffers, glob), zlib's and
 * jansson's, since glibc lets a preloaded malloc replace its own for all of
 * them.
 *
 * Counting starts when main is called (through __libc_start_main), so the
 * dynamic loader's and the constructors' allocations do not move the
 * numbers; calls from malloc, calloc, realloc, aligned_alloc,
 * posix_memalign and memalign count alike (strdup and the rest reach
 * malloc). free is not counted.
 *
 * Environment:
 *   COOP_FAIL_MALLOC_AT=N      the N-th call (1-based) returns NULL, once:
 *                              a missing check shows; the process may go on
 *                              (a later call succeeds, as memory freed by
 *                              another process would)
 *   COOP_FAIL_MALLOC_FROM=N    the N-th call and every later one fail: the
 *                              cleanup after the first failure runs with no
 *                              memory either
 *   COOP_FAIL_MALLOC_REPORT=F  at exit, writes "calls=C failed=K" to F: C
 *                              counted calls, K of them failed (0: the
 *                              chosen call was never reached)
 * Unset, nothing fails: the module only counts.
 *
 * Each allocation forwards to the next definition (dlsym RTLD_NEXT: the C
 * library's, or jemalloc's where it is linked in), so free stays theirs. Not
 * used under AddressSanitizer (its allocator must be the process's own).
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef void *(*malloc_fn)(size_t);
typedef void *(*calloc_fn)(size_t, size_t);
typedef void *(*realloc_fn)(void *, size_t);
typedef void *(*aligned_fn)(size_t, size_t);
typedef int (*posix_memalign_fn)(void **, size_t, size_t);
typedef void (*free_fn)(void *);
typedef int (*main_fn)(int, char **, char **);
typedef int (*start_main_fn)(main_fn, int, char **, void (*)(void), void (*)(void), void (*)(void),
                             void *);

static malloc_fn real_malloc;
static calloc_fn real_calloc;
static realloc_fn real_realloc;
static aligned_fn real_aligned_alloc, real_memalign;
static posix_memalign_fn real_posix_memalign;
static free_fn real_free;
static main_fn real_main;

static bool counting; /* main has started */
static long fail_at;  /* the first call to fail; 0: none */
static bool fail_on;  /* COOP_FAIL_MALLOC_FROM: every call from fail_at on */
static long calls, failed;

/* dlsym may allocate (its error buffer) before calloc is known: served
 * from here, never freed back to the C library */
static _Alignas(16) char boot[4096];
static size_t boot_used;

static bool from_boot(const void *p)
{
    return (const char *)p >= boot && (const char *)p < boot + sizeof boot;
}

static void *boot_alloc(size_t size)
{
    size_t at = (boot_used + 15) & ~(size_t)15;
    if (size > sizeof boot - at)
        return NULL;
    boot_used = at + size;
    return memset(boot + at, 0, size);
}

static bool resolving;

static void resolve(void)
{
    if (real_free || resolving)
        return;
    resolving = true;
    real_malloc = (malloc_fn)dlsym(RTLD_NEXT, "malloc");
    real_calloc = (calloc_fn)dlsym(RTLD_NEXT, "calloc");
    real_realloc = (realloc_fn)dlsym(RTLD_NEXT, "realloc");
    real_aligned_alloc = (aligned_fn)dlsym(RTLD_NEXT, "aligned_alloc");
    real_memalign = (aligned_fn)dlsym(RTLD_NEXT, "memalign");
    real_posix_memalign = (posix_memalign_fn)dlsym(RTLD_NEXT, "posix_memalign");
    real_free = (free_fn)dlsym(RTLD_NEXT, "free");
    resolving = false;
}

/* Counts one call; true when it must fail (errno set, as malloc does). */
static bool inject(void)
{
    if (!counting)
        return false;
    long n = __atomic_add_fetch(&calls, 1, __ATOMIC_RELAXED);
    if (!fail_at || n < fail_at || (n > fail_at && !fail_on))
        return false;
    __atomic_add_fetch(&failed, 1, __ATOMIC_RELAXED);
    errno = ENOMEM;
    return true;
}

void *malloc(size_t size)
{
    resolve();
    if (!real_malloc)
        return boot_alloc(size);
    return inject() ? NULL : real_malloc(size);
}

void *calloc(size_t n, size_t size)
{
    resolve();
    if (!real_calloc)
        return size && n > SIZE_MAX / size ? NULL : boot_alloc(n * size);
    return inject() ? NULL : real_calloc(n, size);
}

void *realloc(void *p, size_t size)
{
    resolve();
    if (from_boot(p) || !real_realloc) /* not reached in practice */
        return NULL;
    return inject() ? NULL : real_realloc(p, size);
}

void free(void *p)
{
    resolve();
    if (p && !from_boot(p) && real_free)
        real_free(p);
}

void *aligned_alloc(size_t align, size_t size)
{
    resolve();
    return inject() || !real_aligned_alloc ? NULL : real_aligned_alloc(align, size);
}

void *memalign(size_t align, size_t size)
{
    resolve();
    return inject() || !real_memalign ? NULL : real_memalign(align, size);
}

int posix_memalign(void **out, size_t align, size_t size)
{
    resolve();
    if (inject() || !real_posix_memalign)
        return ENOMEM;
    return real_posix_memalign(out, align, size);
}

static long env_count(const char *name)
{
    const char *s = getenv(name);
    if (!s || !*s)
        return 0;
    char *end;
    long v = strtol(s, &end, 10);
    return *end || v < 0 ? 0 : v;
}

static int counted_main(int argc, char **argv, char **envp)
{
    long at = env_count("COOP_FAIL_MALLOC_AT"), from = env_count("COOP_FAIL_MALLOC_FROM");
    fail_at = from ? from : at;
    fail_on = from > 0;
    counting = true;
    return real_main(argc, argv, envp);
}

int __libc_start_main(main_fn main, int argc, char **argv, void (*init)(void), void (*fini)(void),
                      void (*rtld_fini)(void), void *stack_end);

/* glibc calls this with the program's main: counting starts there. */
int __libc_start_main(main_fn main, int argc, char **argv, void (*init)(void), void (*fini)(void),
                      void (*rtld_fini)(void), void *stack_end)
{
    start_main_fn next = (start_main_fn)dlsym(RTLD_NEXT, "__libc_start_main");
    real_main = main;
    return next(counted_main, argc, argv, init, fini, rtld_fini, stack_end);
}

/* Writes the report without allocating (stdio would count, or fail). */
__attribute__((destructor)) static void report(void)
{
    const char *path = getenv("COOP_FAIL_MALLOC_REPORT");
    if (!path || !*path)
        return;
    char line[64];
    int n = snprintf(line, sizeof line, "calls=%ld failed=%ld\n", calls, failed);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return;
    if (write(fd, line, (size_t)n) != n)
        (void)0; /* the test sees a short report */
    close(fd);
}
