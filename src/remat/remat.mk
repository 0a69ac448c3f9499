# src/remat build fragment (included by Makefile.am)
# DTR operator logs: reader (trace layer, owned by the remat work)
libcooptools_la_SOURCES += src/trace/dtr_log.h src/trace/reader_dtr.c \
	src/trace/name_table.h src/trace/name_table.c src/trace/dtr_events.c \
	src/trace/json_alloc.h src/trace/json_alloc.c
# rematerialization simulator
libcooptools_la_SOURCES += src/remat/sim_program.h src/remat/sim_program.c \
	src/remat/sim_runtime.h src/remat/sim_runtime.c \
	src/remat/sim.h src/remat/sim.c src/remat/sim_internal.h src/remat/sim_policy.c \
	src/remat/sim_arena.c src/remat/sim_lib.h src/remat/sim_lib.c \
	src/remat/sim_live.h src/remat/sim_live.c
# libcoop: the remat API (its costs in remat_cost.c and remat_live.c; coop's weight,
# coop_cost.h, shared with the simulator), the window search over the pool's blocks, union-find
libcoop_la_SOURCES += src/remat/window.h src/remat/window.c \
	src/remat/breaker_index.h src/remat/breaker_index.c \
	src/remat/union_find.h src/remat/union_find.c \
	src/remat/coop_cost.h \
	src/remat/remat_internal.h src/remat/remat.c src/remat/remat_evict.c src/remat/remat_cost.c \
	src/remat/remat_live.c src/remat/remat_search_index.c src/remat/remat_collect.c \
	src/remat/remat_message.c
coop_SOURCES += src/cli/cmd_sim.c

if HAVE_CMOCKA
check_PROGRAMS += tests/union_find_test tests/dtr_log_test tests/sim_test tests/sim_reference_test \
	tests/window_test tests/remat_test tests/breaker_index_test tests/remat_cost_test \
	tests/sim_lib_test tests/remat_cache_test tests/sim_live_test tests/remat_live_test \
	tests/remat_collect_test tests/remat_misuse_test tests/sim_outcome_test \
	tests/remat_values_test tests/remat_streams_test tests/remat_degenerate_test \
	tests/remat_example_test tests/remat_failed_calls_test
TESTS += tests/union_find_test tests/dtr_log_test tests/sim_test tests/sim_reference_test \
	tests/window_test tests/remat_test tests/breaker_index_test tests/remat_cost_test \
	tests/sim_lib_test tests/remat_cache_test tests/sim_live_test tests/remat_live_test \
	tests/remat_collect_test tests/remat_misuse_test tests/sim_outcome_test \
	tests/remat_values_test tests/remat_streams_test tests/remat_degenerate_test \
	tests/remat_example_test tests/remat_failed_calls_test
tests_remat_failed_calls_test_SOURCES = tests/remat_failed_calls_test.c tests/remat_block_fixture.h
tests_remat_failed_calls_test_CFLAGS = $(TESTCFLAGS)
tests_remat_failed_calls_test_LDADD = $(TESTLIBS)
tests_remat_failed_calls_test_LDFLAGS = $(TESTLDFLAGS)
tests_remat_example_test_SOURCES = tests/remat_example_test.c
tests_remat_example_test_CFLAGS = $(TESTCFLAGS)
tests_remat_example_test_LDADD = $(TESTLIBS) -lm
tests_remat_example_test_LDFLAGS = $(TESTLDFLAGS)
tests_remat_degenerate_test_SOURCES = tests/remat_degenerate_test.c tests/remat_block_fixture.h
tests_remat_degenerate_test_CFLAGS = $(TESTCFLAGS)
tests_remat_degenerate_test_LDADD = $(TESTLIBS)
tests_remat_degenerate_test_LDFLAGS = $(TESTLDFLAGS)
tests_sim_outcome_test_SOURCES = tests/sim_outcome_test.c
tests_sim_outcome_test_CFLAGS = $(TESTCFLAGS)
tests_sim_outcome_test_LDADD = $(TESTLIBS)
tests_sim_outcome_test_LDFLAGS = $(TESTLDFLAGS)
tests_remat_misuse_test_SOURCES = tests/remat_misuse_test.c tests/remat_block_fixture.h
tests_remat_misuse_test_CFLAGS = $(TESTCFLAGS)
tests_remat_misuse_test_LDADD = $(TESTLIBS) -lpthread
tests_remat_misuse_test_LDFLAGS = $(TESTLDFLAGS)
tests_remat_collect_test_SOURCES = tests/remat_collect_test.c tests/test_seed.h
tests_remat_collect_test_CFLAGS = $(TESTCFLAGS)
tests_remat_collect_test_LDADD = $(TESTLIBS)
tests_remat_collect_test_LDFLAGS = $(TESTLDFLAGS)
tests_remat_live_test_SOURCES = tests/remat_live_test.c tests/remat_block_fixture.h
tests_remat_live_test_CFLAGS = $(TESTCFLAGS)
tests_remat_live_test_LDADD = $(TESTLIBS)
tests_remat_live_test_LDFLAGS = $(TESTLDFLAGS)
tests_sim_live_test_SOURCES = tests/sim_live_test.c
tests_sim_live_test_CFLAGS = $(TESTCFLAGS)
tests_sim_live_test_LDADD = $(TESTLIBS)
tests_sim_live_test_LDFLAGS = $(TESTLDFLAGS)
tests_union_find_test_SOURCES = tests/union_find_test.c
tests_union_find_test_CFLAGS = $(TESTCFLAGS)
tests_union_find_test_LDADD = $(TESTLIBS)
tests_union_find_test_LDFLAGS = $(TESTLDFLAGS)
tests_dtr_log_test_SOURCES = tests/dtr_log_test.c tests/utf8_valid.h
tests_dtr_log_test_CFLAGS = $(TESTCFLAGS) $(ZLIB_CFLAGS)
tests_dtr_log_test_LDADD = $(TESTLIBS) $(ZLIB_LIBS)
tests_dtr_log_test_LDFLAGS = $(TESTLDFLAGS) -Wl,--wrap=name_table_intern
tests_sim_test_SOURCES = tests/sim_test.c
tests_sim_test_CFLAGS = $(TESTCFLAGS)
tests_sim_test_LDADD = $(TESTLIBS)
tests_sim_test_LDFLAGS = $(TESTLDFLAGS)
tests_sim_reference_test_SOURCES = tests/sim_reference_test.c
tests_sim_reference_test_CFLAGS = $(TESTCFLAGS)
tests_sim_reference_test_LDADD = $(TESTLIBS)
tests_sim_reference_test_LDFLAGS = $(TESTLDFLAGS)
tests_window_test_SOURCES = tests/window_test.c
tests_window_test_CFLAGS = $(TESTCFLAGS)
tests_window_test_LDADD = $(TESTLIBS)
tests_window_test_LDFLAGS = $(TESTLDFLAGS)
tests_remat_test_SOURCES = tests/remat_test.c
tests_remat_test_CFLAGS = $(TESTCFLAGS)
tests_remat_test_LDADD = $(TESTLIBS)
tests_remat_test_LDFLAGS = $(TESTLDFLAGS)
tests_breaker_index_test_SOURCES = tests/breaker_index_test.c
tests_breaker_index_test_CFLAGS = $(TESTCFLAGS)
tests_breaker_index_test_LDADD = $(TESTLIBS)
tests_breaker_index_test_LDFLAGS = $(TESTLDFLAGS)
tests_remat_cost_test_SOURCES = tests/remat_cost_test.c tests/remat_block_fixture.h
tests_remat_cost_test_CFLAGS = $(TESTCFLAGS)
tests_remat_cost_test_LDADD = $(TESTLIBS)
tests_remat_cost_test_LDFLAGS = $(TESTLDFLAGS)
tests_sim_lib_test_SOURCES = tests/sim_lib_test.c
tests_sim_lib_test_CFLAGS = $(TESTCFLAGS)
tests_sim_lib_test_LDADD = $(TESTLIBS)
tests_sim_lib_test_LDFLAGS = $(TESTLDFLAGS)
tests_remat_cache_test_SOURCES = tests/remat_cache_test.c
tests_remat_cache_test_CFLAGS = $(TESTCFLAGS)
tests_remat_cache_test_LDADD = $(TESTLIBS)
tests_remat_cache_test_LDFLAGS = $(TESTLDFLAGS)
tests_remat_values_test_SOURCES = tests/remat_values_test.c tests/shadow_values.h
tests_remat_values_test_CFLAGS = $(TESTCFLAGS)
tests_remat_values_test_LDADD = $(TESTLIBS)
tests_remat_values_test_LDFLAGS = $(TESTLDFLAGS)
tests_remat_streams_test_SOURCES = tests/remat_streams_test.c
tests_remat_streams_test_CFLAGS = $(TESTCFLAGS)
tests_remat_streams_test_LDADD = $(TESTLIBS)
tests_remat_streams_test_LDFLAGS = $(TESTLDFLAGS)
endif
TESTS += tests/sim_plot_test.py
EXTRA_DIST += tests/sim_plot_test.py
# the rows docs/remat_*.jsonl record, run again
TESTS += tests/sim_recorded_rows_test.py
EXTRA_DIST += tests/sim_recorded_rows_test.py
# the rows it runs again (make distcheck failed without them in the tarball)
EXTRA_DIST += docs/remat_arena.jsonl docs/remat_arena_own.jsonl docs/remat_heldout.jsonl \
	docs/remat_heldout2.jsonl docs/remat_ideal.jsonl
# coop sim --json fields of both engines, --no-min-ratio
TESTS += tests/sim_cli_test.sh
EXTRA_DIST += tests/sim_cli_test.sh tests/data/sim_evict_once.jsonl tests/data/sim_two_holes.jsonl
# a measuring tool, built by make check so that it keeps compiling (not a
# test; commands in its header): tests/remat_loop_memory STEPS POLICY MODE
check_PROGRAMS += tests/remat_loop_memory
tests_remat_loop_memory_SOURCES = tests/remat_loop_memory.c
tests_remat_loop_memory_CFLAGS = $(TESTCFLAGS)
tests_remat_loop_memory_LDADD = libcoop.la
tests_remat_loop_memory_LDFLAGS = -static

# tests/remat_pressure vmm|segments TENSORS POLICY: searches on a full pool,
# each evicting 1,024 small tensors for a large one (docs/measured-host.md,
# "Speed");
# built by make check, not a test
check_PROGRAMS += tests/remat_pressure
tests_remat_pressure_SOURCES = tests/remat_pressure.c
tests_remat_pressure_CFLAGS = $(TESTCFLAGS)
tests_remat_pressure_LDADD = libcoop.la
tests_remat_pressure_LDFLAGS = -static
