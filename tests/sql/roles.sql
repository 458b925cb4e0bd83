\set QUIET 1
\pset format unaligned
\pset tuples_only true
BEGIN;
SELECT plan(9);

SELECT ok(has_function_privilege('cairn_worker', 'cairn.claim(text, text[], int, int)', 'EXECUTE'),
	'workers may claim');
SELECT ok(has_function_privilege('cairn_worker', 'cairn.complete(uuid, text, bigint, jsonb, jsonb, jsonb)', 'EXECUTE'),
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

SELECT * FROM finish();
ROLLBACK;
