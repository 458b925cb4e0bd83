# tests/sql: pgTAP
