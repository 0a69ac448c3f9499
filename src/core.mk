# core: status, metadata heap, backends (host, fault wrapper), arena, pool
libcoop_la_SOURCES += src/status.c src/abi.c src/status.h src/utf8.h src/backend.h src/stat.h src/saturating.h src/growable.h src/byte_size.h \
	src/meta.c src/meta.h src/free_index.c src/free_index.h src/hot_path.h \
	src/addr_map.c src/addr_map.h src/page_map.c src/page_map.h \
	src/arena.c src/arena_check.c src/arena.h \
	src/backend_host.c src/backend_fault.c \
	src/pool.c src/pool_streams.c src/pool_stats.c src/pool_check.c src/pool_internal.h src/pool_lock.h \
	src/pool_fork.c src/pool_fork.h
coop_SOURCES += src/cli/cmd_bench.c src/cli/bench_floor.c src/cli/bench_floor.h src/cli/bench_median.h \
	src/cli/bench_rng.h

# Unit tests per module, the randomized model test, the threaded stress test
# and the fault sweep.
if HAVE_CMOCKA
check_PROGRAMS += tests/meta_test tests/free_index_test tests/addr_map_test \
	tests/page_map_test tests/backend_host_test tests/backend_fault_test \
	tests/arena_test tests/pool_test tests/random_model_test tests/stress_test \
	tests/fault_sweep_test tests/stats_semantics_test
TESTS += tests/meta_test tests/free_index_test tests/addr_map_test \
	tests/page_map_test tests/backend_host_test tests/backend_fault_test \
	tests/arena_test tests/pool_test tests/random_model_test tests/stress_test \
	tests/fault_sweep_test tests/stats_semantics_test
tests_meta_test_SOURCES = tests/meta_test.c
tests_meta_test_CFLAGS = $(TESTCFLAGS)
tests_meta_test_LDADD = $(TESTLIBS)
tests_meta_test_LDFLAGS = $(TESTLDFLAGS)
tests_free_index_test_SOURCES = tests/free_index_test.c
tests_free_index_test_CFLAGS = $(TESTCFLAGS)
tests_free_index_test_LDADD = $(TESTLIBS)
tests_free_index_test_LDFLAGS = $(TESTLDFLAGS)
tests_addr_map_test_SOURCES = tests/addr_map_test.c
tests_addr_map_test_CFLAGS = $(TESTCFLAGS)
tests_addr_map_test_LDADD = $(TESTLIBS)
tests_addr_map_test_LDFLAGS = $(TESTLDFLAGS)
tests_page_map_test_SOURCES = tests/page_map_test.c
tests_page_map_test_CFLAGS = $(TESTCFLAGS)
tests_page_map_test_LDADD = $(TESTLIBS)
tests_page_map_test_LDFLAGS = $(TESTLDFLAGS)
tests_backend_host_test_SOURCES = tests/backend_host_test.c
tests_backend_host_test_CFLAGS = $(TESTCFLAGS)
tests_backend_host_test_LDADD = $(TESTLIBS)
tests_backend_host_test_LDFLAGS = $(TESTLDFLAGS)
tests_backend_fault_test_SOURCES = tests/backend_fault_test.c
tests_backend_fault_test_CFLAGS = $(TESTCFLAGS)
tests_backend_fault_test_LDADD = $(TESTLIBS)
tests_backend_fault_test_LDFLAGS = $(TESTLDFLAGS)
tests_arena_test_SOURCES = tests/arena_test.c
tests_arena_test_CFLAGS = $(TESTCFLAGS)
tests_arena_test_LDADD = $(TESTLIBS)
tests_arena_test_LDFLAGS = $(TESTLDFLAGS)
tests_pool_test_SOURCES = tests/pool_test.c
tests_pool_test_CFLAGS = $(TESTCFLAGS)
tests_pool_test_LDADD = $(TESTLIBS)
tests_pool_test_LDFLAGS = $(TESTLDFLAGS)
tests_stats_semantics_test_SOURCES = tests/stats_semantics_test.c
tests_stats_semantics_test_CFLAGS = $(TESTCFLAGS)
tests_stats_semantics_test_LDADD = $(TESTLIBS)
tests_stats_semantics_test_LDFLAGS = $(TESTLDFLAGS)
tests_random_model_test_SOURCES = tests/random_model_test.c
tests_random_model_test_CFLAGS = $(TESTCFLAGS)
tests_random_model_test_LDADD = $(TESTLIBS)
tests_random_model_test_LDFLAGS = $(TESTLDFLAGS)
tests_stress_test_SOURCES = tests/stress_test.c
tests_stress_test_CFLAGS = $(TESTCFLAGS)
tests_stress_test_LDADD = $(TESTLIBS)
tests_stress_test_LDFLAGS = $(TESTLDFLAGS)
tests_fault_sweep_test_SOURCES = tests/fault_sweep_test.c
tests_fault_sweep_test_CFLAGS = $(TESTCFLAGS)
tests_fault_sweep_test_LDADD = $(TESTLIBS)
tests_fault_sweep_test_LDFLAGS = $(TESTLDFLAGS)
endif

# cache misses of coop bench's pair under valgrind (built by make check, not a
# test; commands in its header): tests/arena_pairs LIVE PAIRS MAX_BYTES
check_PROGRAMS += tests/arena_pairs
tests_arena_pairs_SOURCES = tests/arena_pairs.c
tests_arena_pairs_CFLAGS = $(TESTCFLAGS)
tests_arena_pairs_LDADD = libcoop.la -lm
tests_arena_pairs_LDFLAGS = -static
# tests/pending_pairs PENDING: pairs with frees pending on a busy stream
# (docs/measured-host.md, "Pending frees"); not a test either
check_PROGRAMS += tests/pending_pairs
tests_pending_pairs_SOURCES = tests/pending_pairs.c
tests_pending_pairs_CFLAGS = $(TESTCFLAGS)
tests_pending_pairs_LDADD = libcoop.la
tests_pending_pairs_LDFLAGS = -static

# coop bench's and its floor's output rows (fields and layouts, never speed)
TESTS += tests/bench_cli_test.sh
EXTRA_DIST += tests/bench_cli_test.sh
# its helpers: seeding (bench_rng.h), the median (bench_median.h)
if HAVE_CMOCKA
check_PROGRAMS += tests/bench_helpers_test
TESTS += tests/bench_helpers_test
tests_bench_helpers_test_SOURCES = tests/bench_helpers_test.c
tests_bench_helpers_test_CFLAGS = $(TESTCFLAGS)
tests_bench_helpers_test_LDADD = $(TESTLIBS)
tests_bench_helpers_test_LDFLAGS = $(TESTLDFLAGS)
endif

# status strings, the version and the per-thread last error (src/status.c)
if HAVE_CMOCKA
check_PROGRAMS += tests/status_test
TESTS += tests/status_test
tests_status_test_SOURCES = tests/status_test.c tests/utf8_valid.h
tests_status_test_CFLAGS = $(TESTCFLAGS)
tests_status_test_LDADD = $(TESTLIBS)
tests_status_test_LDFLAGS = $(TESTLDFLAGS)
endif

# growable arrays (src/growable.h): doubling, and sizes that would wrap refused
if HAVE_CMOCKA
check_PROGRAMS += tests/growable_test
TESTS += tests/growable_test
tests_growable_test_SOURCES = tests/growable_test.c
tests_growable_test_CFLAGS = $(TESTCFLAGS)
tests_growable_test_LDADD = $(TESTLIBS)
tests_growable_test_LDFLAGS = $(TESTLDFLAGS)
endif
# tests/segment_pressure SEGMENTS REFUSED: a pool of many fixed segments,
# growing, then refusing requests (docs/measured-host.md, "A full pool
# under eviction"); not a test either
check_PROGRAMS += tests/segment_pressure
tests_segment_pressure_SOURCES = tests/segment_pressure.c
tests_segment_pressure_CFLAGS = $(TESTCFLAGS)
tests_segment_pressure_LDADD = libcoop.la
tests_segment_pressure_LDFLAGS = -static
# tests/stream_reuse_measure [OPS [SEED [CAPACITY_MIB]]]: out-of-memory
# counts of a multi-stream workload, deterministic per seed (docs/
# measured-host.md, "Free blocks between streams"); not a test either
check_PROGRAMS += tests/stream_reuse_measure
tests_stream_reuse_measure_SOURCES = tests/stream_reuse_measure.c
tests_stream_reuse_measure_CFLAGS = $(TESTCFLAGS)
tests_stream_reuse_measure_LDADD = libcoop.la -lm
tests_stream_reuse_measure_LDFLAGS = -static

# A process's lifecycle with pools alive: fork (with threads inside the
# allocator), exit, late frees, short-lived threads; each case in a child.
if HAVE_CMOCKA
check_PROGRAMS += tests/lifecycle_test
TESTS += tests/lifecycle_test
tests_lifecycle_test_SOURCES = tests/lifecycle_test.c tests/cases_in_children.h \
	tests/lifecycle_child.h
tests_lifecycle_test_CFLAGS = $(TESTCFLAGS)
tests_lifecycle_test_LDADD = $(TESTLIBS)
tests_lifecycle_test_LDFLAGS = $(TESTLDFLAGS)
endif

# dlclose of libcoop: loads the built shared library as ctypes does, so it
# does not link libcoop (the library must exist first: libcoop.la)
if HAVE_CMOCKA
check_PROGRAMS += tests/lifecycle_unload_test
TESTS += tests/lifecycle_unload_test
tests_lifecycle_unload_test_SOURCES = tests/lifecycle_unload_test.c tests/cases_in_children.h \
	tests/lifecycle_child.h
tests_lifecycle_unload_test_CFLAGS = $(TESTCFLAGS) \
	-DCOOP_LIB_PATH='"$(abs_top_builddir)/.libs/libcoop.so"'
tests_lifecycle_unload_test_LDADD = $(CMOCKA_LIBS) -lpthread
tests_lifecycle_unload_test_DEPENDENCIES = libcoop.la
endif
