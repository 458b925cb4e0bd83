/* http: evhttp plumbing for cairnd. It owns the listening socket, request
 * routing, authentication (the token never leaves this file: only its
 * sha256 is handed on), body limits, JSON replies and request metrics. It
 * must not know what a run is; api.c does. */
#include "http.h"

#include <ctype.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/queue.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <openssl/evp.h>

#include "log.h"

#define MAX_SEGMENTS 16
#define MAX_SEGMENT_LEN 512
#define MAX_TOKEN_LEN 512
#define MAX_STATUSES 24
#define CONN_TIMEOUT_S 75 /* above the longest long-poll (60 s) */

static const double buckets[] = { 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
				  0.5, 1, 2.5, 5, 10, 30, 60 };
#define NBUCKETS (sizeof(buckets) / sizeof(buckets[0]))

struct route_metrics {
	struct { int status; uint64_t n; } statuses[MAX_STATUSES];
	uint64_t bucket[NBUCKETS];
	uint64_t count;
	double sum;
};

struct http_req {
	TAILQ_ENTRY(http_req) link;
	struct http_server *s;
	struct evhttp_request *ev;
	const struct http_route *route;
	int route_idx;
	char *params[HTTP_MAX_PARAMS];
	struct evkeyvalq query;
	json_t *body;
	char *actor;
	unsigned roles;
	int64_t start_us;
};
TAILQ_HEAD(http_req_list, http_req);

struct http_server {
	struct event_base *base;
	struct evhttp *http;
	struct evhttp_bound_socket *bound;
	const struct http_route *routes;
	int nroutes;
	struct http_opts opts;
	struct http_req_list reqs;
	int in_flight;
	bool closing;
	struct route_metrics *metrics; /* nroutes + 1: the last one is "unmatched" */
};

static const char *reason(int status)
{
	switch (status) {
	case 200: return "OK";
	case 201: return "Created";
	case 400: return "Bad Request";
	case 401: return "Unauthorized";
	case 403: return "Forbidden";
	case 404: return "Not Found";
	case 405: return "Method Not Allowed";
	case 409: return "Conflict";
	case 413: return "Payload Too Large";
	case 415: return "Unsupported Media Type";
	case 500: return "Internal Server Error";
	case 503: return "Service Unavailable";
	}
	return "Unknown";
}

static void record(struct http_server *s, int idx, int status, int64_t us)
{
	struct route_metrics *m = &s->metrics[idx < 0 ? s->nroutes : idx];
	double secs = (double)us / 1e6;
	int i;

	for (i = 0; i < MAX_STATUSES; i++) {
		if (m->statuses[i].status == status || m->statuses[i].status == 0) {
			m->statuses[i].status = status;
			m->statuses[i].n++;
			break;
		}
	}
	for (size_t b = 0; b < NBUCKETS; b++)
		if (secs <= buckets[b])
			m->bucket[b]++;
	m->count++;
	m->sum += secs;
}

static void req_free(struct http_req *r)
{
	struct http_server *s = r->s;

	TAILQ_REMOVE(&s->reqs, r, link);
	s->in_flight--;
	for (int i = 0; i < HTTP_MAX_PARAMS; i++)
		free(r->params[i]);
	evhttp_clear_headers(&r->query);
	json_decref(r->body);
	free(r->actor);
	free(r);
}

static const char *method_name(enum evhttp_cmd_type t)
{
	switch (t) {
	case EVHTTP_REQ_GET: return "GET";
	case EVHTTP_REQ_POST: return "POST";
	case EVHTTP_REQ_HEAD: return "HEAD";
	case EVHTTP_REQ_PUT: return "PUT";
	case EVHTTP_REQ_DELETE: return "DELETE";
	case EVHTTP_REQ_OPTIONS: return "OPTIONS";
	case EVHTTP_REQ_PATCH: return "PATCH";
	default: return "OTHER";
	}
}

static void send_buffer(struct http_req *r, int status, const char *ctype, const char *data,
			size_t len)
{
	struct evkeyvalq *h = evhttp_request_get_output_headers(r->ev);
	struct evbuffer *b = evbuffer_new();

	evhttp_add_header(h, "Content-Type", ctype);
	evhttp_add_header(h, "Cache-Control", "no-store");
	if (r->s->closing)
		evhttp_add_header(h, "Connection", "close");
	if (b)
		evbuffer_add(b, data, len);
	evhttp_send_reply(r->ev, status, reason(status), b);
	if (b)
		evbuffer_free(b);
	record(r->s, r->route_idx, status, mono_us() - r->start_us);
	log_debug("%s %s -> %d (%" PRId64 " us)", method_name(evhttp_request_get_command(r->ev)),
		  r->route ? r->route->name : "unmatched", status, mono_us() - r->start_us);
	req_free(r);
}

void http_reply_raw(struct http_req *r, int status, const char *json, size_t len)
{
	send_buffer(r, status, "application/json", json, len);
}

void http_reply_text(struct http_req *r, int status, const char *content_type, const char *text,
		     size_t len)
{
	send_buffer(r, status, content_type, text, len);
}

void http_reply_json(struct http_req *r, int status, json_t *body)
{
	char *s = body ? json_dumps(body, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;

	json_decref(body);
	if (!s) {
		static const char oom[] = "{\"error\":{\"code\":\"internal\",\"message\":\"could not encode the reply\"}}";
		send_buffer(r, 500, "application/json", oom, sizeof(oom) - 1);
		return;
	}
	send_buffer(r, status, "application/json", s, strlen(s));
	free(s);
}

void http_reply_error(struct http_req *r, int status, const char *code, const char *message,
		      json_t *details)
{
	json_t *err = json_pack("{s:s, s:s}", "code", code, "message", message);

	if (err && details)
		json_object_set_new(err, "details", details);
	else
		json_decref(details);
	if (status == 401)
		evhttp_add_header(evhttp_request_get_output_headers(r->ev), "WWW-Authenticate",
				  "Bearer realm=\"cairn\"");
	http_reply_json(r, status, err ? json_pack("{s:o}", "error", err) : NULL);
}

const char *http_param(const struct http_req *r, int i)
{
	return i >= 0 && i < HTTP_MAX_PARAMS ? r->params[i] : NULL;
}

const char *http_query(const struct http_req *r, const char *key)
{
	return evhttp_find_header(&r->query, key);
}

const char *http_header(const struct http_req *r, const char *name)
{
	return evhttp_find_header(evhttp_request_get_input_headers(r->ev), name);
}

json_t *http_body(const struct http_req *r)
{
	return r->body;
}

const char *http_actor(const struct http_req *r)
{
	return r->actor ? r->actor : "anonymous";
}

unsigned http_roles(const struct http_req *r)
{
	return r->roles;
}

/* Splits path into at most MAX_SEGMENTS segments (borrowed copies in buf). */
static int split_path(const char *path, char *buf, size_t buflen, char **seg)
{
	size_t len = strlen(path);
	int n = 0;
	char *p;

	if (len + 1 > buflen || path[0] != '/')
		return -1;
	memcpy(buf, path, len + 1);
	p = buf + 1;
	if (*p == '\0')
		return 0;
	for (;;) {
		char *slash = strchr(p, '/');

		if (n == MAX_SEGMENTS)
			return -1;
		seg[n++] = p;
		if (!slash)
			break;
		*slash = '\0';
		p = slash + 1;
	}
	return n;
}

/* Matches path segments against pattern; on success stores the captures
 * (percent-decoded, new strings) in caps. */
static bool match(const char *pattern, char **seg, int nseg, char **caps)
{
	char pbuf[256], *pseg[MAX_SEGMENTS];
	int np = split_path(pattern, pbuf, sizeof(pbuf), pseg), ncap = 0;

	if (np != nseg)
		return false;
	for (int i = 0; i < np; i++) {
		if (strcmp(pseg[i], "*") == 0) {
			if (seg[i][0] == '\0' || strlen(seg[i]) > MAX_SEGMENT_LEN)
				return false;
		} else if (strcmp(pseg[i], seg[i]) != 0) {
			return false;
		}
	}
	if (!caps)
		return true;
	for (int i = 0; i < np && ncap < HTTP_MAX_PARAMS; i++) {
		size_t dlen = 0;
		char *d;

		if (strcmp(pseg[i], "*") != 0)
			continue;
		d = evhttp_uridecode(seg[i], 0, &dlen);
		if (!d || strlen(d) != dlen || dlen == 0) {
			free(d);
			for (int j = 0; j < ncap; j++) {
				free(caps[j]);
				caps[j] = NULL;
			}
			return false;
		}
		caps[ncap++] = d;
	}
	return true;
}

static bool content_type_is_json(const char *ct)
{
	static const char want[] = "application/json";
	size_t n = sizeof(want) - 1;

	if (!ct || strncasecmp(ct, want, n) != 0)
		return false;
	return ct[n] == '\0' || ct[n] == ';' || ct[n] == ' ';
}

/* Reads and parses the body under the cap; answers r and returns -1 on failure. */
static int read_body(struct http_req *r)
{
	struct evbuffer *in = evhttp_request_get_input_buffer(r->ev);
	const char *cl = http_header(r, "Content-Length");
	size_t len = evbuffer_get_length(in);
	json_error_t jerr;
	char msg[320];
	unsigned char *data;

	if (cl) {
		char *end = NULL;
		unsigned long long n = strtoull(cl, &end, 10);

		if (end == cl || *end != '\0' || n > r->s->opts.max_body) {
			snprintf(msg, sizeof(msg), "request body exceeds the limit of %zu bytes",
				 r->s->opts.max_body);
			http_reply_error(r, 413, "payload_too_large", msg, NULL);
			return -1;
		}
	}
	if (len > r->s->opts.max_body) {
		snprintf(msg, sizeof(msg), "request body exceeds the limit of %zu bytes", r->s->opts.max_body);
		http_reply_error(r, 413, "payload_too_large", msg, NULL);
		return -1;
	}
	if (len == 0) {
		r->body = json_null();
		return 0;
	}
	if (!content_type_is_json(http_header(r, "Content-Type"))) {
		http_reply_error(r, 415, "unsupported_media_type",
				 "request body must be sent as \"Content-Type: application/json\"", NULL);
		return -1;
	}
	data = evbuffer_pullup(in, -1);
	r->body = json_loadb((const char *)data, len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &jerr);
	if (!r->body) {
		json_t *details;

		snprintf(msg, sizeof(msg), "invalid JSON at line %d, column %d: %s", jerr.line,
			 jerr.column, jerr.text);
		details = json_pack("[{s:s, s:s, s:i, s:i}]", "path", "$", "message", jerr.text, "line",
				    jerr.line, "column", jerr.column);
		http_reply_error(r, 400, "invalid_json", msg, details);
		return -1;
	}
	return 0;
}

/* Runs once the caller is known: role check, body, handler. */
static void proceed(struct http_req *r)
{
	const struct http_route *rt = r->route;

	if (rt->role && !(r->roles & ROLE_ADMIN) && !(r->roles & rt->role)) {
		char msg[160];

		snprintf(msg, sizeof(msg), "token \"%s\" lacks the role this route needs",
			 http_actor(r));
		http_reply_error(r, 403, "forbidden", msg, NULL);
		return;
	}
	if ((rt->flags & HTTP_JSON_BODY) && read_body(r) < 0)
		return;
	rt->handler(r, r->s->opts.arg);
}

void http_auth_done(struct http_req *r, bool ok, const char *name, unsigned roles)
{
	if (!ok) {
		http_reply_error(r, 503, "unavailable", "could not check the token: database unavailable",
				 NULL);
		return;
	}
	if (!name) {
		http_reply_error(r, 401, "unauthorized", "unknown token", NULL);
		return;
	}
	r->actor = xstrdup(name);
	r->roles = roles;
	proceed(r);
}

static void sha256_hex(const char *s, size_t len, char out[65])
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;
	static const char hex[] = "0123456789abcdef";

	out[0] = '\0';
	if (!EVP_Digest(s, len, md, &mdlen, EVP_sha256(), NULL) || mdlen != 32)
		return;
	for (unsigned i = 0; i < 32; i++) {
		out[2 * i] = hex[md[i] >> 4];
		out[2 * i + 1] = hex[md[i] & 15];
	}
	out[64] = '\0';
}

static void authenticate(struct http_req *r)
{
	const char *h = http_header(r, "Authorization"), *tok;
	char hash[65];
	size_t len;

	if (r->route->flags & HTTP_PUBLIC || r->s->opts.no_auth) {
		r->roles = ROLE_ALL;
		proceed(r);
		return;
	}
	if (!h) {
		http_reply_error(r, 401, "unauthorized", "missing \"Authorization: Bearer\" header", NULL);
		return;
	}
	if (strncasecmp(h, "Bearer", 6) != 0 || (h[6] != ' ' && h[6] != '\0')) {
		http_reply_error(r, 401, "unauthorized", "authorization scheme must be \"Bearer\"", NULL);
		return;
	}
	tok = h + 6;
	while (*tok == ' ')
		tok++;
	len = strlen(tok);
	while (len > 0 && tok[len - 1] == ' ')
		len--;
	if (len == 0 || len > MAX_TOKEN_LEN) {
		http_reply_error(r, 401, "unauthorized", "malformed bearer token", NULL);
		return;
	}
	sha256_hex(tok, len, hash);
	if (!hash[0]) {
		http_reply_error(r, 500, "internal", "could not hash the token", NULL);
		return;
	}
	r->s->opts.auth(r, hash, r->s->opts.arg);
}

static void on_request(struct evhttp_request *ev, void *arg)
{
	struct http_server *s = arg;
	struct http_req *r = xcalloc(1, sizeof(*r));
	const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(ev);
	const char *path = uri ? evhttp_uri_get_path(uri) : NULL, *q;
	const char *method = method_name(evhttp_request_get_command(ev));
	char pbuf[2048], *seg[MAX_SEGMENTS];
	char allow[64] = "";
	int nseg;

	r->s = s;
	r->ev = ev;
	r->route_idx = -1;
	r->start_us = mono_us();
	TAILQ_INIT(&r->query);
	TAILQ_INSERT_TAIL(&s->reqs, r, link);
	s->in_flight++;

	nseg = path ? split_path(path, pbuf, sizeof(pbuf), seg) : -1;
	if (nseg < 0) {
		http_reply_error(r, 404, "not_found", "no such route", NULL);
		return;
	}
	for (int i = 0; i < s->nroutes; i++) {
		const struct http_route *rt = &s->routes[i];

		if (!match(rt->pattern, seg, nseg, NULL))
			continue;
		if (strcmp(rt->method, method) != 0) {
			if (!strstr(allow, rt->method) && strlen(allow) + strlen(rt->method) + 3 < sizeof(allow)) {
				if (allow[0])
					strcat(allow, ", ");
				strcat(allow, rt->method);
			}
			continue;
		}
		if (!match(rt->pattern, seg, nseg, r->params)) {
			http_reply_error(r, 404, "not_found", "malformed path segment", NULL);
			return;
		}
		r->route = rt;
		r->route_idx = i;
		break;
	}
	if (!r->route) {
		if (allow[0]) {
			char msg[128];

			snprintf(msg, sizeof(msg), "method %s is not allowed here (allowed: %s)", method, allow);
			evhttp_add_header(evhttp_request_get_output_headers(ev), "Allow", allow);
			http_reply_error(r, 405, "method_not_allowed", msg, NULL);
		} else {
			http_reply_error(r, 404, "not_found", "no such route", NULL);
		}
		return;
	}
	q = evhttp_uri_get_query(uri);
	if (q && evhttp_parse_query_str(q, &r->query) < 0) {
		http_reply_error(r, 400, "invalid_request", "malformed query string", NULL);
		return;
	}
	authenticate(r);
}

struct http_server *http_new(struct event_base *base, const struct http_route *routes,
			     const struct http_opts *opts)
{
	struct http_server *s = xcalloc(1, sizeof(*s));

	s->base = base;
	s->routes = routes;
	while (routes[s->nroutes].method)
		s->nroutes++;
	s->opts = *opts;
	TAILQ_INIT(&s->reqs);
	s->metrics = xcalloc((size_t)s->nroutes + 1, sizeof(*s->metrics));
	s->http = evhttp_new(base);
	if (!s->http) {
		free(s->metrics);
		free(s);
		return NULL;
	}
	/* Bodies are checked against max_body in read_body, which answers in
	 * JSON; evhttp's own cap (twice as large) only bounds what a client
	 * can make us buffer, including chunked bodies. */
	evhttp_set_max_body_size(s->http, (ev_ssize_t)(opts->max_body * 2 + 4096));
	evhttp_set_max_headers_size(s->http, 64 * 1024);
	/* Read and drop the rest of a refused body, so the client sees the 413. */
	evhttp_set_flags(s->http, EVHTTP_SERVER_LINGERING_CLOSE);
	evhttp_set_timeout(s->http, CONN_TIMEOUT_S);
	evhttp_set_allowed_methods(s->http, EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_HEAD |
					    EVHTTP_REQ_PUT | EVHTTP_REQ_DELETE | EVHTTP_REQ_PATCH |
					    EVHTTP_REQ_OPTIONS);
	evhttp_set_gencb(s->http, on_request, s);
	return s;
}

int http_bind(struct http_server *s, const char *host, int port, int *bound)
{
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	evutil_socket_t fd;

	s->bound = evhttp_bind_socket_with_handle(s->http, host, (ev_uint16_t)port);
	if (!s->bound)
		return error("could not listen on \"%s:%d\": %m", host, port);
	fd = evhttp_bound_socket_get_fd(s->bound);
	if (getsockname(fd, (struct sockaddr *)&ss, &sl) < 0)
		return error("could not read the bound address: %m");
	if (ss.ss_family == AF_INET)
		*bound = ntohs(((struct sockaddr_in *)&ss)->sin_port);
	else if (ss.ss_family == AF_INET6)
		*bound = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
	else
		*bound = port;
	return 0;
}

void http_stop_accepting(struct http_server *s)
{
	s->closing = true;
	if (s->bound) {
		evhttp_del_accept_socket(s->http, s->bound);
		s->bound = NULL;
	}
}

int http_in_flight(const struct http_server *s)
{
	return s->in_flight;
}

void http_free(struct http_server *s)
{
	if (!s)
		return;
	evhttp_free(s->http);
	/* Requests still listed were freed by evhttp with their connections. */
	while (!TAILQ_EMPTY(&s->reqs)) {
		struct http_req *r = TAILQ_FIRST(&s->reqs);
		req_free(r);
	}
	free(s->metrics);
	free(s);
}

void http_metrics_write(const struct http_server *s, struct buf *out)
{
	buf_adds(out, "# HELP cairnd_http_requests_total HTTP requests answered, by route and status.\n"
		      "# TYPE cairnd_http_requests_total counter\n");
	for (int i = 0; i <= s->nroutes; i++) {
		const struct route_metrics *m = &s->metrics[i];
		const char *name = i < s->nroutes ? s->routes[i].name : "unmatched";

		for (int j = 0; j < MAX_STATUSES && m->statuses[j].status; j++)
			buf_addf(out, "cairnd_http_requests_total{route=\"%s\",status=\"%d\"} %" PRIu64 "\n",
				 name, m->statuses[j].status, m->statuses[j].n);
	}
	buf_adds(out, "# HELP cairnd_http_request_duration_seconds Time from request to reply, by route.\n"
		      "# TYPE cairnd_http_request_duration_seconds histogram\n");
	for (int i = 0; i <= s->nroutes; i++) {
		const struct route_metrics *m = &s->metrics[i];
		const char *name = i < s->nroutes ? s->routes[i].name : "unmatched";

		if (!m->count)
			continue;
		for (size_t b = 0; b < NBUCKETS; b++)
			buf_addf(out, "cairnd_http_request_duration_seconds_bucket{route=\"%s\",le=\"%g\"} %" PRIu64 "\n",
				 name, buckets[b], m->bucket[b]);
		buf_addf(out, "cairnd_http_request_duration_seconds_bucket{route=\"%s\",le=\"+Inf\"} %" PRIu64 "\n",
			 name, m->count);
		buf_addf(out, "cairnd_http_request_duration_seconds_sum{route=\"%s\"} %.6f\n", name, m->sum);
		buf_addf(out, "cairnd_http_request_duration_seconds_count{route=\"%s\"} %" PRIu64 "\n", name,
			 m->count);
	}
}
