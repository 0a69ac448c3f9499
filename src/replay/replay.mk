# replay: policies side by side (src/replay), the coop replay command, tests
libcooptools_la_SOURCES += \
	src/replay/block_tree.c src/replay/block_tree.h \
	src/replay/block_map.c src/replay/block_map.h \
	src/replay/engine.c src/replay/engine.h \
	src/replay/recorded.c src/replay/recorded.h \
	src/replay/report.c src/replay/report.h \
	src/replay/timeline.c src/replay/timeline.h \
	src/replay/policy.h \
	src/replay/policy_ideal.c \
	src/replay/policy_jemalloc.c
coop_SOURCES += src/cli/cmd_replay.c
