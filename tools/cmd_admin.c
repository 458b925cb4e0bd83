/* cmd_admin: commands that work beside cairnd rather than through it:
 * `db migrate` and `token create` talk to PostgreSQL directly (blocking
 * libpq), `sandbox` hands over to the cairn-sandbox program. */
#include "config.h"
#include "cairn.h"
#include "migrate.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int cmd_sandbox(struct cairn *cn, const struct cmd *self, int argc, char **argv)
{
	char *prog = find_program(cn, "cairn-sandbox");
	char **args;

	if (argc > 1 && (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0) && !prog) {
		print_usage(self, stdout);
		return EXIT_OK;
	}
	if (!prog)
		return fail(EXIT_OTHER, "cairn-sandbox was not found next to cairn or on PATH "
					"(it is built with the worker: run make)");
	args = xcalloc((size_t)argc + 1, sizeof(*args));
	args[0] = prog;
	for (int i = 1; i < argc; i++)
		args[i] = argv[i];
	fflush(stdout);
	execv(prog, args);
	fail(EXIT_OTHER, "could not run \"%s\": %s", prog, strerror(errno));
	free(args);
	free(prog);
	return EXIT_OTHER;
}

static bool role_known(const char *r, size_t len)
{
	static const char *const roles[] = { "submit", "approve", "read", "admin" };

	for (size_t i = 0; i < sizeof(roles) / sizeof(roles[0]); i++)
		if (strlen(roles[i]) == len && strncmp(roles[i], r, len) == 0)
			return true;
	return false;
}

int cmd_token_create(struct cairn *cn, const struct cmd *self, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "roles", required_argument, NULL, 'r' },
		{ "database-url", required_argument, NULL, 'd' },
		COMMON_LONGOPTS,
		{ NULL, 0, NULL, 0 }
	};
	const char *roles = NULL, *dsn = NULL, *name, *params[2];
	struct buf arr = BUF_INIT;
	PGconn *conn = NULL;
	PGresult *res = NULL;
	int opt, ret;

	opterr = 0;
	while ((opt = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (opt) {
		case 'r':
			roles = optarg;
			break;
		case 'd':
			dsn = optarg;
			break;
		COMMON_OPT_CASES;
		}
	}
	if (optind != argc - 1)
		return usage_error(self, "expected one token name");
	if (!roles)
		return usage_error(self, "--roles is required");
	name = argv[optind];
	if (!*name || strlen(name) > 200)
		return usage_error(self, "invalid token name: 1 to 200 characters");
	/* Build the text[] literal from known role words only. */
	buf_adds(&arr, "{");
	for (const char *p = roles; *p;) {
		size_t len = strcspn(p, ",");

		if (!role_known(p, len)) {
			buf_release(&arr);
			return usage_error(self, "unknown role \"%.*s\": use submit, approve, read or admin",
					   (int)len, p);
		}
		buf_addf(&arr, "%s%.*s", arr.len > 1 ? "," : "", (int)len, p);
		p += len;
		if (*p == ',')
			p++;
	}
	buf_adds(&arr, "}");

	ret = db_connect(dsn, &conn);
	if (ret != EXIT_OK)
		goto out;
	params[0] = name;
	params[1] = arr.data;
	res = PQexecParams(conn, "select cairn.token_create($1, $2::text[])", 2, NULL, params, NULL,
			   NULL, 0);
	if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1) {
		const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
		const char *msg = PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY);

		if (state && strcmp(state, "23505") == 0)
			ret = fail(EXIT_CONFLICT, "a token named \"%s\" already exists", name);
		else
			ret = fail(EXIT_OTHER, "could not create token \"%s\": %s", name,
				   msg ? msg : PQerrorMessage(conn));
		goto out;
	}
	if (cn->json) {
		json_t *doc = json_pack("{ssssss}", "name", name, "token", PQgetvalue(res, 0, 0),
					"roles", roles);

		print_json(doc);
		json_decref(doc);
	} else {
		printf("%s\n", PQgetvalue(res, 0, 0));
	}
	ret = EXIT_OK;
out:
	PQclear(res);
	PQfinish(conn);
	buf_release(&arr);
	return ret;
}

int cmd_db_migrate(struct cairn *cn, const struct cmd *self, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "database-url", required_argument, NULL, 'd' },
		COMMON_LONGOPTS,
		{ NULL, 0, NULL, 0 }
	};
	const char *dsn = NULL;
	PGconn *conn = NULL;
	char err[1024];
	int opt, ret, n;

	opterr = 0;
	while ((opt = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (opt) {
		case 'd':
			dsn = optarg;
			break;
		COMMON_OPT_CASES;
		}
	}
	if (optind != argc)
		return usage_error(self, "unexpected argument \"%s\"", argv[optind]);
	ret = db_connect(dsn, &conn);
	if (ret != EXIT_OK)
		return ret;
	n = migrate_run(conn, err, sizeof(err));
	if (n < 0) {
		ret = fail(EXIT_OTHER, "migration failed: %s", err);
		goto out;
	}
	if (cn->json)
		printf("{\"applied\": %d, \"known\": %d}\n", n, migration_count);
	else if (n == 0)
		printf("schema is up to date (%d migrations)\n", migration_count);
	else
		printf("applied %d migration%s\n", n, n == 1 ? "" : "s");
	ret = EXIT_OK;
out:
	PQfinish(conn);
	return ret;
}
