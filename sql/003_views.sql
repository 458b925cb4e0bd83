-- 003_views: history for people, in plain SQL, and the roles' grants.

-- One row per run, with its duration and where it stands.
CREATE VIEW cairn.run_history AS
SELECT r.run_id, r.workflow, r.status, r.tenant, r.labels,
       r.created_at, r.finished_at,
       coalesce(r.finished_at, now()) - r.created_at AS duration,
       r.steps_done, r.steps_total,
       r.error->>'step_id' AS failed_step,
       r.error->>'reason' AS failure_reason,
       r.error->>'message' AS failure_message,
       r.idempotency_key, r.parent_run_id, r.forked_from
  FROM cairn.runs r;

-- One row per attempt of every step, rebuilt from the events.
CREATE VIEW cairn.step_attempts AS
SELECT e.run_id, r.workflow, e.step_id, e.attempt,
       max(e.payload->>'worker') FILTER (WHERE e.type = 'StepLeased') AS worker,
       min(e.at) FILTER (WHERE e.type = 'StepLeased') AS leased_at,
       min(coalesce((e.payload->>'started_at')::timestamptz, e.at))
           FILTER (WHERE e.type = 'StepStarted') AS started_at,
       max(e.at) FILTER (WHERE e.type IN ('StepSucceeded', 'StepFailed', 'StepTimedOut',
           'StepLeaseExpired')) AS finished_at,
       CASE
         WHEN bool_or(e.type = 'StepSucceeded') THEN 'succeeded'
         WHEN bool_or(e.type = 'StepTimedOut') THEN 'timed_out'
         WHEN bool_or(e.type = 'StepLeaseExpired') THEN 'lease_expired'
         WHEN bool_or(e.type = 'StepFailed') THEN 'failed'
         ELSE 'in_progress'
       END AS outcome,
       max(e.payload->'error'->>'reason') FILTER (WHERE e.type IN ('StepFailed', 'StepTimedOut',
           'StepLeaseExpired')) AS error_reason,
       max(e.payload->'error'->>'message') FILTER (WHERE e.type IN ('StepFailed', 'StepTimedOut',
           'StepLeaseExpired')) AS error_message,
       max(e.at) FILTER (WHERE e.type IN ('StepSucceeded', 'StepFailed', 'StepTimedOut',
           'StepLeaseExpired'))
         - min(coalesce((e.payload->>'started_at')::timestamptz, e.at))
           FILTER (WHERE e.type = 'StepStarted') AS duration
  FROM cairn.events e
  JOIN cairn.runs r USING (run_id)
 WHERE e.attempt IS NOT NULL
   AND e.type IN ('StepLeased', 'StepStarted', 'StepSucceeded', 'StepFailed', 'StepTimedOut',
                  'StepLeaseExpired', 'StepHeartbeat', 'CheckpointCommitted')
 GROUP BY e.run_id, r.workflow, e.step_id, e.attempt;

-- Steps waiting for people (approval steps, and run steps behind an
-- "approve" gate), with what the approver is asked to look at.
CREATE VIEW cairn.pending_approvals AS
SELECT s.run_id, r.workflow, s.step_id, s.kind,
       cairn._approval_of(s)->>'prompt' AS prompt,
       coalesce((cairn._approval_of(s)->>'quorum')::int, 1) AS quorum,
       (SELECT count(*) FROM cairn.approvals a
         WHERE a.run_id = s.run_id AND a.step_id = s.step_id AND a.decision = 'approved'
           AND a.at >= s.started_at) AS approvals,
       (SELECT e.payload->'show' FROM cairn.events e
         WHERE e.run_id = s.run_id AND e.step_id = s.step_id AND e.type = 'ApprovalRequested'
         ORDER BY e.seq DESC LIMIT 1) AS shows,
       s.started_at AS requested_at,
       s.wake_at AS times_out_at,
       cairn._approval_of(s)->>'on_timeout' AS on_timeout
  FROM cairn.steps s
  JOIN cairn.runs r USING (run_id)
 WHERE s.status = 'waiting' AND cairn._approval_of(s) IS NOT NULL;

-- Who decided what, and when.
CREATE VIEW cairn.approval_decisions AS
SELECT a.run_id, r.workflow, a.step_id, a.decision, a.actor, a.comment, a.at
  FROM cairn.approvals a
  JOIN cairn.runs r USING (run_id);

-- Every event of every run, with a one-line summary.
CREATE VIEW cairn.run_timeline AS
SELECT e.run_id, e.seq, e.at, e.type, e.step_id, e.attempt, e.lease_epoch,
       CASE e.type
         WHEN 'StepLeased' THEN 'leased by ' || (e.payload->>'worker')
         WHEN 'StepFailed' THEN coalesce(e.payload->'error'->>'reason', '') || ': '
                                || coalesce(e.payload->'error'->>'message', '')
         WHEN 'StepTimedOut' THEN coalesce(e.payload->'error'->>'message', 'timed out')
         WHEN 'StepLeaseExpired' THEN coalesce(e.payload->'error'->>'message', '')
         WHEN 'StepRetryScheduled' THEN 'retry in ' || (e.payload->>'delay_ms') || ' ms'
         WHEN 'ApprovalGranted' THEN 'approved by ' || (e.payload->>'actor')
         WHEN 'ApprovalRejected' THEN 'rejected by ' || (e.payload->>'actor')
         WHEN 'ApprovalRequested' THEN e.payload->>'prompt'
         WHEN 'StepWaiting' THEN 'waiting for ' || (e.payload->>'reason')
         WHEN 'CheckpointFallback' THEN 'checkpoint ' || (e.payload->>'bad_seq') || ' does not verify: '
                                || coalesce('resumed from ' || (e.payload->>'used_seq'), 'started empty')
         WHEN 'SignalReceived' THEN 'signal ' || (e.payload->>'name')
         WHEN 'RunFailed' THEN 'step ' || (e.payload->'error'->>'step_id') || ' failed: '
                                || coalesce(e.payload->'error'->>'reason', '')
         WHEN 'RunCancelled' THEN 'cancelled by ' || coalesce(e.payload->'error'->>'actor', '?')
         ELSE ''
       END AS summary,
       e.payload
  FROM cairn.events e;

-- Effects committed, one row per key.
CREATE VIEW cairn.committed_effects AS
SELECT f.run_id, f.step_id, f.effect_key, f.attempt, f.payload, f.committed_at
  FROM cairn.effects f;

-- Grants: only the functions write; readers see the views.
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA cairn FROM PUBLIC;
GRANT USAGE ON SCHEMA cairn TO cairn_engine, cairn_worker, cairn_reader;
GRANT EXECUTE ON FUNCTION cairn.claim(text, text[], int, int), cairn.start(uuid, text, bigint, jsonb),
	cairn.heartbeat(text, uuid[], text[], bigint[], int),
	cairn.complete(uuid, text, bigint, jsonb, jsonb, jsonb, jsonb),
	cairn.fail(uuid, text, bigint, jsonb, jsonb),
	cairn.append_log(uuid, text, bigint, text, text, boolean),
	cairn.checkpoint(uuid, text, bigint, bigint, text, bigint, bigint, text, text, jsonb, bytea),
	cairn.worker_register(text, text[]),
	cairn.checkpoint_fallback(uuid, text, bigint, bigint, bigint, text)
	TO cairn_worker;
GRANT EXECUTE ON FUNCTION cairn.submit(jsonb, jsonb, text, text, jsonb),
	cairn.reap_expired(int), cairn.fire_timers(int),
	cairn.approve(uuid, text, text, text), cairn.reject(uuid, text, text, text),
	cairn.signal(uuid, text, jsonb, text), cairn.cancel(uuid, text, text),
	cairn.token_create(text, text[]), cairn.replay_check(uuid)
	TO cairn_engine;
GRANT SELECT ON cairn.runs, cairn.steps, cairn.events, cairn.step_logs, cairn.api_tokens,
	cairn.approvals, cairn.effects TO cairn_engine;
GRANT SELECT ON cairn.run_history, cairn.step_attempts, cairn.pending_approvals,
	cairn.approval_decisions, cairn.run_timeline, cairn.committed_effects TO cairn_reader;
GRANT SELECT ON cairn.dead_workers, cairn.sessionless_workers TO cairn_reader, cairn_engine;
-- pure helpers the views call with the reader's rights
GRANT EXECUTE ON FUNCTION cairn._approval_of(cairn.steps), cairn._worker_lock_class()
	TO cairn_reader, cairn_engine;
