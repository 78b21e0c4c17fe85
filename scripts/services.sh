#!/usr/bin/env bash
# Start/stop real backend services for tickd tests and local development.
#
#   scripts/services.sh start  [mongo|postgres|redis|kafka ...]  # default: mongo, redis, kafka
#   scripts/services.sh stop   [mongo|postgres|redis|kafka ...]  # only what this script started
#   scripts/services.sh status [mongo|postgres|redis|kafka ...]  # exit 0 iff all requested are up
#   scripts/services.sh env                                      # export lines for the test suite
#
#   mongo     FerretDB (MongoDB wire protocol) on its PostgreSQL     127.0.0.1:27017
#             handler, over `postgres` below: start, stop and status
#             of mongo cover both
#   postgres  Debian's postgresql, a cluster of this script's own,   127.0.0.1:5433
#             only as FerretDB's backend (trust auth, no fsync)
#   redis     Debian's redis-server, no persistence                  127.0.0.1:6379
#   kafka     Apache Kafka, single KRaft node (broker+controller)    127.0.0.1:9092
#             (its controller listens on 127.0.0.1:9093)
#
# TICKD_MONGO_PORT and TICKD_POSTGRES_PORT move FerretDB and PostgreSQL, so a
# second stack (with its own TICKD_SERVICES_DIR) can run beside the first.
# Everything listens on loopback only. Data, logs and pid files live in
# ${TICKD_SERVICES_DIR:-/tmp/tickd-services}; downloads and builds are cached
# in ${TICKD_CACHE_DIR:-$HOME/.cache/tickd} so that a warm start takes seconds.
# Whatever is missing (postgresql, redis-server, python3-venv, the FerretDB binary, the
# Kafka jars, the Python clients used for health checks) is installed on
# first use from Debian apt, the Go module proxy, Maven Central and PyPI.
#
# Needs bash, Go >= 1.24 and Java >= 17 (Maven and Java are apt-installed if
# missing; Go is not, because Debian's Go is too old for FerretDB 1.24).
set -euo pipefail

# --------------------------------------------------------------------------
# Configuration
# --------------------------------------------------------------------------
DATA_DIR="${TICKD_SERVICES_DIR:-/tmp/tickd-services}"
CACHE_DIR="${TICKD_CACHE_DIR:-$HOME/.cache/tickd}"

FERRETDB_VERSION="v1.24.2"
# Newest 4.x on Maven Central when this script was written. Pinned, not
# resolved at run time, so a warm start never needs the network.
KAFKA_VERSION="${TICKD_KAFKA_VERSION:-4.4.0}"
SCALA_VERSION="2.13"
# Kafka's jars log through slf4j 1.7 + log4j2 but do not depend on a binding;
# this one (same version as the log4j-core Kafka pulls in) makes it log at all.
LOG4J_VERSION="2.25.5"
MAVEN_DEPENDENCY_PLUGIN="org.apache.maven.plugins:maven-dependency-plugin:3.8.1"

HOST="127.0.0.1"
MONGO_PORT="${TICKD_MONGO_PORT:-27017}"
# Not 5432, where a system cluster (Debian's `main`) would listen.
POSTGRES_PORT="${TICKD_POSTGRES_PORT:-5433}"
REDIS_PORT=6379
KAFKA_PORT=9092
KAFKA_CONTROLLER_PORT=9093

MONGO_URL="mongodb://${HOST}:${MONGO_PORT}/"
# FerretDB's own database in the cluster, reached as its superuser (trust auth
# on loopback). FerretDB 1.24 holds one pooled connection per statement of an
# update command until the command ends and waits forever for more once its
# pool (pool_max_conns, default 50) is spent: a bulk write of 50 updates never
# answers. A larger pool moves that wall; tickd still sends at most 40
# statements per command (scheduler/store/kit/mongodb.py), so several commands in
# flight at once stay clear of it. max_connections leaves room for the pool and
# for this script's own checks.
POSTGRES_USER="postgres"
POSTGRES_DATABASE="ferretdb"
POSTGRES_POOL=200
POSTGRES_MAX_CONNECTIONS=240
POSTGRES_URL="postgres://${POSTGRES_USER}@${HOST}:${POSTGRES_PORT}/${POSTGRES_DATABASE}"
FERRETDB_POSTGRESQL_URL="${POSTGRES_URL}?pool_max_conns=${POSTGRES_POOL}"
# PostgreSQL refuses to run as root; as root, its server and initdb run as the
# `postgres` user Debian's package creates.
POSTGRES_OS_USER="postgres"
REDIS_URL="redis://${HOST}:${REDIS_PORT}/0"
KAFKA_URL="kafka://${HOST}:${KAFKA_PORT}"

# Bounded waits (seconds) for a freshly launched service to answer.
MONGO_WAIT=30
POSTGRES_WAIT=30
REDIS_WAIT=15
KAFKA_WAIT=90
# How long `stop` waits after SIGTERM before it uses SIGKILL.
STOP_WAIT=30

# mongo brings its postgres along, so `postgres` is not listed on its own.
ALL_SERVICES=(redis mongo kafka)

RUN_DIR="$DATA_DIR/run"   # pid files
LOG_DIR="$DATA_DIR/log"   # one log per service (previous run kept as .prev)
VENV="$CACHE_DIR/venv"    # Python clients used only for health checks
FERRETDB_BIN="$CACHE_DIR/bin/ferretdb-$FERRETDB_VERSION"
PG_BIN="" # the server's binaries (/usr/lib/postgresql/<version>/bin), set by ensure_postgres
KAFKA_HOME="$CACHE_DIR/kafka-$KAFKA_VERSION"

# --------------------------------------------------------------------------
# Small helpers
# --------------------------------------------------------------------------
say() { printf '%s\n' "$*"; }
warn() { printf '%s\n' "$*" >&2; }
die() { warn "error: $*"; exit 1; }

usage() {
	sed -n '2,7p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
	exit 2
}

now() { date +%s; }

pid_file() { printf '%s/%s.pid' "$RUN_DIR" "$1"; }
log_file() { printf '%s/%s.log' "$LOG_DIR" "$1"; }

# A string that must appear in the command line of the service's process;
# guards against a stale pid file whose pid now belongs to something else.
proc_marker() {
	case "$1" in
	mongo) printf 'ferretdb' ;;
	postgres) printf 'bin/postgres' ;;
	redis) printf 'redis-server' ;;
	kafka) printf 'kafka.Kafka' ;;
	esac
}

# Prints the pid of the service if this script started it and it still runs.
our_pid() {
	local svc="$1" file pid
	file="$(pid_file "$svc")"
	[[ -f "$file" ]] || return 1
	pid="$(<"$file")"
	[[ "$pid" =~ ^[0-9]+$ ]] || return 1
	kill -0 "$pid" 2>/dev/null || return 1
	tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "$(proc_marker "$svc")" || return 1
	printf '%s' "$pid"
}

# True if something accepts TCP connections on the port (no protocol check).
port_open() {
	(exec 3<>"/dev/tcp/$HOST/$1") 2>/dev/null
}

# Launches a command detached from this shell (own session, stdin closed,
# output to the log) so it outlives the script and the caller's job control,
# and records its pid. `exec` inside keeps the pid file pointing at the
# service itself, not at a wrapper shell.
launch() {
	local svc="$1"
	shift
	local log
	log="$(log_file "$svc")"
	# Keep the previous run's log for post-mortems; start the new one empty so
	# a failure tail shows only this run.
	[[ -f "$log" ]] && mv -f "$log" "$log.prev"
	# 9>&-: do not hand our flock fd to the service, or the lock would be held
	# for as long as the service runs.
	# shellcheck disable=SC2016 # $$, $0 and $@ are for the inner bash
	setsid bash -c 'echo $$ >"$0"; exec "$@"' "$(pid_file "$svc")" "$@" \
		</dev/null >"$log" 2>&1 9>&- &
	# The pid file is written by the child; give it a moment to appear.
	local i
	for i in $(seq 1 50); do
		[[ -s "$(pid_file "$svc")" ]] && return 0
		sleep 0.1
	done
	die "$svc: could not launch (no pid file after 5 s)"
}

fail_with_log() {
	local svc="$1" why="$2" log
	log="$(log_file "$svc")"
	warn "error: $svc: $why"
	# Kafka logs from many threads and dumps its whole config, so the root
	# cause is often far above the tail: show the first error lines too.
	if grep -qE '\b(ERROR|FATAL|panic)\b' "$log" 2>/dev/null; then
		warn "---- first error lines of $log ----"
		grep -E '\b(ERROR|FATAL|panic)\b' "$log" | head -n 10 >&2 || true
	fi
	warn "---- last 40 lines of $log ----"
	tail -n 40 "$log" >&2 2>/dev/null || true
	warn "----"
	exit 1
}

# Waits until `check_<svc>` succeeds, at most $timeout seconds, failing early
# if the process died.
wait_ready() {
	local svc="$1" timeout="$2" deadline pid
	deadline=$(($(now) + timeout))
	while true; do
		# Alive is enough here: right after launch the process may still be the
		# wrapper (bash, setpriv) that execs the service, whose name our_pid checks.
		pid="$(cat "$(pid_file "$svc")" 2>/dev/null)"
		if ! [[ "$pid" =~ ^[0-9]+$ ]] || ! kill -0 "$pid" 2>/dev/null; then
			rm -f "$(pid_file "$svc")"
			fail_with_log "$svc" "process exited during startup"
		fi
		if "check_$svc"; then
			return 0
		fi
		if (($(now) >= deadline)); then
			# Do not leave a half-started process behind: a retry must start clean.
			stop_service "$svc" >&2
			fail_with_log "$svc" "not ready after ${timeout} s"
		fi
		sleep 0.5
	done
}

# --------------------------------------------------------------------------
# Prerequisites (each installed once, then cached)
# --------------------------------------------------------------------------
APT_UPDATED=0
apt_install() {
	command -v apt-get >/dev/null || die "apt-get not found; install manually: $*"
	say "installing Debian packages: $*"
	export DEBIAN_FRONTEND=noninteractive
	# Update the package lists only when they are missing or stale enough
	# that the install fails.
	if ((APT_UPDATED == 0)) && ! compgen -G '/var/lib/apt/lists/*_Packages*' >/dev/null; then
		apt-get update -qq
		APT_UPDATED=1
	fi
	if ! apt-get install -y -qq --no-install-recommends "$@" >/dev/null; then
		((APT_UPDATED == 0)) || die "apt-get install $* failed"
		apt-get update -qq
		APT_UPDATED=1
		apt-get install -y -qq --no-install-recommends "$@" >/dev/null
	fi
}

# Python venv with the clients that do the real protocol-level health checks.
ensure_check_venv() {
	[[ -x "$VENV/bin/python" && -f "$VENV/.tickd-ready" ]] && return 0
	command -v python3 >/dev/null || apt_install python3 python3-venv
	rm -rf "$VENV"
	mkdir -p "$CACHE_DIR"
	if ! python3 -m venv "$VENV" >/dev/null 2>&1; then
		# Debian's python3 ships venv/ensurepip separately.
		apt_install python3-venv
		rm -rf "$VENV"
		python3 -m venv "$VENV"
	fi
	say "installing health-check clients (pymongo, confluent-kafka) into $VENV"
	"$VENV/bin/python" -m pip install -q 'pymongo>=4.6,<5' 'confluent-kafka>=2.3,<3'
	touch "$VENV/.tickd-ready"
}

ensure_java() {
	if ! command -v java >/dev/null; then
		apt_install openjdk-17-jre-headless
	fi
	local major
	major="$(java -XshowSettings:properties -version 2>&1 | sed -n 's/^ *java.specification.version = //p')"
	[[ "${major%%.*}" -ge 17 ]] 2>/dev/null || die "Kafka $KAFKA_VERSION needs Java >= 17, found '${major:-?}'"
}

# FerretDB binary, built from the module source fetched via the Go module proxy.
#
# Why not plain `go install github.com/FerretDB/FerretDB/cmd/ferretdb@v1.24.2`:
# the published module lacks the generated build/version/version.txt, so the
# installed binary panics at startup ("Invalid build/version/version.txt file
# content"). We copy the module source, write that file, and `go build`.
ensure_ferretdb() {
	[[ -x "$FERRETDB_BIN" ]] && return 0
	command -v go >/dev/null || die "mongo: Go >= 1.24 is required to build FerretDB $FERRETDB_VERSION (not found in PATH)"
	say "building FerretDB $FERRETDB_VERSION (first time only, ~1-2 min)"
	local moddir src tmp
	tmp="$(mktemp -d)"
	# Outside any module so `go mod download` just fetches into the module cache.
	moddir="$(cd "$tmp" && go mod download -json "github.com/FerretDB/FerretDB@$FERRETDB_VERSION" |
		sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
	[[ -n "$moddir" && -d "$moddir" ]] || die "mongo: go mod download of FerretDB $FERRETDB_VERSION failed"
	src="$CACHE_DIR/src/ferretdb-$FERRETDB_VERSION"
	rm -rf "$src" "$tmp"
	mkdir -p "$(dirname "$src")" "$(dirname "$FERRETDB_BIN")"
	cp -R "$moddir" "$src"
	chmod -R u+w "$src" # the module cache is read-only
	printf '%s\n' "$FERRETDB_VERSION" >"$src/build/version/version.txt"
	if ! (cd "$src" && go build -buildvcs=false -trimpath -o "$FERRETDB_BIN.tmp" ./cmd/ferretdb) \
		>"$CACHE_DIR/ferretdb-build.log" 2>&1; then
		tail -n 30 "$CACHE_DIR/ferretdb-build.log" >&2
		die "mongo: building FerretDB $FERRETDB_VERSION failed (full log: $CACHE_DIR/ferretdb-build.log)"
	fi
	mv -f "$FERRETDB_BIN.tmp" "$FERRETDB_BIN"
	rm -rf "$src"
	rmdir "$(dirname "$src")" 2>/dev/null || true
	# sed reads the whole output: head would leave the binary writing into a closed pipe, and
	# its SIGPIPE, under pipefail, would fail the build that just succeeded.
	"$FERRETDB_BIN" --version | sed -n 1p
}

# The newest server Debian's postgresql packages installed. Its binaries are
# not on PATH (/usr/bin has only the client wrappers).
postgres_bin() {
	local dir
	dir="$(printf '%s\n' /usr/lib/postgresql/*/bin | sort -V | tail -n 1)"
	[[ -x "$dir/initdb" && -x "$dir/postgres" && -x "$dir/psql" ]] || return 1
	printf '%s' "$dir"
}

ensure_postgres() {
	[[ -n "$PG_BIN" ]] && return 0
	if ! PG_BIN="$(postgres_bin)"; then
		# Its postinst creates a cluster `main` on 5432 and, with no init system
		# here, does not start it; we never use that one.
		apt_install postgresql
		PG_BIN="$(postgres_bin)" || die "postgres: no server under /usr/lib/postgresql after installing postgresql"
	fi
	((EUID != 0)) || id -u "$POSTGRES_OS_USER" >/dev/null 2>&1 ||
		die "postgres: no user '$POSTGRES_OS_USER' to run PostgreSQL as (Debian's postgresql creates it)"
}

# The command prefix that runs a PostgreSQL server program unprivileged: as
# root, as the `postgres` user (setpriv execs in place, so a recorded pid is
# the server's own); otherwise as the caller.
as_postgres() {
	((EUID == 0)) || return 0
	printf '%s\n' setpriv --reuid="$POSTGRES_OS_USER" --regid="$POSTGRES_OS_USER" --init-groups --
}

ensure_redis() {
	command -v redis-server >/dev/null && command -v redis-cli >/dev/null && return 0
	# Its postinst does not start a daemon here (no init, policy-rc.d), and we
	# never use the system service anyway.
	apt_install redis-server
}

# Kafka jars: kafka_2.13 (has kafka.Kafka and kafka.tools.StorageTool) plus its
# runtime dependencies and a logging binding, copied out of Maven's repository.
ensure_kafka() {
	ensure_java
	[[ -f "$KAFKA_HOME/libs/kafka_${SCALA_VERSION}-${KAFKA_VERSION}.jar" ]] && return 0
	command -v mvn >/dev/null || apt_install maven
	say "fetching Kafka $KAFKA_VERSION jars from Maven Central (first time only)"
	mkdir -p "$KAFKA_HOME"
	cat >"$KAFKA_HOME/pom.xml" <<EOF
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>tickd.services</groupId>
  <artifactId>kafka-runtime</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>org.apache.kafka</groupId>
      <artifactId>kafka_${SCALA_VERSION}</artifactId>
      <version>${KAFKA_VERSION}</version>
    </dependency>
    <dependency>
      <groupId>org.apache.logging.log4j</groupId>
      <artifactId>log4j-slf4j-impl</artifactId>
      <version>${LOG4J_VERSION}</version>
    </dependency>
  </dependencies>
</project>
EOF
	rm -rf "$KAFKA_HOME/libs.tmp"
	if ! mvn -B -q -f "$KAFKA_HOME/pom.xml" "$MAVEN_DEPENDENCY_PLUGIN:copy-dependencies" \
		-DincludeScope=runtime -DoutputDirectory="$KAFKA_HOME/libs.tmp" >"$KAFKA_HOME/mvn.log" 2>&1; then
		tail -n 30 "$KAFKA_HOME/mvn.log" >&2
		die "kafka: maven could not fetch Kafka $KAFKA_VERSION"
	fi
	# Rename last, so an interrupted download is never mistaken for a cache hit.
	rm -rf "$KAFKA_HOME/libs"
	mv "$KAFKA_HOME/libs.tmp" "$KAFKA_HOME/libs"
}

# --------------------------------------------------------------------------
# Health checks: real protocol round trips, quiet, fast, exit status only.
# --------------------------------------------------------------------------
check_mongo() {
	"$VENV/bin/python" - "$MONGO_URL" 2>/dev/null <<'EOF'
import sys
import pymongo
client = pymongo.MongoClient(sys.argv[1], directConnection=True,
                             serverSelectionTimeoutMS=2000, connectTimeoutMS=2000)
client.admin.command("ping")
EOF
}

# psql, not pg_isready: a real query, so a cluster still starting up or one
# refusing us (auth, no such role) does not count as up.
check_postgres() {
	[[ -n "$PG_BIN" ]] || return 1
	PGCONNECT_TIMEOUT=2 "$PG_BIN/psql" -X -q -w -h "$HOST" -p "$POSTGRES_PORT" \
		-U "$POSTGRES_USER" -d postgres -tAc 'SELECT 1' >/dev/null 2>&1
}

check_redis() {
	[[ "$(redis-cli -h "$HOST" -p "$REDIS_PORT" ping 2>/dev/null)" == "PONG" ]]
}

check_kafka() {
	"$VENV/bin/python" - "$HOST:$KAFKA_PORT" 2>/dev/null <<'EOF'
import sys
from confluent_kafka.admin import AdminClient
# A metadata request that lists this broker means it is registered and serving.
admin = AdminClient({"bootstrap.servers": sys.argv[1], "log_level": 0})
md = admin.list_topics(timeout=3)
sys.exit(0 if md.brokers else 1)
EOF
}

# Common "is it already up?" logic for start: returns 0 when nothing is to be
# done. A healthy service we did not start (e.g. a system one) is reused and
# left alone; a foreign process squatting the port without speaking the
# protocol is an error.
already_up() {
	local svc="$1" port="$2" pid
	if pid="$(our_pid "$svc")"; then
		if "check_$svc"; then
			say "$svc: already running (pid $pid)"
			return 0
		fi
		die "$svc: pid $pid is running but does not answer; see $(log_file "$svc") or run '$0 stop $svc'"
	fi
	rm -f "$(pid_file "$svc")" # stale
	if port_open "$port"; then
		if "check_$svc"; then
			say "$svc: already answering on $HOST:$port (not started by this script; leaving it alone)"
			return 0
		fi
		die "$svc: port $HOST:$port is taken by something that is not $svc"
	fi
	return 1
}

# --------------------------------------------------------------------------
# postgres: FerretDB's backend, a throwaway cluster of our own
# --------------------------------------------------------------------------
# initdb into a scratch directory renamed when complete, so an interrupted
# first start is never mistaken for a cluster.
init_postgres_cluster() {
	local dir="$1" tmp="$1.init" prefix
	[[ -f "$dir/PG_VERSION" ]] && return 0
	say "postgres: creating a cluster in $dir (first time only)"
	mapfile -t prefix < <(as_postgres)
	rm -rf "$tmp" "$dir"
	mkdir -p -m 700 "$tmp"
	((EUID != 0)) || chown "$POSTGRES_OS_USER:" "$tmp"
	# The superuser is `postgres` whoever runs initdb, so the URL is the same
	# for root and for a developer; no locale, so the cluster is the same on
	# every machine.
	if ! (cd / && "${prefix[@]}" "$PG_BIN/initdb" -D "$tmp" -U "$POSTGRES_USER" \
		--auth=trust --encoding=UTF8 --no-locale) >"$LOG_DIR/postgres-initdb.log" 2>&1; then
		cat "$LOG_DIR/postgres-initdb.log" >&2
		die "postgres: initdb failed"
	fi
	# Trust, but only on loopback and the socket in the data directory (the
	# server listens nowhere else either).
	cat >"$tmp/pg_hba.conf" <<'HBA'
# Generated by scripts/services.sh: a throwaway test cluster, trusted on loopback only.
local all all              trust
host  all all 127.0.0.1/32 trust
HBA
	((EUID != 0)) || chown "$POSTGRES_OS_USER:" "$tmp/pg_hba.conf"
	mv "$tmp" "$dir"
}

ensure_postgres_database() {
	local psql=("$PG_BIN/psql" -X -q -w -h "$HOST" -p "$POSTGRES_PORT" -U "$POSTGRES_USER" -d postgres)
	[[ "$("${psql[@]}" -tAc "SELECT 1 FROM pg_database WHERE datname = '$POSTGRES_DATABASE'")" == 1 ]] &&
		return 0
	"${psql[@]}" -c "CREATE DATABASE $POSTGRES_DATABASE" >/dev/null ||
		die "postgres: could not create database $POSTGRES_DATABASE"
}

# FerretDB 1.24 pushes an equality filter down as `_jsonb->'field' @> value`,
# which its own indexes (btree on `(_jsonb->'field')`) can never serve: every
# find, update or delete statement by _id was a sequential scan of its table
# (7 ms a statement over 3,000 jobs, 2.3 us a row). A GIN index (jsonb_path_ops)
# on the same expression serves `@>`. This event trigger gives every
# single-field index FerretDB creates such a twin (every collection's _id, and
# the single-field indexes tickd declares), and the DO block below gives one to
# those created before it existed. Custom plans only, so a cached statement
# with its field name as a parameter ($1) still sees the name and the index.
POSTGRES_PUSHDOWN_INDEXES=$(cat <<'SQL'
SET client_min_messages = warning;
CREATE OR REPLACE FUNCTION tickd_gin_twin(index_oid oid) RETURNS void
LANGUAGE plpgsql AS $fn$
DECLARE
	idx record;
	twin text;
BEGIN
	SELECT c.relname AS name, i.indrelid::regclass AS tbl, i.indnkeyatts AS keys,
	       a.amname AS am, pg_get_indexdef(i.indexrelid, 1, true) AS key
	  INTO idx
	  FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_am a ON a.oid = c.relam
	 WHERE i.indexrelid = index_oid;
	IF NOT FOUND OR idx.am <> 'btree' OR idx.keys <> 1
	   OR idx.key !~ '^\(_jsonb -> ''[^'']+''::text\)$' THEN
		RETURN;
	END IF;
	twin := left(idx.name, 59) || '_gin';
	EXECUTE format('CREATE INDEX IF NOT EXISTS %I ON %s USING gin (%s jsonb_path_ops)',
	               twin, idx.tbl, idx.key);
END
$fn$;

CREATE OR REPLACE FUNCTION tickd_gin_twins() RETURNS event_trigger
LANGUAGE plpgsql AS $fn$
DECLARE
	cmd record;
BEGIN
	FOR cmd IN SELECT objid FROM pg_event_trigger_ddl_commands()
	           WHERE command_tag = 'CREATE INDEX' AND object_type = 'index' LOOP
		PERFORM tickd_gin_twin(cmd.objid);
	END LOOP;
END
$fn$;

DROP EVENT TRIGGER IF EXISTS tickd_gin_twins;
CREATE EVENT TRIGGER tickd_gin_twins ON ddl_command_end WHEN TAG IN ('CREATE INDEX')
	EXECUTE FUNCTION tickd_gin_twins();

DO $do$
DECLARE
	idx oid;
BEGIN
	FOR idx IN SELECT i.indexrelid FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid
	           JOIN pg_namespace n ON n.oid = c.relnamespace
	           WHERE n.nspname NOT IN ('pg_catalog', 'information_schema', 'pg_toast') LOOP
		PERFORM tickd_gin_twin(idx);
	END LOOP;
END
$do$;

SQL
)

ensure_postgres_pushdown_indexes() {
	"$PG_BIN/psql" -X -q -w -v ON_ERROR_STOP=1 -h "$HOST" -p "$POSTGRES_PORT" \
		-U "$POSTGRES_USER" -d "$POSTGRES_DATABASE" -c "$POSTGRES_PUSHDOWN_INDEXES" \
		-c "ALTER DATABASE $POSTGRES_DATABASE SET plan_cache_mode = force_custom_plan" >/dev/null ||
		die "postgres: could not install the GIN twins of FerretDB's indexes"
}

start_postgres() {
	ensure_postgres
	if already_up postgres "$POSTGRES_PORT"; then
		ensure_postgres_database
		ensure_postgres_pushdown_indexes
		return 0
	fi
	local t0 dir="$DATA_DIR/postgres" prefix
	t0=$(now)
	init_postgres_cluster "$dir"
	mapfile -t prefix < <(as_postgres)
	# Settings on the command line, so every start applies this script's.
	#   fsync, synchronous_commit and full_page_writes off: test data is
	#   throwaway, so a crash may lose it; commits do not wait for the disk.
	#   The unix socket goes in the data directory (not /var/run/postgresql,
	#   which a system cluster owns).
	launch postgres "${prefix[@]}" "$PG_BIN/postgres" -D "$dir" \
		-c listen_addresses="$HOST" \
		-c port="$POSTGRES_PORT" \
		-c unix_socket_directories="$dir" \
		-c max_connections="$POSTGRES_MAX_CONNECTIONS" \
		-c fsync=off \
		-c synchronous_commit=off \
		-c full_page_writes=off
	wait_ready postgres "$POSTGRES_WAIT"
	ensure_postgres_database
	ensure_postgres_pushdown_indexes
	say "postgres: up at $POSTGRES_URL (PostgreSQL $("$PG_BIN/postgres" --version | sed -n 's/^postgres (PostgreSQL) \([^ ]*\).*/\1/p'), pid $(our_pid postgres), $(($(now) - t0)) s)"
}

# --------------------------------------------------------------------------
# mongo: FerretDB on its PostgreSQL handler, over postgres
# --------------------------------------------------------------------------
# A FerretDB started by an earlier version of this script, on its SQLite
# handler, would otherwise be kept as "already running" forever.
stop_mongo_on_another_handler() {
	local pid
	pid="$(our_pid mongo)" || return 0
	tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- '--handler=postgresql' && return 0
	say "mongo: pid $pid is FerretDB on another handler; restarting it on PostgreSQL (its data is not carried over)"
	stop_service mongo
}

start_mongo() {
	ensure_check_venv
	start_postgres
	stop_mongo_on_another_handler
	already_up mongo "$MONGO_PORT" && return 0
	ensure_ferretdb
	local t0 dir="$DATA_DIR/mongo"
	t0=$(now)
	mkdir -p "$dir"
	# --postgresql-url: see FERRETDB_POSTGRESQL_URL (pool size) at the top.
	# --debug-addr=- switches off the metrics/pprof HTTP server that would
	#   otherwise grab 127.0.0.1:8088.
	# No auth flags: FerretDB 1.x only enforces auth with --test-enable-new-auth,
	#   so unauthenticated clients work as with a default mongod.
	DO_NOT_TRACK=1 launch mongo "$FERRETDB_BIN" \
		--handler=postgresql \
		--postgresql-url="$FERRETDB_POSTGRESQL_URL" \
		--state-dir="$dir" \
		--listen-addr="$HOST:$MONGO_PORT" \
		--debug-addr=- \
		--telemetry=disable \
		--log-level=info
	wait_ready mongo "$MONGO_WAIT"
	say "mongo: up at $MONGO_URL (FerretDB $FERRETDB_VERSION on PostgreSQL, pid $(our_pid mongo), $(($(now) - t0)) s)"
}

# --------------------------------------------------------------------------
# redis
# --------------------------------------------------------------------------
start_redis() {
	ensure_redis
	already_up redis "$REDIS_PORT" && return 0
	local t0 dir="$DATA_DIR/redis"
	t0=$(now)
	mkdir -p "$dir"
	# Foreground process (daemonize no) so the pid we record is redis itself;
	# no RDB/AOF because test data is throwaway.
	launch redis redis-server \
		--bind "$HOST" --port "$REDIS_PORT" \
		--daemonize no --save '' --appendonly no \
		--dir "$dir" --logfile ''
	wait_ready redis "$REDIS_WAIT"
	say "redis: up at $REDIS_URL (Redis $(redis-server --version | sed -n 's/.* v=\([^ ]*\).*/\1/p'), pid $(our_pid redis), $(($(now) - t0)) s)"
}

# --------------------------------------------------------------------------
# kafka: single KRaft node, broker and controller in one JVM
# --------------------------------------------------------------------------
write_kafka_config() {
	local dir="$1"
	cat >"$dir/server.properties" <<EOF
# Generated by scripts/services.sh; rewritten on every start.
process.roles=broker,controller
node.id=1
controller.quorum.bootstrap.servers=$HOST:$KAFKA_CONTROLLER_PORT
listeners=PLAINTEXT://$HOST:$KAFKA_PORT,CONTROLLER://$HOST:$KAFKA_CONTROLLER_PORT
advertised.listeners=PLAINTEXT://$HOST:$KAFKA_PORT,CONTROLLER://$HOST:$KAFKA_CONTROLLER_PORT
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs=$dir/data
num.partitions=1
auto.create.topics.enable=true
# Single node: internal topics cannot have more than one replica.
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
# Tests create consumer groups constantly; do not wait 3 s for each.
group.initial.rebalance.delay.ms=0
EOF
	# Kafka 4 logs with log4j2; everything goes to stdout, i.e. our log file.
	cat >"$dir/log4j2.properties" <<'EOF'
status = warn
appender.out.type = Console
appender.out.name = STDOUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = info
rootLogger.appenderRef.out.ref = STDOUT
logger.kafka.name = kafka
logger.kafka.level = info
logger.state.name = state.change.logger
logger.state.level = warn
EOF
}

start_kafka() {
	ensure_check_venv
	already_up kafka "$KAFKA_PORT" && return 0
	# The controller port is not probed by the health check; a clash there
	# would only show deep inside Kafka's log.
	port_open "$KAFKA_CONTROLLER_PORT" &&
		die "kafka: controller port $HOST:$KAFKA_CONTROLLER_PORT is already taken"
	ensure_kafka
	local t0 dir="$DATA_DIR/kafka"
	t0=$(now)
	mkdir -p "$dir/data"
	write_kafka_config "$dir"
	local cp="$KAFKA_HOME/libs/*" # literal '*': a JVM classpath wildcard
	local log4j="-Dlog4j2.configurationFile=$dir/log4j2.properties"
	# Format the KRaft log dir once per data dir; --standalone makes this node
	# the sole voter of a dynamic controller quorum.
	if [[ ! -f "$dir/data/meta.properties" ]]; then
		local cluster_id
		cluster_id="$(java "$log4j" -cp "$cp" kafka.tools.StorageTool random-uuid)"
		if ! java "$log4j" -cp "$cp" kafka.tools.StorageTool format \
			-t "$cluster_id" -c "$dir/server.properties" --standalone \
			>"$dir/format.log" 2>&1; then
			cat "$dir/format.log" >&2
			die "kafka: formatting $dir/data failed"
		fi
	fi
	launch kafka java -Xms256m -Xmx512m -XX:+UseG1GC -Djava.awt.headless=true \
		"$log4j" \
		-cp "$cp" kafka.Kafka "$dir/server.properties"
	wait_ready kafka "$KAFKA_WAIT"
	say "kafka: up at $KAFKA_URL (Kafka $KAFKA_VERSION, pid $(our_pid kafka), $(($(now) - t0)) s)"
}

# --------------------------------------------------------------------------
# stop: only processes recorded in our pid files
# --------------------------------------------------------------------------
# PostgreSQL's SIGTERM (smart shutdown) waits for every client to leave;
# SIGINT (fast shutdown) disconnects them and still shuts down cleanly.
stop_signal() {
	case "$1" in
	postgres) printf 'INT' ;;
	*) printf 'TERM' ;;
	esac
}

stop_service() {
	local svc="$1" pid i
	if ! pid="$(our_pid "$svc")"; then
		rm -f "$(pid_file "$svc")"
		say "$svc: not running (nothing started by this script)"
		return 0
	fi
	kill "-$(stop_signal "$svc")" "$pid" 2>/dev/null || true
	for ((i = 0; i < STOP_WAIT * 10; i++)); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	if kill -0 "$pid" 2>/dev/null; then
		warn "$svc: pid $pid ignored SIG$(stop_signal "$svc") for ${STOP_WAIT} s; sending SIGKILL"
		kill -KILL "$pid" 2>/dev/null || true
	fi
	rm -f "$(pid_file "$svc")"
	say "$svc: stopped (pid $pid)"
}
# FerretDB first: it is PostgreSQL's only client.
stop_mongo() {
	stop_service mongo
	stop_service postgres
}
stop_postgres() { stop_service postgres; }
stop_redis() { stop_service redis; }
stop_kafka() { stop_service kafka; }

# --------------------------------------------------------------------------
# status
# --------------------------------------------------------------------------
status_service() {
	local svc="$1" url="$2" port="$3" pid who
	if pid="$(our_pid "$svc")"; then who="pid $pid"; else who="not started by this script"; fi
	# The port probe first keeps `status` of a stopped service instant (the
	# client checks would otherwise wait for their timeouts).
	if port_open "$port" && "check_$svc"; then
		say "$svc: up   $url ($who)"
		return 0
	fi
	if [[ "$who" == pid* ]]; then
		say "$svc: down $url ($who, process running but not answering)"
	else
		say "$svc: down $url"
	fi
	return 1
}
status_postgres() {
	PG_BIN="$(postgres_bin)" || { say "postgres: down $POSTGRES_URL (not installed)"; return 1; }
	status_service postgres "$POSTGRES_URL" "$POSTGRES_PORT"
}
# The stack: FerretDB and the PostgreSQL under it.
status_mongo() {
	local rc=0
	status_postgres || rc=1
	if [[ -x "$VENV/bin/python" ]]; then
		status_service mongo "$MONGO_URL" "$MONGO_PORT" || rc=1
	else
		say "mongo: down $MONGO_URL"
		rc=1
	fi
	return "$rc"
}
status_redis() { command -v redis-cli >/dev/null || { say "redis: down $REDIS_URL"; return 1; }; status_service redis "$REDIS_URL" "$REDIS_PORT"; }
status_kafka() { [[ -x "$VENV/bin/python" ]] || { say "kafka: down $KAFKA_URL"; return 1; }; status_service kafka "$KAFKA_URL" "$KAFKA_PORT"; }

print_env() {
	say "export TICKD_TEST_MONGODB_URL=$MONGO_URL"
	say "export TICKD_TEST_REDIS_URL=$REDIS_URL"
	say "export TICKD_TEST_KAFKA_URL=$KAFKA_URL"
	say "export TICKD_TEST_POSTGRESQL_URL=postgresql://postgres@127.0.0.1:$POSTGRES_PORT/postgres"
}

# --------------------------------------------------------------------------
# main
# --------------------------------------------------------------------------
main() {
	(($# >= 1)) || usage
	local action="$1"
	shift
	case "$action" in
	env)
		print_env
		return 0
		;;
	start | stop | status) ;;
	-h | --help | help) usage ;;
	*) usage ;;
	esac

	local services=("$@") svc
	((${#services[@]})) || services=("${ALL_SERVICES[@]}")
	for svc in "${services[@]}"; do
		case "$svc" in
		mongo | postgres | redis | kafka) ;;
		*) die "unknown service '$svc' (expected mongo, postgres, redis or kafka)" ;;
		esac
	done

	mkdir -p "$RUN_DIR" "$LOG_DIR"
	# Serialise start/stop so two concurrent callers (e.g. parallel test
	# sessions) cannot both launch the same service.
	if [[ "$action" != status ]] && command -v flock >/dev/null; then
		exec 9>"$RUN_DIR/.lock"
		flock -w 600 9 || die "another '$0' is still running (lock $RUN_DIR/.lock)"
	fi

	if [[ "$action" == status ]]; then
		local rc=0
		for svc in "${services[@]}"; do
			"status_${svc}" || rc=1
		done
		return "$rc"
	fi
	# Called plainly (not in an `||` list) so that `set -e` stays in force
	# inside: any failed step aborts with a non-zero exit.
	for svc in "${services[@]}"; do
		"${action}_${svc}"
	done
}

main "$@"
