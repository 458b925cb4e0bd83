/* sandbox_cgroup: one cgroup per sandbox for memory, pids and CPU limits,
 * on cgroup v2 where the controllers are available, else on the v1
 * hierarchies. Used by sandbox.c only. */
#ifndef CAIRN_SANDBOX_CGROUP_H
#define CAIRN_SANDBOX_CGROUP_H

#include <stdint.h>
#include <sys/types.h>

#include "sandbox.h"

struct sandbox_cgroup_stats {
	int64_t oom_kills;          /* processes killed by the memory limit */
	int64_t pids_denied;        /* forks refused by the pids limit */
	int64_t memory_peak;        /* bytes, -1 if unknown */
};

/* Which cgroup layout the host offers; -1 with a message if none. */
int sandbox_cgroup_probe(char *err, size_t errlen) SANDBOX_WARN_UNUSED;
/* Creates the cgroup(s) with limits l. Returns new; caller frees with
 * sandbox_cgroup_free. */
int sandbox_cgroup_new(const struct sandbox_limits *l, struct sandbox_cgroup **out,
		       char *err, size_t errlen) SANDBOX_WARN_UNUSED;
/* cgroup v2: a new O_DIRECTORY fd of the cgroup for CLONE_INTO_CGROUP
 * (caller closes); -1 on v1, where the child joins with sandbox_cgroup_join_self. */
int sandbox_cgroup_dirfd(struct sandbox_cgroup *cg);
/* cgroup v1, called by the (single-threaded) child itself: moves the
 * calling thread by writing "0" to each "tasks" file, which the kernel
 * does without the global threadgroup lock (and its RCU grace period)
 * that moving another process takes. Async-signal-safe; 0 or -1/errno. */
int sandbox_cgroup_join_self(const struct sandbox_cgroup *cg);
/* SIGKILLs every process in the cgroup. */
void sandbox_cgroup_kill(struct sandbox_cgroup *cg);
void sandbox_cgroup_stats(struct sandbox_cgroup *cg, struct sandbox_cgroup_stats *st);
/* Removes sandbox cgroups left by processes that died without cleaning
 * up (e.g. a worker killed with SIGKILL), killing what runs in them. */
void sandbox_cgroup_sweep(void);
/* Removes the cgroup(s) (killing what is left) and frees cg. */
void sandbox_cgroup_free(struct sandbox_cgroup *cg);

#endif
