/*
 * How many file descriptors this process has open, for the tests that check
 * that a reader or the pipe spool leaves none behind (trace_read_test,
 * host_alloc_readers_test). Linux: counts /proc/self/fd. The includer has
 * included cmocka.h.
 */
#ifndef COOP_TEST_OPEN_DESCRIPTORS_H
#define COOP_TEST_OPEN_DESCRIPTORS_H

#include <dirent.h>

static inline int open_descriptors(void)
{
    DIR *d = opendir("/proc/self/fd");
    assert_non_null(d);
    int n = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;)
        n += e->d_name[0] != '.';
    closedir(d);
    return n - 1; /* opendir's own */
}

#endif
