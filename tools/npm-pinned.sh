# shellcheck shell=bash
# Sourced by tools/setup-real-faces.sh, tools/setup-objects.sh and tools/setup-sensitive.sh, which set
# REPO and define fail: the npm half of fetching real weights from the registry, said once.

# need_node WHO: node and npm (>= 18), which WHO's JavaScript reference runs on.
need_node() {
  if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
    fail "node and npm (>= 18) are needed (apt-get install nodejs npm)"
  fi
  node -e 'process.exit(Number(process.versions.node.split(".")[0]) >= 18 ? 0 : 1)' \
    || fail "node $(node --version) is too old: $1 needs node >= 18"
}

# npm_ci_pinned PACKAGE_DIR NODE_DIR WHAT: `npm ci --ignore-scripts` of tools/PACKAGE_DIR's
# package.json + package-lock.json into NODE_DIR (npm checks every tarball against the lockfile's
# sha512 integrity; no install script runs), skipped while NODE_DIR/.lock.sha, the hash of those two
# files, is current. WHAT names the packages in messages.
npm_ci_pinned() {
  local from="$REPO/tools/$1" node_dir=$2 what=$3 me=${0##*/} lock t
  me=${me%.sh}
  lock="$(sha256sum "$from/package.json" "$from/package-lock.json" | cut -d' ' -f1 | sha256sum | cut -c1-16)"
  if [[ -d "$node_dir/node_modules" && "$(cat "$node_dir/.lock.sha" 2>/dev/null)" == "$lock" ]]; then
    echo "$me: ${node_dir#"$REPO/"} up to date"
    return
  fi
  t=$(date +%s)
  rm -rf "$node_dir"
  mkdir -p "$node_dir"
  cp "$from/package.json" "$from/package-lock.json" "$node_dir/"
  (cd "$node_dir" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error) \
    || fail "npm ci of tools/$1 ($what) from the npm registry failed"
  echo "$lock" >"$node_dir/.lock.sha"
  echo "$me: ${node_dir#"$REPO/"} installed in $(($(date +%s) - t))s"
}
