/*
 * Scratch file for the fuzzers whose readers take a path: each input is
 * written to one file per process (under /dev/shm when it exists, so the
 * write costs no disk I/O) and read back by the reader under test.
 */
#ifndef COOP_FUZZ_SCRATCH_H
#define COOP_FUZZ_SCRATCH_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Path of this process's scratch file named by suffix (made once). */
static inline const char *fuzz_scratch_path(const char *suffix)
{
    static char path[2][96];
    static int used;
    for (int i = 0; i < used; i++)
        if (strstr(path[i], suffix))
            return path[i];
    if (used == 2)
        abort();
    const char *dir = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    snprintf(path[used], sizeof path[used], "%s/coop-fuzz-%d.%s", dir, (int)getpid(), suffix);
    return path[used++];
}

/* Writes data to the scratch file named by suffix and returns its path. */
static inline const char *fuzz_write_scratch(const char *suffix, const unsigned char *data,
                                             size_t len)
{
    const char *path = fuzz_scratch_path(suffix);
    FILE *f = fopen(path, "wb");
    if (!f)
        abort();
    if (len && fwrite(data, 1, len, f) != len)
        abort();
    fclose(f);
    return path;
}

#endif
