\set QUIET 1
\pset format unaligned
\pset tuples_only true
BEGIN;
\ir setup.psql
SELECT plan(38);

-- add_steps: an agent loop appends its next iteration
SELECT run_id AS run FROM cairn.submit(jsonb_build_object('name', 'loop', 'limits',
	'{"max_steps": 3}'::jsonb, 'steps', jsonb_build_array(pg_temp.step('plan'))), '{}', NULL) \gset
SELECT lease_epoch AS e FROM cairn.claim('w1', '{default}', 1, 30000) \gset
SELECT throws_ok(format($$SELECT cairn.complete(%L, 'plan', %s, '1', '[]', '{"add_steps": [%s]}')$$,
	:'run', :e, pg_temp.step('plan')), 'CN004', NULL, 'an added step may not reuse an id');
SELECT throws_ok(format($$SELECT cairn.complete(%L, 'plan', %s, '1', '[]', '{"add_steps": [%s]}')$$,
	:'run', :e, pg_temp.step('act', '{ghost}')), 'CN004', NULL, 'an added step may not need an unknown step');
SELECT throws_ok(format($$SELECT cairn.complete(%L, 'plan', %s, '1', '[]', '{"add_steps": [%s, %s, %s]}')$$,
	:'run', :e, pg_temp.step('a1'), pg_temp.step('a2'), pg_temp.step('a3')), 'CN004', NULL,
	'added steps may not exceed max_steps');
SELECT is(pg_temp.status(:'run', 'plan'), 'leased', 'a refused add_steps changes nothing');
SELECT lives_ok(format($$SELECT cairn.complete(%L, 'plan', %s, '1', '[]', '{"add_steps": [%s, %s]}')$$,
	:'run', :e, pg_temp.step('act', '{plan}'), pg_temp.step('observe', '{act}')),
	'steps that need the adding step and each other are added');
SELECT is(pg_temp.status(:'run', 'act'), 'ready', 'the added step that needed the adder is ready');
SELECT is(pg_temp.status(:'run', 'observe'), 'pending', 'the one after it waits');
SELECT is(pg_temp.run_status(:'run'), 'running', 'the run is not done while added steps remain');
SELECT is((SELECT count(*) FROM cairn.events WHERE run_id = :'run' AND type = 'StepsAdded'), 2::bigint,
	'StepsAdded is an event');
SELECT is(cairn.replay_check(:'run'), '[]'::jsonb, 'replay rebuilds a run with added steps');

-- a run step behind an approval gate, and on_reject skip
SELECT pg_temp.new_run(pg_temp.def(
	pg_temp.step('deploy', '{}', 1, 'run', '{"approve": {"prompt": "deploy?", "quorum": 1, "timeout_ms": null}}'),
	pg_temp.step('extra', '{}', 1, 'run', '{"approve": {"prompt": "extra?", "quorum": 1, "timeout_ms": null, "on_reject": "skip"}}'),
	pg_temp.step('notify', '{extra}'))) AS g \gset
SELECT is(pg_temp.status(:'g', 'deploy'), 'waiting', 'a gated run step waits for approval first');
SELECT is((SELECT count(*) FROM cairn.pending_approvals WHERE run_id = :'g'), 2::bigint,
	'gated steps are listed as pending approvals');
SELECT is(cairn.approve(:'g', 'deploy', 'alice', NULL)->>'step_status', 'ready',
	'approving the gate makes the run step ready');
SELECT is(cairn.reject(:'g', 'extra', 'bob', 'not now')->>'step_status', 'skipped',
	'on_reject skip skips the step');
SELECT is(pg_temp.status(:'g', 'notify'), 'ready', 'and the run goes on without it');
SELECT is(cairn.replay_check(:'g'), '[]'::jsonb, 'replay rebuilds gates and skips');

-- concurrency: at most `limit` steps of one key at once, across runs
SELECT pg_temp.new_run(pg_temp.def(pg_temp.step('c1', '{}', 1, 'run',
	'{"queue": "cq", "concurrency": {"key": "api", "limit": 1}}'))) AS c1 \gset
SELECT pg_temp.new_run(pg_temp.def(pg_temp.step('c2', '{}', 1, 'run',
	'{"queue": "cq", "concurrency": {"key": "api", "limit": 1}}'))) AS c2 \gset
SELECT is((SELECT count(*) FROM cairn.claim('w1', '{cq}', 10, 30000)), 1::bigint,
	'only one step of a key with limit 1 is leased');
SELECT is((SELECT count(*) FROM cairn.claim('w1', '{cq}', 10, 30000)), 0::bigint,
	'the other waits while the first runs');
SELECT cairn.complete(run_id, step_id, lease_epoch, '1', '[]', '{}') FROM cairn.steps
 WHERE run_id IN (:'c1', :'c2') AND status = 'leased';
SELECT is((SELECT count(*) FROM cairn.claim('w1', '{cq}', 10, 30000)), 1::bigint,
	'the second runs once the first is done');

-- rate: at most per_minute starts a minute
SELECT pg_temp.new_run(pg_temp.def(
	pg_temp.step('r1', '{}', 1, 'run', '{"queue": "rq", "rate": {"key": "gh", "per_minute": 2}}'),
	pg_temp.step('r2', '{}', 1, 'run', '{"queue": "rq", "rate": {"key": "gh", "per_minute": 2}}'),
	pg_temp.step('r3', '{}', 1, 'run', '{"queue": "rq", "rate": {"key": "gh", "per_minute": 2}}'))) AS rr \gset
SELECT is((SELECT count(*) FROM cairn.claim('w1', '{rq}', 10, 30000)), 2::bigint,
	'a rate of 2 a minute starts two');
SELECT is(pg_temp.status(:'rr', 'r3'), 'ready', 'the third waits for the next minute');

-- run limits
SELECT run_id AS lim FROM cairn.submit(jsonb_build_object('name', 'lim', 'limits',
	'{"max_attempts_total": 2}'::jsonb, 'steps', jsonb_build_array(pg_temp.step('x', '{}', 5, 'run',
	'{"queue": "lq"}'))), '{}', NULL) \gset
SELECT cairn.fail(:'lim', 'x', lease_epoch, '{"reason": "exit"}', '{}') FROM cairn.claim('w1', '{lq}', 1, 30000);
SELECT cairn.fail(:'lim', 'x', lease_epoch, '{"reason": "exit"}', '{}') FROM cairn.claim('w1', '{lq}', 1, 30000);
SELECT is((SELECT count(*) FROM cairn.claim('w1', '{lq}', 1, 30000)), 0::bigint,
	'no third attempt past max_attempts_total');
SELECT is((SELECT failure_reason FROM cairn.run_history WHERE run_id = :'lim'), 'max_attempts_total',
	'the run fails with that reason');
SELECT run_id AS dur FROM cairn.submit(jsonb_build_object('name', 'dur', 'limits',
	'{"max_duration_ms": 0}'::jsonb, 'steps', jsonb_build_array(pg_temp.step('y', '{}', 1, 'run',
	'{"queue": "dq"}'))), '{}', NULL) \gset
SELECT ok(cairn.fire_timers(100) >= 1, 'fire_timers ends runs past max_duration');
SELECT is((SELECT failure_reason FROM cairn.run_history WHERE run_id = :'dur'), 'max_duration',
	'with that reason');

-- child workflows
SELECT pg_temp.new_run(pg_temp.def(pg_temp.step('child', '{}', 1, 'workflow',
	jsonb_build_object('workflow', jsonb_build_object('definition',
		pg_temp.def(pg_temp.step('inner', '{}', 1, 'run', '{"queue": "kq"}'))))))) AS parent \gset
SELECT run_id AS kid FROM cairn.runs WHERE parent_run_id = :'parent' \gset
SELECT is(pg_temp.status(:'parent', 'child'), 'waiting', 'a workflow step waits for its child run');
SELECT cairn.complete(:'kid', 'inner', lease_epoch, '{"r": 42}', '[]', '{}') FROM cairn.claim('w1', '{kq}', 1, 30000);
SELECT is(pg_temp.run_status(:'kid'), 'succeeded', 'the child run succeeds');
SELECT ok(cairn.fire_timers(100) >= 1, 'fire_timers sees the child finished');
SELECT is((SELECT output->'outputs'->'inner' FROM cairn.steps WHERE run_id = :'parent' AND step_id = 'child'),
	'{"r": 42}'::jsonb, 'the workflow step succeeds with the child''s outputs');
SELECT pg_temp.new_run(pg_temp.def(pg_temp.step('child', '{}', 1, 'workflow',
	jsonb_build_object('workflow', jsonb_build_object('definition',
		pg_temp.def(pg_temp.step('inner', '{}', 1, 'run', '{"queue": "kq"}'))))))) AS p2 \gset
SELECT cairn.cancel(:'p2', 'me', NULL);
SELECT is((SELECT status FROM cairn.runs WHERE parent_run_id = :'p2'), 'cancelled',
	'cancelling the parent cancels the child');

-- named definitions, schedules, webhook outbox
SELECT is(cairn.workflow_put('wf', pg_temp.def(pg_temp.step('a'))), 1, 'the first version is 1');
SELECT is(cairn.workflow_put('wf', pg_temp.def(pg_temp.step('b'))), 2, 'a changed definition is version 2');
SELECT is(cairn.workflow_put('wf', pg_temp.def(pg_temp.step('b'))), 2, 'the same definition keeps its version');
SELECT cairn.schedule_put('nightly', '0 3 * * *', pg_temp.def(pg_temp.step('a')), '{}', 'one',
	'2026-01-01T03:00:00Z');
SELECT pg_temp.new_run(pg_temp.def(pg_temp.step('byname', '{}', 1, 'workflow',
	'{"workflow": {"name": "wf"}}'))) AS bn \gset
SELECT is((SELECT spec->'steps'->0->>'id' FROM (SELECT definition AS spec FROM cairn.runs
	WHERE parent_run_id = :'bn') d), 'b', 'a workflow step by name runs the latest version');
SELECT pg_temp.new_run(pg_temp.def(pg_temp.step('ghost', '{}', 1, 'workflow',
	'{"workflow": {"name": "nope"}}'))) AS gh \gset
SELECT is((SELECT failure_reason FROM cairn.run_history WHERE run_id = :'gh'), 'unknown_workflow',
	'a workflow step naming no stored definition fails its run');
SELECT isnt(cairn.schedule_fire('nightly', '2026-01-01T03:00:00Z', '2026-01-02T03:00:00Z', true), NULL,
	'the tick starts a run');
SELECT is(cairn.schedule_fire('nightly', '2026-01-01T03:00:00Z', '2026-01-02T03:00:00Z', true), NULL,
	'the same tick fired again (another engine) starts nothing');
SELECT is((SELECT count(*) FROM cairn.webhook_deliveries WHERE run_id = :'g'), 4::bigint,
	'approval events wait in the webhook outbox');

SELECT * FROM finish();
ROLLBACK;
