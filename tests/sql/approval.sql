\set QUIET 1
\pset format unaligned
\pset tuples_only true
BEGIN;
\ir setup.psql
SELECT plan(20);

SELECT pg_temp.new_run(pg_temp.def(
	pg_temp.step('gate', '{}', 1, 'approval', '{"approval": {"prompt": "ship?", "quorum": 2, "timeout_ms": null}}'),
	pg_temp.step('after', '{gate}', 1, 'sleep', '{"sleep_ms": 0}'))) AS run \gset

SELECT is((SELECT prompt FROM cairn.pending_approvals WHERE run_id = :'run'), 'ship?',
	'pending_approvals lists the waiting step with its prompt');
SELECT is(cairn.approve(:'run', 'gate', 'alice', 'fine')->>'step_status', 'waiting',
	'one approval of a quorum of two keeps waiting');
SELECT throws_ok(format($$SELECT cairn.approve(%L, 'gate', 'alice', NULL)$$, :'run'), 'CN003', NULL,
	'the same approver does not count twice');
SELECT is(cairn.approve(:'run', 'gate', 'bob', NULL)->>'step_status', 'succeeded',
	'the second approver meets the quorum');
SELECT throws_ok(format($$SELECT cairn.approve(%L, 'gate', 'carol', NULL)$$, :'run'), 'CN003', NULL,
	'a decision on a step that no longer waits is a conflict');
SELECT throws_ok(format($$SELECT cairn.approve(%L, 'nope', 'carol', NULL)$$, :'run'), 'CN002', NULL,
	'an unknown step is not found');
SELECT is((SELECT string_agg(actor, ',' ORDER BY at) FROM cairn.approval_decisions WHERE run_id = :'run'),
	'alice,bob', 'approval_decisions says who approved');
SELECT is(cairn.fire_timers(10), 1, 'fire_timers wakes the zero-length sleep');
SELECT is(pg_temp.run_status(:'run'), 'succeeded', 'the run succeeds');
SELECT is(cairn.replay_check(:'run'), '[]'::jsonb, 'replay rebuilds an approved run');

-- rejection
SELECT pg_temp.new_run(pg_temp.def(
	pg_temp.step('gate', '{}', 1, 'approval', '{"approval": {"prompt": "ship?", "quorum": 1, "timeout_ms": null}}'))) AS r2 \gset
SELECT is(cairn.reject(:'r2', 'gate', 'alice', 'too risky')->>'run_status', 'failed', 'a rejection fails the run');
SELECT is((SELECT failure_reason FROM cairn.run_history WHERE run_id = :'r2'), 'rejected',
	'run_history says why');

-- timeouts
SELECT pg_temp.new_run(pg_temp.def(
	pg_temp.step('yes', '{}', 1, 'approval', '{"approval": {"prompt": "?", "quorum": 1, "timeout_ms": 0, "on_timeout": "approve"}}'),
	pg_temp.step('no', '{}', 1, 'approval', '{"approval": {"prompt": "?", "quorum": 1, "timeout_ms": 3600000, "on_timeout": "reject"}}'))) AS r3 \gset
SELECT is(cairn.fire_timers(10), 1, 'only the due approval times out');
SELECT is(pg_temp.status(:'r3', 'yes'), 'succeeded', 'on_timeout approve approves');
UPDATE cairn.steps SET wake_at = now() - interval '1 second' WHERE run_id = :'r3' AND step_id = 'no';
SELECT is(cairn.fire_timers(10), 1, 'the second approval times out');
SELECT is(pg_temp.run_status(:'r3'), 'failed', 'on_timeout reject fails the run');

-- signals
SELECT pg_temp.new_run(pg_temp.def(
	pg_temp.step('hold', '{}', 1, 'wait_signal', '{"signal": {"name": "go", "timeout_ms": null}}'))) AS r4 \gset
SELECT is(cairn.signal(:'r4', 'other', '1', 'me')->>'delivered_to', NULL, 'a signal nobody waits for is kept');
SELECT is(cairn.signal(:'r4', 'go', '{"ok": true}', 'me')->>'delivered_to', 'hold', 'the signal reaches its step');
SELECT is((SELECT output FROM cairn.steps WHERE run_id = :'r4'), '{"ok": true}'::jsonb,
	'its payload is the step output');

-- cancel
SELECT pg_temp.new_run(pg_temp.def(pg_temp.step('a'))) AS r5 \gset
SELECT cairn.cancel(:'r5', 'me', 'not needed');
SELECT is(pg_temp.status(:'r5', 'a'), 'cancelled', 'cancel cancels the unfinished steps');

SELECT * FROM finish();
ROLLBACK;
