/* sandbox_cgroup: creates, limits, watches and removes one cgroup per
 * sandbox, under the cgroup the calling process lives in. cgroup v2 is
 * used when it has the memory and pids controllers, else cgroup v1. */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include "sandbox_cgroup.h"

#define CG_ROOT "/sys/fs/cgroup"

enum { CG_MEM, CG_PIDS, CG_CPU, CG_N };
static const char *const v1_names[CG_N] = { "memory", "pids", "cpu" };

struct sandbox_cgroup {
	int version;                    /* 1 or 2 */
	char dir[CG_N][PATH_MAX];       /* v1: one per controller; v2: dir[0] only */
	bool have[CG_N];
};

static unsigned long cg_counter;

static int write_str(const char *dir, const char *file, const char *val)
{
	char path[PATH_MAX];
	int fd, ret = -1;
	ssize_t n;

	if (snprintf(path, sizeof(path), "%s/%s", dir, file) >= (int)sizeof(path)) {
		errno = ENAMETOOLONG;
		return -1;
	}
	fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	n = write(fd, val, strlen(val));
	if (n == (ssize_t)strlen(val))
		ret = 0;
	close(fd);
	return ret;
}

static int read_str(const char *dir, const char *file, char *buf, size_t len)
{
	char path[PATH_MAX];
	int fd;
	ssize_t n;

	if (snprintf(path, sizeof(path), "%s/%s", dir, file) >= (int)sizeof(path))
		return -1;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	n = read(fd, buf, len - 1);
	close(fd);
	if (n < 0)
		return -1;
	buf[n] = '\0';
	return 0;
}

/* Value of "key N" in a flat keyed file (memory.events, pids.events ...). */
static int64_t read_key(const char *dir, const char *file, const char *key)
{
	char buf[4096], *p;
	size_t klen = strlen(key);

	if (read_str(dir, file, buf, sizeof(buf)) < 0)
		return -1;
	for (p = buf; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
		if (strncmp(p, key, klen) == 0 && p[klen] == ' ')
			return strtoll(p + klen + 1, NULL, 10);
	}
	return -1;
}

/* The cgroup path of this process in the hierarchy named ctl ("" = v2). */
static int self_cgroup(const char *ctl, char *out, size_t outlen)
{
	char buf[8192], *line, *save = NULL;

	if (read_str("/proc/self", "cgroup", buf, sizeof(buf)) < 0)
		return -1;
	for (line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;

		if (!c2)
			continue;
		*c1 = '\0';
		*c2 = '\0';
		if (*ctl == '\0' && strcmp(line, "0") == 0 && c1[1] == '\0') {
			snprintf(out, outlen, "%s", c2 + 1);
			return 0;
		}
		if (*ctl) {
			char *tok, *s2 = NULL;

			for (tok = strtok_r(c1 + 1, ",", &s2); tok; tok = strtok_r(NULL, ",", &s2))
				if (strcmp(tok, ctl) == 0) {
					snprintf(out, outlen, "%s", c2 + 1);
					return 0;
				}
		}
	}
	return -1;
}

/* The v2 mount point holding the memory and pids controllers, or NULL. */
static const char *v2_root(char *self, size_t selflen)
{
	static const char *const roots[] = { CG_ROOT, CG_ROOT "/unified" };
	char path[PATH_MAX], ctl[512];

	if (self_cgroup("", self, selflen) < 0)
		return NULL;
	for (size_t i = 0; i < 2; i++) {
		snprintf(path, sizeof(path), "%s%s", roots[i], self);
		if (read_str(path, "cgroup.controllers", ctl, sizeof(ctl)) < 0)
			continue;
		if (strstr(ctl, "memory") && strstr(ctl, "pids"))
			return roots[i];
	}
	return NULL;
}

int sandbox_cgroup_probe(char *err, size_t errlen)
{
	char self[PATH_MAX - 64], path[PATH_MAX];

	if (v2_root(self, sizeof(self)))
		return 2;
	for (int c = 0; c < CG_N; c++) {
		if (self_cgroup(v1_names[c], self, sizeof(self)) < 0) {
			snprintf(err, errlen, "no cgroup controller \"%s\": neither cgroup v2 with the memory and pids "
				 "controllers nor a cgroup v1 \"%s\" hierarchy is mounted (mount cgroup2 on "
				 CG_ROOT " and enable the controllers, or mount the v1 hierarchy)",
				 v1_names[c], v1_names[c]);
			return -1;
		}
		snprintf(path, sizeof(path), CG_ROOT "/%s%s", v1_names[c], self);
		if (access(path, W_OK) < 0) {
			snprintf(err, errlen, "cgroup \"%s\" is not writable: %s (run the worker as root or "
				 "delegate that cgroup to its user)", path, strerror(errno));
			return -1;
		}
	}
	return 1;
}

static int make_dir(char *dir, size_t dirlen, const char *base, char *err, size_t errlen)
{
	if (snprintf(dir, dirlen, "%s/cairn-%ld-%lu-%ld", base, (long)getpid(), ++cg_counter,
		     (long)(time(NULL) & 0xffff)) >= (int)dirlen) {
		snprintf(err, errlen, "cgroup path under \"%s\" is too long", base);
		return -1;
	}
	if (mkdir(dir, 0755) < 0) {
		snprintf(err, errlen, "could not create cgroup \"%s\": %s%s", dir, strerror(errno),
			 errno == EACCES || errno == EPERM ? " (run the worker as root, or delegate its cgroup to "
			 "the worker's user)" : "");
		dir[0] = '\0';
		return -1;
	}
	return 0;
}

static int set_limit(const char *dir, const char *file, const char *val, char *err, size_t errlen)
{
	if (write_str(dir, file, val) < 0) {
		snprintf(err, errlen, "could not set cgroup limit %s/%s to %s: %s", dir, file, val, strerror(errno));
		return -1;
	}
	return 0;
}

static int setup_v2(struct sandbox_cgroup *cg, const char *root, const char *self,
		    const struct sandbox_limits *l, char *err, size_t errlen)
{
	char base[PATH_MAX], val[64];

	snprintf(base, sizeof(base), "%s%s", root, self);
	/* Enabling the controllers for children fails while base holds
	 * processes of its own unless it is the root; the worker should
	 * then run in a leaf of a delegated subtree (see docs/sandbox.md). */
	if (write_str(base, "cgroup.subtree_control", "+memory +pids") < 0 && errno != EINVAL) {
		snprintf(err, errlen, "could not enable memory and pids controllers in \"%s\": %s "
			 "(run the worker in a leaf of a delegated cgroup subtree)", base, strerror(errno));
		return -1;
	}
	(void)write_str(base, "cgroup.subtree_control", "+cpu");
	if (make_dir(cg->dir[0], sizeof(cg->dir[0]), base, err, errlen) < 0)
		return -1;
	cg->have[0] = true;
	snprintf(val, sizeof(val), "%lld", (long long)l->memory);
	if (set_limit(cg->dir[0], "memory.max", val, err, errlen) < 0)
		return -1;
	(void)write_str(cg->dir[0], "memory.swap.max", "0");
	(void)write_str(cg->dir[0], "memory.oom.group", "1");
	snprintf(val, sizeof(val), "%lld", (long long)l->pids);
	if (set_limit(cg->dir[0], "pids.max", val, err, errlen) < 0)
		return -1;
	if (l->cpu_millicores > 0) {
		snprintf(val, sizeof(val), "%lld 100000", (long long)l->cpu_millicores * 100);
		if (set_limit(cg->dir[0], "cpu.max", val, err, errlen) < 0)
			return -1;
	}
	return 0;
}

static int setup_v1(struct sandbox_cgroup *cg, const struct sandbox_limits *l, char *err, size_t errlen)
{
	char self[PATH_MAX - 64], base[PATH_MAX], val[64];

	for (int c = 0; c < CG_N; c++) {
		if (self_cgroup(v1_names[c], self, sizeof(self)) < 0) {
			snprintf(err, errlen, "no cgroup v1 \"%s\" hierarchy for this process", v1_names[c]);
			return -1;
		}
		snprintf(base, sizeof(base), CG_ROOT "/%s%s", v1_names[c], strcmp(self, "/") ? self : "");
		if (make_dir(cg->dir[c], sizeof(cg->dir[c]), base, err, errlen) < 0)
			return -1;
		cg->have[c] = true;
	}
	snprintf(val, sizeof(val), "%lld", (long long)l->memory);
	if (set_limit(cg->dir[CG_MEM], "memory.limit_in_bytes", val, err, errlen) < 0)
		return -1;
	/* memsw exists only with swap accounting; same value = no swap. */
	(void)write_str(cg->dir[CG_MEM], "memory.memsw.limit_in_bytes", val);
	(void)write_str(cg->dir[CG_MEM], "memory.swappiness", "0");
	snprintf(val, sizeof(val), "%lld", (long long)l->pids);
	if (set_limit(cg->dir[CG_PIDS], "pids.max", val, err, errlen) < 0)
		return -1;
	if (l->cpu_millicores > 0) {
		if (set_limit(cg->dir[CG_CPU], "cpu.cfs_period_us", "100000", err, errlen) < 0)
			return -1;
		snprintf(val, sizeof(val), "%lld", (long long)l->cpu_millicores * 100);
		if (set_limit(cg->dir[CG_CPU], "cpu.cfs_quota_us", val, err, errlen) < 0)
			return -1;
	}
	return 0;
}

int sandbox_cgroup_new(const struct sandbox_limits *l, struct sandbox_cgroup **out, char *err, size_t errlen)
{
	struct sandbox_cgroup *cg = calloc(1, sizeof(*cg));
	char self[PATH_MAX - 64];
	const char *root;
	int rc;

	*out = NULL;
	if (!cg) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	root = v2_root(self, sizeof(self));
	if (root) {
		cg->version = 2;
		rc = setup_v2(cg, root, strcmp(self, "/") ? self : "", l, err, errlen);
	} else {
		cg->version = 1;
		rc = setup_v1(cg, l, err, errlen);
	}
	if (rc < 0) {
		sandbox_cgroup_free(cg);
		return -1;
	}
	*out = cg;
	return 0;
}

int sandbox_cgroup_dirfd(struct sandbox_cgroup *cg)
{
	if (cg->version != 2 || !cg->have[0])
		return -1;
	return open(cg->dir[0], O_RDONLY | O_DIRECTORY | O_CLOEXEC);
}

int sandbox_cgroup_join_self(const struct sandbox_cgroup *cg)
{
	char path[PATH_MAX + 8];

	if (cg->version != 1)
		return 0;
	for (int c = 0; c < CG_N; c++) {
		int fd;
		ssize_t n;

		if (!cg->have[c])
			continue;
		if (snprintf(path, sizeof(path), "%s/tasks", cg->dir[c]) >= (int)sizeof(path)) {
			errno = ENAMETOOLONG;
			return -1;
		}
		fd = open(path, O_WRONLY | O_CLOEXEC);
		if (fd < 0)
			return -1;
		n = write(fd, "0", 1);
		close(fd);
		if (n != 1)
			return -1;
	}
	return 0;
}

void sandbox_cgroup_kill(struct sandbox_cgroup *cg)
{
	char buf[8192], *p, *end;
	int c = cg->version == 2 ? 0 : CG_PIDS;

	if (!cg->have[c])
		return;
	if (cg->version == 2 && write_str(cg->dir[0], "cgroup.kill", "1") == 0)
		return;
	/* v1 (or v2 before 5.14): signal each member; the pid namespace dies
	 * with its init anyway, this only covers the window before that. */
	for (int round = 0; round < 3; round++) {
		if (read_str(cg->dir[c], "cgroup.procs", buf, sizeof(buf)) < 0 || !buf[0])
			return;
		for (p = buf; *p; p = end) {
			long pid = strtol(p, &end, 10);

			if (end == p)
				break;
			if (pid > 0)
				kill((pid_t)pid, SIGKILL);
			while (*end == '\n')
				end++;
		}
	}
}

void sandbox_cgroup_stats(struct sandbox_cgroup *cg, struct sandbox_cgroup_stats *st)
{
	char buf[64];

	st->oom_kills = st->pids_denied = 0;
	st->memory_peak = -1;
	if (cg->version == 2 && cg->have[0]) {
		st->oom_kills = read_key(cg->dir[0], "memory.events", "oom_kill");
		st->pids_denied = read_key(cg->dir[0], "pids.events", "max");
		if (read_str(cg->dir[0], "memory.peak", buf, sizeof(buf)) == 0)
			st->memory_peak = strtoll(buf, NULL, 10);
	} else if (cg->version == 1) {
		if (cg->have[CG_MEM]) {
			st->oom_kills = read_key(cg->dir[CG_MEM], "memory.oom_control", "oom_kill");
			if (read_str(cg->dir[CG_MEM], "memory.max_usage_in_bytes", buf, sizeof(buf)) == 0)
				st->memory_peak = strtoll(buf, NULL, 10);
		}
		if (cg->have[CG_PIDS])
			st->pids_denied = read_key(cg->dir[CG_PIDS], "pids.events", "max");
	}
	if (st->oom_kills < 0)
		st->oom_kills = 0;
	if (st->pids_denied < 0)
		st->pids_denied = 0;
}

/* Removes the cgroups of dead creators in base ("cairn-PID-..."). */
static void sweep_dir(const char *base, int version)
{
	struct sandbox_cgroup cg;
	struct dirent *de;
	DIR *d = opendir(base);

	if (!d)
		return;
	while ((de = readdir(d))) {
		long pid;
		char *end;

		if (strncmp(de->d_name, "cairn-", 6) != 0)
			continue;
		pid = strtol(de->d_name + 6, &end, 10);
		if (end == de->d_name + 6 || *end != '-' || pid <= 0 || kill((pid_t)pid, 0) == 0 || errno != ESRCH)
			continue;
		memset(&cg, 0, sizeof(cg));
		cg.version = version;
		if (snprintf(cg.dir[CG_PIDS], sizeof(cg.dir[CG_PIDS]), "%s/%s", base, de->d_name) >= (int)sizeof(cg.dir[0]))
			continue;
		if (version == 2)
			memcpy(cg.dir[0], cg.dir[CG_PIDS], sizeof(cg.dir[0]));
		cg.have[version == 2 ? 0 : CG_PIDS] = true;
		sandbox_cgroup_kill(&cg);
		for (int i = 0; i < 100 && rmdir(cg.dir[version == 2 ? 0 : CG_PIDS]) < 0 && errno == EBUSY; i++)
			usleep(10000);
	}
	closedir(d);
}

void sandbox_cgroup_sweep(void)
{
	char self[PATH_MAX - 64], base[PATH_MAX];
	const char *root = v2_root(self, sizeof(self));

	if (root) {
		snprintf(base, sizeof(base), "%s%s", root, strcmp(self, "/") ? self : "");
		sweep_dir(base, 2);
		return;
	}
	for (int c = 0; c < CG_N; c++) {
		if (self_cgroup(v1_names[c], self, sizeof(self)) < 0)
			continue;
		snprintf(base, sizeof(base), CG_ROOT "/%s%s", v1_names[c], strcmp(self, "/") ? self : "");
		sweep_dir(base, 1);
	}
}

void sandbox_cgroup_free(struct sandbox_cgroup *cg)
{
	if (!cg)
		return;
	for (int c = 0; c < CG_N; c++) {
		if (!cg->have[c] || !cg->dir[c][0])
			continue;
		/* Members may take a moment to leave after SIGKILL. */
		for (int i = 0; i < 200 && rmdir(cg->dir[c]) < 0 && errno == EBUSY; i++) {
			sandbox_cgroup_kill(cg);
			usleep(5000);
		}
	}
	free(cg);
}
