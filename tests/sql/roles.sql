\set QUIET 1
\pset format unaligned
\pset tuples_only true
BEGIN;
SELECT plan(17);

SELECT ok(has_function_privilege('cairn_worker', 'cairn.claim(text, text[], int, int)', 'EXECUTE'),
	'workers may claim');
SELECT ok(has_function_privilege('cairn_worker', 'cairn.complete(uuid, text, bigint, jsonb, jsonb, jsonb, jsonb)', 'EXECUTE'),
	'workers may complete');
SELECT ok(NOT has_function_privilege('cairn_worker', 'cairn.submit(jsonb, jsonb, text, text, jsonb)', 'EXECUTE'),
	'workers may not submit');
SELECT ok(NOT has_function_privilege('cairn_worker', 'cairn.approve(uuid, text, text, text)', 'EXECUTE'),
	'workers may not approve');
SELECT ok(has_function_privilege('cairn_engine', 'cairn.approve(uuid, text, text, text)', 'EXECUTE'),
	'the engine may approve');
SELECT ok(NOT has_table_privilege('cairn_engine', 'cairn.events', 'INSERT'),
	'the engine may not write events directly');
SELECT ok(NOT has_table_privilege('cairn_worker', 'cairn.steps', 'UPDATE'),
	'workers may not write steps directly');
SELECT ok(has_table_privilege('cairn_reader', 'cairn.run_timeline', 'SELECT'),
	'readers see the views');
SELECT ok(NOT has_table_privilege('cairn_reader', 'cairn.api_tokens', 'SELECT'),
	'readers do not see tokens');

-- what a reader sees, as a reader
SET LOCAL ROLE cairn_reader;
SELECT lives_ok('SELECT count(*) FROM cairn.run_history', 'a reader reads run_history');
SELECT lives_ok('SELECT count(*) FROM cairn.step_attempts', 'a reader reads step_attempts');
SELECT lives_ok('SELECT count(*) FROM cairn.pending_approvals', 'a reader reads pending_approvals');
SELECT lives_ok('SELECT count(*) FROM cairn.approval_decisions', 'a reader reads approval_decisions');
SELECT lives_ok('SELECT count(*) FROM cairn.run_timeline', 'a reader reads run_timeline');
SELECT lives_ok('SELECT count(*) FROM cairn.committed_effects', 'a reader reads committed_effects');
SELECT lives_ok('SELECT count(*) FROM cairn.dead_workers', 'a reader reads dead_workers');
SELECT throws_ok('SELECT count(*) FROM cairn.events', '42501', NULL, 'a reader cannot read the raw tables');
RESET ROLE;

SELECT * FROM finish();
ROLLBACK;
