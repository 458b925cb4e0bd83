# tests/sql: pgTAP files for the store, run by pg_prove through one TAP script.
TESTS += tests/integration/sql.test
TESTS += tests/integration/roles.test
