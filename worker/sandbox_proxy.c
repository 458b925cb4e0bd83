/* sandbox_proxy: the egress allow-list. An HTTP and HTTPS (CONNECT) proxy
 * on the caller's event loop, reached only through connections the
 * sandbox's init hands over a socket pair. It checks host:port against the
 * list, resolves names itself, refuses loopback, private, link-local and
 * metadata addresses unless the list names them literally, caps bytes and
 * connections, and logs every decision. It never blocks the loop. */
#include "config.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/dns.h>
#include <event2/event.h>
#include <event2/util.h>

#include "sandbox.h"
#include "sandbox_proxy.h"

#define MAX_HEAD 8192
#define MAX_QUEUED (256 * 1024)
#define MAX_ALLOW 100
#define DEFAULT_MAX_CONNS 64
#define DEFAULT_MAX_BYTES (1LL << 30)

struct allow {
	char host[256];                 /* lower case; "*.x" matches subdomains of x */
	int port;
	bool literal;                   /* host is an IP address */
};

struct conn {
	struct sandbox_proxy *px;
	struct conn *next;
	struct bufferevent *in, *out;   /* the sandbox side, the remote side */
	struct evdns_getaddrinfo_request *dns;
	char host[256], target[300], method[16];
	int port;
	bool connect_method, literal_ok, dead, connected, closing;
	struct evbuffer *head;          /* rewritten request head for plain HTTP */
};

struct sandbox_proxy {
	struct event_base *base;
	struct evdns_base *dns;
	struct event *ev;
	int fd, child_fd;
	struct allow allow[MAX_ALLOW];
	size_t nallow;
	struct conn *conns;
	int nconns, max_conns;
	int64_t bytes, max_bytes;
	sandbox_proxy_log_fn log;
	void *log_arg;
};

__attribute__((format(printf, 2, 3)))
static void plog(struct sandbox_proxy *px, const char *fmt, ...)
{
	char line[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	if (px->log)
		px->log(px->log_arg, line);
}

static bool is_ip(const char *s)
{
	struct in6_addr a6;
	struct in_addr a4;

	return inet_pton(AF_INET, s, &a4) == 1 || inet_pton(AF_INET6, s, &a6) == 1;
}

/* Parses "host:port" or "[v6]:port" into host (lower case) and port. */
static int split_hostport(const char *s, char *host, size_t hostlen, int *port)
{
	const char *colon, *h = s;
	size_t n;
	char *end;
	long p;

	if (*s == '[') {
		const char *rb = strchr(s, ']');

		if (!rb || rb[1] != ':')
			return -1;
		h = s + 1;
		n = (size_t)(rb - h);
		colon = rb + 1;
	} else {
		colon = strrchr(s, ':');
		if (!colon)
			return -1;
		n = (size_t)(colon - s);
	}
	if (n == 0 || n >= hostlen)
		return -1;
	for (size_t i = 0; i < n; i++)
		host[i] = (char)tolower((unsigned char)h[i]);
	host[n] = '\0';
	errno = 0;
	p = strtol(colon + 1, &end, 10);
	if (errno || *end || p < 1 || p > 65535)
		return -1;
	*port = (int)p;
	return 0;
}

int sandbox_proxy_parse_allow(const json_t *network, char *err, size_t errlen)
{
	const json_t *allow = json_object_get(network, "allow");
	json_t *item;
	size_t i;

	if (!json_is_array(allow) || json_array_size(allow) > MAX_ALLOW) {
		snprintf(err, errlen, "sandbox \"network\".\"allow\" must be an array of at most %d \"host:port\" strings",
			 MAX_ALLOW);
		return -1;
	}
	json_array_foreach(allow, i, item) {
		char host[256];
		int port;

		if (!json_is_string(item) || split_hostport(json_string_value(item), host, sizeof(host), &port) < 0) {
			snprintf(err, errlen, "sandbox \"network\".\"allow\"[%zu] must be \"host:port\"", i);
			return -1;
		}
	}
	return 0;
}

/* Addresses a name may not resolve to: loopback, private, link-local
 * (metadata), CGNAT, multicast, unspecified and reserved ranges. */
static bool addr_private(const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET) {
		uint32_t a = ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr);

		return (a >> 24) == 0 || (a >> 24) == 127 || (a >> 24) == 10 || (a >> 20) == (172 << 4 | 1) ||
		       (a >> 16) == (192 << 8 | 168) || (a >> 16) == (169 << 8 | 254) ||
		       (a >> 22) == (100 << 2 | 1) || (a >> 28) >= 14;
	}
	if (sa->sa_family == AF_INET6) {
		const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;

		if (IN6_IS_ADDR_V4MAPPED(a)) {
			struct sockaddr_in v4 = { .sin_family = AF_INET };

			memcpy(&v4.sin_addr, a->s6_addr + 12, 4);
			return addr_private((struct sockaddr *)&v4);
		}
		return IN6_IS_ADDR_LOOPBACK(a) || IN6_IS_ADDR_UNSPECIFIED(a) || IN6_IS_ADDR_LINKLOCAL(a) ||
		       IN6_IS_ADDR_MULTICAST(a) || (a->s6_addr[0] & 0xfe) == 0xfc;
	}
	return true;
}

/* Finds the entry allowing host:port; NULL if none. */
static const struct allow *allowed(struct sandbox_proxy *px, const char *host, int port)
{
	for (size_t i = 0; i < px->nallow; i++) {
		const struct allow *a = &px->allow[i];

		if (a->port != port)
			continue;
		if (strcmp(a->host, host) == 0)
			return a;
		if (a->host[0] == '*' && a->host[1] == '.') {
			size_t hl = strlen(host), sl = strlen(a->host + 1);

			if (hl > sl && strcmp(host + hl - sl, a->host + 1) == 0)
				return a;
		}
	}
	return NULL;
}

static void conn_free(struct conn *c)
{
	struct sandbox_proxy *px = c->px;

	for (struct conn **pp = &px->conns; *pp; pp = &(*pp)->next)
		if (*pp == c) {
			*pp = c->next;
			break;
		}
	if (c->dns)
		evdns_getaddrinfo_cancel(c->dns);
	if (c->in)
		bufferevent_free(c->in);
	if (c->out)
		bufferevent_free(c->out);
	if (c->head)
		evbuffer_free(c->head);
	px->nconns--;
	free(c);
}

static void deny(struct conn *c, int code, const char *why)
{
	char body[512];

	plog(c->px, "cairn-proxy: denied %s %s:%d: %s", c->method, c->host[0] ? c->host : "?", c->port, why);
	snprintf(body, sizeof(body), "cairn: egress to %s:%d denied: %s\n", c->host, c->port, why);
	evbuffer_add_printf(bufferevent_get_output(c->in),
			    "HTTP/1.1 %d %s\r\nContent-Type: text/plain\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n%s",
			    code, code == 403 ? "Forbidden" : code == 502 ? "Bad Gateway" : "Bad Request", strlen(body), body);
	c->dead = true;
	bufferevent_disable(c->in, EV_READ);
}

static void relay_read(struct bufferevent *from, void *arg);
static void relay_event(struct bufferevent *bev, short what, void *arg);

/* Closes c once its sandbox side has flushed what we queued; else the
 * other side may read again (back-pressure, see relay_read). */
static void in_write(struct bufferevent *bev, void *arg)
{
	struct conn *c = arg;

	(void)bev;
	if (c->dead) {
		conn_free(c);
		return;
	}
	if (c->out && c->connected)
		bufferevent_enable(c->out, EV_READ);
}

static void out_write(struct bufferevent *bev, void *arg)
{
	struct conn *c = arg;

	(void)bev;
	if (c->closing) {
		conn_free(c);
		return;
	}
	if (c->connected && !c->dead)
		bufferevent_enable(c->in, EV_READ);
}

static void relay_read(struct bufferevent *from, void *arg)
{
	struct conn *c = arg;
	struct sandbox_proxy *px = c->px;
	struct bufferevent *to = from == c->in ? c->out : c->in;
	struct evbuffer *src = bufferevent_get_input(from);
	size_t n = evbuffer_get_length(src);

	if (!to)
		return;
	px->bytes += (int64_t)n;
	if (px->bytes > px->max_bytes) {
		plog(px, "cairn-proxy: closed %s:%d: the sandbox's egress byte cap (%lld) is reached", c->host,
		     c->port, (long long)px->max_bytes);
		conn_free(c);
		return;
	}
	evbuffer_add_buffer(bufferevent_get_output(to), src);
	/* A side that does not read must not make us buffer without end. */
	if (evbuffer_get_length(bufferevent_get_output(to)) > MAX_QUEUED) {
		bufferevent_disable(from, EV_READ);
		bufferevent_setwatermark(to, EV_WRITE, MAX_QUEUED / 4, 0);
	}
}

static void relay_event(struct bufferevent *bev, short what, void *arg)
{
	struct conn *c = arg;

	if (what & BEV_EVENT_CONNECTED) {
		c->connected = true;
		plog(c->px, "cairn-proxy: connected %s:%d", c->host, c->port);
		if (c->connect_method)
			evbuffer_add_printf(bufferevent_get_output(c->in), "HTTP/1.1 200 Connection established\r\n\r\n");
		else
			evbuffer_add_buffer(bufferevent_get_output(c->out), c->head);
		/* Anything the client sent after its head goes on. */
		relay_read(c->in, c);
		bufferevent_setcb(c->in, relay_read, in_write, relay_event, c);
		bufferevent_enable(c->in, EV_READ);
		bufferevent_enable(c->out, EV_READ);
		return;
	}
	if (!(what & (BEV_EVENT_EOF | BEV_EVENT_ERROR)))
		return;
	if (bev == c->out && !c->connected) {
		bufferevent_free(c->out);
		c->out = NULL;
		deny(c, 502, "connection failed");
		return;
	}
	/* One end is done: pass on what it sent, flush, then close both. */
	if (c->dead || c->closing) {
		conn_free(c);
		return;
	}
	if (evbuffer_get_length(bufferevent_get_input(bev)) > 0) {
		struct bufferevent *to = bev == c->in ? c->out : c->in;

		if (to)
			evbuffer_add_buffer(bufferevent_get_output(to), bufferevent_get_input(bev));
	}
	if (bev == c->out && evbuffer_get_length(bufferevent_get_output(c->in)) > 0) {
		bufferevent_free(c->out);
		c->out = NULL;
		c->dead = true;
		bufferevent_disable(c->in, EV_READ);
		bufferevent_setwatermark(c->in, EV_WRITE, 0, 0);
		return;
	}
	if (bev == c->in && c->out && evbuffer_get_length(bufferevent_get_output(c->out)) > 0) {
		c->closing = true;
		bufferevent_disable(c->in, EV_READ);
		bufferevent_setwatermark(c->out, EV_WRITE, 0, 0);
		return;
	}
	conn_free(c);
}

static void start_connect(struct conn *c, const struct sockaddr *sa, socklen_t len)
{
	char ip[INET6_ADDRSTRLEN] = "?";

	if (sa->sa_family == AF_INET)
		inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, ip, sizeof(ip));
	else
		inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr, ip, sizeof(ip));
	c->out = bufferevent_socket_new(c->px->base, -1, BEV_OPT_CLOSE_ON_FREE);
	if (!c->out) {
		deny(c, 502, "out of memory");
		return;
	}
	bufferevent_setcb(c->out, relay_read, out_write, relay_event, c);
	plog(c->px, "cairn-proxy: allowed %s %s:%d (%s)", c->method, c->host, c->port, ip);
	if (bufferevent_socket_connect(c->out, sa, (int)len) < 0) {
		bufferevent_free(c->out);
		c->out = NULL;
		deny(c, 502, "connection failed");
	}
}

static void resolved(int result, struct evutil_addrinfo *res, void *arg)
{
	struct conn *c = arg;
	struct evutil_addrinfo *ai, *pick = NULL;

	c->dns = NULL;
	if (result == EVUTIL_EAI_CANCEL)
		return;
	if (result != 0 || !res) {
		deny(c, 502, "name does not resolve");
		goto out;
	}
	for (ai = res; ai && !pick; ai = ai->ai_next)
		if (c->literal_ok || !addr_private(ai->ai_addr))
			pick = ai;
	if (!pick) {
		deny(c, 403, "name resolves to a loopback, private or link-local address");
		goto out;
	}
	if (pick->ai_family == AF_INET6)
		((struct sockaddr_in6 *)pick->ai_addr)->sin6_port = htons((uint16_t)c->port);
	else
		((struct sockaddr_in *)pick->ai_addr)->sin_port = htons((uint16_t)c->port);
	start_connect(c, pick->ai_addr, pick->ai_addrlen);
out:
	if (res)
		evutil_freeaddrinfo(res);
}

/* Parses the request head once it is complete and decides. */
static void head_read(struct bufferevent *bev, void *arg)
{
	struct conn *c = arg;
	struct evbuffer *in = bufferevent_get_input(bev);
	struct evbuffer_ptr end = evbuffer_search(in, "\r\n\r\n", 4, NULL);
	char *line = NULL, *sp1, *sp2, *target;
	size_t len, line_len, rest;
	const struct allow *a;

	if (end.pos < 0) {
		if (evbuffer_get_length(in) > MAX_HEAD)
			deny(c, 400, "request head too large");
		return;
	}
	bufferevent_disable(bev, EV_READ);
	line = evbuffer_readln(in, &line_len, EVBUFFER_EOL_CRLF);
	rest = (size_t)end.pos + 4 - (line_len + 2);
	if (!line || !(sp1 = strchr(line, ' ')) || !(sp2 = strchr(sp1 + 1, ' '))) {
		deny(c, 400, "malformed request");
		goto out;
	}
	*sp1 = *sp2 = '\0';
	snprintf(c->method, sizeof(c->method), "%s", line);
	target = sp1 + 1;
	if (strcmp(line, "CONNECT") == 0) {
		c->connect_method = true;
		snprintf(c->target, sizeof(c->target), "%s", target);
		if (split_hostport(target, c->host, sizeof(c->host), &c->port) < 0) {
			deny(c, 400, "bad CONNECT target");
			goto out;
		}
		/* Drop the rest of the head: it is for us. */
		evbuffer_drain(in, rest);
	} else {
		const char *p = target, *slash;
		char hp[300];

		if (strncasecmp(p, "http://", 7) != 0) {
			deny(c, 400, "only absolute http:// requests and CONNECT are proxied");
			goto out;
		}
		p += 7;
		slash = strchr(p, '/');
		len = slash ? (size_t)(slash - p) : strlen(p);
		if (len == 0 || len >= sizeof(hp)) {
			deny(c, 400, "bad request target");
			goto out;
		}
		memcpy(hp, p, len);
		hp[len] = '\0';
		if (!strchr(hp, ':') || (hp[0] == '[' && !strstr(hp, "]:")))
			strcat(hp, ":80");
		if (split_hostport(hp, c->host, sizeof(c->host), &c->port) < 0) {
			deny(c, 400, "bad request target");
			goto out;
		}
		c->head = evbuffer_new();
		evbuffer_add_printf(c->head, "%s %s %s\r\n", line, slash ? slash : "/", sp2 + 1);
		evbuffer_remove_buffer(in, c->head, rest);
	}
	a = allowed(c->px, c->host, c->port);
	if (!a) {
		deny(c, 403, "not in the allow-list");
		goto out;
	}
	c->literal_ok = a->literal;
	if (is_ip(c->host)) {
		struct evutil_addrinfo hints, *res = NULL;
		int rc;

		memset(&hints, 0, sizeof(hints));
		hints.ai_flags = EVUTIL_AI_NUMERICHOST;
		hints.ai_socktype = SOCK_STREAM;
		rc = evutil_getaddrinfo(c->host, NULL, &hints, &res);
		resolved(rc, res, c);
	} else {
		struct evutil_addrinfo hints;

		memset(&hints, 0, sizeof(hints));
		hints.ai_family = AF_UNSPEC;
		hints.ai_socktype = SOCK_STREAM;
		c->dns = evdns_getaddrinfo(c->px->dns, c->host, NULL, &hints, resolved, c);
	}
out:
	free(line);
}

static void accept_conn(struct sandbox_proxy *px, int fd)
{
	struct conn *c;

	evutil_make_socket_nonblocking(fd);
	if (px->nconns >= px->max_conns) {
		plog(px, "cairn-proxy: denied a connection: at most %d at once", px->max_conns);
		close(fd);
		return;
	}
	c = calloc(1, sizeof(*c));
	if (!c) {
		close(fd);
		return;
	}
	c->px = px;
	snprintf(c->method, sizeof(c->method), "?");
	c->in = bufferevent_socket_new(px->base, fd, BEV_OPT_CLOSE_ON_FREE);
	if (!c->in) {
		close(fd);
		free(c);
		return;
	}
	c->next = px->conns;
	px->conns = c;
	px->nconns++;
	bufferevent_setcb(c->in, head_read, in_write, relay_event, c);
	bufferevent_enable(c->in, EV_READ);
}

/* init hands each accepted connection over with SCM_RIGHTS. */
static void fd_ready(evutil_socket_t s, short what, void *arg)
{
	struct sandbox_proxy *px = arg;
	char cbuf[CMSG_SPACE(sizeof(int) * 4)], b;
	struct iovec iov = { &b, 1 };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof(cbuf) };
	ssize_t n;

	(void)what;
	n = recvmsg(s, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
	if (n <= 0) {
		if (n == 0 || (errno != EAGAIN && errno != EINTR))
			event_del(px->ev);
		return;
	}
	for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm)) {
		if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
			continue;
		for (size_t i = 0; i < (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int); i++) {
			int fd;

			memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
			accept_conn(px, fd);
		}
	}
}

int sandbox_proxy_new(struct event_base *base, const json_t *network, sandbox_proxy_log_fn log, void *arg,
		      struct sandbox_proxy **out, char *err, size_t errlen)
{
	struct sandbox_proxy *px = NULL;
	const json_t *allow = json_object_get(network, "allow");
	json_t *item;
	int sp[2] = { -1, -1 };
	size_t i;

	*out = NULL;
	if (sandbox_proxy_parse_allow(network, err, errlen) < 0)
		return -1;
	px = calloc(1, sizeof(*px));
	if (!px) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	px->base = base;
	px->fd = px->child_fd = -1;
	px->log = log;
	px->log_arg = arg;
	px->max_conns = DEFAULT_MAX_CONNS;
	px->max_bytes = DEFAULT_MAX_BYTES;
	json_array_foreach(allow, i, item) {
		struct allow *a = &px->allow[px->nallow++];

		(void)split_hostport(json_string_value(item), a->host, sizeof(a->host), &a->port);
		a->literal = is_ip(a->host);
	}
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sp) < 0) {
		snprintf(err, errlen, "could not create the proxy socket pair: %s", strerror(errno));
		goto fail;
	}
	px->fd = sp[0];
	px->child_fd = sp[1];
	px->dns = evdns_base_new(base, EVDNS_BASE_INITIALIZE_NAMESERVERS | EVDNS_BASE_DISABLE_WHEN_INACTIVE);
	if (!px->dns) {
		/* No resolv.conf: names from /etc/hosts only. */
		px->dns = evdns_base_new(base, EVDNS_BASE_DISABLE_WHEN_INACTIVE);
		if (px->dns)
			evdns_base_load_hosts(px->dns, NULL);
	}
	px->ev = event_new(base, px->fd, EV_READ | EV_PERSIST, fd_ready, px);
	if (!px->dns || !px->ev || event_add(px->ev, NULL) < 0) {
		snprintf(err, errlen, "could not set up the proxy on the event loop");
		goto fail;
	}
	*out = px;
	return 0;
fail:
	sandbox_proxy_free(px);
	return -1;
}

int sandbox_proxy_child_fd(struct sandbox_proxy *px)
{
	return px ? px->child_fd : -1;
}

void sandbox_proxy_spawned(struct sandbox_proxy *px)
{
	if (px && px->child_fd >= 0) {
		close(px->child_fd);
		px->child_fd = -1;
	}
}

void sandbox_proxy_free(struct sandbox_proxy *px)
{
	if (!px)
		return;
	while (px->conns)
		conn_free(px->conns);
	if (px->ev)
		event_free(px->ev);
	if (px->dns)
		evdns_base_free(px->dns, 0);
	if (px->fd >= 0)
		close(px->fd);
	if (px->child_fd >= 0)
		close(px->child_fd);
	free(px);
}
