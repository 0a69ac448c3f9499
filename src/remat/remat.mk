# rematerialization simulator
coop_SOURCES += src/cli/cmd_sim.c
