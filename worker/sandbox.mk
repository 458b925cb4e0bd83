# worker/: sandbox
worker_libcairnworker_a_SOURCES += \
	worker/sandbox.c worker/sandbox.h \
	worker/sandbox_seccomp.c \
	worker/sandbox_cgroup.c worker/sandbox_cgroup.h \
	worker/sandbox_proxy.c worker/sandbox_proxy.h

dist_noinst_SCRIPTS += tools/bench-sandbox
bin_PROGRAMS += tools/cairn-sandbox
tools_cairn_sandbox_SOURCES = tools/cairn-sandbox.c
tools_cairn_sandbox_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/worker
tools_cairn_sandbox_LDADD = $(WORKER_LIBS) $(CAIRN_LIBS)
