# core: status, arena, pool (owned by the core allocator work)
libcoop_la_SOURCES += src/status.c src/status.h src/backend.h src/arena.h
coop_SOURCES += src/cli/cmd_bench.c
