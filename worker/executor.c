/* executor: one attempt of a step, from its folders to its outcome. It owns
 * the step's folders, pipes, timers and child-exit watch; processes start
 * through a backend, and the only backend is the sandbox: a step never runs
 * unsandboxed. It never talks to the database nor blocks the loop. */
#define _GNU_SOURCE
#include "executor.h"
#include "collect.h"
#include "log.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <event2/event.h>

#define EXEC_LINGER_MS 1000 /* after the step exits, wait this long for pipe EOF */
#define EXEC_SETUP_TIMEOUT_MS 10000 /* from spawn to the command running */
#define EXEC_READ_CHUNK 65536
#define EXEC_NAME_MAX 200
#define EXEC_SECRET_MAX (1024 * 1024) /* bytes per secret file */

struct stream {
	const char *name;
	int fd;
	struct event *ev;
	struct buf data;
	uint64_t dropped;
	bool eof;
};

struct exec_job {
	struct executor *ex;
	struct exec_job *prev, *next;
	exec_done_cb cb;
	void *arg;

	char *run_dir, *dir, *workspace, *in_dir, *out_dir, *ctl;
	char *secrets;                /* the attempt's copy of its secrets, or NULL */
	void *proc;
	pid_t pid;
	int pidfd;
	struct event *exit_ev, *timeout_ev, *grace_ev, *linger_ev, *setup_ev;
	struct stream out, err;
	struct line_tail tail;

	json_t *permanent;            /* spec.retry.permanent_exit_codes */
	size_t cap;                   /* bytes kept per stream */
	bool cap_kills;               /* kill the step when a stream passes the cap */
	bool capped;
	int64_t timeout_ms;
	int64_t started_wall, started_mono, ended_mono;
	int wstatus;
	bool exited, timed_out, finished, setting_up;
	const char *kill_reason;
	bool kill_retryable;
};

struct executor {
	struct event_base *base;
	struct executor_opts opts;
	const struct exec_backend *backend;
	struct exec_job *jobs;
	int running;
	struct event *sigchld_ev;
};

static void job_check_done(struct exec_job *job);

/* ---- what a step may ask of the host ---- */

/* Whether host path p, resolved, lies under one of the comma-separated
 * roots (each resolved too). A definition is data anyone with a submit
 * token writes: it must not reach host folders the operator did not offer. */
static bool under_roots(const char *roots, const char *p)
{
	char real[PATH_MAX], root[PATH_MAX], *list, *tok, *save = NULL;
	bool ok = false;

	if (!roots || !p || p[0] != '/' || !realpath(p, real))
		return false;
	list = xstrdup(roots);
	for (tok = strtok_r(list, ",", &save); tok && !ok; tok = strtok_r(NULL, ",", &save)) {
		size_t n;

		if (!realpath(tok, root))
			continue;
		n = strlen(root);
		ok = strcmp(real, root) == 0 || strcmp(root, "/") == 0 ||
		     (strncmp(real, root, n) == 0 && real[n] == '/');
	}
	free(list);
	return ok;
}

/* Refuses a sandbox profile that binds host folders outside the operator's
 * --step-host-paths or allows unix sockets without --step-unix-sockets. */
static int check_step_sandbox(const struct executor_opts *o, const json_t *sb, char *err,
			      size_t errlen)
{
	const json_t *m, *v;
	size_t i;

	v = json_object_get(sb, "rootfs");
	if (json_is_string(v) && !under_roots(o->step_host_paths, json_string_value(v))) {
		snprintf(err, errlen, "sandbox rootfs \"%s\" is not under a folder this worker offers "
			 "to steps (--step-host-paths)", json_string_value(v));
		return -1;
	}
	json_array_foreach(json_object_get(sb, "mounts"), i, m) {
		const char *src = json_string_value(json_object_get(m, "src"));

		if (!under_roots(o->step_host_paths, src)) {
			snprintf(err, errlen, "sandbox mount of \"%s\" is not under a folder this worker "
				 "offers to steps (--step-host-paths)", src ? src : "");
			return -1;
		}
	}
	if (json_is_true(json_object_get(sb, "unix_sockets")) && !o->step_unix_sockets) {
		snprintf(err, errlen, "sandbox unix_sockets is not allowed by this worker "
			 "(--step-unix-sockets)");
		return -1;
	}
	return 0;
}

/* ---- the sandbox backend ---- */

/* A sandbox and the egress proxy it may have. */
struct sb_proc {
	struct sandbox_proc p;
	struct sandbox_proxy *px;
};

static int sb_spawn(const struct exec_spawn *sp, void **proc, pid_t *pid, char *err, size_t errlen)
{
	struct sb_proc *sb = xcalloc(1, sizeof(*sb));
	struct sandbox_proc *p = &sb->p;
	struct sandbox_limits lim;
	struct sandbox_opts o;
	int rc = -1;

	memset(&o, 0, sizeof(o));
	o.argv = sp->argv;
	o.envp = sp->envp;
	o.workspace = sp->workspace;
	o.in_dir = sp->in_dir;
	o.out_dir = sp->out_dir;
	o.ctl_path = sp->ctl;
	o.secrets_dir = sp->secrets_dir;
	o.mounts = sp->mounts;
	o.nmounts = sp->nmounts;
	o.profile = sp->sandbox;
	o.stdout_fd = sp->stdout_fd;
	o.stderr_fd = sp->stderr_fd;
	if (sandbox_limits_parse(sp->sandbox, &lim, err, errlen) < 0)
		goto out;
	/* An allow-list: the step reaches the network only through the proxy. */
	if (lim.egress) {
		if (!sp->base) {
			snprintf(err, errlen, "the sandbox profile allows egress but no event loop runs a proxy");
			goto out;
		}
		if (sandbox_proxy_new(sp->base, json_object_get(sp->sandbox, "network"), sp->proxy_log,
				      sp->proxy_arg, &sb->px, err, errlen) < 0)
			goto out;
		o.proxy = sb->px;
	}
	/* Returns once init exists; it builds the sandbox while the loop runs. */
	if (sandbox_spawn_start(&o, p, err, errlen) < 0)
		goto out;
	*proc = sb;
	*pid = p->pid;
	rc = 0;
out:
	if (rc) {
		sandbox_proxy_free(sb->px);
		free(sb);
	}
	return rc;
}

static void sb_kill(void *proc, int sig)
{
	struct sb_proc *sb = proc;

	if (sig == SIGTERM)
		sandbox_terminate(&sb->p);
	else
		sandbox_kill(&sb->p);
}

static int sb_setup_fd(void *proc)
{
	struct sb_proc *sb = proc;

	return sb->p.pending ? sb->p.status_fd : -1;
}

static int sb_setup_finish(void *proc, char *err, size_t errlen)
{
	struct sb_proc *sb = proc;

	return sandbox_spawn_finish(&sb->p, false, err, errlen);
}

static void sb_note(void *proc, bool timed_out, bool output_capped)
{
	struct sb_proc *sb = proc;

	sb->p.timed_out |= timed_out;
	sb->p.output_capped |= output_capped;
}

static int sb_reap(void *proc, int *wstatus)
{
	struct sb_proc *sb = proc;

	return sandbox_reap(&sb->p, wstatus);
}

static void sb_outcome(void *proc, int wstatus, struct exec_outcome *o)
{
	struct sb_proc *sb = proc;
	struct sandbox_result r;

	sandbox_outcome(&sb->p, wstatus, &r);
	o->reason = r.reason;
	o->exit_code = r.exit_code;
	o->signo = r.signal;
	snprintf(o->message, sizeof(o->message), "step %s", r.message);
	/* A refused system call will be refused again, and the same output
	 * overflow the cap again; other limits may be transient. */
	o->retryable = strcmp(r.reason, SANDBOX_REASON_SECCOMP) != 0 &&
		       strcmp(r.reason, SANDBOX_REASON_OUTPUT_CAP) != 0;
}

static void sb_release(void *proc)
{
	struct sb_proc *sb = proc;

	sandbox_release(&sb->p);
	sandbox_proxy_free(sb->px);
	free(sb);
}

const struct exec_backend exec_backend_sandbox = {
	.name = "sandbox",
	.workspace_path = "/workspace",
	.in_path = "/cairn/in",
	.out_path = "/cairn/out",
	.ctl_path = "/cairn/ctl",
	.spawn = sb_spawn,
	.setup_fd = sb_setup_fd,
	.setup_finish = sb_setup_finish,
	.kill = sb_kill,
	.note = sb_note,
	.reap = sb_reap,
	.outcome = sb_outcome,
	.release = sb_release,
};

/* ---- folders ---- */

static int rmtree_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	if (flag == FTW_DP || flag == FTW_D)
		return rmdir(path) < 0 && errno != ENOENT ? -1 : 0;
	return unlink(path) < 0 && errno != ENOENT ? -1 : 0;
}

int executor_rmtree(const char *dir)
{
	struct stat st;

	if (lstat(dir, &st) < 0)
		return errno == ENOENT ? 0 : -1;
	if (!S_ISDIR(st.st_mode))
		return unlink(dir);
	/* Let the owner delete what a step left read-only. */
	if (chmod(dir, 0700) < 0)
		return -1;
	return nftw(dir, rmtree_one, 32, FTW_DEPTH | FTW_PHYS | FTW_MOUNT);
}

/* A run or step id used as a folder name: no separators, no dot names. */
static bool safe_name(const char *s)
{
	size_t n = s ? strlen(s) : 0;

	if (!n || n > EXEC_NAME_MAX || s[0] == '.')
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = s[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '-' || c == '_' || c == '.'))
			return false;
	}
	return true;
}

static char *path_join(const char *a, const char *b)
{
	struct buf p = BUF_INIT;

	buf_addf(&p, "%s/%s", a, b);
	return buf_detach(&p);
}

static int make_dir(const char *path, char *err, size_t errlen)
{
	if (mkdir(path, 0700) < 0 && errno != EEXIST) {
		snprintf(err, errlen, "could not create \"%s\": %s", path, strerror(errno));
		return -1;
	}
	return 0;
}

static int fresh_dir(const char *path, char *err, size_t errlen)
{
	if (executor_rmtree(path) < 0) {
		snprintf(err, errlen, "could not remove \"%s\": %s", path, strerror(errno));
		return -1;
	}
	return make_dir(path, err, errlen);
}

static int write_json(const char *dir, const char *name, const json_t *v, char *err, size_t errlen)
{
	char *path = path_join(dir, name);
	int rc = 0;

	if (json_dump_file(v ? v : json_null(), path, JSON_ENCODE_ANY | JSON_COMPACT) < 0) {
		snprintf(err, errlen, "could not write \"%s\"", path);
		rc = -1;
	}
	free(path);
	return rc;
}

static int write_text(const char *path, const char *text, size_t len, char *err, size_t errlen)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
	int rc = -1;

	if (fd < 0)
		goto out;
	while (len) {
		ssize_t n = write(fd, text, len);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			goto out;
		}
		text += n;
		len -= (size_t)n;
	}
	rc = 0;
out:
	if (rc)
		snprintf(err, errlen, "could not write \"%s\": %s", path, strerror(errno));
	if (fd >= 0)
		close(fd);
	return rc;
}

static bool is_fifo(const char *path)
{
	struct stat st;

	return lstat(path, &st) == 0 && S_ISFIFO(st.st_mode);
}

/* Creates RUN/STEP/{workspace,in,out} (workspace kept from earlier
 * attempts) and fills in/. */
static int job_prepare_dirs(struct exec_job *job, const struct exec_step *step, char *err, size_t errlen)
{
	struct buf done = BUF_INIT;
	const char *key;
	json_t *val;
	size_t i;
	int rc = -1;

	job->run_dir = path_join(job->ex->opts.work_dir, step->run_id);
	job->dir = path_join(job->run_dir, step->step_id);
	job->workspace = path_join(job->dir, "workspace");
	job->in_dir = path_join(job->dir, "in");
	job->out_dir = path_join(job->dir, "out");
	job->ctl = path_join(job->dir, "ctl");
	if (make_dir(job->run_dir, err, errlen) || make_dir(job->dir, err, errlen) ||
	    make_dir(job->workspace, err, errlen) || fresh_dir(job->in_dir, err, errlen) ||
	    fresh_dir(job->out_dir, err, errlen))
		goto out;
	if (write_json(job->in_dir, "input.json", step->input, err, errlen))
		goto out;
	json_object_foreach((json_t *)step->needs_output, key, val) {
		char name[EXEC_NAME_MAX + 8];

		if (!safe_name(key))
			continue;
		snprintf(name, sizeof(name), "%s.json", key);
		if (write_json(job->in_dir, name, val, err, errlen))
			goto out;
	}
	json_array_foreach((json_t *)step->done_effects, i, val) {
		const char *k = json_string_value(val);

		if (k && !strchr(k, '\n'))
			buf_addf(&done, "%s\n", k);
	}
	{
		char *path = path_join(job->in_dir, ".done-effects");
		int r = write_text(path, done.data ? done.data : "", done.len, err, errlen);

		free(path);
		if (r)
			goto out;
	}
	/* A fifo there is the control channel of a step with checkpoints. */
	if (!is_fifo(job->ctl) && write_text(job->ctl, "", 0, err, errlen))
		goto out;
	rc = 0;
out:
	buf_release(&done);
	return rc;
}

/* ---- secrets ---- */

int executor_check_secrets(const char *dir, char *err, size_t errlen)
{
	DIR *d = NULL;
	struct dirent *de;
	struct stat st;
	int rc = -1;

	if (stat(dir, &st) < 0) {
		snprintf(err, errlen, "could not open secrets folder \"%s\": %s", dir, strerror(errno));
		goto out;
	}
	if (!S_ISDIR(st.st_mode)) {
		snprintf(err, errlen, "secrets folder \"%s\" is not a folder", dir);
		goto out;
	}
	if (st.st_mode & (S_IRWXG | S_IRWXO)) {
		snprintf(err, errlen, "secrets folder \"%s\" is open to group or others (mode %04o): "
			 "make it 0700", dir, (unsigned)(st.st_mode & 07777));
		goto out;
	}
	d = opendir(dir);
	if (!d) {
		snprintf(err, errlen, "could not read secrets folder \"%s\": %s", dir, strerror(errno));
		goto out;
	}
	while ((de = readdir(d)) != NULL) {
		if (de->d_name[0] == '.')
			continue;
		if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
			snprintf(err, errlen, "could not inspect secret \"%s/%s\": %s", dir, de->d_name,
				 strerror(errno));
			goto out;
		}
		if (S_ISREG(st.st_mode) && (st.st_mode & (S_IRWXG | S_IRWXO))) {
			snprintf(err, errlen, "secret \"%s/%s\" is readable or writable by group or "
				 "others (mode %04o): make it 0600", dir, de->d_name,
				 (unsigned)(st.st_mode & 07777));
			goto out;
		}
	}
	rc = 0;
out:
	if (d)
		closedir(d);
	return rc;
}

/* Copies secret name from the folder src (an open fd) into dst (mode
 * 0400). On failure *reason says why the step fails. */
static int copy_secret(int src, const char *name, const char *dst, const char **reason,
		       char *err, size_t errlen)
{
	struct buf data = BUF_INIT;
	struct stat st;
	char chunk[8192], *path = NULL;
	int in = -1, rc = -1;

	*reason = "bad_secret";
	in = openat(src, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	if (in < 0) {
		if (errno == ENOENT) {
			*reason = "missing_secret";
			snprintf(err, errlen, "secret \"%s\" does not exist", name);
		} else {
			snprintf(err, errlen, "could not open secret \"%s\": %s", name, strerror(errno));
		}
		goto out;
	}
	if (fstat(in, &st) < 0 || !S_ISREG(st.st_mode)) {
		snprintf(err, errlen, "secret \"%s\" is not a regular file", name);
		goto out;
	}
	if (st.st_mode & (S_IRWXG | S_IRWXO)) {
		snprintf(err, errlen, "secret \"%s\" is readable or writable by group or others "
			 "(mode %04o): refusing it", name, (unsigned)(st.st_mode & 07777));
		goto out;
	}
	for (;;) {
		ssize_t n = read(in, chunk, sizeof(chunk));

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			snprintf(err, errlen, "could not read secret \"%s\": %s", name, strerror(errno));
			goto out;
		}
		if (n == 0)
			break;
		if (data.len + (size_t)n > EXEC_SECRET_MAX) {
			snprintf(err, errlen, "secret \"%s\" is larger than %d bytes", name, EXEC_SECRET_MAX);
			goto out;
		}
		buf_add(&data, chunk, (size_t)n);
	}
	path = path_join(dst, name);
	*reason = "prepare";
	if (write_text(path, data.data ? data.data : "", data.len, err, errlen) < 0)
		goto out;
	if (chmod(path, 0400) < 0) {
		snprintf(err, errlen, "could not protect \"%s\": %s", path, strerror(errno));
		goto out;
	}
	rc = 0;
out:
	if (data.data)
		explicit_bzero(data.data, data.len);
	explicit_bzero(chunk, sizeof(chunk));
	buf_release(&data);
	free(path);
	if (in >= 0)
		close(in);
	return rc;
}

/* Fills a fresh DIR/secrets with the secrets the step names. */
static int job_prepare_secrets(struct exec_job *job, const json_t *names, const char **reason,
			       bool *retryable, char *err, size_t errlen)
{
	const char *src_dir = job->ex->opts.secrets_dir;
	size_t i;
	json_t *v;
	int src = -1, rc = -1;

	*reason = "bad_spec";
	*retryable = false;
	json_array_foreach(names, i, v) {
		if (!safe_name(json_string_value(v))) {
			snprintf(err, errlen, "secret name \"%.100s\" is not a plain file name",
				 json_is_string(v) ? json_string_value(v) : "(not a string)");
			goto out;
		}
	}
	if (!src_dir) {
		*reason = "missing_secret";
		snprintf(err, errlen, "secret \"%s\" does not exist: this worker has no secrets folder",
			 json_string_value(json_array_get(names, 0)));
		goto out;
	}
	*reason = "prepare";
	*retryable = true;
	job->secrets = path_join(job->dir, "secrets");
	if (fresh_dir(job->secrets, err, errlen))
		goto out;
	src = open(src_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (src < 0) {
		snprintf(err, errlen, "could not open secrets folder \"%s\": %s", src_dir, strerror(errno));
		goto out;
	}
	json_array_foreach(names, i, v) {
		if (copy_secret(src, json_string_value(v), job->secrets, reason, err, errlen) < 0) {
			*retryable = !strcmp(*reason, "prepare");
			goto out;
		}
	}
	rc = 0;
out:
	if (src >= 0)
		close(src);
	return rc;
}

/* Removes the attempt's copy of its secrets. */
static void job_drop_secrets(struct exec_job *job)
{
	if (!job->secrets)
		return;
	if (executor_rmtree(job->secrets) < 0)
		log_warn("could not remove \"%s\": %s", job->secrets, strerror(errno));
	free(job->secrets);
	job->secrets = NULL;
}

/* ---- environment and argv ---- */

static void env_set(json_t *env, const char *k, const char *v)
{
	json_object_set_new(env, k, json_string(v));
}

/* Builds the step's whole environment: its declared env, then the CAIRN_*
 * variables, PATH and HOME. Returns a new NULL-terminated array. */
static char **job_envp(struct exec_job *job, const struct exec_step *step)
{
	const struct exec_backend *be = job->ex->backend;
	const char *ws = be->workspace_path ? be->workspace_path : job->workspace;
	const char *in = be->in_path ? be->in_path : job->in_dir;
	json_t *env = json_object(), *decl = json_object_get(step->spec, "env"), *v;
	char attempt[16], *done, *key_s;
	const char *k;
	char **envp;
	size_t i = 0;
	struct buf b = BUF_INIT;

	env_set(env, "PATH", "/usr/local/bin:/usr/bin:/bin");
	env_set(env, "HOME", ws);
	json_object_foreach(decl, k, v) {
		if (!*k || strchr(k, '=') || !json_is_string(v) || strncmp(k, "CAIRN_", 6) == 0)
			continue;
		json_object_set(env, k, v);
	}
	snprintf(attempt, sizeof(attempt), "%d", step->attempt);
	buf_addf(&b, "%s:%s", step->run_id, step->step_id);
	key_s = buf_detach(&b);
	done = path_join(in, ".done-effects");
	env_set(env, "CAIRN_WORKSPACE", ws);
	env_set(env, "CAIRN_IN", in);
	env_set(env, "CAIRN_OUT", be->out_path ? be->out_path : job->out_dir);
	env_set(env, "CAIRN_CTL", be->ctl_path ? be->ctl_path : job->ctl);
	env_set(env, "CAIRN_RUN_ID", step->run_id);
	env_set(env, "CAIRN_STEP_ID", step->step_id);
	env_set(env, "CAIRN_ATTEMPT", attempt);
	env_set(env, "CAIRN_IDEMPOTENCY_KEY", key_s);
	env_set(env, "CAIRN_DONE_EFFECTS", done);
	json_object_foreach((json_t *)step->env_extra, k, v)
		if (!strncmp(k, "CAIRN_", 6) && json_is_string(v))
			json_object_set(env, k, v);
	free(done);
	free(key_s);

	envp = xcalloc(json_object_size(env) + 1, sizeof(char *));
	json_object_foreach(env, k, v) {
		buf_addf(&b, "%s=%s", k, json_string_value(v));
		envp[i++] = buf_detach(&b);
	}
	envp[i] = NULL;
	json_decref(env);
	return envp;
}

static void strv_free(char **v)
{
	if (!v)
		return;
	for (size_t i = 0; v[i]; i++)
		free(v[i]);
	free(v);
}

/* spec.run as argv; NULL when it is not a non-empty array of strings. */
static char **spec_argv(const json_t *spec)
{
	json_t *run = json_object_get(spec, "run"), *v;
	size_t n = json_array_size(run), i;
	char **argv;

	if (!n || n > 4096)
		return NULL;
	argv = xcalloc(n + 1, sizeof(char *));
	json_array_foreach(run, i, v) {
		if (!json_is_string(v) || memchr(json_string_value(v), '\0', json_string_length(v))) {
			strv_free(argv);
			return NULL;
		}
		argv[i] = xstrdup(json_string_value(v));
	}
	return argv;
}

/* ---- the job on the loop ---- */

/* Stops reading; the event itself is freed with the job (this may run
 * inside the stream's own callback). */
static void stream_close(struct stream *s)
{
	if (s->ev)
		event_del(s->ev);
	if (s->fd >= 0) {
		close(s->fd);
		s->fd = -1;
	}
	s->eof = true;
}

static void stream_read_cb(evutil_socket_t fd, short what, void *arg)
{
	struct exec_job *job = arg;
	struct stream *s = fd == job->out.fd ? &job->out : &job->err;
	char chunk[EXEC_READ_CHUNK];
	size_t cap = job->cap;

	for (int round = 0; round < 8; round++) {
		ssize_t n = read(fd, chunk, sizeof(chunk));

		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN)
				return;
			n = 0; /* treat a read error as the end of the stream */
		}
		if (n == 0) {
			stream_close(s);
			job_check_done(job);
			return;
		}
		if (s == &job->out)
			line_tail_feed(&job->tail, chunk, (size_t)n);
		if (s->data.len < cap) {
			size_t keep = (size_t)n < cap - s->data.len ? (size_t)n : cap - s->data.len;

			buf_add(&s->data, chunk, keep);
			s->dropped += (size_t)n - keep;
		} else {
			s->dropped += (size_t)n;
		}
		if (s->dropped && job->cap_kills && !job->capped && !job->exited && job->proc) {
			job->capped = true;
			log_info("step \"%s\" of run %s wrote more than %zu bytes to %s, stopping it",
				 strrchr(job->dir, '/') + 1, strrchr(job->run_dir, '/') + 1, cap, s->name);
			if (job->ex->backend->note)
				job->ex->backend->note(job->proc, false, true);
			job->ex->backend->kill(job->proc, SIGKILL);
		}
	}
}

/* One decision of the step's egress proxy: a line of its stderr log. */
static void proxy_log_cb(void *arg, const char *line)
{
	struct exec_job *job = arg;
	struct stream *s = &job->err;
	size_t len = strlen(line);

	if (s->data.len + len + 1 <= job->cap) {
		buf_add(&s->data, line, len);
		buf_add(&s->data, "\n", 1);
	} else {
		s->dropped += len + 1;
	}
}

static void job_exited(struct exec_job *job, int wstatus)
{
	struct timeval tv = { EXEC_LINGER_MS / 1000, (EXEC_LINGER_MS % 1000) * 1000 };

	job->exited = true;
	job->wstatus = wstatus;
	job->ended_mono = mono_ms();
	if (job->exit_ev)
		event_del(job->exit_ev);
	if (job->timeout_ev)
		event_del(job->timeout_ev);
	/* Whatever the step left running in its group ends with it. */
	job->ex->backend->kill(job->proc, SIGKILL);
	evtimer_add(job->linger_ev, &tv);
	job->ex->running--;
	job_check_done(job);
}

/* Reaps the job's main process if it has exited. */
static void job_try_reap(struct exec_job *job)
{
	int status = 0, r;

	if (job->exited || !job->proc || job->setting_up)
		return;
	r = job->ex->backend->reap(job->proc, &status);
	if (r == 1)
		job_exited(job, status);
	else if (r < 0 && errno == ECHILD)
		job_exited(job, 0x7f00 /* as if exited 127 */);
}

static void exit_cb(evutil_socket_t fd, short what, void *arg)
{
	job_try_reap(arg);
}

static void sigchld_cb(evutil_socket_t fd, short what, void *arg)
{
	struct executor *ex = arg;
	struct exec_job *job, *next;

	for (job = ex->jobs; job; job = next) {
		next = job->next;
		job_try_reap(job);
	}
}

static void timeout_cb(evutil_socket_t fd, short what, void *arg)
{
	struct exec_job *job = arg;
	int64_t g = job->ex->opts.kill_grace_ms;
	struct timeval tv = { g / 1000, (g % 1000) * 1000 };

	if (job->exited)
		return;
	log_info("step \"%s\" of run %s timed out after %lld ms, stopping it",
		 strrchr(job->dir, '/') + 1, strrchr(job->run_dir, '/') + 1, (long long)job->timeout_ms);
	job->timed_out = true;
	if (job->ex->backend->note)
		job->ex->backend->note(job->proc, true, false);
	job->ex->backend->kill(job->proc, SIGTERM);
	evtimer_add(job->grace_ev, &tv);
}

static void grace_cb(evutil_socket_t fd, short what, void *arg)
{
	struct exec_job *job = arg;

	if (!job->exited)
		job->ex->backend->kill(job->proc, SIGKILL);
}

static void linger_cb(evutil_socket_t fd, short what, void *arg)
{
	struct exec_job *job = arg;

	/* Something outside the step's group holds its pipes: stop waiting. */
	stream_close(&job->out);
	stream_close(&job->err);
	job_check_done(job);
}

static void job_free(struct exec_job *job)
{
	struct executor *ex = job->ex;

	if (job->prev)
		job->prev->next = job->next;
	else
		ex->jobs = job->next;
	if (job->next)
		job->next->prev = job->prev;
	stream_close(&job->out);
	stream_close(&job->err);
	if (job->out.ev)
		event_free(job->out.ev);
	if (job->err.ev)
		event_free(job->err.ev);
	buf_release(&job->out.data);
	buf_release(&job->err.data);
	line_tail_release(&job->tail);
	if (job->exit_ev)
		event_free(job->exit_ev);
	if (job->timeout_ev)
		event_free(job->timeout_ev);
	if (job->grace_ev)
		event_free(job->grace_ev);
	if (job->linger_ev)
		event_free(job->linger_ev);
	if (job->setup_ev)
		event_free(job->setup_ev);
	if (job->pidfd >= 0)
		close(job->pidfd);
	if (job->proc)
		ex->backend->release(job->proc);
	job_drop_secrets(job);
	json_decref(job->permanent);
	free(job->run_dir);
	free(job->dir);
	free(job->workspace);
	free(job->in_dir);
	free(job->out_dir);
	free(job->ctl);
	free(job);
}

static void reap_cb(evutil_socket_t fd, short what, void *arg)
{
	job_free(arg);
}

static json_t *stream_log(const struct stream *s, size_t cap)
{
	struct buf b = BUF_INIT;
	json_t *entry;

	buf_add(&b, s->data.data ? s->data.data : "", s->data.len);
	if (s->dropped)
		buf_addf(&b, "\n[cairn: output truncated after %zu bytes]\n", cap);
	entry = json_pack("{s:s, s:o, s:b}", "stream", s->name,
			  "data", collect_text(b.data, b.len), "truncated", s->dropped > 0);
	buf_release(&b);
	return entry;
}

static bool permanent_code(const json_t *codes, int code)
{
	size_t i;
	json_t *v;

	json_array_foreach(codes, i, v)
		if (json_is_integer(v) && json_integer_value(v) == code)
			return true;
	return false;
}

/* Decides the outcome, collects the step's results and calls back. */
static void job_finish(struct exec_job *job)
{
	struct executor *ex = job->ex;
	struct exec_result res;
	struct exec_outcome oc;
	const char *last;
	int code, signo;
	char err[400];

	memset(&res, 0, sizeof(res));
	res.exit_code = -1;
	res.started_at_ms = job->started_wall;
	res.duration_ms = job->ended_mono - job->started_mono;
	res.logs = json_array();
	if (job->out.data.len || job->out.dropped)
		json_array_append_new(res.logs, stream_log(&job->out, job->cap));
	if (job->err.data.len || job->err.dropped)
		json_array_append_new(res.logs, stream_log(&job->err, job->cap));
	memset(&oc, 0, sizeof(oc));
	ex->backend->outcome(job->proc, job->wstatus, &oc);
	code = oc.exit_code;
	signo = oc.signo;
	res.exit_code = code;
	res.signo = signo;
	last = line_tail_finish(&job->tail);

	/* A stop the worker decided first; then what the backend knows best
	 * (memory, process limit, refused system call, output cap: a fork
	 * bomb that also ran into the timeout is a "pids" failure); then the
	 * executor's own timeout; then the step's exit. */
	if (job->kill_reason) {
		res.reason = job->kill_reason;
		res.retryable = job->kill_retryable;
		snprintf(res.message, sizeof(res.message), "step stopped: %s", job->kill_reason);
	} else if (strcmp(oc.reason, "exit") && strcmp(oc.reason, "signal") &&
		   strcmp(oc.reason, "timeout")) {
		res.reason = oc.reason;
		res.retryable = oc.retryable;
		snprintf(res.message, sizeof(res.message), "%s", oc.message);
	} else if (job->timed_out) {
		res.reason = "timeout";
		res.retryable = true;
		snprintf(res.message, sizeof(res.message), "step timed out after %lld ms",
			 (long long)job->timeout_ms);
	} else if (job->capped) {
		res.reason = "output_cap";
		res.retryable = false;
		snprintf(res.message, sizeof(res.message), "step output exceeded the cap (%zu bytes)",
			 job->cap);
	} else if (code == 0) {
		if (collect_output(job->out_dir, last, ex->opts.doc_max, &res.output, err, sizeof(err))) {
			res.reason = "bad_output";
			snprintf(res.message, sizeof(res.message), "%s", err);
		} else if (collect_effects(job->out_dir, ex->opts.doc_max, &res.effects, err, sizeof(err))) {
			res.reason = "bad_effects";
			snprintf(res.message, sizeof(res.message), "%s", err);
		} else {
			res.success = true;
		}
	} else if (code > 0) {
		res.reason = "exit";
		res.retryable = !permanent_code(job->permanent, code);
		snprintf(res.message, sizeof(res.message), "%s", oc.message);
	} else {
		res.reason = "signal";
		res.retryable = true;
		snprintf(res.message, sizeof(res.message), "%s", oc.message);
	}

	job->cb(job, &res, job->arg);

	json_decref(res.output);
	json_decref(res.effects);
	json_decref(res.logs);
	job_drop_secrets(job);
	if (executor_rmtree(job->in_dir) < 0 || executor_rmtree(job->out_dir) < 0)
		log_warn("could not clean \"%s\": %s", job->dir, strerror(errno));
	if (res.success) {
		if (executor_rmtree(job->dir) < 0)
			log_warn("could not remove \"%s\": %s", job->dir, strerror(errno));
		rmdir(job->run_dir); /* fails while other steps of the run are here */
	}
}

static void job_check_done(struct exec_job *job)
{
	struct timeval now = { 0, 0 };

	if (job->finished || !job->exited || !job->out.eof || !job->err.eof)
		return;
	job->finished = true;
	if (job->linger_ev)
		event_del(job->linger_ev);
	if (job->grace_ev)
		event_del(job->grace_ev);
	job_finish(job);
	/* Freed on the next loop pass, never inside its own callbacks. If the
	 * loop ends first, executor_free frees it. */
	if (event_base_once(job->ex->base, -1, EV_TIMEOUT, reap_cb, job, &now) < 0)
		log_warn("could not schedule the release of a finished step");
}

static int stream_open(struct exec_job *job, struct stream *s, const char *name, int *wfd,
		       char *err, size_t errlen)
{
	int fds[2];

	s->name = name;
	if (pipe2(fds, O_CLOEXEC) < 0) {
		snprintf(err, errlen, "could not create a pipe: %s", strerror(errno));
		return -1;
	}
	fcntl(fds[0], F_SETFL, O_NONBLOCK);
	s->fd = fds[0];
	*wfd = fds[1];
	s->ev = event_new(job->ex->base, s->fd, EV_READ | EV_PERSIST, stream_read_cb, job);
	s->eof = false;
	return 0;
}

/* The command runs: read its output, watch its exit, start its timeout. */
static void job_run(struct exec_job *job)
{
	struct executor *ex = job->ex;

	job->setting_up = false;
	event_add(job->out.ev, NULL);
	event_add(job->err.ev, NULL);
	job->pidfd = (int)syscall(SYS_pidfd_open, job->pid, 0);
	if (job->pidfd >= 0) {
		job->exit_ev = event_new(ex->base, job->pidfd, EV_READ | EV_PERSIST, exit_cb, job);
		event_add(job->exit_ev, NULL);
	} else if (!ex->sigchld_ev) {
		log_info("pidfd_open is not available (%s): watching SIGCHLD", strerror(errno));
		ex->sigchld_ev = evsignal_new(ex->base, SIGCHLD, sigchld_cb, ex);
		event_add(ex->sigchld_ev, NULL);
	}
	if (job->timeout_ms > 0) {
		struct timeval tv = { job->timeout_ms / 1000, (job->timeout_ms % 1000) * 1000 };
		evtimer_add(job->timeout_ev, &tv);
	}
	/* The child may have exited before the watch was set up. */
	if (!job->exit_ev)
		job_try_reap(job);
}

/* The set-up failed (or was killed) before the command ran: the attempt
 * fails with reason "spawn" (or the kill's reason); nothing ran. */
static void job_setup_failed(struct exec_job *job, const char *why)
{
	struct exec_result res;
	struct timeval now = { 0, 0 };

	memset(&res, 0, sizeof(res));
	res.exit_code = -1;
	res.started_at_ms = job->started_wall;
	res.duration_ms = mono_ms() - job->started_mono;
	res.logs = json_array();
	if (job->kill_reason) {
		res.reason = job->kill_reason;
		res.retryable = job->kill_retryable;
		snprintf(res.message, sizeof(res.message), "step stopped: %s", job->kill_reason);
	} else {
		res.reason = "spawn";
		res.retryable = true;
		snprintf(res.message, sizeof(res.message), "%s", why);
	}
	job->setting_up = false;
	job->exited = job->finished = true;
	job->ex->running--;
	stream_close(&job->out);
	stream_close(&job->err);
	job->cb(job, &res, job->arg);
	json_decref(res.logs);
	job_drop_secrets(job);
	if (executor_rmtree(job->in_dir) < 0 || executor_rmtree(job->out_dir) < 0)
		log_warn("could not clean \"%s\": %s", job->dir, strerror(errno));
	if (event_base_once(job->ex->base, -1, EV_TIMEOUT, reap_cb, job, &now) < 0)
		log_warn("could not schedule the release of a finished step");
}

static void setup_cb(evutil_socket_t fd, short what, void *arg)
{
	struct exec_job *job = arg;
	struct timeval tv = { EXEC_SETUP_TIMEOUT_MS / 1000, 0 };
	char err[320];
	int r;

	if (what & EV_TIMEOUT) {
		job->ex->backend->kill(job->proc, SIGKILL);
		job_setup_failed(job, "sandbox set-up timed out");
		return;
	}
	r = job->ex->backend->setup_finish(job->proc, err, sizeof(err));
	if (r > 0)
		event_add(job->setup_ev, &tv);
	else if (r == 0)
		job_run(job);
	else
		job_setup_failed(job, err);
}

struct exec_job *executor_start(struct executor *ex, const struct exec_step *step,
				exec_done_cb cb, void *arg,
				const char **fail_reason, bool *fail_retryable,
				char *err, size_t errlen)
{
	struct exec_job *job = xcalloc(1, sizeof(*job));
	struct exec_spawn sp;
	char **argv = NULL, **envp = NULL;
	int out_w = -1, err_w = -1;
	json_t *timeout, *secrets;
	struct sandbox_limits lim;
	int setup_fd;
	bool ok = false;

	job->ex = ex;
	job->cb = cb;
	job->arg = arg;
	job->pidfd = -1;
	job->out.fd = job->err.fd = -1;
	job->out.eof = job->err.eof = true;
	line_tail_init(&job->tail, ex->opts.doc_max);
	job->next = ex->jobs;
	if (ex->jobs)
		ex->jobs->prev = job;
	ex->jobs = job;
	*fail_reason = "bad_spec";
	*fail_retryable = false;

	if (!safe_name(step->run_id) || !safe_name(step->step_id)) {
		snprintf(err, errlen, "run or step id \"%.100s\" cannot name a folder", step->step_id);
		goto out;
	}
	argv = spec_argv(step->spec);
	if (!argv) {
		snprintf(err, errlen, "\"run\" of step \"%s\" is not a non-empty array of strings",
			 step->step_id);
		goto out;
	}
	job->permanent = json_incref(json_object_get(json_object_get(step->spec, "retry"),
						     "permanent_exit_codes"));
	timeout = json_object_get(step->spec, "timeout_ms");
	job->timeout_ms = json_is_integer(timeout) ? json_integer_value(timeout) : 0;
	if (sandbox_limits_parse(json_object_get(step->spec, "sandbox"), &lim, err, errlen) < 0)
		goto out;
	job->cap = ex->opts.log_max;
	if (lim.output_max > 0 && (uint64_t)lim.output_max < job->cap)
		job->cap = (size_t)lim.output_max;
	job->cap_kills = lim.output_kill;

	*fail_reason = "prepare";
	*fail_retryable = true;
	if (job_prepare_dirs(job, step, err, errlen))
		goto out;
	secrets = json_object_get(step->spec, "secrets");
	if (json_array_size(secrets) &&
	    job_prepare_secrets(job, secrets, fail_reason, fail_retryable, err, errlen))
		goto out;
	*fail_reason = "prepare";
	*fail_retryable = true;
	envp = job_envp(job, step);
	if (stream_open(job, &job->out, "stdout", &out_w, err, errlen) ||
	    stream_open(job, &job->err, "stderr", &err_w, err, errlen))
		goto out;

	memset(&sp, 0, sizeof(sp));
	sp.argv = argv;
	sp.envp = envp;
	sp.workspace = job->workspace;
	sp.in_dir = job->in_dir;
	sp.out_dir = job->out_dir;
	sp.ctl = job->ctl;
	sp.secrets_dir = job->secrets;
	sp.stdout_fd = out_w;
	sp.stderr_fd = err_w;
	sp.sandbox = json_object_get(step->spec, "sandbox");
	sp.mounts = ex->opts.mounts;
	sp.nmounts = ex->opts.nmounts;
	sp.base = ex->base;
	sp.proxy_log = proxy_log_cb;
	sp.proxy_arg = job;
	*fail_reason = "forbidden_sandbox";
	*fail_retryable = false;
	if (check_step_sandbox(&ex->opts, sp.sandbox, err, errlen))
		goto out;
	*fail_reason = "spawn";
	*fail_retryable = true;
	job->started_wall = wall_ms();
	job->started_mono = mono_ms();
	if (ex->backend->spawn(&sp, &job->proc, &job->pid, err, errlen))
		goto out;
	ex->running++;

	job->timeout_ev = evtimer_new(ex->base, timeout_cb, job);
	job->grace_ev = evtimer_new(ex->base, grace_cb, job);
	job->linger_ev = evtimer_new(ex->base, linger_cb, job);
	setup_fd = ex->backend->setup_fd ? ex->backend->setup_fd(job->proc) : -1;
	if (setup_fd >= 0) {
		/* The set-up goes on in the child; the loop serves others. */
		struct timeval tv = { EXEC_SETUP_TIMEOUT_MS / 1000, 0 };

		job->setting_up = true;
		job->setup_ev = event_new(ex->base, setup_fd, EV_READ, setup_cb, job);
		event_add(job->setup_ev, &tv);
	} else {
		job_run(job);
	}
	ok = true;
out:
	if (out_w >= 0)
		close(out_w);
	if (err_w >= 0)
		close(err_w);
	strv_free(argv);
	strv_free(envp);
	if (!ok) {
		job_free(job);
		return NULL;
	}
	return job;
}

void executor_kill(struct exec_job *job, const char *reason, bool retryable)
{
	if (job->finished)
		return;
	if (!job->kill_reason) {
		job->kill_reason = reason;
		job->kill_retryable = retryable;
	}
	if (!job->exited)
		job->ex->backend->kill(job->proc, SIGKILL);
}

void executor_forget(struct executor *ex, const char *run_id, const char *step_id)
{
	char *run_dir, *dir;

	if (!safe_name(run_id) || !safe_name(step_id))
		return;
	run_dir = path_join(ex->opts.work_dir, run_id);
	dir = path_join(run_dir, step_id);
	if (executor_rmtree(dir) < 0)
		log_warn("could not remove \"%s\": %s", dir, strerror(errno));
	rmdir(run_dir); /* fails while other steps of the run are here */
	free(dir);
	free(run_dir);
}

pid_t executor_job_pid(const struct exec_job *job)
{
	return job->pid;
}

const char *executor_work_dir(const struct executor *ex)
{
	return ex->opts.work_dir;
}

int executor_running(const struct executor *ex)
{
	return ex->running;
}

struct executor *executor_new(struct event_base *base, const struct executor_opts *opts)
{
	struct executor *ex = xcalloc(1, sizeof(*ex));

	ex->base = base;
	ex->opts = *opts;
	ex->backend = opts->backend ? opts->backend : &exec_backend_sandbox;
	if (!ex->opts.log_max)
		ex->opts.log_max = 1024 * 1024;
	if (!ex->opts.doc_max)
		ex->opts.doc_max = COLLECT_DOC_MAX;
	if (ex->opts.kill_grace_ms <= 0)
		ex->opts.kill_grace_ms = 2000;
	return ex;
}

void executor_free(struct executor *ex)
{
	if (!ex)
		return;
	while (ex->jobs) {
		struct exec_job *job = ex->jobs;

		job_free(job);
	}
	if (ex->sigchld_ev)
		event_free(ex->sigchld_ev);
	free(ex);
}
