# Sourced by the scripts in scripts/ and slurm/: `-h` or `--help` as the first
# argument prints the script's header comment (the lines after the #! line up
# to the first line that is not a comment, #SBATCH lines left out) and exits 0.
#   source "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib-help.sh"; pipebench_help "$0" "$@"
pipebench_help() {
  local script=$1
  shift
  if [[ ${1:-} == -h || ${1:-} == --help ]]; then
    sed -n '2,$p' "$script" | sed '/^[^#]/,$d' | grep -v '^#SBATCH' | sed 's/^# \{0,1\}//'
    exit 0
  fi
}
