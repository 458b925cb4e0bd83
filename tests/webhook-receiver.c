/* webhook-receiver: a tiny HTTP server for the webhook tests. Listens on
 * 127.0.0.1 (a free port, written to --port-file), answers 500 to the
 * first --fail N requests and 204 afterwards, and appends each request to
 * --out as three lines: "delivery <X-Cairn-Delivery> <status answered>",
 * "signature <X-Cairn-Signature>" and the body (which is one line of
 * JSON). Each body is also written alone to OUT.N (N counts from 1) so
 * that its exact bytes can be checked. Exits on SIGTERM. */
#include <arpa/inet.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>

static int fail_first;
static int seen;
static const char *out_path;

static void on_request(struct evhttp_request *req, void *arg)
{
	struct evbuffer *in = evhttp_request_get_input_buffer(req);
	struct evkeyvalq *h = evhttp_request_get_input_headers(req);
	const char *sig = evhttp_find_header(h, "X-Cairn-Signature");
	const char *id = evhttp_find_header(h, "X-Cairn-Delivery");
	size_t len = evbuffer_get_length(in);
	char *body = malloc(len + 1), path[4096];
	int status;
	FILE *f;

	if (!body) {
		evhttp_send_error(req, 500, NULL);
		return;
	}
	evbuffer_copyout(in, body, len);
	body[len] = '\0';
	seen++;
	status = seen <= fail_first ? 500 : 204;
	f = fopen(out_path, "a");
	if (f) {
		fprintf(f, "delivery %s %d\nsignature %s\n%s\n", id ? id : "-", status, sig ? sig : "-", body);
		fclose(f);
	}
	snprintf(path, sizeof(path), "%s.%d", out_path, seen);
	f = fopen(path, "w");
	if (f) {
		fwrite(body, 1, len, f);
		fclose(f);
	}
	free(body);
	if (status == 500)
		evhttp_send_reply(req, 500, "Internal Server Error", NULL);
	else
		evhttp_send_reply(req, 204, "No Content", NULL);
}

static void on_term(evutil_socket_t sig, short what, void *arg)
{
	event_base_loopbreak(arg);
}

int main(int argc, char **argv)
{
	const char *port_file = NULL;
	struct event_base *base;
	struct evhttp *http;
	struct evhttp_bound_socket *sock;
	struct event *term;
	struct sockaddr_storage ss;
	ev_socklen_t sl = sizeof(ss);
	char tmp[4096];
	int port;
	FILE *f;

	for (int i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--fail"))
			fail_first = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--port-file"))
			port_file = argv[i + 1];
		else if (!strcmp(argv[i], "--out"))
			out_path = argv[i + 1];
	}
	if (!port_file || !out_path) {
		fprintf(stderr, "usage: webhook-receiver --port-file F --out F [--fail N]\n");
		return 2;
	}
	signal(SIGPIPE, SIG_IGN);
	base = event_base_new();
	http = base ? evhttp_new(base) : NULL;
	if (!http)
		return 1;
	evhttp_set_gencb(http, on_request, NULL);
	sock = evhttp_bind_socket_with_handle(http, "127.0.0.1", 0);
	if (!sock || getsockname(evhttp_bound_socket_get_fd(sock), (struct sockaddr *)&ss, &sl) < 0) {
		fprintf(stderr, "webhook-receiver: could not listen\n");
		return 1;
	}
	port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
	snprintf(tmp, sizeof(tmp), "%s.tmp", port_file);
	f = fopen(tmp, "w");
	if (!f || fprintf(f, "%d\n", port) < 0 || fclose(f) != 0 || rename(tmp, port_file) < 0) {
		fprintf(stderr, "webhook-receiver: could not write \"%s\"\n", port_file);
		return 1;
	}
	term = evsignal_new(base, SIGTERM, on_term, base);
	evsignal_add(term, NULL);
	event_base_dispatch(base);
	event_free(term);
	evhttp_free(http);
	event_base_free(base);
	return 0;
}
