# Sourced by the serving benches (serve_compare.sh, structured_compare.sh,
# serve_vs_bench.sh): the server a bench started in the background
# (SERVER_PID=$! after starting it) is stopped by stop_server, and at the
# latest when the script exits.
SERVER_PID=""
stop_server() {
  if [ -n "$SERVER_PID" ]; then
    kill "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
    SERVER_PID=""
  fi
}
trap stop_server EXIT
