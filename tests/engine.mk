# tests/: engine — cairnd over real HTTP against a throwaway cluster, and
# the config table parser.
TESTS += \
	tests/integration/api-submit.test \
	tests/integration/api-runs.test \
	tests/integration/api-flow.test \
	tests/integration/api-duties.test \
	tests/unit/test-config

check_PROGRAMS += tests/unit/test-config
tests_unit_test_config_SOURCES = tests/unit/test-config.c
tests_unit_test_config_LDADD = $(TAP_LIBS) $(CAIRN_LIBS)

TESTS += tests/unit/test-cron
check_PROGRAMS += tests/unit/test-cron
tests_unit_test_cron_SOURCES = tests/unit/test-cron.c
tests_unit_test_cron_LDADD = $(TAP_LIBS) $(CAIRN_LIBS)

check_PROGRAMS += tests/webhook-receiver
tests_webhook_receiver_SOURCES = tests/webhook-receiver.c
tests_webhook_receiver_LDADD = $(EVENT_LIBS)

TESTS += \
	tests/integration/api-workflows.test \
	tests/integration/api-schedules.test \
	tests/integration/api-webhooks.test
