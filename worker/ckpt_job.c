/* ckpt_job: the worker's side of one attempt's checkpoints. It owns the
 * attempt's chain state (the manifest of the last committed checkpoint),
 * the control fifo, the period timer, the stop/continue of the step's
 * processes during a capture and the one thread a capture or restore runs
 * on. It never runs a step nor reports its outcome (lease.c does). */
#define _GNU_SOURCE
#include "ckpt_job.h"
#include "checkpoint.h"
#include "log.h"
#include "pgq.h"
#include "util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <event2/event.h>

#define CKPT_MIN_EVERY_MS 100
#define CKPT_FULL_EVERY 10		/* links per chain before a new full one */
#define CKPT_MAX_PROCS 4096		/* processes stopped for a capture */
#define CKPT_STOP_WAIT_US 200000	/* in all, until the processes show as stopped */
#define CKPT_HOLD_MAX_MS 30000		/* a requested capture holds the step this long at most */
#define CKPT_CTL_LINE 64
#define CKPT_CTL_LOGGED 5		/* unknown requests logged per attempt */

static const char sql_chain[] =
	"select seq, tree_hash, data from cairn.checkpoint_chain($1::uuid, $2, $3::bigint)";
static const char sql_commit[] =
	"select cairn.checkpoint($1::uuid, $2, $3::bigint, $4::bigint, $5, $6::bigint, $7::bigint, "
	"$8, $9, $10::jsonb, $11::bytea)";
static const char sql_fallback[] =
	"select cairn.checkpoint_fallback($1::uuid, $2, $3::bigint, $4::bigint, $5::bigint, $6)";

enum op { OP_NONE, OP_RESTORE, OP_CAPTURE };
enum why { WHY_PERIOD, WHY_REQUEST, WHY_FINAL };

struct ckpt_job {
	struct event_base *base;
	struct pgq *db;
	char *worker, *run_id, *step_id, *workspace, *ctl;
	char epoch[24];
	int attempt;
	int64_t every_ms;
	int refs;
	bool dead, fenced, running, finishing;

	/* the chain as committed by this attempt (or restored) */
	struct checkpoint_manifest *base_m;
	int64_t base_seq, resumed_from;
	uint8_t base_hash[CHECKPOINT_HASH_LEN];
	int links;			/* deltas since the full one */
	size_t full_size;		/* stored size of the chain's full one */

	/* the step */
	pid_t pid;
	pid_t *frozen;
	size_t nfrozen;
	int64_t frozen_at_us, frozen_us;
	bool hold;			/* keep it stopped until the commit */

	struct event *timer_ev, *ctl_ev, *wake_ev, *hold_ev;
	int ctl_rd, ctl_wr, wake[2];
	char ctl_line[CKPT_CTL_LINE];
	size_t ctl_len;
	unsigned ctl_unknown;		/* unknown requests seen (logged up to a cap) */

	/* the thread's work; its fields belong to the thread while busy */
	enum op busy;
	enum why why;
	bool want_period, want_request, want_final, committing;
	pthread_t th;
	int th_rc;
	char th_err[512];
	struct checkpoint_result res;
	char *hex;
	/* restore */
	struct checkpoint_blob *chain;
	uint8_t **chain_data;
	uint8_t (*chain_hash)[CHECKPOINT_HASH_LEN];
	int64_t *chain_seq;
	size_t nchain, used;
	struct checkpoint_manifest *restored;

	ckpt_ready_cb ready;
	void *ready_arg;
	ckpt_done_cb done;
	void *done_arg;
};

static void cj_kick(struct ckpt_job *cj);

static void cj_unref(struct ckpt_job *cj)
{
	if (--cj->refs > 0)
		return;
	if (cj->timer_ev)
		event_free(cj->timer_ev);
	if (cj->ctl_ev)
		event_free(cj->ctl_ev);
	if (cj->wake_ev)
		event_free(cj->wake_ev);
	if (cj->hold_ev)
		event_free(cj->hold_ev);
	if (cj->ctl_rd >= 0)
		close(cj->ctl_rd);
	if (cj->ctl_wr >= 0)
		close(cj->ctl_wr);
	if (cj->wake[0] >= 0)
		close(cj->wake[0]);
	if (cj->wake[1] >= 0)
		close(cj->wake[1]);
	checkpoint_manifest_free(cj->base_m);
	checkpoint_manifest_free(cj->restored);
	checkpoint_result_release(&cj->res);
	free(cj->hex);
	for (size_t i = 0; i < cj->nchain; i++)
		PQfreemem(cj->chain_data[i]);
	free(cj->chain_data);
	free(cj->chain_hash);
	free(cj->chain_seq);
	free(cj->chain);
	free(cj->frozen);
	free(cj->worker);
	free(cj->run_id);
	free(cj->step_id);
	free(cj->workspace);
	free(cj->ctl);
	free(cj);
}

int64_t ckpt_job_every_ms(const json_t *spec)
{
	json_t *c = json_object_get(spec, "checkpoint");
	json_int_t ms;

	if (!json_is_object(c))
		return 0;
	ms = json_integer_value(json_object_get(c, "every_ms"));
	return ms < CKPT_MIN_EVERY_MS ? CKPT_MIN_EVERY_MS : (int64_t)ms;
}

/* Records in the events (CheckpointFallback, with a system log line) that
 * checkpoint bad did not verify and the attempt resumed from used (< 0: from
 * an empty workspace). Fenced: lost when the step is not ours. */
static void cj_fallback(struct ckpt_job *cj, long long bad, long long used, const char *reason)
{
	char bad_s[24], used_s[24];
	const char *params[6] = { cj->run_id, cj->step_id, cj->epoch, bad_s, used >= 0 ? used_s : NULL,
				  reason };

	snprintf(bad_s, sizeof(bad_s), "%lld", bad);
	snprintf(used_s, sizeof(used_s), "%lld", used);
	pgq_exec(cj->db, sql_fallback, 6, params, NULL, NULL);
}

/* ---- stopping the step ---- */

/* Waits until pid shows as stopped (or gone), at most until the
 * monotonic time until (us). */
static void wait_stopped(pid_t pid, int64_t until)
{
	char path[64], buf[512], *p;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	for (;;) {
		int fd = open(path, O_RDONLY | O_CLOEXEC);
		ssize_t n;

		if (fd < 0)
			return;
		n = read(fd, buf, sizeof(buf) - 1);
		close(fd);
		if (n <= 0)
			return;
		buf[n] = '\0';
		p = strrchr(buf, ')');
		if (!p || !p[1] || !p[2] || p[2] == 'T' || p[2] == 't' || p[2] == 'Z' || p[2] == 'X')
			return;
		if (mono_us() > until)
			return;
		struct timespec ts = { 0, 100000 };
		nanosleep(&ts, NULL);
	}
}

/* Adds the children of every thread of pid to the list. */
static void add_children(struct ckpt_job *cj, pid_t pid, size_t *cap)
{
	char path[64], buf[4096];
	DIR *d;
	struct dirent *de;

	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	d = opendir(path);
	if (!d)
		return;
	while ((de = readdir(d)) != NULL) {
		char cpath[128], *s, *end;
		ssize_t n;
		int fd;

		if (de->d_name[0] == '.')
			continue;
		snprintf(cpath, sizeof(cpath), "/proc/%d/task/%.20s/children", (int)pid, de->d_name);
		fd = open(cpath, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			continue;
		n = read(fd, buf, sizeof(buf) - 1);
		close(fd);
		if (n <= 0)
			continue;
		buf[n] = '\0';
		for (s = buf; *s; s = end) {
			long c = strtol(s, &end, 10);

			if (end == s)
				break;
			if (c <= 0 || cj->nfrozen >= CKPT_MAX_PROCS)
				continue;
			if (cj->nfrozen == *cap) {
				*cap = *cap ? *cap * 2 : 16;
				cj->frozen = xrealloc(cj->frozen, *cap * sizeof(pid_t));
			}
			cj->frozen[cj->nfrozen++] = (pid_t)c;
		}
	}
	closedir(d);
}

/* Stops every process of the step, top down: a process is stopped before
 * its children are listed, so none can appear unseen. */
static void cj_freeze(struct ckpt_job *cj)
{
	size_t cap = 16;
	int64_t until;

	if (cj->pid <= 0 || cj->nfrozen)
		return;
	cj->frozen_at_us = mono_us();
	until = cj->frozen_at_us + CKPT_STOP_WAIT_US;
	cj->frozen = xrealloc(cj->frozen, cap * sizeof(pid_t));
	cj->frozen[cj->nfrozen++] = cj->pid;
	for (size_t i = 0; i < cj->nfrozen; i++) {
		if (kill(cj->frozen[i], SIGSTOP) < 0)
			continue;
		wait_stopped(cj->frozen[i], until);
		add_children(cj, cj->frozen[i], &cap);
	}
}

static void cj_thaw(struct ckpt_job *cj)
{
	if (!cj->nfrozen)
		return;
	for (size_t i = 0; i < cj->nfrozen; i++)
		kill(cj->frozen[i], SIGCONT);
	cj->frozen_us = mono_us() - cj->frozen_at_us;
	log_debug("step \"%s\" of run %s: %zu process(es) stopped for %.1f ms", cj->step_id,
		  cj->run_id, cj->nfrozen, (double)cj->frozen_us / 1000.0);
	cj->nfrozen = 0;
	cj->hold = false;
	if (cj->hold_ev)
		event_del(cj->hold_ev);
}

/* ---- the thread ---- */

static char *hex_bytea(const uint8_t *p, size_t n)
{
	static const char digits[] = "0123456789abcdef";
	char *s = xmalloc(2 * n + 3), *o = s;

	*o++ = '\\';
	*o++ = 'x';
	for (size_t i = 0; i < n; i++) {
		*o++ = digits[p[i] >> 4];
		*o++ = digits[p[i] & 15];
	}
	*o = '\0';
	return s;
}

static void th_capture(struct ckpt_job *cj)
{
	struct checkpoint_options o;
	bool full = !cj->base_m || cj->links + 1 >= CKPT_FULL_EVERY;

	checkpoint_options_init(&o);
	o.threads = 1;
	cj->th_rc = checkpoint_capture(cj->workspace, full ? NULL : cj->base_m, &o, &cj->res,
				       cj->th_err, sizeof(cj->th_err));
	/* A delta larger than half the full one: start a new chain. */
	if (!cj->th_rc && !full && cj->res.stored_size > cj->full_size / 2) {
		checkpoint_result_release(&cj->res);
		cj->th_rc = checkpoint_capture(cj->workspace, NULL, &o, &cj->res,
					       cj->th_err, sizeof(cj->th_err));
	}
	if (!cj->th_rc)
		cj->hex = hex_bytea(cj->res.blob, cj->res.stored_size);
}

static void th_restore(struct ckpt_job *cj)
{
	struct checkpoint_options o;

	checkpoint_options_init(&o);
	o.threads = 1;
	if (checkpoint_empty_dir(cj->workspace, cj->th_err, sizeof(cj->th_err)) < 0) {
		cj->th_rc = -1;
		return;
	}
	cj->th_rc = checkpoint_restore_newest(cj->workspace, cj->chain, cj->nchain, &o, &cj->used,
					      &cj->restored, cj->th_err, sizeof(cj->th_err));
}

static void *th_main(void *arg)
{
	struct ckpt_job *cj = arg;
	char c = 1;

	cj->th_err[0] = '\0';
	if (cj->busy == OP_RESTORE)
		th_restore(cj);
	else
		th_capture(cj);
	while (write(cj->wake[1], &c, 1) < 0 && errno == EINTR)
		;
	return NULL;
}

static int cj_thread(struct ckpt_job *cj, enum op op)
{
	int e;

	cj->busy = op;
	cj->refs++;
	e = pthread_create(&cj->th, NULL, th_main, cj);
	if (e) {
		log_error("could not start a checkpoint thread: %s", strerror(e));
		cj->busy = OP_NONE;
		cj->refs--;
		return -1;
	}
	return 0;
}

/* ---- committing ---- */

static void cj_idle(struct ckpt_job *cj)
{
	ckpt_done_cb done = cj->done;

	cj->busy = OP_NONE;
	cj->committing = false;
	if (cj->hold)
		cj_thaw(cj);
	if (cj->finishing && !cj->want_final && done) {
		cj->done = NULL;
		done(cj->done_arg);
		return;
	}
	cj_kick(cj);
}

static void commit_result(PGresult *res, void *arg)
{
	struct ckpt_job *cj = arg;
	bool full = cj->res.full;

	if (cj->dead) {
		cj_unref(cj);
		return;
	}
	if (cj->hold)
		cj_thaw(cj);
	if (res && pgq_ok(res) && PQntuples(res) == 1) {
		int64_t seq = strtoll(PQgetvalue(res, 0, 0), NULL, 10);

		checkpoint_manifest_free(cj->base_m);
		cj->base_m = cj->res.manifest;
		cj->res.manifest = NULL;
		cj->base_seq = seq;
		memcpy(cj->base_hash, cj->res.tree_hash, CHECKPOINT_HASH_LEN);
		if (full) {
			cj->links = 0;
			cj->full_size = cj->res.stored_size;
		} else {
			cj->links++;
		}
		log_info("checkpoint %lld of step \"%s\" of run %s committed (%s, %zu bytes, "
			 "step stopped %.1f ms)", (long long)seq, cj->step_id, cj->run_id,
			 full ? "full" : "delta", cj->res.stored_size, (double)cj->frozen_us / 1000.0);
	} else if (res && !strcmp(pgq_sqlstate(res), CAIRN_SQLSTATE_FENCED)) {
		log_info("checkpoint of step \"%s\" of run %s refused: a newer attempt owns the step",
			 cj->step_id, cj->run_id);
		cj->fenced = true;
		cj->want_period = cj->want_request = cj->want_final = false;
		if (cj->timer_ev)
			event_del(cj->timer_ev);
	} else {
		/* Unknown whether it committed: the next one starts a new chain. */
		log_warn("could not commit a checkpoint of step \"%s\" of run %s: %s",
			 cj->step_id, cj->run_id, pgq_errmsg(res));
		checkpoint_manifest_free(cj->base_m);
		cj->base_m = NULL;
	}
	checkpoint_result_release(&cj->res);
	free(cj->hex);
	cj->hex = NULL;
	cj_idle(cj);
	cj_unref(cj);
}

static void capture_done(struct ckpt_job *cj)
{
	char seq[24], raw[24], stored[24], tree[65], basehex[65];
	const char *params[11];
	json_t *summary;
	char *summary_s;

	if (!cj->hold)
		cj_thaw(cj);
	if (cj->th_rc) {
		/* After a success the workspace may be gone under the capture. */
		log_msg(cj->finishing && cj->why != WHY_FINAL ? LOG_DEBUG : LOG_WARN,
			"could not capture a checkpoint of step \"%s\" of run %s: %s",
			cj->step_id, cj->run_id, cj->th_err);
		cj_idle(cj);
		return;
	}
	if (cj->fenced) {
		checkpoint_result_release(&cj->res);
		free(cj->hex);
		cj->hex = NULL;
		cj_idle(cj);
		return;
	}
	snprintf(seq, sizeof(seq), "%lld", (long long)cj->base_seq);
	snprintf(raw, sizeof(raw), "%llu", (unsigned long long)cj->res.raw_size);
	snprintf(stored, sizeof(stored), "%zu", cj->res.stored_size);
	checkpoint_hash_hex(cj->res.tree_hash, tree);
	checkpoint_hash_hex(cj->res.base_hash, basehex);
	summary = checkpoint_summary_json(&cj->res);
	json_object_set_new(summary, "trigger", json_string(cj->why == WHY_PERIOD ? "period" :
							   cj->why == WHY_REQUEST ? "request" : "failure"));
	/* A requested capture keeps the step stopped until its commit too. */
	json_object_set_new(summary, "stopped_ms", json_real((double)(cj->nfrozen ?
		mono_us() - cj->frozen_at_us : cj->frozen_us) / 1000.0));
	summary_s = json_dumps(summary, JSON_COMPACT);
	params[0] = cj->run_id;
	params[1] = cj->step_id;
	params[2] = cj->epoch;
	params[3] = cj->res.full ? NULL : seq;
	params[4] = CHECKPOINT_CODEC;
	params[5] = raw;
	params[6] = stored;
	params[7] = tree;
	params[8] = cj->res.full ? NULL : basehex;
	params[9] = summary_s;
	params[10] = cj->hex;
	cj->committing = true;
	cj->refs++;
	pgq_exec(cj->db, sql_commit, 11, params, commit_result, cj);
	free(summary_s);
	json_decref(summary);
	/* pgq copied the blob: free ours now. */
	free(cj->hex);
	cj->hex = NULL;
	free(cj->res.blob);
	cj->res.blob = NULL;
}

static void restore_done(struct ckpt_job *cj);

/* The thread finished: join it and go on, on the loop. */
static void wake_cb(evutil_socket_t fd, short what, void *arg)
{
	struct ckpt_job *cj = arg;
	char c;
	enum op op = cj->busy;

	if (read(fd, &c, 1) != 1)
		return;
	pthread_join(cj->th, NULL);
	if (cj->dead) {
		cj_unref(cj);
		return;
	}
	if (op == OP_RESTORE)
		restore_done(cj);
	else
		capture_done(cj);
	cj_unref(cj);
}

/* Starts the next capture wanted, if nothing runs. */
static void cj_kick(struct ckpt_job *cj)
{
	if (cj->dead || cj->busy != OP_NONE || cj->committing)
		return;
	if (cj->fenced)
		cj->want_period = cj->want_request = cj->want_final = false;
	if (cj->want_final) {
		cj->want_final = false;
		cj->why = WHY_FINAL;
	} else if (cj->running && cj->want_request) {
		cj->want_request = false;
		cj->want_period = false;
		cj->why = WHY_REQUEST;
	} else if (cj->running && cj->want_period) {
		cj->want_period = false;
		cj->why = WHY_PERIOD;
	} else {
		if (cj->finishing && cj->done) {
			ckpt_done_cb done = cj->done;

			cj->done = NULL;
			done(cj->done_arg);
		}
		return;
	}
	cj->frozen_us = 0;
	if (cj->why != WHY_FINAL) {
		cj_freeze(cj);
		if (cj->why == WHY_REQUEST && cj->nfrozen) {
			struct timeval tv = { CKPT_HOLD_MAX_MS / 1000, 0 };

			cj->hold = true;
			evtimer_add(cj->hold_ev, &tv);
		}
	}
	if (cj_thread(cj, OP_CAPTURE) < 0) {
		cj_thaw(cj);
		cj_idle(cj);
	}
}

static void timer_cb(evutil_socket_t fd, short what, void *arg)
{
	struct ckpt_job *cj = arg;

	cj->want_period = true;
	cj_kick(cj);
}

static void hold_cb(evutil_socket_t fd, short what, void *arg)
{
	struct ckpt_job *cj = arg;

	log_warn("checkpoint of step \"%s\" of run %s not committed after %d ms: letting the step go on",
		 cj->step_id, cj->run_id, CKPT_HOLD_MAX_MS);
	cj_thaw(cj);
}

/* Reads requests from the control fifo, one per line. */
static void ctl_cb(evutil_socket_t fd, short what, void *arg)
{
	struct ckpt_job *cj = arg;
	char buf[256];

	/* A bounded amount per pass: a step writing without end cannot hold
	 * the loop. */
	for (int round = 0; round < 16; round++) {
		ssize_t n = read(fd, buf, sizeof(buf));

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		for (ssize_t i = 0; i < n; i++) {
			if (buf[i] != '\n') {
				if (cj->ctl_len < sizeof(cj->ctl_line) - 1)
					cj->ctl_line[cj->ctl_len++] = buf[i];
				continue;
			}
			cj->ctl_line[cj->ctl_len] = '\0';
			if (!strcmp(cj->ctl_line, "checkpoint")) {
				cj->want_request = true;
			} else if (cj->ctl_len && cj->ctl_unknown++ < CKPT_CTL_LOGGED) {
				log_info("step \"%s\" of run %s wrote an unknown request to its control "
					 "fifo: \"%.40s\"", cj->step_id, cj->run_id, cj->ctl_line);
			}
			cj->ctl_len = 0;
		}
	}
	/* The step is stopped as soon as the capture starts: now, or right
	 * after the one running. */
	if (cj->want_request)
		cj_kick(cj);
}

/* ---- restore ---- */

static int make_dirs(const char *path)
{
	char tmp[4096];
	size_t n = strlen(path);

	if (n >= sizeof(tmp))
		return -1;
	memcpy(tmp, path, n + 1);
	for (char *p = tmp + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(tmp, 0700) < 0 && errno != EEXIST)
			return -1;
		*p = '/';
	}
	return mkdir(tmp, 0700) < 0 && errno != EEXIST ? -1 : 0;
}

/* The control fifo, with both ends held here: the step's writes never
 * block on open nor see the worker's end closed. */
static int cj_open_ctl(struct ckpt_job *cj, char *err, size_t errlen)
{
	if (unlink(cj->ctl) < 0 && errno != ENOENT) {
		snprintf(err, errlen, "could not remove \"%s\": %s", cj->ctl, strerror(errno));
		return -1;
	}
	if (mkfifo(cj->ctl, 0600) < 0) {
		snprintf(err, errlen, "could not create fifo \"%s\": %s", cj->ctl, strerror(errno));
		return -1;
	}
	cj->ctl_rd = open(cj->ctl, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
	if (cj->ctl_rd >= 0)
		cj->ctl_wr = open(cj->ctl, O_WRONLY | O_NONBLOCK | O_CLOEXEC);
	if (cj->ctl_rd < 0 || cj->ctl_wr < 0) {
		snprintf(err, errlen, "could not open fifo \"%s\": %s", cj->ctl, strerror(errno));
		return -1;
	}
	cj->ctl_ev = event_new(cj->base, cj->ctl_rd, EV_READ | EV_PERSIST, ctl_cb, cj);
	return 0;
}

static void cj_ready(struct ckpt_job *cj, enum ckpt_ready how, const char *msg)
{
	ckpt_ready_cb ready = cj->ready;

	cj->busy = OP_NONE;
	cj->ready = NULL;
	if (how == CKPT_READY) {
		char err[512];

		if (cj_open_ctl(cj, err, sizeof(err)) < 0) {
			how = CKPT_FAILED;
			msg = err;
			if (ready)
				ready(cj->ready_arg, how, msg);
			return;
		}
	}
	if (ready)
		ready(cj->ready_arg, how, msg);
}

static void restore_done(struct ckpt_job *cj)
{
	struct buf m = BUF_INIT;

	if (cj->th_rc == 0) {
		size_t last = cj->used - 1;

		cj->resumed_from = cj->chain_seq[last];
		cj->base_seq = cj->chain_seq[last];
		memcpy(cj->base_hash, cj->chain_hash[last], CHECKPOINT_HASH_LEN);
		cj->base_m = cj->restored;
		cj->restored = NULL;
		cj->links = (int)last;
		cj->full_size = cj->chain[0].len;
		if (cj->used < cj->nchain) {
			/* A restore reads the links in order: deltas on an older
			 * link would sit behind the bad one. Start a new chain. */
			checkpoint_manifest_free(cj->base_m);
			cj->base_m = NULL;
			buf_addf(&m, "cairn: checkpoint %lld does not verify (%s): resumed from checkpoint %lld, "
				 "the newest that does", (long long)cj->chain_seq[cj->used], cj->th_err,
				 (long long)cj->resumed_from);
			log_warn("step \"%s\" of run %s: %s", cj->step_id, cj->run_id, m.data);
			cj_fallback(cj, (long long)cj->chain_seq[cj->used], (long long)cj->resumed_from,
				    cj->th_err);
		} else {
			log_info("step \"%s\" of run %s resumes from checkpoint %lld", cj->step_id,
				 cj->run_id, (long long)cj->resumed_from);
		}
	} else {
		buf_addf(&m, "cairn: no checkpoint of the step verifies (%s): starting from an empty workspace",
			 cj->th_err);
		log_warn("step \"%s\" of run %s: %s", cj->step_id, cj->run_id, m.data);
		cj_fallback(cj, cj->nchain ? (long long)cj->chain_seq[cj->used < cj->nchain ? cj->used : 0] : 0,
			    -1, cj->th_err);
		if (checkpoint_empty_dir(cj->workspace, cj->th_err, sizeof(cj->th_err)) < 0) {
			buf_release(&m);
			cj_ready(cj, CKPT_FAILED, cj->th_err);
			return;
		}
	}
	buf_release(&m);
	cj_ready(cj, CKPT_READY, NULL);
}

static void chain_result(PGresult *res, void *arg)
{
	struct ckpt_job *cj = arg;
	int n;
	char msg[512];

	if (cj->dead) {
		cj_unref(cj);
		return;
	}
	if (res && !pgq_ok(res) && !strcmp(pgq_sqlstate(res), CAIRN_SQLSTATE_FENCED)) {
		cj_ready(cj, CKPT_FENCED, pgq_errmsg(res));
		goto out;
	}
	if (!res || !pgq_ok(res)) {
		snprintf(msg, sizeof(msg), "could not read the checkpoints of the step: %s", pgq_errmsg(res));
		cj_ready(cj, CKPT_FAILED, msg);
		goto out;
	}
	n = PQntuples(res);
	if (n == 0) {
		cj_ready(cj, CKPT_READY, NULL);
		goto out;
	}
	cj->chain = xcalloc((size_t)n, sizeof(*cj->chain));
	cj->chain_data = xcalloc((size_t)n, sizeof(*cj->chain_data));
	cj->chain_hash = xcalloc((size_t)n, sizeof(*cj->chain_hash));
	cj->chain_seq = xcalloc((size_t)n, sizeof(*cj->chain_seq));
	for (int i = 0; i < n; i++) {
		size_t len = 0;

		cj->chain_seq[i] = strtoll(PQgetvalue(res, i, 0), NULL, 10);
		cj->chain_data[i] = PQunescapeBytea((const unsigned char *)PQgetvalue(res, i, 2), &len);
		cj->nchain++;
		if (!cj->chain_data[i] || checkpoint_hash_parse(PQgetvalue(res, i, 1), cj->chain_hash[i]) < 0) {
			snprintf(msg, sizeof(msg), "could not decode checkpoint %lld", (long long)cj->chain_seq[i]);
			cj_ready(cj, CKPT_FAILED, msg);
			goto out;
		}
		cj->chain[i].data = cj->chain_data[i];
		cj->chain[i].len = len;
		cj->chain[i].tree_hash = cj->chain_hash[i];
	}
	if (make_dirs(cj->workspace) < 0) {
		snprintf(msg, sizeof(msg), "could not create \"%s\": %s", cj->workspace, strerror(errno));
		cj_ready(cj, CKPT_FAILED, msg);
		goto out;
	}
	if (cj_thread(cj, OP_RESTORE) < 0)
		cj_ready(cj, CKPT_FAILED, "could not start a thread to restore the workspace");
out:
	cj_unref(cj);
}

/* ---- interface ---- */

struct ckpt_job *ckpt_job_new(struct event_base *base, struct pgq *db, const char *worker,
			      const char *run_id, const char *step_id, const char *epoch,
			      int attempt, int64_t every_ms, const char *workspace,
			      const char *ctl)
{
	struct ckpt_job *cj = xcalloc(1, sizeof(*cj));

	cj->base = base;
	cj->db = db;
	cj->refs = 1;
	cj->worker = xstrdup(worker ? worker : "");
	cj->run_id = xstrdup(run_id);
	cj->step_id = xstrdup(step_id);
	snprintf(cj->epoch, sizeof(cj->epoch), "%s", epoch);
	cj->attempt = attempt;
	cj->every_ms = every_ms;
	cj->workspace = xstrdup(workspace);
	cj->ctl = xstrdup(ctl);
	cj->ctl_rd = cj->ctl_wr = -1;
	cj->wake[0] = cj->wake[1] = -1;
	if (pipe2(cj->wake, O_CLOEXEC | O_NONBLOCK) < 0) {
		log_error("could not create a pipe: %s", strerror(errno));
		abort();
	}
	cj->wake_ev = event_new(base, cj->wake[0], EV_READ | EV_PERSIST, wake_cb, cj);
	event_add(cj->wake_ev, NULL);
	cj->timer_ev = event_new(base, -1, EV_PERSIST, timer_cb, cj);
	cj->hold_ev = evtimer_new(base, hold_cb, cj);
	return cj;
}

void ckpt_job_prepare(struct ckpt_job *cj, ckpt_ready_cb ready, void *arg)
{
	const char *params[3] = { cj->run_id, cj->step_id, cj->epoch };
	char *dir = xstrdup(cj->ctl), *slash = strrchr(dir, '/');

	cj->ready = ready;
	cj->ready_arg = arg;
	if (slash)
		*slash = '\0';
	if (slash && make_dirs(dir) < 0)
		log_warn("could not create \"%s\": %s", dir, strerror(errno));
	free(dir);
	cj->refs++;
	pgq_exec(cj->db, sql_chain, 3, params, chain_result, cj);
}

int64_t ckpt_job_resumed_from(const struct ckpt_job *cj)
{
	return cj->resumed_from;
}

void ckpt_job_running(struct ckpt_job *cj, pid_t pid)
{
	struct timeval tv = { cj->every_ms / 1000, (cj->every_ms % 1000) * 1000 };

	cj->pid = pid;
	cj->running = true;
	if (cj->every_ms > 0)
		evtimer_add(cj->timer_ev, &tv);
	if (cj->ctl_ev)
		event_add(cj->ctl_ev, NULL);
}

void ckpt_job_finish(struct ckpt_job *cj, bool failed, ckpt_done_cb done, void *arg)
{
	struct stat st;

	cj->running = false;
	cj->finishing = true;
	cj->want_period = cj->want_request = false;
	event_del(cj->timer_ev);
	if (cj->ctl_ev)
		event_del(cj->ctl_ev);
	cj_thaw(cj);
	cj->pid = 0;
	cj->done = done;
	cj->done_arg = arg;
	if (failed && !cj->fenced && lstat(cj->workspace, &st) == 0 && S_ISDIR(st.st_mode)) {
		cj->want_final = true;
		cj_kick(cj);
		return;
	}
	/* A success does not wait for a capture still running. */
	cj->done = NULL;
	if (done)
		done(arg);
}

void ckpt_job_free(struct ckpt_job *cj)
{
	if (!cj)
		return;
	cj_thaw(cj);
	cj->dead = true;
	cj->ready = NULL;
	cj->done = NULL;
	event_del(cj->timer_ev);
	event_del(cj->hold_ev);
	if (cj->ctl_ev)
		event_del(cj->ctl_ev);
	cj_unref(cj);
}
