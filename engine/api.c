/* api: the route handlers of cairnd. Reads are plain SELECTs that let
 * PostgreSQL build the JSON; writes call the transition functions of sql/
 * and nothing else. Every handler answers its request exactly once, from
 * its database callback; SQLSTATEs decide the HTTP status, never text. */
#include "api.h"

#include <ctype.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>
#include <time.h>
#include <event2/event.h>

#include "cron.h"
#include "duties.h"
#include "log.h"
#include "pgq.h"
#include "util.h"
#include "workflow.h"

#define MAX_CONNECTIONS 64
#define TOKEN_CACHE 64
#define TOKEN_TTL_MS 5000
#define MAX_WAITERS 1024
#define MAX_WAIT_S 60
#define EVENTS_PAGE 1000
#define LOGS_PAGE 10000
#define LIST_DEFAULT 50
#define LIST_MAX 500
#define MAX_KEY_LEN 255
#define MAX_NAME_LEN 200
#define MAX_TEXT_LEN 4096
#define MAX_LABELS 64
#define MAX_LABEL_LEN 256

struct token_entry {
	char hash[65];
	char *name;
	unsigned roles;
	int64_t expires_ms;
};

/* One pending long-poll of GET /v1/runs/{id}/events. */
struct waiter {
	TAILQ_ENTRY(waiter) link;
	struct api *a;
	struct http_req *r;
	char run_id[37];
	int64_t after;
	int64_t deadline_ms;
	struct event *tick;
	bool querying, dirty, dead;
};
TAILQ_HEAD(waiter_list, waiter);

struct api {
	struct event_base *base;
	struct pgq *conns[MAX_CONNECTIONS];
	int nconns;
	struct pgq *listen;
	const char *tenant;
	struct http_server *server;
	struct duties *duties;
	struct token_entry tokens[TOKEN_CACHE];
	struct waiter_list waiters, dead;
	int nwaiters;
	struct event *reaper;
	int64_t statement_timeout_ms;
	bool draining;
	bool heard_events; /* a cairn_events notification arrived on this connection */
	uint64_t runs_created, runs_deduplicated, notifications;
};

/* A request waiting for one database answer. */
struct call {
	struct api *a;
	struct http_req *r;
	char *s1, *s2; /* handler-specific copies */
	char hash[65];
};

static struct call *call_new(struct api *a, struct http_req *r)
{
	struct call *c = xcalloc(1, sizeof(*c));

	c->a = a;
	c->r = r;
	return c;
}

static void call_free(struct call *c)
{
	free(c->s1);
	free(c->s2);
	free(c);
}

/* The connected request connection with the shortest queue, or NULL. */
static struct pgq *pick(struct api *a)
{
	struct pgq *best = NULL;
	int best_n = 0;

	for (int i = 0; i < a->nconns; i++) {
		int n;

		if (!pgq_connected(a->conns[i]))
			continue;
		n = pgq_pending(a->conns[i]);
		if (!best || n < best_n) {
			best = a->conns[i];
			best_n = n;
		}
	}
	return best;
}

static void reply_unavailable(struct http_req *r)
{
	http_reply_error(r, 503, "unavailable", "the database is unavailable; retry later", NULL);
}

/* Queues sql on a request connection, or answers 503 when none is up. */
static bool submit_query(struct api *a, struct http_req *r, const char *sql, int n,
			 const char *const *params, pgq_result_cb cb, void *arg)
{
	struct pgq *q = pick(a);

	if (!q) {
		reply_unavailable(r);
		return false;
	}
	pgq_exec(q, sql, n, params, cb, arg);
	return true;
}

/* Answers r for a failed query. The message of our own SQLSTATEs is the
 * transition function's own; anything else stays in the log. */
static void reply_db_error(struct http_req *r, const PGresult *res, const char *what)
{
	const char *st = pgq_sqlstate(res);

	if (!res) {
		http_reply_error(r, 503, "unavailable", "database connection lost; retry later", NULL);
	} else if (!strcmp(st, CAIRN_SQLSTATE_FENCED) || !strcmp(st, CAIRN_SQLSTATE_CONFLICT)) {
		http_reply_error(r, 409, "conflict", pgq_errmsg(res), NULL);
	} else if (!strcmp(st, CAIRN_SQLSTATE_NOT_FOUND)) {
		http_reply_error(r, 404, "not_found", pgq_errmsg(res), NULL);
	} else if (!strcmp(st, CAIRN_SQLSTATE_INVALID)) {
		http_reply_error(r, 400, "invalid_request", pgq_errmsg(res), NULL);
	} else if (!strcmp(st, "57014")) {
		log_warn("%s: the statement timeout cancelled it", what);
		http_reply_error(r, 503, "unavailable", "the database took too long; retry later", NULL);
	} else if (!strncmp(st, "08", 2) || !strncmp(st, "57P", 3) || !strncmp(st, "53", 2)) {
		log_warn("%s: database unavailable: SQLSTATE %s", what, st);
		http_reply_error(r, 503, "unavailable", "the database is unavailable; retry later", NULL);
	} else if (!strncmp(st, "22", 2)) {
		http_reply_error(r, 400, "invalid_request", "invalid argument", NULL);
	} else {
		log_error("%s failed: SQLSTATE %s: %s", what, st, pgq_errmsg(res));
		http_reply_error(r, 500, "internal", "internal error", NULL);
	}
}

static bool is_uuid(const char *s)
{
	if (strlen(s) != 36)
		return false;
	for (int i = 0; i < 36; i++) {
		if (i == 8 || i == 13 || i == 18 || i == 23) {
			if (s[i] != '-')
				return false;
		} else if (!isxdigit((unsigned char)s[i])) {
			return false;
		}
	}
	return true;
}

static bool run_id_ok(struct http_req *r, const char *id)
{
	if (is_uuid(id))
		return true;
	http_reply_error(r, 404, "not_found", "no such run (run ids are UUIDs)", NULL);
	return false;
}

/* Parses a non-negative integer query parameter; answers 400 and returns
 * false when it is malformed or out of [min, max]. */
static bool query_int(struct http_req *r, const char *key, int64_t def, int64_t min, int64_t max,
		      int64_t *out)
{
	const char *v = http_query(r, key);
	char *end = NULL, msg[160];
	long long n;

	*out = def;
	if (!v)
		return true;
	n = strtoll(v, &end, 10);
	if (end == v || *end || n < min || n > max) {
		snprintf(msg, sizeof(msg), "query parameter \"%s\" must be an integer from %" PRId64 " to %" PRId64,
			 key, min, max);
		http_reply_error(r, 400, "invalid_request", msg, NULL);
		return false;
	}
	*out = n;
	return true;
}

static json_t *detail(const char *path, const char *message)
{
	return json_pack("{s:s, s:s}", "path", path, "message", message);
}

/* The body must be null or an object with only the given fields, each a
 * string of at most MAX_TEXT_LEN unless listed in any_fields. Answers 400
 * and returns false otherwise. */
static bool check_fields(struct http_req *r, const char *const *fields, const char *any_field)
{
	json_t *body = http_body(r), *details, *v;
	const char *k;
	char path[MAX_NAME_LEN + 8];

	if (json_is_null(body))
		return true;
	if (!json_is_object(body)) {
		http_reply_error(r, 400, "invalid_request", "request body must be a JSON object",
				 json_pack("[o]", detail("$", "expected an object")));
		return false;
	}
	details = json_array();
	json_object_foreach(body, k, v) {
		bool known = any_field && !strcmp(k, any_field);

		snprintf(path, sizeof(path), "$.%.*s", MAX_NAME_LEN, k);
		for (int i = 0; fields[i] && !known; i++) {
			if (strcmp(k, fields[i]) != 0)
				continue;
			known = true;
			if (!json_is_string(v) && !json_is_null(v))
				json_array_append_new(details, detail(path, "expected a string"));
			else if (json_is_string(v) && json_string_length(v) > MAX_TEXT_LEN)
				json_array_append_new(details, detail(path, "longer than 4096 bytes"));
		}
		if (!known)
			json_array_append_new(details, detail(path, "unknown field"));
	}
	if (json_array_size(details)) {
		http_reply_error(r, 400, "invalid_request", "request body has invalid fields", details);
		return false;
	}
	json_decref(details);
	return true;
}

static const char *body_string(struct http_req *r, const char *key)
{
	return json_string_value(json_object_get(http_body(r), key));
}

/* ---- authentication ---- */

static unsigned roles_parse(const char *csv)
{
	unsigned roles = 0;
	static const struct { const char *name; unsigned bit; } names[] = {
		{ "submit", ROLE_SUBMIT }, { "approve", ROLE_APPROVE },
		{ "read", ROLE_READ }, { "admin", ROLE_ADMIN },
	};

	while (csv && *csv) {
		const char *end = strchr(csv, ',');
		size_t len = end ? (size_t)(end - csv) : strlen(csv);

		for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
			if (strlen(names[i].name) == len && !strncmp(names[i].name, csv, len))
				roles |= names[i].bit;
		csv = end ? end + 1 : NULL;
	}
	return roles;
}

static void token_cache_put(struct api *a, const char *hash, const char *name, unsigned roles)
{
	struct token_entry *slot = &a->tokens[0];

	for (int i = 0; i < TOKEN_CACHE; i++) {
		struct token_entry *t = &a->tokens[i];

		if (!strcmp(t->hash, hash)) {
			slot = t;
			break;
		}
		if (t->expires_ms < slot->expires_ms)
			slot = t;
	}
	free(slot->name);
	memcpy(slot->hash, hash, sizeof(slot->hash));
	slot->name = xstrdup(name);
	slot->roles = roles;
	slot->expires_ms = mono_ms() + TOKEN_TTL_MS;
}

static void auth_done(PGresult *res, void *arg)
{
	struct call *c = arg;

	if (!pgq_ok(res)) {
		if (res)
			log_error("token lookup failed: SQLSTATE %s: %s", pgq_sqlstate(res), pgq_errmsg(res));
		http_auth_done(c->r, false, NULL, 0);
	} else if (PQntuples(res) == 0) {
		http_auth_done(c->r, true, NULL, 0);
	} else {
		const char *name = PQgetvalue(res, 0, 0);
		unsigned roles = roles_parse(PQgetvalue(res, 0, 1));

		token_cache_put(c->a, c->hash, name, roles);
		http_auth_done(c->r, true, name, roles);
	}
	call_free(c);
}

void api_auth(struct http_req *r, const char *hash, void *arg)
{
	static const char sql[] =
		"select name, array_to_string(roles, ',') from cairn.api_tokens "
		"where token_sha256 = decode($1, 'hex')";
	struct api *a = arg;
	int64_t now = mono_ms();
	struct call *c;
	struct pgq *q;

	for (int i = 0; i < TOKEN_CACHE; i++) {
		struct token_entry *t = &a->tokens[i];

		if (t->name && t->expires_ms > now && !strcmp(t->hash, hash)) {
			http_auth_done(r, true, t->name, t->roles);
			return;
		}
	}
	q = pick(a);
	if (!q) {
		http_auth_done(r, false, NULL, 0);
		return;
	}
	c = call_new(a, r);
	memcpy(c->hash, hash, sizeof(c->hash));
	pgq_exec(q, sql, 1, (const char *[]){ hash }, auth_done, c);
}

/* ---- POST /v1/runs ---- */

static void submit_done(PGresult *res, void *arg)
{
	struct call *c = arg;
	json_t *body;
	bool created;

	if (pgq_ok(res) && PQntuples(res) == 0 && c->s1) {
		http_reply_error(c->r, 404, "not_found", c->s1, NULL);
		goto out;
	}
	if (!pgq_ok(res) || PQntuples(res) != 1) {
		reply_db_error(c->r, res, "submit");
		goto out;
	}
	created = PQgetvalue(res, 0, 1)[0] == 't';
	if (created)
		c->a->runs_created++;
	else
		c->a->runs_deduplicated++;
	body = json_pack("{s:s, s:b, s:s}", "run_id", PQgetvalue(res, 0, 0), "created", created,
			 "status", PQgetvalue(res, 0, 2));
	http_reply_json(c->r, created ? 201 : 200, body);
out:
	call_free(c);
}

/* Labels: an object of at most MAX_LABELS string values. */
static void check_labels(json_t *labels, json_t *details)
{
	const char *k;
	json_t *v;
	char path[MAX_LABEL_LEN + 16];

	if (!labels || json_is_null(labels))
		return;
	if (!json_is_object(labels)) {
		json_array_append_new(details, detail("$.labels", "expected an object of strings"));
		return;
	}
	if (json_object_size(labels) > MAX_LABELS)
		json_array_append_new(details, detail("$.labels", "more than 64 labels"));
	json_object_foreach(labels, k, v) {
		snprintf(path, sizeof(path), "$.labels.%.*s", MAX_LABEL_LEN, k);
		if (strlen(k) == 0 || strlen(k) > MAX_LABEL_LEN)
			json_array_append_new(details, detail(path, "label names have 1 to 256 bytes"));
		else if (!json_is_string(v))
			json_array_append_new(details, detail(path, "expected a string"));
		else if (json_string_length(v) > MAX_LABEL_LEN)
			json_array_append_new(details, detail(path, "longer than 256 bytes"));
	}
}

/* A stored workflow name: what cairn.workflow_put accepts. */
static bool name_ok(const char *s)
{
	size_t n = strlen(s);

	if (n < 1 || n > 128)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!isalnum((unsigned char)s[i]) && !strchr("_.-", s[i]))
			return false;
	return true;
}

/* "version": absent or null (-1), else an integer from 1 to INT32_MAX. */
static bool version_get(json_t *body, json_t *details, int64_t *out)
{
	json_t *v = json_object_get(body, "version");

	*out = -1;
	if (!v || json_is_null(v))
		return true;
	if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > INT32_MAX) {
		json_array_append_new(details, detail("$.version", "expected a positive integer"));
		return false;
	}
	*out = json_integer_value(v);
	return true;
}

/* Checks "definition" xor "workflow" (with "version") in body, appending
 * problems to details. */
static void check_source(json_t *body, json_t *details, int64_t *version)
{
	json_t *def = json_object_get(body, "definition"), *wf = json_object_get(body, "workflow");

	if (def && wf) {
		json_array_append_new(details, detail("$.workflow", "give \"definition\" or \"workflow\", not both"));
	} else if (!def && !wf) {
		json_array_append_new(details, detail("$.definition",
						      "required (or \"workflow\": the name of a stored definition)"));
	} else if (wf && (!json_is_string(wf) || !name_ok(json_string_value(wf)))) {
		json_array_append_new(details, detail("$.workflow",
						      "expected a workflow name (1 to 128 of A-Z a-z 0-9 _ . -)"));
	}
	if (json_object_get(body, "version") && !wf)
		json_array_append_new(details, detail("$.version", "only with \"workflow\""));
	version_get(body, details, version);
}

/* Normalizes def; answers 400 invalid_definition and returns NULL when it
 * is invalid, else returns the normalized text (caller frees). */
static char *normalize_or_reply(struct http_req *r, json_t *def)
{
	json_t *norm = NULL, *errs = NULL;
	char *out = NULL, msg[128];

	if (workflow_normalize(def, &norm, &errs) < 0) {
		size_t n = json_array_size(errs);

		snprintf(msg, sizeof(msg), "invalid workflow definition: %zu error%s", n, n == 1 ? "" : "s");
		http_reply_error(r, 400, "invalid_definition", msg, errs);
		return NULL;
	}
	out = json_dumps(norm, JSON_COMPACT);
	json_decref(norm);
	if (!out)
		http_reply_error(r, 500, "internal", "could not encode the definition", NULL);
	return out;
}

static void h_submit(struct http_req *r, void *arg)
{
	static const char sql[] =
		"select s.run_id, s.created, coalesce((select x.status from cairn.runs x "
		"where x.run_id = s.run_id), 'running') "
		"from cairn.submit($1::jsonb, $2::jsonb, $3, $4, $5::jsonb) s";
	static const char by_name_sql[] =
		"with d as (select w.definition from cairn.workflow_defs w where w.name = $6 "
		"and ($7::int is null or w.version = $7::int) order by w.version desc limit 1) "
		"select s.run_id, s.created, coalesce((select x.status from cairn.runs x "
		"where x.run_id = s.run_id), 'running') "
		"from d cross join lateral cairn.submit(d.definition, $2::jsonb, $3, $4, $5::jsonb) s "
		"where $1::text is null";
	struct api *a = arg;
	json_t *body = http_body(r), *def, *details = NULL, *v;
	const char *key = http_header(r, "Idempotency-Key"), *k, *wf;
	char *def_s = NULL, *input_s = NULL, *labels_s = NULL, path[MAX_NAME_LEN + 8], msg[300];
	char version_s[24];
	int64_t version = -1;
	struct call *c;

	if (!json_is_object(body)) {
		http_reply_error(r, 400, "invalid_request", "request body must be a JSON object",
				 json_pack("[o]", detail("$", "expected an object with \"definition\"")));
		goto out;
	}
	details = json_array();
	json_object_foreach(body, k, v) {
		if (strcmp(k, "definition") && strcmp(k, "input") && strcmp(k, "labels") &&
		    strcmp(k, "workflow") && strcmp(k, "version")) {
			snprintf(path, sizeof(path), "$.%.*s", MAX_NAME_LEN, k);
			json_array_append_new(details, detail(path, "unknown field"));
		}
	}
	check_source(body, details, &version);
	check_labels(json_object_get(body, "labels"), details);
	if (key && (strlen(key) == 0 || strlen(key) > MAX_KEY_LEN))
		json_array_append_new(details, detail("Idempotency-Key", "must have 1 to 255 characters"));
	if (json_array_size(details)) {
		http_reply_error(r, 400, "invalid_request", "invalid request", details);
		details = NULL;
		goto out;
	}
	def = json_object_get(body, "definition");
	wf = json_string_value(json_object_get(body, "workflow"));
	if (def && !(def_s = normalize_or_reply(r, def)))
		goto out;
	v = json_object_get(body, "input");
	input_s = json_dumps(v ? v : json_null(), JSON_COMPACT | JSON_ENCODE_ANY);
	v = json_object_get(body, "labels");
	labels_s = v && !json_is_null(v) ? json_dumps(v, JSON_COMPACT) : xstrdup("{}");
	if (!input_s || !labels_s) {
		http_reply_error(r, 500, "internal", "could not encode the request", NULL);
		goto out;
	}
	c = call_new(a, r);
	if (wf) {
		snprintf(version_s, sizeof(version_s), "%" PRId64, version);
		if (version > 0)
			snprintf(msg, sizeof(msg), "no workflow \"%s\" version %" PRId64 " is stored", wf, version);
		else
			snprintf(msg, sizeof(msg), "no workflow \"%s\" is stored", wf);
		c->s1 = xstrdup(msg);
	}
	if (!submit_query(a, r, wf ? by_name_sql : sql, wf ? 7 : 5,
			  (const char *[]){ def_s, input_s, key, a->tenant, labels_s, wf,
					    version > 0 ? version_s : NULL },
			  submit_done, c))
		call_free(c);
out:
	json_decref(details);
	free(def_s);
	free(input_s);
	free(labels_s);
}

/* ---- reads ---- */

/* Replies with the first column of a one-row result, or 404. */
static void raw_done(PGresult *res, void *arg)
{
	struct call *c = arg;

	if (!pgq_ok(res)) {
		reply_db_error(c->r, res, "read");
	} else if (PQntuples(res) == 0 || PQgetisnull(res, 0, 0)) {
		http_reply_error(c->r, 404, "not_found", "no such run", NULL);
	} else {
		http_reply_raw(c->r, 200, PQgetvalue(res, 0, 0), (size_t)PQgetlength(res, 0, 0));
	}
	call_free(c);
}

static void h_get_run(struct http_req *r, void *arg)
{
	static const char sql[] =
		"select json_build_object('run_id', r.run_id, 'workflow', r.workflow, "
		"'status', r.status, 'input', r.input, 'error', r.error, 'labels', r.labels, "
		"'created_at', r.created_at, 'updated_at', r.updated_at, 'finished_at', r.finished_at, "
		"'last_seq', r.last_seq, 'steps', coalesce((select json_agg(json_build_object("
		"'step_id', s.step_id, 'kind', s.kind, 'status', s.status, 'attempt', s.attempt, "
		"'needs', s.needs, 'output', s.output, 'error', s.error, 'ready_at', s.ready_at, "
		"'started_at', s.started_at, 'finished_at', s.finished_at) "
		"order by d.ord nulls last, s.step_id) "
		"from cairn.steps s left join lateral (select o.ord from "
		"jsonb_array_elements(r.definition->'steps') with ordinality o(spec, ord) "
		"where o.spec->>'id' = s.step_id limit 1) d on true "
		"where s.run_id = r.run_id), '[]'::json))::text "
		"from cairn.runs r where r.run_id = $1::uuid";
	const char *id = http_param(r, 0);
	struct call *c;

	if (!run_id_ok(r, id))
		return;
	c = call_new(arg, r);
	if (!submit_query(arg, r, sql, 1, (const char *[]){ id }, raw_done, c))
		call_free(c);
}

static void list_done(PGresult *res, void *arg)
{
	struct call *c = arg;
	struct buf b = BUF_INIT;

	if (!pgq_ok(res) || PQntuples(res) != 1) {
		reply_db_error(c->r, res, "list runs");
		goto out;
	}
	buf_adds(&b, "{\"runs\":");
	buf_adds(&b, PQgetvalue(res, 0, 0));
	if (PQgetisnull(res, 0, 1))
		buf_adds(&b, ",\"next\":null}");
	else
		buf_addf(&b, ",\"next\":\"%s\"}", PQgetvalue(res, 0, 1));
	http_reply_raw(c->r, 200, b.data, b.len);
out:
	buf_release(&b);
	call_free(c);
}

static void h_list_runs(struct http_req *r, void *arg)
{
	static const char sql[] =
		"with page as (select r.run_id, r.workflow, r.status, r.created_at, r.updated_at, "
		"r.finished_at, row_number() over (order by r.created_at desc, r.run_id desc) as rn "
		"from cairn.runs r where ($1::text is null or r.status = $1) "
		"and ($2::text is null or r.workflow = $2) "
		"and ($3::uuid is null or (r.created_at, r.run_id) < "
		"(select c.created_at, c.run_id from cairn.runs c where c.run_id = $3::uuid)) "
		"order by r.created_at desc, r.run_id desc limit $4::int + 1) "
		"select coalesce(json_agg(json_build_object('run_id', p.run_id, 'workflow', p.workflow, "
		"'status', p.status, 'created_at', p.created_at, 'updated_at', p.updated_at, "
		"'finished_at', p.finished_at) order by p.rn) filter (where p.rn <= $4::int), '[]'::json)::text, "
		"(select q.run_id::text from page q where q.rn = $4::int "
		"and exists (select 1 from page x where x.rn > $4::int)) from page p";
	const char *status = http_query(r, "status"), *wf = http_query(r, "workflow");
	const char *after = http_query(r, "after");
	char limit_s[24];
	int64_t limit;
	struct call *c;

	if (status && strcmp(status, "running") && strcmp(status, "succeeded") &&
	    strcmp(status, "failed") && strcmp(status, "cancelled")) {
		http_reply_error(r, 400, "invalid_request",
				 "\"status\" must be running, succeeded, failed or cancelled", NULL);
		return;
	}
	if (wf && strlen(wf) > MAX_NAME_LEN) {
		http_reply_error(r, 400, "invalid_request", "\"workflow\" is too long", NULL);
		return;
	}
	if (after && !is_uuid(after)) {
		http_reply_error(r, 400, "invalid_request", "\"after\" must be a cursor from \"next\"", NULL);
		return;
	}
	if (!query_int(r, "limit", LIST_DEFAULT, 1, LIST_MAX, &limit))
		return;
	snprintf(limit_s, sizeof(limit_s), "%" PRId64, limit);
	c = call_new(arg, r);
	if (!submit_query(arg, r, sql, 4, (const char *[]){ status, wf, after, limit_s }, list_done, c))
		call_free(c);
}

static void logs_done(PGresult *res, void *arg)
{
	struct call *c = arg;
	struct buf b = BUF_INIT;

	if (!pgq_ok(res) || PQntuples(res) != 1) {
		reply_db_error(c->r, res, "logs");
	} else if (PQgetvalue(res, 0, 0)[0] != 't') {
		http_reply_error(c->r, 404, "not_found", "no such run", NULL);
	} else {
		buf_adds(&b, "{\"logs\":");
		buf_adds(&b, PQgetvalue(res, 0, 1));
		buf_adds(&b, "}");
		http_reply_raw(c->r, 200, b.data, b.len);
	}
	buf_release(&b);
	call_free(c);
}

static void h_logs(struct http_req *r, void *arg)
{
	static const char sql[] =
		"select exists (select 1 from cairn.runs where run_id = $1::uuid), "
		"coalesce((select json_agg(json_build_object('step_id', l.step_id, 'attempt', l.attempt, "
		"'stream', l.stream, 'data', l.data, 'truncated', l.truncated, 'at', l.at) order by l.id) "
		"from (select * from cairn.step_logs g where g.run_id = $1::uuid "
		"and ($2::text is null or g.step_id = $2) and ($3::int is null or g.attempt = $3::int) "
		"order by g.id limit " "10000" ") l), '[]'::json)::text";
	const char *id = http_param(r, 0), *step = http_query(r, "step");
	char att_s[24];
	int64_t attempt;
	struct call *c;

	if (!run_id_ok(r, id))
		return;
	if (step && strlen(step) > MAX_NAME_LEN) {
		http_reply_error(r, 400, "invalid_request", "\"step\" is too long", NULL);
		return;
	}
	if (!query_int(r, "attempt", 0, 1, 1000000, &attempt))
		return;
	snprintf(att_s, sizeof(att_s), "%" PRId64, attempt);
	c = call_new(arg, r);
	if (!submit_query(arg, r, sql, 3, (const char *[]){ id, step, attempt ? att_s : NULL },
			  logs_done, c))
		call_free(c);
}

/* ---- GET /v1/runs/{id}/events: long-poll ---- */

static void waiter_query(struct waiter *w);

static void waiter_finish(struct waiter *w)
{
	struct api *a = w->a;

	w->dead = true;
	w->r = NULL;
	event_del(w->tick);
	TAILQ_REMOVE(&a->waiters, w, link);
	TAILQ_INSERT_TAIL(&a->dead, w, link);
	a->nwaiters--;
	event_active(a->reaper, EV_TIMEOUT, 0);
}

/* Frees finished waiters outside their own callbacks. */
static void reaper_cb(evutil_socket_t fd, short what, void *arg)
{
	struct api *a = arg;
	struct waiter *w;

	while ((w = TAILQ_FIRST(&a->dead)) != NULL) {
		TAILQ_REMOVE(&a->dead, w, link);
		event_free(w->tick);
		free(w);
	}
}

static void waiter_wake(struct waiter *w)
{
	if (w->dead)
		return;
	if (w->querying)
		w->dirty = true;
	else
		waiter_query(w);
}

static void waiter_arm(struct waiter *w)
{
	int64_t left = w->deadline_ms - mono_ms();
	struct timeval tv;

	if (left > 1000)
		left = 1000;
	if (left < 0)
		left = 0;
	tv.tv_sec = left / 1000;
	tv.tv_usec = (left % 1000) * 1000;
	evtimer_add(w->tick, &tv);
}

static void tick_cb(evutil_socket_t fd, short what, void *arg)
{
	waiter_wake(arg);
}

static bool status_final(const char *s)
{
	return !strcmp(s, "succeeded") || !strcmp(s, "failed") || !strcmp(s, "cancelled");
}

static void events_done(PGresult *res, void *arg)
{
	struct waiter *w = arg;
	struct api *a = w->a;
	const char *status, *events;
	int64_t last;
	struct buf b = BUF_INIT;

	w->querying = false;
	if (!pgq_ok(res) || PQntuples(res) != 1) {
		if (pgq_ok(res))
			http_reply_error(w->r, 404, "not_found", "no such run", NULL);
		else
			reply_db_error(w->r, res, "events");
		waiter_finish(w);
		return;
	}
	status = PQgetvalue(res, 0, 0);
	events = PQgetvalue(res, 0, 2);
	last = strtoll(PQgetvalue(res, 0, 1), NULL, 10);
	if (strcmp(events, "[]") == 0 && !status_final(status) && !a->draining &&
	    mono_ms() < w->deadline_ms) {
		if (w->dirty) {
			w->dirty = false;
			waiter_query(w);
		} else {
			waiter_arm(w);
		}
		return;
	}
	buf_adds(&b, "{\"events\":");
	buf_adds(&b, events);
	buf_addf(&b, ",\"last_seq\":%" PRId64 ",\"status\":\"%s\",\"more\":%s}", last, status,
		 PQgetvalue(res, 0, 3)[0] == 't' ? "true" : "false");
	http_reply_raw(w->r, 200, b.data, b.len);
	buf_release(&b);
	waiter_finish(w);
}

static void waiter_query(struct waiter *w)
{
	static const char sql[] =
		"select r.status, r.last_seq, "
		"coalesce((select json_agg(json_build_object('seq', e.seq, 'type', e.type, "
		"'step_id', e.step_id, 'attempt', e.attempt, 'payload', e.payload, 'at', e.at) order by e.seq) "
		"from (select * from cairn.events x where x.run_id = r.run_id and x.seq > $2::bigint "
		"order by x.seq limit " "1000" ") e), '[]'::json)::text, "
		"r.last_seq > $2::bigint + " "1000" " "
		"from cairn.runs r where r.run_id = $1::uuid";
	struct pgq *q = pick(w->a);
	char after[24];

	event_del(w->tick);
	if (!q) {
		reply_unavailable(w->r);
		waiter_finish(w);
		return;
	}
	snprintf(after, sizeof(after), "%" PRId64, w->after);
	w->querying = true;
	w->dirty = false;
	pgq_exec(q, sql, 2, (const char *[]){ w->run_id, after }, events_done, w);
}

static void h_events(struct http_req *r, void *arg)
{
	struct api *a = arg;
	const char *id = http_param(r, 0);
	int64_t after, wait;
	struct waiter *w;

	if (!run_id_ok(r, id) || !query_int(r, "after", 0, 0, INT64_MAX / 2, &after) ||
	    !query_int(r, "wait", 0, 0, MAX_WAIT_S, &wait))
		return;
	if (a->nwaiters >= MAX_WAITERS) {
		http_reply_error(r, 503, "unavailable", "too many pending long-polls; retry later", NULL);
		return;
	}
	w = xcalloc(1, sizeof(*w));
	w->a = a;
	w->r = r;
	memcpy(w->run_id, id, 37);
	for (char *p = w->run_id; *p; p++)
		*p = (char)tolower((unsigned char)*p);
	w->after = after;
	w->deadline_ms = mono_ms() + wait * 1000;
	w->tick = evtimer_new(a->base, tick_cb, w);
	TAILQ_INSERT_TAIL(&a->waiters, w, link);
	a->nwaiters++;
	waiter_query(w);
}

/* LISTEN: cairn_events carries the run id of each transaction that
 * appended events, and wakes that run's long-polls. cairn_ready says work
 * became ready somewhere: it wakes every long-poll, but only until the
 * store has shown that it sends cairn_events (every transaction that
 * makes work ready appends events too), so a busy store does not make
 * each long-poll look again for every ready step. */
static void on_notify(const char *channel, const char *payload, void *arg)
{
	struct api *a = arg;
	struct waiter *w, *next;
	bool events = !strcmp(channel, "cairn_events");
	bool all = !events || !payload || !is_uuid(payload);

	a->notifications++;
	if (events)
		a->heard_events = true;
	else if (a->heard_events)
		return;
	for (w = TAILQ_FIRST(&a->waiters); w; w = next) {
		next = TAILQ_NEXT(w, link);
		if (all || !strcasecmp(w->run_id, payload))
			waiter_wake(w);
	}
}

/* After a reconnect, notifications may have been missed: look again. */
static void on_listen_connect(struct pgq *q, void *arg)
{
	struct api *a = arg;
	struct waiter *w, *next;

	a->heard_events = false;
	for (w = TAILQ_FIRST(&a->waiters); w; w = next) {
		next = TAILQ_NEXT(w, link);
		waiter_wake(w);
	}
}

/* ---- approvals, signals, cancel ---- */

static void action_done(PGresult *res, void *arg)
{
	struct call *c = arg;
	json_t *result = NULL, *body;

	if (!pgq_ok(res) || PQntuples(res) != 1) {
		reply_db_error(c->r, res, "transition");
		goto out;
	}
	if (!PQgetisnull(res, 0, 0))
		result = json_loads(PQgetvalue(res, 0, 0), JSON_DECODE_ANY, NULL);
	body = json_pack("{s:s, s:o}", "run_id", c->s1, "result", result ? result : json_null());
	if (c->s2)
		json_object_set_new(body, "step_id", json_string(c->s2));
	http_reply_json(c->r, 200, body);
out:
	call_free(c);
}

static void decide(struct http_req *r, struct api *a, bool approve)
{
	static const char approve_sql[] = "select cairn.approve($1::uuid, $2, $3, $4)::text";
	static const char reject_sql[] = "select cairn.reject($1::uuid, $2, $3, $4)::text";
	static const char *const fields[] = { "comment", NULL };
	const char *id = http_param(r, 0), *step = http_param(r, 1);
	struct call *c;

	if (!run_id_ok(r, id) || !check_fields(r, fields, NULL))
		return;
	if (strlen(step) > MAX_NAME_LEN) {
		http_reply_error(r, 404, "not_found", "no such step", NULL);
		return;
	}
	c = call_new(a, r);
	c->s1 = xstrdup(id);
	c->s2 = xstrdup(step);
	if (!submit_query(a, r, approve ? approve_sql : reject_sql, 4,
			  (const char *[]){ id, step, http_actor(r), body_string(r, "comment") },
			  action_done, c))
		call_free(c);
}

static void h_approve(struct http_req *r, void *arg)
{
	decide(r, arg, true);
}

static void h_reject(struct http_req *r, void *arg)
{
	decide(r, arg, false);
}

static void h_signal(struct http_req *r, void *arg)
{
	static const char sql[] = "select cairn.signal($1::uuid, $2, $3::jsonb, $4)::text";
	static const char *const fields[] = { NULL };
	const char *id = http_param(r, 0), *name = http_param(r, 1);
	json_t *data;
	char *data_s = NULL;
	struct call *c;

	if (!run_id_ok(r, id) || !check_fields(r, fields, "data"))
		return;
	if (strlen(name) > MAX_NAME_LEN) {
		http_reply_error(r, 400, "invalid_request", "signal name is too long", NULL);
		return;
	}
	data = json_object_get(http_body(r), "data");
	data_s = json_dumps(data ? data : json_null(), JSON_COMPACT | JSON_ENCODE_ANY);
	if (!data_s) {
		http_reply_error(r, 500, "internal", "could not encode the signal", NULL);
		return;
	}
	c = call_new(arg, r);
	c->s1 = xstrdup(id);
	if (!submit_query(arg, r, sql, 4, (const char *[]){ id, name, data_s, http_actor(r) },
			  action_done, c))
		call_free(c);
	free(data_s);
}

static void h_cancel(struct http_req *r, void *arg)
{
	static const char sql[] = "select cairn.cancel($1::uuid, $2, $3)::text";
	static const char *const fields[] = { "reason", NULL };
	const char *id = http_param(r, 0);
	struct call *c;

	if (!run_id_ok(r, id) || !check_fields(r, fields, NULL))
		return;
	c = call_new(arg, r);
	c->s1 = xstrdup(id);
	if (!submit_query(arg, r, sql, 3, (const char *[]){ id, http_actor(r), body_string(r, "reason") },
			  action_done, c))
		call_free(c);
}

static void h_retry(struct http_req *r, void *arg)
{
	static const char sql[] = "select cairn.retry($1::uuid, $2)::text";
	static const char *const fields[] = { NULL };
	const char *id = http_param(r, 0);
	struct call *c;

	if (!run_id_ok(r, id) || !check_fields(r, fields, NULL))
		return;
	c = call_new(arg, r);
	c->s1 = xstrdup(id);
	if (!submit_query(arg, r, sql, 2, (const char *[]){ id, http_actor(r) }, action_done, c))
		call_free(c);
}

static void fork_done(PGresult *res, void *arg)
{
	struct call *c = arg;

	if (!pgq_ok(res) || PQntuples(res) != 1) {
		reply_db_error(c->r, res, "fork");
	} else {
		c->a->runs_created++;
		http_reply_json(c->r, 201, json_pack("{s:s, s:b, s:s}", "run_id", PQgetvalue(res, 0, 0),
						     "created", 1, "forked_from", c->s1));
	}
	call_free(c);
}

/* POST /v1/runs/{id}/fork {"from": step, "definition"?: new definition}:
 * a new run that reuses what succeeded upstream of "from". */
static void h_fork(struct http_req *r, void *arg)
{
	static const char sql[] = "select cairn.fork($1::uuid, $2, $3::jsonb, $4)::text";
	static const char *const fields[] = { "from", NULL };
	const char *id = http_param(r, 0), *from;
	json_t *def, *norm = NULL, *errs = NULL;
	char *def_s = NULL, msg[128];
	struct call *c;

	if (!run_id_ok(r, id) || !check_fields(r, fields, "definition"))
		return;
	from = body_string(r, "from");
	if (!from || !*from) {
		http_reply_error(r, 400, "invalid_request", "\"from\" names the step to run again",
				 json_pack("[o]", detail("$.from", "required")));
		return;
	}
	def = json_object_get(http_body(r), "definition");
	if (def && !json_is_null(def)) {
		if (workflow_normalize(def, &norm, &errs) < 0) {
			size_t n = json_array_size(errs);

			snprintf(msg, sizeof(msg), "invalid workflow definition: %zu error%s", n,
				 n == 1 ? "" : "s");
			http_reply_error(r, 400, "invalid_definition", msg, errs);
			return;
		}
		def_s = json_dumps(norm, JSON_COMPACT);
		json_decref(norm);
		if (!def_s) {
			http_reply_error(r, 500, "internal", "could not encode the definition", NULL);
			return;
		}
	}
	c = call_new(arg, r);
	c->s1 = xstrdup(id);
	if (!submit_query(arg, r, sql, 4, (const char *[]){ id, from, def_s, http_actor(r) }, fork_done, c))
		call_free(c);
	free(def_s);
}

/* ---- named workflow definitions ---- */

/* Replies with the first column of a one-row result, or 404 with the
 * message in c->s1. */
static void one_or_404_done(PGresult *res, void *arg)
{
	struct call *c = arg;

	if (!pgq_ok(res))
		reply_db_error(c->r, res, "read");
	else if (PQntuples(res) == 0 || PQgetisnull(res, 0, 0))
		http_reply_error(c->r, 404, "not_found", c->s1, NULL);
	else
		http_reply_raw(c->r, 200, PQgetvalue(res, 0, 0), (size_t)PQgetlength(res, 0, 0));
	call_free(c);
}

static bool name_param_ok(struct http_req *r, const char *name, const char *what)
{
	char msg[300];

	if (name_ok(name))
		return true;
	snprintf(msg, sizeof(msg), "invalid %s name \"%.128s\": expected 1 to 128 of A-Z a-z 0-9 _ . -",
		 what, name);
	http_reply_error(r, 400, "invalid_request", msg, NULL);
	return false;
}

static void put_workflow_done(PGresult *res, void *arg)
{
	struct call *c = arg;
	long version, prev;
	bool created;

	if (!pgq_ok(res) || PQntuples(res) != 1) {
		reply_db_error(c->r, res, "workflow_put");
		goto out;
	}
	version = strtol(PQgetvalue(res, 0, 0), NULL, 10);
	prev = PQgetisnull(res, 0, 1) ? 0 : strtol(PQgetvalue(res, 0, 1), NULL, 10);
	created = version > prev;
	http_reply_json(c->r, created ? 201 : 200,
			json_pack("{s:s, s:i, s:b}", "name", c->s1, "version", (json_int_t)version,
				  "created", created));
out:
	call_free(c);
}

/* PUT /v1/workflows/{name}: stores the definition as version N+1 (or
 * answers the latest version when it is the same definition). */
static void h_put_workflow(struct http_req *r, void *arg)
{
	static const char sql[] =
		"with prev as (select max(version) v from cairn.workflow_defs where name = $1) "
		"select cairn.workflow_put($1, $2::jsonb), prev.v from prev";
	const char *name = http_param(r, 0);
	json_t *body = http_body(r), *n, *def = NULL;
	char *def_s = NULL, msg[300];
	struct call *c;

	if (!name_param_ok(r, name, "workflow"))
		return;
	if (!json_is_object(body)) {
		http_reply_error(r, 400, "invalid_definition", "the body must be a workflow definition",
				 json_pack("[o]", detail("$", "expected an object")));
		return;
	}
	n = json_object_get(body, "name");
	if (n && (!json_is_string(n) || strcmp(json_string_value(n), name) != 0)) {
		snprintf(msg, sizeof(msg), "must be \"%s\", the name in the path, or absent", name);
		http_reply_error(r, 400, "invalid_definition", "the definition's name differs from the path",
				 json_pack("[o]", detail("$.name", msg)));
		return;
	}
	def = json_deep_copy(body);
	if (!n)
		json_object_set_new(def, "name", json_string(name));
	def_s = normalize_or_reply(r, def);
	json_decref(def);
	if (!def_s)
		return;
	c = call_new(arg, r);
	c->s1 = xstrdup(name);
	if (!submit_query(arg, r, sql, 2, (const char *[]){ name, def_s }, put_workflow_done, c))
		call_free(c);
	free(def_s);
}

static void h_get_workflow(struct http_req *r, void *arg)
{
	static const char sql[] =
		"select json_build_object('name', name, 'version', version, 'definition', definition, "
		"'created_at', created_at)::text from cairn.workflow_defs "
		"where name = $1 and ($2::int is null or version = $2::int) order by version desc limit 1";
	const char *name = http_param(r, 0);
	int64_t version;
	char version_s[24], msg[300];
	struct call *c;

	if (!name_param_ok(r, name, "workflow") ||
	    !query_int(r, "version", -1, 1, INT32_MAX, &version))
		return;
	snprintf(version_s, sizeof(version_s), "%" PRId64, version);
	if (version > 0)
		snprintf(msg, sizeof(msg), "no workflow \"%s\" version %" PRId64 " is stored", name, version);
	else
		snprintf(msg, sizeof(msg), "no workflow \"%s\" is stored", name);
	c = call_new(arg, r);
	c->s1 = xstrdup(msg);
	if (!submit_query(arg, r, sql, 2, (const char *[]){ name, version > 0 ? version_s : NULL },
			  one_or_404_done, c))
		call_free(c);
}

/* A page of a list keyed by name: sql takes $1 the limit and $2 the name
 * to start after (?limit=, ?after=); what is the 404 message when empty. */
static void list_by_name(void *arg, struct http_req *r, const char *sql, const char *what)
{
	const char *after = http_query(r, "after");
	int64_t limit;
	char limit_s[24];
	struct call *c;

	if (!query_int(r, "limit", LIST_DEFAULT, 1, LIST_MAX, &limit))
		return;
	snprintf(limit_s, sizeof(limit_s), "%" PRId64, limit);
	c = call_new(arg, r);
	c->s1 = xstrdup(what);
	if (!submit_query(arg, r, sql, 2, (const char *[]){ limit_s, after }, one_or_404_done, c))
		call_free(c);
}

static void h_list_workflows(struct http_req *r, void *arg)
{
	static const char sql[] =
		"select json_build_object('workflows', coalesce(json_agg(json_build_object('name', w.name, "
		"'version', w.version, 'created_at', w.created_at) order by w.name), '[]'::json), "
		"'next', case when count(*) = $1::int then max(w.name) end)::text "
		"from (select distinct on (name) name, version, created_at from cairn.workflow_defs "
		"where name > coalesce($2, '') order by name, version desc limit $1::int) w";
	list_by_name(arg, r, sql, "no workflows");
}

/* ---- schedules ---- */

/* "2026-11-30T02:47:00Z" (with milliseconds when there are any). */
static void iso_time(int64_t ms, char *out, size_t len)
{
	time_t t = (time_t)(ms / 1000);
	struct tm tm;

	if (!gmtime_r(&t, &tm)) {
		snprintf(out, len, "?");
		return;
	}
	strftime(out, len, "%Y-%m-%dT%H:%M:%S", &tm);
	if (ms % 1000)
		snprintf(out + strlen(out), len - strlen(out), ".%03dZ", (int)(ms % 1000));
	else
		snprintf(out + strlen(out), len - strlen(out), "Z");
}

static void put_schedule_done(PGresult *res, void *arg)
{
	struct call *c = arg;
	json_t *body;
	bool created;

	if (pgq_ok(res) && PQntuples(res) == 0) {
		http_reply_error(c->r, 404, "not_found", "no such workflow is stored", NULL);
		goto out;
	}
	if (!pgq_ok(res) || PQntuples(res) != 1) {
		reply_db_error(c->r, res, "schedule_put");
		goto out;
	}
	created = PQgetvalue(res, 0, 0)[0] != 't';
	body = json_loads(c->s2, 0, NULL);
	if (!body) {
		http_reply_error(c->r, 500, "internal", "could not encode the reply", NULL);
		goto out;
	}
	json_object_set_new(body, "created", json_boolean(created));
	http_reply_json(c->r, created ? 201 : 200, body);
out:
	call_free(c);
}

/* POST /v1/schedules {"name", "cron", "definition" | "workflow" [+ "version"],
 * "input", "catch_up"}: creates or replaces a schedule. A stored workflow
 * is resolved now: the schedule keeps that version's definition. */
static void h_put_schedule(struct http_req *r, void *arg)
{
	static const char sql[] =
		"with old as (select exists (select 1 from cairn.schedules where name = $1) e), "
		"d as (select coalesce($3::jsonb, (select w.definition from cairn.workflow_defs w "
		"where w.name = $4 and ($5::int is null or w.version = $5::int) "
		"order by w.version desc limit 1)) def) "
		"select old.e, cairn.schedule_put($1, $2, d.def, $6::jsonb, $7, "
		"timestamptz 'epoch' + $8::bigint * interval '1 microsecond') "
		"from old, d where d.def is not null";
	static const char *const known[] = { "name", "cron", "definition", "workflow", "version",
					     "input", "catch_up", NULL };
	json_t *body = http_body(r), *details = NULL, *reply = NULL, *v, *def;
	const char *k, *name, *expr, *catch_up, *wf;
	char *def_s = NULL, *input_s = NULL, path[MAX_NAME_LEN + 8], err[256], next_iso[40];
	char next_s[24], version_s[24];
	struct cron cr;
	int64_t version = -1, next = -1;
	struct call *c;

	if (!json_is_object(body)) {
		http_reply_error(r, 400, "invalid_request", "request body must be a JSON object",
				 json_pack("[o]", detail("$", "expected an object")));
		goto out;
	}
	details = json_array();
	json_object_foreach(body, k, v) {
		bool ok = false;

		for (int i = 0; known[i] && !ok; i++)
			ok = !strcmp(k, known[i]);
		if (!ok) {
			snprintf(path, sizeof(path), "$.%.*s", MAX_NAME_LEN, k);
			json_array_append_new(details, detail(path, "unknown field"));
		}
	}
	name = json_string_value(json_object_get(body, "name"));
	if (!name || !name_ok(name))
		json_array_append_new(details, detail("$.name",
						      "expected a schedule name (1 to 128 of A-Z a-z 0-9 _ . -)"));
	expr = json_string_value(json_object_get(body, "cron"));
	if (!expr) {
		json_array_append_new(details, detail("$.cron", "expected a cron expression"));
	} else if (cron_parse(expr, &cr, err, sizeof(err)) < 0) {
		json_array_append_new(details, detail("$.cron", err));
	} else if ((next = cron_next(&cr, wall_ms())) < 0) {
		json_array_append_new(details, detail("$.cron", "the expression never fires"));
	}
	v = json_object_get(body, "catch_up");
	catch_up = v ? json_string_value(v) : "one";
	if (!catch_up || (strcmp(catch_up, "skip") && strcmp(catch_up, "one") && strcmp(catch_up, "all")))
		json_array_append_new(details, detail("$.catch_up", "expected \"skip\", \"one\" or \"all\""));
	check_source(body, details, &version);
	if (json_array_size(details)) {
		http_reply_error(r, 400, "invalid_request", "invalid schedule", details);
		details = NULL;
		goto out;
	}
	def = json_object_get(body, "definition");
	wf = json_string_value(json_object_get(body, "workflow"));
	if (def && !(def_s = normalize_or_reply(r, def)))
		goto out;
	v = json_object_get(body, "input");
	input_s = json_dumps(v ? v : json_null(), JSON_COMPACT | JSON_ENCODE_ANY);
	if (!input_s) {
		http_reply_error(r, 500, "internal", "could not encode the input", NULL);
		goto out;
	}
	snprintf(next_s, sizeof(next_s), "%" PRId64, next * 1000);
	snprintf(version_s, sizeof(version_s), "%" PRId64, version);
	iso_time(next, next_iso, sizeof(next_iso));
	/* The reply, but for "created", which only the store knows. */
	reply = json_pack("{s:s, s:s, s:s, s:s}", "name", name, "cron", expr, "catch_up", catch_up,
			  "next_at", next_iso);
	c = call_new(arg, r);
	c->s2 = json_dumps(reply, JSON_COMPACT);
	if (!submit_query(arg, r, sql, 8,
			  (const char *[]){ name, expr, def_s, wf, version > 0 ? version_s : NULL,
					    input_s, catch_up, next_s },
			  put_schedule_done, c))
		call_free(c);
out:
	json_decref(details);
	json_decref(reply);
	free(def_s);
	free(input_s);
}

#define SCHEDULE_JSON \
	"json_build_object('name', s.name, 'cron', s.cron, 'catch_up', s.catch_up, " \
	"'workflow', s.definition->>'name', 'input', s.input, 'next_at', s.next_at, " \
	"'last_tick', s.last_tick, 'last_run_id', s.last_run_id, 'enabled', s.enabled, " \
	"'created_at', s.created_at"

static void h_list_schedules(struct http_req *r, void *arg)
{
	static const char sql[] =
		"select json_build_object('schedules', coalesce(json_agg(" SCHEDULE_JSON ") "
		"order by s.name), '[]'::json), "
		"'next', case when count(*) = $1::int then max(s.name) end)::text "
		"from (select * from cairn.schedules where name > coalesce($2, '') "
		"order by name limit $1::int) s";
	list_by_name(arg, r, sql, "no schedules");
}

static void h_get_schedule(struct http_req *r, void *arg)
{
	static const char sql[] =
		"select " SCHEDULE_JSON ", 'definition', s.definition)::text "
		"from cairn.schedules s where s.name = $1";
	const char *name = http_param(r, 0);
	char msg[300];
	struct call *c;

	if (!name_param_ok(r, name, "schedule"))
		return;
	snprintf(msg, sizeof(msg), "no schedule \"%s\"", name);
	c = call_new(arg, r);
	c->s1 = xstrdup(msg);
	if (!submit_query(arg, r, sql, 1, (const char *[]){ name }, one_or_404_done, c))
		call_free(c);
}

static void delete_schedule_done(PGresult *res, void *arg)
{
	struct call *c = arg;
	char msg[300];

	if (!pgq_ok(res) || PQntuples(res) != 1) {
		reply_db_error(c->r, res, "schedule_delete");
	} else if (PQgetvalue(res, 0, 0)[0] != 't') {
		snprintf(msg, sizeof(msg), "no schedule \"%s\"", c->s1);
		http_reply_error(c->r, 404, "not_found", msg, NULL);
	} else {
		http_reply_json(c->r, 200, json_pack("{s:s, s:b}", "name", c->s1, "deleted", 1));
	}
	call_free(c);
}

static void h_delete_schedule(struct http_req *r, void *arg)
{
	static const char sql[] = "select cairn.schedule_delete($1)";
	const char *name = http_param(r, 0);
	struct call *c;

	if (!name_param_ok(r, name, "schedule"))
		return;
	c = call_new(arg, r);
	c->s1 = xstrdup(name);
	if (!submit_query(arg, r, sql, 1, (const char *[]){ name }, delete_schedule_done, c))
		call_free(c);
}

/* ---- health and metrics ---- */

static int connected(const struct api *a)
{
	int n = 0;

	for (int i = 0; i < a->nconns; i++)
		n += pgq_connected(a->conns[i]);
	return n;
}

static void h_healthz(struct http_req *r, void *arg)
{
	struct api *a = arg;
	bool up = connected(a) > 0;

	http_reply_json(r, up ? 200 : 503,
			json_pack("{s:s, s:s}", "status", up ? "ok" : "unavailable", "database",
				  up ? "up" : "down"));
}

static void h_metrics(struct http_req *r, void *arg)
{
	struct api *a = arg;
	struct buf b = BUF_INIT;

	if (a->server)
		http_metrics_write(a->server, &b);
	buf_addf(&b, "# HELP cairnd_runs_submitted_total Runs submitted, by whether a new run was created.\n"
		     "# TYPE cairnd_runs_submitted_total counter\n"
		     "cairnd_runs_submitted_total{created=\"true\"} %" PRIu64 "\n"
		     "cairnd_runs_submitted_total{created=\"false\"} %" PRIu64 "\n",
		 a->runs_created, a->runs_deduplicated);
	buf_addf(&b, "# HELP cairnd_long_polls Event long-polls waiting now.\n"
		     "# TYPE cairnd_long_polls gauge\ncairnd_long_polls %d\n", a->nwaiters);
	buf_addf(&b, "# HELP cairnd_notifications_total Store notifications received.\n"
		     "# TYPE cairnd_notifications_total counter\ncairnd_notifications_total %" PRIu64 "\n",
		 a->notifications);
	if (a->duties)
		duties_metrics_write(a->duties, &b);
	buf_addf(&b, "# HELP cairnd_db_connections Request connections to the store that are up.\n"
		     "# TYPE cairnd_db_connections gauge\ncairnd_db_connections %d\n", connected(a));
	http_reply_text(r, 200, "text/plain; version=0.0.4; charset=utf-8", b.data ? b.data : "", b.len);
	buf_release(&b);
}

static const struct http_route routes[] = {
	{ "GET", "/healthz", "healthz", 0, HTTP_PUBLIC, h_healthz },
	{ "GET", "/metrics", "metrics", ROLE_READ, 0, h_metrics },
	{ "POST", "/v1/runs", "submit", ROLE_SUBMIT, HTTP_JSON_BODY, h_submit },
	{ "GET", "/v1/runs", "list_runs", ROLE_READ, 0, h_list_runs },
	{ "GET", "/v1/runs/*", "get_run", ROLE_READ, 0, h_get_run },
	{ "GET", "/v1/runs/*/events", "events", ROLE_READ, 0, h_events },
	{ "GET", "/v1/runs/*/logs", "logs", ROLE_READ, 0, h_logs },
	{ "POST", "/v1/runs/*/steps/*/approve", "approve", ROLE_APPROVE, HTTP_JSON_BODY, h_approve },
	{ "POST", "/v1/runs/*/steps/*/reject", "reject", ROLE_APPROVE, HTTP_JSON_BODY, h_reject },
	{ "POST", "/v1/runs/*/signals/*", "signal", ROLE_SUBMIT, HTTP_JSON_BODY, h_signal },
	{ "POST", "/v1/runs/*/cancel", "cancel", ROLE_SUBMIT, HTTP_JSON_BODY, h_cancel },
	{ "POST", "/v1/runs/*/retry", "retry", ROLE_SUBMIT, HTTP_JSON_BODY, h_retry },
	{ "POST", "/v1/runs/*/fork", "fork", ROLE_SUBMIT, HTTP_JSON_BODY, h_fork },
	{ "GET", "/v1/workflows", "list_workflows", ROLE_READ, 0, h_list_workflows },
	{ "GET", "/v1/workflows/*", "get_workflow", ROLE_READ, 0, h_get_workflow },
	{ "PUT", "/v1/workflows/*", "put_workflow", ROLE_SUBMIT, HTTP_JSON_BODY, h_put_workflow },
	{ "POST", "/v1/schedules", "put_schedule", ROLE_SUBMIT, HTTP_JSON_BODY, h_put_schedule },
	{ "GET", "/v1/schedules", "list_schedules", ROLE_READ, 0, h_list_schedules },
	{ "GET", "/v1/schedules/*", "get_schedule", ROLE_READ, 0, h_get_schedule },
	{ "DELETE", "/v1/schedules/*", "delete_schedule", ROLE_SUBMIT, 0, h_delete_schedule },
	{ NULL, NULL, NULL, 0, 0, NULL }
};

const struct http_route *api_routes(void)
{
	return routes;
}

/* Each request connection gets the statement timeout, so one stuck query
 * cannot hold a connection (and the requests queued behind it) forever. */
static void on_request_connect(struct pgq *q, void *arg)
{
	struct api *a = arg;
	char sql[64];

	if (a->statement_timeout_ms <= 0)
		return;
	snprintf(sql, sizeof(sql), "set statement_timeout = %" PRId64, a->statement_timeout_ms);
	pgq_exec(q, sql, 0, NULL, NULL, NULL);
}

struct api *api_new(struct event_base *base, const struct api_opts *opts)
{
	struct api *a = xcalloc(1, sizeof(*a));

	a->base = base;
	a->tenant = opts->tenant;
	a->nconns = opts->connections < 1 ? 1 :
		    opts->connections > MAX_CONNECTIONS ? MAX_CONNECTIONS : opts->connections;
	TAILQ_INIT(&a->waiters);
	TAILQ_INIT(&a->dead);
	a->reaper = event_new(base, -1, 0, reaper_cb, a);
	a->statement_timeout_ms = opts->statement_timeout_ms;
	for (int i = 0; i < a->nconns; i++) {
		a->conns[i] = pgq_new(base, opts->database_url, "cairnd");
		pgq_on_connect(a->conns[i], on_request_connect, a);
	}
	a->listen = pgq_new(base, opts->database_url, "cairnd-listen");
	pgq_on_connect(a->listen, on_listen_connect, a);
	pgq_listen(a->listen, "cairn_events", on_notify, a);
	pgq_listen(a->listen, "cairn_ready", on_notify, a);
	return a;
}

void api_set_server(struct api *a, struct http_server *s)
{
	a->server = s;
}

void api_set_duties(struct api *a, struct duties *d)
{
	a->duties = d;
}

void api_drain(struct api *a)
{
	struct waiter *w, *next;

	a->draining = true;
	for (w = TAILQ_FIRST(&a->waiters); w; w = next) {
		next = TAILQ_NEXT(w, link);
		waiter_wake(w);
	}
}

int api_waiting(const struct api *a)
{
	return a->nwaiters;
}

void api_free(struct api *a)
{
	if (!a)
		return;
	a->draining = true;
	/* Freeing a connection fails its queued queries: their callbacks
	 * answer their requests (503) and finish their waiters. */
	for (int i = 0; i < a->nconns; i++)
		pgq_free(a->conns[i]);
	a->nconns = 0;
	pgq_free(a->listen);
	while (!TAILQ_EMPTY(&a->waiters)) {
		struct waiter *w = TAILQ_FIRST(&a->waiters);

		reply_unavailable(w->r);
		waiter_finish(w);
	}
	reaper_cb(-1, 0, a);
	event_free(a->reaper);
	for (int i = 0; i < TOKEN_CACHE; i++)
		free(a->tokens[i].name);
	free(a);
}
