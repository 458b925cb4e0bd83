-- 004_recovery: worker liveness through a session advisory lock (a dead
-- worker's leases are taken back at once, not after the lease timeout),
-- the checkpoint chain for restore, and retry / fork of runs.

-- checkpoint_chain: the checkpoints a new attempt restores from, oldest
-- first, from the newest full one on. Fenced like the other worker calls.
CREATE FUNCTION cairn.checkpoint_chain(p_run uuid, p_step text, p_epoch bigint)
RETURNS TABLE (seq bigint, base_seq bigint, codec text, raw_size bigint, stored_size bigint,
	tree_hash text, base_hash text, manifest jsonb, data bytea)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = cairn, pg_temp AS $$
#variable_conflict use_column
DECLARE
	v cairn.steps := cairn._leased(p_run, p_step, p_epoch);
	v_full bigint;
BEGIN
	SELECT max(c.seq) INTO v_full FROM cairn.checkpoints c
	 WHERE c.run_id = p_run AND c.step_id = p_step AND c.base_seq IS NULL;
	RETURN QUERY SELECT c.seq, c.base_seq, c.codec, c.raw_size, c.stored_size, c.tree_hash,
		c.base_hash, c.manifest, c.data
	  FROM cairn.checkpoints c
	 WHERE c.run_id = p_run AND c.step_id = p_step AND c.seq >= v_full
	 ORDER BY c.seq;
END $$;

-- RunRetried, applied: the run runs again from its failed steps.
CREATE FUNCTION cairn._apply_retried(p_run uuid, p jsonb, p_at timestamptz)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
	UPDATE cairn.runs SET status = 'running', error = NULL, finished_at = NULL WHERE run_id = p_run;
	UPDATE cairn.steps s SET status = 'pending', error = NULL, finished_at = NULL,
		lease_expires_at = NULL, wake_at = NULL, started_at = NULL,
		max_attempts = s.attempt + coalesce((s.spec->'retry'->>'max_attempts')::int, 1),
		pending_needs = (SELECT count(*) FROM unnest(s.needs) n
				  WHERE NOT EXISTS (SELECT 1 FROM cairn.steps d WHERE d.run_id = p_run
						     AND d.step_id = n AND d.status IN ('succeeded', 'skipped'))),
		updated_at = p_at
	 WHERE s.run_id = p_run AND s.status IN ('failed', 'cancelled');
END $$;

-- retry: a failed or cancelled run goes on from the steps that did not
-- succeed; what succeeded keeps its output (and its checkpoints).
CREATE FUNCTION cairn.retry(p_run uuid, p_actor text)
RETURNS jsonb LANGUAGE plpgsql SECURITY DEFINER SET search_path = cairn, pg_temp AS $$
DECLARE
	v_seq bigint := cairn._begin(p_run, false);
	v_status text;
	v cairn.steps;
	v_at timestamptz := clock_timestamp();
	v_steps text[];
BEGIN
	SELECT status INTO v_status FROM cairn.runs WHERE run_id = p_run;
	IF v_status NOT IN ('failed', 'cancelled') THEN
		RAISE EXCEPTION 'run % is %: only failed or cancelled runs can be retried', p_run, v_status
			USING ERRCODE = 'CN003';
	END IF;
	SELECT array_agg(step_id ORDER BY step_id) INTO v_steps FROM cairn.steps
	 WHERE run_id = p_run AND status IN ('failed', 'cancelled');
	v_seq := cairn._append(p_run, v_seq + 1, 'RunRetried', NULL, NULL, NULL,
		jsonb_build_object('actor', p_actor, 'steps', to_jsonb(v_steps)), v_at);
	FOR v IN SELECT * FROM cairn.steps WHERE run_id = p_run AND status = 'pending'
		  AND pending_needs = 0 ORDER BY step_id FOR UPDATE LOOP
		v_seq := cairn._activate(p_run, v_seq, v, v_at);
	END LOOP;
	PERFORM cairn._end(p_run, v_seq, v_at);
	RETURN jsonb_build_object('run_status', 'running', 'steps', to_jsonb(v_steps));
END $$;

-- fork: a new run that reuses the outputs of every step of p_run that
-- succeeded and does not depend on p_from; p_from and what depends on it
-- run again (with p_def's version of them when given).
CREATE FUNCTION cairn.fork(p_run uuid, p_from text, p_def jsonb, p_actor text)
RETURNS uuid LANGUAGE plpgsql SECURITY DEFINER SET search_path = cairn, pg_temp AS $$
DECLARE
	v_src cairn.runs;
	v_new uuid := gen_random_uuid();
	v_def jsonb;
	v_at timestamptz := clock_timestamp();
	v_seq bigint;
	v_redo text[];
	v_reuse record;
	v cairn.steps;
BEGIN
	SELECT * INTO v_src FROM cairn.runs WHERE run_id = p_run FOR UPDATE;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'run % not found', p_run USING ERRCODE = 'CN002';
	END IF;
	v_def := coalesce(p_def, v_src.definition);
	IF NOT EXISTS (SELECT 1 FROM jsonb_array_elements(v_def->'steps') s WHERE s->>'id' = p_from) THEN
		RAISE EXCEPTION 'step "%" is not in the definition', p_from USING ERRCODE = 'CN004';
	END IF;
	-- p_from and everything downstream of it, in the new definition
	WITH RECURSIVE down(id) AS (
		SELECT p_from
		UNION
		SELECT s->>'id' FROM jsonb_array_elements(v_def->'steps') s, down
		 WHERE s->'needs' ? down.id)
	SELECT array_agg(id) INTO v_redo FROM down;
	v_seq := cairn._append(v_new, 1, 'RunCreated', NULL, NULL, NULL,
		jsonb_build_object('workflow', v_def->>'name', 'definition', v_def, 'input', v_src.input,
			'tenant', v_src.tenant, 'labels', v_src.labels, 'forked_from', p_run), v_at);
	v_seq := cairn._append(v_new, v_seq + 1, 'RunForked', NULL, NULL, NULL,
		jsonb_build_object('from_run', p_run, 'from_step', p_from, 'actor', p_actor), v_at);
	v_seq := cairn._append(v_new, v_seq + 1, 'StepsAdded', NULL, NULL, NULL,
		jsonb_build_object('steps', v_def->'steps'), v_at);
	FOR v_reuse IN SELECT s.step_id, s.output FROM cairn.steps s
		   WHERE s.run_id = p_run AND s.status = 'succeeded' AND s.step_id <> ALL (v_redo)
		     AND EXISTS (SELECT 1 FROM cairn.steps n WHERE n.run_id = v_new AND n.step_id = s.step_id)
		   ORDER BY s.step_id LOOP
		v_seq := cairn._append(v_new, v_seq + 1, 'StepSucceeded', v_reuse.step_id, NULL, NULL,
			jsonb_build_object('output', v_reuse.output, 'reused_from', p_run), v_at);
	END LOOP;
	FOR v IN SELECT * FROM cairn.steps WHERE run_id = v_new AND status = 'pending'
		  AND pending_needs = 0 ORDER BY step_id FOR UPDATE LOOP
		v_seq := cairn._activate(v_new, v_seq, v, v_at);
	END LOOP;
	IF (SELECT steps_done >= steps_total FROM cairn.runs WHERE run_id = v_new) THEN
		v_seq := cairn._append(v_new, v_seq + 1, 'RunSucceeded', NULL, NULL, NULL, '{}', v_at);
	END IF;
	PERFORM cairn._end(v_new, v_seq, v_at);
	-- the source run records the fork too
	PERFORM cairn._append(p_run, v_src.last_seq + 1, 'RunForked', NULL, NULL, NULL,
		jsonb_build_object('child_run', v_new, 'from_step', p_from, 'actor', p_actor), v_at);
	PERFORM cairn._end(p_run, v_src.last_seq + 1, v_at);
	RETURN v_new;
END $$;

GRANT EXECUTE ON FUNCTION cairn.checkpoint_chain(uuid, text, bigint) TO cairn_worker;
GRANT EXECUTE ON FUNCTION cairn.retry(uuid, text), cairn.fork(uuid, text, jsonb, text) TO cairn_engine;
REVOKE ALL ON FUNCTION cairn._apply_retried(uuid, jsonb, timestamptz) FROM PUBLIC;
