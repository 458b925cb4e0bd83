/* cairnd: the engine daemon. main() owns the configuration, the single
 * event_base and the signals; it wires the HTTP server (http.c), the
 * route handlers (api.c) and the background duties (duties.c), and on
 * SIGTERM or SIGINT stops accepting, lets requests in flight finish and
 * exits 0. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <event2/event.h>

#include "api.h"
#include "config.h"
#include "duties.h"
#include "http.h"
#include "log.h"
#include "util.h"

#define SHUTDOWN_POLL_MS 20

static struct {
	char *database_url;
	char *listen;
	char *port_file;
	int64_t max_body;
	char *log_level;
	bool no_auth;
	int64_t db_connections;
	int64_t duty_interval;
	char *tenant;
	int64_t shutdown_timeout;
	int64_t statement_timeout;
	char *webhook_url;
	char *webhook_secret;
} conf;

static const struct config_opt options[] = {
	{ .name = "database-url", .type = CONFIG_STRING, .dst = &conf.database_url,
	  .flags = CONFIG_REQUIRED | CONFIG_SECRET, .metavar = "URL",
	  .help = "PostgreSQL connection string (libpq URI or key=value)" },
	{ .name = "listen", .type = CONFIG_STRING, .dst = &conf.listen, .def = "127.0.0.1:8787",
	  .metavar = "HOST:PORT", .help = "address to serve HTTP on; port 0 picks a free one" },
	{ .name = "port-file", .type = CONFIG_STRING, .dst = &conf.port_file, .metavar = "FILE",
	  .help = "write the bound port to FILE once listening" },
	{ .name = "max-body", .type = CONFIG_SIZE, .dst = &conf.max_body, .def = "1M",
	  .min = 1024, .max = 64 << 20, .help = "largest request body accepted" },
	{ .name = "log-level", .type = CONFIG_STRING, .dst = &conf.log_level, .def = "info",
	  .choices = "debug,info,warn,error", .metavar = "LEVEL", .help = "least severe level logged" },
	{ .name = "no-auth", .type = CONFIG_BOOL, .dst = &conf.no_auth,
	  .help = "accept requests without a token (development only; loopback only)" },
	{ .name = "db-connections", .type = CONFIG_INT, .dst = &conf.db_connections, .def = "4",
	  .min = 1, .max = 64, .help = "database connections for API requests" },
	{ .name = "duty-interval", .type = CONFIG_DURATION, .dst = &conf.duty_interval,
	  .def = "250ms", .min = 10, .max = 60000,
	  .help = "how often expired leases are reaped and timers fired" },
	{ .name = "tenant", .type = CONFIG_STRING, .dst = &conf.tenant, .def = "default",
	  .help = "tenant of the runs submitted here" },
	{ .name = "shutdown-timeout", .type = CONFIG_DURATION, .dst = &conf.shutdown_timeout,
	  .def = "15s", .min = 0, .max = 600000,
	  .help = "how long SIGTERM waits for requests in flight" },
	{ .name = "statement-timeout", .type = CONFIG_DURATION, .dst = &conf.statement_timeout,
	  .def = "30s", .min = 0, .max = 3600000,
	  .help = "longest database statement of an API request (0: no limit)" },
	{ .name = "webhook-url", .type = CONFIG_STRING, .dst = &conf.webhook_url, .metavar = "URL",
	  .help = "POST approval events to this http:// URL (needs --webhook-secret)" },
	{ .name = "webhook-secret", .type = CONFIG_STRING, .dst = &conf.webhook_secret,
	  .flags = CONFIG_SECRET, .metavar = "SECRET",
	  .help = "key of the HMAC-SHA256 signature of each webhook body" },
	{ .name = NULL }
};

struct daemon {
	struct event_base *base;
	struct http_server *http;
	struct api *api;
	struct duties *duties;
	struct event *sigterm, *sigint, *drain;
	int64_t drain_deadline_ms;
	bool stopping;
};

/* Splits "host:port" or "[v6]:port" into host (new string) and port. */
static int parse_listen(const char *s, char **host, int *port)
{
	const char *colon;
	char *end = NULL;
	long p;

	if (s[0] == '[') {
		const char *close = strchr(s, ']');

		if (!close || close[1] != ':')
			return -1;
		*host = strndup(s + 1, (size_t)(close - s - 1));
		colon = close + 1;
	} else {
		colon = strrchr(s, ':');
		if (!colon || colon == s)
			return -1;
		*host = strndup(s, (size_t)(colon - s));
	}
	if (!*host)
		return -1;
	p = strtol(colon + 1, &end, 10);
	if (end == colon + 1 || *end || p < 0 || p > 65535) {
		free(*host);
		*host = NULL;
		return -1;
	}
	*port = (int)p;
	return 0;
}

static bool is_loopback(const char *host)
{
	struct in_addr a4;
	struct in6_addr a6;

	if (!strcmp(host, "localhost"))
		return true;
	if (inet_pton(AF_INET, host, &a4) == 1)
		return (ntohl(a4.s_addr) >> 24) == 127;
	if (inet_pton(AF_INET6, host, &a6) == 1)
		return IN6_IS_ADDR_LOOPBACK(&a6);
	return false;
}

/* Writes the port to path through a temporary file and a rename, so a
 * reader never sees it half-written. */
static int write_port_file(const char *path, int port)
{
	char tmp[4096];
	FILE *f = NULL;
	int ret = -1;

	if (snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= (int)sizeof(tmp))
		return error("port file path \"%s\" is too long", path);
	f = fopen(tmp, "w");
	if (!f) {
		error("could not create port file \"%s\": %m", tmp);
		goto out;
	}
	if (fprintf(f, "%d\n", port) < 0 || fclose(f) != 0) {
		f = NULL;
		error("could not write port file \"%s\": %m", tmp);
		goto out;
	}
	f = NULL;
	if (rename(tmp, path) < 0) {
		error("could not rename \"%s\" to \"%s\": %m", tmp, path);
		goto out;
	}
	ret = 0;
out:
	if (f)
		fclose(f);
	return ret;
}

static void drain_check(evutil_socket_t fd, short what, void *arg)
{
	struct daemon *d = arg;
	struct timeval tv = { 0, SHUTDOWN_POLL_MS * 1000 };

	if ((http_in_flight(d->http) == 0 && !duties_busy(d->duties)) ||
	    mono_ms() >= d->drain_deadline_ms) {
		if (http_in_flight(d->http))
			log_warn("shutting down with %d requests unanswered", http_in_flight(d->http));
		event_base_loopbreak(d->base);
		return;
	}
	evtimer_add(d->drain, &tv);
}

static void on_signal(evutil_socket_t sig, short what, void *arg)
{
	struct daemon *d = arg;

	if (d->stopping) {
		log_warn("second signal: exiting now");
		d->drain_deadline_ms = 0;
		event_active(d->drain, EV_TIMEOUT, 0);
		return;
	}
	d->stopping = true;
	log_info("received %s: no new connections; finishing %d requests in flight",
		 sig == SIGTERM ? "SIGTERM" : "SIGINT", http_in_flight(d->http));
	http_stop_accepting(d->http);
	duties_stop(d->duties);
	api_drain(d->api);
	d->drain_deadline_ms = mono_ms() + conf.shutdown_timeout;
	event_active(d->drain, EV_TIMEOUT, 0);
}

int main(int argc, char **argv)
{
	struct daemon d = { 0 };
	struct http_opts hopts = { 0 };
	struct api_opts aopts = { 0 };
	struct duties_opts dopts = { 0 };
	char *host = NULL, err[256];
	int port = 0, bound = 0, ret = 1;

	log_init("cairnd", LOG_INFO);
	switch (config_load(options, "cairnd", "cairn's engine daemon: the HTTP API, timers and lease reaper.",
			    argc, argv)) {
	case CONFIG_EXIT:
		ret = 0;
		goto out;
	case CONFIG_USAGE:
		ret = 2;
		goto out;
	case CONFIG_OK:
		break;
	}
	log_init("cairnd", (enum log_level)log_level_parse(conf.log_level));
	if (parse_listen(conf.listen, &host, &port) < 0) {
		fprintf(stderr, "cairnd: invalid --listen \"%s\": expected HOST:PORT\n", conf.listen);
		ret = 2;
		goto out;
	}
	if (!is_loopback(host)) {
		if (conf.no_auth) {
			fprintf(stderr, "cairnd: --no-auth is refused on \"%s\": it binds beyond loopback\n",
				conf.listen);
			ret = 2;
			goto out;
		}
		log_warn("listening on \"%s\", which is reachable beyond this host; "
			 "put TLS in front of it", conf.listen);
	}
	if (conf.webhook_url && (!conf.webhook_secret || !*conf.webhook_secret)) {
		fprintf(stderr, "cairnd: --webhook-url needs --webhook-secret (or CAIRN_WEBHOOK_SECRET)\n");
		ret = 2;
		goto out;
	}
	if (conf.no_auth)
		log_warn("authentication is off (--no-auth): every local client has every role");
	signal(SIGPIPE, SIG_IGN);

	d.base = event_base_new();
	if (!d.base)
		die("could not create the event loop");
	aopts.database_url = conf.database_url;
	aopts.connections = (int)conf.db_connections;
	aopts.tenant = conf.tenant;
	aopts.statement_timeout_ms = conf.statement_timeout;
	d.api = api_new(d.base, &aopts);
	hopts.max_body = (size_t)conf.max_body;
	hopts.no_auth = conf.no_auth;
	hopts.auth = api_auth;
	hopts.arg = d.api;
	d.http = http_new(d.base, api_routes(), &hopts);
	if (!d.http) {
		error("could not create the HTTP server");
		goto out;
	}
	api_set_server(d.api, d.http);
	dopts.conninfo = conf.database_url;
	dopts.interval_ms = conf.duty_interval;
	dopts.webhook_url = conf.webhook_url;
	dopts.webhook_secret = conf.webhook_secret;
	d.duties = duties_new(d.base, &dopts, err, sizeof(err));
	if (!d.duties) {
		fprintf(stderr, "cairnd: %s\n", err);
		ret = 2;
		goto out;
	}
	api_set_duties(d.api, d.duties);
	if (http_bind(d.http, host, port, &bound) < 0)
		goto out;
	if (conf.port_file && write_port_file(conf.port_file, bound) < 0)
		goto out;
	d.sigterm = evsignal_new(d.base, SIGTERM, on_signal, &d);
	d.sigint = evsignal_new(d.base, SIGINT, on_signal, &d);
	d.drain = evtimer_new(d.base, drain_check, &d);
	evsignal_add(d.sigterm, NULL);
	evsignal_add(d.sigint, NULL);
	log_info("listening on %s:%d (max body %" PRId64 " bytes, %" PRId64 " database connections)",
		 host, bound, conf.max_body, conf.db_connections);

	event_base_dispatch(d.base);
	log_info("stopped");
	ret = 0;
out:
	/* The api first: failing its queries answers their requests while
	 * the HTTP server still exists. */
	api_free(d.api);
	duties_free(d.duties);
	http_free(d.http);
	if (d.sigterm)
		event_free(d.sigterm);
	if (d.sigint)
		event_free(d.sigint);
	if (d.drain)
		event_free(d.drain);
	if (d.base)
		event_base_free(d.base);
	if (ret == 0 && conf.port_file && bound)
		unlink(conf.port_file);
	free(host);
	config_release(options);
	return ret;
}
