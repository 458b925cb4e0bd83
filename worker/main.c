/* cairn-worker: leases ready steps from the store and runs them. main()
 * owns the configuration, the signals and the one event_base; the lease
 * loop and the executor do the work. */
#define _GNU_SOURCE
#include "../engine/config.h"
#include "executor.h"
#include "lease.h"
#include "log.h"
#include "pgq.h"
#include "sandbox.h"
#include "util.h"

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <event2/event.h>

/* The worker's whole configuration: flags, CAIRN_* variables, defaults. */
static struct {
	char *database_url, *name, *queues, *work_dir, *log_level, *bind, *secrets_dir;
	char *step_host_paths;
	int64_t concurrency, lease, poll, drain_timeout, log_max;
	bool step_unix_sockets;
} conf;

static const struct config_opt opts[] = {
	{ .name = "database-url", .type = CONFIG_STRING, .dst = &conf.database_url,
	  .flags = CONFIG_SECRET | CONFIG_REQUIRED, .metavar = "URL",
	  .help = "PostgreSQL connection string" },
	{ .name = "name", .type = CONFIG_STRING, .dst = &conf.name, .metavar = "NAME",
	  .help = "worker name in leases and history (default host:pid)" },
	{ .name = "queues", .type = CONFIG_STRING, .dst = &conf.queues, .def = "default",
	  .metavar = "A,B", .help = "queues to take steps from" },
	{ .name = "concurrency", .type = CONFIG_INT, .dst = &conf.concurrency, .def = "4",
	  .min = 1, .max = 1024, .metavar = "N", .help = "steps run at once" },
	{ .name = "lease", .type = CONFIG_DURATION, .dst = &conf.lease, .def = "30s",
	  .min = 300, .max = 86400000, .help = "lease length; renewed every third of it" },
	{ .name = "poll", .type = CONFIG_DURATION, .dst = &conf.poll, .def = "1s",
	  .min = 10, .max = 3600000, .help = "polling period when no notification comes (+/- 20%)" },
	{ .name = "drain-timeout", .type = CONFIG_DURATION, .dst = &conf.drain_timeout, .def = "30s",
	  .min = 0, .max = 86400000,
	  .help = "on SIGTERM, how long running steps may take before they are stopped" },
	{ .name = "work-dir", .type = CONFIG_STRING, .dst = &conf.work_dir, .metavar = "DIR",
	  .help = "folder for per-step folders (default $TMPDIR/cairn-worker-PID, removed at exit)" },
	{ .name = "bind", .type = CONFIG_STRING, .dst = &conf.bind, .metavar = "SRC:DST[:ro],...",
	  .help = "host folders every step sees, read-write unless :ro" },
	{ .name = "secrets-dir", .type = CONFIG_STRING, .dst = &conf.secrets_dir, .metavar = "DIR",
	  .help = "folder of secret files (0700, files 0600), named by secret; a step gets "
		  "only those it names, at /cairn/secrets" },
	{ .name = "step-host-paths", .type = CONFIG_STRING, .dst = &conf.step_host_paths,
	  .metavar = "DIR,...",
	  .help = "host folders under which a step's own sandbox \"mounts\" and \"rootfs\" may "
		  "lie (default: none; such a step fails with forbidden_sandbox)" },
	{ .name = "step-unix-sockets", .type = CONFIG_BOOL, .dst = &conf.step_unix_sockets,
	  .help = "let a step's sandbox profile allow unix sockets (\"unix_sockets\": true)" },
	{ .name = "log-max", .type = CONFIG_SIZE, .dst = &conf.log_max, .def = "1M",
	  .min = 1024, .max = 64 << 20, .help = "stdout and stderr kept per step and stream" },
	{ .name = "log-level", .type = CONFIG_STRING, .dst = &conf.log_level, .def = "info",
	  .choices = "debug,info,warn,error", .metavar = "LEVEL",
	  .help = "least important messages logged" },
	{ .name = NULL }
};

/* Splits "a,b" into a NULL-terminated array of new strings. */
static char **split_queues(const char *s)
{
	char *copy = xstrdup(s), *tok, *save = NULL;
	char **v = xcalloc(strlen(s) + 2, sizeof(char *));
	size_t n = 0;

	for (tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save))
		if (*tok)
			v[n++] = xstrdup(tok);
	free(copy);
	return v;
}

/* Parses "SRC:DST[:ro],..." into mounts (strings point into spec, which
 * must outlive them). Returns the count, or -1 with a message. */
static int parse_binds(char *spec, struct sandbox_mount *m, size_t max)
{
	char *save = NULL, *tok;
	size_t n = 0;

	for (tok = strtok_r(spec, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		char *dst = strchr(tok, ':'), *mode;

		if (!dst || dst == tok || n == max) {
			fprintf(stderr, "cairn-worker: --bind \"%s\" is not SRC:DST[:ro]%s\n", tok,
				n == max ? " (too many)" : "");
			return -1;
		}
		*dst++ = '\0';
		mode = strchr(dst, ':');
		if (mode) {
			*mode++ = '\0';
			if (strcmp(mode, "ro") && strcmp(mode, "rw")) {
				fprintf(stderr, "cairn-worker: --bind mode \"%s\" is neither ro nor rw\n", mode);
				return -1;
			}
		}
		m[n].src = tok;
		m[n].dst = dst;
		m[n].rw = !mode || !strcmp(mode, "rw");
		n++;
	}
	return (int)n;
}

struct worker {
	struct event_base *base;
	struct lease *lease;
	int signals;
};

static void signal_cb(evutil_socket_t sig, short what, void *arg)
{
	struct worker *w = arg;

	if (w->signals++ == 0) {
		log_info("got %s: draining", strsignal((int)sig));
		lease_drain(w->lease);
	} else {
		log_info("got %s again: stopping running steps now", strsignal((int)sig));
		lease_stop(w->lease);
	}
}

static void lease_done(void *arg)
{
	struct worker *w = arg;

	event_base_loopexit(w->base, NULL);
}

int main(int argc, char **argv)
{
	struct worker w = { NULL, NULL, 0 };
	struct executor_opts eo;
	struct lease_opts lo;
	struct executor *ex = NULL;
	struct pgq *db = NULL, *listen_db = NULL;
	struct event *sigterm = NULL, *sigint = NULL;
	char **queues;
	char name[300], host[HOST_NAME_MAX + 1] = "localhost";
	char *work_dir, err[512];
	bool own_work_dir = false;
	struct sandbox_mount mounts[16];
	int nmounts = 0;

	switch (config_load(opts, "cairn-worker",
			    "leases ready steps from the cairn store and runs them; SIGTERM drains",
			    argc, argv)) {
	case CONFIG_OK:
		break;
	case CONFIG_EXIT:
		config_release(opts);
		return 0;
	default:
		config_release(opts);
		return 2;
	}
	log_init("cairn-worker", (enum log_level)log_level_parse(conf.log_level));
	if (conf.bind && (nmounts = parse_binds(conf.bind, mounts, 16)) < 0) {
		config_release(opts);
		return 2;
	}
	/* Steps only ever run sandboxed: a host that cannot is an error. */
	if (sandbox_check_host(err, sizeof(err)) < 0)
		die("this host cannot run sandboxed steps: %s", err);
	if (conf.secrets_dir && *conf.secrets_dir &&
	    executor_check_secrets(conf.secrets_dir, err, sizeof(err)) < 0) {
		fprintf(stderr, "cairn-worker: %s\n", err);
		config_release(opts);
		return 2;
	}
	signal(SIGPIPE, SIG_IGN);
	srandom((unsigned)(getpid() ^ mono_us()));

	if (conf.name && *conf.name) {
		snprintf(name, sizeof(name), "%s", conf.name);
	} else {
		gethostname(host, sizeof(host) - 1);
		snprintf(name, sizeof(name), "%s:%d", host, (int)getpid());
	}
	queues = split_queues(conf.queues);
	if (!queues[0])
		die("--queues names no queue");

	if (conf.work_dir && *conf.work_dir) {
		work_dir = xstrdup(conf.work_dir);
	} else {
		const char *tmp = getenv("TMPDIR");
		struct buf b = BUF_INIT;

		buf_addf(&b, "%s/cairn-worker-%d", tmp && *tmp ? tmp : "/tmp", (int)getpid());
		work_dir = buf_detach(&b);
		own_work_dir = true;
	}
	if (mkdir(work_dir, 0700) < 0 && errno != EEXIST)
		die("could not create work folder \"%s\": %m", work_dir);

	w.base = event_base_new();
	if (!w.base)
		die("could not create the event loop");
	db = pgq_new(w.base, conf.database_url, "cairn-worker");
	listen_db = pgq_new(w.base, conf.database_url, "cairn-worker-listen");

	memset(&eo, 0, sizeof(eo));
	eo.work_dir = work_dir;
	eo.log_max = (size_t)conf.log_max;
	eo.kill_grace_ms = 2000;
	eo.mounts = mounts;
	eo.nmounts = (size_t)nmounts;
	eo.secrets_dir = conf.secrets_dir && *conf.secrets_dir ? conf.secrets_dir : NULL;
	eo.step_host_paths = conf.step_host_paths && *conf.step_host_paths ? conf.step_host_paths : NULL;
	eo.step_unix_sockets = conf.step_unix_sockets;
	ex = executor_new(w.base, &eo);

	memset(&lo, 0, sizeof(lo));
	lo.name = name;
	lo.queues = (const char *const *)queues;
	lo.concurrency = (int)conf.concurrency;
	lo.lease_ms = conf.lease;
	lo.poll_ms = conf.poll;
	lo.drain_timeout_ms = conf.drain_timeout;
	lo.done = lease_done;
	lo.done_arg = &w;
	w.lease = lease_new(w.base, db, listen_db, ex, &lo);

	sigterm = evsignal_new(w.base, SIGTERM, signal_cb, &w);
	sigint = evsignal_new(w.base, SIGINT, signal_cb, &w);
	event_add(sigterm, NULL);
	event_add(sigint, NULL);

	log_info("worker \"%s\" taking steps from queue(s) %s, up to %d at once, in \"%s\"",
		 name, conf.queues, lo.concurrency, work_dir);
	lease_start(w.lease);
	event_base_dispatch(w.base);
	log_info("stopped");

	event_free(sigterm);
	event_free(sigint);
	pgq_free(db);
	pgq_free(listen_db);
	lease_free(w.lease);
	executor_free(ex);
	event_base_free(w.base);
	if (own_work_dir && executor_rmtree(work_dir) < 0)
		log_warn("could not remove work folder \"%s\": %m", work_dir);
	free(work_dir);
	for (size_t i = 0; queues[i]; i++)
		free(queues[i]);
	free(queues);
	config_release(opts);
	return 0;
}
