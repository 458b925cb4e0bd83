/* api: cairnd's route handlers (the HTTP API of docs/api.md) over the
 * store: a small pool of asynchronous connections for requests, one more
 * that LISTENs to wake long-polls, and a short-lived token cache. */
#ifndef CAIRN_API_H
#define CAIRN_API_H

#include <stdbool.h>
#include <stdint.h>

#include "http.h"

struct event_base;
struct api;

struct api_opts {
	const char *database_url; /* borrowed, copied by the connections */
	int connections;          /* request connections, >= 1 */
	const char *tenant;       /* borrowed; must outlive the api */
	int64_t statement_timeout_ms; /* per query on the request connections; 0: none */
};

/* Returns new; starts connecting at once. Caller frees with api_free. */
struct api *api_new(struct event_base *base, const struct api_opts *opts);
/* The routing table; handlers and api_auth take the api as their arg. */
const struct http_route *api_routes(void);
/* Token lookup for http_opts.auth (arg is the api). */
void api_auth(struct http_req *r, const char *token_sha256_hex, void *arg);
/* The server whose metrics /metrics shows (borrowed). */
void api_set_server(struct api *a, struct http_server *s);
/* The duties whose counters /metrics shows (borrowed). */
struct duties;
void api_set_duties(struct api *a, struct duties *d);
/* Answers every pending long-poll as soon as its next look at the store returns. */
void api_drain(struct api *a);
/* Long-polls still waiting. */
int api_waiting(const struct api *a);
/* Closes the connections; queries still queued fail, and their requests
 * are answered 503. */
void api_free(struct api *a);

#endif
