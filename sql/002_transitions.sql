-- 002_transitions: the only writers of the store. Each public function is one
-- transition: it locks the run, appends events with cairn._append (which
-- applies each to the projections through cairn._apply) and ends with
-- cairn._end. Replaying a run's events through cairn._apply rebuilds its
-- runs and steps rows exactly (cairn.replay_check).
--
-- SQLSTATEs: CN001 fenced, CN002 not found, CN003 conflict, CN004 invalid.

-- Applies one event to the projections. Pure function of the event and the
-- projection state before it: no clock, no randomness.
CREATE FUNCTION cairn._apply(p_run uuid, p_seq bigint, p_type text, p_step text,
	p_attempt int, p_epoch bigint, p jsonb, p_at timestamptz)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
	s jsonb;
	v_done int;
BEGIN
	CASE p_type
	WHEN 'RunCreated' THEN
		INSERT INTO cairn.runs (run_id, tenant, workflow, definition, input, status,
			idempotency_key, request_hash, labels, parent_run_id, forked_from,
			max_steps, max_attempts_total, deadline_at, created_at, updated_at, last_seq)
		VALUES (p_run, p->>'tenant', p->>'workflow', p->'definition', p->'input', 'running',
			p->>'idempotency_key', p->>'request_hash', coalesce(p->'labels', '{}'),
			(p->>'parent_run_id')::uuid, (p->>'forked_from')::uuid,
			(p->'definition'->'limits'->>'max_steps')::int,
			(p->'definition'->'limits'->>'max_attempts_total')::int,
			p_at + (p->'definition'->'limits'->>'max_duration_ms')::bigint * interval '1 ms',
			p_at, p_at, p_seq);
	WHEN 'StepsAdded' THEN
		FOR s IN SELECT * FROM jsonb_array_elements(p->'steps') LOOP
			SELECT count(*) INTO v_done FROM cairn.steps
			 WHERE run_id = p_run AND status IN ('succeeded', 'skipped')
			   AND step_id IN (SELECT jsonb_array_elements_text(s->'needs'));
			INSERT INTO cairn.steps (run_id, step_id, kind, status, max_attempts, needs,
				pending_needs, queue, priority, spec, updated_at)
			VALUES (p_run, s->>'id', s->>'kind', 'pending',
				coalesce((s->'retry'->>'max_attempts')::int, 1),
				ARRAY(SELECT jsonb_array_elements_text(s->'needs')),
				jsonb_array_length(coalesce(s->'needs', '[]')) - v_done,
				coalesce(s->>'queue', 'default'), coalesce((s->>'priority')::int, 0),
				s, p_at);
		END LOOP;
		UPDATE cairn.runs SET steps_total = steps_total + jsonb_array_length(p->'steps')
		 WHERE run_id = p_run;
	WHEN 'StepReady' THEN
		UPDATE cairn.steps SET status = 'ready', ready_at = coalesce((p->>'ready_at')::timestamptz, p_at),
			wake_at = NULL, updated_at = p_at
		 WHERE run_id = p_run AND step_id = p_step;
	WHEN 'StepWaiting', 'ApprovalRequested' THEN
		UPDATE cairn.steps SET status = 'waiting', wake_at = (p->>'wake_at')::timestamptz,
			started_at = coalesce(started_at, p_at), updated_at = p_at
		 WHERE run_id = p_run AND step_id = p_step;
	WHEN 'StepLeased' THEN
		UPDATE cairn.steps SET status = 'leased', attempt = p_attempt, lease_epoch = p_epoch,
			lease_owner = p->>'worker', lease_expires_at = (p->>'lease_expires_at')::timestamptz,
			started_at = NULL, updated_at = p_at
		 WHERE run_id = p_run AND step_id = p_step;
	WHEN 'StepStarted' THEN
		UPDATE cairn.steps SET status = 'running',
			started_at = coalesce((p->>'started_at')::timestamptz, p_at), updated_at = p_at
		 WHERE run_id = p_run AND step_id = p_step;
	WHEN 'StepHeartbeat' THEN
		UPDATE cairn.steps SET lease_expires_at = (p->>'lease_expires_at')::timestamptz,
			updated_at = p_at
		 WHERE run_id = p_run AND step_id = p_step;
	WHEN 'CheckpointCommitted' THEN
		UPDATE cairn.steps SET last_checkpoint = (p->>'seq')::bigint, updated_at = p_at
		 WHERE run_id = p_run AND step_id = p_step;
	WHEN 'StepSucceeded', 'StepSkipped' THEN
		UPDATE cairn.steps SET status = CASE p_type WHEN 'StepSucceeded' THEN 'succeeded' ELSE 'skipped' END,
			output = p->'output', error = NULL,
			lease_expires_at = NULL, wake_at = NULL, finished_at = p_at, updated_at = p_at
		 WHERE run_id = p_run AND step_id = p_step;
		UPDATE cairn.steps SET pending_needs = pending_needs - 1
		 WHERE run_id = p_run AND p_step = ANY (needs) AND status = 'pending';
		UPDATE cairn.runs SET steps_done = steps_done + 1 WHERE run_id = p_run;
	WHEN 'StepFailed', 'StepTimedOut', 'StepLeaseExpired' THEN
		UPDATE cairn.steps SET error = p->'error', lease_expires_at = NULL, wake_at = NULL,
			status = CASE WHEN (p->>'final')::boolean THEN 'failed' ELSE status END,
			finished_at = CASE WHEN (p->>'final')::boolean THEN p_at ELSE finished_at END,
			updated_at = p_at
		 WHERE run_id = p_run AND step_id = p_step;
	WHEN 'StepRetryScheduled' THEN
		UPDATE cairn.steps SET status = 'ready', ready_at = (p->>'ready_at')::timestamptz,
			updated_at = p_at
		 WHERE run_id = p_run AND step_id = p_step;
	WHEN 'TimerFired', 'ApprovalGranted', 'ApprovalRejected', 'SignalReceived', 'RunForked',
		'CheckpointFallback' THEN
		NULL; -- recorded for history; the step's next event changes it
	WHEN 'RunRetried' THEN
		PERFORM cairn._apply_retried(p_run, p, p_at);
	WHEN 'RunSucceeded' THEN
		UPDATE cairn.runs SET status = 'succeeded', finished_at = p_at WHERE run_id = p_run;
	WHEN 'RunFailed', 'RunCancelled' THEN
		UPDATE cairn.runs SET status = CASE p_type WHEN 'RunFailed' THEN 'failed' ELSE 'cancelled' END,
			error = p->'error', finished_at = p_at
		 WHERE run_id = p_run;
		UPDATE cairn.steps SET status = 'cancelled', lease_expires_at = NULL, wake_at = NULL,
			finished_at = p_at, updated_at = p_at
		 WHERE run_id = p_run AND status NOT IN ('succeeded', 'failed', 'cancelled', 'skipped');
	END CASE;
END $$;

-- Locks the run for this transition and returns its last seq.
CREATE FUNCTION cairn._begin(p_run uuid, p_need_running boolean DEFAULT true)
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
	v_seq bigint;
	v_status text;
BEGIN
	SELECT last_seq, status INTO v_seq, v_status FROM cairn.runs WHERE run_id = p_run FOR UPDATE;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'run % not found', p_run USING ERRCODE = 'CN002';
	END IF;
	IF p_need_running AND v_status <> 'running' THEN
		RAISE EXCEPTION 'run % is %', p_run, v_status USING ERRCODE = 'CN003';
	END IF;
	RETURN v_seq;
END $$;

-- Appends the event numbered p_seq (the caller's counter) and applies it.
CREATE FUNCTION cairn._append(p_run uuid, p_seq bigint, p_type text, p_step text,
	p_attempt int, p_epoch bigint, p_payload jsonb, p_at timestamptz)
RETURNS bigint LANGUAGE plpgsql AS $$
BEGIN
	INSERT INTO cairn.events (run_id, seq, type, step_id, attempt, lease_epoch, payload, at)
	VALUES (p_run, p_seq, p_type, p_step, p_attempt, p_epoch, coalesce(p_payload, '{}'), p_at);
	PERFORM cairn._apply(p_run, p_seq, p_type, p_step, p_attempt, p_epoch,
		coalesce(p_payload, '{}'), p_at);
	IF p_type IN ('RunCancelled', 'RunFailed') THEN
		-- workers running its steps stop them now, not at their next heartbeat
		PERFORM pg_notify('cairn_stop', p_run::text);
	END IF;
	IF p_type IN ('ApprovalRequested', 'ApprovalGranted', 'ApprovalRejected') THEN
		INSERT INTO cairn.webhook_deliveries (run_id, seq, event_type, step_id, payload, next_at, created_at)
		VALUES (p_run, p_seq, p_type, p_step, coalesce(p_payload, '{}'), p_at, p_at);
	END IF;
	RETURN p_seq;
END $$;

-- Records the run's last seq and tells listeners the run moved.
CREATE FUNCTION cairn._end(p_run uuid, p_seq bigint, p_at timestamptz)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
	UPDATE cairn.runs SET last_seq = p_seq, updated_at = p_at WHERE run_id = p_run;
	PERFORM pg_notify('cairn_events', p_run::text);
END $$;

-- The step row, locked; raises CN001 unless the lease p_epoch is current.
CREATE FUNCTION cairn._leased(p_run uuid, p_step text, p_epoch bigint)
RETURNS cairn.steps LANGUAGE plpgsql AS $$
DECLARE
	v cairn.steps;
BEGIN
	SELECT * INTO v FROM cairn.steps WHERE run_id = p_run AND step_id = p_step FOR UPDATE;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'step "%" of run % not found', p_step, p_run USING ERRCODE = 'CN002';
	END IF;
	IF v.lease_epoch <> p_epoch OR v.status NOT IN ('leased', 'running') THEN
		RAISE EXCEPTION 'step "%" of run %: lease epoch % is not current (current %, status %)',
			p_step, p_run, p_epoch, v.lease_epoch, v.status USING ERRCODE = 'CN001';
	END IF;
	RETURN v;
END $$;

-- The approval settings of a step: an approval step's own, or the gate
-- ("approve") of a run step; NULL when it has none.
CREATE FUNCTION cairn._approval_of(v cairn.steps)
RETURNS jsonb LANGUAGE sql IMMUTABLE AS $$
	SELECT CASE v.kind WHEN 'approval' THEN v.spec->'approval'
		ELSE nullif(v.spec->'approve', 'null') END;
$$;

-- ApprovalRequested, with the outputs of the steps the approver must see.
CREATE FUNCTION cairn._request_approval(p_run uuid, p_seq bigint, v cairn.steps, p_at timestamptz)
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
	a jsonb := cairn._approval_of(v);
	v_show jsonb;
BEGIN
	SELECT coalesce(jsonb_object_agg(step_id, output), '{}') INTO v_show FROM cairn.steps
	 WHERE run_id = p_run
	   AND step_id IN (SELECT jsonb_array_elements_text(coalesce(a->'show', '[]')));
	RETURN cairn._append(p_run, p_seq + 1, 'ApprovalRequested', v.step_id, NULL, NULL,
		jsonb_build_object('prompt', a->'prompt', 'quorum', coalesce((a->>'quorum')::int, 1),
			'show', v_show, 'gate', v.kind <> 'approval',
			'wake_at', p_at + (a->>'timeout_ms')::bigint * interval '1 ms'), p_at);
END $$;

-- Makes a step whose needs are met ready, or waiting for what its kind waits for.
CREATE FUNCTION cairn._activate(p_run uuid, p_seq bigint, v cairn.steps, p_at timestamptz)
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
	v_spec jsonb := v.spec;
	v_timeout bigint;
	v_sig cairn.signals;
	v_child uuid;
BEGIN
	CASE v.kind
	WHEN 'run' THEN
		IF cairn._approval_of(v) IS NOT NULL THEN
			RETURN cairn._request_approval(p_run, p_seq, v, p_at);
		END IF;
		p_seq := cairn._append(p_run, p_seq + 1, 'StepReady', v.step_id, NULL, NULL,
			jsonb_build_object('ready_at', p_at), p_at);
		PERFORM pg_notify('cairn_ready', v.queue);
	WHEN 'approval' THEN
		p_seq := cairn._request_approval(p_run, p_seq, v, p_at);
	WHEN 'sleep' THEN
		p_seq := cairn._append(p_run, p_seq + 1, 'StepWaiting', v.step_id, NULL, NULL,
			jsonb_build_object('reason', 'sleep',
				'wake_at', p_at + (v_spec->>'sleep_ms')::bigint * interval '1 ms'), p_at);
	WHEN 'wait_signal' THEN
		v_timeout := (v_spec->'signal'->>'timeout_ms')::bigint;
		p_seq := cairn._append(p_run, p_seq + 1, 'StepWaiting', v.step_id, NULL, NULL,
			jsonb_build_object('reason', 'signal', 'signal', v_spec->'signal'->>'name',
				'wake_at', p_at + v_timeout * interval '1 ms'), p_at);
		SELECT * INTO v_sig FROM cairn.signals
		 WHERE run_id = p_run AND name = v_spec->'signal'->>'name' AND consumed_by IS NULL
		 ORDER BY seq LIMIT 1 FOR UPDATE;
		IF FOUND THEN
			UPDATE cairn.signals SET consumed_by = v.step_id WHERE run_id = p_run AND seq = v_sig.seq;
			p_seq := cairn._succeed(p_run, p_seq, v.step_id, v_sig.payload, p_at);
		END IF;
	WHEN 'workflow' THEN
		v_child := cairn._start_child(p_run, v, p_at);
		IF v_child IS NULL THEN
			RETURN cairn._after_failure(p_run, p_seq, v, 'StepFailed',
				jsonb_build_object('reason', 'unknown_workflow', 'retryable', false,
					'message', format('workflow "%s" (version %s) is not stored',
						v_spec->'workflow'->>'name',
						coalesce(v_spec->'workflow'->>'version', 'latest'))), p_at);
		END IF;
		p_seq := cairn._append(p_run, p_seq + 1, 'StepWaiting', v.step_id, NULL, NULL,
			jsonb_build_object('reason', 'child', 'child_run', v_child,
				'wake_at', p_at + (v_spec->>'timeout_ms')::bigint * interval '1 ms'), p_at);
	ELSE
		RAISE EXCEPTION 'step kind "%" is not supported', v.kind USING ERRCODE = 'CN004';
	END CASE;
	RETURN p_seq;
END $$;

-- StepSucceeded, then the steps it unblocks, then the run when it was the last.
CREATE FUNCTION cairn._succeed(p_run uuid, p_seq bigint, p_step text, p_output jsonb,
	p_at timestamptz, p_attempt int DEFAULT NULL, p_epoch bigint DEFAULT NULL)
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
	v cairn.steps;
BEGIN
	p_seq := cairn._append(p_run, p_seq + 1, 'StepSucceeded', p_step, p_attempt, p_epoch,
		jsonb_build_object('output', p_output), p_at);
	FOR v IN SELECT * FROM cairn.steps
		  WHERE run_id = p_run AND p_step = ANY (needs) AND status = 'pending'
		    AND pending_needs = 0 ORDER BY step_id FOR UPDATE LOOP
		p_seq := cairn._activate(p_run, p_seq, v, p_at);
	END LOOP;
	RETURN cairn._maybe_done(p_run, p_seq, p_at);
END $$;

-- RunSucceeded once every step has succeeded or was skipped.
CREATE FUNCTION cairn._maybe_done(p_run uuid, p_seq bigint, p_at timestamptz)
RETURNS bigint LANGUAGE plpgsql AS $$
BEGIN
	IF (SELECT steps_done >= steps_total AND status = 'running' FROM cairn.runs WHERE run_id = p_run) THEN
		p_seq := cairn._append(p_run, p_seq + 1, 'RunSucceeded', NULL, NULL, NULL, '{}', p_at);
	END IF;
	RETURN p_seq;
END $$;

-- After a failed attempt (the failure event itself is p_type): retry with
-- backoff while attempts remain and the error is retryable, else fail the
-- step and the run.
CREATE FUNCTION cairn._after_failure(p_run uuid, p_seq bigint, v cairn.steps, p_type text,
	p_error jsonb, p_at timestamptz)
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
	r jsonb := coalesce(v.spec->'retry', '{}');
	v_final boolean;
	v_delay double precision;
	v_initial double precision := coalesce((r->>'initial_ms')::double precision, 1000);
	v_max double precision := coalesce((r->>'max_ms')::double precision, 60000);
BEGIN
	v_final := coalesce((p_error->>'retryable')::boolean, true) = false
		OR v.attempt >= v.max_attempts;
	IF v.spec->'concurrency' IS NOT NULL AND v.spec->'concurrency' <> 'null' THEN
		PERFORM pg_notify('cairn_ready', v.queue); -- a slot of its key is free
	END IF;
	p_seq := cairn._append(p_run, p_seq + 1, p_type, v.step_id, v.attempt, v.lease_epoch,
		jsonb_build_object('error', p_error, 'final', v_final), p_at);
	IF v_final THEN
		p_seq := cairn._append(p_run, p_seq + 1, 'RunFailed', NULL, NULL, NULL,
			jsonb_build_object('error', jsonb_build_object('step_id', v.step_id,
				'attempt', v.attempt, 'reason', p_error->>'reason',
				'message', p_error->>'message')), p_at);
		PERFORM cairn._cancel_children(p_run, 'the parent run failed', p_at);
		RETURN p_seq;
	END IF;
	IF r->>'backoff' = 'fixed' THEN
		v_delay := v_initial;
	ELSE
		v_delay := least(v_max, v_initial * power(2, greatest(v.attempt - 1, 0)));
	END IF;
	IF coalesce((r->>'jitter')::boolean, true) THEN
		v_delay := v_delay / 2 + random() * v_delay / 2;
	END IF;
	p_seq := cairn._append(p_run, p_seq + 1, 'StepRetryScheduled', v.step_id, v.attempt, NULL,
		jsonb_build_object('ready_at', p_at + v_delay * interval '1 ms',
			'delay_ms', round(v_delay)::bigint), p_at);
	IF v_delay <= 0 THEN
		PERFORM pg_notify('cairn_ready', v.queue);
	END IF;
	RETURN p_seq;
END $$;

-- Creates a run (RunCreated, StepsAdded, the first steps activated) unless
-- the tenant already has one for the idempotency key.
CREATE FUNCTION cairn._create_run(p_def jsonb, p_input jsonb, p_key text, p_tenant text,
	p_labels jsonb, p_parent uuid)
RETURNS TABLE (run_id uuid, created boolean)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
	v_run uuid;
	v_hash text := md5(p_def::text || '|' || coalesce(p_input::text, 'null'));
	v_old_hash text;
	v_at timestamptz := clock_timestamp();
	v_seq bigint := 0;
	v cairn.steps;
BEGIN
	IF jsonb_typeof(p_def->'steps') IS DISTINCT FROM 'array' OR p_def->>'name' IS NULL THEN
		RAISE EXCEPTION 'definition is not normalized: needs "name" and "steps"' USING ERRCODE = 'CN004';
	END IF;
	p_tenant := coalesce(p_tenant, 'default');
	IF p_key IS NOT NULL THEN
		SELECT r.run_id, r.request_hash INTO v_run, v_old_hash FROM cairn.runs r
		 WHERE r.tenant = p_tenant AND r.idempotency_key = p_key;
		IF FOUND THEN
			IF v_old_hash IS DISTINCT FROM v_hash THEN
				RAISE EXCEPTION 'idempotency key "%" was already used for a different request', p_key
					USING ERRCODE = 'CN003';
			END IF;
			RETURN QUERY SELECT v_run, false;
			RETURN;
		END IF;
	END IF;
	v_run := gen_random_uuid();
	BEGIN
		v_seq := cairn._append(v_run, 1, 'RunCreated', NULL, NULL, NULL,
			jsonb_build_object('workflow', p_def->>'name', 'definition', p_def, 'input', p_input,
				'tenant', p_tenant, 'idempotency_key', p_key, 'request_hash', v_hash,
				'labels', coalesce(p_labels, '{}'), 'parent_run_id', p_parent), v_at);
	EXCEPTION WHEN unique_violation THEN
		-- a concurrent submit with the same key won
		SELECT r.run_id, r.request_hash INTO v_run, v_old_hash FROM cairn.runs r
		 WHERE r.tenant = p_tenant AND r.idempotency_key = p_key;
		IF v_old_hash IS DISTINCT FROM v_hash THEN
			RAISE EXCEPTION 'idempotency key "%" was already used for a different request', p_key
				USING ERRCODE = 'CN003';
		END IF;
		RETURN QUERY SELECT v_run, false;
		RETURN;
	END;
	v_seq := cairn._append(v_run, v_seq + 1, 'StepsAdded', NULL, NULL, NULL,
		jsonb_build_object('steps', p_def->'steps'), v_at);
	FOR v IN SELECT * FROM cairn.steps s WHERE s.run_id = v_run AND s.pending_needs = 0
		  ORDER BY s.step_id LOOP
		v_seq := cairn._activate(v_run, v_seq, v, v_at);
	END LOOP;
	PERFORM cairn._end(v_run, v_seq, v_at);
	RETURN QUERY SELECT v_run, true;
END $$;

-- submit: creates a run from a normalized definition (the engine validated it).
CREATE FUNCTION cairn.submit(p_def jsonb, p_input jsonb, p_key text,
	p_tenant text DEFAULT 'default', p_labels jsonb DEFAULT '{}')
RETURNS TABLE (run_id uuid, created boolean)
LANGUAGE sql SECURITY DEFINER SET search_path = cairn, pg_temp AS $$
	SELECT * FROM cairn._create_run(p_def, p_input, p_key, p_tenant, p_labels, NULL);
$$;

-- Whether a step's concurrency and rate limits let it start now; when they
-- do, its start is counted. Keys are serialized with transaction advisory
-- locks taken without waiting: a key another claim holds is tried later.
CREATE FUNCTION cairn._admit(p_spec jsonb, p_at timestamptz)
RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
	c jsonb := nullif(p_spec->'concurrency', 'null');
	r jsonb := nullif(p_spec->'rate', 'null');
	v_window timestamptz := date_trunc('second', p_at);
BEGIN
	IF c IS NOT NULL THEN
		IF NOT pg_try_advisory_xact_lock(hashtext('cairn.concurrency'), hashtext(c->>'key')) THEN
			RETURN false;
		END IF;
		IF (SELECT count(*) FROM cairn.steps s WHERE s.status IN ('leased', 'running')
		     AND s.spec->'concurrency'->>'key' = c->>'key') >= (c->>'limit')::int THEN
			RETURN false;
		END IF;
	END IF;
	IF r IS NOT NULL THEN
		IF NOT pg_try_advisory_xact_lock(hashtext('cairn.rate'), hashtext(r->>'key')) THEN
			RETURN false;
		END IF;
		IF (SELECT coalesce(sum(n), 0) FROM cairn.rate_windows w WHERE w.key = r->>'key'
		     AND w.window_start > p_at - interval '1 minute') >= (r->>'per_minute')::int THEN
			RETURN false;
		END IF;
		INSERT INTO cairn.rate_windows AS w (key, window_start, n) VALUES (r->>'key', v_window, 1)
		ON CONFLICT (key, window_start) DO UPDATE SET n = w.n + 1;
	END IF;
	RETURN true;
END $$;

-- StepLeased: the next attempt of a ready step is p_worker's.
CREATE FUNCTION cairn._lease(p_run uuid, p_seq bigint, p_step text, p_attempt int, p_epoch bigint,
	p_worker text, p_lease_ms int, p_at timestamptz)
RETURNS bigint LANGUAGE sql AS $$
	SELECT cairn._append(p_run, p_seq + 1, 'StepLeased', p_step, p_attempt + 1, p_epoch + 1,
		jsonb_build_object('worker', p_worker,
			'lease_expires_at', p_at + p_lease_ms * interval '1 ms'), p_at);
$$;

-- What a leased step is handed: the outputs of its needs, the effect keys
-- it already committed.
CREATE FUNCTION cairn._needs_output(p_run uuid, p_needs text[])
RETURNS jsonb LANGUAGE sql STABLE AS $$
	SELECT coalesce(jsonb_object_agg(n.step_id, n.output), '{}') FROM cairn.steps n
	 WHERE n.run_id = p_run AND n.step_id = ANY (p_needs);
$$;
CREATE FUNCTION cairn._done_effects(p_run uuid, p_step text)
RETURNS text[] LANGUAGE sql STABLE AS $$
	SELECT ARRAY(SELECT e.effect_key FROM cairn.effects e
		      WHERE e.run_id = p_run AND e.step_id = p_step ORDER BY 1);
$$;

-- claim: leases up to p_max ready steps of the given queues.
CREATE FUNCTION cairn.claim(p_worker text, p_queues text[], p_max int, p_lease_ms int)
RETURNS TABLE (run_id uuid, step_id text, attempt int, lease_epoch bigint, spec jsonb,
	input jsonb, needs_output jsonb, done_effects text[])
LANGUAGE plpgsql SECURITY DEFINER SET search_path = cairn, pg_temp AS $$
#variable_conflict use_column
DECLARE
	v record;
	v_seq bigint;
	v_input jsonb;
	v_max_attempts int;
	v_n int := 0;
	v_at timestamptz := clock_timestamp();
BEGIN
	IF p_lease_ms IS NULL OR p_lease_ms < 100 THEN
		RAISE EXCEPTION 'lease must be at least 100 ms' USING ERRCODE = 'CN004';
	END IF;
	FOR v IN SELECT s.run_id, s.step_id, s.attempt, s.lease_epoch, s.spec, s.needs
		   FROM cairn.steps s
		  WHERE s.status = 'ready' AND s.queue = ANY (p_queues) AND s.ready_at <= v_at
		  ORDER BY s.priority DESC, s.ready_at
		  LIMIT greatest(p_max, 0) * 4 FOR UPDATE SKIP LOCKED LOOP
		-- a few more candidates than asked for, as limits may hold some back
		EXIT WHEN v_n >= p_max;
		-- never wait for a run another transition holds: take the next step
		SELECT r.last_seq, r.input, r.max_attempts_total INTO v_seq, v_input, v_max_attempts
		  FROM cairn.runs r
		 WHERE r.run_id = v.run_id AND r.status = 'running' FOR UPDATE SKIP LOCKED;
		CONTINUE WHEN NOT FOUND;
		IF v_max_attempts IS NOT NULL AND (SELECT sum(s.attempt) FROM cairn.steps s
						    WHERE s.run_id = v.run_id) >= v_max_attempts THEN
			v_seq := cairn._append(v.run_id, v_seq + 1, 'RunFailed', NULL, NULL, NULL,
				jsonb_build_object('error', jsonb_build_object('reason', 'max_attempts_total',
					'step_id', v.step_id, 'message', format(
					'the run used its %s attempts (limits.max_attempts_total)', v_max_attempts))),
				v_at);
			PERFORM cairn._end(v.run_id, v_seq, v_at);
			CONTINUE;
		END IF;
		CONTINUE WHEN NOT cairn._admit(v.spec, v_at);
		v_n := v_n + 1;
		v_seq := cairn._lease(v.run_id, v_seq, v.step_id, v.attempt, v.lease_epoch, p_worker,
			p_lease_ms, v_at);
		PERFORM cairn._end(v.run_id, v_seq, v_at);
		RETURN QUERY SELECT v.run_id, v.step_id, v.attempt + 1, v.lease_epoch + 1, v.spec, v_input,
			cairn._needs_output(v.run_id, v.needs), cairn._done_effects(v.run_id, v.step_id);
	END LOOP;
END $$;

-- start: the step's process is running.
CREATE FUNCTION cairn.start(p_run uuid, p_step text, p_epoch bigint, p_info jsonb)
RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path = cairn, pg_temp AS $$
DECLARE
	v_seq bigint := cairn._begin(p_run, false);
	v cairn.steps := cairn._leased(p_run, p_step, p_epoch);
	v_at timestamptz := clock_timestamp();
BEGIN
	IF v.status = 'running' THEN
		RETURN;
	END IF;
	v_seq := cairn._append(p_run, v_seq + 1, 'StepStarted', p_step, v.attempt, p_epoch,
		coalesce(p_info, '{}'), v_at);
	PERFORM cairn._end(p_run, v_seq, v_at);
END $$;

-- heartbeat: extends the current leases; returns the steps that are no
-- longer this worker's (cancelled, reaped or taken over).
CREATE FUNCTION cairn.heartbeat(p_worker text, p_runs uuid[], p_steps text[], p_epochs bigint[],
	p_lease_ms int)
RETURNS TABLE (run_id uuid, step_id text)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = cairn, pg_temp AS $$
#variable_conflict use_column
DECLARE
	h record;
	v cairn.steps;
	v_seq bigint;
	v_at timestamptz := clock_timestamp();
BEGIN
	INSERT INTO cairn.workers AS w (worker_id, queues, started_at, last_seen)
	VALUES (p_worker, '{}', v_at, v_at)
	ON CONFLICT (worker_id) DO UPDATE SET last_seen = excluded.last_seen;
	FOR h IN SELECT * FROM unnest(p_runs, p_steps, p_epochs) AS u(run_id, step_id, epoch)
		  ORDER BY 1, 2 LOOP
		SELECT r.last_seq INTO v_seq FROM cairn.runs r WHERE r.run_id = h.run_id FOR UPDATE;
		SELECT * INTO v FROM cairn.steps s WHERE s.run_id = h.run_id AND s.step_id = h.step_id
		 FOR UPDATE;
		IF NOT FOUND OR v.lease_epoch <> h.epoch OR v.status NOT IN ('leased', 'running') THEN
			RETURN QUERY SELECT h.run_id, h.step_id;
			CONTINUE;
		END IF;
		v_seq := cairn._append(h.run_id, v_seq + 1, 'StepHeartbeat', h.step_id, v.attempt,
			h.epoch, jsonb_build_object('lease_expires_at', v_at + p_lease_ms * interval '1 ms'),
			v_at);
		PERFORM cairn._end(h.run_id, v_seq, v_at);
	END LOOP;
END $$;

CREATE FUNCTION cairn._insert_logs(p_run uuid, p_step text, p_attempt int, p_logs jsonb,
	p_at timestamptz)
RETURNS void LANGUAGE sql AS $$
	INSERT INTO cairn.step_logs (run_id, step_id, attempt, stream, data, truncated, at)
	SELECT p_run, p_step, p_attempt, coalesce(l->>'stream', 'stdout'), coalesce(l->>'data', ''),
	       coalesce((l->>'truncated')::boolean, false), p_at
	  FROM jsonb_array_elements(coalesce(p_logs, '[]')) AS l
	 WHERE coalesce(l->>'data', '') <> '' OR coalesce((l->>'truncated')::boolean, false);
$$;

-- StepsAdded at run time (agent loops): normalized steps from a step's
-- output, checked against the run as it is now: new ids, needs that exist,
-- the run's max_steps.
CREATE FUNCTION cairn._add_steps(p_run uuid, p_seq bigint, p_by text, p_steps jsonb,
	p_at timestamptz)
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
	v_bad text;
	v_total int;
	v_max int;
BEGIN
	SELECT a->>'id' INTO v_bad FROM jsonb_array_elements(p_steps) a
	 WHERE EXISTS (SELECT 1 FROM cairn.steps s WHERE s.run_id = p_run AND s.step_id = a->>'id')
	 LIMIT 1;
	IF v_bad IS NOT NULL THEN
		RAISE EXCEPTION 'add_steps: step "%" already exists in the run', v_bad USING ERRCODE = 'CN004';
	END IF;
	SELECT n INTO v_bad FROM jsonb_array_elements(p_steps) a, jsonb_array_elements_text(a->'needs') n
	 WHERE NOT EXISTS (SELECT 1 FROM cairn.steps s WHERE s.run_id = p_run AND s.step_id = n)
	   AND NOT EXISTS (SELECT 1 FROM jsonb_array_elements(p_steps) b WHERE b->>'id' = n)
	 LIMIT 1;
	IF v_bad IS NOT NULL THEN
		RAISE EXCEPTION 'add_steps: needs unknown step "%"', v_bad USING ERRCODE = 'CN004';
	END IF;
	SELECT steps_total, max_steps INTO v_total, v_max FROM cairn.runs WHERE run_id = p_run;
	IF v_max IS NOT NULL AND v_total + jsonb_array_length(p_steps) > v_max THEN
		RAISE EXCEPTION 'add_steps: the run would have % steps, more than its max_steps (%)',
			v_total + jsonb_array_length(p_steps), v_max USING ERRCODE = 'CN004';
	END IF;
	RETURN cairn._append(p_run, p_seq + 1, 'StepsAdded', p_by, NULL, NULL,
		jsonb_build_object('steps', p_steps, 'by', p_by), p_at);
END $$;

-- run_defaults: what a worker needs to normalize steps a step adds.
CREATE FUNCTION cairn.run_defaults(p_run uuid)
RETURNS jsonb LANGUAGE sql STABLE SECURITY DEFINER SET search_path = cairn, pg_temp AS $$
	SELECT jsonb_strip_nulls(jsonb_build_object('defaults', definition->'defaults',
		'limits', definition->'limits'))
	  FROM cairn.runs WHERE run_id = p_run;
$$;

-- Leases to p_claim's worker up to p_claim.max ready steps of the locked run
-- p_run in p_claim.queues, as long as no other ready step would come first
-- (the run's limits and keys apply as in claim); adds each as claim's row,
-- in JSON, to p_claimed.
CREATE FUNCTION cairn._claim_in_run(p_run uuid, p_seq bigint, p_claim jsonb, p_at timestamptz,
	INOUT p_claimed jsonb, OUT p_last bigint)
LANGUAGE plpgsql AS $$
DECLARE
	v cairn.steps;
	r cairn.runs;
BEGIN
	p_last := p_seq;
	SELECT * INTO r FROM cairn.runs WHERE run_id = p_run;
	IF r.status <> 'running' OR r.max_attempts_total IS NOT NULL THEN
		RETURN; -- the attempt budget is checked by claim alone
	END IF;
	FOR v IN SELECT * FROM cairn.steps s
		  WHERE s.run_id = p_run AND s.status = 'ready' AND s.ready_at <= p_at
		    AND s.queue IN (SELECT jsonb_array_elements_text(p_claim->'queues'))
		  ORDER BY s.priority DESC, s.ready_at
		  LIMIT (p_claim->>'max')::int FOR UPDATE SKIP LOCKED LOOP
		-- never jump the queue: a step of any run that claim would take
		-- first (higher priority, or as high and ready earlier) goes first
		EXIT WHEN EXISTS (SELECT 1 FROM cairn.steps o
				   WHERE o.status = 'ready' AND o.queue = v.queue AND o.ready_at <= p_at
				     AND (o.priority > v.priority
					  OR (o.priority = v.priority AND o.ready_at < v.ready_at)));
		CONTINUE WHEN NOT cairn._admit(v.spec, p_at);
		p_last := cairn._lease(p_run, p_last, v.step_id, v.attempt, v.lease_epoch,
			p_claim->>'worker', (p_claim->>'lease_ms')::int, p_at);
		p_claimed := p_claimed || jsonb_build_object('run_id', p_run, 'step_id', v.step_id,
			'attempt', v.attempt + 1, 'lease_epoch', v.lease_epoch + 1, 'spec', v.spec,
			'input', r.input, 'needs_output', cairn._needs_output(p_run, v.needs),
			'done_effects', to_jsonb(cairn._done_effects(p_run, v.step_id)));
	END LOOP;
END $$;

-- complete: the attempt succeeded; its effects commit with it, each key once.
-- With p_claim ({worker, queues, max, lease_ms}) it also leases that worker
-- the steps of the run the success made ready ("claimed" in the result).
CREATE FUNCTION cairn.complete(p_run uuid, p_step text, p_epoch bigint, p_output jsonb,
	p_effects jsonb, p_info jsonb, p_claim jsonb DEFAULT NULL)
RETURNS jsonb LANGUAGE plpgsql SECURITY DEFINER SET search_path = cairn, pg_temp AS $$
DECLARE
	v_seq bigint := cairn._begin(p_run, false);
	v cairn.steps := cairn._leased(p_run, p_step, p_epoch);
	v_at timestamptz := clock_timestamp();
	v_skipped text[];
	v_status text;
	v_added jsonb;
	v_new cairn.steps;
	v_claimed jsonb := '[]';
BEGIN
	IF p_info->'add_steps' IS NOT NULL AND jsonb_typeof(p_info->'add_steps') <> 'array' THEN
		RAISE EXCEPTION 'add_steps must be an array' USING ERRCODE = 'CN004';
	END IF;
	IF p_effects IS NOT NULL AND jsonb_typeof(p_effects) <> 'array' THEN
		RAISE EXCEPTION 'effects must be an array' USING ERRCODE = 'CN004';
	END IF;
	IF EXISTS (SELECT 1 FROM jsonb_array_elements(coalesce(p_effects, '[]')) e
		    WHERE jsonb_typeof(e->'key') IS DISTINCT FROM 'string') THEN
		RAISE EXCEPTION 'every effect needs a string "key"' USING ERRCODE = 'CN004';
	END IF;
	IF v.status = 'leased' THEN
		v_seq := cairn._append(p_run, v_seq + 1, 'StepStarted', p_step, v.attempt, p_epoch,
			jsonb_strip_nulls(jsonb_build_object('started_at', p_info->'started_at',
				'pid', p_info->'pid')), v_at);
	END IF;
	WITH ins AS (
		INSERT INTO cairn.effects (run_id, step_id, effect_key, attempt, payload, committed_at)
		SELECT p_run, p_step, e->>'key', v.attempt, e, v_at
		  FROM jsonb_array_elements(coalesce(p_effects, '[]')) e
		ON CONFLICT DO NOTHING
		RETURNING effect_key)
	SELECT ARRAY(SELECT e->>'key' FROM jsonb_array_elements(coalesce(p_effects, '[]')) e
		      WHERE e->>'key' NOT IN (SELECT effect_key FROM ins))
	  INTO v_skipped;
	PERFORM cairn._insert_logs(p_run, p_step, v.attempt, p_info->'logs', v_at);
	v_added := coalesce(p_info->'add_steps', '[]');
	IF jsonb_array_length(v_added) > 0 THEN
		v_seq := cairn._add_steps(p_run, v_seq, p_step, v_added, v_at);
	END IF;
	v_seq := cairn._succeed(p_run, v_seq, p_step, p_output, v_at, v.attempt, p_epoch);
	-- added steps that need nothing still pending may start now
	FOR v_new IN SELECT * FROM cairn.steps s WHERE s.run_id = p_run AND s.status = 'pending'
		  AND s.pending_needs = 0
		  AND s.step_id IN (SELECT a->>'id' FROM jsonb_array_elements(v_added) a)
		  ORDER BY s.step_id FOR UPDATE LOOP
		v_seq := cairn._activate(p_run, v_seq, v_new, v_at);
	END LOOP;
	IF v.spec->'concurrency' IS NOT NULL AND v.spec->'concurrency' <> 'null' THEN
		PERFORM pg_notify('cairn_ready', v.queue); -- a slot of its key is free
	END IF;
	-- the worker has room: lease it what this success made ready, in the
	-- same transaction (one round trip per step in a chain, not two)
	IF jsonb_typeof(p_claim) = 'object' AND (p_claim->>'max')::int > 0 THEN
		SELECT c.p_claimed, c.p_last INTO v_claimed, v_seq
		  FROM cairn._claim_in_run(p_run, v_seq, p_claim, v_at, v_claimed) c;
	END IF;
	PERFORM cairn._end(p_run, v_seq, v_at);
	SELECT status INTO v_status FROM cairn.runs WHERE run_id = p_run;
	RETURN jsonb_build_object('run_status', v_status, 'effects_skipped', to_jsonb(v_skipped),
		'claimed', v_claimed);
END $$;

-- fail: the attempt failed (error.reason says how); retry or fail for good.
CREATE FUNCTION cairn.fail(p_run uuid, p_step text, p_epoch bigint, p_error jsonb, p_info jsonb)
RETURNS jsonb LANGUAGE plpgsql SECURITY DEFINER SET search_path = cairn, pg_temp AS $$
DECLARE
	v_seq bigint := cairn._begin(p_run, false);
	v cairn.steps := cairn._leased(p_run, p_step, p_epoch);
	v_at timestamptz := clock_timestamp();
	v_status text;
	v_step_status text;
BEGIN
	IF jsonb_typeof(p_error) IS DISTINCT FROM 'object' OR p_error->>'reason' IS NULL THEN
		RAISE EXCEPTION 'error must be an object with a "reason"' USING ERRCODE = 'CN004';
	END IF;
	IF v.status = 'leased' THEN
		v_seq := cairn._append(p_run, v_seq + 1, 'StepStarted', p_step, v.attempt, p_epoch,
			jsonb_strip_nulls(jsonb_build_object('started_at', p_info->'started_at',
				'pid', p_info->'pid')), v_at);
	END IF;
	PERFORM cairn._insert_logs(p_run, p_step, v.attempt, p_info->'logs', v_at);
	v_seq := cairn._after_failure(p_run, v_seq, v,
		CASE p_error->>'reason' WHEN 'timeout' THEN 'StepTimedOut' ELSE 'StepFailed' END,
		p_error, v_at);
	PERFORM cairn._end(p_run, v_seq, v_at);
	SELECT r.status INTO v_status FROM cairn.runs r WHERE r.run_id = p_run;
	SELECT s.status INTO v_step_status FROM cairn.steps s WHERE s.run_id = p_run AND s.step_id = p_step;
	RETURN jsonb_build_object('run_status', v_status, 'step_status', v_step_status);
END $$;

-- append_log: a chunk of a running step's output.
CREATE FUNCTION cairn.append_log(p_run uuid, p_step text, p_epoch bigint, p_stream text,
	p_data text, p_truncated boolean)
RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path = cairn, pg_temp AS $$
DECLARE
	v cairn.steps := cairn._leased(p_run, p_step, p_epoch);
BEGIN
	PERFORM cairn._insert_logs(p_run, p_step, v.attempt,
		jsonb_build_array(jsonb_build_object('stream', p_stream, 'data', p_data,
			'truncated', p_truncated)), clock_timestamp());
END $$;

-- checkpoint: stores a workspace checkpoint of the current attempt.
CREATE FUNCTION cairn.checkpoint(p_run uuid, p_step text, p_epoch bigint, p_base_seq bigint,
	p_codec text, p_raw_size bigint, p_stored_size bigint, p_tree_hash text, p_base_hash text,
	p_manifest jsonb, p_data bytea)
RETURNS bigint LANGUAGE plpgsql SECURITY DEFINER SET search_path = cairn, pg_temp AS $$
DECLARE
	v_seq bigint := cairn._begin(p_run, true);
	v cairn.steps := cairn._leased(p_run, p_step, p_epoch);
	v_at timestamptz := clock_timestamp();
BEGIN
	IF p_base_seq IS NOT NULL AND NOT EXISTS (SELECT 1 FROM cairn.checkpoints c
		WHERE c.run_id = p_run AND c.step_id = p_step AND c.seq = p_base_seq
		  AND c.tree_hash = p_base_hash) THEN
		RAISE EXCEPTION 'base checkpoint % with hash % not found', p_base_seq, p_base_hash
			USING ERRCODE = 'CN004';
	END IF;
	v_seq := v_seq + 1;
	INSERT INTO cairn.checkpoints (run_id, step_id, seq, attempt, base_seq, codec, raw_size,
		stored_size, tree_hash, base_hash, manifest, data, created_at)
	VALUES (p_run, p_step, v_seq, v.attempt, p_base_seq, p_codec, p_raw_size, p_stored_size,
		p_tree_hash, p_base_hash, p_manifest, p_data, v_at);
	PERFORM cairn._append(p_run, v_seq, 'CheckpointCommitted', p_step, v.attempt, p_epoch,
		jsonb_build_object('seq', v_seq, 'base_seq', p_base_seq, 'codec', p_codec,
			'raw_size', p_raw_size, 'stored_size', p_stored_size, 'tree_hash', p_tree_hash),
		v_at);
	-- retention: a new full checkpoint starts a chain; keep it and the chain
	-- before it (the fallback when the newest does not verify), prune older
	IF p_base_seq IS NULL THEN
		DELETE FROM cairn.checkpoints c
		 WHERE c.run_id = p_run AND c.step_id = p_step
		   AND c.seq < (SELECT max(f.seq) FROM cairn.checkpoints f
				 WHERE f.run_id = p_run AND f.step_id = p_step AND f.base_seq IS NULL
				   AND f.seq < v_seq);
	END IF;
	PERFORM cairn._end(p_run, v_seq, v_at);
	RETURN v_seq;
END $$;

-- The advisory lock class that marks a live worker session.
CREATE FUNCTION cairn._worker_lock_class() RETURNS int LANGUAGE sql IMMUTABLE AS 'SELECT 1667331182';

-- worker_register: called by a worker on each (re)connect. Holds a session
-- lock for as long as the worker's connection lives.
CREATE FUNCTION cairn.worker_register(p_worker text, p_queues text[])
RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path = cairn, pg_temp AS $$
DECLARE
	v_key int := hashtext(p_worker);
BEGIN
	PERFORM pg_advisory_lock(cairn._worker_lock_class(), v_key);
	INSERT INTO cairn.workers (worker_id, queues, started_at, last_seen, lock_key)
	VALUES (p_worker, p_queues, clock_timestamp(), clock_timestamp(), v_key)
	ON CONFLICT (worker_id) DO UPDATE SET queues = excluded.queues, last_seen = excluded.last_seen,
		lock_key = excluded.lock_key, gone_since = NULL;
END $$;

-- Registered workers whose session lock is not held: their session ended.
CREATE VIEW cairn.sessionless_workers AS
SELECT w.worker_id, w.gone_since FROM cairn.workers w
 WHERE w.lock_key IS NOT NULL
   AND NOT EXISTS (SELECT 1 FROM pg_locks l
		    WHERE l.locktype = 'advisory' AND l.granted
		      AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
		      AND l.classid = cairn._worker_lock_class()::oid
		      AND l.objid = w.lock_key::oid AND l.objsubid = 2);

-- Workers gone for longer than the grace that lets a worker whose
-- connection merely dropped (a database restart) register again.
CREATE VIEW cairn.dead_workers AS
SELECT worker_id, gone_since FROM cairn.sessionless_workers
 WHERE gone_since <= clock_timestamp() - interval '500 ms';

-- checkpoint_fallback: an attempt's restore found checkpoint p_bad_seq
-- unverifiable and resumed from p_used_seq (NULL: from an empty workspace).
CREATE FUNCTION cairn.checkpoint_fallback(p_run uuid, p_step text, p_epoch bigint,
	p_bad_seq bigint, p_used_seq bigint, p_reason text)
RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path = cairn, pg_temp AS $$
DECLARE
	v_seq bigint := cairn._begin(p_run, true);
	v cairn.steps := cairn._leased(p_run, p_step, p_epoch);
	v_at timestamptz := clock_timestamp();
BEGIN
	v_seq := cairn._append(p_run, v_seq + 1, 'CheckpointFallback', p_step, v.attempt, p_epoch,
		jsonb_build_object('bad_seq', p_bad_seq, 'used_seq', p_used_seq, 'reason', p_reason), v_at);
	PERFORM cairn._insert_logs(p_run, p_step, v.attempt, jsonb_build_array(jsonb_build_object(
		'stream', 'system', 'data', format('checkpoint %s does not verify (%s): %s', p_bad_seq,
			p_reason, CASE WHEN p_used_seq IS NULL THEN 'starting from an empty workspace'
			ELSE format('resumed from checkpoint %s, the newest that does', p_used_seq) END))), v_at);
	PERFORM cairn._end(p_run, v_seq, v_at);
END $$;

-- reap_expired: leases whose holder stopped renewing them, and the leases
-- of workers whose database session ended (after a 500 ms grace).
CREATE FUNCTION cairn.reap_expired(p_max int)
RETURNS int LANGUAGE plpgsql SECURITY DEFINER SET search_path = cairn, pg_temp AS $$
DECLARE
	v cairn.steps;
	v_seq bigint;
	v_at timestamptz := clock_timestamp();
	v_gone text[];
	v_dead text[];
	n int := 0;
BEGIN
	-- one look at the session locks: note when a session is first seen
	-- gone, forget it when it is back, and call dead what stayed gone
	SELECT coalesce(array_agg(worker_id), '{}') INTO v_gone FROM cairn.sessionless_workers;
	UPDATE cairn.workers w
	   SET gone_since = CASE WHEN w.worker_id = ANY (v_gone) THEN v_at END
	 WHERE (w.gone_since IS NULL) = (w.worker_id = ANY (v_gone));
	SELECT coalesce(array_agg(worker_id), '{}') INTO v_dead FROM cairn.workers
	 WHERE gone_since <= v_at - interval '500 ms';
	FOR v IN SELECT * FROM cairn.steps s
		  WHERE s.status IN ('leased', 'running')
		    AND (s.lease_expires_at < v_at OR s.lease_owner = ANY (v_dead))
		  ORDER BY s.lease_expires_at LIMIT p_max FOR UPDATE SKIP LOCKED LOOP
		SELECT r.last_seq INTO v_seq FROM cairn.runs r WHERE r.run_id = v.run_id
		 FOR UPDATE SKIP LOCKED;
		CONTINUE WHEN NOT FOUND;
		v_seq := cairn._after_failure(v.run_id, v_seq, v, 'StepLeaseExpired',
			jsonb_build_object('reason', 'lease_expired', 'retryable', true,
				'message', CASE WHEN v.lease_owner = ANY (v_dead)
					THEN format('worker %s is gone (its database session ended)', v.lease_owner)
					ELSE format('worker %s stopped renewing its lease', v.lease_owner) END), v_at);
		PERFORM cairn._end(v.run_id, v_seq, v_at);
		n := n + 1;
	END LOOP;
	-- forget dead workers that hold nothing any more
	DELETE FROM cairn.workers w WHERE w.worker_id = ANY (v_dead)
	   AND NOT EXISTS (SELECT 1 FROM cairn.steps s WHERE s.lease_owner = w.worker_id
			      AND s.status IN ('leased', 'running'));
	RETURN n;
END $$;

-- fire_timers: sleeps that ended, approval, signal and child-run timeouts,
-- runs past their max_duration, child runs that finished, and a wake-up for
-- retries whose backoff just ended.
CREATE FUNCTION cairn.fire_timers(p_max int)
RETURNS int LANGUAGE plpgsql SECURITY DEFINER SET search_path = cairn, pg_temp AS $$
DECLARE
	v cairn.steps;
	v_seq bigint;
	v_at timestamptz := clock_timestamp();
	v_policy text;
	v_child cairn.runs;
	w record;
	q text;
	r uuid;
	n int := 0;
BEGIN
	FOR v IN SELECT * FROM cairn.steps s
		  WHERE s.status = 'waiting' AND s.wake_at <= v_at
		  ORDER BY s.wake_at LIMIT p_max FOR UPDATE SKIP LOCKED LOOP
		SELECT r.last_seq INTO v_seq FROM cairn.runs r
		 WHERE r.run_id = v.run_id AND r.status = 'running' FOR UPDATE SKIP LOCKED;
		CONTINUE WHEN NOT FOUND;
		v_seq := cairn._append(v.run_id, v_seq + 1, 'TimerFired', v.step_id, NULL, NULL,
			jsonb_build_object('kind', v.kind, 'due', v.wake_at), v_at);
		IF v.kind = 'sleep' THEN
			v_seq := cairn._succeed(v.run_id, v_seq, v.step_id, 'null', v_at);
		ELSIF cairn._approval_of(v) IS NOT NULL THEN
			v_policy := coalesce(cairn._approval_of(v)->>'on_timeout', 'reject');
			IF v_policy = 'approve' THEN
				v_seq := cairn._append(v.run_id, v_seq + 1, 'ApprovalGranted', v.step_id, NULL, NULL,
					jsonb_build_object('actor', 'timeout'), v_at);
				v_seq := cairn._approved(v.run_id, v_seq, v,
					jsonb_build_object('approved', true, 'by', jsonb_build_array('timeout')), v_at);
			ELSIF v_policy = 'reject' THEN
				v_seq := cairn._append(v.run_id, v_seq + 1, 'ApprovalRejected', v.step_id, NULL,
					NULL, jsonb_build_object('actor', 'timeout'), v_at);
				v_seq := cairn._refused(v.run_id, v_seq, v,
					jsonb_build_object('reason', 'rejected', 'retryable', false,
						'message', 'no decision before the approval timeout'), v_at);
			ELSE
				v_seq := cairn._after_failure(v.run_id, v_seq, v, 'StepFailed',
					jsonb_build_object('reason', 'approval_timeout', 'retryable', false,
						'message', 'no decision before the approval timeout'), v_at);
			END IF;
		ELSIF v.kind = 'workflow' THEN
			v_seq := cairn._after_failure(v.run_id, v_seq, v, 'StepTimedOut',
				jsonb_build_object('reason', 'timeout', 'retryable', false,
					'message', 'the child run did not finish in time'), v_at);
		ELSE
			v_seq := cairn._after_failure(v.run_id, v_seq, v, 'StepFailed',
				jsonb_build_object('reason', 'signal_timeout', 'retryable', false,
					'message', format('signal "%s" did not arrive in time', v.spec->'signal'->>'name')),
				v_at);
		END IF;
		PERFORM cairn._end(v.run_id, v_seq, v_at);
		n := n + 1;
	END LOOP;
	-- child runs that ended: their parent step follows them
	FOR w IN SELECT s.run_id, s.step_id, c.run_id AS child FROM cairn.steps s
		   JOIN cairn.runs c ON c.parent_run_id = s.run_id AND c.labels->>'cairn.parent_step' = s.step_id
		  WHERE s.kind = 'workflow' AND s.status = 'waiting' AND c.status <> 'running'
		  LIMIT p_max FOR UPDATE OF s SKIP LOCKED LOOP
		SELECT * INTO v FROM cairn.steps s WHERE s.run_id = w.run_id AND s.step_id = w.step_id;
		SELECT * INTO v_child FROM cairn.runs c WHERE c.run_id = w.child;
		SELECT r.last_seq INTO v_seq FROM cairn.runs r
		 WHERE r.run_id = v.run_id AND r.status = 'running' FOR UPDATE SKIP LOCKED;
		CONTINUE WHEN NOT FOUND;
		IF v_child.status = 'succeeded' THEN
			v_seq := cairn._succeed(v.run_id, v_seq, v.step_id,
				jsonb_build_object('run_id', v_child.run_id, 'outputs',
					(SELECT jsonb_object_agg(cs.step_id, cs.output) FROM cairn.steps cs
					  WHERE cs.run_id = v_child.run_id)), v_at);
		ELSE
			v_seq := cairn._after_failure(v.run_id, v_seq, v, 'StepFailed',
				jsonb_build_object('reason', 'child_' || v_child.status, 'retryable', false,
					'child_run', v_child.run_id,
					'message', format('child run %s %s', v_child.run_id, v_child.status)), v_at);
		END IF;
		PERFORM cairn._end(v.run_id, v_seq, v_at);
		n := n + 1;
	END LOOP;
	-- runs past their max_duration
	FOR r, v_seq IN SELECT u.run_id, u.last_seq FROM cairn.runs u
		   WHERE u.status = 'running' AND u.deadline_at <= v_at
		   ORDER BY u.deadline_at LIMIT p_max FOR UPDATE SKIP LOCKED LOOP
		v_seq := cairn._append(r, v_seq + 1, 'RunFailed', NULL, NULL, NULL,
			jsonb_build_object('error', jsonb_build_object('reason', 'max_duration',
				'message', 'the run went past its limits.max_duration')), v_at);
		PERFORM cairn._end(r, v_seq, v_at);
		PERFORM cairn._cancel_children(r, 'max_duration', v_at);
		n := n + 1;
	END LOOP;
	FOR q IN SELECT DISTINCT s.queue FROM cairn.steps s
		  WHERE s.status = 'ready' AND s.ready_at <= v_at
		    AND s.ready_at > v_at - interval '2 seconds' AND s.attempt > 0 LOOP
		PERFORM pg_notify('cairn_ready', q);
	END LOOP;
	RETURN n;
END $$;

-- Starts the child run of a "workflow" step: its definition comes inline
-- from the step's spec (normalized by the engine at submit) or by name from
-- workflow_defs (NULL when no such definition is stored); its input from
-- the spec, else the outputs of its needs.
CREATE FUNCTION cairn._start_child(p_run uuid, v cairn.steps, p_at timestamptz)
RETURNS uuid LANGUAGE plpgsql AS $$
DECLARE
	w jsonb := v.spec->'workflow';
	v_def jsonb := nullif(w->'definition', 'null');
	v_input jsonb := w->'input';
	v_child uuid;
BEGIN
	IF v_def IS NULL THEN
		-- by name: the version named, else the latest
		SELECT d.definition INTO v_def FROM cairn.workflow_defs d
		 WHERE d.name = w->>'name' AND (w->>'version' IS NULL OR d.version = (w->>'version')::int)
		 ORDER BY d.version DESC LIMIT 1;
		IF v_def IS NULL THEN
			RETURN NULL;
		END IF;
	END IF;
	IF v_input IS NULL THEN
		SELECT coalesce(jsonb_object_agg(step_id, output), '{}') INTO v_input FROM cairn.steps
		 WHERE run_id = p_run AND step_id = ANY (v.needs);
	END IF;
	SELECT c.run_id INTO v_child FROM cairn._create_run(v_def, v_input, NULL,
		(SELECT tenant FROM cairn.runs WHERE run_id = p_run),
		jsonb_build_object('cairn.parent_step', v.step_id), p_run) c;
	RETURN v_child;
END $$;

-- Cancels the running child runs of p_run (and theirs).
CREATE FUNCTION cairn._cancel_children(p_run uuid, p_reason text, p_at timestamptz)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
	c uuid;
	v_seq bigint;
BEGIN
	FOR c IN SELECT run_id FROM cairn.runs WHERE parent_run_id = p_run AND status = 'running'
		  ORDER BY run_id LOOP
		v_seq := cairn._begin(c, true);
		v_seq := cairn._append(c, v_seq + 1, 'RunCancelled', NULL, NULL, NULL,
			jsonb_build_object('error', jsonb_build_object('reason', 'cancelled',
				'actor', 'parent ' || p_run, 'message', p_reason)), p_at);
		PERFORM cairn._end(c, v_seq, p_at);
		PERFORM cairn._cancel_children(c, p_reason, p_at);
	END LOOP;
END $$;

-- The step p_step of p_run, locked, checked to be waiting for approval
-- (an approval step, or a run step behind its "approve" gate).
CREATE FUNCTION cairn._waiting_approval(p_run uuid, p_step text)
RETURNS cairn.steps LANGUAGE plpgsql AS $$
DECLARE
	v cairn.steps;
BEGIN
	SELECT * INTO v FROM cairn.steps WHERE run_id = p_run AND step_id = p_step FOR UPDATE;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'step "%" of run % not found', p_step, p_run USING ERRCODE = 'CN002';
	END IF;
	IF cairn._approval_of(v) IS NULL OR v.status <> 'waiting' THEN
		RAISE EXCEPTION 'step "%" is not waiting for approval (it is %)', p_step, v.status
			USING ERRCODE = 'CN003';
	END IF;
	RETURN v;
END $$;

-- The approval is met: an approval step succeeds, a gated run step may run.
CREATE FUNCTION cairn._approved(p_run uuid, p_seq bigint, v cairn.steps, p_output jsonb,
	p_at timestamptz)
RETURNS bigint LANGUAGE plpgsql AS $$
BEGIN
	IF v.kind = 'approval' THEN
		RETURN cairn._succeed(p_run, p_seq, v.step_id, p_output, p_at);
	END IF;
	PERFORM pg_notify('cairn_ready', v.queue);
	RETURN cairn._append(p_run, p_seq + 1, 'StepReady', v.step_id, NULL, NULL,
		jsonb_build_object('ready_at', p_at, 'approval', p_output), p_at);
END $$;

-- The approval is refused: the step fails for good, or is skipped when its
-- approval says on_reject "skip" (the run goes on without it).
CREATE FUNCTION cairn._refused(p_run uuid, p_seq bigint, v cairn.steps, p_error jsonb,
	p_at timestamptz)
RETURNS bigint LANGUAGE plpgsql AS $$
BEGIN
	IF cairn._approval_of(v)->>'on_reject' = 'skip' THEN
		RETURN cairn._skip(p_run, p_seq, v.step_id, p_error, p_at);
	END IF;
	RETURN cairn._after_failure(p_run, p_seq, v, 'StepFailed', p_error, p_at);
END $$;

-- StepSkipped: counts as done for the steps that need it.
CREATE FUNCTION cairn._skip(p_run uuid, p_seq bigint, p_step text, p_why jsonb, p_at timestamptz)
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
	v cairn.steps;
BEGIN
	p_seq := cairn._append(p_run, p_seq + 1, 'StepSkipped', p_step, NULL, NULL,
		jsonb_build_object('output', NULL, 'why', p_why), p_at);
	FOR v IN SELECT * FROM cairn.steps
		  WHERE run_id = p_run AND p_step = ANY (needs) AND status = 'pending'
		    AND pending_needs = 0 ORDER BY step_id FOR UPDATE LOOP
		p_seq := cairn._activate(p_run, p_seq, v, p_at);
	END LOOP;
	RETURN cairn._maybe_done(p_run, p_seq, p_at);
END $$;

-- approve: one approver's yes; the step goes on once the quorum is met.
CREATE FUNCTION cairn.approve(p_run uuid, p_step text, p_actor text, p_comment text)
RETURNS jsonb LANGUAGE plpgsql SECURITY DEFINER SET search_path = cairn, pg_temp AS $$
DECLARE
	v_seq bigint := cairn._begin(p_run, true);
	v cairn.steps := cairn._waiting_approval(p_run, p_step);
	v_at timestamptz := clock_timestamp();
	v_quorum int := coalesce((cairn._approval_of(v)->>'quorum')::int, 1);
	v_by jsonb;
BEGIN
	IF p_actor IS NULL OR p_actor = '' THEN
		RAISE EXCEPTION 'an approval needs an actor' USING ERRCODE = 'CN004';
	END IF;
	IF EXISTS (SELECT 1 FROM cairn.approvals a WHERE a.run_id = p_run AND a.step_id = p_step
		    AND a.actor = p_actor AND a.at >= v.started_at) THEN
		RAISE EXCEPTION '"%" already approved step "%"', p_actor, p_step USING ERRCODE = 'CN003';
	END IF;
	v_seq := cairn._append(p_run, v_seq + 1, 'ApprovalGranted', p_step, NULL, NULL,
		jsonb_build_object('actor', p_actor, 'comment', p_comment), v_at);
	INSERT INTO cairn.approvals VALUES (p_run, v_seq, p_step, 'approved', p_actor, p_comment, v_at);
	SELECT jsonb_agg(a.actor ORDER BY a.seq) INTO v_by FROM cairn.approvals a
	 WHERE a.run_id = p_run AND a.step_id = p_step AND a.decision = 'approved'
	   AND a.at >= v.started_at;
	IF jsonb_array_length(v_by) >= v_quorum THEN
		v_seq := cairn._approved(p_run, v_seq, v,
			jsonb_build_object('approved', true, 'by', v_by, 'comment', p_comment), v_at);
	END IF;
	PERFORM cairn._end(p_run, v_seq, v_at);
	RETURN jsonb_build_object('approvals', jsonb_array_length(v_by), 'quorum', v_quorum,
		'step_status', (SELECT status FROM cairn.steps WHERE run_id = p_run AND step_id = p_step),
		'run_status', (SELECT status FROM cairn.runs WHERE run_id = p_run));
END $$;

-- reject: one "no" fails the step for good (and so the run), or skips it.
CREATE FUNCTION cairn.reject(p_run uuid, p_step text, p_actor text, p_comment text)
RETURNS jsonb LANGUAGE plpgsql SECURITY DEFINER SET search_path = cairn, pg_temp AS $$
DECLARE
	v_seq bigint := cairn._begin(p_run, true);
	v cairn.steps := cairn._waiting_approval(p_run, p_step);
	v_at timestamptz := clock_timestamp();
BEGIN
	IF p_actor IS NULL OR p_actor = '' THEN
		RAISE EXCEPTION 'a rejection needs an actor' USING ERRCODE = 'CN004';
	END IF;
	v_seq := cairn._append(p_run, v_seq + 1, 'ApprovalRejected', p_step, NULL, NULL,
		jsonb_build_object('actor', p_actor, 'comment', p_comment), v_at);
	INSERT INTO cairn.approvals VALUES (p_run, v_seq, p_step, 'rejected', p_actor, p_comment, v_at);
	v_seq := cairn._refused(p_run, v_seq, v,
		jsonb_build_object('reason', 'rejected', 'retryable', false,
			'message', format('rejected by %s%s', p_actor,
				CASE WHEN p_comment IS NULL THEN '' ELSE ': ' || p_comment END)), v_at);
	PERFORM cairn._end(p_run, v_seq, v_at);
	RETURN jsonb_build_object(
		'step_status', (SELECT status FROM cairn.steps WHERE run_id = p_run AND step_id = p_step),
		'run_status', (SELECT status FROM cairn.runs WHERE run_id = p_run));
END $$;

-- signal: delivers to the step waiting for it, or keeps it until one does.
CREATE FUNCTION cairn.signal(p_run uuid, p_name text, p_payload jsonb, p_actor text)
RETURNS jsonb LANGUAGE plpgsql SECURITY DEFINER SET search_path = cairn, pg_temp AS $$
DECLARE
	v_seq bigint := cairn._begin(p_run, true);
	v cairn.steps;
	v_at timestamptz := clock_timestamp();
BEGIN
	IF p_name IS NULL OR p_name = '' THEN
		RAISE EXCEPTION 'a signal needs a name' USING ERRCODE = 'CN004';
	END IF;
	SELECT * INTO v FROM cairn.steps s WHERE s.run_id = p_run AND s.kind = 'wait_signal'
	   AND s.status = 'waiting' AND s.spec->'signal'->>'name' = p_name
	 ORDER BY s.step_id LIMIT 1 FOR UPDATE;
	v_seq := cairn._append(p_run, v_seq + 1, 'SignalReceived', v.step_id, NULL, NULL,
		jsonb_build_object('name', p_name, 'payload', p_payload, 'actor', p_actor), v_at);
	IF v.step_id IS NOT NULL THEN
		v_seq := cairn._succeed(p_run, v_seq, v.step_id, p_payload, v_at);
	ELSE
		INSERT INTO cairn.signals VALUES (p_run, v_seq, p_name, p_payload, NULL, v_at);
	END IF;
	PERFORM cairn._end(p_run, v_seq, v_at);
	RETURN jsonb_build_object('delivered_to', v.step_id);
END $$;

-- cancel: stops the run; running steps learn it from their next heartbeat.
CREATE FUNCTION cairn.cancel(p_run uuid, p_actor text, p_reason text)
RETURNS jsonb LANGUAGE plpgsql SECURITY DEFINER SET search_path = cairn, pg_temp AS $$
DECLARE
	v_seq bigint := cairn._begin(p_run, true);
	v_at timestamptz := clock_timestamp();
BEGIN
	v_seq := cairn._append(p_run, v_seq + 1, 'RunCancelled', NULL, NULL, NULL,
		jsonb_build_object('error', jsonb_build_object('reason', 'cancelled', 'actor', p_actor,
			'message', p_reason)), v_at);
	PERFORM cairn._end(p_run, v_seq, v_at);
	PERFORM cairn._cancel_children(p_run, coalesce(p_reason, 'the parent run was cancelled'), v_at);
	RETURN jsonb_build_object('run_status', 'cancelled');
END $$;

-- token_create: a new API token; only its SHA-256 is stored.
CREATE FUNCTION cairn.token_create(p_name text, p_roles text[])
RETURNS text LANGUAGE plpgsql SECURITY DEFINER SET search_path = cairn, pg_temp AS $$
DECLARE
	v_token text := 'cn_' || replace(gen_random_uuid()::text, '-', '')
		|| replace(gen_random_uuid()::text, '-', '');
BEGIN
	IF p_roles IS NULL OR cardinality(p_roles) = 0
	   OR NOT p_roles <@ ARRAY['submit', 'approve', 'read', 'admin'] THEN
		RAISE EXCEPTION 'roles must be among submit, approve, read, admin' USING ERRCODE = 'CN004';
	END IF;
	INSERT INTO cairn.api_tokens (name, token_sha256, roles)
	VALUES (p_name, sha256(convert_to(v_token, 'UTF8')), p_roles)
	ON CONFLICT (name) DO UPDATE SET token_sha256 = excluded.token_sha256, roles = excluded.roles;
	RETURN v_token;
END $$;

-- replay_check: rebuilds the run's projections from its events and returns
-- what differs from the live rows ([] when nothing does). Changes nothing.
CREATE FUNCTION cairn.replay_check(p_run uuid)
RETURNS jsonb LANGUAGE plpgsql SECURITY DEFINER SET search_path = cairn, pg_temp AS $$
DECLARE
	v_before_run jsonb;
	v_before_steps jsonb;
	v_after_run jsonb;
	v_after_steps jsonb;
	v_diff jsonb := '[]';
	v_detail text;
	e record;
BEGIN
	SELECT to_jsonb(r) INTO v_before_run FROM cairn.runs r WHERE r.run_id = p_run;
	IF v_before_run IS NULL THEN
		RAISE EXCEPTION 'run % not found', p_run USING ERRCODE = 'CN002';
	END IF;
	SELECT coalesce(jsonb_object_agg(s.step_id, to_jsonb(s)), '{}') INTO v_before_steps
	  FROM cairn.steps s WHERE s.run_id = p_run;
	BEGIN
		DELETE FROM cairn.steps WHERE run_id = p_run;
		DELETE FROM cairn.runs WHERE run_id = p_run;
		FOR e IN SELECT * FROM cairn.events WHERE run_id = p_run ORDER BY seq LOOP
			PERFORM cairn._apply(e.run_id, e.seq, e.type, e.step_id, e.attempt, e.lease_epoch,
				e.payload, e.at);
			UPDATE cairn.runs SET last_seq = e.seq, updated_at = e.at WHERE run_id = p_run;
		END LOOP;
		SELECT to_jsonb(r) INTO v_after_run FROM cairn.runs r WHERE r.run_id = p_run;
		SELECT coalesce(jsonb_object_agg(s.step_id, to_jsonb(s)), '{}') INTO v_after_steps
		  FROM cairn.steps s WHERE s.run_id = p_run;
		SELECT coalesce(jsonb_agg(d), '[]') INTO v_diff FROM (
			SELECT jsonb_build_object('table', 'runs', 'column', k,
				'live', v_before_run->k, 'replayed', v_after_run->k) AS d
			  FROM jsonb_object_keys(v_before_run) k
			 WHERE v_before_run->k IS DISTINCT FROM v_after_run->k
			UNION ALL
			SELECT jsonb_build_object('table', 'steps', 'step_id', sid, 'column', k,
				'live', v_before_steps->sid->k, 'replayed', v_after_steps->sid->k)
			  FROM (SELECT jsonb_object_keys(v_before_steps || v_after_steps) sid) ids,
			       LATERAL jsonb_object_keys(coalesce(v_before_steps->sid, v_after_steps->sid)) k
			 WHERE v_before_steps->sid->k IS DISTINCT FROM v_after_steps->sid->k) x;
		RAISE EXCEPTION USING ERRCODE = 'CN999', MESSAGE = 'replay done', DETAIL = v_diff::text;
	EXCEPTION WHEN SQLSTATE 'CN999' THEN
		GET STACKED DIAGNOSTICS v_detail = PG_EXCEPTION_DETAIL;
	END;
	RETURN v_detail::jsonb;
END $$;
