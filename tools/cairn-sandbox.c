/* cairn-sandbox: runs one command in the same sandbox a workflow step
 * gets (`cairn sandbox [options] -- CMD ARGS...`), with the worker's
 * output cap and timeout, and says why it ended. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <getopt.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <event2/event.h>

#include "log.h"
#include "sandbox.h"
#include "util.h"

#define MAX_MOUNTS 64
#define MAX_ENV 256

static const char usage[] =
	"usage: cairn-sandbox [options] -- CMD [ARGS...]\n"
	"\n"
	"Runs CMD in a cairn step sandbox: new namespaces, read-only root, no\n"
	"network, seccomp, rlimits and cgroup limits.\n"
	"\n"
	"  -w, --workspace DIR     host directory at /workspace (default: a fresh temporary one)\n"
	"      --in DIR            host directory at /cairn/in (read-only)\n"
	"      --out DIR           host directory at /cairn/out\n"
	"      --secrets DIR       host directory at /cairn/secrets (read-only)\n"
	"      --ro-bind SRC[:DST] extra read-only bind mount (DST defaults to SRC)\n"
	"      --bind SRC[:DST]    extra read-write bind mount\n"
	"  -e, --env NAME=VALUE    add to the environment (PATH, HOME, LANG and CAIRN_* are preset)\n"
	"  -p, --profile JSON      sandbox profile as in a step's \"sandbox\" (or @FILE)\n"
	"      --memory SIZE       memory limit (default 1G)\n"
	"      --pids N            process limit (default 512)\n"
	"      --cpu CORES         CPU quota in cores\n"
	"      --tmp-size SIZE     size of /tmp (default 256M)\n"
	"      --output SIZE       bytes kept per stream (default 1M)\n"
	"      --on-output-cap kill|truncate\n"
	"      --deny SYSCALL      also refuse this system call (repeatable)\n"
	"  -t, --timeout DURATION  wall-clock limit (default 10m)\n"
	"      --rootfs DIR        read-only root instead of the host's /\n"
	"      --seccomp-policy FILE  operator seccomp policy\n"
	"      --host-uid N        host uid/gid of the sandbox user when run as root (default 65534)\n"
	"      --status-file FILE  write the outcome as JSON\n"
	"  -q, --quiet             do not print the outcome of a failed command\n"
	"\n"
	"Exit status: the command's, 128+N if it died of signal N, 124 if the\n"
	"sandbox ended it (timeout, memory, pids, seccomp, output cap), 125 if\n"
	"the sandbox could not be set up, 2 on a usage error.\n";

enum {
	OPT_IN = 256, OPT_OUT, OPT_SECRETS, OPT_RO_BIND, OPT_BIND, OPT_MEMORY, OPT_PIDS, OPT_CPU,
	OPT_TMP, OPT_OUTPUT, OPT_ON_CAP, OPT_DENY, OPT_ROOTFS, OPT_POLICY, OPT_HOST_UID, OPT_STATUS,
	OPT_CTL,
};

static const struct option longopts[] = {
	{ "workspace", required_argument, NULL, 'w' }, { "in", required_argument, NULL, OPT_IN },
	{ "out", required_argument, NULL, OPT_OUT }, { "secrets", required_argument, NULL, OPT_SECRETS },
	{ "ctl", required_argument, NULL, OPT_CTL },
	{ "ro-bind", required_argument, NULL, OPT_RO_BIND }, { "bind", required_argument, NULL, OPT_BIND },
	{ "env", required_argument, NULL, 'e' }, { "profile", required_argument, NULL, 'p' },
	{ "memory", required_argument, NULL, OPT_MEMORY }, { "pids", required_argument, NULL, OPT_PIDS },
	{ "cpu", required_argument, NULL, OPT_CPU }, { "tmp-size", required_argument, NULL, OPT_TMP },
	{ "output", required_argument, NULL, OPT_OUTPUT }, { "on-output-cap", required_argument, NULL, OPT_ON_CAP },
	{ "deny", required_argument, NULL, OPT_DENY }, { "timeout", required_argument, NULL, 't' },
	{ "rootfs", required_argument, NULL, OPT_ROOTFS }, { "seccomp-policy", required_argument, NULL, OPT_POLICY },
	{ "host-uid", required_argument, NULL, OPT_HOST_UID }, { "status-file", required_argument, NULL, OPT_STATUS },
	{ "quiet", no_argument, NULL, 'q' }, { "help", no_argument, NULL, 'h' },
	{ NULL, 0, NULL, 0 },
};

/* One captured stream: copied to our own fd up to the cap. */
struct stream {
	int rd, out;
	int64_t seen, cap;
	bool capped, eof;
};

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	return remove(path) < 0 && errno != ENOENT ? -1 : 0;
}

static void write_all(int fd, const char *p, size_t n)
{
	while (n > 0) {
		ssize_t w = write(fd, p, n);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return;
		p += w;
		n -= (size_t)w;
	}
}

/* Reads what is there; returns true when the cap was crossed just now. */
static bool stream_pump(struct stream *s)
{
	char buf[65536];
	bool crossed = false;

	for (;;) {
		ssize_t n = read(s->rd, buf, sizeof(buf));

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return crossed;
		if (n == 0) {
			s->eof = true;
			return crossed;
		}
		if (!s->capped) {
			int64_t room = s->cap - s->seen;

			if (n <= room) {
				write_all(s->out, buf, (size_t)n);
			} else {
				char marker[96];

				write_all(s->out, buf, (size_t)room);
				snprintf(marker, sizeof(marker), "\n[cairn: output truncated after %lld bytes]\n",
					 (long long)s->cap);
				write_all(s->out, marker, strlen(marker));
				s->capped = true;
				crossed = true;
			}
		}
		s->seen += n;
	}
}

/* The loop's state: one sandbox, its two streams, the timeout. */
struct run {
	struct event_base *base;
	struct sandbox_proc *p;
	struct stream *so, *se;
	struct event *ev_timer, *ev_out, *ev_err;
	int wst;
	bool killing;
};

static void check_done(struct run *r)
{
	/* Every writer of the pipes is in the sandbox: once init is gone
	 * they hit EOF right away. */
	if (r->p->reaped && r->so->eof && r->se->eof)
		event_base_loopbreak(r->base);
}

static void on_output(evutil_socket_t fd, short what, void *arg)
{
	struct run *r = arg;
	struct stream *s = fd == r->so->rd ? r->so : r->se;

	(void)what;
	if (stream_pump(s) && r->p->limits.output_kill && !r->p->output_capped) {
		r->p->output_capped = true;
		sandbox_kill(r->p);
	}
	if (s->eof)
		event_del(s == r->so ? r->ev_out : r->ev_err);
	check_done(r);
}

static void on_sandbox_exit(evutil_socket_t fd, short what, void *arg)
{
	struct run *r = arg;

	(void)fd;
	(void)what;
	if (sandbox_reap(r->p, &r->wst) != 0) {
		struct timeval tv = { 1, 0 };

		/* Drain the pipes, but never wait long for them. */
		stream_pump(r->so);
		stream_pump(r->se);
		evtimer_del(r->ev_timer);
		event_base_loopexit(r->base, &tv);
		check_done(r);
	}
}

static void on_timer(evutil_socket_t fd, short what, void *arg)
{
	struct run *r = arg;
	struct timeval tv;

	(void)fd;
	(void)what;
	if (!r->p->timed_out) {
		r->p->timed_out = true;
		sandbox_terminate(r->p);
		tv.tv_sec = r->p->limits.kill_grace_ms / 1000;
		tv.tv_usec = (r->p->limits.kill_grace_ms % 1000) * 1000;
	} else {
		sandbox_kill(r->p);
		tv.tv_sec = 1;
		tv.tv_usec = 0;
	}
	evtimer_add(r->ev_timer, &tv);
}

static void proxy_log(void *arg, const char *line)
{
	(void)arg;
	fprintf(stderr, "%s\n", line);
}

static json_t *profile_obj(json_t **profile)
{
	if (!*profile)
		*profile = json_object();
	return *profile;
}

static void set_profile(json_t **profile, const char *key, json_t *val)
{
	json_object_set_new(profile_obj(profile), key, val);
}

static int add_mount(struct sandbox_mount *m, size_t *n, const char *arg, bool rw)
{
	char *src, *colon;

	if (*n >= MAX_MOUNTS)
		return error("too many bind mounts (at most %d)", MAX_MOUNTS);
	src = xstrdup(arg);
	colon = strchr(src, ':');
	if (colon) {
		*colon = '\0';
		m[*n].dst = colon + 1;
	} else {
		m[*n].dst = src;
	}
	m[*n].src = src;
	m[*n].rw = rw;
	(*n)++;
	return 0;
}

static int write_status(const char *path, const struct sandbox_result *r)
{
	json_t *o = json_pack("{s:s, s:s, s:b, s:i, s:i, s:s, s:I}", "reason", r->reason, "message", r->message,
			      "success", r->success, "exit_code", r->exit_code, "signal", r->signal,
			      "refused", r->refused, "memory_peak", (json_int_t)r->memory_peak);
	int rc = o ? json_dump_file(o, path, JSON_COMPACT) : -1;

	json_decref(o);
	return rc;
}

int main(int argc, char **argv)
{
	struct sandbox_mount mounts[MAX_MOUNTS];
	size_t nmounts = 0, nenv = 0;
	char *env[MAX_ENV + 16];
	const char *user_env[MAX_ENV];
	json_t *profile = NULL, *deny = NULL;
	struct sandbox_opts o;
	struct sandbox_proc p;
	struct sandbox_result r;
	struct stream so = { -1, 1, 0, 0, false, false }, se = { -1, 2, 0, 0, false, false };
	char err[512], tmpws[] = "/tmp/cairn-sandbox.XXXXXX";
	const char *ws = NULL, *status_file = NULL;
	int64_t timeout_ms = 600000;
	struct event_base *base = NULL;
	struct event *ev_exit = NULL, *ev_out = NULL, *ev_err = NULL;
	struct sandbox_proxy *proxy = NULL;
	struct sandbox_limits lim;
	struct run run;
	int opt, ret = 125, wst = 0, outp[2] = { -1, -1 }, errp[2] = { -1, -1 };
	bool quiet = false, made_ws = false, spawned = false;

	log_init("cairn-sandbox", LOG_WARN);
	memset(&o, 0, sizeof(o));
	memset(mounts, 0, sizeof(mounts));
	while ((opt = getopt_long(argc, argv, "+w:e:p:t:qh", longopts, NULL)) != -1) {
		int64_t n;

		switch (opt) {
		case 'w': ws = optarg; break;
		case OPT_IN: o.in_dir = optarg; break;
		case OPT_OUT: o.out_dir = optarg; break;
		case OPT_SECRETS: o.secrets_dir = optarg; break;
		case OPT_CTL: o.ctl_path = optarg; break;
		case OPT_RO_BIND:
		case OPT_BIND:
			if (add_mount(mounts, &nmounts, optarg, opt == OPT_BIND) < 0)
				return 2;
			break;
		case 'e':
			if (!strchr(optarg, '=') || nenv >= MAX_ENV) {
				fprintf(stderr, "cairn-sandbox: bad or too many --env \"%s\" (NAME=VALUE)\n", optarg);
				return 2;
			}
			user_env[nenv++] = optarg;
			break;
		case 'p': {
			json_error_t jerr;

			json_decref(profile);
			profile = optarg[0] == '@' ? json_load_file(optarg + 1, 0, &jerr) : json_loads(optarg, 0, &jerr);
			if (!json_is_object(profile)) {
				fprintf(stderr, "cairn-sandbox: bad --profile: %s\n", profile ? "not an object" : jerr.text);
				return 2;
			}
			break;
		}
		case OPT_MEMORY: set_profile(&profile, "memory", json_string(optarg)); break;
		case OPT_TMP: set_profile(&profile, "tmp_size", json_string(optarg)); break;
		case OPT_OUTPUT: set_profile(&profile, "output", json_string(optarg)); break;
		case OPT_ON_CAP: set_profile(&profile, "on_output_cap", json_string(optarg)); break;
		case OPT_PIDS: set_profile(&profile, "pids", json_integer(strtoll(optarg, NULL, 10))); break;
		case OPT_CPU: set_profile(&profile, "cpu", json_real(strtod(optarg, NULL))); break;
		case OPT_DENY:
			if (!deny)
				deny = json_array();
			json_array_append_new(deny, json_string(optarg));
			break;
		case 't':
			if (duration_parse(optarg, &n) < 0 || n <= 0) {
				fprintf(stderr, "cairn-sandbox: bad --timeout \"%s\"\n", optarg);
				return 2;
			}
			timeout_ms = n;
			break;
		case OPT_ROOTFS: o.rootfs = optarg; break;
		case OPT_POLICY: o.policy_path = optarg; break;
		case OPT_HOST_UID:
			o.host_uid = (uid_t)strtoul(optarg, NULL, 10);
			o.host_gid = (gid_t)o.host_uid;
			break;
		case OPT_STATUS: status_file = optarg; break;
		case 'q': quiet = true; break;
		case 'h': fputs(usage, stdout); return 0;
		default: fputs(usage, stderr); return 2;
		}
	}
	if (optind >= argc) {
		fputs(usage, stderr);
		return 2;
	}
	if (deny) {
		json_t *sc = json_object_get(profile_obj(&profile), "seccomp");

		if (!json_is_object(sc)) {
			sc = json_object();
			json_object_set_new(profile, "seccomp", sc);
		}
		json_object_set_new(sc, "deny", deny);
	}

	if (!ws) {
		if (!mkdtemp(tmpws)) {
			fprintf(stderr, "cairn-sandbox: could not create a workspace: %s\n", strerror(errno));
			goto out;
		}
		ws = tmpws;
		made_ws = true;
	}
	{
		size_t k = 0;

		env[k++] = "PATH=/usr/local/bin:/usr/bin:/bin";
		env[k++] = "HOME=/workspace";
		env[k++] = "LANG=C.UTF-8";
		env[k++] = "CAIRN_WORKSPACE=/workspace";
		env[k++] = "CAIRN_IN=/cairn/in";
		env[k++] = "CAIRN_OUT=/cairn/out";
		if (o.ctl_path)
			env[k++] = "CAIRN_CTL=/cairn/ctl";
		for (size_t i = 0; i < nenv; i++) {
			size_t nl = strcspn(user_env[i], "=") + 1;
			size_t j;

			for (j = 0; j < k; j++)
				if (strncmp(env[j], user_env[i], nl) == 0)
					break;
			env[j] = (char *)user_env[i];
			if (j == k)
				k++;
		}
		env[k] = NULL;
	}

	if (pipe2(outp, O_CLOEXEC) < 0 || pipe2(errp, O_CLOEXEC) < 0) {
		fprintf(stderr, "cairn-sandbox: could not create pipes: %s\n", strerror(errno));
		goto out;
	}
	o.argv = argv + optind;
	o.envp = env;
	o.workspace = ws;
	o.mounts = mounts;
	o.nmounts = nmounts;
	o.profile = profile;
	o.stdout_fd = outp[1];
	o.stderr_fd = errp[1];
	signal(SIGPIPE, SIG_IGN);
	memset(&run, 0, sizeof(run));
	base = event_base_new();
	if (!base) {
		fprintf(stderr, "cairn-sandbox: could not create an event loop\n");
		goto out;
	}
	if (sandbox_limits_parse(profile, &lim, err, sizeof(err)) < 0) {
		fprintf(stderr, "cairn-sandbox: %s\n", err);
		goto out;
	}
	if (lim.egress) {
		if (sandbox_proxy_new(base, json_object_get(profile, "network"), proxy_log, NULL, &proxy,
				      err, sizeof(err)) < 0) {
			fprintf(stderr, "cairn-sandbox: %s\n", err);
			goto out;
		}
		o.proxy = proxy;
	}
	sandbox_sweep();
	if (sandbox_spawn(&o, &p, err, sizeof(err)) < 0) {
		fprintf(stderr, "cairn-sandbox: %s\n", err);
		goto out;
	}
	spawned = true;
	close(outp[1]);
	close(errp[1]);
	outp[1] = errp[1] = -1;
	so.rd = outp[0];
	se.rd = errp[0];
	so.cap = se.cap = p.limits.output_max;
	fcntl(so.rd, F_SETFL, O_NONBLOCK);
	fcntl(se.rd, F_SETFL, O_NONBLOCK);

	run.p = &p;
	run.so = &so;
	run.se = &se;
	run.base = base;
	ev_exit = event_new(base, p.pidfd, EV_READ | EV_PERSIST, on_sandbox_exit, &run);
	ev_out = event_new(base, so.rd, EV_READ | EV_PERSIST, on_output, &run);
	ev_err = event_new(base, se.rd, EV_READ | EV_PERSIST, on_output, &run);
	run.ev_timer = evtimer_new(base, on_timer, &run);
	run.ev_out = ev_out;
	run.ev_err = ev_err;
	if (!ev_exit || !ev_out || !ev_err || !run.ev_timer) {
		fprintf(stderr, "cairn-sandbox: could not set up the event loop\n");
		sandbox_kill(&p);
	} else {
		struct timeval tv = { timeout_ms / 1000, (timeout_ms % 1000) * 1000 };

		event_add(ev_exit, NULL);
		event_add(ev_out, NULL);
		event_add(ev_err, NULL);
		evtimer_add(run.ev_timer, &tv);
		event_base_dispatch(base);
	}
	if (!p.reaped) {
		sandbox_kill(&p);
		while (sandbox_reap(&p, &run.wst) == 0)
			usleep(1000);
	}
	wst = run.wst;
	sandbox_outcome(&p, wst, &r);
	if (status_file && write_status(status_file, &r) < 0)
		fprintf(stderr, "cairn-sandbox: could not write \"%s\"\n", status_file);
	if (!r.success && !quiet)
		fprintf(stderr, "cairn-sandbox: %s: %s\n", r.reason, r.message);
	if (strcmp(r.reason, SANDBOX_REASON_EXIT) == 0)
		ret = r.exit_code;
	else if (strcmp(r.reason, SANDBOX_REASON_SIGNAL) == 0)
		ret = 128 + r.signal;
	else
		ret = 124;
out:
	if (spawned)
		sandbox_release(&p);
	if (ev_exit)
		event_free(ev_exit);
	if (ev_out)
		event_free(ev_out);
	if (ev_err)
		event_free(ev_err);
	if (run.ev_timer)
		event_free(run.ev_timer);
	sandbox_proxy_free(proxy);
	if (base)
		event_base_free(base);
	for (int i = 0; i < 2; i++) {
		if (outp[i] >= 0)
			close(outp[i]);
		if (errp[i] >= 0)
			close(errp[i]);
	}
	if (made_ws)
		nftw(tmpws, rm_one, 32, FTW_DEPTH | FTW_PHYS | FTW_MOUNT);
	for (size_t i = 0; i < nmounts; i++)
		free((char *)mounts[i].src);
	json_decref(profile);
	return ret;
}
