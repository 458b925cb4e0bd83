/* client: a small blocking HTTP/1.1 client for cairnd's JSON API, on plain
 * sockets (one connection per request, "Connection: close"). It speaks
 * only http:// to the addresses it is given and knows nothing of the
 * routes: the commands build paths and read the JSON. */
#ifndef CAIRN_CLIENT_H
#define CAIRN_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <jansson.h>

#include "util.h"

/* Largest response body accepted. */
#define CLIENT_MAX_BODY (64u << 20)

struct client {
	char *host;   /* "127.0.0.1", "[::1]" stripped to "::1" */
	char *port;   /* "8787" */
	char *prefix; /* path prefix without trailing '/', often "" */
	char *token;  /* bearer token or NULL */
	int timeout_s; /* per read/write, on top of any long-poll wait */
};

struct response {
	int status;   /* HTTP status */
	json_t *body; /* parsed JSON body, or NULL when empty or not JSON */
};

/* Fills c from url ("http://host:port[/prefix]") and token (both borrowed,
 * copied). Returns -1 with a message in err for a URL it cannot use. */
int client_init(struct client *c, const char *url, const char *token, char *err,
		size_t errlen) WARN_UNUSED;
void client_release(struct client *c);

/* Sends one request: method, path (starting with '/', already escaped),
 * optional extra header line ("Name: value", no CRLF) and optional JSON
 * body (borrowed). extra_wait_s lengthens the read timeout for long polls.
 * On success returns 0 and fills resp (any HTTP status); the caller frees
 * with response_release. Returns -1 with a message in err when the server
 * could not be reached or the reply was not HTTP. */
int client_request(struct client *c, const char *method, const char *path,
		   const char *extra_header, json_t *body, int extra_wait_s,
		   struct response *resp, char *err, size_t errlen) WARN_UNUSED;
void response_release(struct response *resp);

/* Appends s percent-escaped for use in a path segment or query value. */
void url_escape(struct buf *b, const char *s);

#endif
