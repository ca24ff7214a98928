# Sourced by .ci/run and scripts/setup.sh: `phase NAME COMMAND...` runs COMMAND and prints one
# line, `phase: NAME: N s` (with its exit status when it failed), so that a run says where its
# time went. `phase_start NAME COMMAND...` runs it in the background, its pid in $phase_pid, for
# `wait "$phase_pid"`; its line is printed when it ends.
phase() {
  local name="$1" start status=0 micros
  shift
  start=${EPOCHREALTIME/./}
  "$@" || status=$?
  micros=$(( ${EPOCHREALTIME/./} - start ))
  printf 'phase: %s: %d.%d s%s\n' "$name" $((micros / 1000000)) $((micros % 1000000 / 100000)) \
    "$([ "$status" = 0 ] || echo " (exit $status)")"
  return "$status"
}
phase_start() {
  phase "$@" &
  phase_pid=$!
}
