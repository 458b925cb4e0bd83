/* webhook: the delivery loop of the webhook outbox. It reads and writes
 * the outbox only through cairn.webhook_claim and cairn.webhook_result,
 * on the connection it is given, and never logs the secret. Each delivery
 * gets its own client connection, freed outside its callbacks. */
#include "webhook.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>
#include <event2/event.h>
#include <event2/buffer.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "log.h"
#include "pgq.h"

struct delivery {
	TAILQ_ENTRY(delivery) link;
	struct webhook *w;
	char id[24];
	int attempts;          /* attempts recorded before this one */
	char *body;
	struct evhttp_connection *conn;
	const char *error;     /* set by the error callback */
};
TAILQ_HEAD(delivery_list, delivery);

struct webhook {
	struct event_base *base;
	struct pgq *q;
	char *host, *path, *host_header, *secret;
	int port;
	struct delivery_list queued, active, dead;
	int in_flight, recording;
	bool claiming, stopped;
	struct event *reaper;
	int64_t last_warn_ms;
	uint64_t ok, failed;
};

static void warn_limited(struct webhook *w, const char *what, const char *why)
{
	int64_t now = mono_ms();

	if (now - w->last_warn_ms < 10000)
		return;
	w->last_warn_ms = now;
	log_warn("%s: %s", what, why);
}

void webhook_sign(const char *secret, const char *body, size_t len, char *out, size_t outlen)
{
	static const char hex[] = "0123456789abcdef";
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;
	size_t o;

	if (outlen < 8 + 64) {
		if (outlen)
			out[0] = '\0';
		return;
	}
	if (!HMAC(EVP_sha256(), secret, (int)strlen(secret), (const unsigned char *)body, len, md,
		  &mdlen) || mdlen != 32) {
		out[0] = '\0';
		return;
	}
	memcpy(out, "sha256=", 7);
	o = 7;
	for (unsigned i = 0; i < mdlen; i++) {
		out[o++] = hex[md[i] >> 4];
		out[o++] = hex[md[i] & 15];
	}
	out[o] = '\0';
}

static void delivery_free(struct delivery *d)
{
	if (d->conn)
		evhttp_connection_free(d->conn);
	free(d->body);
	free(d);
}

/* Frees finished deliveries (and their connections) outside their callbacks. */
static void reaper_cb(evutil_socket_t fd, short what, void *arg)
{
	struct webhook *w = arg;
	struct delivery *d;

	while ((d = TAILQ_FIRST(&w->dead)) != NULL) {
		TAILQ_REMOVE(&w->dead, d, link);
		delivery_free(d);
	}
}

static void result_done(PGresult *res, void *arg)
{
	struct webhook *w = arg;

	w->recording--;
	if (!pgq_ok(res))
		warn_limited(w, "could not record a webhook delivery attempt", pgq_errmsg(res));
}

static void start(struct webhook *w, struct delivery *d);

static void pump(struct webhook *w)
{
	struct delivery *d;

	while (!w->stopped && w->in_flight < WEBHOOK_IN_FLIGHT && (d = TAILQ_FIRST(&w->queued)) != NULL) {
		TAILQ_REMOVE(&w->queued, d, link);
		start(w, d);
	}
}

/* Records the attempt, then retires the delivery. */
static void finish(struct delivery *d, int status, const char *error)
{
	static const char sql[] =
		"select cairn.webhook_result($1::bigint, $2::boolean, $3::int, $4, $5::int)";
	struct webhook *w = d->w;
	bool ok = status >= 200 && status < 300;
	char status_s[16], retry_s[24], msg[128];
	int64_t retry = 0;

	if (!ok) {
		int shift = d->attempts < 20 ? d->attempts : 20;

		retry = (int64_t)1000 << shift;
		if (retry > WEBHOOK_BACKOFF_MAX_MS)
			retry = WEBHOOK_BACKOFF_MAX_MS;
		if (!error) {
			snprintf(msg, sizeof(msg), "the receiver answered %d", status);
			error = msg;
		}
		w->failed++;
		log_debug("webhook delivery %s failed (attempt %d): %s; next in %" PRId64 " ms", d->id,
			  d->attempts + 1, error, retry);
	} else {
		w->ok++;
		log_debug("webhook delivery %s accepted with %d", d->id, status);
	}
	snprintf(status_s, sizeof(status_s), "%d", status);
	snprintf(retry_s, sizeof(retry_s), "%" PRId64, retry);
	w->recording++;
	pgq_exec(w->q, sql, 5,
		 (const char *[]){ d->id, ok ? "true" : "false", status > 0 ? status_s : NULL,
				   ok ? NULL : error, retry_s },
		 result_done, w);
	w->in_flight--;
	TAILQ_REMOVE(&w->active, d, link);
	TAILQ_INSERT_TAIL(&w->dead, d, link);
	event_active(w->reaper, EV_TIMEOUT, 0);
	pump(w);
}

static void on_error(enum evhttp_request_error e, void *arg)
{
	struct delivery *d = arg;

	switch (e) {
	case EVREQ_HTTP_TIMEOUT:
		d->error = "no answer within 10s";
		break;
	case EVREQ_HTTP_EOF:
		d->error = "the connection closed before an answer";
		break;
	case EVREQ_HTTP_INVALID_HEADER:
		d->error = "the answer was not valid HTTP";
		break;
	case EVREQ_HTTP_DATA_TOO_LONG:
		d->error = "the answer was too long";
		break;
	default:
		d->error = "could not connect or send";
		break;
	}
}

static void on_response(struct evhttp_request *req, void *arg)
{
	struct delivery *d = arg;
	int status = req ? evhttp_request_get_response_code(req) : 0;

	if (status <= 0)
		finish(d, 0, d->error ? d->error : "could not connect or send");
	else
		finish(d, status, NULL);
}

static void start(struct webhook *w, struct delivery *d)
{
	struct evhttp_request *req;
	struct evkeyvalq *h;
	char sig[80];

	w->in_flight++;
	TAILQ_INSERT_TAIL(&w->active, d, link);
	d->conn = evhttp_connection_base_new(w->base, NULL, w->host, (unsigned short)w->port);
	req = d->conn ? evhttp_request_new(on_response, d) : NULL;
	if (!req) {
		finish(d, 0, "could not create an HTTP request");
		return;
	}
	evhttp_connection_set_timeout(d->conn, WEBHOOK_TIMEOUT_S);
	evhttp_connection_set_retries(d->conn, 0);
	/* The answer's body is not read: cap what a receiver may send. */
	evhttp_connection_set_max_headers_size(d->conn, 64 * 1024);
	evhttp_connection_set_max_body_size(d->conn, 1024 * 1024);
	evhttp_request_set_error_cb(req, on_error);
	webhook_sign(w->secret, d->body, strlen(d->body), sig, sizeof(sig));
	h = evhttp_request_get_output_headers(req);
	evhttp_add_header(h, "Host", w->host_header);
	evhttp_add_header(h, "User-Agent", "cairnd");
	evhttp_add_header(h, "Content-Type", "application/json");
	evhttp_add_header(h, "X-Cairn-Delivery", d->id);
	evhttp_add_header(h, "X-Cairn-Signature", sig);
	evhttp_add_header(h, "Connection", "close");
	evbuffer_add(evhttp_request_get_output_buffer(req), d->body, strlen(d->body));
	/* A connection refused at once reaches on_response (with NULL) and
	 * returns 0; -1 means the request was dropped unanswered. */
	if (evhttp_make_request(d->conn, req, EVHTTP_REQ_POST, w->path) < 0) {
		evhttp_request_free(req);
		finish(d, 0, "could not send the request");
	}
}

static void claim_done(PGresult *res, void *arg)
{
	struct webhook *w = arg;
	int n;

	w->claiming = false;
	if (!pgq_ok(res)) {
		warn_limited(w, "could not claim webhook deliveries", pgq_errmsg(res));
		return;
	}
	/* Claimed while stopping: left to expire and be claimed again. */
	n = w->stopped ? 0 : PQntuples(res);
	for (int i = 0; i < n; i++) {
		struct delivery *d = xcalloc(1, sizeof(*d));

		d->w = w;
		snprintf(d->id, sizeof(d->id), "%s", PQgetvalue(res, i, 0));
		d->attempts = atoi(PQgetvalue(res, i, 1));
		d->body = xstrdup(PQgetvalue(res, i, 2));
		TAILQ_INSERT_TAIL(&w->queued, d, link);
	}
	pump(w);
}

void webhook_poll(struct webhook *w)
{
	static const char sql[] =
		"select c.id, c.attempts, json_build_object('delivery', c.id, 'type', c.event_type, "
		"'run_id', c.run_id, 'step_id', c.step_id, 'seq', c.seq, 'payload', c.payload, "
		"'created_at', c.created_at)::text "
		"from cairn.webhook_claim($1::int, $2::int) c order by c.id";
	struct delivery *d;
	int held = w->in_flight;
	char max[16], lease[16];

	TAILQ_FOREACH(d, &w->queued, link)
		held++;
	/* Queued deliveries wait at most one timeout: well inside the lease. */
	if (w->stopped || w->claiming || held >= WEBHOOK_IN_FLIGHT || !pgq_connected(w->q))
		return;
	snprintf(max, sizeof(max), "%d", WEBHOOK_CLAIM - held);
	snprintf(lease, sizeof(lease), "%d", WEBHOOK_LEASE_MS);
	w->claiming = true;
	pgq_exec(w->q, sql, 2, (const char *[]){ max, lease }, claim_done, w);
}

void webhook_stop(struct webhook *w)
{
	struct delivery *d;

	w->stopped = true;
	while ((d = TAILQ_FIRST(&w->queued)) != NULL) {
		TAILQ_REMOVE(&w->queued, d, link);
		delivery_free(d);
	}
}

bool webhook_busy(const struct webhook *w)
{
	return w->claiming || w->in_flight > 0 || w->recording > 0 || !TAILQ_EMPTY(&w->queued);
}

void webhook_metrics_write(const struct webhook *w, struct buf *out)
{
	buf_addf(out, "# HELP cairnd_webhook_deliveries_total Webhook delivery attempts, by outcome.\n"
		      "# TYPE cairnd_webhook_deliveries_total counter\n"
		      "cairnd_webhook_deliveries_total{result=\"ok\"} %" PRIu64 "\n"
		      "cairnd_webhook_deliveries_total{result=\"failed\"} %" PRIu64 "\n"
		      "# HELP cairnd_webhook_in_flight Webhook deliveries being sent now.\n"
		      "# TYPE cairnd_webhook_in_flight gauge\ncairnd_webhook_in_flight %d\n",
		 w->ok, w->failed, w->in_flight);
}

struct webhook *webhook_new(struct event_base *base, struct pgq *q, const char *url,
			    const char *secret, char *err, size_t errlen)
{
	struct evhttp_uri *uri = evhttp_uri_parse(url);
	struct webhook *w = NULL;
	const char *scheme, *host, *path, *query;
	struct buf b = BUF_INIT;
	int port;

	if (!uri) {
		snprintf(err, errlen, "webhook URL \"%s\" is not a valid URL", url);
		goto out;
	}
	scheme = evhttp_uri_get_scheme(uri);
	host = evhttp_uri_get_host(uri);
	if (!scheme || strcasecmp(scheme, "http") != 0) {
		snprintf(err, errlen, "webhook URL \"%s\": only http:// is supported", url);
		goto out;
	}
	if (!host || !*host) {
		snprintf(err, errlen, "webhook URL \"%s\" has no host", url);
		goto out;
	}
	if (evhttp_uri_get_userinfo(uri)) {
		snprintf(err, errlen, "webhook URL \"%s\": user information is not supported", url);
		goto out;
	}
	port = evhttp_uri_get_port(uri);
	w = xcalloc(1, sizeof(*w));
	w->base = base;
	w->q = q;
	w->port = port > 0 ? port : 80;
	w->host = xstrdup(host);
	w->secret = xstrdup(secret ? secret : "");
	path = evhttp_uri_get_path(uri);
	query = evhttp_uri_get_query(uri);
	buf_adds(&b, path && *path ? path : "/");
	if (query) {
		buf_adds(&b, "?");
		buf_adds(&b, query);
	}
	w->path = buf_detach(&b);
	if (port > 0)
		buf_addf(&b, strchr(host, ':') ? "[%s]:%d" : "%s:%d", host, port);
	else
		buf_addf(&b, strchr(host, ':') ? "[%s]" : "%s", host);
	w->host_header = buf_detach(&b);
	TAILQ_INIT(&w->queued);
	TAILQ_INIT(&w->active);
	TAILQ_INIT(&w->dead);
	w->reaper = event_new(base, -1, 0, reaper_cb, w);
out:
	if (uri)
		evhttp_uri_free(uri);
	return w;
}

void webhook_free(struct webhook *w)
{
	struct delivery *d;

	if (!w)
		return;
	reaper_cb(-1, 0, w);
	/* Freeing a connection drops its request without calling back. */
	while ((d = TAILQ_FIRST(&w->active)) != NULL) {
		TAILQ_REMOVE(&w->active, d, link);
		delivery_free(d);
	}
	while ((d = TAILQ_FIRST(&w->queued)) != NULL) {
		TAILQ_REMOVE(&w->queued, d, link);
		delivery_free(d);
	}
	event_free(w->reaper);
	free(w->host);
	free(w->path);
	free(w->host_header);
	free(w->secret);
	free(w);
}
