-- 001_schema: tables of the store. Everything is keyed by run_id first so the
-- schema can be distributed by run_id without change. Only the transition
-- functions (002) write these tables; events are append-only.

DO $$
BEGIN
	IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'cairn_engine') THEN
		CREATE ROLE cairn_engine NOLOGIN;
	END IF;
	IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'cairn_worker') THEN
		CREATE ROLE cairn_worker NOLOGIN;
	END IF;
	IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'cairn_reader') THEN
		CREATE ROLE cairn_reader NOLOGIN;
	END IF;
END $$;

CREATE TABLE cairn.runs (
	run_id		uuid PRIMARY KEY,
	tenant		text NOT NULL DEFAULT 'default',
	workflow	text NOT NULL,
	definition	jsonb NOT NULL,
	input		jsonb,
	status		text NOT NULL CHECK (status IN ('running', 'succeeded', 'failed', 'cancelled')),
	idempotency_key	text,
	request_hash	text,
	labels		jsonb NOT NULL DEFAULT '{}',
	parent_run_id	uuid,
	forked_from	uuid,
	error		jsonb,
	steps_total	int NOT NULL DEFAULT 0,
	steps_done	int NOT NULL DEFAULT 0,
	max_steps	int,
	max_attempts_total int,
	deadline_at	timestamptz,
	created_at	timestamptz NOT NULL,
	updated_at	timestamptz NOT NULL,
	finished_at	timestamptz,
	last_seq	bigint NOT NULL DEFAULT 0
) WITH (toast_tuple_target = 128, fillfactor = 80);
ALTER TABLE cairn.runs ALTER COLUMN definition SET COMPRESSION lz4;
ALTER TABLE cairn.runs ALTER COLUMN input SET COMPRESSION lz4;
CREATE UNIQUE INDEX runs_idempotency ON cairn.runs (tenant, idempotency_key)
	WHERE idempotency_key IS NOT NULL;
CREATE INDEX runs_created ON cairn.runs (created_at);
CREATE INDEX runs_status ON cairn.runs (status, created_at);
CREATE INDEX runs_deadline ON cairn.runs (deadline_at) WHERE status = 'running';
CREATE INDEX runs_parent ON cairn.runs (parent_run_id) WHERE parent_run_id IS NOT NULL;

CREATE TABLE cairn.events (
	run_id		uuid NOT NULL,
	seq		bigint NOT NULL,
	type		text NOT NULL CHECK (type IN ('RunCreated', 'StepsAdded', 'StepReady',
		'StepWaiting', 'StepLeased', 'StepStarted', 'StepHeartbeat', 'CheckpointCommitted',
		'StepSucceeded', 'StepFailed', 'StepRetryScheduled', 'StepLeaseExpired',
		'StepTimedOut', 'ApprovalRequested', 'ApprovalGranted', 'ApprovalRejected',
		'TimerFired', 'SignalReceived', 'RunSucceeded', 'RunFailed', 'RunCancelled',
		'RunForked', 'RunRetried', 'StepSkipped', 'CheckpointFallback')),
	step_id		text,
	attempt		int,
	lease_epoch	bigint,
	payload		jsonb NOT NULL DEFAULT '{}',
	at		timestamptz NOT NULL,
	PRIMARY KEY (run_id, seq)
);
ALTER TABLE cairn.events ALTER COLUMN payload SET COMPRESSION lz4;
CREATE INDEX events_at ON cairn.events (at);

CREATE FUNCTION cairn._events_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	RAISE EXCEPTION 'cairn.events is append-only: % refused', TG_OP
		USING ERRCODE = 'CN003';
END $$;
CREATE TRIGGER events_append_only BEFORE UPDATE OR DELETE ON cairn.events
	FOR EACH ROW EXECUTE FUNCTION cairn._events_append_only();
CREATE TRIGGER events_no_truncate BEFORE TRUNCATE ON cairn.events
	FOR EACH STATEMENT EXECUTE FUNCTION cairn._events_append_only();

CREATE TABLE cairn.steps (
	run_id		uuid NOT NULL REFERENCES cairn.runs,
	step_id		text NOT NULL,
	kind		text NOT NULL CHECK (kind IN ('run', 'approval', 'sleep', 'wait_signal', 'workflow')),
	status		text NOT NULL CHECK (status IN ('pending', 'ready', 'leased', 'running',
		'waiting', 'succeeded', 'failed', 'cancelled', 'skipped')),
	attempt		int NOT NULL DEFAULT 0,
	max_attempts	int NOT NULL DEFAULT 1,
	needs		text[] NOT NULL DEFAULT '{}',
	pending_needs	int NOT NULL DEFAULT 0,
	queue		text NOT NULL DEFAULT 'default',
	priority	int NOT NULL DEFAULT 0,
	ready_at	timestamptz,
	wake_at		timestamptz,
	lease_owner	text,
	lease_epoch	bigint NOT NULL DEFAULT 0,
	lease_expires_at timestamptz,
	spec		jsonb NOT NULL,
	output		jsonb,
	error		jsonb,
	last_checkpoint	bigint,
	started_at	timestamptz,
	finished_at	timestamptz,
	updated_at	timestamptz NOT NULL,
	PRIMARY KEY (run_id, step_id)
) WITH (toast_tuple_target = 128, fillfactor = 70);
ALTER TABLE cairn.steps ALTER COLUMN spec SET COMPRESSION lz4;
ALTER TABLE cairn.steps ALTER COLUMN output SET COMPRESSION lz4;
CREATE INDEX steps_ready ON cairn.steps (queue, priority DESC, ready_at) WHERE status = 'ready';
CREATE INDEX steps_leases ON cairn.steps (lease_expires_at) WHERE status IN ('leased', 'running');
CREATE INDEX steps_timers ON cairn.steps (wake_at) WHERE status = 'waiting';
-- the steps a success may unblock: few, even in a run of thousands of steps
CREATE INDEX steps_pending ON cairn.steps (run_id) WHERE status = 'pending';
CREATE INDEX steps_concurrency ON cairn.steps ((spec->'concurrency'->>'key'))
	WHERE status IN ('leased', 'running');

-- The outbox: a step's effects, committed with its success, each key once.
CREATE TABLE cairn.effects (
	run_id		uuid NOT NULL,
	step_id		text NOT NULL,
	effect_key	text NOT NULL,
	attempt		int NOT NULL,
	payload		jsonb NOT NULL,
	committed_at	timestamptz NOT NULL,
	PRIMARY KEY (run_id, step_id, effect_key)
);

CREATE TABLE cairn.step_logs (
	run_id		uuid NOT NULL,
	id		bigserial,
	step_id		text NOT NULL,
	attempt		int NOT NULL,
	stream		text NOT NULL CHECK (stream IN ('stdout', 'stderr', 'system')),
	data		text NOT NULL,
	truncated	boolean NOT NULL DEFAULT false,
	at		timestamptz NOT NULL,
	PRIMARY KEY (run_id, id)
);
ALTER TABLE cairn.step_logs ALTER COLUMN data SET COMPRESSION lz4;

CREATE TABLE cairn.approvals (
	run_id		uuid NOT NULL,
	seq		bigint NOT NULL,
	step_id		text NOT NULL,
	decision	text NOT NULL CHECK (decision IN ('approved', 'rejected')),
	actor		text NOT NULL,
	comment		text,
	at		timestamptz NOT NULL,
	PRIMARY KEY (run_id, seq)
);

-- Signals sent before any step waits for them wait here.
CREATE TABLE cairn.signals (
	run_id		uuid NOT NULL,
	seq		bigint NOT NULL,
	name		text NOT NULL,
	payload		jsonb,
	consumed_by	text,
	at		timestamptz NOT NULL,
	PRIMARY KEY (run_id, seq)
);

CREATE TABLE cairn.checkpoints (
	run_id		uuid NOT NULL,
	step_id		text NOT NULL,
	seq		bigint NOT NULL,
	attempt		int NOT NULL,
	base_seq	bigint,
	codec		text NOT NULL,
	raw_size	bigint NOT NULL,
	stored_size	bigint NOT NULL,
	tree_hash	text NOT NULL,
	base_hash	text,
	manifest	jsonb,
	data		bytea NOT NULL,
	created_at	timestamptz NOT NULL,
	PRIMARY KEY (run_id, step_id, seq)
);
ALTER TABLE cairn.checkpoints ALTER COLUMN data SET STORAGE EXTERNAL;

-- Starts per second per rate-limit key, for the last minute's count.
CREATE TABLE cairn.rate_windows (
	key		text NOT NULL,
	window_start	timestamptz NOT NULL,
	n		int NOT NULL,
	PRIMARY KEY (key, window_start)
);

-- The webhook outbox: approval events to deliver, each until it is accepted.
CREATE TABLE cairn.webhook_deliveries (
	id		bigserial PRIMARY KEY,
	run_id		uuid NOT NULL,
	seq		bigint NOT NULL,
	event_type	text NOT NULL,
	step_id		text,
	payload		jsonb NOT NULL,
	attempts	int NOT NULL DEFAULT 0,
	next_at		timestamptz NOT NULL,
	delivered_at	timestamptz,
	last_status	int,
	last_error	text,
	created_at	timestamptz NOT NULL,
	UNIQUE (run_id, seq)
);
CREATE INDEX webhook_due ON cairn.webhook_deliveries (next_at) WHERE delivered_at IS NULL;

-- Every delivery attempt, as the receiver answered it.
CREATE TABLE cairn.webhook_attempts (
	delivery_id	bigint NOT NULL REFERENCES cairn.webhook_deliveries,
	attempt		int NOT NULL,
	at		timestamptz NOT NULL,
	status		int,
	error		text,
	PRIMARY KEY (delivery_id, attempt)
);

CREATE TABLE cairn.workers (
	worker_id	text PRIMARY KEY,
	queues		text[] NOT NULL,
	started_at	timestamptz NOT NULL,
	last_seen	timestamptz NOT NULL,
	lock_key	int,
	gone_since	timestamptz	-- when its session was first seen gone
);

CREATE TABLE cairn.api_tokens (
	name		text PRIMARY KEY,
	token_sha256	bytea NOT NULL UNIQUE,
	roles		text[] NOT NULL CHECK (roles <@ ARRAY['submit', 'approve', 'read', 'admin']),
	created_at	timestamptz NOT NULL DEFAULT now()
);

REVOKE ALL ON ALL TABLES IN SCHEMA cairn FROM PUBLIC;
ALTER DEFAULT PRIVILEGES IN SCHEMA cairn REVOKE EXECUTE ON FUNCTIONS FROM PUBLIC;
