/* http: cairnd's HTTP plumbing on libevent's evhttp: a routing table,
 * bearer-token authentication with roles, JSON bodies under a size cap,
 * JSON errors, request metrics. Route handlers live in api.c; this module
 * knows nothing about runs or the store. */
#ifndef CAIRN_HTTP_H
#define CAIRN_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <jansson.h>

#include "util.h"

struct event_base;
struct http_server;
struct http_req;

/* Roles a token may carry; admin implies all. */
enum http_role {
	ROLE_SUBMIT = 1 << 0,
	ROLE_APPROVE = 1 << 1,
	ROLE_READ = 1 << 2,
	ROLE_ADMIN = 1 << 3,
};
#define ROLE_ALL (ROLE_SUBMIT | ROLE_APPROVE | ROLE_READ | ROLE_ADMIN)

enum http_route_flags {
	HTTP_PUBLIC = 1 << 0,    /* no token needed */
	HTTP_JSON_BODY = 1 << 1, /* the body is parsed as JSON (an empty body reads as null) */
};

#define HTTP_MAX_PARAMS 4

/* One route: method ("GET" or "POST"), a path pattern whose "*" segments
 * match one non-empty path segment each (captured, percent-decoded, in
 * order), the name used in metrics, the role needed, and the handler.
 * A handler must eventually answer with exactly one http_reply_* call
 * (possibly later, from a database callback). */
struct http_route {
	const char *method;
	const char *pattern;
	const char *name;
	unsigned role;
	unsigned flags;
	void (*handler)(struct http_req *r, void *arg);
};

/* Looks up the sha256 of a bearer token (lower-case hex, borrowed) and
 * answers later with http_auth_done. The token itself never leaves http.c. */
typedef void (*http_auth_fn)(struct http_req *r, const char *token_sha256_hex, void *arg);

struct http_opts {
	size_t max_body;   /* largest accepted request body, in bytes */
	bool no_auth;      /* every request acts as "anonymous" with every role */
	http_auth_fn auth; /* required unless no_auth */
	void *arg;         /* passed to handlers and auth */
};

/* Returns new, or NULL when evhttp cannot be created. routes (borrowed)
 * ends with an entry whose method is NULL and must outlive the server.
 * Caller frees with http_free. */
struct http_server *http_new(struct event_base *base, const struct http_route *routes,
			     const struct http_opts *opts);
/* Binds host:port (port 0 picks a free one); sets *bound to the port. */
int http_bind(struct http_server *s, const char *host, int port, int *bound) WARN_UNUSED;
/* Stops accepting connections; requests in flight carry on. */
void http_stop_accepting(struct http_server *s);
/* Requests received and not yet answered. */
int http_in_flight(const struct http_server *s);
/* Frees the server; call only when http_in_flight is 0. */
void http_free(struct http_server *s);

/* Appends the request metrics in Prometheus text format. */
void http_metrics_write(const struct http_server *s, struct buf *out);

/* Request accessors; every returned pointer is borrowed and valid until
 * the request is answered. */
const char *http_param(const struct http_req *r, int i);   /* i-th "*" of the pattern */
const char *http_query(const struct http_req *r, const char *key); /* NULL when absent */
const char *http_header(const struct http_req *r, const char *name);
json_t *http_body(const struct http_req *r);  /* HTTP_JSON_BODY routes; may be json null */
const char *http_actor(const struct http_req *r);  /* the token's name */
unsigned http_roles(const struct http_req *r);

/* Answers the auth lookup: name (borrowed) and roles when the token is
 * known, name NULL when it is not; ok false when the lookup itself failed
 * (the client gets 503). */
void http_auth_done(struct http_req *r, bool ok, const char *name, unsigned roles);

/* Each of these answers r and frees it; r is invalid afterwards. */
/* body is stolen. */
void http_reply_json(struct http_req *r, int status, json_t *body);
/* json is a serialized JSON document (borrowed, copied). */
void http_reply_raw(struct http_req *r, int status, const char *json, size_t len);
void http_reply_text(struct http_req *r, int status, const char *content_type,
		     const char *text, size_t len);
/* {"error": {"code", "message", "details"?}}; details (array or NULL) is stolen. */
void http_reply_error(struct http_req *r, int status, const char *code, const char *message,
		      json_t *details);

#endif
