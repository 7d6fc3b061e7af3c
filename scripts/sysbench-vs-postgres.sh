#!/usr/bin/env bash
# sysbench against nvmedb serve and PostgreSQL 15 on this machine, interleaved, 2 reps: both
# fully cached (256 MiB buffers), durable commits (nvmedb defaults; PostgreSQL fsync and
# synchronous_commit on), 4 tables x 20 000 rows, 4 threads, SECS (10) seconds per script.
# Run as root from the repository after `cargo build --release` (PostgreSQL runs as postgres).
# Prints one line per rep, script and server: transactions/s, deadlocks retried, fatal errors.
set -u
NV=${NV:-./target/release/nvmedb}
PGBIN=/usr/lib/postgresql/15/bin
D=${D:-$PWD/target/sysbench-vs-pg}
SECS=${SECS:-10}
TABLES=4; SIZE=20000; THREADS=4
rm -rf $D/nv $D/pg; mkdir -p $D/pg; chmod 755 $D; chown postgres $D/pg
su postgres -c "$PGBIN/initdb -D $D/pg -A trust -U postgres >/dev/null"
su postgres -c "$PGBIN/pg_ctl -D $D/pg -o '-p 55432 -k /tmp -c shared_buffers=256MB -c max_connections=50' -l /tmp/nvmedb-sysbench-pg.log start >/dev/null"
sleep 2
su postgres -c "$PGBIN/createdb -h 127.0.0.1 -p 55432 -U postgres sbtest"
$NV serve --listen 127.0.0.1:55433 --buffer 256MiB --data $D/nv > $D/nv.log 2>&1 &
NVPID=$!
sleep 2
sb() { # port user script cmd
  sysbench --db-driver=pgsql --pgsql-host=127.0.0.1 --pgsql-port=$1 --pgsql-user=$2 --pgsql-db=sbtest \
    --tables=$TABLES --table-size=$SIZE --threads=$THREADS --time=$SECS --db-ps-mode=auto $3 $4 2>&1
}
sb 55432 postgres oltp_read_write prepare >/dev/null
sb 55433 postgres oltp_read_write prepare > $D/nv-prepare.log; tail -2 $D/nv-prepare.log
for rep in 1 2; do
  for script in oltp_point_select oltp_read_only oltp_read_write oltp_write_only; do
    for srv in pg nv; do
      port=55432; [ $srv = nv ] && port=55433
      out=$(sb $port postgres $script run)
      tps=$(echo "$out" | awk '/transactions:/ {gsub(/[()]/,"",$3); print $3}')
      ign=$(echo "$out" | awk '/ignored errors:/ {print $3}')
      err=$(echo "$out" | grep -c FATAL)
      echo "$rep $script $srv tps=$tps ignored=$ign fatal=$err"
    done
  done
done
kill $NVPID; wait $NVPID 2>/dev/null
su postgres -c "$PGBIN/pg_ctl -D $D/pg stop >/dev/null"
