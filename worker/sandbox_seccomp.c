/* sandbox_seccomp: the seccomp policy as data (default deny list, operator
 * file, step additions) compiled to BPF with libseccomp. It only builds the
 * program; loading it and answering refused calls is sandbox.c's job. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/filter.h>
#include <sched.h>
#include <seccomp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "sandbox.h"

/* Refused with EPERM: the surfaces container escapes use. */
static const char *const default_eperm[] = {
	"unshare", "setns", "mount", "umount2", "pivot_root", "chroot",
	"fsopen", "fsconfig", "fsmount", "fspick", "move_mount", "open_tree",
	"mount_setattr", "quotactl", "quotactl_fd", "swapon", "swapoff",
	"bpf", "perf_event_open", "userfaultfd", "keyctl", "add_key",
	"request_key", "lookup_dcookie", "fanotify_init", "open_by_handle_at",
	"name_to_handle_at", "uselib", "ustat", "sysfs", "_sysctl",
	"nfsservctl", "acct", "syslog", "vhangup", "settimeofday",
	"clock_settime", "clock_adjtime", "adjtimex", "sethostname",
	"setdomainname", "ptrace", "process_vm_readv", "process_vm_writev",
	"kcmp", "pidfd_getfd", "process_madvise", "mbind", "set_mempolicy",
	"set_mempolicy_home_node", "migrate_pages", "move_pages",
	"landlock_create_ruleset", NULL,
};

/* Refused with ENOSYS so that user space falls back cleanly. */
static const char *const default_enosys[] = {
	"io_uring_setup", "io_uring_enter", "io_uring_register", NULL,
};

/* No ordinary program makes these: the whole sandbox is killed. */
static const char *const default_kill[] = {
	"kexec_load", "kexec_file_load", "init_module", "finit_module",
	"delete_module", "iopl", "ioperm", "reboot", NULL,
};

/* Calls refused only for some arguments; listed so refusals get a name. */
static const char *const conditional[] = {
	"clone", "socket", "ioctl", "personality", NULL,
};

#define NS_FLAGS_ALL (CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | CLONE_NEWIPC | \
		      CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET | 0x80 /* CLONE_NEWTIME */)

static struct sandbox_rule *policy_lookup(struct sandbox_policy *pol, int nr)
{
	for (size_t i = 0; i < pol->nrules; i++)
		if (pol->rules[i].nr == nr)
			return &pol->rules[i];
	return NULL;
}

const struct sandbox_rule *sandbox_policy_find(const struct sandbox_policy *pol, int nr)
{
	return policy_lookup((struct sandbox_policy *)pol, nr);
}

/* Sets the action for name; strict names must be known system calls. */
static int policy_set(struct sandbox_policy *pol, const char *name, enum sandbox_action act,
		      bool strict, char *err, size_t errlen)
{
	int nr = seccomp_syscall_resolve_name(name);
	struct sandbox_rule *r;

	if (nr == __NR_SCMP_ERROR || nr < 0) {
		if (!strict)
			return 0;
		snprintf(err, errlen, "unknown system call \"%s\" in seccomp policy", name);
		return -1;
	}
	for (const char *const *c = conditional; *c; c++) {
		if (strcmp(*c, name) == 0 && act == SANDBOX_ACT_ALLOW) {
			snprintf(err, errlen, "system call \"%s\" cannot be allowed: its refusal depends on its arguments", name);
			return -1;
		}
	}
	if (strcmp(name, "clone3") == 0 || strcmp(name, "seccomp") == 0 || strcmp(name, "execve") == 0) {
		snprintf(err, errlen, "system call \"%s\" cannot be changed by a policy", name);
		return -1;
	}
	r = policy_lookup(pol, nr);
	if (act == SANDBOX_ACT_ALLOW) {
		if (r)
			*r = pol->rules[--pol->nrules];
		return 0;
	}
	if (!r) {
		if (pol->nrules >= SANDBOX_MAX_RULES) {
			snprintf(err, errlen, "seccomp policy has more than %d rules", SANDBOX_MAX_RULES);
			return -1;
		}
		r = &pol->rules[pol->nrules++];
		r->nr = nr;
		snprintf(r->name, sizeof(r->name), "%s", name);
	}
	/* A later list may only make an existing refusal stricter or change
	 * it when it is the operator's file (strict callers check). */
	r->action = act;
	r->by_args = false;
	return 0;
}

static int policy_set_list(struct sandbox_policy *pol, const char *const *names,
			   enum sandbox_action act, char *err, size_t errlen)
{
	for (; *names; names++)
		if (policy_set(pol, *names, act, false, err, errlen) < 0)
			return -1;
	return 0;
}

/* Applies one JSON object {"deny": [...], "enosys": [...], "kill": [...],
 * "allow": [...]}; allow_ok says whether "allow" may appear (operators). */
static int policy_apply_json(struct sandbox_policy *pol, const json_t *obj, bool allow_ok,
			     const char *what, char *err, size_t errlen)
{
	static const struct {
		const char *key;
		enum sandbox_action act;
	} keys[] = {
		{ "allow", SANDBOX_ACT_ALLOW }, { "deny", SANDBOX_ACT_EPERM },
		{ "enosys", SANDBOX_ACT_ENOSYS }, { "kill", SANDBOX_ACT_KILL },
	};
	const char *key;
	json_t *val;

	if (!json_is_object(obj)) {
		snprintf(err, errlen, "%s: seccomp policy must be an object", what);
		return -1;
	}
	json_object_foreach((json_t *)obj, key, val) {
		size_t k, i;
		json_t *name;

		for (k = 0; k < sizeof(keys) / sizeof(keys[0]); k++)
			if (strcmp(keys[k].key, key) == 0)
				break;
		if (k == sizeof(keys) / sizeof(keys[0]) || (keys[k].act == SANDBOX_ACT_ALLOW && !allow_ok)) {
			snprintf(err, errlen, "%s: unknown seccomp policy key \"%s\"%s", what, key,
				 strcmp(key, "allow") == 0 ? " (a step may only add refusals)" : "");
			return -1;
		}
		if (!json_is_array(val)) {
			snprintf(err, errlen, "%s: seccomp \"%s\" must be an array of system call names", what, key);
			return -1;
		}
		json_array_foreach(val, i, name) {
			const struct sandbox_rule *old;
			int nr;

			if (!json_is_string(name)) {
				snprintf(err, errlen, "%s: seccomp \"%s\"[%zu] must be a string", what, key, i);
				return -1;
			}
			nr = seccomp_syscall_resolve_name(json_string_value(name));
			old = nr >= 0 ? sandbox_policy_find(pol, nr) : NULL;
			/* A step can tighten only: never turn kill into EPERM. */
			if (!allow_ok && old && old->action == SANDBOX_ACT_KILL)
				continue;
			if (policy_set(pol, json_string_value(name), keys[k].act, true, err, errlen) < 0) {
				size_t n = strlen(err);
				snprintf(err + n, errlen - n, " (%s)", what);
				return -1;
			}
		}
	}
	return 0;
}

static int add_rules(scmp_filter_ctx ctx, const struct sandbox_policy *pol, char *err, size_t errlen)
{
	static const int bad_personality[] = {
		0x0040000 /* ADDR_NO_RANDOMIZE */, 0x0100000 /* MMAP_PAGE_ZERO */,
		0x0200000 /* ADDR_COMPAT_LAYOUT */, 0x0400000 /* READ_IMPLIES_EXEC */,
		0x0800000 /* ADDR_LIMIT_32BIT */, 0x8000000 /* ADDR_LIMIT_3GB */,
	};
	int rc = 0;

	for (size_t i = 0; i < pol->nrules; i++) {
		const struct sandbox_rule *r = &pol->rules[i];

		if (r->by_args)
			continue;
		rc = seccomp_rule_add(ctx, SCMP_ACT_NOTIFY, r->nr, 0);
		if (rc < 0) {
			snprintf(err, errlen, "could not add seccomp rule for \"%s\": %s", r->name, strerror(-rc));
			return -1;
		}
	}

	/* clone with any namespace flag: one rule per bit (they are ORed). */
	for (unsigned bit = 1; bit; bit <<= 1) {
		if (!(bit & NS_FLAGS_ALL))
			continue;
		rc = seccomp_rule_add(ctx, SCMP_ACT_NOTIFY, SCMP_SYS(clone), 1,
				      SCMP_A0(SCMP_CMP_MASKED_EQ, bit, bit));
		if (rc < 0)
			goto fail;
	}
	/* clone3 hides its flags behind a pointer: ENOSYS makes libc use clone. */
	rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0);
	if (rc < 0)
		goto fail;

	/* socket: only AF_UNIX (when enabled), AF_INET, AF_INET6, AF_NETLINK;
	 * no raw or packet sockets. Families above AF_NETLINK in one rule. */
	for (int fam = 0; fam <= AF_NETLINK; fam++) {
		if (fam == AF_INET || fam == AF_INET6 || fam == AF_NETLINK || (fam == AF_UNIX && pol->unix_sockets))
			continue;
		/* libc probes AF_UNIX for nscd and syslog on every lookup: refuse
		 * quietly (socketpair stays allowed). */
		rc = seccomp_rule_add(ctx, fam == AF_UNIX ? SCMP_ACT_ERRNO(EPERM) : SCMP_ACT_NOTIFY,
				      SCMP_SYS(socket), 1, SCMP_A0(SCMP_CMP_EQ, fam));
		if (rc < 0)
			goto fail;
	}
	rc = seccomp_rule_add(ctx, SCMP_ACT_NOTIFY, SCMP_SYS(socket), 1, SCMP_A0(SCMP_CMP_GT, AF_NETLINK));
	if (rc < 0)
		goto fail;
	/* Netlink: NETLINK_ROUTE (0) only, enough for `ip addr`. */
	rc = seccomp_rule_add(ctx, SCMP_ACT_NOTIFY, SCMP_SYS(socket), 2, SCMP_A0(SCMP_CMP_EQ, AF_NETLINK),
			      SCMP_A2(SCMP_CMP_NE, 0));
	if (rc < 0)
		goto fail;
	for (int k = 0; k < 2; k++) {
		int fam = k ? AF_INET6 : AF_INET;

		rc = seccomp_rule_add(ctx, SCMP_ACT_NOTIFY, SCMP_SYS(socket), 2, SCMP_A0(SCMP_CMP_EQ, fam),
				      SCMP_A1(SCMP_CMP_MASKED_EQ, 0xf, SOCK_RAW));
		if (rc < 0)
			goto fail;
		rc = seccomp_rule_add(ctx, SCMP_ACT_NOTIFY, SCMP_SYS(socket), 2, SCMP_A0(SCMP_CMP_EQ, fam),
				      SCMP_A1(SCMP_CMP_MASKED_EQ, 0xf, SOCK_PACKET));
		if (rc < 0)
			goto fail;
	}
	/* Terminal injection; compare the low 32 bits only (CVE-2019-10063). */
	rc = seccomp_rule_add(ctx, SCMP_ACT_NOTIFY, SCMP_SYS(ioctl), 1,
			      SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffffff, TIOCSTI));
	if (rc < 0)
		goto fail;
	rc = seccomp_rule_add(ctx, SCMP_ACT_NOTIFY, SCMP_SYS(ioctl), 1,
			      SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffffff, TIOCLINUX));
	if (rc < 0)
		goto fail;
	/* personality flags that weaken the address space; the query value
	 * 0xffffffff has bit 31 set and stays allowed. */
	for (size_t i = 0; i < sizeof(bad_personality) / sizeof(bad_personality[0]); i++) {
		unsigned bit = bad_personality[i];

		rc = seccomp_rule_add(ctx, SCMP_ACT_NOTIFY, SCMP_SYS(personality), 1,
				      SCMP_A0(SCMP_CMP_MASKED_EQ, bit | 0x80000000u, bit));
		if (rc < 0)
			goto fail;
	}
	return 0;
fail:
	snprintf(err, errlen, "could not add an argument rule to the seccomp filter: %s", strerror(-rc));
	return -1;
}

/* Compiles the rules to BPF through a memfd (libseccomp 2.5 exports to an fd). */
static int policy_compile(struct sandbox_policy *pol, char *err, size_t errlen)
{
	scmp_filter_ctx ctx = NULL;
	int fd = -1, rc, ret = -1;
	off_t len;

	ctx = seccomp_init(SCMP_ACT_ALLOW);
	if (!ctx) {
		snprintf(err, errlen, "could not create seccomp filter");
		goto out;
	}
	/* Only the native architecture: i386 int 0x80 and x32 calls die. */
	rc = seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS);
	if (rc == 0)
		rc = seccomp_attr_set(ctx, SCMP_FLTATR_CTL_NNP, 0);
	if (rc < 0) {
		snprintf(err, errlen, "could not set seccomp filter attributes: %s", strerror(-rc));
		goto out;
	}
	if (add_rules(ctx, pol, err, errlen) < 0)
		goto out;
	fd = memfd_create("cairn-seccomp", MFD_CLOEXEC);
	if (fd < 0) {
		snprintf(err, errlen, "could not create memfd for seccomp filter: %s", strerror(errno));
		goto out;
	}
	rc = seccomp_export_bpf(ctx, fd);
	if (rc < 0) {
		snprintf(err, errlen, "could not export seccomp filter: %s", strerror(-rc));
		goto out;
	}
	len = lseek(fd, 0, SEEK_END);
	if (len <= 0 || len % sizeof(struct sock_filter) || len > 65536 * (off_t)sizeof(struct sock_filter)) {
		snprintf(err, errlen, "seccomp filter has a bad size (%lld bytes)", (long long)len);
		goto out;
	}
	pol->bpf = malloc(len);
	if (!pol->bpf || pread(fd, pol->bpf, len, 0) != len) {
		snprintf(err, errlen, "could not read back seccomp filter");
		goto out;
	}
	pol->bpf_len = len / sizeof(struct sock_filter);
	ret = 0;
out:
	if (fd >= 0)
		close(fd);
	if (ctx)
		seccomp_release(ctx);
	return ret;
}

/* Compiling takes a while (~0.5 ms); a process spawning many sandboxes
 * reuses the last policy built without step additions. */
static struct {
	bool valid, unix_sockets;
	char path[4096];
	struct timespec mtime;
	struct sandbox_policy pol;
} cache;

static bool cache_key(const char *path, bool unix_sockets, struct timespec *mtime)
{
	struct stat st;

	memset(mtime, 0, sizeof(*mtime));
	if (path) {
		if (strlen(path) >= sizeof(cache.path) || stat(path, &st) < 0)
			return false;
		*mtime = st.st_mtim;
	}
	(void)unix_sockets;
	return true;
}

static bool cache_get(struct sandbox_policy *pol, const char *path, bool unix_sockets)
{
	struct timespec mt;

	if (!cache.valid || cache.unix_sockets != unix_sockets || strcmp(cache.path, path ? path : "") != 0 ||
	    !cache_key(path, unix_sockets, &mt) || mt.tv_sec != cache.mtime.tv_sec || mt.tv_nsec != cache.mtime.tv_nsec)
		return false;
	*pol = cache.pol;
	pol->bpf = malloc(cache.pol.bpf_len * sizeof(struct sock_filter));
	if (!pol->bpf)
		return false;
	memcpy(pol->bpf, cache.pol.bpf, cache.pol.bpf_len * sizeof(struct sock_filter));
	return true;
}

static void cache_put(const struct sandbox_policy *pol, const char *path, bool unix_sockets)
{
	void *bpf = malloc(pol->bpf_len * sizeof(struct sock_filter));

	if (!bpf || !cache_key(path, unix_sockets, &cache.mtime)) {
		free(bpf);
		return;
	}
	free(cache.pol.bpf);
	cache.pol = *pol;
	cache.pol.bpf = bpf;
	memcpy(bpf, pol->bpf, pol->bpf_len * sizeof(struct sock_filter));
	snprintf(cache.path, sizeof(cache.path), "%s", path ? path : "");
	cache.unix_sockets = unix_sockets;
	cache.valid = true;
}

int sandbox_policy_build(struct sandbox_policy *pol, const char *policy_path,
			 const json_t *step_seccomp, bool unix_sockets, char *err, size_t errlen)
{
	bool plain = !step_seccomp || json_object_size(step_seccomp) == 0;
	json_t *file = NULL;
	int ret = -1;

	if (plain && cache_get(pol, policy_path, unix_sockets))
		return 0;

	memset(pol, 0, sizeof(*pol));
	pol->unix_sockets = unix_sockets;
	if (policy_set_list(pol, default_eperm, SANDBOX_ACT_EPERM, err, errlen) < 0 ||
	    policy_set_list(pol, default_enosys, SANDBOX_ACT_ENOSYS, err, errlen) < 0 ||
	    policy_set_list(pol, default_kill, SANDBOX_ACT_KILL, err, errlen) < 0)
		goto out;
	/* Names for refusals decided by arguments (EPERM). */
	for (const char *const *c = conditional; *c; c++) {
		int nr = seccomp_syscall_resolve_name(*c);

		if (policy_set(pol, *c, SANDBOX_ACT_EPERM, false, err, errlen) < 0)
			goto out;
		if (nr >= 0 && policy_lookup(pol, nr))
			policy_lookup(pol, nr)->by_args = true;
	}
	if (policy_path) {
		json_error_t jerr;

		file = json_load_file(policy_path, JSON_REJECT_DUPLICATES, &jerr);
		if (!file) {
			snprintf(err, errlen, "could not read seccomp policy \"%s\": %s (line %d)",
				 policy_path, jerr.text, jerr.line);
			goto out;
		}
		if (policy_apply_json(pol, file, true, policy_path, err, errlen) < 0)
			goto out;
	}
	if (step_seccomp && policy_apply_json(pol, step_seccomp, false, "step profile", err, errlen) < 0)
		goto out;
	if (policy_compile(pol, err, errlen) < 0)
		goto out;
	if (plain)
		cache_put(pol, policy_path, unix_sockets);
	ret = 0;
out:
	json_decref(file);
	if (ret < 0)
		sandbox_policy_release(pol);
	return ret;
}

void sandbox_policy_release(struct sandbox_policy *pol)
{
	free(pol->bpf);
	pol->bpf = NULL;
	pol->bpf_len = 0;
}
