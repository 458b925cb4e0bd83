-- 005_agents: named, versioned workflow definitions, durable schedules and
-- webhook delivery bookkeeping.

CREATE TABLE cairn.workflow_defs (
	name		text NOT NULL,
	version		int NOT NULL,
	definition	jsonb NOT NULL,
	created_at	timestamptz NOT NULL,
	PRIMARY KEY (name, version)
);
ALTER TABLE cairn.workflow_defs ALTER COLUMN definition SET COMPRESSION lz4;

-- workflow_put: stores version N+1 of a named definition (normalized by the
-- engine) and returns N+1; the same definition as the latest returns it.
CREATE FUNCTION cairn.workflow_put(p_name text, p_def jsonb)
RETURNS int LANGUAGE plpgsql SECURITY DEFINER SET search_path = cairn, pg_temp AS $$
DECLARE
	v_version int;
	v_latest jsonb;
BEGIN
	IF p_name IS NULL OR p_name !~ '^[A-Za-z0-9_.-]{1,128}$' THEN
		RAISE EXCEPTION 'invalid workflow name "%"', p_name USING ERRCODE = 'CN004';
	END IF;
	PERFORM pg_advisory_xact_lock(hashtext('cairn.workflow_defs'), hashtext(p_name));
	SELECT version, definition INTO v_version, v_latest FROM cairn.workflow_defs
	 WHERE name = p_name ORDER BY version DESC LIMIT 1;
	IF v_latest = p_def THEN
		RETURN v_version;
	END IF;
	v_version := coalesce(v_version, 0) + 1;
	INSERT INTO cairn.workflow_defs VALUES (p_name, v_version, p_def, clock_timestamp());
	RETURN v_version;
END $$;

CREATE TABLE cairn.schedules (
	name		text PRIMARY KEY,
	cron		text NOT NULL,
	definition	jsonb NOT NULL,
	input		jsonb,
	catch_up	text NOT NULL CHECK (catch_up IN ('skip', 'one', 'all')),
	next_at		timestamptz NOT NULL,
	last_tick	timestamptz,
	last_run_id	uuid,
	enabled		boolean NOT NULL DEFAULT true,
	created_at	timestamptz NOT NULL
);
CREATE INDEX schedules_due ON cairn.schedules (next_at) WHERE enabled;

-- schedule_put: creates or replaces a schedule; the engine parsed the cron
-- expression and gives its first tick.
CREATE FUNCTION cairn.schedule_put(p_name text, p_cron text, p_def jsonb, p_input jsonb,
	p_catch_up text, p_next_at timestamptz)
RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path = cairn, pg_temp AS $$
BEGIN
	IF p_name IS NULL OR p_name !~ '^[A-Za-z0-9_.-]{1,128}$' THEN
		RAISE EXCEPTION 'invalid schedule name "%"', p_name USING ERRCODE = 'CN004';
	END IF;
	INSERT INTO cairn.schedules (name, cron, definition, input, catch_up, next_at, created_at)
	VALUES (p_name, p_cron, p_def, p_input, coalesce(p_catch_up, 'one'), p_next_at, clock_timestamp())
	ON CONFLICT (name) DO UPDATE SET cron = excluded.cron, definition = excluded.definition,
		input = excluded.input, catch_up = excluded.catch_up, next_at = excluded.next_at,
		enabled = true;
END $$;

CREATE FUNCTION cairn.schedule_delete(p_name text)
RETURNS boolean LANGUAGE sql SECURITY DEFINER SET search_path = cairn, pg_temp AS $$
	WITH d AS (DELETE FROM cairn.schedules WHERE name = p_name RETURNING 1)
	SELECT EXISTS (SELECT 1 FROM d);
$$;

-- schedule_fire: starts the run of one tick. Only the call whose p_tick is
-- the schedule's next_at does anything (so several engines fire each tick
-- once); p_start says whether this tick starts a run (false for ticks the
-- catch-up policy skips). The run's idempotency key names the tick.
CREATE FUNCTION cairn.schedule_fire(p_name text, p_tick timestamptz, p_next timestamptz,
	p_start boolean)
RETURNS uuid LANGUAGE plpgsql SECURITY DEFINER SET search_path = cairn, pg_temp AS $$
DECLARE
	s cairn.schedules;
	v_run uuid;
BEGIN
	SELECT * INTO s FROM cairn.schedules WHERE name = p_name FOR UPDATE SKIP LOCKED;
	IF NOT FOUND OR s.next_at <> p_tick OR NOT s.enabled THEN
		RETURN NULL;
	END IF;
	IF p_start THEN
		SELECT c.run_id INTO v_run FROM cairn._create_run(s.definition, s.input,
			'schedule:' || p_name || ':' || to_char(p_tick AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'),
			'default', jsonb_build_object('cairn.schedule', p_name,
				'cairn.tick', to_char(p_tick AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"')),
			NULL) c;
	END IF;
	UPDATE cairn.schedules SET next_at = p_next, last_tick = p_tick,
		last_run_id = coalesce(v_run, last_run_id)
	 WHERE name = p_name;
	RETURN v_run;
END $$;

-- webhook_claim: deliveries due now, leased to the caller for p_lease_ms.
CREATE FUNCTION cairn.webhook_claim(p_max int, p_lease_ms int)
RETURNS TABLE (id bigint, run_id uuid, seq bigint, event_type text, step_id text,
	payload jsonb, attempts int, created_at timestamptz)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = cairn, pg_temp AS $$
#variable_conflict use_column
BEGIN
	RETURN QUERY
	UPDATE cairn.webhook_deliveries d SET next_at = clock_timestamp() + p_lease_ms * interval '1 ms'
	 WHERE d.id IN (SELECT w.id FROM cairn.webhook_deliveries w
			 WHERE w.delivered_at IS NULL AND w.next_at <= clock_timestamp()
			 ORDER BY w.next_at LIMIT p_max FOR UPDATE SKIP LOCKED)
	RETURNING d.id, d.run_id, d.seq, d.event_type, d.step_id, d.payload, d.attempts, d.created_at;
END $$;

-- webhook_result: records one attempt; a failed one is tried again after
-- p_retry_ms (the engine's backoff).
CREATE FUNCTION cairn.webhook_result(p_id bigint, p_ok boolean, p_status int, p_error text,
	p_retry_ms int)
RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path = cairn, pg_temp AS $$
DECLARE
	v_attempt int;
	v_at timestamptz := clock_timestamp();
BEGIN
	UPDATE cairn.webhook_deliveries SET attempts = attempts + 1, last_status = p_status,
		last_error = p_error,
		delivered_at = CASE WHEN p_ok THEN v_at END,
		next_at = CASE WHEN p_ok THEN next_at ELSE v_at + p_retry_ms * interval '1 ms' END
	 WHERE id = p_id RETURNING attempts INTO v_attempt;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'webhook delivery % not found', p_id USING ERRCODE = 'CN002';
	END IF;
	INSERT INTO cairn.webhook_attempts VALUES (p_id, v_attempt, v_at, p_status, p_error);
END $$;

REVOKE ALL ON ALL FUNCTIONS IN SCHEMA cairn FROM PUBLIC;
GRANT EXECUTE ON FUNCTION cairn.workflow_put(text, jsonb),
	cairn.schedule_put(text, text, jsonb, jsonb, text, timestamptz),
	cairn.schedule_delete(text), cairn.schedule_fire(text, timestamptz, timestamptz, boolean),
	cairn.webhook_claim(int, int), cairn.webhook_result(bigint, boolean, int, text, int)
	TO cairn_engine;
GRANT EXECUTE ON FUNCTION cairn.run_defaults(uuid) TO cairn_worker;
GRANT SELECT ON cairn.workflow_defs, cairn.schedules, cairn.webhook_deliveries,
	cairn.webhook_attempts TO cairn_engine;
GRANT SELECT ON cairn.webhook_deliveries, cairn.webhook_attempts TO cairn_reader;
