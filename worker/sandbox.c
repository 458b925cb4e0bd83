/* sandbox: starts one command in fresh namespaces with a read-only root,
 * private /proc, /dev, /tmp, no capabilities, rlimits, cgroup limits and a
 * seccomp filter whose refusals a small init inside answers and reports.
 * Set-up fails closed at every phase; nothing here ever runs a command
 * with less isolation than asked. */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <grp.h>
#include <limits.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/sched.h>
#include <linux/seccomp.h>
#include <net/if.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sandbox.h"
#include "sandbox_cgroup.h"
#include "sandbox_proxy.h"
#include "util.h"

#define SANDBOX_UID 1000                /* the step's uid and gid inside */
#define SANDBOX_GID 1000
#define DEFAULT_HOST_ID 65534           /* nobody, when the worker is root */
#define HANDSHAKE_TIMEOUT_MS 10000
#define CAIRN_STR_(x) #x
#define CAIRN_STR(x) CAIRN_STR_(x)
#define MAX_REFUSAL_LOGS 20
#define FIRST_FREE_FD 6                 /* init keeps 0-2 stdio, 3 sync, 4 status, 5 proxy */

#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif
#ifndef MOUNT_ATTR_RDONLY
#define MOUNT_ATTR_RDONLY 0x00000001
#define MOUNT_ATTR_NOSUID 0x00000002
#define MOUNT_ATTR_NODEV 0x00000004
#endif
#ifndef AT_RECURSIVE
#define AT_RECURSIVE 0x8000
#endif

struct sb_mount_attr {
	uint64_t attr_set, attr_clr, propagation, userns_fd;
};

/* What init reports to the caller over the status pipe (one write each). */
struct report {
	char tag;                       /* 'E' set-up error, 'R' running, 'X' step ended */
	int status;                     /* 'X': wait status of the step */
	int exec_errno;                 /* 'X': errno when the command could not be executed */
	char text[200];                 /* 'E': message; 'X': system call that got the sandbox killed */
	char refused[48];               /* 'X': first system call refused by policy */
};

/* Everything the child needs, prepared before clone so that the child
 * never allocates. */
struct plan {
	const struct sandbox_opts *o;
	struct sandbox_limits lim;
	struct sandbox_policy pol;
	char rootfs[PATH_MAX], ws[PATH_MAX], in[PATH_MAX], out[PATH_MAX];
	char secrets[PATH_MAX], ctl[PATH_MAX];
	struct sandbox_mount *mounts;   /* o->mounts then the profile's "mounts" */
	size_t nmounts;
	char (*msrc)[PATH_MAX];
	/* O_PATH fds the child opens for each source while it still has the
	 * caller's file system identity (then sources in 0700 dirs work). */
	int fd_root, fd_ws, fd_in, fd_out, fd_secrets, fd_ctl;
	int *fd_m;
	char **envp;                    /* o->envp, plus the proxy variables */
	const struct sandbox_cgroup *cg; /* v1: the child joins it itself */
	int proxy_fd;                   /* init's end of the proxy socket pair, or -1 */
	int sync_rd, status_wr;
	bool root_mode;
	size_t notif_size, resp_size;
};

/* --- profile ---------------------------------------------------------- */

static void limits_default(struct sandbox_limits *l)
{
	memset(l, 0, sizeof(*l));
	l->memory = 1LL << 30;
	l->pids = 512;
	l->tmp_size = 256LL << 20;
	l->file_size = 1LL << 30;
	l->open_files = 1024;
	l->output_max = 1LL << 20;
	l->output_kill = true;
	l->kill_grace_ms = 2000;
}

static int get_size(const json_t *v, const char *key, int64_t min, int64_t *out, char *err, size_t errlen)
{
	int64_t n;

	if (json_is_integer(v))
		n = json_integer_value(v);
	else if (!json_is_string(v) || size_parse(json_string_value(v), &n) < 0)
		goto bad;
	if (n < min)
		goto bad;
	*out = n;
	return 0;
bad:
	snprintf(err, errlen, "sandbox \"%s\" must be a size of at least %lld bytes (e.g. \"512M\")", key, (long long)min);
	return -1;
}

static int get_duration(const json_t *v, const char *key, int64_t *out, char *err, size_t errlen)
{
	int64_t n;

	if (json_is_integer(v))
		n = json_integer_value(v);
	else if (!json_is_string(v) || duration_parse(json_string_value(v), &n) < 0)
		n = -1;
	if (n < 0) {
		snprintf(err, errlen, "sandbox \"%s\" must be a duration (e.g. \"30s\") or milliseconds", key);
		return -1;
	}
	*out = n;
	return 0;
}

int sandbox_limits_parse(const json_t *profile, struct sandbox_limits *l, char *err, size_t errlen)
{
	const char *key;
	json_t *v;

	limits_default(l);
	if (!profile || json_is_null(profile))
		return 0;
	if (!json_is_object(profile)) {
		snprintf(err, errlen, "sandbox profile must be an object");
		return -1;
	}
	json_object_foreach((json_t *)profile, key, v) {
		int rc = 0;

		if (strcmp(key, "network") == 0) {
			if (json_is_string(v) && strcmp(json_string_value(v), "none") == 0)
				continue;
			if (json_is_object(v) && json_object_size(v) == 1 && json_object_get(v, "allow")) {
				if (sandbox_proxy_parse_allow(v, err, errlen) < 0)
					return -1;
				l->egress = true;
				continue;
			}
			snprintf(err, errlen, "sandbox \"network\" must be \"none\" or {\"allow\": [\"host:port\", ...]}");
			return -1;
		} else if (strcmp(key, "memory") == 0) {
			rc = get_size(v, key, 4 << 20, &l->memory, err, errlen);
		} else if (strcmp(key, "pids") == 0) {
			if (!json_is_integer(v) || json_integer_value(v) < 2 || json_integer_value(v) > 1000000) {
				snprintf(err, errlen, "sandbox \"pids\" must be an integer from 2 to 1000000");
				return -1;
			}
			l->pids = json_integer_value(v);
		} else if (strcmp(key, "cpu") == 0) {
			if (!json_is_number(v) || json_number_value(v) < 0.01 || json_number_value(v) > 1024) {
				snprintf(err, errlen, "sandbox \"cpu\" must be a number of cores from 0.01 to 1024");
				return -1;
			}
			l->cpu_millicores = (int64_t)(json_number_value(v) * 1000 + 0.5);
		} else if (strcmp(key, "tmp_size") == 0) {
			rc = get_size(v, key, 1 << 20, &l->tmp_size, err, errlen);
		} else if (strcmp(key, "cpu_time") == 0 || strcmp(key, "cpu_time_ms") == 0) {
			rc = get_duration(v, key, &l->cpu_time_ms, err, errlen);
		} else if (strcmp(key, "file_size") == 0) {
			rc = get_size(v, key, 4096, &l->file_size, err, errlen);
		} else if (strcmp(key, "open_files") == 0) {
			if (!json_is_integer(v) || json_integer_value(v) < 16 || json_integer_value(v) > 1 << 20) {
				snprintf(err, errlen, "sandbox \"open_files\" must be an integer from 16 to 1048576");
				return -1;
			}
			l->open_files = json_integer_value(v);
		} else if (strcmp(key, "output") == 0) {
			rc = get_size(v, key, 1024, &l->output_max, err, errlen);
		} else if (strcmp(key, "on_output_cap") == 0) {
			const char *s = json_string_value(v);

			if (!s || (strcmp(s, "kill") && strcmp(s, "truncate"))) {
				snprintf(err, errlen, "sandbox \"on_output_cap\" must be \"kill\" or \"truncate\"");
				return -1;
			}
			l->output_kill = strcmp(s, "kill") == 0;
		} else if (strcmp(key, "kill_grace") == 0 || strcmp(key, "kill_grace_ms") == 0) {
			rc = get_duration(v, key, &l->kill_grace_ms, err, errlen);
		} else if (strcmp(key, "unix_sockets") == 0) {
			if (!json_is_boolean(v)) {
				snprintf(err, errlen, "sandbox \"unix_sockets\" must be true or false");
				return -1;
			}
			l->unix_sockets = json_is_true(v);
		} else if (strcmp(key, "rootfs") == 0 || strcmp(key, "mounts") == 0 || strcmp(key, "timeout_ms") == 0) {
			/* Read by sandbox_spawn (rootfs, mounts) or the caller (timeout_ms). */
		} else if (strcmp(key, "seccomp") == 0) {
			if (!json_is_object(v)) {
				snprintf(err, errlen, "sandbox \"seccomp\" must be an object");
				return -1;
			}
		} else {
			snprintf(err, errlen, "unknown sandbox setting \"%s\"", key);
			return -1;
		}
		if (rc < 0)
			return -1;
	}
	return 0;
}

/* --- the child: runs as init (pid 1) of the new namespaces ------------ */

static void child_report(int fd, const struct report *r)
{
	ssize_t n;

	do
		n = write(fd, r, sizeof(*r));
	while (n < 0 && errno == EINTR);
}

__attribute__((format(printf, 2, 3), noreturn))
static void child_fail(const struct plan *pl, const char *fmt, ...)
{
	struct report r = { .tag = 'E' };
	int e = errno;
	va_list ap;
	size_t n;

	va_start(ap, fmt);
	vsnprintf(r.text, sizeof(r.text), fmt, ap);
	va_end(ap);
	n = strlen(r.text);
	if (e && n + 3 < sizeof(r.text))
		snprintf(r.text + n, sizeof(r.text) - n, ": %s", strerror(e));
	child_report(pl->status_wr, &r);
	_exit(125);
}

static int mount_attr(const char *path, bool recursive, uint64_t set)
{
	struct sb_mount_attr a = { .attr_set = set };

	return (int)syscall(SYS_mount_setattr, AT_FDCWD, path, recursive ? AT_RECURSIVE : 0, &a, sizeof(a));
}

/* mkdir -p for a path inside the new root (only while it is writable). */
static int mkdirs(char *path, mode_t mode)
{
	for (char *p = path + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(path, mode) < 0 && errno != EEXIST) {
			*p = '/';
			return -1;
		}
		*p = '/';
	}
	if (mkdir(path, mode) < 0 && errno != EEXIST)
		return -1;
	return 0;
}

static int touch(const char *path)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);

	if (fd < 0)
		return errno == EEXIST ? 0 : -1;
	close(fd);
	return 0;
}

/* Binds the host path src, opened as fd, at dst inside /newroot. */
static void bind_host(const struct plan *pl, int fd, const char *src, const char *dst, bool rw)
{
	char from[64], to[PATH_MAX + 16];
	struct stat st;

	snprintf(from, sizeof(from), "/oldroot/proc/self/fd/%d", fd);
	snprintf(to, sizeof(to), "/newroot%s", dst);
	if (stat(from, &st) < 0)
		child_fail(pl, "could not bind \"%s\" at \"%s\": cannot stat source", src, dst);
	if (S_ISDIR(st.st_mode)) {
		if (mkdirs(to, 0755) < 0)
			child_fail(pl, "could not create mount point \"%s\"", dst);
	} else {
		char *slash = strrchr(to, '/');

		*slash = '\0';
		if (mkdirs(to, 0755) < 0)
			child_fail(pl, "could not create mount point \"%s\"", dst);
		*slash = '/';
		if (touch(to) < 0)
			child_fail(pl, "could not create mount point \"%s\"", dst);
	}
	if (mount(from, to, NULL, MS_BIND | MS_REC, NULL) < 0)
		child_fail(pl, "could not bind \"%s\" at \"%s\"", src, dst);
	if (mount_attr(to, true, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | (rw ? 0 : MOUNT_ATTR_RDONLY)) < 0)
		child_fail(pl, "could not set mount flags on \"%s\"", dst);
}

static bool name_in(const char *name, const char *const *list)
{
	for (; *list; list++)
		if (strcmp(name, *list) == 0)
			return true;
	return false;
}

/* The root: a tmpfs holding read-only binds of the top-level entries of
 * the host root (or rootfs), minus what a step must never see. */
static void setup_root(const struct plan *pl)
{
	static const char *const special[] = { "proc", "sys", "dev", "tmp", "run", "workspace", "cairn", NULL };
	static const char *const hidden[] = { "home", "root", "mnt", "media", "srv", "boot", "lost+found",
					      "var", "snap", NULL };
	char src[2 * PATH_MAX], to[2 * PATH_MAX], link[PATH_MAX];
	struct dirent *de;
	DIR *d;

	if (mount("tmpfs", "/newroot", "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=1m,nr_inodes=4096") < 0)
		child_fail(pl, "could not mount the root tmpfs");
	snprintf(src, sizeof(src), "/oldroot/proc/self/fd/%d", pl->fd_root);
	d = opendir(src);
	if (!d)
		child_fail(pl, "could not read root directory \"%s\"", pl->rootfs[0] ? pl->rootfs : "/");
	while ((de = readdir(d))) {
		struct stat st;
		ssize_t n;

		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		snprintf(src, sizeof(src), "/oldroot/proc/self/fd/%d/%s", pl->fd_root, de->d_name);
		snprintf(to, sizeof(to), "/newroot/%s", de->d_name);
		if (lstat(src, &st) < 0)
			continue;
		if (name_in(de->d_name, special))
			continue;
		if (S_ISLNK(st.st_mode)) {
			n = readlink(src, link, sizeof(link) - 1);
			if (n < 0)
				continue;
			link[n] = '\0';
			if (symlink(link, to) < 0)
				child_fail(pl, "could not copy symlink \"/%s\"", de->d_name);
		} else if (S_ISDIR(st.st_mode)) {
			if (mkdir(to, 0755) < 0)
				child_fail(pl, "could not create \"/%s\"", de->d_name);
			if (name_in(de->d_name, hidden))
				continue;
			if (mount(src, to, NULL, MS_BIND | MS_REC, NULL) < 0)
				child_fail(pl, "could not bind \"/%s\"", de->d_name);
			if (mount_attr(to, true, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV) < 0)
				child_fail(pl, "could not make \"/%s\" read-only", de->d_name);
		} else if (S_ISREG(st.st_mode)) {
			if (touch(to) < 0 || mount(src, to, NULL, MS_BIND, NULL) < 0 ||
			    mount_attr(to, false, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV) < 0)
				child_fail(pl, "could not bind \"/%s\"", de->d_name);
		}
	}
	closedir(d);
	for (const char *const *s = special; *s; s++) {
		snprintf(to, sizeof(to), "/newroot/%s", *s);
		if (mkdir(to, 0755) < 0 && errno != EEXIST)
			child_fail(pl, "could not create \"/%s\"", *s);
	}
	/* /var: empty but for the usual links. */
	if ((mkdir("/newroot/var", 0755) < 0 && errno != EEXIST) ||
	    symlink("/tmp", "/newroot/var/tmp") < 0 || symlink("/run", "/newroot/var/run") < 0)
		child_fail(pl, "could not populate \"/var\"");
}

static void setup_dev(const struct plan *pl)
{
	static const char *const nodes[] = { "null", "zero", "full", "random", "urandom", NULL };
	static const char *const links[][2] = {
		{ "/proc/self/fd", "/newroot/dev/fd" }, { "/proc/self/fd/0", "/newroot/dev/stdin" },
		{ "/proc/self/fd/1", "/newroot/dev/stdout" }, { "/proc/self/fd/2", "/newroot/dev/stderr" },
	};
	char from[64], to[64], opts[64];

	if (mount("tmpfs", "/newroot/dev", "tmpfs", MS_NOSUID | MS_NOEXEC, "mode=0755,size=64k,nr_inodes=64") < 0)
		child_fail(pl, "could not mount /dev");
	for (const char *const *n = nodes; *n; n++) {
		snprintf(from, sizeof(from), "/oldroot/dev/%s", *n);
		snprintf(to, sizeof(to), "/newroot/dev/%s", *n);
		if (touch(to) < 0 || mount(from, to, NULL, MS_BIND, NULL) < 0)
			child_fail(pl, "could not bind /dev/%s", *n);
		if (mount_attr(to, false, MOUNT_ATTR_NOSUID) < 0)
			child_fail(pl, "could not set flags on /dev/%s", *n);
	}
	for (size_t i = 0; i < sizeof(links) / sizeof(links[0]); i++)
		if (symlink(links[i][0], links[i][1]) < 0)
			child_fail(pl, "could not create \"%s\"", links[i][1] + 8);
	if (mkdir("/newroot/dev/shm", 01777) < 0 || mkdir("/newroot/dev/pts", 0755) < 0)
		child_fail(pl, "could not create /dev/shm");
	snprintf(opts, sizeof(opts), "mode=1777,size=%lld", (long long)pl->lim.tmp_size);
	if (mount("tmpfs", "/newroot/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, opts) < 0)
		child_fail(pl, "could not mount /dev/shm");
	if (mount_attr("/newroot/dev", false, MOUNT_ATTR_RDONLY) < 0)
		child_fail(pl, "could not make /dev read-only");
}

static void setup_mounts(const struct plan *pl)
{
	char opts[96];

	if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
		child_fail(pl, "could not make mounts private");
	/* A scratch root; the host's root moves to /oldroot beneath it. */
	if (mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=64k") < 0)
		child_fail(pl, "could not mount the scratch tmpfs");
	if (mkdir("/tmp/newroot", 0755) < 0 || mkdir("/tmp/oldroot", 0755) < 0)
		child_fail(pl, "could not create scratch directories");
	if (chdir("/tmp") < 0 || syscall(SYS_pivot_root, ".", "oldroot") < 0 || chdir("/") < 0)
		child_fail(pl, "could not pivot into the scratch root");

	setup_root(pl);
	if (mount("proc", "/newroot/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, "hidepid=invisible") < 0)
		child_fail(pl, "could not mount /proc");
	setup_dev(pl);
	snprintf(opts, sizeof(opts), "mode=1777,size=%lld,nr_inodes=262144", (long long)pl->lim.tmp_size);
	if (mount("tmpfs", "/newroot/tmp", "tmpfs", MS_NOSUID | MS_NODEV, opts) < 0)
		child_fail(pl, "could not mount /tmp");

	bind_host(pl, pl->fd_ws, pl->ws, "/workspace", true);
	if (pl->in[0])
		bind_host(pl, pl->fd_in, pl->in, "/cairn/in", false);
	if (pl->out[0])
		bind_host(pl, pl->fd_out, pl->out, "/cairn/out", true);
	if (pl->secrets[0])
		bind_host(pl, pl->fd_secrets, pl->secrets, "/cairn/secrets", false);
	if (pl->ctl[0])
		bind_host(pl, pl->fd_ctl, pl->ctl, "/cairn/ctl", true);
	for (size_t i = 0; i < pl->nmounts; i++)
		bind_host(pl, pl->fd_m[i], pl->msrc[i], pl->mounts[i].dst, pl->mounts[i].rw);

	if (mount_attr("/newroot", false, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV) < 0)
		child_fail(pl, "could not make the root read-only");
	/* Switch to the new root and drop every trace of the old one. */
	if (chdir("/newroot") < 0 || syscall(SYS_pivot_root, ".", ".") < 0)
		child_fail(pl, "could not pivot into the new root");
	if (umount2(".", MNT_DETACH) < 0)
		child_fail(pl, "could not detach the old root");
	if (chdir("/workspace") < 0)
		child_fail(pl, "could not enter /workspace");
}

static void setup_network(const struct plan *pl)
{
	struct ifreq ifr;
	int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);

	if (s < 0)
		child_fail(pl, "could not create a socket to bring up loopback");
	memset(&ifr, 0, sizeof(ifr));
	snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "lo");
	if (ioctl(s, SIOCGIFFLAGS, &ifr) < 0)
		child_fail(pl, "could not read loopback flags");
	ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
	if (ioctl(s, SIOCSIFFLAGS, &ifr) < 0)
		child_fail(pl, "could not bring up loopback");
	close(s);
}

static void setup_limits(const struct plan *pl)
{
	struct rlimit core = { 0, 0 };
	struct rlimit nofile = { pl->lim.open_files, pl->lim.open_files };
	struct rlimit fsize = { pl->lim.file_size, pl->lim.file_size };

	if (setrlimit(RLIMIT_CORE, &core) < 0 || setrlimit(RLIMIT_NOFILE, &nofile) < 0 ||
	    setrlimit(RLIMIT_FSIZE, &fsize) < 0)
		child_fail(pl, "could not set resource limits");
	if (pl->lim.cpu_time_ms > 0) {
		rlim_t s = (rlim_t)((pl->lim.cpu_time_ms + 999) / 1000);
		struct rlimit cpu = { s, s + 1 };

		if (setrlimit(RLIMIT_CPU, &cpu) < 0)
			child_fail(pl, "could not set the CPU time limit");
	}
}

static void drop_privileges(const struct plan *pl)
{
	struct __user_cap_header_struct hdr = { _LINUX_CAPABILITY_VERSION_3, 0 };
	struct __user_cap_data_struct data[2];
	int last = CAP_LAST_CAP;
	char buf[16];
	int fd = open("/proc/sys/kernel/cap_last_cap", O_RDONLY | O_CLOEXEC);

	if (fd >= 0) {
		ssize_t n = read(fd, buf, sizeof(buf) - 1);

		if (n > 0) {
			buf[n] = '\0';
			last = atoi(buf);
		}
		close(fd);
	}
	if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0)
		child_fail(pl, "could not clear ambient capabilities");
	for (int c = 0; c <= last; c++)
		if (prctl(PR_CAPBSET_DROP, c, 0, 0, 0) < 0 && errno != EINVAL)
			child_fail(pl, "could not drop capability %d from the bounding set", c);
	memset(data, 0, sizeof(data));
	if (syscall(SYS_capset, &hdr, data) < 0)
		child_fail(pl, "could not drop capabilities");
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		child_fail(pl, "could not set no_new_privs");
	if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0)
		child_fail(pl, "could not make init non-dumpable");
}

/* Resolves argv[0] with the PATH of envp and executes it; returns errno. */
static int exec_step(const struct plan *pl)
{
	const char *path = "/usr/local/bin:/usr/bin:/bin", *cmd = pl->o->argv[0];
	char full[PATH_MAX];
	int err = ENOENT;

	if (strchr(cmd, '/')) {
		execve(cmd, pl->o->argv, pl->envp);
		return errno;
	}
	for (char *const *e = pl->envp; e && *e; e++)
		if (strncmp(*e, "PATH=", 5) == 0)
			path = *e + 5;
	while (*path) {
		const char *end = strchrnul(path, ':');
		size_t dlen = (size_t)(end - path);

		if (dlen && dlen + strlen(cmd) + 2 < sizeof(full)) {
			memcpy(full, path, dlen);
			full[dlen] = '/';
			strcpy(full + dlen + 1, cmd);
			execve(full, pl->o->argv, pl->envp);
			if (errno != ENOENT && errno != ENOTDIR)
				err = errno;
		}
		path = *end ? end + 1 : end;
	}
	return err;
}

/* The step: pid 2, its own session, stdio on the caller's pipes. */
__attribute__((noreturn))
static void run_step(const struct plan *pl, int exec_wr, const sigset_t *oldmask)
{
	int e;

	for (int s = 1; s < NSIG; s++)
		signal(s, SIG_DFL);
	sigprocmask(SIG_SETMASK, oldmask, NULL);
	if (setsid() < 0)
		e = errno;
	else if (syscall(SYS_close_range, 3, ~0U, CLOSE_RANGE_CLOEXEC) < 0)
		e = errno;
	else
		e = exec_step(pl);
	while (write(exec_wr, &e, sizeof(e)) < 0 && errno == EINTR)
		;
	_exit(127);
}

static const char *refusal_detail(const struct seccomp_notif *req, char *buf, size_t len)
{
	buf[0] = '\0';
	if (req->data.nr == SYS_socket)
		snprintf(buf, len, " (family %llu, type %llu)", (unsigned long long)req->data.args[0],
			 (unsigned long long)(req->data.args[1] & 0xf));
	else if (req->data.nr == SYS_clone)
		snprintf(buf, len, " (namespace flags 0x%llx)", (unsigned long long)req->data.args[0]);
	else if (req->data.nr == SYS_ioctl)
		snprintf(buf, len, " (request 0x%llx)", (unsigned long long)(req->data.args[1] & 0xffffffff));
	else if (req->data.nr == SYS_personality)
		snprintf(buf, len, " (0x%llx)", (unsigned long long)req->data.args[0]);
	return buf;
}

/* Hands a connection to the forwarder's socket over to the proxy. */
static void pass_connection(const struct plan *pl, int lfd)
{
	char cbuf[CMSG_SPACE(sizeof(int))], b = 'c';
	struct iovec iov = { &b, 1 };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof(cbuf) };
	struct cmsghdr *cm;
	int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);

	if (fd < 0)
		return;
	memset(cbuf, 0, sizeof(cbuf));
	cm = CMSG_FIRSTHDR(&mh);
	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(cm), &fd, sizeof(int));
	(void)sendmsg(pl->proxy_fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
	close(fd);
}

/* Init's loop: answers refused calls (logging them to the step's stderr),
 * forwards signals to the step, hands connections to the proxy, reaps
 * everything, and when the step ends kills what is left and reports. */
__attribute__((noreturn))
static void init_loop(const struct plan *pl, int listener, int sfd, int lfd, pid_t step, int exec_errno)
{
	struct report rep = { .tag = 'X', .exec_errno = exec_errno };
	union { struct seccomp_notif n; char b[1024]; } req;
	union { struct seccomp_notif_resp r; char b[1024]; } resp;
	unsigned logged = 0;
	bool killed = false;

	for (;;) {
		struct pollfd pfd[3] = { { sfd, POLLIN, 0 }, { listener, POLLIN, 0 }, { lfd, POLLIN, 0 } };

		if (poll(pfd, 3, -1) < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		if (pfd[1].revents & POLLIN) {
			memset(&req, 0, pl->notif_size);
			if (ioctl(listener, SECCOMP_IOCTL_NOTIF_RECV, &req) == 0) {
				const struct sandbox_rule *r = sandbox_policy_find(&pl->pol, req.n.data.nr);
				char msg[256], detail[96];
				const char *name = r ? r->name : "unknown";
				int act = r ? (int)r->action : SANDBOX_ACT_EPERM;

				memset(&resp, 0, pl->resp_size);
				resp.r.id = req.n.id;
				resp.r.error = act == SANDBOX_ACT_ENOSYS ? -ENOSYS : -EPERM;
				(void)ioctl(listener, SECCOMP_IOCTL_NOTIF_SEND, &resp);
				if (!rep.refused[0])
					snprintf(rep.refused, sizeof(rep.refused), "%s", name);
				if (act == SANDBOX_ACT_KILL && !killed) {
					killed = true;
					snprintf(rep.text, sizeof(rep.text), "%s", name);
					snprintf(msg, sizeof(msg), "cairn-sandbox: killed by seccomp policy: %s%s\n",
						 name, refusal_detail(&req.n, detail, sizeof(detail)));
					(void)!write(2, msg, strlen(msg));
					kill(-1, SIGKILL);
				} else if (logged < MAX_REFUSAL_LOGS) {
					snprintf(msg, sizeof(msg), "cairn-sandbox: refused by policy: %s%s (pid %u)\n",
						 name, refusal_detail(&req.n, detail, sizeof(detail)), req.n.pid);
					(void)!write(2, msg, strlen(msg));
					if (++logged == MAX_REFUSAL_LOGS) {
						static const char more[] = "cairn-sandbox: further refusals are not logged\n";
						(void)!write(2, more, sizeof(more) - 1);
					}
				}
			}
		}
		if (pfd[2].revents & POLLIN)
			pass_connection(pl, lfd);
		if (pfd[0].revents & POLLIN) {
			struct signalfd_siginfo si;

			if (read(sfd, &si, sizeof(si)) == sizeof(si) && si.ssi_signo != SIGCHLD) {
				if (kill(-step, (int)si.ssi_signo) < 0)
					kill(step, (int)si.ssi_signo);
			}
			for (;;) {
				int st;
				pid_t w = waitpid(-1, &st, WNOHANG);

				if (w <= 0)
					break;
				if (w == step) {
					rep.status = st;
					kill(-1, SIGKILL);
					child_report(pl->status_wr, &rep);
					_exit(0);
				}
			}
		}
	}
	_exit(126);
}

static void apply_seccomp(const struct plan *pl, int *listener)
{
	struct sock_fprog prog = { .len = (unsigned short)pl->pol.bpf_len, .filter = pl->pol.bpf };
	long fd = syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_NEW_LISTENER, &prog);

	if (fd < 0)
		child_fail(pl, "could not load the seccomp filter");
	*listener = (int)fd;
}

/* Moves the caller's fds to 0..4 and closes everything else. */
static void setup_fds(struct plan *pl)
{
	int fds[4] = { pl->o->stdout_fd, pl->o->stderr_fd, pl->sync_rd, pl->status_wr };
	int hi[4];

	if (pl->proxy_fd >= 0) {
		pl->proxy_fd = fcntl(pl->proxy_fd, F_DUPFD_CLOEXEC, 100);
		if (pl->proxy_fd < 0)
			child_fail(pl, "could not duplicate the proxy fd");
	}
	for (int i = 0; i < 4; i++) {
		hi[i] = fcntl(fds[i], F_DUPFD_CLOEXEC, 100);
		if (hi[i] < 0)
			child_fail(pl, "could not duplicate fd %d", fds[i]);
	}
	pl->status_wr = hi[3];
	if (dup3(hi[3], 4, O_CLOEXEC) < 0 || dup3(hi[2], 3, O_CLOEXEC) < 0 ||
	    dup2(hi[0], 1) < 0 || dup2(hi[1], 2) < 0)
		child_fail(pl, "could not set up fds");
	pl->status_wr = 4;
	pl->sync_rd = 3;
	if (pl->proxy_fd >= 0) {
		if (dup3(pl->proxy_fd, 5, O_CLOEXEC) < 0)
			child_fail(pl, "could not set up the proxy fd");
		pl->proxy_fd = 5;
	}
	int nul = open("/dev/null", O_RDONLY);
	if (nul < 0 || dup2(nul, 0) < 0)
		child_fail(pl, "could not open /dev/null");
	if (syscall(SYS_close_range, FIRST_FREE_FD, ~0U, 0) < 0)
		child_fail(pl, "could not close inherited fds");
}

/* The forwarder's socket: 127.0.0.1:SANDBOX_PROXY_PORT inside. */
static int proxy_listen(const struct plan *pl)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(SANDBOX_PROXY_PORT),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	int one = 1, fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
	    bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(fd, 64) < 0)
		child_fail(pl, "could not listen on 127.0.0.1:%d for the egress proxy", SANDBOX_PROXY_PORT);
	return fd;
}

static int open_source(const struct plan *pl, const char *path)
{
	int fd;

	if (!path[0])
		return -1;
	fd = open(path, O_PATH | O_CLOEXEC);
	if (fd < 0)
		child_fail(pl, "could not open \"%s\"", path);
	return fd;
}

static void open_sources(struct plan *pl)
{
	pl->fd_root = open_source(pl, pl->rootfs[0] ? pl->rootfs : "/");
	pl->fd_ws = open_source(pl, pl->ws);
	pl->fd_in = open_source(pl, pl->in);
	pl->fd_out = open_source(pl, pl->out);
	pl->fd_secrets = open_source(pl, pl->secrets);
	pl->fd_ctl = open_source(pl, pl->ctl);
	for (size_t i = 0; i < pl->nmounts; i++)
		pl->fd_m[i] = open_source(pl, pl->msrc[i]);
}

__attribute__((noreturn))
static void child_main(struct plan *pl)
{
	sigset_t mask, old;
	int listener = -1, sfd, exec_pipe[2], e = 0, exec_errno = 0, lfd = -1;
	pid_t step;
	char c;
	ssize_t n;
	struct report ready = { .tag = 'R' };

	prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
	for (int s = 1; s < NSIG; s++)
		if (s != SIGKILL && s != SIGSTOP)
			signal(s, SIG_DFL);
	setup_fds(pl);
	/* Wait for the id maps and the cgroup; EOF means the caller gave up. */
	do
		n = read(pl->sync_rd, &c, 1);
	while (n < 0 && errno == EINTR);
	if (n != 1)
		_exit(125);

	open_sources(pl);
	if (pl->cg && sandbox_cgroup_join_self(pl->cg) < 0)
		child_fail(pl, "could not join the sandbox's cgroup");
	if (pl->root_mode && setgroups(0, NULL) < 0)
		child_fail(pl, "could not drop supplementary groups");
	prctl(PR_SET_KEEPCAPS, 1, 0, 0, 0);
	if (setresgid(SANDBOX_GID, SANDBOX_GID, SANDBOX_GID) < 0 || setresuid(SANDBOX_UID, SANDBOX_UID, SANDBOX_UID) < 0)
		child_fail(pl, "could not switch to the sandbox user");
	/* Changing ids clears the parent-death signal: set it again, then
	 * make sure the caller did not die in between (it holds the other
	 * end of sync until the handshake is over). */
	if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) < 0)
		child_fail(pl, "could not set the parent-death signal");
	{
		struct pollfd pfd = { pl->sync_rd, POLLRDHUP, 0 };

		if (poll(&pfd, 1, 0) != 0)
			_exit(125);
	}
	if (sethostname("cairn", 5) < 0)
		child_fail(pl, "could not set hostname");
	setup_network(pl);
	setup_mounts(pl);
	/* The sources are mounted: no handle on the host stays open. */
	if (syscall(SYS_close_range, FIRST_FREE_FD, ~0U, 0) < 0)
		child_fail(pl, "could not close source fds");
	close(pl->sync_rd);
	if (unshare(CLONE_NEWCGROUP) < 0)
		child_fail(pl, "could not create cgroup namespace");
	if (pl->proxy_fd >= 0)
		lfd = proxy_listen(pl);
	setup_limits(pl);
	drop_privileges(pl);
	apply_seccomp(pl, &listener);

	sigemptyset(&mask);
	for (int s = 1; s < SIGRTMIN; s++)
		if (s != SIGKILL && s != SIGSTOP && s != SIGSEGV && s != SIGBUS && s != SIGFPE && s != SIGILL &&
		    s != SIGSYS && s != SIGTRAP && s != SIGPIPE)
			sigaddset(&mask, s);
	/* A caller that stopped reading must not kill init: writes fail instead. */
	signal(SIGPIPE, SIG_IGN);
	if (sigprocmask(SIG_BLOCK, &mask, &old) < 0)
		child_fail(pl, "could not block signals");
	sfd = signalfd(-1, &mask, SFD_CLOEXEC);
	if (sfd < 0)
		child_fail(pl, "could not create signalfd");
	if (pipe2(exec_pipe, O_CLOEXEC) < 0)
		child_fail(pl, "could not create exec pipe");
	step = fork();
	if (step < 0)
		child_fail(pl, "could not start the command");
	if (step == 0) {
		close(exec_pipe[0]);
		close(listener);
		close(sfd);
		close(pl->status_wr);
		if (lfd >= 0)
			close(lfd);
		if (pl->proxy_fd >= 0)
			close(pl->proxy_fd);
		run_step(pl, exec_pipe[1], &old);
	}
	close(exec_pipe[1]);
	do
		n = read(exec_pipe[0], &e, sizeof(e));
	while (n < 0 && errno == EINTR);
	close(exec_pipe[0]);
	close(1);
	if (n == sizeof(e)) {
		char msg[PATH_MAX + 128];

		snprintf(msg, sizeof(msg), "cairn-sandbox: could not execute \"%s\": %s\n", pl->o->argv[0], strerror(e));
		(void)!write(2, msg, strlen(msg));
		exec_errno = e;
	}
	child_report(pl->status_wr, &ready);
	init_loop(pl, listener, sfd, lfd, step, exec_errno);
}

/* --- the caller's side ------------------------------------------------- */

static int write_file(pid_t pid, const char *file, const char *data)
{
	char path[64];
	int fd, ret = -1;

	snprintf(path, sizeof(path), "/proc/%ld/%s", (long)pid, file);
	fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	if (write(fd, data, strlen(data)) == (ssize_t)strlen(data))
		ret = 0;
	close(fd);
	return ret;
}

static uid_t chown_uid;
static gid_t chown_gid;

static int chown_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)flag;
	(void)ftw;
	if ((st->st_uid != chown_uid || st->st_gid != chown_gid) && lchown(path, chown_uid, chown_gid) < 0)
		return -1;
	return 0;
}

/* Gives the sandbox user the tree at path (root mode only). */
static int chown_tree(const char *path, uid_t uid, gid_t gid, char *err, size_t errlen)
{
	chown_uid = uid;
	chown_gid = gid;
	if (nftw(path, chown_one, 32, FTW_PHYS | FTW_MOUNT) != 0) {
		snprintf(err, errlen, "could not hand \"%s\" to the sandbox user: %s", path, strerror(errno));
		return -1;
	}
	return 0;
}

static int resolve(const char *what, const char *path, bool need_dir, char *out, char *err, size_t errlen)
{
	struct stat st;

	out[0] = '\0';
	if (!path)
		return 0;
	if (!realpath(path, out) || stat(out, &st) < 0) {
		snprintf(err, errlen, "could not use %s \"%s\": %s", what, path, strerror(errno));
		out[0] = '\0';
		return -1;
	}
	if (need_dir && !S_ISDIR(st.st_mode)) {
		snprintf(err, errlen, "could not use %s \"%s\": not a directory", what, path);
		return -1;
	}
	if (strcmp(out, "/") == 0 && need_dir && strcmp(what, "root") == 0)
		out[0] = '\0';
	return 0;
}

static bool bad_dst(const char *dst)
{
	static const char *const reserved[] = { "/", "/proc", "/dev", "/workspace", "/cairn", NULL };

	if (!dst || dst[0] != '/' || strstr(dst, "/..") || strstr(dst, "/./") || strlen(dst) >= PATH_MAX - 16)
		return true;
	for (const char *const *r = reserved; *r; r++) {
		size_t n = strlen(*r);

		if (strcmp(dst, *r) == 0 || (n > 1 && strncmp(dst, *r, n) == 0 && dst[n] == '/'))
			return true;
	}
	return false;
}

/* The step's environment; with an allow-list, the proxy variables too. */
static int prepare_env(struct plan *pl, const struct sandbox_opts *o, char *err, size_t errlen)
{
	static char *const proxy_env[] = {
		"HTTP_PROXY=http://127.0.0.1:" CAIRN_STR(SANDBOX_PROXY_PORT),
		"HTTPS_PROXY=http://127.0.0.1:" CAIRN_STR(SANDBOX_PROXY_PORT),
		"http_proxy=http://127.0.0.1:" CAIRN_STR(SANDBOX_PROXY_PORT),
		"https_proxy=http://127.0.0.1:" CAIRN_STR(SANDBOX_PROXY_PORT),
	};
	size_t n = 0, k = 0;

	while (o->envp && o->envp[n])
		n++;
	pl->envp = calloc(n + 5, sizeof(*pl->envp));
	if (!pl->envp) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	for (size_t i = 0; i < n; i++) {
		if (pl->lim.egress && (strncasecmp(o->envp[i], "http_proxy=", 11) == 0 ||
				       strncasecmp(o->envp[i], "https_proxy=", 12) == 0))
			continue;
		pl->envp[k++] = o->envp[i];
	}
	if (pl->lim.egress) {
		for (size_t i = 0; i < 4; i++)
			pl->envp[k++] = proxy_env[i];
		pl->proxy_fd = sandbox_proxy_child_fd(o->proxy);
		if (pl->proxy_fd < 0) {
			snprintf(err, errlen, "the egress proxy was already given to another sandbox");
			return -1;
		}
	}
	return 0;
}

/* The caller's mounts plus the profile's "mounts" ([{src, dst, rw}]). */
static int collect_mounts(struct plan *pl, const struct sandbox_opts *o, char *err, size_t errlen)
{
	const json_t *pm = o->profile ? json_object_get(o->profile, "mounts") : NULL;
	size_t n = o->nmounts + (json_is_array(pm) ? json_array_size(pm) : 0), i;
	json_t *m;

	if (pm && !json_is_array(pm)) {
		snprintf(err, errlen, "sandbox \"mounts\" must be an array");
		return -1;
	}
	if (n > 256) {
		snprintf(err, errlen, "too many mounts (%zu, at most 256)", n);
		return -1;
	}
	if (!n)
		return 0;
	pl->mounts = calloc(n, sizeof(*pl->mounts));
	pl->msrc = calloc(n, sizeof(*pl->msrc));
	pl->fd_m = calloc(n, sizeof(*pl->fd_m));
	if (!pl->mounts || !pl->msrc || !pl->fd_m) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	for (i = 0; i < o->nmounts; i++)
		pl->mounts[pl->nmounts++] = o->mounts[i];
	json_array_foreach(pm, i, m) {
		struct sandbox_mount *sm = &pl->mounts[pl->nmounts++];
		json_t *rw = json_object_get(m, "rw");

		sm->src = json_string_value(json_object_get(m, "src"));
		sm->dst = json_string_value(json_object_get(m, "dst"));
		sm->rw = json_is_true(rw);
		if (!sm->src || !sm->dst || (rw && !json_is_boolean(rw))) {
			snprintf(err, errlen, "sandbox \"mounts\"[%zu] must be {\"src\": path, \"dst\": path, \"rw\": bool}", i);
			return -1;
		}
	}
	return 0;
}

static int plan_prepare(struct plan *pl, const struct sandbox_opts *o, char *err, size_t errlen)
{
	const json_t *sc = o->profile ? json_object_get(o->profile, "seccomp") : NULL;

	memset(pl, 0, sizeof(*pl));
	pl->o = o;
	pl->sync_rd = pl->status_wr = -1;
	pl->root_mode = geteuid() == 0;
	if (!o->argv || !o->argv[0] || !o->argv[0][0]) {
		snprintf(err, errlen, "no command to run");
		return -1;
	}
	if (!o->workspace) {
		snprintf(err, errlen, "no workspace directory given");
		return -1;
	}
	pl->proxy_fd = -1;
	if (sandbox_limits_parse(o->profile, &pl->lim, err, errlen) < 0)
		return -1;
	if (pl->lim.egress && !o->proxy) {
		snprintf(err, errlen, "the sandbox's egress allow-list needs a proxy on the caller's event loop");
		return -1;
	}
	if (prepare_env(pl, o, err, errlen) < 0)
		return -1;
	if (!o->rootfs && o->profile && json_object_get(o->profile, "rootfs") &&
	    !json_is_string(json_object_get(o->profile, "rootfs"))) {
		snprintf(err, errlen, "sandbox \"rootfs\" must be a path");
		return -1;
	}
	if (resolve("root", o->rootfs ? o->rootfs :
		    o->profile && json_object_get(o->profile, "rootfs") ?
		    json_string_value(json_object_get(o->profile, "rootfs")) : "/", true, pl->rootfs, err, errlen) < 0 ||
	    resolve("workspace", o->workspace, true, pl->ws, err, errlen) < 0 ||
	    resolve("input directory", o->in_dir, true, pl->in, err, errlen) < 0 ||
	    resolve("output directory", o->out_dir, true, pl->out, err, errlen) < 0 ||
	    resolve("secrets directory", o->secrets_dir, true, pl->secrets, err, errlen) < 0 ||
	    resolve("control file", o->ctl_path, false, pl->ctl, err, errlen) < 0)
		return -1;
	if (collect_mounts(pl, o, err, errlen) < 0)
		return -1;
	for (size_t i = 0; i < pl->nmounts; i++) {
		if (bad_dst(pl->mounts[i].dst)) {
			snprintf(err, errlen, "bad mount destination \"%s\": must be an absolute path outside "
				 "/proc, /dev, /workspace and /cairn", pl->mounts[i].dst ? pl->mounts[i].dst : "");
			return -1;
		}
		if (resolve("mount source", pl->mounts[i].src, false, pl->msrc[i], err, errlen) < 0)
			return -1;
	}
	if (sandbox_policy_build(&pl->pol, o->policy_path, sc, pl->lim.unix_sockets, err, errlen) < 0)
		return -1;
	{
		struct seccomp_notif_sizes sz;

		if (syscall(SYS_seccomp, SECCOMP_GET_NOTIF_SIZES, 0, &sz) < 0) {
			snprintf(err, errlen, "seccomp user notification is not available: %s (Linux 5.0 or later is needed)",
				 strerror(errno));
			return -1;
		}
		if (sz.seccomp_notif > 1024 || sz.seccomp_notif_resp > 1024) {
			snprintf(err, errlen, "seccomp notification structures are larger than expected");
			return -1;
		}
		pl->notif_size = sz.seccomp_notif;
		pl->resp_size = sz.seccomp_notif_resp;
	}
	if (pl->root_mode) {
		uid_t u = o->host_uid ? o->host_uid : DEFAULT_HOST_ID;
		gid_t g = o->host_gid ? o->host_gid : DEFAULT_HOST_ID;

		if (u == 0 || g == 0) {
			snprintf(err, errlen, "the sandbox user must not map to host root");
			return -1;
		}
		if (chown_tree(pl->ws, u, g, err, errlen) < 0 ||
		    (pl->out[0] && chown_tree(pl->out, u, g, err, errlen) < 0) ||
		    (pl->in[0] && chown_tree(pl->in, u, g, err, errlen) < 0) ||
		    (pl->secrets[0] && chown_tree(pl->secrets, u, g, err, errlen) < 0) ||
		    (pl->ctl[0] && lchown(pl->ctl, u, g) < 0 && (snprintf(err, errlen, "could not hand \"%s\" to the sandbox user: %s", pl->ctl, strerror(errno)), 1)))
			return -1;
	}
	return 0;
}

static void plan_release(struct plan *pl)
{
	sandbox_policy_release(&pl->pol);
	free(pl->msrc);
	free(pl->fd_m);
	free(pl->mounts);
	free(pl->envp);
	pl->envp = NULL;
	pl->mounts = NULL;
	pl->msrc = NULL;
	pl->fd_m = NULL;
}

static int write_maps(pid_t pid, bool root_mode, const struct sandbox_opts *o, char *err, size_t errlen)
{
	char map[64];
	uid_t u = root_mode ? (o->host_uid ? o->host_uid : DEFAULT_HOST_ID) : getuid();
	gid_t g = root_mode ? (o->host_gid ? o->host_gid : DEFAULT_HOST_ID) : getgid();

	if (!root_mode && write_file(pid, "setgroups", "deny") < 0) {
		snprintf(err, errlen, "could not write setgroups of the user namespace: %s", strerror(errno));
		return -1;
	}
	snprintf(map, sizeof(map), "%d %ld 1\n", SANDBOX_UID, (long)u);
	if (write_file(pid, "uid_map", map) < 0) {
		snprintf(err, errlen, "could not write uid_map of the user namespace: %s%s", strerror(errno),
			 errno == EPERM ? " (is an LSM such as AppArmor restricting user namespaces?)" : "");
		return -1;
	}
	snprintf(map, sizeof(map), "%d %ld 1\n", SANDBOX_GID, (long)g);
	if (write_file(pid, "gid_map", map) < 0) {
		snprintf(err, errlen, "could not write gid_map of the user namespace: %s", strerror(errno));
		return -1;
	}
	return 0;
}

static const char *clone_hint(int e)
{
	FILE *f;
	int v = -1;

	if (e == ENOSPC)
		return " (user.max_user_namespaces is exhausted or 0: sysctl -w user.max_user_namespaces=15000)";
	if (e != EPERM)
		return "";
	f = fopen("/proc/sys/kernel/unprivileged_userns_clone", "re");
	if (f) {
		if (fscanf(f, "%d", &v) != 1)
			v = -1;
		fclose(f);
		if (v == 0)
			return " (kernel.unprivileged_userns_clone=0: sysctl -w kernel.unprivileged_userns_clone=1)";
	}
	f = fopen("/proc/sys/kernel/apparmor_restrict_unprivileged_userns", "re");
	if (f) {
		if (fscanf(f, "%d", &v) != 1)
			v = -1;
		fclose(f);
		if (v == 1)
			return " (AppArmor restricts user namespaces: give cairn-worker a profile with \"userns,\" "
			       "or sysctl -w kernel.apparmor_restrict_unprivileged_userns=0)";
	}
	return " (are user namespaces disabled? check user.max_user_namespaces)";
}

/* The child's set-up error, if it reported one, else a generic message. */
static void collect_error(int status_rd, char *err, size_t errlen)
{
	struct report rep;
	struct pollfd pfd = { status_rd, POLLIN, 0 };

	if (poll(&pfd, 1, 1000) == 1 && read(status_rd, &rep, sizeof(rep)) == sizeof(rep) && rep.tag == 'E') {
		rep.text[sizeof(rep.text) - 1] = '\0';
		snprintf(err, errlen, "sandbox set-up failed: %s", rep.text);
		return;
	}
	snprintf(err, errlen, "sandbox set-up failed: init exited without a report");
}

/* Undoes a start whose set-up did not finish: kills and reaps init,
 * closes its fds, removes its cgroup. */
static void spawn_abort(struct sandbox_proc *p)
{
	if (p->pid > 0) {
		int st;

		kill(p->pid, SIGKILL);
		while (waitpid(p->pid, &st, __WALL) < 0 && errno == EINTR)
			;
	}
	p->pid = -1;
	p->reaped = true;
	if (p->pidfd >= 0)
		close(p->pidfd);
	if (p->status_fd >= 0)
		close(p->status_fd);
	if (p->sync_fd >= 0)
		close(p->sync_fd);
	p->pidfd = p->status_fd = p->sync_fd = -1;
	p->pending = false;
	if (p->cg) {
		sandbox_cgroup_free(p->cg);
		p->cg = NULL;
	}
}

int sandbox_spawn_start(const struct sandbox_opts *o, struct sandbox_proc *p, char *err, size_t errlen)
{
	struct plan pl;
	int sync[2] = { -1, -1 }, status[2] = { -1, -1 }, pidfd = -1, ret = -1, cgfd = -1;
	struct clone_args ca;
	pid_t pid = -1;
	char go = '1';

	memset(p, 0, sizeof(*p));
	p->pid = -1;
	p->pidfd = p->status_fd = p->sync_fd = -1;
	if (plan_prepare(&pl, o, err, errlen) < 0)
		goto out;
	p->limits = pl.lim;
	if (sandbox_cgroup_new(&pl.lim, &p->cg, err, errlen) < 0)
		goto out;
	/* sync is a socket pair so that a dead child gives EPIPE, not SIGPIPE. */
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sync) < 0 || pipe2(status, O_CLOEXEC) < 0) {
		snprintf(err, errlen, "could not create pipes: %s", strerror(errno));
		goto out;
	}
	pl.sync_rd = sync[0];
	pl.status_wr = status[1];

	memset(&ca, 0, sizeof(ca));
	ca.flags = CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC |
		   CLONE_NEWUTS | CLONE_PIDFD;
	ca.pidfd = (uint64_t)(uintptr_t)&pidfd;
	ca.exit_signal = SIGCHLD;
	/* cgroup v2: start inside the cgroup, no migration needed. */
	cgfd = sandbox_cgroup_dirfd(p->cg);
	if (cgfd >= 0) {
		ca.flags |= CLONE_INTO_CGROUP;
		ca.cgroup = (uint64_t)cgfd;
	} else {
		pl.cg = p->cg;
	}
	pid = (pid_t)syscall(SYS_clone3, &ca, sizeof(ca));
	if (pid < 0) {
		snprintf(err, errlen, "could not create user namespace: %s%s", strerror(errno), clone_hint(errno));
		goto out;
	}
	if (pid == 0) {
		close(sync[1]);
		close(status[0]);
		child_main(&pl);
	}
	close(sync[0]);
	sync[0] = -1;
	close(status[1]);
	status[1] = -1;
	/* init has its own copy of its end of the proxy pair now */
	if (pl.proxy_fd >= 0)
		sandbox_proxy_spawned(o->proxy);

	if (write_maps(pid, pl.root_mode, o, err, errlen) < 0)
		goto out;
	/* On cgroup v2 the child starts in its cgroup; on v1 it joins it
	 * itself before anything else (see sandbox_cgroup_join_self). */
	if (send(sync[1], &go, 1, MSG_NOSIGNAL) != 1) {
		collect_error(status[0], err, errlen);
		goto out;
	}
	p->pid = pid;
	p->pidfd = pidfd;
	p->status_fd = status[0];
	p->sync_fd = sync[1];
	p->pending = true;
	pid = -1;
	pidfd = -1;
	status[0] = -1;
	sync[1] = -1;
	ret = 0;
out:
	if (pid > 0) {
		int st;

		kill(pid, SIGKILL);
		while (waitpid(pid, &st, __WALL) < 0 && errno == EINTR)
			;
	}
	for (int i = 0; i < 2; i++) {
		if (sync[i] >= 0)
			close(sync[i]);
		if (status[i] >= 0)
			close(status[i]);
	}
	if (pidfd >= 0)
		close(pidfd);
	if (cgfd >= 0)
		close(cgfd);
	plan_release(&pl);
	if (ret < 0 && p->cg) {
		sandbox_cgroup_free(p->cg);
		p->cg = NULL;
	}
	return ret;
}

int sandbox_spawn_finish(struct sandbox_proc *p, bool wait, char *err, size_t errlen)
{
	struct pollfd pfd = { p->status_fd, POLLIN, 0 };
	struct report rep;
	ssize_t n;
	int rc;

	if (!p->pending)
		return 0;
	/* Short handshake: 'R' once the command is about to run. */
	do
		rc = poll(&pfd, 1, wait ? HANDSHAKE_TIMEOUT_MS : 0);
	while (rc < 0 && errno == EINTR);
	if (rc == 0) {
		if (!wait)
			return 1;
		snprintf(err, errlen, "sandbox set-up timed out");
		goto fail;
	}
	do
		n = read(p->status_fd, &rep, sizeof(rep));
	while (n < 0 && errno == EINTR);
	if (n != sizeof(rep)) {
		snprintf(err, errlen, "sandbox set-up failed: init exited without a report");
		goto fail;
	}
	if (rep.tag == 'E') {
		rep.text[sizeof(rep.text) - 1] = '\0';
		snprintf(err, errlen, "sandbox set-up failed: %s", rep.text);
		goto fail;
	}
	if (rep.tag != 'R') {
		snprintf(err, errlen, "sandbox set-up failed: unexpected report");
		goto fail;
	}
	close(p->sync_fd);
	p->sync_fd = -1;
	p->pending = false;
	return 0;
fail:
	spawn_abort(p);
	return -1;
}

void sandbox_spawn_abort(struct sandbox_proc *p)
{
	spawn_abort(p);
}

int sandbox_spawn(const struct sandbox_opts *o, struct sandbox_proc *p, char *err, size_t errlen)
{
	if (sandbox_spawn_start(o, p, err, errlen) < 0)
		return -1;
	return sandbox_spawn_finish(p, true, err, errlen) < 0 ? -1 : 0;
}

static int send_sig(struct sandbox_proc *p, int sig)
{
	if (p->pid <= 0 || p->reaped)
		return 0;
	if (p->pidfd >= 0 && syscall(SYS_pidfd_send_signal, p->pidfd, sig, NULL, 0) == 0)
		return 0;
	if (errno == ESRCH)
		return 0;
	return kill(p->pid, sig);
}

int sandbox_terminate(struct sandbox_proc *p)
{
	return send_sig(p, SIGTERM);
}

int sandbox_kill(struct sandbox_proc *p)
{
	int rc = send_sig(p, SIGKILL);

	if (p->cg)
		sandbox_cgroup_kill(p->cg);
	return rc;
}

int sandbox_reap(struct sandbox_proc *p, int *wait_status)
{
	pid_t w;

	if (p->reaped)
		return 1;
	do
		w = waitpid(p->pid, wait_status, WNOHANG | __WALL);
	while (w < 0 && errno == EINTR);
	if (w < 0)
		return -1;
	if (w == 0)
		return 0;
	p->reaped = true;
	return 1;
}

void sandbox_outcome(struct sandbox_proc *p, int wait_status, struct sandbox_result *r)
{
	struct sandbox_cgroup_stats st = { 0, 0, -1 };
	struct report rep;
	bool have = false;
	int step_status = wait_status;
	ssize_t n;

	memset(r, 0, sizeof(*r));
	r->exit_code = -1;
	if (p->status_fd >= 0) {
		int fl = fcntl(p->status_fd, F_GETFL);

		fcntl(p->status_fd, F_SETFL, fl | O_NONBLOCK);
		while ((n = read(p->status_fd, &rep, sizeof(rep))) == sizeof(rep))
			if (rep.tag == 'X') {
				have = true;
				break;
			}
	}
	if (have) {
		step_status = rep.status;
		rep.refused[sizeof(rep.refused) - 1] = '\0';
		rep.text[sizeof(rep.text) - 1] = '\0';
		snprintf(r->refused, sizeof(r->refused), "%s", rep.refused);
	}
	if (p->cg)
		sandbox_cgroup_stats(p->cg, &st);
	r->memory_peak = st.memory_peak;
	if (WIFSIGNALED(step_status))
		r->signal = WTERMSIG(step_status);

	if (have && rep.text[0]) {
		r->reason = SANDBOX_REASON_SECCOMP;
		snprintf(r->message, sizeof(r->message), "killed by seccomp policy: %s", rep.text);
	} else if (have && WIFEXITED(step_status) && WEXITSTATUS(step_status) == 0 && !p->timed_out && !p->output_capped) {
		r->reason = SANDBOX_REASON_EXIT;
		r->exit_code = 0;
		r->success = true;
		snprintf(r->message, sizeof(r->message), "exited with code 0");
	} else if (r->signal == SIGSYS) {
		r->reason = SANDBOX_REASON_SECCOMP;
		snprintf(r->message, sizeof(r->message), "killed by seccomp policy (SIGSYS: a system call of a foreign architecture)");
	} else if (st.oom_kills > 0) {
		r->reason = SANDBOX_REASON_OOM;
		snprintf(r->message, sizeof(r->message), "killed by the memory limit (%lld bytes)", (long long)p->limits.memory);
	} else if (st.pids_denied > 0) {
		r->reason = SANDBOX_REASON_PIDS;
		snprintf(r->message, sizeof(r->message), "hit the process limit (%lld)%s", (long long)p->limits.pids,
			 p->timed_out ? " and then the timeout" : "");
	} else if (p->output_capped) {
		r->reason = SANDBOX_REASON_OUTPUT_CAP;
		snprintf(r->message, sizeof(r->message), "output exceeded the cap (%lld bytes)", (long long)p->limits.output_max);
	} else if (p->timed_out) {
		r->reason = SANDBOX_REASON_TIMEOUT;
		snprintf(r->message, sizeof(r->message), "timed out");
	} else if (!have) {
		r->reason = SANDBOX_REASON_SIGNAL;
		r->signal = WIFSIGNALED(wait_status) ? WTERMSIG(wait_status) : SIGKILL;
		snprintf(r->message, sizeof(r->message), "sandbox killed (%s)", strsignal(r->signal));
	} else if (WIFSIGNALED(step_status)) {
		r->reason = SANDBOX_REASON_SIGNAL;
		snprintf(r->message, sizeof(r->message), "killed by signal %d (%s)", r->signal, strsignal(r->signal));
	} else {
		r->reason = SANDBOX_REASON_EXIT;
		r->exit_code = WIFEXITED(step_status) ? WEXITSTATUS(step_status) : -1;
		if (r->exit_code == 127 && rep.exec_errno)
			snprintf(r->message, sizeof(r->message), "could not execute the command: %s", strerror(rep.exec_errno));
		else
			snprintf(r->message, sizeof(r->message), "exited with code %d", r->exit_code);
	}
	if (r->refused[0] && strcmp(r->reason, SANDBOX_REASON_SECCOMP) != 0) {
		size_t len = strlen(r->message);

		snprintf(r->message + len, sizeof(r->message) - len, " (refused by policy: %s)", r->refused);
	}
}

void sandbox_release(struct sandbox_proc *p)
{
	if (p->pid > 0 && !p->reaped) {
		int st;

		sandbox_kill(p);
		while (waitpid(p->pid, &st, __WALL) < 0 && errno == EINTR)
			;
		p->reaped = true;
	}
	if (p->cg) {
		sandbox_cgroup_free(p->cg);
		p->cg = NULL;
	}
	if (p->pidfd >= 0)
		close(p->pidfd);
	if (p->status_fd >= 0)
		close(p->status_fd);
	p->pidfd = p->status_fd = -1;
	if (p->pending && p->sync_fd >= 0)
		close(p->sync_fd);
	p->sync_fd = -1;
	p->pending = false;
}

void sandbox_sweep(void)
{
	sandbox_cgroup_sweep();
}

int sandbox_check_host(char *err, size_t errlen)
{
	char tmpl[] = "/tmp/cairn-check.XXXXXX", e2[256];
	char *argv[] = { "true", NULL }, *envp[] = { "PATH=/usr/bin:/bin", NULL };
	struct sandbox_opts o;
	struct sandbox_proc p;
	struct sandbox_result r;
	int nul = -1, ret = -1, st = 0;
	int64_t deadline;

	if (sandbox_cgroup_probe(err, errlen) < 0)
		return -1;
	sandbox_cgroup_sweep();
	if (!mkdtemp(tmpl)) {
		snprintf(err, errlen, "could not create a scratch directory: %s", strerror(errno));
		return -1;
	}
	nul = open("/dev/null", O_WRONLY | O_CLOEXEC);
	memset(&o, 0, sizeof(o));
	o.argv = argv;
	o.envp = envp;
	o.workspace = tmpl;
	o.stdout_fd = o.stderr_fd = nul;
	if (sandbox_spawn(&o, &p, e2, sizeof(e2)) < 0) {
		snprintf(err, errlen, "sandbox self-test failed: %s", e2);
		goto out;
	}
	deadline = mono_ms() + 5000;
	while (sandbox_reap(&p, &st) == 0 && mono_ms() < deadline)
		usleep(1000);
	if (!p.reaped) {
		sandbox_release(&p);
		snprintf(err, errlen, "sandbox self-test did not finish in 5 s");
		goto out;
	}
	sandbox_outcome(&p, st, &r);
	sandbox_release(&p);
	if (!r.success) {
		snprintf(err, errlen, "sandbox self-test failed: %s", r.message);
		goto out;
	}
	ret = 0;
out:
	if (nul >= 0)
		close(nul);
	rmdir(tmpl);
	return ret;
}
