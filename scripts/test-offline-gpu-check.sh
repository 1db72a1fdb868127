#!/usr/bin/env bash
# scripts/gpu-check.sh as a machine with a GPU but no package registry would run it, rehearsed here on the CPU:
# a clean virtual environment with only the torch wheel (from scripts/test-wheel.sh's cache), the offline bundle,
# and, in a private mount and network namespace, no network (loopback only) and none of Debian's files that the
# bundle or the wheel stand in for: baton's -dev packages, Debian's LibTorch, its Python packages and datasets.
#   scripts/test-offline-gpu-check.sh        needs root (unshare, mounts); output in build-offline/
set -euo pipefail
cd "$(dirname "$0")/.."
[[ $(id -u) -eq 0 ]] || { echo "test-offline-gpu-check: needs root (unshare -mn, bind mounts)" >&2; exit 1; }
torch_version=${BATON_TORCH_VERSION:-2.15.0}
cache=${BATON_WHEEL_CACHE:-/var/cache/baton-ci}
out=$PWD/build-offline
bundle=build-bundle/baton-offline-deps.tar.xz
[[ -f $bundle ]] || scripts/make-offline-bundle.sh "$bundle"
compgen -G "$cache/wheels/torch-$torch_version-*.whl" >/dev/null ||
  { echo "test-offline-gpu-check: no torch $torch_version wheel in $cache/wheels: run scripts/test-wheel.sh once" >&2; exit 1; }

# A clean venv: the wheel and what it requires, nothing else (no numpy, no system site packages).
venv=$out/venv
if [[ ! -f $venv/.ready ]]; then
  rm -rf "$venv"
  /usr/bin/python3 -m venv "$venv"
  "$venv/bin/pip" install -q --no-index --find-links "$cache/wheels" "torch==$torch_version"
  touch "$venv/.ready"
fi

# What to hide: the regular files of these packages (headers, CMake files, static libraries), whole folders where a
# package owns a folder of /usr/include or of a cmake folder. Run-time libraries (.so.N) stay: Debian's own
# programs in the namespace need them, and a library found through a .so link is hidden with the link's folder.
mapfile -t bundled < <(sed -n '3,$p' <(tar -xOJf "$bundle" ./BUNDLE.txt) | cut -d' ' -f1 | grep -- '-dev$')
hide_packages=("${bundled[@]}" libtorch-dev)
hide=()
for p in "${hide_packages[@]}"; do
  dpkg-query -W "$p" >/dev/null 2>&1 || continue
  # awk sorts out the folders (Boost alone owns thousands of files); bash keeps the regular files that remain.
  while read -r kind path; do
    if [[ $kind == D ]] || [[ -f $path && ! -L $path ]]; then hide+=("$path"); fi
  done < <(dpkg -L "$p" | awk '
    /^\/usr\/share\/doc\// { next }
    /^\/usr\/include\/x86_64-linux-gnu\// { print "F " $0; next }
    /^\/usr\/include\/[^\/]+\// { split($0, part, "/"); print "D /usr/include/" part[4]; next }
    match($0, /\/cmake\/[^\/]+\//) { print "D " substr($0, 1, RSTART + RLENGTH - 2); next }
    { print "F " $0 }' | sort -u)
done
hide+=(/usr/lib/python3/dist-packages /usr/share/datasets)
printf '%s\n' "${hide[@]}" | sort -u > "$out/hidden.txt"
echo "test-offline-gpu-check: hiding $(wc -l < "$out/hidden.txt") paths of ${#hide_packages[@]} packages, Debian's Python packages and datasets"

mkdir -p "$out/empty"
# Inside: a new mount namespace (the mounts vanish with it) and a network namespace with only loopback.
unshare -mn bash -s "$out" "$venv" "$bundle" <<'EOF'
set -euo pipefail
out=$1 venv=$2 bundle=$3
mount --make-rprivate /
ip link set lo up
while read -r path; do
  if [[ -d $path ]]; then mount --bind "$out/empty" "$path"; elif [[ -e $path ]]; then mount --bind /dev/null "$path"; fi
done < "$out/hidden.txt"
# Neither registry nor network: pip and apt would fail; the check must not need them.
[[ -z $(ip route show default) ]] || { echo "test-offline-gpu-check: a route out of the namespace" >&2; exit 1; }
[[ ! -e /usr/include/boost/config.hpp && ! -e /usr/include/torch/script.h ]] || { echo "hiding failed" >&2; exit 1; }
PYTHON=$venv/bin/python BATON_CHECK_DIR=$out/check BATON_CHECK_DEVICE=${BATON_CHECK_DEVICE:-cpu} \
  BATON_JOBS=${BATON_JOBS:-2} scripts/gpu-check.sh "$bundle"
EOF
