/* dev: `cairn dev up` and `cairn dev down`, the embedded default. It owns
 * the .cairn/ folder: a private PostgreSQL cluster reachable only through
 * a unix socket inside it, cairnd and one cairn-worker as background
 * processes with pid files and logs, and the env file the CLI reads.
 * Programs are started with fork/exec and argument vectors, never through
 * a shell. */
#include "config.h"
#include "cairn.h"
#include "migrate.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <netinet/in.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define DEV_DEFAULT_PORT 8787
/* Longest unix socket directory: sun_path holds 108 bytes with "/.s.PGSQL.5432". */
#define SOCKDIR_MAX 90

struct dev {
	char dir[PATH_MAX];	/* absolute path of .cairn */
	char pgdata[PATH_MAX];	/* dir/pg */
	char sockdir[PATH_MAX]; /* dir/sock */
	char bindir[PATH_MAX];	/* PostgreSQL server programs */
	char dsn[PATH_MAX * 3 + 64];
	bool drop;		/* run PostgreSQL programs as uid/gid */
	uid_t uid;
	gid_t gid;
	char user[64];
};

/* dev_paths keeps d->dir short, so these never truncate. */
static void dev_path(char *out, size_t outlen, const struct dev *d, const char *name)
{
	if (snprintf(out, outlen, "%s/%s", d->dir, name) >= (int)outlen)
		out[0] = '\0';
}

/* Runs argv (argv[0] a path or a name on PATH) and waits for it. stdout and
 * stderr go to logpath (appended) or /dev/null; as_pg drops to the
 * PostgreSQL user. Returns the exit status, or -1 if it did not run. */
static int run_prog(const struct dev *d, bool as_pg, const char *logpath, char *const argv[])
{
	pid_t pid;
	int status;

	fflush(stdout);
	fflush(stderr);
	pid = fork();
	if (pid < 0)
		return -1;
	if (pid == 0) {
		int null = open("/dev/null", O_RDONLY);
		int log = open(logpath ? logpath : "/dev/null", O_WRONLY | O_CREAT | O_APPEND, 0600);

		if (null >= 0)
			dup2(null, 0);
		if (log >= 0) {
			dup2(log, 1);
			dup2(log, 2);
		}
		if (as_pg && d->drop) {
			if (chdir("/") < 0 || setgroups(0, NULL) < 0 || setgid(d->gid) < 0 ||
			    setuid(d->uid) < 0)
				_exit(126);
		}
		execvp(argv[0], argv);
		fprintf(stderr, "could not run \"%s\": %s\n", argv[0], strerror(errno));
		_exit(127);
	}
	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR)
			return -1;
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* Prints the last lines of a log file to stderr, to explain a failure. */
static void show_log_tail(const char *path)
{
	char *text = NULL, *p;
	size_t len;
	int lines = 0;

	if (read_file_max(path, 4 << 20, &text, &len) < 0)
		return;
	for (p = text + len; p > text && lines < 15; p--)
		if (p[-1] == '\n' && p != text + len)
			lines++;
	if (*p == '\n')
		p++;
	fprintf(stderr, "--- %s\n%s", path, p);
	if (len && text[len - 1] != '\n')
		fputc('\n', stderr);
	free(text);
}

/* Finds the PostgreSQL server programs: PG_BINDIR, the configured
 * CAIRN_PG_BINDIR, then `pg_config --bindir`. */
static int find_pg_bindir(struct dev *d)
{
	const char *cands[2] = { getenv("PG_BINDIR"), CAIRN_PG_BINDIR };
	char path[PATH_MAX + 16], line[PATH_MAX];
	FILE *p;

	for (int i = 0; i < 2; i++) {
		if (!cands[i] || !*cands[i])
			continue;
		snprintf(path, sizeof(path), "%s/initdb", cands[i]);
		if (access(path, X_OK) == 0) {
			snprintf(d->bindir, sizeof(d->bindir), "%s", cands[i]);
			return 0;
		}
	}
	p = popen("pg_config --bindir 2>/dev/null", "r");
	if (p) {
		if (fgets(line, sizeof(line), p)) {
			line[strcspn(line, "\n")] = '\0';
			snprintf(path, sizeof(path), "%s/initdb", line);
			if (access(path, X_OK) == 0) {
				snprintf(d->bindir, sizeof(d->bindir), "%s", line);
				pclose(p);
				return 0;
			}
		}
		pclose(p);
	}
	return fail(-1, "could not find PostgreSQL's initdb (tried PG_BINDIR, %s and pg_config): "
			"install the postgresql package", CAIRN_PG_BINDIR);
}

/* As root, picks the unprivileged user PostgreSQL runs as: the owner of an
 * existing cluster, else "postgres", else a system user "cairn" (created). */
static int choose_pg_user(struct dev *d, bool quiet)
{
	struct passwd *pw = NULL;
	struct stat st;

	if (geteuid() != 0)
		return 0;
	d->drop = true;
	if (stat(d->pgdata, &st) == 0 && st.st_uid != 0)
		pw = getpwuid(st.st_uid);
	if (!pw)
		pw = getpwnam("postgres");
	if (!pw) {
		char *const argv[] = { "useradd", "--system", "--no-create-home", "--shell",
				       "/usr/sbin/nologin", "cairn", NULL };

		pw = getpwnam("cairn");
		if (!pw) {
			if (run_prog(d, false, NULL, argv) != 0)
				return fail(-1, "could not create the system user \"cairn\" with useradd");
			pw = getpwnam("cairn");
		}
	}
	if (!pw)
		return fail(-1, "could not find an unprivileged user to run PostgreSQL as");
	snprintf(d->user, sizeof(d->user), "%s", pw->pw_name);
	d->uid = pw->pw_uid;
	d->gid = pw->pw_gid;
	if (!quiet)
		printf("PostgreSQL refuses to run as root: the cluster runs as the unprivileged user \"%s\"\n",
		       d->user);
	return 0;
}

/* Checks that the PostgreSQL user can reach d->dir (every parent folder
 * must be searchable by it), so that initdb does not fail obscurely. */
static int check_reachable(const struct dev *d)
{
	pid_t pid;
	int status;

	if (!d->drop)
		return 0;
	pid = fork();
	if (pid < 0)
		return fail(-1, "could not fork: %s", strerror(errno));
	if (pid == 0) {
		if (setgroups(0, NULL) < 0 || setgid(d->gid) < 0 || setuid(d->uid) < 0)
			_exit(2);
		_exit(access(d->dir, X_OK) == 0 ? 0 : 1);
	}
	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR)
			return fail(-1, "could not wait for a child: %s", strerror(errno));
	if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
		return 0;
	return fail(-1, "user \"%s\" cannot reach \"%s\": make its parent folders searchable "
			"(chmod o+x) or choose another --dir", d->user, d->dir);
}

/* Makes dir (mode) owned by the PostgreSQL user. */
static int make_pg_dir(const struct dev *d, const char *path, mode_t mode)
{
	if (mkdir(path, mode) < 0 && errno != EEXIST)
		return fail(-1, "could not create \"%s\": %s", path, strerror(errno));
	if (d->drop && chown(path, d->uid, d->gid) < 0)
		return fail(-1, "could not hand \"%s\" to user \"%s\": %s", path, d->user,
			    strerror(errno));
	if (chmod(path, mode) < 0)
		return fail(-1, "could not set the mode of \"%s\": %s", path, strerror(errno));
	return 0;
}

static void append_uri_escaped(char *out, size_t outlen, const char *s)
{
	static const char hex[] = "0123456789ABCDEF";
	size_t n = strlen(out);

	for (; *s && n + 4 < outlen; s++) {
		unsigned char ch = (unsigned char)*s;

		if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
		    strchr("/-._~", ch)) {
			out[n++] = (char)ch;
		} else {
			out[n++] = '%';
			out[n++] = hex[ch >> 4];
			out[n++] = hex[ch & 15];
		}
	}
	out[n] = '\0';
}

static bool cluster_exists(const struct dev *d)
{
	char path[PATH_MAX + 16];

	snprintf(path, sizeof(path), "%s/PG_VERSION", d->pgdata);
	return access(path, F_OK) == 0;
}

static bool cluster_running(const struct dev *d)
{
	char prog[PATH_MAX + 16];
	char *const argv[] = { prog, "status", "-D", (char *)d->pgdata, NULL };

	snprintf(prog, sizeof(prog), "%s/pg_ctl", d->bindir);
	return run_prog(d, true, NULL, argv) == 0;
}

/* initdb and the settings that keep the cluster private: no TCP, the
 * socket in sockdir. */
static int cluster_init(const struct dev *d)
{
	char prog[PATH_MAX + 16], log[PATH_MAX + 16], conf[PATH_MAX + 32];
	char *const argv[] = { prog, "-D", (char *)d->pgdata, "-U", "cairn", "-A", "trust",
			       "-E", "UTF8", "--locale=C", NULL };
	FILE *f;

	if (strchr(d->sockdir, '\'') || strchr(d->sockdir, '\\'))
		return fail(-1, "folder \"%s\" has a quote or backslash in its path: choose another --dir",
			    d->dir);
	if (make_pg_dir(d, d->pgdata, 0700) < 0)
		return -1;
	snprintf(prog, sizeof(prog), "%s/initdb", d->bindir);
	dev_path(log, sizeof(log), d, "initdb.log");
	if (run_prog(d, true, log, argv) != 0) {
		show_log_tail(log);
		return fail(-1, "initdb failed in \"%s\"%s%s%s", d->pgdata,
			    d->drop ? " (the folder and its parents must be reachable by user \"" : "",
			    d->drop ? d->user : "", d->drop ? "\")" : "");
	}
	snprintf(conf, sizeof(conf), "%s/postgresql.conf", d->pgdata);
	f = fopen(conf, "a");
	if (!f)
		return fail(-1, "could not open \"%s\": %s", conf, strerror(errno));
	fprintf(f, "\n# cairn dev up: private cluster, reachable only through its unix socket\n"
		   "listen_addresses = ''\n"
		   "unix_socket_directories = '%s'\n"
		   "max_connections = 100\n",
		d->sockdir);
	if (fclose(f) != 0)
		return fail(-1, "could not write \"%s\": %s", conf, strerror(errno));
	return 0;
}

static int cluster_start(const struct dev *d)
{
	char prog[PATH_MAX + 16], log[PATH_MAX + 16], ctllog[PATH_MAX + 16];
	char *const argv[] = { prog, "-D", (char *)d->pgdata, "-l", log, "-w", "-t", "60",
			       "start", NULL };
	int fd;

	snprintf(prog, sizeof(prog), "%s/pg_ctl", d->bindir);
	dev_path(log, sizeof(log), d, "postgres.log");
	dev_path(ctllog, sizeof(ctllog), d, "pg_ctl.log");
	/* The server opens its log itself, as its own user. */
	fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0600);
	if (fd < 0)
		return fail(-1, "could not create \"%s\": %s", log, strerror(errno));
	if (d->drop && fchown(fd, d->uid, d->gid) < 0) {
		close(fd);
		return fail(-1, "could not hand \"%s\" to user \"%s\": %s", log, d->user,
			    strerror(errno));
	}
	close(fd);
	if (run_prog(d, true, ctllog, argv) != 0) {
		show_log_tail(log);
		return fail(-1, "PostgreSQL did not start in \"%s\"", d->pgdata);
	}
	return 0;
}

static int cluster_stop(const struct dev *d)
{
	char prog[PATH_MAX + 16], ctllog[PATH_MAX + 16];
	char *const argv[] = { prog, "-D", (char *)d->pgdata, "-m", "fast", "-w", "-t", "60",
			       "stop", NULL };

	snprintf(prog, sizeof(prog), "%s/pg_ctl", d->bindir);
	dev_path(ctllog, sizeof(ctllog), d, "pg_ctl.log");
	if (run_prog(d, true, ctllog, argv) != 0)
		return fail(-1, "could not stop PostgreSQL in \"%s\" (see %s)", d->pgdata, ctllog);
	return 0;
}

/* Creates database "cairn" in the private cluster unless it exists. */
static int cluster_createdb(const struct dev *d)
{
	char dsn[PATH_MAX * 3 + 64] = "postgresql:///postgres?user=cairn&host=";
	PGconn *conn = NULL;
	PGresult *res = NULL;
	int ret = -1;

	append_uri_escaped(dsn, sizeof(dsn), d->sockdir);
	conn = PQconnectdb(dsn);
	if (PQstatus(conn) != CONNECTION_OK) {
		fail(-1, "could not connect to the new cluster: %s", PQerrorMessage(conn));
		goto out;
	}
	res = PQexec(conn, "select 1 from pg_database where datname = 'cairn'");
	if (PQresultStatus(res) != PGRES_TUPLES_OK) {
		fail(-1, "could not list databases: %s", PQerrorMessage(conn));
		goto out;
	}
	if (PQntuples(res) == 0) {
		PQclear(res);
		res = PQexec(conn, "create database cairn");
		if (PQresultStatus(res) != PGRES_COMMAND_OK) {
			fail(-1, "could not create database \"cairn\": %s", PQerrorMessage(conn));
			goto out;
		}
	}
	ret = 0;
out:
	PQclear(res);
	PQfinish(conn);
	return ret;
}

/* True when pid is alive (not a zombie) and runs program name. */
static bool pid_alive(pid_t pid, const char *name)
{
	char path[64], cmd[PATH_MAX], stat[512];
	const char *base;
	char *rp;
	size_t len;
	FILE *f;

	if (pid <= 0 || kill(pid, 0) < 0)
		return false;
	snprintf(path, sizeof(path), "/proc/%ld/cmdline", (long)pid);
	f = fopen(path, "r");
	if (!f)
		return false;
	len = fread(cmd, 1, sizeof(cmd) - 1, f);
	fclose(f);
	cmd[len] = '\0';
	base = strrchr(cmd, '/');
	base = base ? base + 1 : cmd;
	if (strcmp(base, name) != 0)
		return false;
	snprintf(path, sizeof(path), "/proc/%ld/stat", (long)pid);
	f = fopen(path, "r");
	if (!f)
		return false;
	len = fread(stat, 1, sizeof(stat) - 1, f);
	fclose(f);
	stat[len] = '\0';
	rp = strrchr(stat, ')');
	return !(rp && rp[1] == ' ' && rp[2] == 'Z');
}

/* The pid in pidfile when that process is alive and runs program name, else 0. */
static pid_t pidfile_alive(const char *pidfile, const char *name)
{
	char *text = NULL;
	size_t len;
	pid_t pid;

	if (read_file_max(pidfile, 64, &text, &len) < 0)
		return 0;
	pid = (pid_t)atol(text);
	free(text);
	return pid_alive(pid, name) ? pid : 0;
}

/* Starts argv as a background daemon: own session, stdin /dev/null,
 * output appended to logpath; writes its pid to pidfile. */
static pid_t spawn_daemon(char *const argv[], const char *logpath, const char *pidfile)
{
	char num[32];
	pid_t pid;
	int fd;

	fflush(stdout);
	fflush(stderr);
	pid = fork();
	if (pid < 0)
		return fail(-1, "could not fork: %s", strerror(errno));
	if (pid == 0) {
		int null = open("/dev/null", O_RDONLY);
		int log = open(logpath, O_WRONLY | O_CREAT | O_APPEND, 0600);

		setsid();
		if (null >= 0)
			dup2(null, 0);
		if (log >= 0) {
			dup2(log, 1);
			dup2(log, 2);
		}
		execv(argv[0], argv);
		fprintf(stderr, "could not run \"%s\": %s\n", argv[0], strerror(errno));
		_exit(127);
	}
	fd = open(pidfile, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (fd >= 0) {
		int n = snprintf(num, sizeof(num), "%ld\n", (long)pid);

		if (write(fd, num, (size_t)n) != n)
			fail(0, "could not write \"%s\"", pidfile);
		close(fd);
	}
	return pid;
}

/* True while our child pid has not exited. */
static bool child_alive(pid_t pid)
{
	int status;

	return waitpid(pid, &status, WNOHANG) == 0;
}

static bool port_free(int port)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port),
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
	bool ok;

	if (fd < 0)
		return false;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	ok = bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;
	close(fd);
	return ok;
}

static int read_port(const struct dev *d)
{
	char path[PATH_MAX + 16], *text = NULL;
	size_t len;
	int port;

	dev_path(path, sizeof(path), d, "cairnd.port");
	if (read_file_max(path, 64, &text, &len) < 0)
		return -1;
	port = atoi(text);
	free(text);
	return port > 0 && port < 65536 ? port : -1;
}

static int start_cairnd(const struct cairn *cn, const struct dev *d, int port, pid_t *out)
{
	char listen[64], pidfile[PATH_MAX + 16], log[PATH_MAX + 16], portfile[PATH_MAX + 16];
	char *prog = find_program(cn, "cairnd");
	char *argv[] = { prog, "--database-url", (char *)d->dsn, "--listen", listen, "--port-file",
			 portfile, NULL };
	int ret = -1;
	pid_t pid;

	*out = 0;
	if (!prog)
		return fail(-1, "cairnd was not found next to cairn or on PATH (run make)");
	if (port != 0 && !port_free(port)) {
		printf("port %d is busy: cairnd takes a free one\n", port);
		port = 0;
	}
	snprintf(listen, sizeof(listen), "127.0.0.1:%d", port);
	dev_path(pidfile, sizeof(pidfile), d, "cairnd.pid");
	dev_path(log, sizeof(log), d, "cairnd.log");
	dev_path(portfile, sizeof(portfile), d, "cairnd.port");
	unlink(portfile);
	pid = spawn_daemon(argv, log, pidfile);
	if (pid < 0)
		goto out;
	for (int i = 0; i < 200; i++) {
		if (read_port(d) > 0) {
			*out = pid;
			ret = 0;
			goto out;
		}
		if (!child_alive(pid))
			break;
		usleep(50 * 1000);
	}
	show_log_tail(log);
	if (child_alive(pid))
		kill(pid, SIGTERM);
	unlink(pidfile);
	fail(-1, "cairnd did not start (see %s)", log);
out:
	free(prog);
	return ret;
}

static int start_worker(const struct cairn *cn, const struct dev *d, pid_t *out)
{
	char pidfile[PATH_MAX + 16], log[PATH_MAX + 16], work[PATH_MAX + 16];
	char *prog = find_program(cn, "cairn-worker");
	char *argv[] = { prog, "--database-url", (char *)d->dsn, "--work-dir", work, NULL };
	int ret = -1;
	pid_t pid;

	*out = 0;
	if (!prog)
		return fail(-1, "cairn-worker was not found next to cairn or on PATH (run make)");
	dev_path(pidfile, sizeof(pidfile), d, "worker.pid");
	dev_path(log, sizeof(log), d, "worker.log");
	dev_path(work, sizeof(work), d, "work");
	if (mkdir(work, 0700) < 0 && errno != EEXIST) {
		fail(-1, "could not create \"%s\": %s", work, strerror(errno));
		goto out;
	}
	pid = spawn_daemon(argv, log, pidfile);
	if (pid < 0)
		goto out;
	/* A worker that cannot start (bad flags, no database) exits at once. */
	usleep(300 * 1000);
	if (!child_alive(pid)) {
		show_log_tail(log);
		unlink(pidfile);
		fail(-1, "cairn-worker exited at once (see %s)", log);
		goto out;
	}
	*out = pid;
	ret = 0;
out:
	free(prog);
	return ret;
}

/* Reads one value from DIR/env (written by an earlier dev up) into out. */
static bool env_value(const struct dev *d, const char *name, char *out, size_t outlen)
{
	char path[PATH_MAX + 16], *text = NULL, *line, *save = NULL;
	size_t len, nlen = strlen(name);
	bool found = false;

	dev_path(path, sizeof(path), d, "env");
	if (read_file_max(path, 64 << 10, &text, &len) < 0)
		return false;
	for (line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		char *v;
		size_t vlen;

		if (strncmp(line, name, nlen) != 0 || line[nlen] != '=')
			continue;
		v = line + nlen + 1;
		vlen = strlen(v);
		if (vlen >= 2 && v[0] == '\'' && v[vlen - 1] == '\'') {
			v[vlen - 1] = '\0';
			v++;
		}
		snprintf(out, outlen, "%s", v);
		found = true;
		break;
	}
	free(text);
	return found;
}

static int write_env(const struct dev *d, const char *url, const char *token)
{
	char path[PATH_MAX + 16], tmp[PATH_MAX + 16];
	FILE *f;
	int fd;

	dev_path(path, sizeof(path), d, "env");
	dev_path(tmp, sizeof(tmp), d, "env.tmp");
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0 || !(f = fdopen(fd, "w"))) {
		if (fd >= 0)
			close(fd);
		return fail(-1, "could not write \"%s\": %s", tmp, strerror(errno));
	}
	fprintf(f, "# written by `cairn dev up`; the cairn CLI reads it from this folder's parent or below\n"
		   "CAIRN_URL='%s'\nCAIRN_TOKEN='%s'\nCAIRN_DATABASE_URL='%s'\n",
		url, token, d->dsn);
	if (fclose(f) != 0 || rename(tmp, path) < 0)
		return fail(-1, "could not write \"%s\": %s", path, strerror(errno));
	return 0;
}

/* True when token is a known API token of this database. */
static bool token_valid(PGconn *conn, const char *token)
{
	const char *params[1] = { token };
	PGresult *res;
	bool ok;

	if (!*token)
		return false;
	res = PQexecParams(conn,
			   "select 1 from cairn.api_tokens where token_sha256 = sha256(convert_to($1, 'UTF8'))",
			   1, NULL, params, NULL, NULL, 0);
	ok = PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1;
	PQclear(res);
	return ok;
}

/* Creates an admin token for the dev set-up; returns new or NULL. */
static char *create_token(PGconn *conn)
{
	char name[64];
	const char *params[2] = { name, "{admin}" };
	PGresult *res;
	char *token = NULL;

	snprintf(name, sizeof(name), "dev-admin-%ld-%ld", (long)time(NULL), (long)getpid());
	res = PQexecParams(conn, "select cairn.token_create($1, $2::text[])", 2, NULL, params, NULL,
			   NULL, 0);
	if (PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1)
		token = xstrdup(PQgetvalue(res, 0, 0));
	else
		fail(-1, "could not create an admin token: %s", PQerrorMessage(conn));
	PQclear(res);
	return token;
}

/* Fills the paths of d from --dir (created when create is set). */
static int dev_paths(struct dev *d, const char *dir, bool create)
{
	char real[PATH_MAX];

	if (create && mkdir(dir, 0755) < 0 && errno != EEXIST)
		return fail(-1, "could not create \"%s\": %s", dir, strerror(errno));
	if (!realpath(dir, real))
		return fail(-1, "could not find \"%s\": %s", dir, strerror(errno));
	snprintf(d->dir, sizeof(d->dir), "%s", real);
	dev_path(d->pgdata, sizeof(d->pgdata), d, "pg");
	dev_path(d->sockdir, sizeof(d->sockdir), d, "sock");
	if (strlen(d->sockdir) > SOCKDIR_MAX)
		return fail(-1, "path \"%s\" is too long for a unix socket: choose a shorter --dir",
			    d->sockdir);
	return 0;
}

/* The database: CAIRN_DATABASE_URL when set, else the private cluster in
 * d->dir (created and started as needed). Fills d->dsn; *fresh tells
 * whether the cluster was just made. */
static int dev_database(struct dev *d, bool *fresh)
{
	const char *ext = getenv("CAIRN_DATABASE_URL");

	*fresh = false;
	if (ext && *ext) {
		snprintf(d->dsn, sizeof(d->dsn), "%s", ext);
		printf("%-9s using CAIRN_DATABASE_URL (no private cluster)\n", "postgres");
		return 0;
	}
	if (find_pg_bindir(d) < 0 || choose_pg_user(d, false) < 0 || check_reachable(d) < 0)
		return -1;
	if (!cluster_exists(d)) {
		if (make_pg_dir(d, d->sockdir, 0700) < 0 || cluster_init(d) < 0)
			return -1;
		*fresh = true;
	}
	if (cluster_running(d)) {
		printf("%-9s already running: %s\n", "postgres", d->pgdata);
	} else {
		if (make_pg_dir(d, d->sockdir, 0700) < 0 || cluster_start(d) < 0)
			return -1;
		printf("%-9s started: %s (socket in %s, no TCP)\n", "postgres", d->pgdata, d->sockdir);
	}
	snprintf(d->dsn, sizeof(d->dsn), "postgresql:///cairn?user=cairn&host=");
	append_uri_escaped(d->dsn, sizeof(d->dsn), d->sockdir);
	return cluster_createdb(d);
}

/* Migrates the schema and returns an admin token (new; caller frees): the
 * one in d->dir/env when it is still valid for this database, else a new one. */
static char *dev_schema_and_token(const struct dev *d, bool fresh)
{
	char old_token[512] = "", old_dsn[sizeof(d->dsn)] = "", err[1024];
	char *token = NULL;
	PGconn *conn = NULL;
	int n;

	if (db_connect(d->dsn, &conn) != EXIT_OK)
		return NULL;
	n = migrate_run(conn, err, sizeof(err));
	if (n < 0) {
		fail(-1, "migration failed: %s", err);
		goto out;
	}
	if (n > 0)
		printf("%-9s applied %d migration%s\n", "schema", n, n == 1 ? "" : "s");
	else
		printf("%-9s up to date\n", "schema");
	if (!fresh && env_value(d, "CAIRN_DATABASE_URL", old_dsn, sizeof(old_dsn)) &&
	    strcmp(old_dsn, d->dsn) == 0 &&
	    env_value(d, "CAIRN_TOKEN", old_token, sizeof(old_token)) &&
	    token_valid(conn, old_token)) {
		token = xstrdup(old_token);
	} else {
		token = create_token(conn);
		if (token)
			printf("%-9s created an admin token\n", "token");
	}
out:
	PQfinish(conn);
	return token;
}

/* cairnd and the worker: starts whichever is not running. port < 0 means
 * "not given": the earlier address when free, else the default. Writes
 * cairnd's URL into url. */
static int dev_daemons(const struct cairn *cn, const struct dev *d, long port, char *url,
		       size_t urllen)
{
	char pidfile[PATH_MAX + 16], old_url[128];
	const char *colon;
	pid_t pid;
	int p;

	dev_path(pidfile, sizeof(pidfile), d, "cairnd.pid");
	pid = pidfile_alive(pidfile, "cairnd");
	p = read_port(d);
	if (pid && p > 0) {
		printf("%-9s already running: pid %ld\n", "cairnd", (long)pid);
	} else {
		if (port < 0) {
			port = DEV_DEFAULT_PORT;
			/* Keep the address of an earlier dev up when its port is free. */
			if (env_value(d, "CAIRN_URL", old_url, sizeof(old_url)) &&
			    (colon = strrchr(old_url, ':')) && atoi(colon + 1) > 0 &&
			    port_free(atoi(colon + 1)))
				port = atoi(colon + 1);
		}
		if (pid)
			kill(pid, SIGTERM);
		if (start_cairnd(cn, d, (int)port, &pid) < 0)
			return -1;
		p = read_port(d);
		printf("%-9s started: pid %ld, log %s/cairnd.log\n", "cairnd", (long)pid, d->dir);
	}
	snprintf(url, urllen, "http://127.0.0.1:%d", p);

	dev_path(pidfile, sizeof(pidfile), d, "worker.pid");
	pid = pidfile_alive(pidfile, "cairn-worker");
	if (pid) {
		printf("%-9s already running: pid %ld\n", "worker", (long)pid);
	} else {
		if (start_worker(cn, d, &pid) < 0)
			return -1;
		printf("%-9s started: pid %ld, log %s/worker.log\n", "worker", (long)pid, d->dir);
	}
	return 0;
}

static void dev_print_usage_hints(const struct dev *d, const char *dir, const char *url)
{
	const char *base = strrchr(d->dir, '/');
	bool found = base && strcmp(base, "/.cairn") == 0;

	printf("\ncairn is up at %s\n", url);
	if (found)
		printf("  cairn commands run in %.*s or below find it through %s/env\n",
		       base == d->dir ? 1 : (int)(base - d->dir), d->dir, d->dir);
	printf("  %s  set -a; . %s/env; set +a\n", found ? "elsewhere:" : "to use it:", d->dir);
	printf("  SQL:        psql '%s'\n", d->dsn);
	printf("  stop:       cairn dev down%s%s\n", strcmp(dir, ".cairn") ? " --dir " : "",
	       strcmp(dir, ".cairn") ? dir : "");
}

int cmd_dev_up(struct cairn *cn, const struct cmd *self, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "dir", required_argument, NULL, 'd' },
		{ "port", required_argument, NULL, 'p' },
		COMMON_LONGOPTS,
		{ NULL, 0, NULL, 0 }
	};
	const char *dir = ".cairn";
	struct dev d = { 0 };
	char url[128];
	char *token = NULL, *end;
	bool fresh;
	long port = -1;
	int opt, ret = EXIT_OTHER;

	opterr = 0;
	while ((opt = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (opt) {
		case 'd':
			dir = optarg;
			break;
		case 'p':
			port = strtol(optarg, &end, 10);
			if (*end || !*optarg || port < 0 || port > 65535)
				return usage_error(self, "invalid --port \"%s\"", optarg);
			break;
		COMMON_OPT_CASES;
		}
	}
	if (optind != argc)
		return usage_error(self, "unexpected argument \"%s\"", argv[optind]);
	if (dev_paths(&d, dir, true) < 0 || dev_database(&d, &fresh) < 0)
		goto out;
	token = dev_schema_and_token(&d, fresh);
	if (!token || dev_daemons(cn, &d, port, url, sizeof(url)) < 0 ||
	    write_env(&d, url, token) < 0)
		goto out;
	dev_print_usage_hints(&d, dir, url);
	ret = EXIT_OK;
out:
	free(token);
	return ret;
}

/* SIGTERM, then up to wait_s seconds, then SIGKILL. Returns true if it ran. */
static bool stop_daemon(const struct dev *d, const char *pidname, const char *prog, int wait_s)
{
	char pidfile[PATH_MAX + 16];
	pid_t pid;

	dev_path(pidfile, sizeof(pidfile), d, pidname);
	pid = pidfile_alive(pidfile, prog);
	unlink(pidfile);
	if (!pid)
		return false;
	kill(pid, SIGTERM);
	for (int i = 0; i < wait_s * 20; i++) {
		if (!pid_alive(pid, prog))
			return true;
		usleep(50 * 1000);
	}
	kill(pid, SIGKILL);
	return true;
}

int cmd_dev_down(struct cairn *cn, const struct cmd *self, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "dir", required_argument, NULL, 'd' },
		COMMON_LONGOPTS,
		{ NULL, 0, NULL, 0 }
	};
	const char *dir = ".cairn";
	struct dev d = { 0 };
	bool any = false;
	int opt;

	opterr = 0;
	while ((opt = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (opt) {
		case 'd':
			dir = optarg;
			break;
		COMMON_OPT_CASES;
		}
	}
	if (optind != argc)
		return usage_error(self, "unexpected argument \"%s\"", argv[optind]);
	if (access(dir, F_OK) < 0)
		return fail(EXIT_NOT_FOUND, "no \"%s\" here: nothing to stop", dir);
	if (dev_paths(&d, dir, false) < 0)
		return EXIT_OTHER;
	/* The worker first, so that it hands its steps back while cairnd and
	 * the database are still there. */
	if (stop_daemon(&d, "worker.pid", "cairn-worker", 30)) {
		printf("%-9s stopped\n", "worker");
		any = true;
	}
	if (stop_daemon(&d, "cairnd.pid", "cairnd", 10)) {
		printf("%-9s stopped\n", "cairnd");
		any = true;
	}
	if (cluster_exists(&d)) {
		if (find_pg_bindir(&d) < 0 || choose_pg_user(&d, true) < 0)
			return EXIT_OTHER;
		if (cluster_running(&d)) {
			if (cluster_stop(&d) < 0)
				return EXIT_OTHER;
			printf("%-9s stopped\n", "postgres");
			any = true;
		}
	}
	if (!any)
		printf("nothing was running in %s\n", d.dir);
	return EXIT_OK;
}
