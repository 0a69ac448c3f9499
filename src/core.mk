# core: status, metadata heap, backends (host, fault wrapper), arena, pool
libcoop_la_SOURCES += src/status.c src/status.h src/backend.h src/stat.h \
	src/meta.c src/meta.h src/free_index.c src/free_index.h \
	src/addr_map.c src/addr_map.h src/page_map.c src/page_map.h \
	src/arena.c src/arena_check.c src/arena.h \
	src/backend_host.c src/backend_fault.c \
	src/pool.c src/pool_stats.c src/pool_check.c src/pool_internal.h
coop_SOURCES += src/cli/cmd_bench.c

if HAVE_CMOCKA
check_PROGRAMS += tests/pool_test
TESTS += tests/pool_test
tests_pool_test_SOURCES = tests/pool_test.c
tests_pool_test_CFLAGS = $(TESTCFLAGS)
tests_pool_test_LDADD = $(TESTLIBS)
tests_pool_test_LDFLAGS = $(TESTLDFLAGS)
endif

if HAVE_CMOCKA
check_PROGRAMS += tests/random_model_test
TESTS += tests/random_model_test
tests_random_model_test_SOURCES = tests/random_model_test.c
tests_random_model_test_CFLAGS = $(TESTCFLAGS)
tests_random_model_test_LDADD = $(TESTLIBS)
tests_random_model_test_LDFLAGS = $(TESTLDFLAGS)
endif
