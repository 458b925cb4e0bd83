# tests/: cli: the cairn CLI and end-to-end runs through it, on real stacks.
TESTS += \
	tests/integration/cli-submit.test \
	tests/integration/cli-dev.test \
	tests/integration/e2e-dag.test \
	tests/integration/e2e-approval.test \
	tests/integration/e2e-sleep-cancel.test \
	tests/integration/e2e-idempotency.test \
	tests/integration/e2e-agent.test \
	tests/integration/e2e-pipeline.test \
	tests/integration/e2e-control.test
