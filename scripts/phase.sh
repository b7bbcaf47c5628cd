# Sourced by test.sh, fuzz.sh and sanitize.sh: `end_phase NAME` prints the wall time since the
# previous phase ended (or since sourcing) and, when TRILLION_PHASES_FILE is set, appends
# "NAME<TAB>SECONDS" to it, so test.sh can print every phase in its last line.
phase_start=$SECONDS
end_phase() {
  local s=$((SECONDS - phase_start))
  echo "== phase $1: ${s} s"
  if [[ -n ${TRILLION_PHASES_FILE:-} ]]; then printf '%s\t%s\n' "$1" "$s" >>"$TRILLION_PHASES_FILE"; fi
  phase_start=$SECONDS
}
