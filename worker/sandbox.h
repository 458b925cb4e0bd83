/* sandbox: runs one command in fresh user, pid, mount, network, ipc, uts
 * and cgroup namespaces, with a read-only root, no capabilities, rlimits,
 * cgroup limits and a seccomp policy. It never runs anything unsandboxed:
 * any set-up failure fails the spawn with a message naming the phase.
 *
 * The caller owns the event loop: sandbox_spawn forks and waits only for a
 * short handshake; the caller watches the pidfd, reads the output pipes,
 * enforces the wall-clock timeout and the output cap, then asks
 * sandbox_outcome why the sandbox ended. See docs/sandbox.md. */
#ifndef CAIRN_SANDBOX_H
#define CAIRN_SANDBOX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <jansson.h>

#define SANDBOX_WARN_UNUSED __attribute__((warn_unused_result))

/* An extra bind mount; src is a host path, dst an absolute path inside. */
struct sandbox_mount {
	const char *src, *dst;
	bool rw;
};

/* Limits and switches parsed from a step's "sandbox" profile. Sizes are
 * bytes, times milliseconds; 0 means "no limit" where noted. */
struct sandbox_limits {
	int64_t memory;            /* cgroup memory limit (default 1G) */
	int64_t pids;              /* cgroup pids limit (default 512) */
	int64_t cpu_millicores;    /* cgroup CPU quota, 1000 = one core; 0 = none */
	int64_t tmp_size;          /* size of the /tmp tmpfs (default 256M) */
	int64_t cpu_time_ms;       /* RLIMIT_CPU; 0 = none */
	int64_t file_size;         /* RLIMIT_FSIZE (default 1G) */
	int64_t open_files;        /* RLIMIT_NOFILE (default 1024) */
	int64_t output_max;        /* bytes kept per stream (default 1M) */
	bool output_kill;          /* kill the step at the output cap (default) or keep it running */
	int64_t kill_grace_ms;     /* SIGTERM → SIGKILL grace at timeout (default 2s) */
	bool unix_sockets;         /* allow socket(AF_UNIX) (default false) */
	bool egress;               /* "network": {"allow": [...]}: needs a sandbox_proxy */
};

/* Fills l with the defaults, then applies profile (a step's normalized
 * "sandbox" object; NULL or {} = defaults). Unknown keys, bad values and
 * network modes this build cannot enforce are errors. */
int sandbox_limits_parse(const json_t *profile, struct sandbox_limits *l,
			 char *err, size_t errlen) SANDBOX_WARN_UNUSED;

struct sandbox_cgroup;
struct sandbox_proxy;
struct event_base;

/* What to run and how. Everything is borrowed for the duration of
 * sandbox_spawn only, except proxy, which must outlive the sandbox. */
struct sandbox_opts {
	char *const *argv;          /* command; argv[0] resolved with the PATH of envp inside */
	char *const *envp;          /* the complete environment the step gets */
	const char *workspace;      /* host dir bound rw at /workspace (cwd) */
	const char *in_dir;         /* host dir bound ro at /cairn/in, or NULL */
	const char *out_dir;        /* host dir bound rw at /cairn/out, or NULL */
	const char *secrets_dir;    /* host dir bound ro at /cairn/secrets, or NULL */
	const char *ctl_path;       /* host fifo bound rw at /cairn/ctl, or NULL */
	const struct sandbox_mount *mounts;
	size_t nmounts;
	const json_t *profile;      /* step's "sandbox" object; NULL = defaults */
	int stdout_fd, stderr_fd;   /* write ends for the step's stdout/stderr */
	/* Optional (0 / NULL = default): */
	const char *rootfs;         /* directory used as the read-only root instead of the host's / */
	const char *policy_path;    /* operator seccomp policy file (JSON), see docs */
	uid_t host_uid;             /* host id the sandbox user maps to when running as root (default 65534) */
	gid_t host_gid;
	struct sandbox_proxy *proxy; /* required when the profile has an egress allow-list */
};

/* One running sandbox. Fields are read-only for the caller except
 * timed_out and output_capped, which the caller sets before sandbox_kill
 * so that sandbox_outcome reports the right reason. */
struct sandbox_proc {
	pid_t pid;                  /* the sandbox's init (pid 1 inside), a child of the caller */
	int pidfd;                  /* readable when init exits; owned, closed by sandbox_release */
	int status_fd;              /* init's reports; owned */
	struct sandbox_limits limits;
	struct sandbox_cgroup *cg;  /* owned */
	bool timed_out, output_capped;
	bool reaped;
	bool pending;               /* started, set-up not yet finished */
	int sync_fd;                /* owned while pending */
};

/* Reasons an attempt ended, as they appear in events ("reason"). */
#define SANDBOX_REASON_EXIT "exit"
#define SANDBOX_REASON_SIGNAL "signal"
#define SANDBOX_REASON_OOM "oom"
#define SANDBOX_REASON_PIDS "pids"
#define SANDBOX_REASON_SECCOMP "seccomp"
#define SANDBOX_REASON_TIMEOUT "timeout"
#define SANDBOX_REASON_OUTPUT_CAP "output_cap"

struct sandbox_result {
	const char *reason;         /* one of SANDBOX_REASON_* (static) */
	char message[256];          /* human summary, e.g. "killed by seccomp policy: kexec_load" */
	int exit_code;              /* when reason is "exit", else -1 */
	int signal;                 /* terminating signal of the step, else 0 */
	bool success;               /* reason "exit" and exit_code 0 */
	char refused[64];           /* first system call refused by policy, or "" */
	int64_t memory_peak;        /* bytes, -1 if unknown */
};

/* Checks at worker start that this host can run sandboxes: user, pid and
 * network namespaces, seccomp with user notification, the cgroup
 * controllers. Returns 0, or -1 with a message naming the missing feature
 * and how to enable it. */
int sandbox_check_host(char *err, size_t errlen) SANDBOX_WARN_UNUSED;

/* Removes what sandboxes of dead processes left behind (their cgroups,
 * killing anything still in them). sandbox_check_host does it too. */
void sandbox_sweep(void);

/* Starts o->argv in a new sandbox. Returns 0 with *p filled once the
 * command is about to be executed, or -1 with a message naming the phase
 * that failed (nothing is left running). Borrows everything in o for the
 * duration of the call only; the caller keeps its ends of the output fds. */
int sandbox_spawn(const struct sandbox_opts *o, struct sandbox_proc *p,
		  char *err, size_t errlen) SANDBOX_WARN_UNUSED;

/* The same in two halves, so that a caller on an event loop need not wait
 * for the set-up inside the namespaces: sandbox_spawn_start returns once
 * init exists (p->pid, p->pidfd set; p->pending), having done what needs
 * the caller's process (cgroup, id maps); init then builds the sandbox on
 * its own and reports on p->status_fd. When that fd is readable (or to
 * wait for it, wait = true, at most 10 s), sandbox_spawn_finish returns 0
 * once the command runs, 1 when not yet (wait = false only), or -1 with a
 * message, init killed and reaped. Borrowing as sandbox_spawn; o->proxy
 * must outlive the sandbox. sandbox_spawn_abort undoes a pending start. */
int sandbox_spawn_start(const struct sandbox_opts *o, struct sandbox_proc *p,
			char *err, size_t errlen) SANDBOX_WARN_UNUSED;
int sandbox_spawn_finish(struct sandbox_proc *p, bool wait, char *err,
			 size_t errlen) SANDBOX_WARN_UNUSED;
void sandbox_spawn_abort(struct sandbox_proc *p);

/* Asks the step to stop (SIGTERM to the step through init). */
int sandbox_terminate(struct sandbox_proc *p);
/* Kills the whole sandbox (its pid namespace and cgroup) with SIGKILL. */
int sandbox_kill(struct sandbox_proc *p);

/* Reaps init without blocking. Returns 1 and sets *wait_status when it
 * has exited, 0 when it still runs, -1 on error. Callers that reap by
 * themselves (waitid on the pidfd) pass that status to sandbox_outcome. */
int sandbox_reap(struct sandbox_proc *p, int *wait_status);

/* After init exited with wait_status: classifies why the step ended. */
void sandbox_outcome(struct sandbox_proc *p, int wait_status, struct sandbox_result *r);

/* Kills what is left, reaps, removes the cgroups, closes fds. */
void sandbox_release(struct sandbox_proc *p);

/* --- egress allow-list proxy (sandbox_proxy.c) --- */

/* Receives each decision ("cairn-proxy: allowed CONNECT host:443 (ip)",
 * "cairn-proxy: denied ...") for the step's log; line is borrowed. */
typedef void (*sandbox_proxy_log_fn)(void *arg, const char *line);

/* Creates the proxy for one sandbox whose profile's "network" object
 * (borrowed) has "allow": ["host:port", "*.suffix:port", "10.0.0.5:80"].
 * It runs on base (borrowed, must outlive it). Pass it in
 * sandbox_opts.proxy; sandbox_spawn then sets HTTP(S)_PROXY for the step
 * and init relays the step's connections to it. Returns new; free with
 * sandbox_proxy_free after sandbox_release. */
int sandbox_proxy_new(struct event_base *base, const json_t *network, sandbox_proxy_log_fn log, void *arg,
		      struct sandbox_proxy **out, char *err, size_t errlen) SANDBOX_WARN_UNUSED;
void sandbox_proxy_free(struct sandbox_proxy *px);

/* The port the in-sandbox forwarder listens on (127.0.0.1). */
#define SANDBOX_PROXY_PORT 3128

/* --- seccomp policy (sandbox_seccomp.c) --- */

enum sandbox_action { SANDBOX_ACT_ALLOW, SANDBOX_ACT_EPERM, SANDBOX_ACT_ENOSYS, SANDBOX_ACT_KILL };

struct sandbox_rule {
	int nr;                     /* native system call number */
	enum sandbox_action action;
	bool by_args;               /* refused only for some arguments (clone, socket, ioctl, personality) */
	char name[32];
};

#define SANDBOX_MAX_RULES 256

/* A policy: the default deny list, merged with an operator file and a
 * step's "seccomp" object, compiled to BPF. */
struct sandbox_policy {
	struct sandbox_rule rules[SANDBOX_MAX_RULES];
	size_t nrules;
	bool unix_sockets;
	void *bpf;                  /* struct sock_filter[], owned */
	size_t bpf_len;             /* number of instructions */
};

/* Builds the policy: defaults, then the operator file at policy_path
 * (may be NULL), then the step profile's "seccomp" object (may be NULL),
 * which can only add refusals. Release with sandbox_policy_release. */
int sandbox_policy_build(struct sandbox_policy *pol, const char *policy_path,
			 const json_t *step_seccomp, bool unix_sockets,
			 char *err, size_t errlen) SANDBOX_WARN_UNUSED;
void sandbox_policy_release(struct sandbox_policy *pol);
/* The rule for system call nr, or NULL if the policy allows it outright. */
const struct sandbox_rule *sandbox_policy_find(const struct sandbox_policy *pol, int nr);

#endif
