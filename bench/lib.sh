# shellcheck shell=bash
# Shared by the bench/ scripts: sourced, never run. Every script gets
#   BUILD   the meson build directory with the pace binaries
#   MODE    quick | full
#   OUT     the report directory: a script writes OUT/<name>.md (its section
#           of the report) and any OUT/<name>-*.png it plots
# and must clean up every process it starts, by pid, and restore what it
# changes (sysctls, cgroups), also when interrupted.

bench_pids=()
bench_dirs=()

bench_cleanup() {
        local p
        for p in "${bench_pids[@]}"; do kill "$p" 2>/dev/null || true; done
        for p in "${bench_pids[@]}"; do wait "$p" 2>/dev/null || true; done
        bench_pids=()
        local d
        for d in "${bench_dirs[@]}"; do
                # BENCH_KEEP=1: keep the work and runtime directories (logs,
                # raw samples) to look into a surprising figure.
                if [ -n "${BENCH_KEEP:-}" ]; then
                        echo "bench: kept $d" >&2
                else
                        rm -rf "$d"
                fi
        done
        bench_dirs=()
}

# bench_track PID: kill it at exit.
bench_track() { bench_pids+=("$1"); }

# bench_untrack PID: it was waited for or stopped already.
bench_untrack() {
        local p keep=()
        for p in "${bench_pids[@]}"; do [ "$p" = "$1" ] || keep+=("$p"); done
        bench_pids=("${keep[@]}")
}

# bench_start_pace CONFIG_JSON: starts pace-broker (as nobody) and
# pace-dispatcher in a new private runtime directory. Sets PACE_DIR,
# PACE_SOCKET (exported), PACE_BROKER_PID, PACE_DISPATCHER_PID.
# PACE_DISPATCHER_BIN, if set, is the dispatcher binary to run instead of
# BUILD's (bench/threads compares builds in one run).
bench_start_pace() {
        local config=$1
        PACE_DIR=$(mktemp -d /tmp/pace-bench.XXXXXX)
        bench_dirs+=("$PACE_DIR")
        chmod 755 "$PACE_DIR"
        chown nobody "$PACE_DIR"
        # Most benchmarks' clients run as root, which a host must allow
        # explicitly (config/README.md, "reserve_root_processes"). A section
        # whose clients are ordinary users (and which may run a dispatcher
        # older than the key) sets BENCH_ROOT_CLIENTS=0.
        [ "${BENCH_ROOT_CLIENTS:-1}" = 1 ] && config="{\"reserve_root_processes\": true, ${config#\{}"
        printf '%s\n' "$config" >"$PACE_DIR/pace.json"
        export PACE_SOCKET=$PACE_DIR/broker.sock
        setpriv --reuid=nobody --regid=nogroup --clear-groups \
                "$BUILD/broker/pace-broker" --config "$PACE_DIR/pace.json" --runtime-dir "$PACE_DIR" \
                2>"$PACE_DIR/broker.log" &
        PACE_BROKER_PID=$!
        bench_track "$PACE_BROKER_PID"
        local _
        for _ in $(seq 200); do [ -S "$PACE_SOCKET" ] && break; sleep 0.02; done
        [ -S "$PACE_SOCKET" ] || { cat "$PACE_DIR/broker.log" >&2; return 1; }
        "${PACE_DISPATCHER_BIN:-$BUILD/dispatcher/pace-dispatcher}" --config "$PACE_DIR/pace.json" --runtime-dir "$PACE_DIR" \
                2>"$PACE_DIR/dispatcher.log" &
        PACE_DISPATCHER_PID=$!
        bench_track "$PACE_DISPATCHER_PID"
        sleep 0.3
        kill -0 "$PACE_DISPATCHER_PID" 2>/dev/null || { cat "$PACE_DIR/dispatcher.log" >&2; return 1; }
}

# bench_stop_pace: stops both daemons of bench_start_pace (dispatcher first,
# so it demotes what it promoted while it can).
bench_stop_pace() {
        local p
        for p in "${PACE_DISPATCHER_PID:-}" "${PACE_BROKER_PID:-}"; do
                [ -n "$p" ] || continue
                kill "$p" 2>/dev/null || true
                wait "$p" 2>/dev/null || true
                bench_untrack "$p"
        done
        PACE_DISPATCHER_PID= PACE_BROKER_PID=
}

# bench_dispatcher_cpu_ns: CPU time the dispatcher's processes used so far
# (monitor + dispatcher, all threads), in ns, from /proc/PID/task/*/schedstat.
bench_dispatcher_cpu_ns() {
        local total=0 f pid
        for pid in "$PACE_DISPATCHER_PID" $(pgrep -P "$PACE_DISPATCHER_PID" 2>/dev/null); do
                for f in /proc/"$pid"/task/*/schedstat; do
                        [ -r "$f" ] || continue
                        read -r run _ <"$f" && total=$((total + run))
                done
        done
        echo "$total"
}

# bench_machine_facts: Markdown lines describing this machine.
bench_machine_facts() {
        echo "- kernel: $(uname -r) ($(uname -m)), $(nproc) CPUs online: $(cat /sys/devices/system/cpu/online)"
        echo "- CPU: $(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1)"
        echo "- clocksource: $(cat /sys/devices/system/clocksource/clocksource0/current_clocksource 2>/dev/null)"
        echo "- sched_rt_runtime_us / period: $(cat /proc/sys/kernel/sched_rt_runtime_us) / $(cat /proc/sys/kernel/sched_rt_period_us)"
        echo "- pace: $(git -C "$(dirname "${BASH_SOURCE[0]}")/.." describe --always --dirty 2>/dev/null)"
        echo "- date: $(date -u +%Y-%m-%dT%H:%MZ)"
}

# bench_pct SORTED_FILE Q: the Q-quantile (0..1) of a file of sorted numbers.
bench_pct() {
        awk -v q="$2" '{ v[NR] = $1 } END { if (NR == 0) { print "nan"; exit } i = int(q * (NR - 1) + 0.5) + 1; print v[i] }' "$1"
}
