#!/usr/bin/env bash
# Assembles a root filesystem from Debian packages, without a registry or a running Debian image:
# the packages named and everything they depend on (Depends and Pre-Depends, recursively) are
# fetched with apt's own configuration and unpacked with dpkg-deb. Maintainer scripts do not run,
# so what they would generate is written here: the nonroot user (65532, as distroless images
# have), /tmp, the CA bundle when ca-certificates is asked for, and `cc` when gcc is.
#
#   debian-rootfs.sh DEST PKG... [--alone PKG...]
#
# PKG after --alone is unpacked without its dependencies (ca-certificates without openssl and
# debconf). Downloaded packages are kept in $INFERGATE_CACHE/e2e/debs (default ~/.cache/infergate).
set -euo pipefail

dest="$1"; shift
with_deps=(); alone=(); into=with_deps
for arg in "$@"; do
  if [[ "$arg" == --alone ]]; then into=alone; continue; fi
  if [[ "$into" == alone ]]; then alone+=("$arg"); else with_deps+=("$arg"); fi
done

debs="${INFERGATE_CACHE:-$HOME/.cache/infergate}/e2e/debs"
mkdir -p "$debs" "$dest"

closure=()
if ((${#with_deps[@]})); then
  # Real packages only: virtual ones ("<...>") are provided by a real package that is listed too.
  mapfile -t closure < <(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts \
      --no-breaks --no-replaces --no-enhances "${with_deps[@]}" | grep -v '^[ <]' | sort -u)
fi
packages=("${closure[@]}" "${alone[@]}")

missing=()
for p in "${packages[@]}"; do
  compgen -G "$debs/${p}_*.deb" >/dev/null || missing+=("$p")
done
if ((${#missing[@]})); then
  # The package lists may be refreshed by an install of another suite running beside this one
  # (tests/tools/lib.sh): the download takes turns with it on the same lock.
  exec 9>"${TMPDIR:-/tmp}/infergate-apt.lock"
  flock 9
  (cd "$debs" && apt-get download -q -o APT::Sandbox::User=root "${missing[@]}" >/dev/null) || {
    apt-get update -qq && (cd "$debs" && apt-get download -q -o APT::Sandbox::User=root "${missing[@]}" >/dev/null)
  }
  exec 9>&-
fi
for p in "${packages[@]}"; do
  # The candidate version apt would install; older downloads of the same package stay unused.
  version="$(apt-cache policy "$p" | sed -n 's/^  Candidate: //p')"
  deb="$(compgen -G "$debs/${p}_${version//:/%3a}_*.deb" | head -n 1)"
  [[ -n "$deb" ]] || { echo "debian-rootfs.sh: no package file for $p $version" >&2; exit 1; }
  dpkg-deb -x "$deb" "$dest"
done

mkdir -p "$dest/etc" "$dest/tmp" "$dest/home/nonroot" "$dest/root"
chmod 1777 "$dest/tmp"
chown 65532:65532 "$dest/home/nonroot"
cat >"$dest/etc/passwd" <<'PASSWD'
root:x:0:0:root:/root:/sbin/nologin
nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin
nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin
PASSWD
cat >"$dest/etc/group" <<'GROUP'
root:x:0:
nogroup:x:65534:
nonroot:x:65532:
GROUP
if [[ -d "$dest/usr/share/ca-certificates" ]]; then
  mkdir -p "$dest/etc/ssl/certs"
  find "$dest/usr/share/ca-certificates" -name '*.crt' -print0 | sort -z | xargs -0 cat \
    >"$dest/etc/ssl/certs/ca-certificates.crt"
fi
if [[ -e "$dest/usr/bin/gcc" && ! -e "$dest/usr/bin/cc" ]]; then
  ln -s gcc "$dest/usr/bin/cc"
fi
printf '%s\n' "${packages[@]}" >"$dest/.packages"
