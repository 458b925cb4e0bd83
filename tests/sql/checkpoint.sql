\set QUIET 1
\pset format unaligned
\pset tuples_only true
BEGIN;
\ir setup.psql
SELECT plan(9);

SELECT pg_temp.new_run(pg_temp.def(pg_temp.step('w', '{}', 3, 'run', '{"queue": "ck"}'))) AS run \gset
SELECT lease_epoch AS e FROM cairn.claim('w1', '{ck}', 1, 30000) \gset
CREATE FUNCTION pg_temp.ck(p_run uuid, p_epoch bigint, p_base bigint, p_base_hash text, p_hash text)
RETURNS bigint LANGUAGE sql AS $$
	SELECT cairn.checkpoint(p_run, 'w', p_epoch, p_base, 'lz4f', 10, 5, p_hash, p_base_hash,
		'{}', '\x00'::bytea);
$$;

SELECT pg_temp.ck(:'run', :e, NULL, NULL, 'h1') AS f1 \gset
SELECT pg_temp.ck(:'run', :e, :f1, 'h1', 'h2') AS d1 \gset
SELECT is((SELECT last_checkpoint FROM cairn.steps WHERE run_id = :'run'), :d1::bigint,
	'the step records its last checkpoint');
SELECT throws_ok(format($$SELECT pg_temp.ck(%L, %s, %s, 'wrong', 'h3')$$, :'run', :e, :d1), 'CN004', NULL,
	'a delta on a base with another hash is refused');
SELECT throws_ok(format($$SELECT pg_temp.ck(%L, %s, NULL, NULL, 'h3')$$, :'run', :e + 1), 'CN001', NULL,
	'a checkpoint from another lease is fenced');
SELECT is((SELECT string_agg(seq::text, ',' ORDER BY seq) FROM cairn.checkpoint_chain(:'run', 'w', :e)),
	:f1 || ',' || :d1, 'the chain runs from the newest full checkpoint');
SELECT pg_temp.ck(:'run', :e, NULL, NULL, 'h3') AS f2 \gset
SELECT pg_temp.ck(:'run', :e, :f2, 'h3', 'h4') AS d2 \gset
SELECT is((SELECT string_agg(seq::text, ',' ORDER BY seq) FROM cairn.checkpoint_chain(:'run', 'w', :e)),
	:f2 || ',' || :d2, 'a new full checkpoint starts a new chain');
SELECT is((SELECT count(*) FROM cairn.checkpoints WHERE run_id = :'run'), 4::bigint,
	'the chain before the newest is kept (the fallback)');
SELECT pg_temp.ck(:'run', :e, NULL, NULL, 'h5') AS f3 \gset
SELECT is((SELECT string_agg(seq::text, ',' ORDER BY seq) FROM cairn.checkpoints WHERE run_id = :'run'),
	:f2 || ',' || :d2 || ',' || :f3, 'older chains are pruned, never the newest two');
SELECT is((SELECT count(*) FROM cairn.events WHERE run_id = :'run' AND type = 'CheckpointCommitted'), 5::bigint,
	'each checkpoint is an event');
SELECT is(cairn.replay_check(:'run'), '[]'::jsonb, 'replay rebuilds the step with its checkpoints');

SELECT * FROM finish();
ROLLBACK;
