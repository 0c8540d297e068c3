#!/usr/bin/env bash
# Runs this Flower App on Flower's local simulation engine with a SuperLink of
# its own, and stops exactly that SuperLink (and the SuperExec it started)
# when the run ends, fails or is interrupted: `kill` of the PID recorded when
# it was started, never a search by name, so other SuperLinks on the machine
# (other users', other runs') are not touched.
#
#   bash run_local.sh [options of `flwr run`, e.g. --federation-config "num-supernodes=10"]
#
# FLWR_LOCAL_SUPERLINK_HTTP_API_PORT: the SuperLink's port on 127.0.0.1 [a free one];
# `flwr run` finds it there. Its log: $FLWR_HOME/local-superlink/superlink-PORT.log
# (FLWR_HOME: ~/.flwr). Outputs land in this folder (README.md).
set -euo pipefail
cd "$(dirname "$0")"
PYTHON=${PYTHON:-python3}
# The installed packages, not a pip install of pyproject.toml's (offline).
export FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1

port=$("$PYTHON" - "${FLWR_LOCAL_SUPERLINK_HTTP_API_PORT:-0}" <<'PY'
import socket, sys
s = socket.socket()
try:
    s.bind(("127.0.0.1", int(sys.argv[1])))
except OSError as e:
    sys.exit(f"run_local.sh: port {sys.argv[1]} of 127.0.0.1 is in use ({e}): set "
             "FLWR_LOCAL_SUPERLINK_HTTP_API_PORT to a free one, or leave it unset")
print(s.getsockname()[1])
PY
)
export FLWR_LOCAL_SUPERLINK_HTTP_API_PORT=$port
log_dir="${FLWR_HOME:-$HOME/.flwr}/local-superlink"
mkdir -p "$log_dir"
log="$log_dir/superlink-$port.log"

flower-superlink --insecure --simulation --isolation subprocess --host 127.0.0.1 \
    --port "$port" --disable-runtime-dependency-installation >"$log" 2>&1 &
superlink_pid=$!
# TERM: the SuperLink stops its SuperExec, whose ServerApp and simulation
# stop with their parent.
trap 'kill "$superlink_pid" 2>/dev/null; wait "$superlink_pid" 2>/dev/null || true' EXIT
trap 'exit 130' INT TERM
echo "run_local.sh: local SuperLink pid $superlink_pid on 127.0.0.1:$port (log: $log)"

# Until it answers: before that, `flwr run` would start a SuperLink of its own.
"$PYTHON" - "$port" "$superlink_pid" "$log" <<'PY'
import os, sys, time, urllib.request
port, pid, log = sys.argv[1], int(sys.argv[2]), sys.argv[3]
deadline = time.monotonic() + 120
while time.monotonic() < deadline:
    try:
        urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2).read()
        sys.exit(0)
    except OSError:
        try:  # exited: gone, or a zombie until this script waits for it
            with open(f"/proc/{pid}/stat") as f:
                running = f.read().rsplit(")", 1)[1].split()[0] != "Z"
        except OSError:
            running = not os.path.isdir("/proc/self")  # no /proc (macOS): until the deadline
        if not running:
            sys.exit(f"run_local.sh: the SuperLink exited at start; its log: {log}")
        time.sleep(0.5)
sys.exit(f"run_local.sh: the SuperLink did not answer in 120 s; its log: {log}")
PY

flwr run . --stream "$@"
