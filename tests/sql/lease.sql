\set QUIET 1
\pset format unaligned
\pset tuples_only true
BEGIN;
\ir setup.psql
SELECT plan(31);

SELECT pg_temp.new_run(pg_temp.def(pg_temp.step('a', '{}', 2), pg_temp.step('b', '{a}'))) AS run \gset

-- claim
SELECT is((SELECT count(*) FROM cairn.claim('w1', '{other}', 10, 30000)), 0::bigint,
	'claim takes only the queues asked for');
SELECT is((SELECT string_agg(step_id || '/' || attempt || '/' || lease_epoch, ',')
	FROM cairn.claim('w1', '{default}', 10, 30000)), 'a/1/1', 'claim leases the ready step, attempt 1, epoch 1');
SELECT is(pg_temp.status(:'run', 'a'), 'leased', 'a claimed step is leased');
SELECT is((SELECT count(*) FROM cairn.claim('w2', '{default}', 10, 30000)), 0::bigint,
	'a leased step is not claimed again');
SELECT throws_ok($$SELECT * FROM cairn.claim('w1', '{default}', 1, 5)$$, 'CN004', NULL,
	'a lease shorter than 100 ms is refused');

-- start and heartbeat
SELECT lives_ok(format($$SELECT cairn.start(%L, 'a', 1, '{"pid": 42}')$$, :'run'), 'start with the current epoch');
SELECT is(pg_temp.status(:'run', 'a'), 'running', 'a started step is running');
SELECT throws_ok(format($$SELECT cairn.start(%L, 'a', 7, '{}')$$, :'run'), 'CN001', NULL,
	'start with another epoch is fenced');
SELECT is((SELECT count(*) FROM cairn.heartbeat('w1', ARRAY[:'run'::uuid], '{a}', '{1}', 30000)), 0::bigint,
	'a heartbeat with the current epoch extends the lease');
SELECT is((SELECT step_id FROM cairn.heartbeat('w1', ARRAY[:'run'::uuid], '{a}', '{9}', 30000)), 'a',
	'a heartbeat with a stale epoch is reported back');

-- failure, retry, then the lease expires and the late report is fenced
SELECT is(cairn.fail(:'run', 'a', 1, '{"reason": "exit", "exit_code": 3, "message": "boom"}', '{}')->>'step_status',
	'ready', 'a failed attempt with attempts left is retried');
SELECT is((SELECT error->>'reason' FROM cairn.steps WHERE run_id = :'run' AND step_id = 'a'), 'exit',
	'the failure reason is kept');
SELECT is((SELECT lease_epoch FROM cairn.claim('w2', '{default}', 10, 30000)), 2::bigint,
	'the retry is claimed with epoch 2');
SELECT throws_ok(format($$SELECT cairn.complete(%L, 'a', 1, '1', '[]', '{}')$$, :'run'), 'CN001', NULL,
	'a report from the old lease is fenced');
UPDATE cairn.steps SET lease_expires_at = now() - interval '1 second' WHERE run_id = :'run' AND step_id = 'a';
SELECT is(cairn.reap_expired(10), 1, 'reap_expired takes back the expired lease');
SELECT is(pg_temp.status(:'run', 'a'), 'failed', 'the lease expiry used the last attempt: the step failed');
SELECT is(pg_temp.run_status(:'run'), 'failed', 'and the run failed');
SELECT is(pg_temp.status(:'run', 'b'), 'cancelled', 'the steps that never ran are cancelled');
SELECT throws_ok(format($$SELECT cairn.complete(%L, 'a', 2, '1', '[]', '{}')$$, :'run'), 'CN001', NULL,
	'a report from the reaped lease is fenced');
SELECT is(cairn.replay_check(:'run'), '[]'::jsonb, 'replay rebuilds a failed run');

-- success with effects, exactly once
SELECT pg_temp.new_run(pg_temp.def(pg_temp.step('a'), pg_temp.step('b', '{a}'))) AS r2 \gset
SELECT lease_epoch AS e FROM cairn.claim('w1', '{default}', 1, 30000) \gset
SELECT is(cairn.complete(:'r2', 'a', :e, '{"n": 1}', '[{"key": "k1"}, {"key": "k2"}]',
	'{"logs": [{"stream": "stdout", "data": "hello"}]}')->'effects_skipped', '[]'::jsonb,
	'complete commits the effects');
SELECT is((SELECT count(*) FROM cairn.effects WHERE run_id = :'r2'), 2::bigint, 'two effects committed');
SELECT is((SELECT data FROM cairn.step_logs WHERE run_id = :'r2'), 'hello', 'logs are stored with the result');
SELECT is(pg_temp.status(:'r2', 'b'), 'ready', 'the next step is ready');

-- complete may lease the worker what it made ready, in the same transaction
SELECT pg_temp.new_run(pg_temp.def(pg_temp.step('x', '{}', 3, 'run', '{"queue": "mq"}'),
	pg_temp.step('y', '{x}', 3, 'run', '{"queue": "mq"}'), pg_temp.step('z', '{x}', 3, 'run', '{"queue": "mq"}'))) AS r4 \gset
SELECT lease_epoch AS e4 FROM cairn.claim('w9', '{mq}', 1, 30000) \gset
SELECT cairn.complete(:'r4', 'x', :e4, '{"x": 1}', '[]', '{}',
	'{"worker": "w9", "queues": ["mq"], "max": 1, "lease_ms": 30000}') AS done4 \gset
SELECT is(jsonb_array_length((:'done4'::jsonb)->'claimed'), 1, 'complete leases at most max of what it made ready');
SELECT is((:'done4'::jsonb)->'claimed'->0->'needs_output', '{"x": {"x": 1}}'::jsonb,
	'with what claim would hand over');
SELECT is((SELECT count(*) FROM cairn.steps WHERE run_id = :'r4' AND status = 'leased' AND lease_owner = 'w9'), 1::bigint,
	'the step is leased to that worker');
SELECT is(cairn.replay_check(:'r4'), '[]'::jsonb, 'replay rebuilds a lease taken at completion');
SELECT is((SELECT needs_output FROM cairn.claim('w1', '{default}', 1, 30000)), '{"a": {"n": 1}}'::jsonb,
	'claim hands over the outputs of the needs');
SELECT throws_ok(format($$SELECT cairn.complete(%L, 'b', 1, '1', '[{"nokey": 1}]', '{}')$$, :'r2'), 'CN004', NULL,
	'an effect without a key is refused');

-- events are append-only
SELECT throws_ok(format($$UPDATE cairn.events SET type = 'RunCreated' WHERE run_id = %L$$, :'r2'), 'CN003', NULL,
	'events refuse UPDATE');

SELECT * FROM finish();
ROLLBACK;
