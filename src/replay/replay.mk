# replay: policies side by side
coop_SOURCES += src/cli/cmd_replay.c
