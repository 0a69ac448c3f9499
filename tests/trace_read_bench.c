/*
 * Reader speed: reads each file given REPEAT times (default 20) with
 * trace_read and prints the best time, events per second and decompressed
 * bytes per second. Built by make check (or make tests/trace_read_bench).
 * Usage: tests/trace_read_bench [-n REPEAT] FILE...
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "coop.h"
#include "trace/input.h"
#include "trace/trace.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    int repeat = 20, first = 1;
    if (argc > 2 && !strcmp(argv[1], "-n")) {
        repeat = atoi(argv[2]);
        first = 3;
    }
    if (first >= argc || repeat < 1) {
        fprintf(stderr, "usage: %s [-n REPEAT] FILE...\n", argv[0]);
        return 2;
    }
    printf("%-48s %-10s %8s %10s %14s %10s\n", "file", "format", "events", "best ms", "events/s",
           "MB/s");
    for (int i = first; i < argc; i++) {
        trace_format format;
        unsigned char *data;
        size_t len;
        if (trace_detect_format(argv[i], &format) != COOP_OK ||
            trace_input_slurp(argv[i], &data, &len) != COOP_OK) {
            fprintf(stderr, "%s\n", coop_last_error());
            return 1;
        }
        free(data);
        double best = 1e30;
        size_t events = 0;
        for (int r = 0; r < repeat; r++) {
            trace t;
            double t0 = now();
            if (trace_read(argv[i], &t) != COOP_OK) {
                fprintf(stderr, "%s\n", coop_last_error());
                return 1;
            }
            double dt = now() - t0;
            best = dt < best ? dt : best;
            events = t.num_events;
            trace_free(&t);
        }
        const char *name = strrchr(argv[i], '/') ? strrchr(argv[i], '/') + 1 : argv[i];
        printf("%-48s %-10s %8zu %10.2f %14.0f %10.1f\n", name, trace_format_name(format), events,
               best * 1e3, (double)events / best, (double)len / best / 1e6);
    }
    return 0;
}
