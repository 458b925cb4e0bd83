# tests/: TAP everywhere, through automake's tap-driver.
LOG_DRIVER = env AM_TAP_AWK='$(AWK)' $(SHELL) $(top_srcdir)/build-aux/tap-driver.sh
TEST_EXTENSIONS = .test
TEST_LOG_DRIVER = $(LOG_DRIVER)
AM_TESTS_ENVIRONMENT = \
	top_srcdir='$(abs_top_srcdir)' top_builddir='$(abs_top_builddir)' \
	PATH='$(abs_top_builddir)/engine:$(abs_top_builddir)/worker:$(abs_top_builddir)/tools:'"$$PATH" \
	PG_BINDIR='$(PG_BINDIR)'; export top_srcdir top_builddir PATH PG_BINDIR;

noinst_LIBRARIES += tests/libtap.a
tests_libtap_a_SOURCES = tests/tap.c tests/tap.h
TAP_LIBS = tests/libtap.a

EXTRA_DIST += tests/lib tests/sql tests/integration

include tests/sql.mk
include tests/engine.mk
include tests/worker.mk
include tests/sandbox.mk
include tests/checkpoint.mk
include tests/cli.mk
include tests/workflow.mk
