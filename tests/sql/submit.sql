\set QUIET 1
\pset format unaligned
\pset tuples_only true
BEGIN;
\ir setup.psql
SELECT plan(16);

SELECT pg_temp.new_run(pg_temp.def(pg_temp.step('a'), pg_temp.step('b', '{a}'),
	pg_temp.step('c', '{a}'), pg_temp.step('d', '{b,c}'))) AS run \gset

SELECT is(pg_temp.run_status(:'run'), 'running', 'a new run is running');
SELECT is(pg_temp.status(:'run', 'a'), 'ready', 'a step without needs is ready');
SELECT is(pg_temp.status(:'run', 'd'), 'pending', 'a step with needs is pending');
SELECT is((SELECT pending_needs FROM cairn.steps WHERE run_id = :'run' AND step_id = 'd'), 2,
	'pending_needs counts the needs');
SELECT is(pg_temp.types(:'run'), 'RunCreated StepsAdded StepReady:a', 'events of a new run');
SELECT is((SELECT last_seq FROM cairn.runs WHERE run_id = :'run'), 3::bigint, 'last_seq is the last event');
SELECT is(cairn.replay_check(:'run'), '[]'::jsonb, 'replay rebuilds a new run');

-- idempotency
SELECT run_id AS k1 FROM cairn.submit(pg_temp.def(pg_temp.step('a')), '{"n":1}', 'key-1') \gset
SELECT is((SELECT created FROM cairn.submit(pg_temp.def(pg_temp.step('a')), '{"n":1}', 'key-1')), false,
	'the same key and request is not created twice');
SELECT is((SELECT run_id FROM cairn.submit(pg_temp.def(pg_temp.step('a')), '{"n":1}', 'key-1')), :'k1'::uuid,
	'the same key returns the same run');
SELECT is((SELECT count(*) FROM cairn.runs WHERE idempotency_key = 'key-1'), 1::bigint, 'one run per key');
SELECT throws_ok($$SELECT * FROM cairn.submit(pg_temp.def(pg_temp.step('a')), '{"n":2}', 'key-1')$$,
	'CN003', NULL, 'the same key with another input is a conflict');
SELECT isnt((SELECT run_id FROM cairn.submit(pg_temp.def(pg_temp.step('a')), '{"n":1}', 'key-1', 'other')),
	:'k1'::uuid, 'keys are per tenant');
SELECT throws_ok($$SELECT * FROM cairn.submit('{"steps": 1}', '{}', NULL)$$, 'CN004', NULL,
	'a definition that is not normalized is refused');

-- kinds that wait
SELECT pg_temp.new_run(pg_temp.def(pg_temp.step('ok', '{}', 1, 'approval',
	'{"approval": {"prompt": "go?", "quorum": 1, "timeout_ms": null}}'),
	pg_temp.step('nap', '{}', 1, 'sleep', '{"sleep_ms": 60000}'))) AS run2 \gset
SELECT is(pg_temp.status(:'run2', 'ok'), 'waiting', 'an approval step waits');
SELECT is(pg_temp.status(:'run2', 'nap'), 'waiting', 'a sleep step waits');
SELECT ok((SELECT wake_at > now() + interval '59 seconds' FROM cairn.steps
	WHERE run_id = :'run2' AND step_id = 'nap'), 'a sleep step wakes after its duration');

SELECT * FROM finish();
ROLLBACK;
