/* migrate: runs the embedded migrations in order, each once. Blocking
 * libpq: only the CLI and tests call it, never a daemon's event loop. */
#include "migrate.h"

#include <stdio.h>
#include <string.h>

#define MIGRATE_LOCK_KEY "7428061312"

static int exec_ok(PGconn *conn, const char *sql, char *err, size_t errlen, const char *what)
{
	PGresult *res = PQexec(conn, sql);
	ExecStatusType st = PQresultStatus(res);
	int rc = 0;

	if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
		snprintf(err, errlen, "%s: %s", what, PQresultErrorMessage(res));
		/* drop the trailing newline libpq adds */
		size_t n = strlen(err);
		if (n && err[n - 1] == '\n')
			err[n - 1] = '\0';
		rc = -1;
	}
	PQclear(res);
	return rc;
}

static int is_applied(PGconn *conn, const char *name, char *err, size_t errlen)
{
	const char *params[1] = { name };
	PGresult *res = PQexecParams(conn,
		"SELECT 1 FROM cairn.schema_migrations WHERE name = $1", 1, NULL, params,
		NULL, NULL, 0);
	int rc;

	if (PQresultStatus(res) != PGRES_TUPLES_OK) {
		snprintf(err, errlen, "could not read cairn.schema_migrations: %s",
			 PQresultErrorMessage(res));
		rc = -1;
	} else {
		rc = PQntuples(res) > 0;
	}
	PQclear(res);
	return rc;
}

static int apply_one(PGconn *conn, const struct migration_file *m, char *err, size_t errlen)
{
	const char *params[1] = { m->name };
	char what[160];
	PGresult *res;

	if (exec_ok(conn, "BEGIN", err, errlen, "could not begin") < 0)
		return -1;
	snprintf(what, sizeof(what), "migration \"%s\" failed", m->name);
	if (exec_ok(conn, m->sql, err, errlen, what) < 0)
		goto fail;
	res = PQexecParams(conn, "INSERT INTO cairn.schema_migrations (name) VALUES ($1)",
			   1, NULL, params, NULL, NULL, 0);
	if (PQresultStatus(res) != PGRES_COMMAND_OK) {
		snprintf(err, errlen, "could not record migration \"%s\": %s", m->name,
			 PQresultErrorMessage(res));
		PQclear(res);
		goto fail;
	}
	PQclear(res);
	return exec_ok(conn, "COMMIT", err, errlen, what);
fail:
	PQclear(PQexec(conn, "ROLLBACK"));
	return -1;
}

int migrate_run(PGconn *conn, char *err, size_t errlen)
{
	int applied = 0, rc = -1;

	if (exec_ok(conn, "SET client_min_messages = warning", err, errlen, "could not set up session") < 0)
		return -1;
	if (exec_ok(conn, "SELECT pg_advisory_lock(" MIGRATE_LOCK_KEY ")", err, errlen,
		    "could not take the migration lock") < 0)
		return -1;
	if (exec_ok(conn,
		    "CREATE SCHEMA IF NOT EXISTS cairn;"
		    "CREATE TABLE IF NOT EXISTS cairn.schema_migrations ("
		    " name text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())",
		    err, errlen, "could not create cairn.schema_migrations") < 0)
		goto out;
	for (int i = 0; i < migration_count; i++) {
		int done = is_applied(conn, migration_files[i].name, err, errlen);
		if (done < 0)
			goto out;
		if (done)
			continue;
		if (apply_one(conn, &migration_files[i], err, errlen) < 0)
			goto out;
		applied++;
	}
	rc = applied;
out:
	PQclear(PQexec(conn, "SELECT pg_advisory_unlock(" MIGRATE_LOCK_KEY ")"));
	return rc;
}
