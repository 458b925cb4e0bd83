# tests/: workflow model (engine/workflow.c) and the core helpers (engine/util.c).
check_PROGRAMS += tests/unit/test-workflow tests/unit/test-util
TESTS += tests/unit/test-workflow tests/unit/test-util
tests_unit_test_workflow_SOURCES = tests/unit/test-workflow.c
tests_unit_test_workflow_LDADD = $(TAP_LIBS) $(CAIRN_LIBS)
tests_unit_test_util_SOURCES = tests/unit/test-util.c
tests_unit_test_util_LDADD = $(TAP_LIBS) $(CAIRN_LIBS)

# libFuzzer harness, built by hand (see the comment at its top).
EXTRA_DIST += tests/fuzz/fuzz-workflow.c
