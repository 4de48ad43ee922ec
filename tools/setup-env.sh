# shellcheck shell=bash
# Sourced (from the repository root) by the check scripts: exports each variable of
# .cache/clipfn.env, written by tools/setup.sh, that the environment does not set already, so that
# a caller's own setting wins.
if [[ -f .cache/clipfn.env ]]; then
  while IFS= read -r line || [[ -n $line ]]; do
    line=${line#export }
    [[ $line =~ ^[A-Za-z_][A-Za-z0-9_]*= ]] || continue
    name=${line%%=*}
    [[ -n ${!name+set} ]] || eval "export $line"
  done <.cache/clipfn.env
fi
