# cairn.sh: a whole cairn stack for one integration test: a throwaway
# PostgreSQL cluster, the migrated schema, an admin token, cairnd on a free
# loopback port and one cairn-worker. Source it (it sources cluster.sh):
#
#	. "$top_srcdir/tests/lib/cairn.sh"
#	tmp=$(mktemp -d /tmp/cn.XXXXXX)
#	trap 'cairn_stack_down "$tmp"; rm -rf "$tmp"' EXIT
#	cairn_stack_up "$tmp" --concurrency 2 || bail "stack did not start"
#
# cairn_stack_up exports CAIRN_URL and CAIRN_TOKEN (and, from cluster.sh,
# CAIRN_DATABASE_URL PGHOST PGUSER PGDATABASE), so `cairn ...` and `psql`
# reach the stack with no further options. Daemon logs are in
# DIR/cairnd.log and DIR/worker.log; cairn_stack_logs DIR prints them as
# TAP diagnostics.

. "${top_srcdir:?top_srcdir is not set}/tests/lib/cluster.sh"

# wait_for CMD TIMEOUT: runs the shell command CMD (a string, eval'd) every
# 0.1 s until it succeeds (returns 0) or TIMEOUT seconds pass (returns 1).
wait_for() {
	local cmd=$1 timeout=${2:-10} i=0 n
	n=$((timeout * 10))
	while [ "$i" -lt "$n" ]; do
		if eval "$cmd" >/dev/null 2>&1; then return 0; fi
		sleep 0.1
		i=$((i + 1))
	done
	return 1
}

# run_status ID: prints the run's status as the store has it
# (running, succeeded, failed, cancelled), or nothing when there is no such run.
run_status() {
	echo "select status from cairn.runs where run_id::text = :'id';" |
		psql -X -Atq -v ON_ERROR_STOP=1 -v id="$1" 2>/dev/null
}

# sql_value SQL [NAME=VALUE...]: prints the result of one query, with psql
# variables (use :'NAME' in SQL) set from the arguments.
sql_value() {
	local sql=$1 a n
	shift
	n=$#
	for a in "$@"; do set -- "$@" -v "$a"; done
	shift "$n"
	echo "$sql;" | psql -X -Atq -v ON_ERROR_STOP=1 "$@"
}

# cairn_migrate: applies the schema with `cairn db migrate`, or with psql
# when the cairn binary is not built.
cairn_migrate() {
	local f
	if command -v cairn >/dev/null 2>&1; then
		cairn db migrate >/dev/null
		return
	fi
	for f in "$top_srcdir"/sql/[0-9]*.sql; do
		[ -e "$f" ] || continue
		psql -X -v ON_ERROR_STOP=1 -q -f "$f" >/dev/null || return 1
	done
}

# cairn_token NAME ROLES: prints a fresh token with the given roles
# (comma-separated, e.g. "submit,read").
cairn_token() {
	echo "select cairn.token_create(:'name', :'roles'::text[]);" |
		psql -X -Atq -v ON_ERROR_STOP=1 -v name="$1" -v roles="{$2}"
}

# cairn_start_cairnd DIR [cairnd args]: starts cairnd on a free loopback
# port, waits until it listens, exports CAIRN_URL.
cairn_start_cairnd() {
	local dir=$1 port
	shift
	rm -f "$dir/cairnd.port"
	cairnd --database-url "$CAIRN_DATABASE_URL" --listen 127.0.0.1:0 \
		--port-file "$dir/cairnd.port" "$@" >>"$dir/cairnd.log" 2>&1 &
	echo $! >"$dir/cairnd.pid"
	if ! wait_for "test -s '$dir/cairnd.port'" 20; then
		echo "cairnd did not start; its log:" >&2
		cat "$dir/cairnd.log" >&2
		return 1
	fi
	port=$(cat "$dir/cairnd.port")
	export CAIRN_URL="http://127.0.0.1:$port"
}

# cairn_start_worker DIR [worker args]: starts one cairn-worker; its pid is
# in DIR/worker.pid (and each further worker's in DIR/worker.N.pid).
cairn_start_worker() {
	local dir=$1 pidfile log n=1
	shift
	pidfile="$dir/worker.pid" log="$dir/worker.log"
	while [ -e "$pidfile" ]; do
		n=$((n + 1))
		pidfile="$dir/worker.$n.pid" log="$dir/worker.$n.log"
	done
	mkdir -p "$dir/work.$n"
	cairn-worker --database-url "$CAIRN_DATABASE_URL" --name "test-worker-$n" \
		--work-dir "$dir/work.$n" "$@" >>"$log" 2>&1 &
	echo $! >"$pidfile"
}

# cairn_stack_up DIR [worker args]: the whole stack (see the top of the file).
cairn_stack_up() {
	local dir=$1
	shift
	cluster_start "$dir" || return 1
	cairn_migrate || { echo "migration failed" >&2; return 1; }
	CAIRN_TOKEN=$(cairn_token admin admin) || return 1
	export CAIRN_TOKEN
	cairn_start_cairnd "$dir" || return 1
	cairn_start_worker "$dir" "$@"
}

# cairn_stop_pid PIDFILE: SIGTERM, up to 10 s for it to exit, then SIGKILL.
cairn_stop_pid() {
	local pidfile=$1 pid
	[ -s "$pidfile" ] || return 0
	pid=$(cat "$pidfile")
	rm -f "$pidfile"
	kill -TERM "$pid" 2>/dev/null || return 0
	if ! wait_for "! kill -0 $pid" 10; then
		kill -KILL "$pid" 2>/dev/null
	fi
	wait "$pid" 2>/dev/null
	return 0
}

# cairn_stack_down DIR: stops the workers, cairnd and the cluster. Safe to
# call twice and after a partial cairn_stack_up.
cairn_stack_down() {
	local dir=$1 f
	[ -d "$dir" ] || return 0
	for f in "$dir"/worker*.pid; do
		[ -e "$f" ] && cairn_stop_pid "$f"
	done
	cairn_stop_pid "$dir/cairnd.pid"
	cluster_stop "$dir"
	return 0
}

# cairn_stack_logs DIR: the daemons' logs as TAP diagnostics (for failures).
cairn_stack_logs() {
	local dir=$1 f
	for f in "$dir"/cairnd.log "$dir"/worker*.log; do
		[ -s "$f" ] || continue
		echo "# --- $(basename "$f")"
		tail -n 60 "$f" | sed 's/^/# /'
	done
}

# TAP for shell tests: tap_ok STATUS DESC (STATUS 0 passes: `cmd; tap_ok $? "it works"`),
# tap_is GOT WANT DESC, tap_like GOT ERE DESC, tap_diag MSG, tap_skip_all WHY,
# tap_bail WHY, and tap_done at the end (prints the plan, returns the exit status).
TAP_N=0
TAP_FAILED=0
tap_ok() {
	TAP_N=$((TAP_N + 1))
	if [ "$1" -eq 0 ]; then
		echo "ok $TAP_N - $2"
	else
		echo "not ok $TAP_N - $2"
		TAP_FAILED=$((TAP_FAILED + 1))
	fi
}
tap_is() {
	if [ "$1" = "$2" ]; then
		tap_ok 0 "$3"
	else
		tap_ok 1 "$3"
		echo "#   got:      '$1'"
		echo "#   expected: '$2'"
	fi
}
tap_like() {
	if printf '%s' "$1" | grep -Eq -- "$2"; then
		tap_ok 0 "$3"
	else
		tap_ok 1 "$3"
		printf '%s\n' "$1" | head -n 20 | sed 's/^/#   got: /'
		echo "#   expected to match: $2"
	fi
}
tap_diag() { printf '%s\n' "$*" | sed 's/^/# /'; }
tap_skip_all() { echo "1..0 # SKIP $*"; exit 0; }
tap_bail() { echo "Bail out! $*"; exit 1; }
tap_done() {
	tap_replay_check
	echo "1..$TAP_N"
	[ "$TAP_FAILED" -eq 0 ]
}

# tap_replay_check: when the test's database is up, one more result: replaying
# the events of every run the test created rebuilds its runs and steps rows
# exactly (cairn.replay_check). Runs with a difference are listed.
tap_replay_check() {
	local n bad
	[ -n "${CAIRN_DATABASE_URL:-}" ] || return 0
	n=$(psql -X -Atq "$CAIRN_DATABASE_URL" -c "select count(*) from cairn.runs" 2>/dev/null) || return 0
	[ -n "$n" ] && [ "$n" -gt 0 ] || return 0
	bad=$(psql -X -Atq "$CAIRN_DATABASE_URL" -c "select run_id || ' ' || d from cairn.runs,
		lateral (select cairn.replay_check(run_id)::text d) x where d <> '[]'" 2>&1)
	tap_is "$bad" "" "replaying the events rebuilds each of the $n runs exactly"
}
