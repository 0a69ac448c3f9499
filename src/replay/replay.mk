# replay: policies side by side (src/replay), the coop replay command, tests
libcooptools_la_SOURCES += \
	src/replay/policy.c src/replay/policy.h \
	src/replay/policy_coop.c \
	src/replay/policy_torch.c src/replay/torch_rules.h \
	src/replay/torch_block.c src/replay/torch_block.h \
	src/replay/policy_torch_expandable.c \
	src/replay/policy_jemalloc.c \
	src/replay/policy_ideal.c \
	src/replay/block_tree.c src/replay/block_tree.h \
	src/replay/block_map.c src/replay/block_map.h \
	src/replay/free_ranges.c src/replay/free_ranges.h \
	src/replay/max_treap.c src/replay/max_treap.h \
	src/replay/engine.c src/replay/engine.h \
	src/replay/recorded.c src/replay/recorded.h \
	src/replay/measure.c src/replay/measure.h \
	src/replay/report.c src/replay/report.h src/utf8.h \
	src/replay/timeline.c src/replay/timeline.h
coop_SOURCES += src/cli/cmd_replay.c

if HAVE_CMOCKA
check_PROGRAMS += tests/replay_policy_test
TESTS += tests/replay_policy_test
tests_replay_policy_test_SOURCES = tests/replay_policy_test.c
tests_replay_policy_test_CFLAGS = $(TESTCFLAGS)
tests_replay_policy_test_LDADD = $(TESTLIBS)
tests_replay_policy_test_LDFLAGS = $(TESTLDFLAGS)
endif

if HAVE_CMOCKA
check_PROGRAMS += tests/replay_max_treap_test
TESTS += tests/replay_max_treap_test
tests_replay_max_treap_test_SOURCES = tests/replay_max_treap_test.c
tests_replay_max_treap_test_CFLAGS = $(TESTCFLAGS)
tests_replay_max_treap_test_LDADD = $(TESTLIBS)
tests_replay_max_treap_test_LDFLAGS = $(TESTLDFLAGS)
check_PROGRAMS += tests/replay_free_ranges_test
TESTS += tests/replay_free_ranges_test
tests_replay_free_ranges_test_SOURCES = tests/replay_free_ranges_test.c
tests_replay_free_ranges_test_CFLAGS = $(TESTCFLAGS)
tests_replay_free_ranges_test_LDADD = $(TESTLIBS)
tests_replay_free_ranges_test_LDFLAGS = $(TESTLDFLAGS)
endif

# the plot script's test needs Debian's python3-matplotlib (it skips without)
TESTS += tests/replay_plot_test.py
EXTRA_DIST += tests/replay_plot_test.py

# tests/replay_steady_trace.py LIVE STEPS [SEED [DIVISOR]]: a steady-state trace for
# measuring how the policies scale with live blocks (tests/README.md, "Replay and the
# simulator"); a tool, not a test
EXTRA_DIST += tests/replay_steady_trace.py

# The bundled traces (coop replay without arguments) are found through the
# source tree, else where make install put them: an installed coop keeps
# working once the tree it was built from is gone.
coop_CPPFLAGS = $(AM_CPPFLAGS) -DCOOP_SRCDIR='"$(abs_top_srcdir)"' \
	-DCOOP_PKGDATADIR='"$(pkgdatadir)"'
tracesdir = $(pkgdatadir)/traces
traces_DATA = traces/bert-train-step.trace.gz traces/densenet121-train-step.trace.gz \
	traces/gpt2-train-step.trace.gz traces/lstm-train-step.trace.gz \
	traces/resnet50-train-step.trace.gz traces/unet-train-step.trace.gz \
	traces/bert-train-step.cuda.pickle.gz traces/densenet121-train-step.cuda.pickle.gz \
	traces/gpt2-train-step.cuda.pickle.gz traces/lstm-train-step.cuda.pickle.gz \
	traces/resnet50-train-step.cuda.pickle.gz traces/unet-train-step.cuda.pickle.gz

if HAVE_CMOCKA
check_PROGRAMS += tests/replay_cli_test tests/replay_snapshot_test
TESTS += tests/replay_cli_test tests/replay_snapshot_test
tests_replay_cli_test_SOURCES = tests/replay_cli_test.c src/cli/cmd_replay.c src/cli/cli_list.c \
	src/cli/cli_getopt.c src/cli/cli_output.c src/cli/cli_inputs.c tests/utf8_valid.h
tests_replay_cli_test_CFLAGS = $(TESTCFLAGS) $(JANSSON_CFLAGS)
tests_replay_cli_test_LDADD = $(TESTLIBS)
tests_replay_cli_test_LDFLAGS = $(TESTLDFLAGS)
tests_replay_snapshot_test_SOURCES = tests/replay_snapshot_test.c
tests_replay_snapshot_test_CFLAGS = $(TESTCFLAGS)
tests_replay_snapshot_test_LDADD = $(TESTLIBS)
tests_replay_snapshot_test_LDFLAGS = $(TESTLDFLAGS)
endif
