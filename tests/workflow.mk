# tests/: workflow model (engine/workflow.c) and the duration/size helpers.
check_PROGRAMS += tests/unit/test-workflow
TESTS += tests/unit/test-workflow
tests_unit_test_workflow_SOURCES = tests/unit/test-workflow.c
tests_unit_test_workflow_LDADD = $(TAP_LIBS) $(CAIRN_LIBS)

# libFuzzer harness, built by hand (see the comment at its top).
EXTRA_DIST += tests/fuzz/fuzz-workflow.c
