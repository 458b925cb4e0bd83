/* pgq: one asynchronous PostgreSQL connection driven by a libevent loop.
 * Queries queue in FIFO order and run one at a time; statements are
 * prepared once per connection and cached by their SQL text. The
 * connection reconnects by itself with backoff; LISTEN channels are
 * re-issued after each reconnect. */
#ifndef CAIRN_PGQ_H
#define CAIRN_PGQ_H

#include <stdbool.h>
#include <libpq-fe.h>

struct event_base;
struct pgq;

/* Called once per query. res is borrowed (valid during the call only); it
 * is NULL when the connection was lost before a result arrived, in which
 * case the query may or may not have run. Check PQresultStatus(res) and
 * pgq_sqlstate(res) otherwise. */
typedef void (*pgq_result_cb)(PGresult *res, void *arg);
typedef void (*pgq_notify_cb)(const char *channel, const char *payload, void *arg);
/* Called after every (re)connect, before queued queries run. */
typedef void (*pgq_connect_cb)(struct pgq *q, void *arg);

/* Returns new; starts connecting at once. conninfo is a libpq URI or
 * key=value string (borrowed, copied). Caller frees with pgq_free. */
struct pgq *pgq_new(struct event_base *base, const char *conninfo, const char *application_name);
/* Fails pending queries (their callbacks get NULL) and closes. */
void pgq_free(struct pgq *q);

void pgq_on_connect(struct pgq *q, pgq_connect_cb cb, void *arg);
/* LISTEN on channel now and after each reconnect. */
void pgq_listen(struct pgq *q, const char *channel, pgq_notify_cb cb, void *arg);

/* Queues sql with text parameters (NULL entries are SQL NULL). All
 * strings are copied. cb may be NULL for fire-and-forget. */
void pgq_exec(struct pgq *q, const char *sql, int nparams, const char *const *params,
	      pgq_result_cb cb, void *arg);

bool pgq_connected(const struct pgq *q);
/* Number of queries queued or in flight. */
int pgq_pending(const struct pgq *q);

/* SQLSTATE of an error result, or "" when res is NULL or not an error. */
const char *pgq_sqlstate(const PGresult *res);
/* Primary error message of res, or a fixed text when res is NULL. */
const char *pgq_errmsg(const PGresult *res);
/* True when res is a successful command or tuples result. */
bool pgq_ok(const PGresult *res);

/* cairn's own SQLSTATEs, raised by the transition functions in sql/. */
#define CAIRN_SQLSTATE_FENCED "CN001"
#define CAIRN_SQLSTATE_NOT_FOUND "CN002"
#define CAIRN_SQLSTATE_CONFLICT "CN003"
#define CAIRN_SQLSTATE_INVALID "CN004"

#endif
