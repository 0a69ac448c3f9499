# trace readers and writers
libcooptools_la_SOURCES += src/trace/event.h
coop_SOURCES += src/cli/cmd_convert.c
libcooptools_la_SOURCES += src/trace/trace_free.c
