# shellcheck shell=bash
# Debian's PipeWire on private buses, for tests/pipewire/run and bench/rtkit:
# sourced, never run. Everything started here is tracked by pid (pw_track)
# and killed by pw_cleanup; every file lives under one temporary directory.
#
# The graph: PipeWire's own null sink (support.null-audio-sink, in the
# daemon's data loop, on its own timer) drives; a pw-cat playback stream in a
# second process is linked to it, so every quantum the daemon's data-loop
# thread wakes on its timer and signals pw-cat's data thread across
# processes, which must answer before the next quantum. There is no session
# manager: both ends get their ports from adapter.auto-port-config and are
# linked with pw-link. Both processes run as PW_USER with RLIMIT_RTPRIO 0, so
# their own sched_setscheduler() fails and module-rt asks RealtimeKit1 on the
# private system bus, as on a desktop.
#
# What counts as an xrun: PipeWire 0.3.65's profiler (pw-profiler) logs each
# cycle of the driver with every follower's status; a follower that has not
# finished (status != 3) when the driver starts the next cycle is what pw-top
# counts in its ERR column, and the dummy and null drivers have no other xrun
# count (their xrun_count stays 0).

PW_USER=${PW_USER:-games} # an ordinary account with a name (D-Bus and polkit need one), not the broker's
PW_QUANTUM=${PW_QUANTUM:-256} # samples at 48 kHz: 5.33 ms
PW_CPU=${PW_CPU:-1}           # pipewire, pw-cat and the hogs; samplers on CPU 0

pw_pids=()
PW_DIR=

pw_track() { pw_pids+=("$1"); }

pw_cleanup() {
        local p
        # Newest first: clients before the daemons they talk to.
        for ((i = ${#pw_pids[@]} - 1; i >= 0; i--)); do kill "${pw_pids[i]}" 2>/dev/null || true; done
        for p in "${pw_pids[@]}"; do wait "$p" 2>/dev/null || true; done
        pw_pids=()
        PW_HOGS=()
        if [ -n "$PW_DIR" ] && [ -d "$PW_DIR" ]; then
                if [ -n "${PW_KEEP:-}" ]; then echo "pipewire: kept $PW_DIR" >&2; else rm -rf "$PW_DIR"; fi
        fi
        PW_DIR=
}

# pw_setup: the temporary directory and the two private buses. Exports
# DBUS_SYSTEM_BUS_ADDRESS and DBUS_SESSION_BUS_ADDRESS (the machine's own
# buses are never touched).
pw_setup() {
        PW_DIR=$(mktemp -d /tmp/pace-pw.XXXXXX)
        chmod 755 "$PW_DIR"
        mkdir -p "$PW_DIR/user" "$PW_DIR/xdg"
        chown "$PW_USER:" "$PW_DIR/user" "$PW_DIR/xdg"
        chmod 700 "$PW_DIR/xdg"
        cat >"$PW_DIR/system.conf" <<EOF
<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>system</type>
  <listen>unix:path=$PW_DIR/system_bus_socket</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow user="*"/>
    <allow own="*"/>
    <allow send_destination="*"/>
    <allow receive_sender="*"/>
  </policy>
</busconfig>
EOF
        export DBUS_SYSTEM_BUS_ADDRESS=unix:path=$PW_DIR/system_bus_socket
        # The session bus belongs to the user (it admits only its own uid).
        export DBUS_SESSION_BUS_ADDRESS=unix:path=$PW_DIR/user/session_bus_socket
        dbus-daemon --config-file="$PW_DIR/system.conf" --nofork --nopidfile 2>"$PW_DIR/system-bus.log" &
        pw_track $!
        setpriv --reuid="$PW_USER" --regid="$PW_USER" --clear-groups \
                dbus-daemon --session --address="$DBUS_SESSION_BUS_ADDRESS" --nofork --nopidfile \
                2>"$PW_DIR/session-bus.log" &
        pw_track $!
        pw_user_env
        pw_wait_socket "$PW_DIR/system_bus_socket" && pw_wait_socket "$PW_DIR/user/session_bus_socket"
}

pw_wait_socket() {
        local _
        for _ in $(seq 100); do [ -S "$1" ] && return 0; sleep 0.05; done
        echo "pipewire: no socket $1" >&2
        return 1
}

# "${PW_AS_USER[@]}" CMD...: CMD as PW_USER with RLIMIT_RTPRIO 0 and
# nothing of root's environment but the buses and a runtime directory. An
# array, not a function: "${PW_AS_USER[@]}" cmd & is one process chain of
# execs, so $! is cmd's own pid (a function would leave a subshell between).
pw_user_env() {
        PW_AS_USER=(prlimit --rtprio=0:0 setpriv --reuid="$PW_USER" --regid="$PW_USER" --clear-groups
                env -i PATH=/usr/bin:/bin HOME="$PW_DIR/user" XDG_CONFIG_HOME="$PW_DIR/user"
                XDG_RUNTIME_DIR="$PW_DIR/xdg" DBUS_SYSTEM_BUS_ADDRESS="$DBUS_SYSTEM_BUS_ADDRESS"
                DBUS_SESSION_BUS_ADDRESS="$DBUS_SESSION_BUS_ADDRESS")
}

# pw_start: pipewire and the linked pw-cat stream, pinned to PW_CPU. Sets
# PW_PID, PW_CAT_PID.
pw_start() {
        cat >"$PW_DIR/pipewire.conf" <<EOF
context.properties = {
    link.max-buffers = 16
    core.daemon = true
    core.name = pipewire-0
    default.clock.rate = 48000
    default.clock.quantum = $PW_QUANTUM
    default.clock.min-quantum = $PW_QUANTUM
    default.clock.max-quantum = $PW_QUANTUM
    default.clock.force-quantum = $PW_QUANTUM
}
context.spa-libs = {
    audio.convert.* = audioconvert/libspa-audioconvert
    support.* = support/libspa-support
}
context.modules = [
    # As in Debian's pipewire.conf: rt.prio 88, nice -11, through
    # RealtimeKit1 when sched_setscheduler() is refused.
    { name = libpipewire-module-rt args = { nice.level = -11 } flags = [ ifexists nofail ] }
    { name = libpipewire-module-protocol-native }
    { name = libpipewire-module-profiler }
    { name = libpipewire-module-metadata }
    { name = libpipewire-module-spa-node-factory }
    { name = libpipewire-module-client-node }
    { name = libpipewire-module-access args = { } }
    { name = libpipewire-module-adapter }
    { name = libpipewire-module-link-factory }
]
context.objects = [
    { factory = spa-node-factory args = { factory.name = support.node.driver node.name = Dummy-Driver
        node.group = pipewire.dummy priority.driver = 20000 } }
    { factory = adapter args = { factory.name = support.null-audio-sink node.name = pace-null-sink
        media.class = Audio/Sink audio.position = [ FL FR ] priority.driver = 30000
        node.always-process = true
        adapter.auto-port-config = { mode = dsp monitor = false control = false position = preserve } } }
]
EOF
        "${PW_AS_USER[@]}" taskset -c "$PW_CPU" pipewire -c "$PW_DIR/pipewire.conf" >"$PW_DIR/pipewire.log" 2>&1 &
        PW_PID=$!
        pw_track "$PW_PID"
        pw_wait_socket "$PW_DIR/xdg/pipewire-0" || return 1
        # Silence as a WAV stream whose sizes say "until the end": pw-cat
        # reads it in its data thread every quantum.
        { printf 'RIFF\xff\xff\xff\xffWAVEfmt \x10\x00\x00\x00\x01\x00\x02\x00\x80\xbb\x00\x00\x00\xee\x02\x00\x04\x00\x10\x00data\xff\xff\xff\xff'
          head -c $((48000 * 4 * 600)) /dev/zero; } >"$PW_DIR/silence.wav"
        "${PW_AS_USER[@]}" taskset -c "$PW_CPU" pw-cat -p --latency "$PW_QUANTUM" \
                -P '{ adapter.auto-port-config = { mode = dsp monitor = false control = false position = preserve } }' \
                "$PW_DIR/silence.wav" >"$PW_DIR/pw-cat.log" 2>&1 &
        PW_CAT_PID=$!
        pw_track "$PW_CAT_PID"
        local ch ok _
        for ch in FL FR; do
                ok=
                for _ in $(seq 50); do
                        if "${PW_AS_USER[@]}" pw-link "pw-cat:output_$ch" "pace-null-sink:playback_$ch" 2>/dev/null; then ok=1; break; fi
                        sleep 0.1
                done
                [ -n "$ok" ] || { echo "pipewire: could not link pw-cat:output_$ch" >&2; return 1; }
        done
}

# pw_data_thread PID: the tid of the process's data-loop thread (the one
# that is not the main thread; pipewire 0.3.65 and pw-cat have one each),
# waiting up to 3 s for it: the data loop starts when the graph does.
pw_data_thread() {
        local t _
        for _ in $(seq 60); do
                for t in /proc/"$1"/task/*; do
                        t=${t##*/}
                        [ "$t" != "$1" ] && { echo "$t"; return 0; }
                done
                sleep 0.05
        done
        echo "pipewire: process $1 has no data thread" >&2
        return 1
}

# pw_hogs N: N CPU-bound loops on PW_CPU at nice 0 (their pids in PW_HOGS).
PW_HOGS=()
pw_hogs() {
        local i
        for ((i = 0; i < $1; i++)); do
                taskset -c "$PW_CPU" sh -c 'while :; do :; done' &
                pw_track $!
                PW_HOGS+=($!)
        done
}

# pw_stop_graph: pw-cat, pipewire and the hogs end; the buses and whatever
# answers RealtimeKit1 stay.
pw_stop_graph() {
        local p
        for p in "$PW_CAT_PID" "$PW_PID" "${PW_HOGS[@]}"; do kill "$p" 2>/dev/null || true; done
        for p in "$PW_CAT_PID" "$PW_PID" "${PW_HOGS[@]}"; do wait "$p" 2>/dev/null || true; done
        PW_HOGS=()
}

# pw_profile SECONDS OUT: pw-profiler's log of that many seconds (on CPU 0).
pw_profile() {
        (cd "$PW_DIR" && XDG_RUNTIME_DIR=$PW_DIR/xdg timeout "$1" taskset -c 0 pw-profiler -o "$2" \
                >"$PW_DIR/pw-profiler.out" 2>&1) || true
}

# pw_profile_summary LOG: "cycles N xruns N late N wait_p50 US wait_p99 US
# wait_max US", where xruns are cycles that found the follower unfinished,
# late the cycles whose driver interval or run exceeded 1.3 quanta (the
# profiler writes those as 1.4 quanta) and wait pw-cat's data thread's
# wake-up latency after the driver signalled it (finished cycles only).
pw_profile_summary() {
        local waits
        waits=$(mktemp)
        awk -F'\t' '$5 != " " && $5 != "" && $11 == 3 { print $9 }' "$1" | sort -n >"$waits"
        awk -F'\t' '$4 > 0 { n++; if ($1 > $4 * 1.3) late++; if ($5 != " " && $5 != "" && $11 != 3) err++ }
                END { printf "cycles %d xruns %d late %d ", n, err, late }' "$1"
        local k
        k=$(wc -l <"$waits")
        if [ "$k" -gt 0 ]; then
                echo "wait_p50 $(sed -n "$((k / 2 + 1))p" "$waits") wait_p99 $(sed -n "$((k * 99 / 100 + 1))p" "$waits") wait_max $(tail -1 "$waits")"
        else
                echo "wait_p50 nan wait_p99 nan wait_max nan"
        fi
        rm -f "$waits"
}

# pw_field SUMMARY NAME: one number of pw_profile_summary's line.
pw_field() { awk -v k="$2" '{ for (i = 1; i < NF; i++) if ($i == k) print $(i + 1) }' <<<"$1"; }

# pw_rt_samples TID_PATH N: how many of N samples (10 ms apart) found the
# thread SCHED_FIFO or SCHED_RR (policy 1 or 2 in its sched file).
pw_rt_samples() {
        local n=0 i pol
        for ((i = 0; i < $2; i++)); do
                pol=$(awk '$1 == "policy" { print $3 }' "$1/sched" 2>/dev/null)
                case $pol in 1 | 2) n=$((n + 1)) ;; esac
                sleep 0.01
        done
        echo "$n"
}
