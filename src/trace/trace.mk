# trace readers and writers (one reader per format; see src/trace/trace.h)
libcooptools_la_SOURCES += src/trace/event.h src/trace/trace.h src/trace/trace_free.c \
	src/trace/input.h src/trace/input.c \
	src/trace/id_map.h src/trace/id_map.c \
	src/trace/builder.h src/trace/builder.c \
	src/trace/text_number.h src/trace/text_number.c \
	src/trace/pickle.h src/trace/pickle.c \
	src/trace/reader_pickle.c src/trace/reader_text.c src/trace/reader_minimalloc.c \
	src/trace/writer_text.c src/trace/detect.c
# src/trace/reader_dtr.c (trace_read_dtr) is listed by its owner's fragment (remat.mk).
coop_SOURCES += src/cli/cmd_convert.c
