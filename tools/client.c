/* client: blocking HTTP/1.1 requests to cairnd over plain sockets. It
 * reads one response per connection (Content-Length, chunked, or up to
 * EOF), caps what it accepts, and never follows redirects. */
#include "config.h"
#include "client.h"

#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#define MAX_HEADERS (64u << 10)

int client_init(struct client *c, const char *url, const char *token, char *err, size_t errlen)
{
	const char *p, *end, *colon;
	size_t hostlen;

	memset(c, 0, sizeof(*c));
	c->timeout_s = 30;
	if (strncasecmp(url, "http://", 7) != 0) {
		snprintf(err, errlen, "unsupported URL \"%s\": only http:// is supported", url);
		return -1;
	}
	p = url + 7;
	end = p + strcspn(p, "/?#");
	if (*p == '[') {
		const char *rb = memchr(p, ']', (size_t)(end - p));

		if (!rb) {
			snprintf(err, errlen, "invalid URL \"%s\": unterminated IPv6 address", url);
			return -1;
		}
		c->host = strndup(p + 1, (size_t)(rb - p - 1));
		colon = rb + 1 < end && rb[1] == ':' ? rb + 1 : NULL;
	} else {
		colon = memchr(p, ':', (size_t)(end - p));
		hostlen = (size_t)((colon ? colon : end) - p);
		c->host = strndup(p, hostlen);
	}
	if (colon && colon + 1 < end)
		c->port = strndup(colon + 1, (size_t)(end - colon - 1));
	else
		c->port = xstrdup("80");
	c->prefix = xstrdup(end);
	c->prefix[strcspn(c->prefix, "?#")] = '\0';
	while (*c->prefix && c->prefix[strlen(c->prefix) - 1] == '/')
		c->prefix[strlen(c->prefix) - 1] = '\0';
	c->token = token && *token ? xstrdup(token) : NULL;
	if (!c->host || !c->port || !*c->host) {
		snprintf(err, errlen, "invalid URL \"%s\": no host", url);
		client_release(c);
		return -1;
	}
	if (strspn(c->port, "0123456789") != strlen(c->port)) {
		snprintf(err, errlen, "invalid URL \"%s\": bad port", url);
		client_release(c);
		return -1;
	}
	return 0;
}

void client_release(struct client *c)
{
	free(c->host);
	free(c->port);
	free(c->prefix);
	free(c->token);
	memset(c, 0, sizeof(*c));
}

void response_release(struct response *resp)
{
	json_decref(resp->body);
	resp->body = NULL;
	resp->status = 0;
}

void url_escape(struct buf *b, const char *s)
{
	static const char hex[] = "0123456789ABCDEF";

	for (; *s; s++) {
		unsigned char ch = (unsigned char)*s;

		if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
		    (ch >= '0' && ch <= '9') || strchr("-._~", ch)) {
			buf_add(b, s, 1);
		} else {
			char esc[3] = { '%', hex[ch >> 4], hex[ch & 15] };

			buf_add(b, esc, 3);
		}
	}
}

static int dial(struct client *c, int timeout_s, char *err, size_t errlen)
{
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM };
	struct addrinfo *res = NULL, *ai;
	struct timeval tv = { .tv_sec = timeout_s };
	int fd = -1, rc, saved = 0;

	rc = getaddrinfo(c->host, c->port, &hints, &res);
	if (rc != 0) {
		snprintf(err, errlen, "could not resolve \"%s\": %s", c->host, gai_strerror(rc));
		return -1;
	}
	for (ai = res; ai; ai = ai->ai_next) {
		fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
		if (fd < 0) {
			saved = errno;
			continue;
		}
		setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
		setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
		if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0)
			break;
		saved = errno;
		close(fd);
		fd = -1;
	}
	freeaddrinfo(res);
	if (fd < 0)
		snprintf(err, errlen, "could not connect to %s:%s: %s", c->host, c->port,
			 strerror(saved));
	return fd;
}

static int write_all(int fd, const char *p, size_t len)
{
	while (len > 0) {
		ssize_t n = send(fd, p, len, MSG_NOSIGNAL);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

/* Finds header name (case-insensitive) in the header block; returns a
 * pointer to its value or NULL. */
static const char *header_value(const char *head, size_t headlen, const char *name)
{
	size_t nlen = strlen(name);
	const char *p = head, *end = head + headlen;

	while (p < end) {
		const char *eol = memchr(p, '\n', (size_t)(end - p));

		if (!eol)
			eol = end;
		if ((size_t)(eol - p) > nlen && strncasecmp(p, name, nlen) == 0 && p[nlen] == ':') {
			p += nlen + 1;
			while (*p == ' ' || *p == '\t')
				p++;
			return p;
		}
		p = eol + 1;
	}
	return NULL;
}

/* Decodes a chunked body into out. Returns 1 when complete, 0 when more
 * data is needed, -1 on a malformed body. */
static int dechunk(const char *in, size_t inlen, struct buf *out)
{
	size_t pos = 0;

	buf_reset(out);
	for (;;) {
		const char *eol = memchr(in + pos, '\n', inlen - pos);
		char *endp;
		unsigned long size;

		if (!eol)
			return 0;
		errno = 0;
		size = strtoul(in + pos, &endp, 16);
		if (errno || endp == in + pos || size > CLIENT_MAX_BODY)
			return -1;
		pos = (size_t)(eol - in) + 1;
		if (size == 0)
			return 1; /* trailers are ignored */
		if (inlen - pos < size + 2)
			return 0;
		buf_add(out, in + pos, size);
		if (out->len > CLIENT_MAX_BODY)
			return -1;
		pos += size;
		if (in[pos] == '\r')
			pos++;
		if (pos < inlen && in[pos] == '\n')
			pos++;
	}
}

/* Looks at what has arrived: 1 = a whole response is in raw (body copied
 * into body), 0 = need more, -1 = malformed. eof says the peer closed. */
static int parse_response(const struct buf *raw, bool eof, int *status, struct buf *body,
			  char *err, size_t errlen)
{
	const char *sep, *v;
	size_t headlen, have;
	int major, minor, code;

	sep = raw->len ? memmem(raw->data, raw->len, "\r\n\r\n", 4) : NULL;
	if (!sep) {
		if (raw->len > MAX_HEADERS || eof) {
			snprintf(err, errlen, "%s", eof ? "connection closed before a complete reply"
							: "reply headers too large");
			return -1;
		}
		return 0;
	}
	if (sscanf(raw->data, "HTTP/%d.%d %d", &major, &minor, &code) != 3 || code < 100 ||
	    code > 999) {
		snprintf(err, errlen, "reply is not HTTP");
		return -1;
	}
	*status = code;
	headlen = (size_t)(sep - raw->data) + 2;
	have = raw->len - headlen - 2;
	v = header_value(raw->data, headlen, "Transfer-Encoding");
	if (v && strncasecmp(v, "chunked", 7) == 0) {
		int rc = dechunk(sep + 4, have, body);

		if (rc < 0 || (rc == 0 && eof)) {
			snprintf(err, errlen, "malformed chunked reply");
			return -1;
		}
		return rc;
	}
	v = header_value(raw->data, headlen, "Content-Length");
	if (v) {
		unsigned long len = strtoul(v, NULL, 10);

		if (len > CLIENT_MAX_BODY) {
			snprintf(err, errlen, "reply body too large (%lu bytes)", len);
			return -1;
		}
		if (have < len) {
			if (eof) {
				snprintf(err, errlen, "connection closed before the whole reply");
				return -1;
			}
			return 0;
		}
		buf_reset(body);
		buf_add(body, sep + 4, len);
		return 1;
	}
	if (code == 204 || code == 304 || code < 200) {
		buf_reset(body);
		return 1;
	}
	if (!eof)
		return 0;
	buf_reset(body);
	buf_add(body, sep + 4, have);
	return 1;
}

int client_request(struct client *c, const char *method, const char *path,
		   const char *extra_header, json_t *body, int extra_wait_s,
		   struct response *resp, char *err, size_t errlen)
{
	struct buf req = BUF_INIT, raw = BUF_INIT, rbody = BUF_INIT;
	char *payload = NULL;
	int fd = -1, ret = -1, rc = 0;

	resp->status = 0;
	resp->body = NULL;
	if (body) {
		payload = json_dumps(body, JSON_COMPACT | JSON_ENCODE_ANY);
		if (!payload) {
			snprintf(err, errlen, "could not encode the request body");
			goto out;
		}
	}
	buf_addf(&req, "%s %s%s HTTP/1.1\r\n", method, c->prefix, path);
	if (strchr(c->host, ':'))
		buf_addf(&req, "Host: [%s]:%s\r\n", c->host, c->port);
	else
		buf_addf(&req, "Host: %s:%s\r\n", c->host, c->port);
	buf_addf(&req, "User-Agent: cairn/%s\r\nAccept: application/json\r\nConnection: close\r\n",
		 PACKAGE_VERSION);
	if (c->token)
		buf_addf(&req, "Authorization: Bearer %s\r\n", c->token);
	if (extra_header)
		buf_addf(&req, "%s\r\n", extra_header);
	if (payload)
		buf_addf(&req, "Content-Type: application/json\r\nContent-Length: %zu\r\n",
			 strlen(payload));
	else if (strcmp(method, "POST") == 0)
		buf_adds(&req, "Content-Length: 0\r\n");
	buf_adds(&req, "\r\n");
	if (payload)
		buf_adds(&req, payload);

	fd = dial(c, c->timeout_s + extra_wait_s, err, errlen);
	if (fd < 0)
		goto out;
	if (write_all(fd, req.data, req.len) < 0) {
		snprintf(err, errlen, "could not send the request to %s:%s: %s", c->host, c->port,
			 strerror(errno));
		goto out;
	}
	for (;;) {
		char chunk[16384];
		ssize_t n = recv(fd, chunk, sizeof(chunk), 0);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			snprintf(err, errlen, "could not read the reply from %s:%s: %s", c->host,
				 c->port, errno == EAGAIN ? "timed out" : strerror(errno));
			goto out;
		}
		if (n > 0)
			buf_add(&raw, chunk, (size_t)n);
		if (raw.len > CLIENT_MAX_BODY + MAX_HEADERS) {
			snprintf(err, errlen, "reply too large");
			goto out;
		}
		rc = parse_response(&raw, n == 0, &resp->status, &rbody, err, errlen);
		if (rc < 0)
			goto out;
		if (rc > 0)
			break;
	}
	if (rbody.len > 0)
		resp->body = json_loadb(rbody.data, rbody.len, JSON_DECODE_ANY, NULL);
	ret = 0;
out:
	if (fd >= 0)
		close(fd);
	free(payload);
	buf_release(&req);
	buf_release(&raw);
	buf_release(&rbody);
	return ret;
}
