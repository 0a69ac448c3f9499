# Hardening tests (included by Makefile.am): the threaded stress test of the
# PyTorch ABI and the fault-injection sweep over a whole replayed trace.
# .ci/run also builds the threaded tests with ThreadSanitizer (HARDEN_TSAN_TESTS).
if HAVE_CMOCKA
check_PROGRAMS += tests/stress_torch_abi_test
TESTS += tests/stress_torch_abi_test
tests_stress_torch_abi_test_SOURCES = tests/stress_torch_abi_test.c
tests_stress_torch_abi_test_CFLAGS = $(TESTCFLAGS)
tests_stress_torch_abi_test_LDADD = $(TESTLIBS)
tests_stress_torch_abi_test_LDFLAGS = $(TESTLDFLAGS)
# the same on pools of segments (no VMM)
check_PROGRAMS += tests/stress_torch_abi_segments_test
TESTS += tests/stress_torch_abi_segments_test
tests_stress_torch_abi_segments_test_SOURCES = tests/stress_torch_abi_test.c
tests_stress_torch_abi_segments_test_CFLAGS = $(TESTCFLAGS) \
	-DSTRESS_TORCH_CONF='"backend:host,capacity:256M,page:64K,vmm:false,segment:1M,history:4096,check:true"'
tests_stress_torch_abi_segments_test_LDADD = $(TESTLIBS)
tests_stress_torch_abi_segments_test_LDFLAGS = $(TESTLDFLAGS)
endif

# every thread-safe call of coop.h beside the others (also run under
# ThreadSanitizer by .ci/run)
if HAVE_CMOCKA
check_PROGRAMS += tests/threads_api_test
TESTS += tests/threads_api_test
tests_threads_api_test_SOURCES = tests/threads_api_test.c
tests_threads_api_test_CFLAGS = $(TESTCFLAGS)
tests_threads_api_test_LDADD = $(TESTLIBS)
tests_threads_api_test_LDFLAGS = $(TESTLDFLAGS)
endif

# two remat contexts on one pool, each on its own thread, beside a thread
# using the pool directly (also run under ThreadSanitizer by .ci/run)
if HAVE_CMOCKA
check_PROGRAMS += tests/remat_threads_test
TESTS += tests/remat_threads_test
tests_remat_threads_test_SOURCES = tests/remat_threads_test.c tests/shadow_values.h
tests_remat_threads_test_CFLAGS = $(TESTCFLAGS)
tests_remat_threads_test_LDADD = $(TESTLIBS)
tests_remat_threads_test_LDFLAGS = $(TESTLDFLAGS)
endif

# one remat context used from two threads at once: refused, never corrupted
# (also run under ThreadSanitizer by .ci/run)
if HAVE_CMOCKA
check_PROGRAMS += tests/remat_claim_test
TESTS += tests/remat_claim_test
tests_remat_claim_test_SOURCES = tests/remat_claim_test.c
tests_remat_claim_test_CFLAGS = $(TESTCFLAGS)
tests_remat_claim_test_LDADD = $(TESTLIBS)
tests_remat_claim_test_LDFLAGS = $(TESTLDFLAGS)
endif

if HAVE_CMOCKA
check_PROGRAMS += tests/fault_replay_test
TESTS += tests/fault_replay_test
tests_fault_replay_test_SOURCES = tests/fault_replay_test.c
tests_fault_replay_test_CFLAGS = $(TESTCFLAGS)
tests_fault_replay_test_LDADD = $(TESTLIBS)
tests_fault_replay_test_LDFLAGS = $(TESTLDFLAGS)
endif

# bad command lines of every coop command
TESTS += tests/cli_errors_test.sh
EXTRA_DIST += tests/cli_errors_test.sh
# every output of the coop command when it cannot be written, and its JSON
# rows on odd names and edge inputs (tests/README.md, "Outputs")
TESTS += tests/cli_outputs_test.sh
EXTRA_DIST += tests/cli_outputs_test.sh
# the coop command with each host allocation of the process failing in turn
# (tests/README.md, "Host out of memory in the CLI"), through an LD_PRELOAD
# module (-rpath: libtool builds a shared object only for an install path)
check_LTLIBRARIES += tests/fail_malloc_shim.la
tests_fail_malloc_shim_la_SOURCES = tests/fail_malloc_shim.c
tests_fail_malloc_shim_la_CFLAGS = $(AM_CFLAGS)
tests_fail_malloc_shim_la_LDFLAGS = -module -avoid-version -shared -rpath /nowhere
TESTS += tests/cli_host_oom_test.sh
EXTRA_DIST += tests/cli_host_oom_test.sh

# the same figures from coop replay / sim / bench / convert run again, without
# ASLR, under another TZ and a ',' locale, from another directory, with the
# inputs in another order (tests/README.md, "Determinism")
TESTS += tests/determinism_test.sh
EXTRA_DIST += tests/determinism_test.sh

# the seed and generators every randomized C test includes (tests/test_seed.h),
# the Python tests' reader of the same variable (tests/coop_test_seed.py), and
# the check that each refuses a malformed COOP_TEST_SEED and echoes a valid one
# (it runs the cmocka programs)
if HAVE_CMOCKA
TESTS += tests/test_seed_test.sh
endif
EXTRA_DIST += tests/test_seed.h tests/test_seed_test.sh tests/coop_test_seed.py

# every host allocation (malloc, calloc, realloc, strdup) of the trace
# readers, the simulator and the remat library failed in turn, with a
# live-block count for leaks (tests/host_alloc_fault.h): the wraps reach
# libcoop and libcooptools because tests link them statically; one program
# each for the readers, the simulator, the remat API and replay's policies
# (tests/host_alloc_sweep.h)
HOST_ALLOC_WRAP = \
	-Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc,--wrap=free,--wrap=strdup,--wrap=aligned_alloc
HOST_ALLOC_SWEEP = tests/host_alloc_sweep.c tests/host_alloc_sweep.h tests/host_alloc_fault.c \
	tests/host_alloc_fault.h
if HAVE_CMOCKA
check_PROGRAMS += tests/host_alloc_readers_test
TESTS += tests/host_alloc_readers_test
tests_host_alloc_readers_test_SOURCES = tests/host_alloc_readers_test.c $(HOST_ALLOC_SWEEP) \
	tests/open_descriptors.h
tests_host_alloc_readers_test_CFLAGS = $(TESTCFLAGS) $(JANSSON_CFLAGS) $(ZLIB_CFLAGS)
tests_host_alloc_readers_test_LDADD = $(TESTLIBS) $(JANSSON_LIBS) $(ZLIB_LIBS)
tests_host_alloc_readers_test_LDFLAGS = $(TESTLDFLAGS) $(HOST_ALLOC_WRAP) -Wl,--wrap=gzdopen
check_PROGRAMS += tests/host_alloc_sim_test
TESTS += tests/host_alloc_sim_test
tests_host_alloc_sim_test_SOURCES = tests/host_alloc_sim_test.c $(HOST_ALLOC_SWEEP)
tests_host_alloc_sim_test_CFLAGS = $(TESTCFLAGS) $(JANSSON_CFLAGS) $(ZLIB_CFLAGS)
tests_host_alloc_sim_test_LDADD = $(TESTLIBS) $(JANSSON_LIBS) $(ZLIB_LIBS)
tests_host_alloc_sim_test_LDFLAGS = $(TESTLDFLAGS) $(HOST_ALLOC_WRAP)
check_PROGRAMS += tests/host_alloc_remat_test
TESTS += tests/host_alloc_remat_test
tests_host_alloc_remat_test_SOURCES = tests/host_alloc_remat_test.c $(HOST_ALLOC_SWEEP)
tests_host_alloc_remat_test_CFLAGS = $(TESTCFLAGS) $(JANSSON_CFLAGS) $(ZLIB_CFLAGS)
tests_host_alloc_remat_test_LDADD = $(TESTLIBS) $(JANSSON_LIBS) $(ZLIB_LIBS)
tests_host_alloc_remat_test_LDFLAGS = $(TESTLDFLAGS) $(HOST_ALLOC_WRAP)
check_PROGRAMS += tests/host_alloc_replay_test
TESTS += tests/host_alloc_replay_test
tests_host_alloc_replay_test_SOURCES = tests/host_alloc_replay_test.c $(HOST_ALLOC_SWEEP)
tests_host_alloc_replay_test_CFLAGS = $(TESTCFLAGS) $(JANSSON_CFLAGS) $(ZLIB_CFLAGS)
tests_host_alloc_replay_test_LDADD = $(TESTLIBS) $(JANSSON_LIBS) $(ZLIB_LIBS)
tests_host_alloc_replay_test_LDFLAGS = $(TESTLDFLAGS) $(HOST_ALLOC_WRAP)
# each out-of-host-memory path of the remat API forced, its message read
# (names the call and the numbers; tests/README.md, "Remat: out of host
# memory")
check_PROGRAMS += tests/remat_host_oom_test
TESTS += tests/remat_host_oom_test
tests_remat_host_oom_test_SOURCES = tests/remat_host_oom_test.c tests/remat_block_fixture.h \
	tests/host_alloc_fault.c tests/host_alloc_fault.h
tests_remat_host_oom_test_CFLAGS = $(TESTCFLAGS) $(JANSSON_CFLAGS)
tests_remat_host_oom_test_LDADD = $(TESTLIBS) $(JANSSON_LIBS)
tests_remat_host_oom_test_LDFLAGS = $(TESTLDFLAGS) $(HOST_ALLOC_WRAP)
endif

# each entry point of the pool and the remat API with its N-th host
# allocation, metadata allocation and backend call failing in turn: the
# refused call must change nothing its caller can see (tests/README.md,
# "Error paths")
if HAVE_CMOCKA
check_PROGRAMS += tests/error_paths_test
TESTS += tests/error_paths_test
tests_error_paths_test_SOURCES = tests/error_paths_test.c tests/host_alloc_fault.c \
	tests/host_alloc_fault.h tests/error_paths_faults.h
tests_error_paths_test_CFLAGS = $(TESTCFLAGS) $(JANSSON_CFLAGS)
tests_error_paths_test_LDADD = $(TESTLIBS) $(JANSSON_LIBS)
tests_error_paths_test_LDFLAGS = $(TESTLDFLAGS) $(HOST_ALLOC_WRAP)
endif

# host metadata stays bounded under repeating workloads of the pool, the
# PyTorch ABI and the remat API (tests/README.md, "Steady state"): the
# allocation functions are wrapped to count live host bytes
if HAVE_CMOCKA
check_PROGRAMS += tests/steady_state_test
TESTS += tests/steady_state_test
tests_steady_state_test_SOURCES = tests/steady_state_test.c
tests_steady_state_test_CFLAGS = $(TESTCFLAGS)
tests_steady_state_test_LDADD = $(TESTLIBS)
tests_steady_state_test_LDFLAGS = $(TESTLDFLAGS) $(HOST_ALLOC_WRAP)
endif

# the same for each entry point of the PyTorch ABI, each (case, fault, N) in
# a child process of its own (the ABI's pools are per process and never
# destroyed)
if HAVE_CMOCKA
check_PROGRAMS += tests/error_paths_torch_test
TESTS += tests/error_paths_torch_test
tests_error_paths_torch_test_SOURCES = tests/error_paths_torch_test.c tests/host_alloc_fault.c \
	tests/host_alloc_fault.h tests/error_paths_faults.h
tests_error_paths_torch_test_CFLAGS = $(TESTCFLAGS) $(JANSSON_CFLAGS)
tests_error_paths_torch_test_LDADD = $(TESTLIBS) $(JANSSON_LIBS)
tests_error_paths_torch_test_LDFLAGS = $(TESTLDFLAGS) $(HOST_ALLOC_WRAP)
endif

# a backend map failing after the remat layer evicted for a tensor (a
# window's, an argmin eviction's): the refusal's words, the pool and the
# victims intact (tests/README.md, "Remat: a backend failure after an
# eviction")
if HAVE_CMOCKA
check_PROGRAMS += tests/remat_backend_fault_test
TESTS += tests/remat_backend_fault_test
tests_remat_backend_fault_test_SOURCES = tests/remat_backend_fault_test.c tests/host_alloc_fault.c \
	tests/host_alloc_fault.h
tests_remat_backend_fault_test_CFLAGS = $(TESTCFLAGS) $(JANSSON_CFLAGS)
tests_remat_backend_fault_test_LDADD = $(TESTLIBS) $(JANSSON_LIBS)
tests_remat_backend_fault_test_LDFLAGS = $(TESTLDFLAGS) $(HOST_ALLOC_WRAP)
endif
