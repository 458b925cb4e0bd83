# cluster.sh: a throwaway PostgreSQL cluster on a unix socket for one test.
# Source it, then: cluster_start DIR; ...; cluster_stop DIR.
# PostgreSQL refuses to run as root; as root the cluster runs as the
# unprivileged "postgres" user (created by the postgresql package), or
# "cairn" when that user does not exist.

PG_BINDIR=${PG_BINDIR:-$(pg_config --bindir 2>/dev/null || echo /usr/lib/postgresql/15/bin)}

cluster_os_user() {
	if [ "$(id -u)" != 0 ]; then id -un; return; fi
	if id postgres >/dev/null 2>&1; then echo postgres; return; fi
	id cairn >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin cairn
	echo cairn
}

cluster_as() {
	local u; u=$(cluster_os_user)
	if [ "$(id -u)" = 0 ]; then runuser -u "$u" -- "$@"; else "$@"; fi
}

# cluster_start DIR: initdb DIR/pg, socket in DIR/sock, database "cairn",
# superuser "cairn"; exports PGHOST PGUSER PGDATABASE CAIRN_DATABASE_URL.
cluster_start() {
	local dir=$1 u
	u=$(cluster_os_user)
	mkdir -p "$dir/pg" "$dir/sock"
	chmod 755 "$dir"
	[ "$(id -u)" = 0 ] && chown "$u" "$dir/pg" "$dir/sock"
	chmod 700 "$dir/pg"
	cluster_as "$PG_BINDIR/initdb" -D "$dir/pg" -U cairn -A trust -E UTF8 --locale=C \
		--no-sync >"$dir/initdb.log" 2>&1 || { cat "$dir/initdb.log" >&2; return 1; }
	cluster_as "$PG_BINDIR/pg_ctl" -D "$dir/pg" -l "$dir/sock/postgres.log" -w -t 60 \
		-o "-c listen_addresses='' -k $dir/sock -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200 -c shared_buffers=64MB" \
		start >/dev/null || { cat "$dir/sock/postgres.log" >&2; return 1; }
	export PGHOST="$dir/sock" PGUSER=cairn PGDATABASE=cairn
	"$PG_BINDIR/createdb" -h "$dir/sock" -U cairn cairn || return 1
	export CAIRN_DATABASE_URL="postgresql:///cairn?host=$dir/sock&user=cairn"
}

cluster_restart() {
	local dir=$1
	cluster_as "$PG_BINDIR/pg_ctl" -D "$dir/pg" -m immediate -w restart \
		-o "-c listen_addresses='' -k $dir/sock -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200 -c shared_buffers=64MB" \
		-l "$dir/sock/postgres.log" >/dev/null
}

cluster_stop() {
	local dir=$1
	[ -d "$dir/pg" ] || return 0
	cluster_as "$PG_BINDIR/pg_ctl" -D "$dir/pg" -m immediate -w stop >/dev/null 2>&1 || true
}
