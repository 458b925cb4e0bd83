/* lease: claims steps, renews their leases, reports their outcome. It owns
 * the worker's list of leased steps and every transition call the worker
 * makes; it never runs a process itself (the executor does). */
#define _GNU_SOURCE
#include "lease.h"
#include "ckpt_job.h"
#include "executor.h"
#include "log.h"
#include "pgq.h"
#include "util.h"
#include "workflow.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <event2/event.h>
#include <jansson.h>

#define LEASE_START_DELAY_MS 250  /* report StepStarted only for steps still running then */
#define LEASE_REPORT_RETRY_MS 1000
#define LEASE_REPORT_TRIES 30
#define LEASE_STOP_GRACE_MS 10000 /* after stop, give reports this long */
#define LEASE_REGISTER_WARN_MS 5000 /* registration waits for the name's lock this long before a warning */

static const char sql_claim[] =
	"select run_id, step_id, attempt, lease_epoch, spec, input, needs_output, "
	"to_json(done_effects) from cairn.claim($1, $2::text[], $3::int, $4::int)";
static const char sql_heartbeat[] =
	"select run_id, step_id from cairn.heartbeat($1, $2::uuid[], $3::text[], $4::bigint[], $5::int)";
static const char sql_start[] = "select cairn.start($1::uuid, $2, $3::bigint, $4::jsonb)";
static const char sql_complete[] =
	"select cairn.complete($1::uuid, $2, $3::bigint, $4::jsonb, $5::jsonb, $6::jsonb, $7::jsonb)";
static const char sql_fail[] = "select cairn.fail($1::uuid, $2, $3::bigint, $4::jsonb, $5::jsonb)";
static const char sql_register[] = "select cairn.worker_register($1, $2::text[])";
static const char sql_run_defaults[] = "select cairn.run_defaults($1::uuid)";

enum report_kind { REPORT_NONE, REPORT_COMPLETE, REPORT_FAIL };

struct job {
	struct lease *l;
	struct job *prev, *next;
	int refs;                  /* the list's reference + queries in flight */
	char *run_id, *step_id;
	char epoch[24];
	int attempt;
	struct exec_job *ex_job;   /* NULL once the executor is done with it */
	struct event *start_ev, *retry_ev;
	bool fenced, start_sent;
	enum report_kind report;
	char *params[6];           /* the report's parameters, kept for retries */
	int nparams, tries;
	int claim_max;             /* steps the success report may lease us (reserved room) */
	json_t *add_steps;         /* output's cairn.add_steps, until normalized */
	bool adds;                 /* the success report carries info.add_steps */
	int64_t renewed_ms;        /* last time the store extended the lease (monotonic) */
	struct ckpt_job *ckpt;     /* the attempt's checkpoints, when its spec asks for them */
	bool restoring;            /* ckpt_ready not yet called (it holds a reference) */
	json_t *spec, *input, *needs, *done; /* the claimed row, until the restore is done */
};

struct lease {
	struct event_base *base;
	struct pgq *db, *listen_db;
	struct executor *ex;
	struct lease_opts opts;
	struct job *jobs;
	int njobs, executing;
	int reserved;              /* room held for leases that success reports may bring */
	struct event *poll_ev, *hb_ev, *drain_ev, *stop_ev, *register_ev;
	int claiming;              /* rows asked for by the claim in flight, 0 if none */
	bool started, want_claim, last_full, notified, hb_inflight, claim_failing;
	bool hb_again;             /* a run stopped while a heartbeat was in flight */
	int64_t hb_sent_ms;        /* when the heartbeat in flight was sent */
	bool draining, stopping, done_called;
	bool registered;           /* the current connection of db holds the liveness lock */
	char *queues_lit;          /* the queues as a text[] literal */
};

static void lease_kick(struct lease *l);
static void job_report_send(struct job *job);

/* ---- helpers ---- */

/* Appends s to b as one element of a PostgreSQL array literal. */
static void array_add(struct buf *b, const char *s)
{
	buf_adds(b, b->len > 1 ? ",\"" : "\"");
	for (; *s; s++) {
		if (*s == '"' || *s == '\\')
			buf_add(b, "\\", 1);
		buf_add(b, s, 1);
	}
	buf_adds(b, "\"");
}

static void iso_time(int64_t ms, char *out, size_t outlen)
{
	time_t sec = (time_t)(ms / 1000);
	struct tm tm;
	char base[32];

	gmtime_r(&sec, &tm);
	strftime(base, sizeof(base), "%Y-%m-%dT%H:%M:%S", &tm);
	snprintf(out, outlen, "%s.%03dZ", base, (int)(ms % 1000));
}

static void timer_add_ms(struct event *ev, int64_t ms)
{
	struct timeval tv = { ms / 1000, (ms % 1000) * 1000 };

	evtimer_add(ev, &tv);
}

static char *dump(const json_t *v)
{
	char *s = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);

	if (!s)
		abort();
	return s;
}

/* ---- jobs ---- */

static void job_unref(struct job *job)
{
	if (--job->refs > 0)
		return;
	if (job->start_ev)
		event_free(job->start_ev);
	if (job->retry_ev)
		event_free(job->retry_ev);
	for (int i = 0; i < job->nparams; i++)
		free(job->params[i]);
	json_decref(job->add_steps);
	ckpt_job_free(job->ckpt);
	json_decref(job->spec);
	json_decref(job->input);
	json_decref(job->needs);
	json_decref(job->done);
	free(job->run_id);
	free(job->step_id);
	free(job);
}

static void lease_check_done(struct lease *l)
{
	if ((l->draining || l->stopping) && !l->njobs && !l->claiming && !l->done_called) {
		l->done_called = true;
		if (l->drain_ev)
			event_del(l->drain_ev);
		if (l->stop_ev)
			event_del(l->stop_ev);
		log_info("no step left, stopping");
		if (l->opts.done)
			l->opts.done(l->opts.done_arg);
	}
}

/* Takes the job off the list; it is freed once no query refers to it. */
static void job_remove(struct job *job)
{
	struct lease *l = job->l;

	if (job->prev)
		job->prev->next = job->next;
	else
		l->jobs = job->next;
	if (job->next)
		job->next->prev = job->prev;
	job->prev = job->next = NULL;
	if (job->start_ev)
		event_del(job->start_ev);
	if (job->retry_ev)
		event_del(job->retry_ev);
	ckpt_job_free(job->ckpt);
	job->ckpt = NULL;
	if (job->restoring) {
		/* ckpt_ready will not come: drop its reference and slot. */
		job->restoring = false;
		l->executing--;
		job->refs--;
	}
	l->njobs--;
	job_unref(job);
	lease_check_done(l);
}

static struct job *job_find(struct lease *l, const char *run_id, const char *step_id)
{
	for (struct job *job = l->jobs; job; job = job->next)
		if (!strcmp(job->run_id, run_id) && !strcmp(job->step_id, step_id))
			return job;
	return NULL;
}

/* The step is no longer ours (cancelled, reaped or taken over). */
static void job_fence(struct job *job, const char *why)
{
	if (job->fenced)
		return;
	job->fenced = true;
	log_info("step \"%s\" of run %s is no longer leased to this worker (%s): dropping it",
		 job->step_id, job->run_id, why);
	if (job->ex_job)
		executor_kill(job->ex_job, "fenced", false);
	else if (job->report == REPORT_NONE)
		job_remove(job);
}

static void start_result(PGresult *res, void *arg)
{
	struct job *job = arg;

	if (res && !pgq_ok(res)) {
		if (!strcmp(pgq_sqlstate(res), CAIRN_SQLSTATE_FENCED))
			job_fence(job, "start refused");
		else
			log_warn("could not record the start of step \"%s\" of run %s: %s",
				 job->step_id, job->run_id, pgq_errmsg(res));
	}
	job_unref(job);
}

/* A step still running LEASE_START_DELAY_MS after spawn is recorded as
 * started; shorter steps let complete/fail record it. */
static void start_cb(evutil_socket_t fd, short what, void *arg)
{
	struct job *job = arg;
	struct lease *l = job->l;
	const char *params[4];
	json_t *info;
	char *info_s;

	if (!job->ex_job || job->fenced)
		return;
	info = json_pack("{s:s, s:i}", "worker", l->opts.name, "pid", (json_int_t)executor_job_pid(job->ex_job));
	info_s = dump(info);
	params[0] = job->run_id;
	params[1] = job->step_id;
	params[2] = job->epoch;
	params[3] = info_s;
	job->start_sent = true;
	job->refs++;
	pgq_exec(l->db, sql_start, 4, params, start_result, job);
	free(info_s);
	json_decref(info);
}

/* From fail's reply: false when the step failed for good or its run ended. */
static bool step_will_retry(const char *reply)
{
	json_t *r = json_loads(reply, 0, NULL);
	const char *step = json_string_value(json_object_get(r, "step_status"));
	const char *run = json_string_value(json_object_get(r, "run_status"));
	bool again = !r || ((!run || !strcmp(run, "running")) &&
			    (!step || (strcmp(step, "failed") && strcmp(step, "cancelled"))));

	json_decref(r);
	return again;
}

/* Turns a success report not yet recorded into a failure report, with
 * the same info (logs, timing). */
static void job_complete_to_fail(struct job *job, const char *reason, const char *message,
				 bool retryable)
{
	json_t *err = json_pack("{s:s, s:s, s:b}", "reason", reason, "message", message,
				"retryable", retryable);

	free(job->params[3]);
	free(job->params[4]);
	job->params[3] = dump(err);
	job->params[4] = job->params[5];
	job->params[5] = NULL;
	job->nparams = 5;
	job->report = REPORT_FAIL;
	job->adds = false;
	json_decref(err);
}

static void start_claimed(struct lease *l, const char *reply);

static void report_result(PGresult *res, void *arg)
{
	struct job *job = arg;
	struct lease *l = job->l;
	const char *what = job->report == REPORT_COMPLETE ? "success" : "failure";

	l->reserved -= job->claim_max;
	job->claim_max = 0;
	if (!job->prev && !job->next && l->jobs != job) {
		job_unref(job); /* already removed */
		return;
	}
	if (!res) {
		if (++job->tries < LEASE_REPORT_TRIES) {
			log_warn("lost the database while reporting step \"%s\" of run %s, retrying",
				 job->step_id, job->run_id);
			timer_add_ms(job->retry_ev, LEASE_REPORT_RETRY_MS);
			job_unref(job);
			return;
		}
		log_error("gave up reporting the %s of step \"%s\" of run %s",
			  what, job->step_id, job->run_id);
	} else if (pgq_ok(res)) {
		log_debug("reported the %s of step \"%s\" of run %s", what, job->step_id, job->run_id);
		if (job->report == REPORT_COMPLETE && PQntuples(res) == 1 && !PQgetisnull(res, 0, 0))
			start_claimed(l, PQgetvalue(res, 0, 0));
		if (job->report == REPORT_FAIL && PQntuples(res) == 1 && !step_will_retry(PQgetvalue(res, 0, 0)))
			executor_forget(l->ex, job->run_id, job->step_id);
	} else if (!strcmp(pgq_sqlstate(res), CAIRN_SQLSTATE_FENCED)) {
		log_info("the %s of step \"%s\" of run %s was refused: a newer attempt owns the step",
			 what, job->step_id, job->run_id);
		executor_forget(l->ex, job->run_id, job->step_id);
	} else if (!strcmp(pgq_sqlstate(res), CAIRN_SQLSTATE_NOT_FOUND)) {
		log_warn("the %s of step \"%s\" of run %s was refused: %s", what, job->step_id,
			 job->run_id, pgq_errmsg(res));
		executor_forget(l->ex, job->run_id, job->step_id);
	} else if (job->report == REPORT_COMPLETE && job->adds &&
		   !strcmp(pgq_sqlstate(res), CAIRN_SQLSTATE_INVALID)) {
		/* The run as it is now refuses the added steps (ids taken,
		 * unknown needs, max_steps): the step fails for good. */
		log_info("step \"%s\" of run %s added steps the run refuses: %s",
			 job->step_id, job->run_id, pgq_errmsg(res));
		job_complete_to_fail(job, "invalid_add_steps", pgq_errmsg(res), false);
		job_report_send(job);
		job_unref(job);
		return;
	} else if (job->report == REPORT_COMPLETE) {
		/* The store refused the result itself: fail the step with why. */
		struct buf m = BUF_INIT;

		log_warn("could not report the success of step \"%s\" of run %s: %s",
			 job->step_id, job->run_id, pgq_errmsg(res));
		buf_addf(&m, "could not record the result: %s", pgq_errmsg(res));
		job_complete_to_fail(job, "report_error", m.data, true);
		buf_release(&m);
		job_report_send(job);
		job_unref(job);
		return;
	} else {
		log_error("could not report the failure of step \"%s\" of run %s: %s",
			  job->step_id, job->run_id, pgq_errmsg(res));
	}
	job_remove(job);
	job_unref(job);
	lease_kick(l);
}

static int lease_capacity(const struct lease *l);
static void job_start_row(struct lease *l, const char *run_id, const char *step_id,
			  const char *attempt, const char *epoch, json_t *spec, json_t *input,
			  json_t *needs, json_t *done);

static void job_report_send(struct job *job)
{
	struct lease *l = job->l;
	const char *params[7];
	char *claim = NULL;

	job->refs++;
	if (job->report != REPORT_COMPLETE) {
		pgq_exec(l->db, sql_fail, job->nparams, (const char *const *)job->params,
			 report_result, job);
		return;
	}
	/* Room to spare and no backlog (the last claim was not full): the
	 * success may lease us what it makes ready in the same transaction, the
	 * next step of a chain without a claim. Under a backlog the store would
	 * not let it jump the queue anyway, so nothing is reserved for it. */
	job->claim_max = l->draining || l->stopping || l->last_full ? 0 :
		lease_capacity(l) - l->claiming;
	if (job->claim_max > 0) {
		json_t *c = json_pack("{s:s, s:[], s:i, s:I}", "worker", l->opts.name, "queues",
				      "max", job->claim_max, "lease_ms", (json_int_t)l->opts.lease_ms);

		for (const char *const *q = l->opts.queues; *q; q++)
			json_array_append_new(json_object_get(c, "queues"), json_string(*q));
		claim = dump(c);
		json_decref(c);
		l->reserved += job->claim_max;
	} else {
		job->claim_max = 0;
	}
	for (int i = 0; i < 6; i++)
		params[i] = job->params[i];
	params[6] = claim;
	pgq_exec(l->db, sql_complete, 7, params, report_result, job);
	free(claim);
}

/* Starts the steps a success report leased us ("claimed" of its reply). */
static void start_claimed(struct lease *l, const char *reply)
{
	json_t *r = json_loads(reply, 0, NULL), *c;
	size_t i;

	json_array_foreach(json_object_get(r, "claimed"), i, c) {
		char attempt[24], epoch[24];
		json_t *done = json_object_get(c, "done_effects");

		snprintf(attempt, sizeof(attempt), "%lld",
			 (long long)json_integer_value(json_object_get(c, "attempt")));
		snprintf(epoch, sizeof(epoch), "%lld",
			 (long long)json_integer_value(json_object_get(c, "lease_epoch")));
		job_start_row(l, json_string_value(json_object_get(c, "run_id")),
			      json_string_value(json_object_get(c, "step_id")), attempt, epoch,
			      json_incref(json_object_get(c, "spec")),
			      json_incref(json_object_get(c, "input")),
			      json_incref(json_object_get(c, "needs_output")),
			      json_is_array(done) ? json_incref(done) : json_array());
	}
	json_decref(r);
}

static void defaults_send(struct job *job);

static void retry_cb(evutil_socket_t fd, short what, void *arg)
{
	struct job *job = arg;

	if (job->add_steps)
		defaults_send(job);
	else
		job_report_send(job);
}

/* ---- agent loops: steps a step adds ---- */

/* Normalizes the added steps against the run's defaults and limits
 * (reply of run_defaults) and puts them in the success report, or turns
 * the report into a failure listing what is wrong. */
static void job_add_steps(struct job *job, const char *reply)
{
	json_t *rd = reply ? json_loads(reply, 0, NULL) : NULL;
	json_t *ctx = json_object(), *out = NULL, *errors = NULL, *info = NULL, *v;

	/* No "steps": needs outside the batch are the store's to check. */
	if ((v = json_object_get(rd, "defaults")) && !json_is_null(v))
		json_object_set(ctx, "defaults", v);
	if ((v = json_object_get(rd, "limits")) && !json_is_null(v))
		json_object_set(ctx, "limits", v);
	if (workflow_normalize_steps(ctx, job->add_steps, &out, &errors) < 0) {
		char *list = workflow_errors_string(errors);
		struct buf m = BUF_INIT;

		buf_addf(&m, "invalid cairn.add_steps:\n%s", list ? list : "");
		log_info("step \"%s\" of run %s added invalid steps", job->step_id, job->run_id);
		job_complete_to_fail(job, "invalid_add_steps", m.data, false);
		buf_release(&m);
		free(list);
	} else {
		info = json_loads(job->params[5], 0, NULL);
		if (!info)
			abort(); /* we dumped it ourselves */
		json_object_set(info, "add_steps", out);
		free(job->params[5]);
		job->params[5] = dump(info);
		job->adds = json_array_size(out) > 0;
		log_debug("step \"%s\" of run %s adds %zu step(s)", job->step_id, job->run_id,
			  json_array_size(out));
	}
	json_decref(job->add_steps);
	job->add_steps = NULL;
	json_decref(info);
	json_decref(out);
	json_decref(errors);
	json_decref(ctx);
	json_decref(rd);
}

static void defaults_result(PGresult *res, void *arg)
{
	struct job *job = arg;
	struct lease *l = job->l;

	if (!job->prev && !job->next && l->jobs != job) {
		job_unref(job); /* already removed */
		return;
	}
	if (!res) {
		if (++job->tries < LEASE_REPORT_TRIES) {
			log_warn("lost the database while reading the defaults of run %s, retrying",
				 job->run_id);
			timer_add_ms(job->retry_ev, LEASE_REPORT_RETRY_MS);
			job_unref(job);
			return;
		}
		log_error("gave up reporting the success of step \"%s\" of run %s",
			  job->step_id, job->run_id);
		job_remove(job);
		job_unref(job);
		lease_kick(l);
		return;
	}
	if (pgq_ok(res)) {
		job_add_steps(job, PQntuples(res) == 1 && !PQgetisnull(res, 0, 0) ?
			      PQgetvalue(res, 0, 0) : NULL);
	} else {
		struct buf m = BUF_INIT;

		buf_addf(&m, "could not read the run's defaults for its added steps: %s",
			 pgq_errmsg(res));
		json_decref(job->add_steps);
		job->add_steps = NULL;
		job_complete_to_fail(job, "report_error", m.data, true);
		buf_release(&m);
	}
	job_report_send(job);
	job_unref(job);
}

static void defaults_send(struct job *job)
{
	const char *params[1] = { job->run_id };

	job->refs++;
	pgq_exec(job->l->db, sql_run_defaults, 1, params, defaults_result, job);
}

static void ckpt_final_done(void *arg)
{
	struct job *job = arg;

	job_report_send(job);
	job_unref(job);
}

/* The executor is done with the step: report its outcome. */
static void exec_done(struct exec_job *ej, const struct exec_result *res, void *arg)
{
	struct job *job = arg;
	struct lease *l = job->l;
	json_t *info;
	char when[40];

	job->ex_job = NULL;
	l->executing--;
	if (l->last_full || l->notified) {
		l->notified = false;
		lease_kick(l);
	}
	if (job->fenced) {
		/* Another worker or nobody runs it now: this copy is stale. */
		executor_forget(l->ex, job->run_id, job->step_id);
		job_remove(job);
		return;
	}
	if (job->ckpt && res->success)
		ckpt_job_finish(job->ckpt, false, NULL, NULL);
	iso_time(res->started_at_ms, when, sizeof(when));
	info = json_pack("{s:s, s:I, s:O}", "started_at", when,
			 "duration_ms", (json_int_t)res->duration_ms, "logs", res->logs);
	if (res->exit_code >= 0)
		json_object_set_new(info, "exit_code", json_integer(res->exit_code));
	job->params[0] = xstrdup(job->run_id);
	job->params[1] = xstrdup(job->step_id);
	job->params[2] = xstrdup(job->epoch);
	if (res->success) {
		json_t *adds = json_object_get(json_object_get(res->output, "cairn"), "add_steps");

		job->report = REPORT_COMPLETE;
		job->params[3] = dump(res->output);
		job->params[4] = dump(res->effects);
		job->params[5] = dump(info);
		job->nparams = 6;
		log_debug("step \"%s\" of run %s succeeded", job->step_id, job->run_id);
		if (adds) {
			/* Normalized against the run's defaults before the report. */
			job->add_steps = json_deep_copy(adds);
			json_decref(info);
			defaults_send(job);
			return;
		}
	} else {
		json_t *err = json_pack("{s:s, s:s, s:b}", "reason", res->reason,
					"message", res->message, "retryable", res->retryable);

		if (res->exit_code >= 0)
			json_object_set_new(err, "exit_code", json_integer(res->exit_code));
		if (res->signo > 0)
			json_object_set_new(err, "signal", json_integer(res->signo));
		job->report = REPORT_FAIL;
		job->params[3] = dump(err);
		job->params[4] = dump(info);
		job->nparams = 5;
		json_decref(err);
		log_info("step \"%s\" of run %s (attempt %d) failed: %s", job->step_id, job->run_id,
			 job->attempt, res->message);
		if (job->ckpt) {
			/* A last checkpoint of the failed attempt, then the report. */
			json_decref(info);
			job->refs++;
			ckpt_job_finish(job->ckpt, true, ckpt_final_done, job);
			return;
		}
	}
	json_decref(info);
	job_report_send(job);
}

/* Spawns the job's step, or reports why it could not start. */
static void job_spawn(struct job *job, const char *fail_reason, const char *fail_msg)
{
	struct lease *l = job->l;
	struct exec_step step;
	json_t *env = NULL;
	const char *reason = fail_reason;
	bool retryable = true;
	char err[512];

	snprintf(err, sizeof(err), "%s", fail_msg ? fail_msg : "");
	memset(&step, 0, sizeof(step));
	step.run_id = job->run_id;
	step.step_id = job->step_id;
	step.attempt = job->attempt;
	step.spec = job->spec;
	step.input = job->input;
	step.needs_output = job->needs;
	step.done_effects = job->done;
	if (job->ckpt && ckpt_job_resumed_from(job->ckpt) > 0) {
		char seq[24];

		snprintf(seq, sizeof(seq), "%lld", (long long)ckpt_job_resumed_from(job->ckpt));
		env = json_pack("{s:s}", "CAIRN_RESUMED_FROM", seq);
		step.env_extra = env;
	}
	if (reason) {
		job->ex_job = NULL;
	} else if (!job->spec || !job->input || !job->needs || !job->done) {
		reason = "bad_spec";
		retryable = false;
		snprintf(err, sizeof(err), "the claimed step could not be decoded");
		job->ex_job = NULL;
	} else {
		int64_t t0 = mono_us();

		job->ex_job = executor_start(l->ex, &step, exec_done, job, &reason, &retryable,
					     err, sizeof(err));
		log_debug("step \"%s\" of run %s set up and spawned in %.1f ms", job->step_id,
			  job->run_id, (double)(mono_us() - t0) / 1000.0);
	}
	if (job->ex_job) {
		timer_add_ms(job->start_ev, LEASE_START_DELAY_MS);
		if (job->ckpt)
			ckpt_job_running(job->ckpt, executor_job_pid(job->ex_job));
	} else {
		/* Report the failure as if the step had run and failed. */
		struct exec_result r;

		memset(&r, 0, sizeof(r));
		r.reason = reason;
		r.retryable = retryable;
		r.exit_code = -1;
		r.started_at_ms = wall_ms();
		r.logs = json_array();
		snprintf(r.message, sizeof(r.message), "%s", err);
		job->ex_job = NULL;
		ckpt_job_free(job->ckpt);
		job->ckpt = NULL;
		exec_done(NULL, &r, job);
		json_decref(r.logs);
	}
	json_decref(env);
	json_decref(job->spec);
	json_decref(job->input);
	json_decref(job->needs);
	json_decref(job->done);
	job->spec = job->input = job->needs = job->done = NULL;
}

/* The checkpoint chain is restored (or there is none): start the step. */
static void ckpt_ready(void *arg, enum ckpt_ready how, const char *message)
{
	struct job *job = arg;

	job->restoring = false;
	if (job->l->stopping && how == CKPT_READY) {
		job_spawn(job, "worker_shutdown", "the worker stopped before the step started");
	} else if (how == CKPT_FENCED) {
		job->l->executing--;
		job_fence(job, "checkpoints refused");
	} else if (how == CKPT_FAILED) {
		job_spawn(job, "checkpoint_restore", message);
	} else {
		job_spawn(job, NULL, NULL);
	}
	job_unref(job);
}

/* A step's checkpoints need its folder: ids that cannot name one are left
 * to the executor to refuse. */
static bool ckpt_names_ok(const char *s)
{
	return *s && *s != '.' && !strchr(s, '/') && strlen(s) <= 200;
}

/* Starts one claimed row: restores its checkpoints first when it has any. */
static void job_start(struct lease *l, PGresult *res, int row)
{
	job_start_row(l, PQgetvalue(res, row, 0), PQgetvalue(res, row, 1), PQgetvalue(res, row, 2),
		      PQgetvalue(res, row, 3), json_loads(PQgetvalue(res, row, 4), 0, NULL),
		      PQgetisnull(res, row, 5) ? json_null() :
		      json_loads(PQgetvalue(res, row, 5), JSON_DECODE_ANY, NULL),
		      PQgetisnull(res, row, 6) ? json_object() : json_loads(PQgetvalue(res, row, 6), 0, NULL),
		      PQgetisnull(res, row, 7) ? json_array() : json_loads(PQgetvalue(res, row, 7), 0, NULL));
}

/* Starts one leased attempt; steals spec, input, needs and done. */
static void job_start_row(struct lease *l, const char *run_id, const char *step_id,
			  const char *attempt, const char *epoch, json_t *spec, json_t *input,
			  json_t *needs, json_t *done)
{
	struct job *job = xcalloc(1, sizeof(*job));
	int64_t every;

	job->l = l;
	job->refs = 1;
	job->run_id = xstrdup(run_id ? run_id : "");
	job->step_id = xstrdup(step_id ? step_id : "");
	job->attempt = atoi(attempt);
	snprintf(job->epoch, sizeof(job->epoch), "%s", epoch);
	job->renewed_ms = mono_ms();
	job->start_ev = evtimer_new(l->base, start_cb, job);
	job->retry_ev = evtimer_new(l->base, retry_cb, job);
	job->next = l->jobs;
	if (l->jobs)
		l->jobs->prev = job;
	l->jobs = job;
	l->njobs++;
	l->executing++;

	job->spec = spec;
	job->input = input;
	job->needs = needs;
	job->done = done;
	every = ckpt_job_every_ms(job->spec);
	if (every > 0 && ckpt_names_ok(job->run_id) && ckpt_names_ok(job->step_id)) {
		struct buf ws = BUF_INIT, ctl = BUF_INIT;
		const char *wd = executor_work_dir(l->ex);

		buf_addf(&ws, "%s/%s/%s/workspace", wd, job->run_id, job->step_id);
		buf_addf(&ctl, "%s/%s/%s/ctl", wd, job->run_id, job->step_id);
		job->ckpt = ckpt_job_new(l->base, l->db, l->opts.name, job->run_id, job->step_id,
					 job->epoch, job->attempt, every, ws.data, ctl.data);
		buf_release(&ws);
		buf_release(&ctl);
		job->refs++;
		job->restoring = true;
		ckpt_job_prepare(job->ckpt, ckpt_ready, job);
		return;
	}
	job_spawn(job, NULL, NULL);
}

/* ---- claiming ---- */

static int lease_capacity(const struct lease *l)
{
	return l->opts.concurrency - l->executing - l->reserved;
}

static void claim_result(PGresult *res, void *arg)
{
	struct lease *l = arg;
	int n = 0, max = l->claiming;

	if (!res || !pgq_ok(res)) {
		/* Once per outage, not once per poll. */
		log_msg(l->claim_failing ? LOG_DEBUG : LOG_WARN, "could not claim steps: %s",
			pgq_errmsg(res));
		l->claim_failing = true;
	} else {
		if (l->claim_failing)
			log_info("claiming steps again");
		l->claim_failing = false;
		n = PQntuples(res);
		for (int i = 0; i < n; i++)
			job_start(l, res, i);
	}
	l->claiming = 0;
	lease_check_done(l);
	l->last_full = n > 0 && n >= max;
	if (l->last_full || l->want_claim) {
		l->want_claim = false;
		lease_kick(l);
	}
}

/* Claims as many steps as there is room for, unless a claim is running. */
static void lease_kick(struct lease *l)
{
	char max[16], lease_ms[24];
	const char *params[4];
	int room;

	if (!l->started || l->draining || l->stopping)
		return;
	/* Claim only on a connection that marks this worker alive: if it
	 * dies, the store takes its leases back at once. */
	if (!l->registered || !pgq_connected(l->db))
		return;
	if (l->claiming) {
		l->want_claim = true;
		return;
	}
	room = lease_capacity(l);
	if (room <= 0)
		return;
	snprintf(max, sizeof(max), "%d", room);
	snprintf(lease_ms, sizeof(lease_ms), "%lld", (long long)l->opts.lease_ms);
	params[0] = l->opts.name;
	params[1] = l->queues_lit;
	params[2] = max;
	params[3] = lease_ms;
	l->claiming = room;
	pgq_exec(l->db, sql_claim, 4, params, claim_result, l);
}

static void poll_cb(evutil_socket_t fd, short what, void *arg)
{
	struct lease *l = arg;
	int64_t p = l->opts.poll_ms;
	int64_t jitter = p / 5;

	lease_kick(l);
	if (!l->draining && !l->stopping)
		timer_add_ms(l->poll_ev, p - jitter + (jitter ? random() % (2 * jitter + 1) : 0));
}

static void notify_cb(const char *channel, const char *payload, void *arg)
{
	struct lease *l = arg;
	bool ours = false;

	for (const char *const *q = l->opts.queues; *q; q++)
		if (!strcmp(*q, payload))
			ours = true;
	if (!ours)
		return;
	if (lease_capacity(l) > 0)
		lease_kick(l);
	else
		l->notified = true;
}

static void listen_connected(struct pgq *q, void *arg)
{
	/* Notifications may have been missed while disconnected. */
	lease_kick(arg);
}

/* ---- liveness ---- */

static void register_result(PGresult *res, void *arg)
{
	struct lease *l = arg;

	event_del(l->register_ev);
	if (!res)
		return; /* lost again: the next connect registers */
	if (!pgq_ok(res))
		log_warn("could not register worker \"%s\": %s; its leases will only be "
			 "taken back when they expire", l->opts.name, pgq_errmsg(res));
	else
		log_debug("registered worker \"%s\"", l->opts.name);
	l->registered = true;
	lease_kick(l);
}

/* Every (re)connect of the main connection: register before claiming. */
static void db_connected(struct pgq *q, void *arg)
{
	struct lease *l = arg;
	const char *params[2] = { l->opts.name, l->queues_lit };

	l->registered = false;
	pgq_exec(l->db, sql_register, 2, params, register_result, l);
	timer_add_ms(l->register_ev, LEASE_REGISTER_WARN_MS);
}

/* The store's lock on the name is held by a session still alive. */
static void register_slow_cb(evutil_socket_t fd, short what, void *arg)
{
	struct lease *l = arg;

	log_warn("worker \"%s\" is still waiting to register: another live session holds "
		 "this name (is a worker with the same --name running?); no step is claimed "
		 "until it ends", l->opts.name);
}

/* ---- heartbeats ---- */

static void hb_send(struct lease *l);

static void hb_result(PGresult *res, void *arg)
{
	struct lease *l = arg;

	l->hb_inflight = false;
	if (l->hb_again) {
		l->hb_again = false;
		hb_send(l);
	}
	if (!res) {
		log_warn("lost the database while renewing leases");
		return;
	}
	if (!pgq_ok(res)) {
		log_warn("could not renew leases: %s", pgq_errmsg(res));
		return;
	}
	for (struct job *job = l->jobs; job; job = job->next)
		if (job->renewed_ms <= l->hb_sent_ms)
			job->renewed_ms = l->hb_sent_ms;
	for (int i = 0; i < PQntuples(res); i++) {
		struct job *job = job_find(l, PQgetvalue(res, i, 0), PQgetvalue(res, i, 1));

		if (job)
			job_fence(job, "cancelled, expired or taken over");
	}
}

static void hb_cb(evutil_socket_t fd, short what, void *arg)
{
	struct lease *l = arg;

	timer_add_ms(l->hb_ev, l->opts.lease_ms / 3 > 0 ? l->opts.lease_ms / 3 : 1);
	/* A lease the store has not extended for a whole lease period is
	 * someone else's by now: stop the step rather than run it twice. */
	for (struct job *job = l->jobs, *next; job; job = next) {
		next = job->next;
		if (!job->fenced && mono_ms() - job->renewed_ms > l->opts.lease_ms)
			job_fence(job, "its lease could not be renewed in time");
	}
	if (!l->hb_inflight)
		hb_send(l);
}

/* A run failed or was cancelled (cairn_stop): when this worker runs one of
 * its steps, a heartbeat now learns which to stop, within a round trip
 * instead of a third of the lease. */
static void stop_notify_cb(const char *channel, const char *payload, void *arg)
{
	struct lease *l = arg;
	bool ours = false;

	for (struct job *job = l->jobs; job && !ours; job = job->next)
		ours = !job->fenced && strcmp(job->run_id, payload) == 0;
	if (!ours)
		return;
	if (l->hb_inflight)
		l->hb_again = true;
	else
		hb_send(l);
}

/* Renews every lease this worker holds in one call. */
static void hb_send(struct lease *l)
{
	struct buf runs = BUF_INIT, steps = BUF_INIT, epochs = BUF_INIT;
	char lease_ms[24];
	const char *params[5];
	int n = 0;

	buf_adds(&runs, "{");
	buf_adds(&steps, "{");
	buf_adds(&epochs, "{");
	for (struct job *job = l->jobs; job; job = job->next) {
		if (job->fenced)
			continue;
		array_add(&runs, job->run_id);
		array_add(&steps, job->step_id);
		array_add(&epochs, job->epoch);
		n++;
	}
	buf_adds(&runs, "}");
	buf_adds(&steps, "}");
	buf_adds(&epochs, "}");
	if (n) {
		snprintf(lease_ms, sizeof(lease_ms), "%lld", (long long)l->opts.lease_ms);
		params[0] = l->opts.name;
		params[1] = runs.data;
		params[2] = steps.data;
		params[3] = epochs.data;
		params[4] = lease_ms;
		l->hb_inflight = true;
		l->hb_sent_ms = mono_ms();
		pgq_exec(l->db, sql_heartbeat, 5, params, hb_result, l);
	}
	buf_release(&runs);
	buf_release(&steps);
	buf_release(&epochs);
}

/* ---- life cycle ---- */

static void stop_deadline_cb(evutil_socket_t fd, short what, void *arg)
{
	struct lease *l = arg;

	if (l->done_called)
		return;
	log_warn("%d step(s) could not be reported in time, stopping anyway", l->njobs);
	l->done_called = true;
	if (l->opts.done)
		l->opts.done(l->opts.done_arg);
}

static void drain_timeout_cb(evutil_socket_t fd, short what, void *arg)
{
	struct lease *l = arg;

	log_warn("drain timeout: stopping %d running step(s)", l->executing);
	lease_stop(l);
}

struct lease *lease_new(struct event_base *base, struct pgq *db, struct pgq *listen_db,
			struct executor *ex, const struct lease_opts *opts)
{
	struct lease *l = xcalloc(1, sizeof(*l));
	struct buf q = BUF_INIT;

	l->base = base;
	l->db = db;
	l->listen_db = listen_db;
	l->ex = ex;
	l->opts = *opts;
	if (l->opts.concurrency < 1)
		l->opts.concurrency = 1;
	if (l->opts.lease_ms < 300)
		l->opts.lease_ms = 300;
	if (l->opts.poll_ms <= 0)
		l->opts.poll_ms = 1000;
	buf_adds(&q, "{");
	for (const char *const *s = opts->queues; *s; s++)
		array_add(&q, *s);
	buf_adds(&q, "}");
	l->queues_lit = buf_detach(&q);
	l->poll_ev = evtimer_new(base, poll_cb, l);
	l->hb_ev = evtimer_new(base, hb_cb, l);
	l->drain_ev = evtimer_new(base, drain_timeout_cb, l);
	l->stop_ev = evtimer_new(base, stop_deadline_cb, l);
	l->register_ev = evtimer_new(base, register_slow_cb, l);
	return l;
}

void lease_start(struct lease *l)
{
	l->started = true;
	pgq_on_connect(l->db, db_connected, l);
	if (pgq_connected(l->db))
		db_connected(l->db, l);
	/* One connection for both: db_connected claims once registered. */
	if (l->listen_db != l->db)
		pgq_on_connect(l->listen_db, listen_connected, l);
	pgq_listen(l->listen_db, "cairn_ready", notify_cb, l);
	pgq_listen(l->listen_db, "cairn_stop", stop_notify_cb, l);
	timer_add_ms(l->hb_ev, l->opts.lease_ms / 3 > 0 ? l->opts.lease_ms / 3 : 1);
	poll_cb(-1, 0, l);
}

void lease_drain(struct lease *l)
{
	if (l->draining || l->stopping)
		return;
	l->draining = true;
	event_del(l->poll_ev);
	log_info("draining: no new steps, waiting for %d running step(s)", l->njobs);
	timer_add_ms(l->drain_ev, l->opts.drain_timeout_ms);
	lease_check_done(l);
}

void lease_stop(struct lease *l)
{
	if (l->stopping)
		return;
	l->stopping = true;
	event_del(l->poll_ev);
	event_del(l->drain_ev);
	for (struct job *job = l->jobs; job; job = job->next)
		if (job->ex_job)
			executor_kill(job->ex_job, "worker_shutdown", true);
	timer_add_ms(l->stop_ev, LEASE_STOP_GRACE_MS);
	lease_check_done(l);
}

int lease_jobs(const struct lease *l)
{
	return l->njobs;
}

void lease_free(struct lease *l)
{
	if (!l)
		return;
	while (l->jobs) {
		struct job *job = l->jobs;

		l->jobs = job->next;
		job->prev = job->next = NULL;
		job_unref(job);
	}
	event_free(l->poll_ev);
	event_free(l->hb_ev);
	event_free(l->drain_ev);
	event_free(l->stop_ev);
	event_free(l->register_ev);
	free(l->queues_lit);
	free(l);
}
