# tests/: sandbox
# The probe runs inside sandboxes, whose seccomp policy refuses the
# personality flags sanitizer runtimes ask for: build it without them.
check_PROGRAMS += tests/sandbox-probe tests/unit/test-sandbox
tests_sandbox_probe_SOURCES = tests/sandbox-probe.c
tests_sandbox_probe_CFLAGS = -std=gnu11 $(WARN_CFLAGS)
tests_sandbox_probe_LDFLAGS =

tests_unit_test_sandbox_SOURCES = tests/unit/test-sandbox.c
tests_unit_test_sandbox_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/worker -I$(top_srcdir)/tests
tests_unit_test_sandbox_LDADD = $(TAP_LIBS) $(WORKER_LIBS) $(CAIRN_LIBS)

TESTS += tests/unit/test-sandbox \
	tests/integration/sandbox-basic.test \
	tests/integration/sandbox-escape.test \
	tests/integration/worker-escape.test
