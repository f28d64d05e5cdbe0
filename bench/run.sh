#!/usr/bin/env bash
# make bench: the whole performance run, side by side in one go, then docs/benchmarks.md.
#
#   1. build kyapi, kyload and the benchmark-only servers (bench/unmetered, bench/metered)
#   2. a fresh database kyapi_bench (dropped and recreated) with a 150,000-place catalog
#   3. metered `kyapi serve` + kyload: place detail only, then the mix
#   3a. the metered detail run again on `kyapi serve -projections=false`: what the projections
#       cost, apart from the charge
#   3b. the metered detail run again with REDIS_URL set (a private redis-server): the cost of a
#       rate limit shared in Redis against the one shared in the database
#   4. the same handlers unmetered (bench/unmetered), same database and index, same runs
#   4b. two more rounds of 3, 3a and 4, taking turns (BENCH_ROUNDS): the target ratios are medians
#   5. a CPU profile of the metered path (bench/metered, with pprof) under the detail load,
#      with PostgreSQL's statements of the same run (pg_stat_statements)
#   6. PostgreSQL's append ceiling (bench/pgceiling; commands/ benchmarks when present)
#   7. kyapi rebuild (events/s), 8. digest, verify and audit of a 1,000,000-event store,
#   9. the embedded index benchmarks on 150,000 places
#  10. 100,000 accounts with a key each (bench/storebench accounts), then the growth benchmark:
#      one account's history at 10k … 10M events (bench/storebench growth), audited with them
#  11. a bonus grant to those 100,000 accounts while paid load runs (bench/storebench, kyload -grant-at)
#  11b. late in a busy day: the paying accounts charged millions of places of the day
#       (bench/storebench day), then metered place detail on a server started afresh
#  12. bench/report writes docs/benchmarks.md
# The metered runs (3) are bracketed by database size snapshots (bench/storebench size), for the
# bytes a metered request costs.
#
# Environment: DATABASE_URL (else the private cluster of scripts/devdb.sh), BENCH_PLACES
# (150000), BENCH_SECONDS per load run (20), BENCH_CONNECTIONS (64), BENCH_ACCOUNTS (200),
# BENCH_GRANT_ACCOUNTS (100000), BENCH_GROWTH_SIZES (10000,100000,1000000,10000000),
# BENCH_DAY_CLAIMS (3400000), BENCH_ROUNDS (3: metered and unmetered runs, taking turns),
# BENCH_OUT (raw results; a new temporary directory by default), BENCH_DOC (docs/benchmarks.md).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"

places=${BENCH_PLACES:-150000}
secs=${BENCH_SECONDS:-20}
conns=${BENCH_CONNECTIONS:-64}
naccounts=${BENCH_ACCOUNTS:-200}
grant_accounts=${BENCH_GRANT_ACCOUNTS:-100000}
growth_sizes=${BENCH_GROWTH_SIZES:-10000,100000,1000000,10000000}
# The busy day is filled to this many claims of the day in all, whatever the runs before it
# paid: within METER_MAX_CLAIMS (4,000,000 by default) with room for the runs on it.
day_claims=${BENCH_DAY_CLAIMS:-3400000}
rounds=${BENCH_ROUNDS:-3}
mix=${BENCH_MIX:-detail=70,list=10,search=10,menu=10}
out=${BENCH_OUT:-$(mktemp -d "${TMPDIR:-/tmp}/kyapi-bench.XXXXXX")}
doc=${BENCH_DOC:-docs/benchmarks.md}
mkdir -p "$out/bin"
log() { printf '\n== %s  %s\n' "$(date +%T)" "$*"; }

base_url=${DATABASE_URL:-$(scripts/devdb.sh url)}
# The same server, database kyapi_bench: never the database other work is using.
db_url=$(printf '%s' "$base_url" | sed -E 's#^(postgres(ql)?://[^/]+)/[^?]*#\1/kyapi_bench#')
[ "$db_url" != "$base_url" ] || { echo "bench: cannot derive a kyapi_bench URL from DATABASE_URL" >&2; exit 1; }

# Loopback ports of this run, derived from the shell's pid so two runs do not collide.
port=$((20000 + ($$ % 2000) * 4))
read_addr=127.0.0.1:$port admin_addr=127.0.0.1:$((port + 1)) pprof_addr=127.0.0.1:$((port + 2))
read_url=http://$read_addr admin_url=http://$admin_addr

server_pid=
stop_server() {
  if [ -n "$server_pid" ] && kill -0 "$server_pid" 2>/dev/null; then
    kill -TERM "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
  server_pid=
}
trap stop_server EXIT INT TERM

# Every server of the run sees the same environment: only the binary changes.
export DATABASE_URL=$db_url READ_ADDR=$read_addr ADMIN_ADDR=$admin_addr ADMIN_TOKEN=bench-admin-token \
  DATA_DIR=$out/data CANONICAL_BASE_URL=http://localhost:8080 LOG_LEVEL=info
# The per-key limit (60/min by default) would cap 200 keys at 200 requests/s: the run
# measures throughput, so the limiter still runs but never refuses.
export RATE_LIMIT_PER_MINUTE=100000000

start_server() { # name binary args...
  local name=$1; shift
  "$@" >"$out/$name.log" 2>&1 &
  server_pid=$!
  local t0=$SECONDS
  until curl -fsS "$read_url/healthz" >/dev/null 2>&1; do
    kill -0 "$server_pid" 2>/dev/null || { tail -n 20 "$out/$name.log" >&2; echo "bench: $name exited" >&2; exit 1; }
    [ $((SECONDS - t0)) -lt 900 ] || { echo "bench: $name did not answer in 900 s" >&2; exit 1; }
    sleep 0.5
  done
  echo "$name ready in $((SECONDS - t0)) s (pid $server_pid)"
  echo "$((SECONDS - t0))" >"$out/$name.ready_s"
}

load() { # label mix [extra kyload flags]
  local label=$1 m=$2; shift 2
  "$out/bin/kyload" -url "$read_url" -keys "$out/keys.txt" -places "$out/places.tsv" -duration "${secs}s" \
    -connections "$conns" -mix "$m" -pid "$server_pid" -label "$label" -json "$out/$label.json" "$@"
}

log "building"
go build -o "$out/bin/kyapi" ./cmd/kyapi
go build -o "$out/bin/kyload" ./cmd/kyload
go build -o "$out/bin/unmetered" ./bench/unmetered
go build -o "$out/bin/metered" ./bench/metered
go build -o "$out/bin/report" ./bench/report
go build -o "$out/bin/storebench" ./bench/storebench

log "database kyapi_bench and a $places-place catalog"
psql "$base_url" -qc "DROP DATABASE IF EXISTS kyapi_bench WITH (FORCE)"
psql "$base_url" -qc "CREATE DATABASE kyapi_bench"
rm -rf "$out/data"
"$out/bin/kyapi" migrate >/dev/null
"$out/bin/kyapi" demo-data -places "$places" | grep -E 'demo catalog' | tee "$out/demo-data.txt"

log "metered: kyapi serve"
start_server serve-metered "$out/bin/kyapi" serve
# serve has caught the catalog projection up before it listens: rm_places is complete.
psql "$db_url" -AtF $'\t' -c "SELECT place_id, has_menu, coalesce(latitude::text, ''), coalesce(longitude::text, '') FROM rm_places ORDER BY place_id" >"$out/places.tsv"
# Accounts and keys through the admin API; this short run also warms the server up.
"$out/bin/kyload" -url "$read_url" -admin-url "$admin_url" -admin-token "$ADMIN_TOKEN" -accounts "$naccounts" \
  -write-keys "$out/keys.txt" -places "$out/places.tsv" -duration 3s -connections 16 -mix "$mix" -label warmup >/dev/null
# Then one run's length of the mix, not measured, on each server before its runs: the runs
# measure a server that has been serving (the meter holding every account, the caches warm), not
# the first seconds after the catalog import, which only the metered server (run first) would pay.
# warm_detail does the same with place detail only, before the runs that compare detail rates
# across a restart.
warm() { "$out/bin/kyload" -url "$read_url" -keys "$out/keys.txt" -places "$out/places.tsv" -duration "${secs}s" \
  -connections "$conns" -mix "$1" -label warmup >/dev/null; }
warm_day() { warm "$mix"; }
warm_detail() { warm detail=100; }
warm_day
# What else runs on this shared machine, sampled mid-run; the report shows it.
(sleep $((secs / 2)); top -b -n 2 -d 2 -o %CPU -w 140 | awk '/^top -/{n++} n==2' | head -22 >"$out/neighbours.txt") &
# Database growth over both metered runs: sizes after a CHECKPOINT, projections caught up.
"$out/bin/storebench" size -label before-metered -out "$out/size-before.json"
# The meter's batch sizes over the detail run: its histogram's count and sum before and after.
meter_batches() { curl -fsS -H "Authorization: Bearer $ADMIN_TOKEN" "$admin_url/metrics" | grep -E '^kyapi_meter_batch_size_(count|sum) ' || true; }
meter_batches >"$out/metered-detail.batches-before"
load metered-detail detail=100 -db "$db_url"
meter_batches >"$out/metered-detail.batches-after"
load metered-mix "$mix" -db "$db_url"
"$out/bin/storebench" size -label after-metered -out "$out/size-after.json"
stop_server

# The metered detail run again with the read-model projections stopped (the place index still
# runs): the difference is what the projections cost under this load, the rest of the gap to the
# unmetered server is the charge itself. Its events are projected by the next server started.
noproj() { # label suffix
  start_server "serve-noproj$1" "$out/bin/kyapi" serve -projections=false
  warm_day
  load "metered-detail-noproj$1" detail=100
  stop_server
}
log "metered, projections off: kyapi serve -projections=false"
noproj ""

log "metered, rate limit shared in Redis: the same detail run with REDIS_URL (a private redis-server)"
if command -v redis-server >/dev/null 2>&1; then
  redis_port=$((port + 3))
  mkdir -p "$out/redis"
  redis-server --port "$redis_port" --bind 127.0.0.1 --dir "$out/redis" --save "" --appendonly no \
    --logfile "$out/redis/redis.log" --daemonize no &
  redis_pid=$!
  trap 'stop_server; kill "$redis_pid" 2>/dev/null || true' EXIT INT TERM
  until redis-cli -p "$redis_port" ping >/dev/null 2>&1; do sleep 0.2; done
  start_server serve-metered-redis env REDIS_URL="redis://127.0.0.1:$redis_port/0" "$out/bin/kyapi" serve
  load metered-detail-redis detail=100 -db "$db_url"
  stop_server
  kill "$redis_pid" 2>/dev/null || true
  wait "$redis_pid" 2>/dev/null || true
  trap stop_server EXIT INT TERM
else
  echo "bench: redis-server is not installed (apt-get install redis-server); the Redis run is skipped"
fi

log "unmetered baseline: bench/unmetered on the same database and index"
start_server unmetered "$out/bin/unmetered"
warm_day
load unmetered-detail detail=100
load unmetered-mix "$mix"
stop_server

# More rounds of the same four runs, metered and unmetered servers taking turns: the machine is
# shared, and two runs minutes apart differ by 10-15% for reasons of their own, so each ratio the
# targets judge is the median of the rounds' ratios (round 1 is the runs above).
for round in $(seq 2 "$rounds"); do
  log "round $round of $rounds: metered, then unmetered"
  start_server "serve-metered-r$round" "$out/bin/kyapi" serve
  warm_day
  load "metered-detail-r$round" detail=100 -db "$db_url"
  load "metered-mix-r$round" "$mix" -db "$db_url"
  stop_server
  noproj "-r$round"
  start_server "unmetered-r$round" "$out/bin/unmetered"
  warm_day
  load "unmetered-detail-r$round" detail=100
  load "unmetered-mix-r$round" "$mix"
  stop_server
done

log "CPU profile of the metered path under the detail load (bench/metered)"
start_server metered-pprof "$out/bin/metered" -pprof "$pprof_addr"
# PostgreSQL's side of the same run, when the cluster loads pg_stat_statements
# (scripts/devdb.sh configures it; a cluster of DATABASE_URL may not).
pgss=0
if psql "$db_url" -qc "CREATE EXTENSION IF NOT EXISTS pg_stat_statements" >/dev/null 2>&1 &&
  psql "$db_url" -qAtc "SELECT pg_stat_statements_reset()" >/dev/null 2>&1; then
  pgss=1
else
  echo "bench: pg_stat_statements is not loaded by this cluster (shared_preload_libraries); PostgreSQL's statements are not reported"
fi
load metered-pprof detail=100 -db "$db_url" >"$out/metered-pprof.txt" &
load_pid=$!
sleep 2
curl -fsS -o "$out/cpu.pprof" "http://$pprof_addr/debug/pprof/profile?seconds=$((secs > 6 ? secs - 4 : 2))" || true
wait "$load_pid" || true
cat "$out/metered-pprof.txt"
if [ "$pgss" = 1 ]; then
  psql "$db_url" -AtF $'\t' -c "SELECT calls, round(total_exec_time::numeric, 1), rows, regexp_replace(query, '\s+', ' ', 'g')
    FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
      AND query NOT LIKE '%pg_stat_statements%' ORDER BY total_exec_time DESC LIMIT 20" >"$out/pgss.tsv"
fi
stop_server
if [ -s "$out/cpu.pprof" ]; then
  go tool pprof -top -nodecount=25 "$out/bin/metered" "$out/cpu.pprof" >"$out/pprof-top.txt" 2>/dev/null || true
  go tool pprof -top -cum -nodecount=40 "$out/bin/metered" "$out/cpu.pprof" >"$out/pprof-cum.txt" 2>/dev/null || true
fi

log "PostgreSQL append ceiling"
BENCH_DATABASE_URL=$db_url go test -run '^$' -bench . -benchtime 5s -count 1 ./bench/pgceiling/ | tee "$out/pgceiling.txt"
if grep -qsE 'func Benchmark(PostgresInsert|Charge)' commands/*_test.go; then
  # The commands package's own benchmarks, when present (they make their own databases).
  DATABASE_URL=$base_url timeout 240 go test -run '^$' -bench 'BenchmarkPostgresInsert|BenchmarkCharge' -benchtime 3s -count 1 ./commands/ \
    | tee "$out/commands-bench.txt" || echo "bench: commands benchmarks failed or timed out" | tee -a "$out/commands-bench.txt"
fi

log "kyapi rebuild"
"$out/bin/kyapi" rebuild 2>&1 | tr '\r' '\n' | grep -E 'events in|rebuilt' | tee "$out/rebuild.txt"
# Events per kind of stream: the catalog and the place index read only their own streams.
psql "$db_url" -AtF $'\t' -c "SELECT split_part(stream_id, '-', 1), sum(version) FROM streams GROUP BY 1 ORDER BY 1" >"$out/rebuild-streams.txt"
# The embedded index's own share of its rebuild: the same number of generated places, no database.
GOGC=400 go test -run '^$' -bench 'Rebuild150k' -benchtime 1x -count 1 ./projections/placeindex/bleveindex/ | tee "$out/bleve-rebuild.txt"

log "digest and verify on a store of 1,000,000 events"
DATABASE_URL=$base_url go test -run '^$' -bench 'BenchmarkDigest1M' -benchtime 1x -count 1 ./audit/ | tee "$out/digest.txt"

log "embedded index on 150,000 places"
go test -run '^$' -bench 'Near150k|ListQ150k' -benchtime 2000x -count 1 ./projections/placeindex/bleveindex/ | tee "$out/bleve.txt"

log "$grant_accounts accounts with a key each, for the bonus grant (and for the growth benchmark's audits)"
"$out/bin/storebench" accounts -n "$grant_accounts" | tee "$out/grant-accounts.txt"

log "growth: one account's history at $growth_sizes events"
# Before the bonus grant: an account's events are recorded in time order, and a key issued
# after a grant is recorded after the grant's instant, so a history 30 days back can only be
# written before any grant (storebench growth refuses to write it later than asked).
# The rate before and after the history is measured alike: each on a server started afresh (its
# meter holds no claims, so every account's first charge reads them from the store, as after any
# restart) that has then served the detail load for one run's length, unmeasured. A run 3 s after
# its server started reads places and claims into caches that a server serving for minutes has
# warm: compared with one, the ratio would measure the caches, not the history.
start_server serve-growth-before "$out/bin/kyapi" serve
warm_detail
load growth-before detail=100
"$out/bin/storebench" growth -sizes "$growth_sizes" -admin-url "$admin_url" -kyapi "$out/bin/kyapi" -out "$out/growth.json" \
  | tee "$out/growth.txt" || echo "bench: growth benchmark failed" | tee -a "$out/growth.txt"
# After the history is written (vacuumed, analyzed and checkpointed by storebench growth).
stop_server
start_server serve-growth "$out/bin/kyapi" serve
warm_detail
load growth-after detail=100
stop_server

log "bonus grant to $grant_accounts accounts under paid load"
start_server serve-grant "$out/bin/kyapi" serve
"$out/bin/kyload" -url "$read_url" -keys "$out/keys.txt" -places "$out/places.tsv" -duration 3s -connections 16 -mix detail=100 -label warmup >/dev/null
load grant-plain detail=100
outage=bench-grant-$$
load grant-during detail=100 -admin-url "$admin_url" -admin-token "$ADMIN_TOKEN" -grant-at "$((secs / 4 + 1))s" -grant-outage "$outage"
"$out/bin/storebench" grant-check -outage "$outage" -out "$out/grant-check.json"

stop_server

log "late in a busy day: the paying accounts charged places until the day holds about $day_claims claims"
"$out/bin/storebench" day -keys "$out/keys.txt" -places "$out/places.tsv" -claims "$day_claims" -out "$out/day.json"
start_server serve-day "$out/bin/kyapi" serve
# Waits for every projection to catch up with the day's charges, so that they do not run with the load.
"$out/bin/storebench" size -label day -out "$out/size-day.json"
# Unmeasured, as long as a run: each account's first charge reads its day of claims back.
warm_detail
load day-late detail=100
curl -fsS -H "Authorization: Bearer $ADMIN_TOKEN" "$admin_url/metrics" | grep -E '^kyapi_meter_claim' >"$out/day-metrics.txt" || true
stop_server

log "writing $doc"
"$out/bin/report" -dir "$out" -out "$doc" -places "$places" -seconds "$secs" -connections "$conns" -accounts "$naccounts" -mix "$mix" -rounds "$rounds" \
  -grant-accounts "$grant_accounts" -growth-sizes "$growth_sizes" \
  -pg-version "$(psql "$db_url" -Atc 'SHOW server_version')"
echo "raw results in $out"
