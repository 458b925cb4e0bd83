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
			created_at, updated_at, last_seq)
		VALUES (p_run, p->>'tenant', p->>'workflow', p->'definition', p->'input', 'running',
			p->>'idempotency_key', p->>'request_hash', coalesce(p->'labels', '{}'),
			(p->>'parent_run_id')::uuid, (p->>'forked_from')::uuid, p_at, p_at, p_seq);
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
	WHEN 'StepSucceeded' THEN
		UPDATE cairn.steps SET status = 'succeeded', output = p->'output', error = NULL,
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
	WHEN 'TimerFired', 'ApprovalGranted', 'ApprovalRejected', 'SignalReceived', 'RunForked' THEN
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

-- Makes a step whose needs are met ready, or waiting for what its kind waits for.
CREATE FUNCTION cairn._activate(p_run uuid, p_seq bigint, v cairn.steps, p_at timestamptz)
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
	v_spec jsonb := v.spec;
	v_timeout bigint;
	v_show jsonb;
	v_sig cairn.signals;
BEGIN
	CASE v.kind
	WHEN 'run' THEN
		p_seq := cairn._append(p_run, p_seq + 1, 'StepReady', v.step_id, NULL, NULL,
			jsonb_build_object('ready_at', p_at), p_at);
		PERFORM pg_notify('cairn_ready', v.queue);
	WHEN 'approval' THEN
		v_timeout := (v_spec->'approval'->>'timeout_ms')::bigint;
		SELECT coalesce(jsonb_object_agg(step_id, output), '{}') INTO v_show FROM cairn.steps
		 WHERE run_id = p_run
		   AND step_id IN (SELECT jsonb_array_elements_text(coalesce(v_spec->'approval'->'show', '[]')));
		p_seq := cairn._append(p_run, p_seq + 1, 'ApprovalRequested', v.step_id, NULL, NULL,
			jsonb_build_object('prompt', v_spec->'approval'->'prompt',
				'quorum', coalesce((v_spec->'approval'->>'quorum')::int, 1),
				'show', v_show,
				'wake_at', p_at + v_timeout * interval '1 ms'), p_at);
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
	v_total int;
	v_done int;
BEGIN
	p_seq := cairn._append(p_run, p_seq + 1, 'StepSucceeded', p_step, p_attempt, p_epoch,
		jsonb_build_object('output', p_output), p_at);
	FOR v IN SELECT * FROM cairn.steps
		  WHERE run_id = p_run AND p_step = ANY (needs) AND status = 'pending'
		    AND pending_needs = 0 ORDER BY step_id FOR UPDATE LOOP
		p_seq := cairn._activate(p_run, p_seq, v, p_at);
	END LOOP;
	SELECT steps_total, steps_done INTO v_total, v_done FROM cairn.runs WHERE run_id = p_run;
	IF v_done >= v_total THEN
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
	p_seq := cairn._append(p_run, p_seq + 1, p_type, v.step_id, v.attempt, v.lease_epoch,
		jsonb_build_object('error', p_error, 'final', v_final), p_at);
	IF v_final THEN
		RETURN cairn._append(p_run, p_seq + 1, 'RunFailed', NULL, NULL, NULL,
			jsonb_build_object('error', jsonb_build_object('step_id', v.step_id,
				'attempt', v.attempt, 'reason', p_error->>'reason',
				'message', p_error->>'message')), p_at);
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

-- submit: creates a run from a normalized definition (the engine validated it).
CREATE FUNCTION cairn.submit(p_def jsonb, p_input jsonb, p_key text,
	p_tenant text DEFAULT 'default', p_labels jsonb DEFAULT '{}')
RETURNS TABLE (run_id uuid, created boolean)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = cairn, pg_temp AS $$
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
				'labels', coalesce(p_labels, '{}')), v_at);
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
	v_at timestamptz := clock_timestamp();
BEGIN
	IF p_lease_ms IS NULL OR p_lease_ms < 100 THEN
		RAISE EXCEPTION 'lease must be at least 100 ms' USING ERRCODE = 'CN004';
	END IF;
	FOR v IN SELECT s.run_id, s.step_id, s.attempt, s.lease_epoch, s.spec, s.needs
		   FROM cairn.steps s
		  WHERE s.status = 'ready' AND s.queue = ANY (p_queues) AND s.ready_at <= v_at
		  ORDER BY s.priority DESC, s.ready_at
		  LIMIT greatest(p_max, 0) FOR UPDATE SKIP LOCKED LOOP
		-- never wait for a run another transition holds: take the next step
		SELECT r.last_seq, r.input INTO v_seq, v_input FROM cairn.runs r
		 WHERE r.run_id = v.run_id AND r.status = 'running' FOR UPDATE SKIP LOCKED;
		CONTINUE WHEN NOT FOUND;
		v_seq := cairn._append(v.run_id, v_seq + 1, 'StepLeased', v.step_id, v.attempt + 1,
			v.lease_epoch + 1, jsonb_build_object('worker', p_worker,
				'lease_expires_at', v_at + p_lease_ms * interval '1 ms'), v_at);
		PERFORM cairn._end(v.run_id, v_seq, v_at);
		RETURN QUERY SELECT v.run_id, v.step_id, v.attempt + 1, v.lease_epoch + 1, v.spec, v_input,
			(SELECT coalesce(jsonb_object_agg(n.step_id, n.output), '{}') FROM cairn.steps n
			  WHERE n.run_id = v.run_id AND n.step_id = ANY (v.needs)),
			ARRAY(SELECT e.effect_key FROM cairn.effects e
			       WHERE e.run_id = v.run_id AND e.step_id = v.step_id ORDER BY 1);
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

-- complete: the attempt succeeded; its effects commit with it, each key once.
CREATE FUNCTION cairn.complete(p_run uuid, p_step text, p_epoch bigint, p_output jsonb,
	p_effects jsonb, p_info jsonb)
RETURNS jsonb LANGUAGE plpgsql SECURITY DEFINER SET search_path = cairn, pg_temp AS $$
DECLARE
	v_seq bigint := cairn._begin(p_run, false);
	v cairn.steps := cairn._leased(p_run, p_step, p_epoch);
	v_at timestamptz := clock_timestamp();
	v_skipped text[];
	v_status text;
BEGIN
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
	v_seq := cairn._succeed(p_run, v_seq, p_step, p_output, v_at, v.attempt, p_epoch);
	PERFORM cairn._end(p_run, v_seq, v_at);
	SELECT status INTO v_status FROM cairn.runs WHERE run_id = p_run;
	RETURN jsonb_build_object('run_status', v_status, 'effects_skipped', to_jsonb(v_skipped));
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
		lock_key = excluded.lock_key;
END $$;

-- Workers that registered a lock and whose session is gone.
CREATE VIEW cairn.dead_workers AS
SELECT w.worker_id FROM cairn.workers w
 WHERE w.lock_key IS NOT NULL
   AND NOT EXISTS (SELECT 1 FROM pg_locks l
		    WHERE l.locktype = 'advisory' AND l.granted AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
		      AND l.classid = cairn._worker_lock_class()::oid
		      AND l.objid = w.lock_key::oid AND l.objsubid = 2);

-- reap_expired: leases whose holder stopped renewing them, and at once the
-- leases of workers whose database session ended.
CREATE FUNCTION cairn.reap_expired(p_max int)
RETURNS int LANGUAGE plpgsql SECURITY DEFINER SET search_path = cairn, pg_temp AS $$
DECLARE
	v cairn.steps;
	v_seq bigint;
	v_at timestamptz := clock_timestamp();
	v_dead text[];
	n int := 0;
BEGIN
	SELECT coalesce(array_agg(worker_id), '{}') INTO v_dead FROM cairn.dead_workers;
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

-- fire_timers: sleeps that ended, approval and signal timeouts, and a
-- wake-up for retries whose backoff just ended.
CREATE FUNCTION cairn.fire_timers(p_max int)
RETURNS int LANGUAGE plpgsql SECURITY DEFINER SET search_path = cairn, pg_temp AS $$
DECLARE
	v cairn.steps;
	v_seq bigint;
	v_at timestamptz := clock_timestamp();
	v_policy text;
	q text;
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
		ELSIF v.kind = 'approval' THEN
			v_policy := coalesce(v.spec->'approval'->>'on_timeout', 'reject');
			IF v_policy = 'approve' THEN
				v_seq := cairn._append(v.run_id, v_seq + 1, 'ApprovalGranted', v.step_id, NULL, NULL,
					jsonb_build_object('actor', 'timeout'), v_at);
				v_seq := cairn._succeed(v.run_id, v_seq, v.step_id,
					jsonb_build_object('approved', true, 'by', jsonb_build_array('timeout')), v_at);
			ELSE
				IF v_policy = 'reject' THEN
					v_seq := cairn._append(v.run_id, v_seq + 1, 'ApprovalRejected', v.step_id, NULL,
						NULL, jsonb_build_object('actor', 'timeout'), v_at);
				END IF;
				v_seq := cairn._after_failure(v.run_id, v_seq, v, 'StepFailed',
					jsonb_build_object('reason', CASE v_policy WHEN 'reject' THEN 'rejected'
						ELSE 'approval_timeout' END, 'retryable', false,
						'message', 'no decision before the approval timeout'), v_at);
			END IF;
		ELSE
			v_seq := cairn._after_failure(v.run_id, v_seq, v, 'StepFailed',
				jsonb_build_object('reason', 'signal_timeout', 'retryable', false,
					'message', format('signal "%s" did not arrive in time', v.spec->'signal'->>'name')),
				v_at);
		END IF;
		PERFORM cairn._end(v.run_id, v_seq, v_at);
		n := n + 1;
	END LOOP;
	FOR q IN SELECT DISTINCT s.queue FROM cairn.steps s
		  WHERE s.status = 'ready' AND s.ready_at <= v_at
		    AND s.ready_at > v_at - interval '2 seconds' AND s.attempt > 0 LOOP
		PERFORM pg_notify('cairn_ready', q);
	END LOOP;
	RETURN n;
END $$;

-- The approval step p_step of p_run, locked, checked to be waiting.
CREATE FUNCTION cairn._waiting_approval(p_run uuid, p_step text)
RETURNS cairn.steps LANGUAGE plpgsql AS $$
DECLARE
	v cairn.steps;
BEGIN
	SELECT * INTO v FROM cairn.steps WHERE run_id = p_run AND step_id = p_step FOR UPDATE;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'step "%" of run % not found', p_step, p_run USING ERRCODE = 'CN002';
	END IF;
	IF v.kind <> 'approval' OR v.status <> 'waiting' THEN
		RAISE EXCEPTION 'step "%" is not waiting for approval (it is %)', p_step, v.status
			USING ERRCODE = 'CN003';
	END IF;
	RETURN v;
END $$;

-- approve: one approver's yes; the step succeeds once the quorum is met.
CREATE FUNCTION cairn.approve(p_run uuid, p_step text, p_actor text, p_comment text)
RETURNS jsonb LANGUAGE plpgsql SECURITY DEFINER SET search_path = cairn, pg_temp AS $$
DECLARE
	v_seq bigint := cairn._begin(p_run, true);
	v cairn.steps := cairn._waiting_approval(p_run, p_step);
	v_at timestamptz := clock_timestamp();
	v_quorum int := coalesce((v.spec->'approval'->>'quorum')::int, 1);
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
		v_seq := cairn._succeed(p_run, v_seq, p_step,
			jsonb_build_object('approved', true, 'by', v_by, 'comment', p_comment), v_at);
	END IF;
	PERFORM cairn._end(p_run, v_seq, v_at);
	RETURN jsonb_build_object('approvals', jsonb_array_length(v_by), 'quorum', v_quorum,
		'step_status', (SELECT status FROM cairn.steps WHERE run_id = p_run AND step_id = p_step));
END $$;

-- reject: one "no" fails the approval step for good, and so the run.
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
	v_seq := cairn._after_failure(p_run, v_seq, v, 'StepFailed',
		jsonb_build_object('reason', 'rejected', 'retryable', false,
			'message', format('rejected by %s%s', p_actor,
				CASE WHEN p_comment IS NULL THEN '' ELSE ': ' || p_comment END)), v_at);
	PERFORM cairn._end(p_run, v_seq, v_at);
	RETURN jsonb_build_object('step_status', 'failed',
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
