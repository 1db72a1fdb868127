#!/usr/bin/env bash
# The libraries baton builds with beyond LibTorch, from this machine's Debian release, in one archive for a machine
# that reaches no package registry (scripts/gpu-check.sh unpacks it into a private prefix):
#   scripts/make-offline-bundle.sh [output]      default: build-bundle/baton-offline-deps.tar.xz
# toml++, CLI11, nlohmann-json, doctest, Boost (headers, for Boost.DLL, and Boost.Filesystem's library), zlib,
# libpng (the diffusion plugin's sample grids) and Gloo's headers (LibTorch's ProcessGroupGloo.hpp includes them;
# PyTorch's wheel and libtorch archive compile Gloo in but ship no Gloo header). Each package's files as dpkg would
# install them (usr/include, usr/lib/<multiarch>), less their documentation; BUNDLE.txt lists the packages.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-build-bundle/baton-offline-deps.tar.xz}
limit_mib=48

# The -dev packages baton's build finds; the closure below adds the versioned packages they stand for (Debian 12
# and 13 name Boost's by version) and their run-time libraries, and nothing outside these families.
roots=(libtomlplusplus-dev libcli11-dev nlohmann-json3-dev doctest-dev libboost-dev libboost-filesystem-dev
       zlib1g-dev libpng-dev libgloo-dev)
family='^(libtomlplusplus|libcli11|nlohmann-json|doctest|libboost|zlib1g|libpng)'

command -v apt-get >/dev/null || { echo "make-offline-bundle: needs Debian's apt" >&2; exit 1; }
if ! apt-cache show libboost-dev >/dev/null 2>&1; then
  sudo=""; [[ $(id -u) -eq 0 ]] || sudo=sudo
  $sudo apt-get update -qq
fi

declare -A seen=()
queue=("${roots[@]}")
while ((${#queue[@]})); do
  p=${queue[0]}; queue=("${queue[@]:1}")
  [[ -n ${seen[$p]:-} ]] && continue
  seen[$p]=1
  # Depends only (not Recommends), first alternative of each; virtual packages resolve to their provider.
  while read -r dep; do
    [[ $dep =~ $family ]] && [[ -z ${seen[$dep]:-} ]] && queue+=("$dep")
  done < <(apt-cache depends --no-recommends --no-suggests --no-conflicts --no-breaks --no-replaces \
             --no-enhances "$p" | sed -n 's/^ *|\{0,1\}Depends: <\{0,1\}\([^>]*\)>\{0,1\}$/\1/p')
done
packages=("${!seen[@]}")
IFS=$'\n' packages=($(sort <<<"${packages[*]}")); unset IFS

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/debs" "$work/root"
chmod 755 "$work"; chmod 777 "$work/debs"  # apt downloads as its own unprivileged user where it can
(cd "$work/debs" && apt-get download -q "${packages[@]}" >/dev/null) ||
  { echo "make-offline-bundle: apt-get download failed for: ${packages[*]}" >&2; exit 1; }
for deb in "$work"/debs/*.deb; do dpkg-deb -x "$deb" "$work/root"; done
rm -rf "$work/root/usr/share/doc" "$work/root/usr/share/man" "$work/root/usr/share/lintian"
# A link that names an absolute path (zlib's libz.so -> /lib/<multiarch>/libz.so.1.2.13) would point, unpacked
# elsewhere, at the other machine's file or at nothing, and then CMake settles for the static libz.a, which a
# shared library cannot link: each such link points within the bundle instead, relative to where it lies.
while IFS= read -r link; do
  target=$(readlink "$link")
  [[ -e $work/root$target ]] || { echo "make-offline-bundle: $link points outside the bundle ($target)" >&2; exit 1; }
  ln -sfn "$(realpath -m --relative-to="$(dirname "$link")" "$work/root$target")" "$link"
done < <(find "$work/root" -type l -lname '/*')
{
  echo "baton's offline build dependencies: $(. /etc/os-release && echo "$PRETTY_NAME"), $(dpkg --print-architecture)"
  echo "made by scripts/make-offline-bundle.sh; unpack anywhere and use <dir>/usr as a CMake prefix"
  for deb in "$work"/debs/*.deb; do dpkg-deb --show --showformat='${Package} ${Version}\n' "$deb"; done
} > "$work/root/BUNDLE.txt"

mkdir -p "$(dirname "$out")"
tar -C "$work/root" -cf - . | xz -T0 -6 > "$out.tmp"
mv "$out.tmp" "$out"
size=$(stat -c %s "$out")
echo "make-offline-bundle: $out: ${#packages[@]} packages, $((size / 1024 / 1024)) MiB ($size bytes)"
if ((size > limit_mib * 1024 * 1024)); then
  echo "make-offline-bundle: larger than ${limit_mib} MiB" >&2
  exit 1
fi
