# Fuzzing (included by Makefile.am). `make fuzz` builds the libFuzzer
# harnesses tests/fuzz/fuzz_*.c into tests/fuzz/bin/ with $(FUZZ_CC) (clang,
# -fsanitize=fuzzer,address,undefined; configure finds it, the main build
# keeps $(CC)); scripts/fuzz.sh SECONDS runs them. make check replays the
# seed corpora and every input that once crashed a fuzzer through the same
# harnesses built with $(CC) and a plain driver (tests/fuzz/replay_main.c).
FUZZ_NAMES = pickle text minimalloc dtr trace_read alloc_conf api sim policies
FUZZ_LIBRARY_FILES = $(libcoop_la_SOURCES) $(libcooptools_la_SOURCES)

fuzz:
	@if test -z "$(FUZZ_CC)"; then \
	  echo "make fuzz: no C compiler with -fsanitize=fuzzer was found by configure."; \
	  echo "  Install clang and libFuzzer (Debian: apt-get install clang libclang-rt-14-dev)"; \
	  echo "  and re-run configure, or name one: ./configure FUZZ_CC=clang-14"; \
	  exit 1; fi
	$(AM_V_at)$(SHELL) $(srcdir)/tests/fuzz/build.sh "$(FUZZ_CC)" "$(srcdir)" tests/fuzz/bin \
	  "$(JEMALLOC_CFLAGS) $(ZLIB_CFLAGS) $(JANSSON_CFLAGS) $(CUDA_CPPFLAGS)" \
	  "$(JEMALLOC_LIBS) $(ZLIB_LIBS) $(JANSSON_LIBS) $(LIBS)" $(FUZZ_LIBRARY_FILES)
.PHONY: fuzz

clean-local: clean-fuzz
clean-fuzz:
	-rm -rf tests/fuzz/bin
.PHONY: clean-fuzz

if HAVE_CMOCKA
FUZZ_REPLAYS = tests/fuzz/replay_pickle tests/fuzz/replay_text \
	tests/fuzz/replay_minimalloc tests/fuzz/replay_dtr tests/fuzz/replay_trace_read \
	tests/fuzz/replay_alloc_conf tests/fuzz/replay_api tests/fuzz/replay_sim \
	tests/fuzz/replay_policies
check_PROGRAMS += $(FUZZ_REPLAYS)
FUZZ_REPLAY_CFLAGS = $(AM_CFLAGS) -I$(top_srcdir)/tests/fuzz
FUZZ_REPLAY_LIBS = libcooptools.la libcoop.la
tests_fuzz_replay_pickle_SOURCES = tests/fuzz/fuzz_pickle.c tests/fuzz/replay_main.c
tests_fuzz_replay_pickle_CFLAGS = $(FUZZ_REPLAY_CFLAGS)
tests_fuzz_replay_pickle_LDADD = $(FUZZ_REPLAY_LIBS)
tests_fuzz_replay_pickle_LDFLAGS = -static
tests_fuzz_replay_text_SOURCES = tests/fuzz/fuzz_text.c tests/fuzz/replay_main.c
tests_fuzz_replay_text_CFLAGS = $(FUZZ_REPLAY_CFLAGS)
tests_fuzz_replay_text_LDADD = $(FUZZ_REPLAY_LIBS)
tests_fuzz_replay_text_LDFLAGS = -static
tests_fuzz_replay_minimalloc_SOURCES = tests/fuzz/fuzz_minimalloc.c tests/fuzz/replay_main.c
tests_fuzz_replay_minimalloc_CFLAGS = $(FUZZ_REPLAY_CFLAGS)
tests_fuzz_replay_minimalloc_LDADD = $(FUZZ_REPLAY_LIBS)
tests_fuzz_replay_minimalloc_LDFLAGS = -static
tests_fuzz_replay_dtr_SOURCES = tests/fuzz/fuzz_dtr.c tests/fuzz/replay_main.c
tests_fuzz_replay_dtr_CFLAGS = $(FUZZ_REPLAY_CFLAGS)
tests_fuzz_replay_dtr_LDADD = $(FUZZ_REPLAY_LIBS)
tests_fuzz_replay_dtr_LDFLAGS = -static
tests_fuzz_replay_trace_read_SOURCES = tests/fuzz/fuzz_trace_read.c tests/fuzz/replay_main.c
tests_fuzz_replay_trace_read_CFLAGS = $(FUZZ_REPLAY_CFLAGS)
tests_fuzz_replay_trace_read_LDADD = $(FUZZ_REPLAY_LIBS)
tests_fuzz_replay_trace_read_LDFLAGS = -static
tests_fuzz_replay_alloc_conf_SOURCES = tests/fuzz/fuzz_alloc_conf.c tests/fuzz/replay_main.c
tests_fuzz_replay_alloc_conf_CFLAGS = $(FUZZ_REPLAY_CFLAGS)
tests_fuzz_replay_alloc_conf_LDADD = $(FUZZ_REPLAY_LIBS)
tests_fuzz_replay_alloc_conf_LDFLAGS = -static
tests_fuzz_replay_api_SOURCES = tests/fuzz/fuzz_api.c tests/fuzz/replay_main.c
tests_fuzz_replay_api_CFLAGS = $(FUZZ_REPLAY_CFLAGS)
tests_fuzz_replay_api_LDADD = $(FUZZ_REPLAY_LIBS)
tests_fuzz_replay_api_LDFLAGS = -static
tests_fuzz_replay_sim_SOURCES = tests/fuzz/fuzz_sim.c tests/fuzz/replay_main.c
tests_fuzz_replay_sim_CFLAGS = $(FUZZ_REPLAY_CFLAGS)
tests_fuzz_replay_sim_LDADD = $(FUZZ_REPLAY_LIBS)
tests_fuzz_replay_sim_LDFLAGS = -static
tests_fuzz_replay_policies_SOURCES = tests/fuzz/fuzz_policies.c tests/fuzz/replay_main.c
tests_fuzz_replay_policies_CFLAGS = $(FUZZ_REPLAY_CFLAGS)
tests_fuzz_replay_policies_LDADD = $(FUZZ_REPLAY_LIBS)
tests_fuzz_replay_policies_LDFLAGS = -static
TESTS += tests/fuzz/replay_corpora.sh
# what replay_corpora.sh writes, one output per harness (make distcheck wants it cleaned;
# the shell of `make clean`'s rm expands the pattern)
CLEANFILES += tests/fuzz/replay_*.out
endif
EXTRA_DIST += tests/fuzz/replay_corpora.sh tests/fuzz/build.sh tests/fuzz/fuzz_scratch.h tests/fuzz/fuzz_input.h \
	tests/fuzz/fuzz_reader.h tests/fuzz/pickle_same.h tests/fuzz/coverage_ignore.txt tests/fuzz/corpus tests/fuzz/regressions scripts/fuzz.sh \
	tests/README.md
