# trace readers and writers (one reader per format; see src/trace/trace.h)
libcooptools_la_SOURCES += src/trace/event.h src/trace/trace.h src/trace/trace_free.c \
	src/trace/input.h src/trace/input.c \
	src/trace/hash_seed.h src/trace/id_map.h src/trace/id_map.c \
	src/trace/live_ranges.h src/trace/live_ranges.c \
	src/trace/segment_overlap.h src/trace/segment_overlap.c \
	src/trace/builder.h src/trace/builder.c \
	src/trace/text_number.h src/trace/text_number.c \
	src/trace/pickle.h src/trace/pickle.c \
	src/trace/torch_settings.h src/trace/torch_settings.c \
	src/trace/reader_pickle.c src/trace/reader_text.c src/trace/reader_minimalloc.c \
	src/trace/writer_text.c src/trace/detect.c src/trace/spool.c src/trace/spool.h
# src/trace/reader_dtr.c (trace_read_dtr) is listed by its owner's fragment (remat.mk).
coop_SOURCES += src/cli/cmd_convert.c

if HAVE_CMOCKA
check_PROGRAMS += tests/trace_pickle_test
TESTS += tests/trace_pickle_test
tests_trace_pickle_test_SOURCES = tests/trace_pickle_test.c tests/trace_fixture.h \
	tests/fuzz/pickle_same.h
tests_trace_pickle_test_CFLAGS = $(TESTCFLAGS) $(ZLIB_CFLAGS)
tests_trace_pickle_test_LDADD = $(TESTLIBS)
tests_trace_pickle_test_LDFLAGS = $(TESTLDFLAGS)

check_PROGRAMS += tests/trace_text_test
TESTS += tests/trace_text_test
tests_trace_text_test_SOURCES = tests/trace_text_test.c tests/trace_fixture.h
tests_trace_text_test_CFLAGS = $(TESTCFLAGS) $(ZLIB_CFLAGS)
tests_trace_text_test_LDADD = $(TESTLIBS)
tests_trace_text_test_LDFLAGS = $(TESTLDFLAGS)

check_PROGRAMS += tests/trace_minimalloc_test
TESTS += tests/trace_minimalloc_test
tests_trace_minimalloc_test_SOURCES = tests/trace_minimalloc_test.c tests/trace_fixture.h
tests_trace_minimalloc_test_CFLAGS = $(TESTCFLAGS) $(ZLIB_CFLAGS)
tests_trace_minimalloc_test_LDADD = $(TESTLIBS)
tests_trace_minimalloc_test_LDFLAGS = $(TESTLDFLAGS)

check_PROGRAMS += tests/trace_read_test
TESTS += tests/trace_read_test
tests_trace_read_test_SOURCES = tests/trace_read_test.c tests/trace_fixture.h \
	tests/open_descriptors.h
tests_trace_read_test_CFLAGS = $(TESTCFLAGS) $(ZLIB_CFLAGS)
tests_trace_read_test_LDADD = $(TESTLIBS)
tests_trace_read_test_LDFLAGS = $(TESTLDFLAGS)

check_PROGRAMS += tests/trace_workloads_test
TESTS += tests/trace_workloads_test
tests_trace_workloads_test_SOURCES = tests/trace_workloads_test.c tests/trace_fixture.h
tests_trace_workloads_test_CFLAGS = $(TESTCFLAGS) $(ZLIB_CFLAGS)
tests_trace_workloads_test_LDADD = $(TESTLIBS)
tests_trace_workloads_test_LDFLAGS = $(TESTLDFLAGS)

check_PROGRAMS += tests/trace_id_map_test
TESTS += tests/trace_id_map_test
tests_trace_id_map_test_SOURCES = tests/trace_id_map_test.c
tests_trace_id_map_test_CFLAGS = $(TESTCFLAGS)
tests_trace_id_map_test_LDADD = $(TESTLIBS)
tests_trace_id_map_test_LDFLAGS = $(TESTLDFLAGS)

# linked with the allocation wraps (tests/harden.mk) to fail the array's growth
check_PROGRAMS += tests/live_ranges_test
TESTS += tests/live_ranges_test
tests_live_ranges_test_SOURCES = tests/live_ranges_test.c tests/host_alloc_fault.c \
	tests/host_alloc_fault.h
tests_live_ranges_test_CFLAGS = $(TESTCFLAGS) $(JANSSON_CFLAGS)
tests_live_ranges_test_LDADD = $(TESTLIBS) $(JANSSON_LIBS)
tests_live_ranges_test_LDFLAGS = $(TESTLDFLAGS) $(HOST_ALLOC_WRAP)
endif
TESTS += tests/trace_convert_test.sh
if HAVE_PYTHON
TESTS += tests/trace_pickle_python_test.py
endif
EXTRA_DIST += tests/data/example.trace tests/trace_convert_test.sh tests/trace_pickle_python_test.py

# reader speed (built by make check, not a test): tests/trace_read_bench FILE...
check_PROGRAMS += tests/trace_read_bench
tests_trace_read_bench_SOURCES = tests/trace_read_bench.c
tests_trace_read_bench_LDADD = libcooptools.la libcoop.la
tests_trace_read_bench_LDFLAGS = -static
