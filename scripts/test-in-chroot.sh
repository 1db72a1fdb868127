#!/usr/bin/env bash
# The README's test command (scripts/test.sh) on another Debian release, in a fresh chroot: CI's second platform.
#   scripts/test-in-chroot.sh [suite]        suite: trixie (Debian 13, LibTorch 2.6; the default) or bookworm
# It tests the last commit (a clone of HEAD), not uncommitted changes. Needs root (debootstrap, chroot, mounts).
#
# Between runs it keeps, under $BATON_CHROOT_CACHE (default /var/cache/baton-chroot):
#   <suite>-<hash of install-deps.sh>.tar  the base system with baton's packages already installed, so a run spends
#                                          no time in apt unless the package list changed;
#   ccache-<suite>/                        the compiler cache of the chroot's builds.
# Each run starts from a pristine copy of the image; nothing the tests write survives it.
set -euo pipefail
suite=${1:-trixie}
case "$suite" in bookworm|trixie) ;; *) echo "test-in-chroot: suite must be bookworm or trixie, not '$suite'" >&2; exit 2;; esac
cd "$(dirname "$0")/.."
if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null || { echo "test-in-chroot: needs root for debootstrap and chroot" >&2; exit 1; }
  exec sudo -E "$0" "$@"
fi

cache=${BATON_CHROOT_CACHE:-/var/cache/baton-chroot}
mkdir -p "$cache/ccache-$suite"
key=$(sha256sum scripts/install-deps.sh | cut -c1-16)
image=$cache/$suite-$key.tar
root=$(mktemp -d "/tmp/baton-chroot-$suite.XXXXXX")

unmount_all() {
  for m in root/.ccache dev sys proc; do
    mountpoint -q "$root/$m" 2>/dev/null && umount -l "$root/$m"
  done
  return 0
}
cleanup() { unmount_all; rm -rf --one-file-system "$root"; }
trap cleanup EXIT
mount_all() {
  mount -t proc proc "$root/proc"
  mount --rbind /sys "$root/sys"
  mount --rbind /dev "$root/dev"
  cp /etc/resolv.conf "$root/etc/resolv.conf"
  # The certificates this machine trusts, beyond Debian's own where it has them (an HTTPS proxy's on the way to the
  # Python package registry, say): the tensorboard test's pip then reaches the registry from the chroot as it does
  # from the machine.
  cp -L /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/ca-certificates.crt"
}

started=$SECONDS
if [[ ! -f $image ]]; then
  echo "test-in-chroot: building the $suite image (debootstrap and baton's packages; cached in $image)"
  command -v debootstrap >/dev/null || { apt-get update -qq && apt-get install -y -qq debootstrap >/dev/null; }
  # The Debian mirror this machine's apt already uses.
  mirror=$(sed -n 's/^URIs: *//p' /etc/apt/sources.list.d/*.sources 2>/dev/null | grep -i debian | grep -v security | head -1 || true)
  security=$(sed -n 's/^URIs: *//p' /etc/apt/sources.list.d/*.sources 2>/dev/null | grep -i security | head -1 || true)
  mirror=${mirror:-http://deb.debian.org/debian}
  security=${security:-http://deb.debian.org/debian-security}
  debootstrap --variant=minbase --include=ca-certificates,git,sudo,ccache "$suite" "$root" "$mirror" \
    > "$cache/debootstrap-$suite.log" 2>&1 || { echo "test-in-chroot: debootstrap failed (log $cache/debootstrap-$suite.log)" >&2; tail -5 "$cache/debootstrap-$suite.log" >&2; exit 1; }
  rm -f "$root/etc/apt/sources.list"
  printf 'Types: deb\nURIs: %s\nSuites: %s %s-updates\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n\nTypes: deb\nURIs: %s\nSuites: %s-security\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
    "$mirror" "$suite" "$suite" "$security" "$suite" > "$root/etc/apt/sources.list.d/debian.sources"
  mount_all
  cp scripts/install-deps.sh "$root/tmp/install-deps.sh"
  chroot "$root" /bin/bash -lc "/tmp/install-deps.sh && apt-get clean && rm -f /tmp/install-deps.sh"
  unmount_all
  rm -f "$cache/$suite-"*.tar
  tar -C "$root" -cf "$image.tmp" . && mv "$image.tmp" "$image"
else
  tar -C "$root" -xf "$image"
  mount_all
fi
mountpoint -q "$root/proc" || mount_all
echo "test-in-chroot: $suite ready in $((SECONDS - started)) s"

mkdir -p "$root/root/.ccache"
mount --bind "$cache/ccache-$suite" "$root/root/.ccache"
git clone -q . "$root/root/project"
echo "test-in-chroot: testing $(git rev-parse --short HEAD) on Debian $suite"
chroot "$root" /bin/bash -lc "cd /root/project && scripts/test.sh"
echo "test-in-chroot: Debian $suite passed in $((SECONDS - started)) s"
