/* Run-time loading of the CUDA driver API (see cuda_driver.h). */
#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_driver.h"
#include "status.h"

/* "cuMemAlloc" expands to cuda.h's versioned name before it is stringified. */
#define COOP_STRINGIFY(x) #x
#define COOP_SYMBOL_NAME(x) COOP_STRINGIFY(x)

static const char *driver_library_name(void)
{
    const char *name = getenv("COOP_CUDA_DRIVER");
    return name && name[0] ? name : "libcuda.so.1";
}

coop_status cuda_driver_load(cuda_driver *drv)
{
    memset(drv, 0, sizeof *drv);
    const char *name = driver_library_name();
    dlerror();
    drv->library = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (!drv->library) {
        const char *why = dlerror();
        if (!why)
            why = "dlopen failed";
        /* glibc's message usually starts with the name already */
        if (strncmp(why, name, strlen(name)) == 0)
            return coop_set_error(COOP_ERR_NO_DRIVER, "no CUDA driver (%s)", why);
        return coop_set_error(COOP_ERR_NO_DRIVER, "no CUDA driver (%s: %s)", name, why);
    }
#define COOP_CUDA_DRIVER_LOAD(fname)                                                               \
    do {                                                                                           \
        dlerror();                                                                                 \
        void *sym = dlsym(drv->library, COOP_SYMBOL_NAME(fname));                                  \
        if (!sym) {                                                                                \
            const char *why = dlerror();                                                           \
            coop_status st_ =                                                                      \
                coop_set_error(COOP_ERR_NO_DRIVER, "no CUDA driver (%s lacks %s: %s)", name,       \
                               COOP_SYMBOL_NAME(fname), why ? why : "not found");                  \
            dlclose(drv->library); /* nothing of it was used */                                    \
            memset(drv, 0, sizeof *drv);                                                           \
            return st_;                                                                            \
        }                                                                                          \
        /* POSIX guarantees object and function pointers convert through dlsym */                  \
        memcpy(&drv->fn.fname, &sym, sizeof sym);                                                  \
    } while (0);
    COOP_CUDA_DRIVER_FUNCTIONS(COOP_CUDA_DRIVER_LOAD)
#undef COOP_CUDA_DRIVER_LOAD
    return COOP_OK;
}

void cuda_driver_unload(cuda_driver *drv)
{
    /* The library stays loaded for the process (dlopen then only counts
     * references): unloading libcuda while a process runs, and loading it
     * again at the next pool, has crashed programs on some systems, and the
     * CUDA runtime never unloads it either. */
    memset(drv, 0, sizeof *drv);
}

coop_status cuda_driver_error(const cuda_driver *drv, CUresult rc, const char *call,
                              const char *what_fmt, ...)
{
    const char *err_name = NULL, *err_text = NULL;
    if (!drv->fn.cuGetErrorName || drv->fn.cuGetErrorName(rc, &err_name) != CUDA_SUCCESS ||
        !err_name)
        err_name = "unknown CUDA error";
    if (!drv->fn.cuGetErrorString || drv->fn.cuGetErrorString(rc, &err_text) != CUDA_SUCCESS ||
        !err_text)
        err_text = "no description";
    char what[256];
    va_list ap;
    va_start(ap, what_fmt);
    vsnprintf(what, sizeof what, what_fmt, ap);
    va_end(ap);
    coop_status st = rc == CUDA_ERROR_OUT_OF_MEMORY ? COOP_ERR_NOMEM : COOP_ERR_BACKEND;
    return coop_set_error(st, "CUDA driver: %s failed with %s (%d: %s) %s", call, err_name, (int)rc,
                          err_text, what);
}
