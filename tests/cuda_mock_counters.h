/*
 * What tests/mock_cuda_driver.c counts, as its exported mock_cuda_counters()
 * copies them out: one definition for the mock and the test programs that
 * read them (through dlsym), so the two sides cannot drift apart.
 */
#ifndef COOP_TEST_CUDA_MOCK_COUNTERS_H
#define COOP_TEST_CUDA_MOCK_COUNTERS_H

typedef struct cuda_mock_counters {
    long mapped_bytes;          /* physical bytes currently mapped */
    long live_handles;          /* cuMemCreate minus cuMemRelease */
    long live_events;           /* cuEventCreate minus cuEventDestroy */
    long live_segments;         /* cuMemAlloc minus cuMemFree */
    long syncs;                 /* cuCtxSynchronize calls */
    long unsafe_releases;       /* unmap / cuMemFree while work was queued */
    long no_context;            /* calls made without a current context */
    long retained;              /* primary context references */
    long accessible_bytes;      /* cuMemMap'ed bytes opened by cuMemSetAccess */
    long access_calls;          /* cuMemSetAccess calls */
    long event_creates;         /* cuEventCreate calls */
    long live_reservations;     /* cuMemAddressReserve minus cuMemAddressFree */
    long live_streams;          /* cuStreamCreate minus cuStreamDestroy */
    long deadlocks;             /* synchronizations that would never return */
    long event_waits;           /* cuEventSynchronize calls */
    long refused_address_frees; /* cuMemAddressFree refused (a mapping left in the range, ...) */
    /* calls of every entry point but cuGetErrorName / cuGetErrorString
     * (releasing ones too): a test that must make no driver call (a forked
     * child's) compares it before and after */
    long entry_calls;
} cuda_mock_counters;

#endif
