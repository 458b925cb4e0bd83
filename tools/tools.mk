# tools/: the cairn command-line client and the project's scripts.
bin_PROGRAMS += tools/cairn
tools_cairn_SOURCES = \
	tools/cairn.c tools/cairn.h \
	tools/client.c tools/client.h \
	tools/cmd_runs.c tools/cmd_steps.c tools/cmd_admin.c \
	tools/cmd_workflow.c tools/cmd_workflow.h \
	tools/dev.c
tools_cairn_LDADD = $(CAIRN_LIBS)
dist_noinst_SCRIPTS += tools/setup tools/quickstart tools/check
EXTRA_DIST += .ci/run
