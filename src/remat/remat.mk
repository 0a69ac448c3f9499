# src/remat build fragment (included by Makefile.am)
# DTR operator logs: reader (trace layer, owned by the remat work)
libcooptools_la_SOURCES += src/trace/dtr_log.h src/trace/reader_dtr.c \
	src/trace/name_table.h src/trace/name_table.c
# rematerialization simulator
libcooptools_la_SOURCES += src/remat/union_find.h src/remat/union_find.c \
	src/remat/sim_program.h src/remat/sim_program.c \
	src/remat/sim_runtime.h src/remat/sim_runtime.c \
	src/remat/sim.h src/remat/sim.c
coop_SOURCES += src/cli/cmd_sim.c
