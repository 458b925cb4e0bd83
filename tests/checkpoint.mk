# tests/: checkpoint
check_PROGRAMS += tests/unit/test-checkpoint
tests_unit_test_checkpoint_SOURCES = tests/unit/test-checkpoint.c
tests_unit_test_checkpoint_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/worker
tests_unit_test_checkpoint_LDADD = $(TAP_LIBS) $(WORKER_LIBS) $(CAIRN_LIBS)
TESTS += tests/unit/test-checkpoint

# The checkpoint benchmark (not a test): run by tools/bench checkpoint.
noinst_PROGRAMS += tools/bench-checkpoint
tools_bench_checkpoint_SOURCES = tools/bench-checkpoint.c
tools_bench_checkpoint_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/worker
tools_bench_checkpoint_LDADD = $(WORKER_LIBS) $(CAIRN_LIBS)

# libFuzzer harness, built by hand (see the file's first comment).
EXTRA_DIST += tests/fuzz/fuzz-checkpoint.c

# Through the store: a TAP program driven by an integration test.
check_PROGRAMS += tests/unit/checkpoint-store
tests_unit_checkpoint_store_SOURCES = tests/unit/checkpoint-store.c
tests_unit_checkpoint_store_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/worker
tests_unit_checkpoint_store_LDADD = $(TAP_LIBS) $(WORKER_LIBS) $(CAIRN_LIBS)
TESTS += tests/integration/checkpoint-store.test

# The worker side, through the whole stack (crash.test stays under 2 minutes).
TESTS += tests/integration/worker-checkpoint.test
TESTS += tests/integration/crash.test
