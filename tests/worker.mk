# tests/: worker
check_PROGRAMS += tests/unit/test-collect
tests_unit_test_collect_SOURCES = tests/unit/test-collect.c
tests_unit_test_collect_LDADD = worker/libcairnworker.a $(TAP_LIBS) $(CAIRN_LIBS)
TESTS += tests/unit/test-collect \
	tests/integration/worker-basic.test \
	tests/integration/worker-failures.test \
	tests/integration/worker-crash.test \
	tests/integration/worker-drain.test \
	tests/integration/worker-liveness.test \
	tests/integration/worker-secrets.test \
	tests/integration/worker-limits.test \
	tests/integration/worker-agent.test
