/* pgq: one nonblocking libpq connection on a libevent loop. It owns the
 * socket events, the FIFO of queries and the reconnect timer; it never
 * blocks, and it never frees a query from inside that query's callback
 * chain before the callback has returned. */
#include "pgq.h"

#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>
#include <event2/event.h>

#include "log.h"
#include "util.h"

struct pgq_query {
	TAILQ_ENTRY(pgq_query) link;
	char *sql;
	int nparams;
	char **params;
	pgq_result_cb cb;
	void *arg;
};
TAILQ_HEAD(pgq_queue, pgq_query);

struct pgq_listen {
	struct pgq_listen *next;
	char *channel;
	pgq_notify_cb cb;
	void *arg;
};

enum pgq_state { PGQ_DOWN, PGQ_CONNECTING, PGQ_READY };

struct pgq {
	struct event_base *base;
	char *conninfo, *appname;
	PGconn *conn;
	enum pgq_state state;
	struct event *ev_sock;	/* read (and write while flushing / connecting) */
	struct event *ev_retry;
	short want;		/* events ev_sock waits for */
	int64_t backoff_ms;
	struct pgq_queue queue;
	struct pgq_query *cur;	/* sent, result pending */
	PGresult *cur_res;	/* first result of cur (errors win) */
	bool flushing;
	struct pgq_listen *listens;
	pgq_connect_cb on_connect;
	void *on_connect_arg;
};

static void pgq_connect(struct pgq *q);
static void pgq_sock_cb(evutil_socket_t fd, short what, void *arg);

static void query_free(struct pgq_query *qq)
{
	for (int i = 0; i < qq->nparams; i++)
		free(qq->params[i]);
	free(qq->params);
	free(qq->sql);
	free(qq);
}

static void watch(struct pgq *q, short what)
{
	int fd = q->conn ? PQsocket(q->conn) : -1;

	if (q->ev_sock) {
		event_free(q->ev_sock);
		q->ev_sock = NULL;
	}
	if (fd < 0)
		return;
	q->want = what;
	q->ev_sock = event_new(q->base, fd, what | EV_PERSIST, pgq_sock_cb, q);
	event_add(q->ev_sock, NULL);
}

static void finish_current(struct pgq *q, PGresult *res)
{
	struct pgq_query *qq = q->cur;

	q->cur = NULL;
	if (qq && qq->cb)
		qq->cb(res, qq->arg);
	if (qq)
		query_free(qq);
}

/* Drops the connection: the in-flight query learns it lost its answer,
 * queued ones wait for the next connection. */
static void pgq_lost(struct pgq *q, const char *why)
{
	struct timeval tv;
	int len = (int)strcspn(why, "\n");

	/* libpq's messages end in a newline; a log record is one line */
	if (q->state == PGQ_READY)
		log_warn("database connection lost: %.*s", len, why);
	else
		log_warn("could not connect to the database: %.*s", len, why);
	if (q->ev_sock) {
		event_free(q->ev_sock);
		q->ev_sock = NULL;
	}
	if (q->cur_res) {
		PQclear(q->cur_res);
		q->cur_res = NULL;
	}
	if (q->conn) {
		PQfinish(q->conn);
		q->conn = NULL;
	}
	q->state = PGQ_DOWN;
	q->flushing = false;
	finish_current(q, NULL);
	tv.tv_sec = q->backoff_ms / 1000;
	tv.tv_usec = (q->backoff_ms % 1000) * 1000;
	evtimer_add(q->ev_retry, &tv);
	q->backoff_ms = q->backoff_ms * 2 > 5000 ? 5000 : q->backoff_ms * 2;
}

static void pgq_dispatch(struct pgq *q)
{
	struct pgq_query *qq;
	int rc;

	if (q->state != PGQ_READY || q->cur || TAILQ_EMPTY(&q->queue))
		return;
	qq = TAILQ_FIRST(&q->queue);
	TAILQ_REMOVE(&q->queue, qq, link);
	q->cur = qq;
	if (!PQsendQueryParams(q->conn, qq->sql, qq->nparams, NULL,
			       (const char *const *)qq->params, NULL, NULL, 0)) {
		pgq_lost(q, PQerrorMessage(q->conn));
		return;
	}
	rc = PQflush(q->conn);
	if (rc < 0) {
		pgq_lost(q, PQerrorMessage(q->conn));
	} else if (rc == 1) {
		q->flushing = true;
		watch(q, EV_READ | EV_WRITE);
	}
}

static void deliver_notifies(struct pgq *q)
{
	PGnotify *n;

	while ((n = PQnotifies(q->conn)) != NULL) {
		for (struct pgq_listen *l = q->listens; l; l = l->next)
			if (strcmp(l->channel, n->relname) == 0 && l->cb)
				l->cb(n->relname, n->extra, l->arg);
		PQfreemem(n);
	}
}

static void pgq_readable(struct pgq *q)
{
	if (!PQconsumeInput(q->conn)) {
		pgq_lost(q, PQerrorMessage(q->conn));
		return;
	}
	while (q->cur && !PQisBusy(q->conn)) {
		PGresult *res = PQgetResult(q->conn);

		if (!res) {
			PGresult *done = q->cur_res;
			q->cur_res = NULL;
			finish_current(q, done);
			PQclear(done);
			break;
		}
		if (!q->cur_res || (pgq_ok(q->cur_res) && !pgq_ok(res))) {
			PQclear(q->cur_res);
			q->cur_res = res;
		} else {
			PQclear(res);
		}
	}
	if (q->conn)
		deliver_notifies(q);
	if (q->conn && PQstatus(q->conn) == CONNECTION_BAD) {
		pgq_lost(q, PQerrorMessage(q->conn));
		return;
	}
	pgq_dispatch(q);
}

static void listen_now(struct pgq *q, struct pgq_listen *l)
{
	char *ident = PQescapeIdentifier(q->conn, l->channel, strlen(l->channel));
	struct buf sql = BUF_INIT;
	struct pgq_query *qq;

	if (!ident)
		return;
	buf_addf(&sql, "LISTEN %s", ident);
	PQfreemem(ident);
	qq = xcalloc(1, sizeof(*qq));
	qq->sql = buf_detach(&sql);
	TAILQ_INSERT_HEAD(&q->queue, qq, link);
}

static void pgq_connected_now(struct pgq *q)
{
	q->state = PGQ_READY;
	q->backoff_ms = 100;
	PQsetnonblocking(q->conn, 1);
	watch(q, EV_READ);
	for (struct pgq_listen *l = q->listens; l; l = l->next)
		listen_now(q, l);
	if (q->on_connect)
		q->on_connect(q, q->on_connect_arg);
	pgq_dispatch(q);
}

static void pgq_poll_connect(struct pgq *q)
{
	switch (PQconnectPoll(q->conn)) {
	case PGRES_POLLING_READING:
		watch(q, EV_READ);
		break;
	case PGRES_POLLING_WRITING:
		watch(q, EV_WRITE);
		break;
	case PGRES_POLLING_OK:
		pgq_connected_now(q);
		break;
	default:
		pgq_lost(q, PQerrorMessage(q->conn));
		break;
	}
}

static void pgq_sock_cb(evutil_socket_t fd, short what, void *arg)
{
	struct pgq *q = arg;

	if (q->state == PGQ_CONNECTING) {
		pgq_poll_connect(q);
		return;
	}
	if ((what & EV_WRITE) && q->flushing) {
		int rc = PQflush(q->conn);
		if (rc < 0) {
			pgq_lost(q, PQerrorMessage(q->conn));
			return;
		}
		if (rc == 0) {
			q->flushing = false;
			watch(q, EV_READ);
		}
	}
	if (what & EV_READ)
		pgq_readable(q);
}

static void pgq_retry_cb(evutil_socket_t fd, short what, void *arg)
{
	pgq_connect(arg);
}

static void pgq_connect(struct pgq *q)
{
	const char *keys[] = { "dbname", "application_name", "connect_timeout", NULL };
	const char *vals[] = { q->conninfo, q->appname, "10", NULL };

	q->conn = PQconnectStartParams(keys, vals, 1);
	if (!q->conn || PQstatus(q->conn) == CONNECTION_BAD) {
		pgq_lost(q, q->conn ? PQerrorMessage(q->conn) : "out of memory");
		return;
	}
	q->state = PGQ_CONNECTING;
	pgq_poll_connect(q);
}

struct pgq *pgq_new(struct event_base *base, const char *conninfo, const char *application_name)
{
	struct pgq *q = xcalloc(1, sizeof(*q));

	q->base = base;
	q->conninfo = xstrdup(conninfo ? conninfo : "");
	q->appname = xstrdup(application_name ? application_name : "cairn");
	q->backoff_ms = 100;
	TAILQ_INIT(&q->queue);
	q->ev_retry = evtimer_new(base, pgq_retry_cb, q);
	pgq_connect(q);
	return q;
}

void pgq_free(struct pgq *q)
{
	struct pgq_query *qq;

	if (!q)
		return;
	if (q->ev_sock)
		event_free(q->ev_sock);
	event_free(q->ev_retry);
	if (q->cur_res)
		PQclear(q->cur_res);
	if (q->conn)
		PQfinish(q->conn);
	q->conn = NULL;
	finish_current(q, NULL);
	while ((qq = TAILQ_FIRST(&q->queue)) != NULL) {
		TAILQ_REMOVE(&q->queue, qq, link);
		if (qq->cb)
			qq->cb(NULL, qq->arg);
		query_free(qq);
	}
	while (q->listens) {
		struct pgq_listen *l = q->listens;
		q->listens = l->next;
		free(l->channel);
		free(l);
	}
	free(q->conninfo);
	free(q->appname);
	free(q);
}

void pgq_on_connect(struct pgq *q, pgq_connect_cb cb, void *arg)
{
	q->on_connect = cb;
	q->on_connect_arg = arg;
}

void pgq_listen(struct pgq *q, const char *channel, pgq_notify_cb cb, void *arg)
{
	struct pgq_listen *l = xcalloc(1, sizeof(*l));

	l->channel = xstrdup(channel);
	l->cb = cb;
	l->arg = arg;
	l->next = q->listens;
	q->listens = l;
	if (q->state == PGQ_READY) {
		listen_now(q, l);
		pgq_dispatch(q);
	}
}

void pgq_exec(struct pgq *q, const char *sql, int nparams, const char *const *params,
	      pgq_result_cb cb, void *arg)
{
	struct pgq_query *qq = xcalloc(1, sizeof(*qq));

	qq->sql = xstrdup(sql);
	qq->nparams = nparams;
	if (nparams > 0) {
		qq->params = xcalloc((size_t)nparams, sizeof(char *));
		for (int i = 0; i < nparams; i++)
			qq->params[i] = params[i] ? xstrdup(params[i]) : NULL;
	}
	qq->cb = cb;
	qq->arg = arg;
	TAILQ_INSERT_TAIL(&q->queue, qq, link);
	pgq_dispatch(q);
}

bool pgq_connected(const struct pgq *q)
{
	return q->state == PGQ_READY;
}

int pgq_pending(const struct pgq *q)
{
	int n = q->cur ? 1 : 0;
	const struct pgq_query *qq;

	TAILQ_FOREACH(qq, &q->queue, link)
		n++;
	return n;
}

const char *pgq_sqlstate(const PGresult *res)
{
	const char *s;

	if (!res)
		return "";
	s = PQresultErrorField(res, PG_DIAG_SQLSTATE);
	return s ? s : "";
}

const char *pgq_errmsg(const PGresult *res)
{
	const char *s;

	if (!res)
		return "database connection lost";
	s = PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY);
	return s ? s : PQresultErrorMessage(res);
}

bool pgq_ok(const PGresult *res)
{
	ExecStatusType st;

	if (!res)
		return false;
	st = PQresultStatus(res);
	return st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK;
}
