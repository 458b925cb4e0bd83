\set QUIET 1
\pset format unaligned
\pset tuples_only true
BEGIN;
\ir setup.psql
SELECT plan(18);

-- retry: a failed run goes on from its failed step, keeping what succeeded
SELECT pg_temp.new_run(pg_temp.def(pg_temp.step('a'), pg_temp.step('b', '{a}', 1),
	pg_temp.step('c', '{b}'))) AS run \gset
SELECT lease_epoch AS e FROM cairn.claim('w1', '{default}', 1, 30000) \gset
SELECT cairn.complete(:'run', 'a', :e, '{"v": "a1"}', '[]', '{}');
SELECT lease_epoch AS e FROM cairn.claim('w1', '{default}', 1, 30000) \gset
SELECT cairn.fail(:'run', 'b', :e, '{"reason": "exit", "exit_code": 1}', '{}');
SELECT is(pg_temp.run_status(:'run'), 'failed', 'the run failed at b');
SELECT throws_ok(format($$SELECT cairn.retry(%L, 'me')$$, pg_temp.new_run(pg_temp.def(pg_temp.step('x')))),
	'CN003', NULL, 'a running run cannot be retried');
SELECT is(cairn.retry(:'run', 'me')->'steps', '["b", "c"]'::jsonb, 'retry restarts the failed and cancelled steps');
SELECT is(pg_temp.status(:'run', 'a'), 'succeeded', 'what succeeded stays succeeded');
SELECT is(pg_temp.status(:'run', 'b'), 'ready', 'the failed step is ready again');
SELECT is(pg_temp.status(:'run', 'c'), 'pending', 'its dependents wait for it');
SELECT is((SELECT attempt || '/' || lease_epoch FROM cairn.claim('w1', '{default}', 10, 30000) c WHERE c.run_id = :'run'), '2/2',
	'the retried step goes on counting attempts');
SELECT is(cairn.replay_check(:'run'), '[]'::jsonb, 'replay rebuilds a retried run');

-- fork: reuse everything before the chosen step
SELECT cairn.fork(:'run', 'b', NULL, 'me') AS child \gset
SELECT is(pg_temp.status(:'child', 'a'), 'succeeded', 'a fork reuses the steps before the fork point');
SELECT is((SELECT output FROM cairn.steps WHERE run_id = :'child' AND step_id = 'a'), '{"v": "a1"}'::jsonb,
	'with their outputs');
SELECT is(pg_temp.status(:'child', 'b'), 'ready', 'the fork point runs again');
SELECT is((SELECT forked_from FROM cairn.runs WHERE run_id = :'child'), :'run'::uuid, 'the fork records its origin');
SELECT ok((SELECT count(*) FROM cairn.events WHERE run_id = :'run' AND type = 'RunForked') = 1,
	'the origin records the fork');
SELECT is(cairn.replay_check(:'child'), '[]'::jsonb, 'replay rebuilds a fork');

-- a worker whose session is gone loses its leases at once
SELECT cairn.worker_register('ghost', '{default}');
SELECT pg_advisory_unlock_all();
SELECT pg_temp.new_run(pg_temp.def(pg_temp.step('z'))) AS r3 \gset
SELECT count(*) AS n FROM cairn.claim('ghost', '{default}', 100, 600000) \gset
SELECT ok(EXISTS (SELECT 1 FROM cairn.sessionless_workers WHERE worker_id = 'ghost'),
	'a worker without its session lock has no session');
SELECT cairn.reap_expired(10);
SELECT is(pg_temp.status(:'r3', 'z'), 'leased', 'within the grace its lease stays (its connection may come back)');
UPDATE cairn.workers SET gone_since = clock_timestamp() - interval '1 second' WHERE worker_id = 'ghost';
SELECT ok(EXISTS (SELECT 1 FROM cairn.dead_workers WHERE worker_id = 'ghost'), 'after the grace it is dead');
SELECT ok(cairn.reap_expired(10) >= 1 AND pg_temp.status(:'r3', 'z') = 'ready',
	'its lease is taken back before it expires');

SELECT * FROM finish();
ROLLBACK;
