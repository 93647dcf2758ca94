#!/usr/bin/env bash
# Embedding shardps from outside its source tree (docs/embedding.md), as a
# new user would:
#   1. `meson install --destdir` the build into a temporary folder, and check
#      what was installed: libshardps.so (SONAME libshardps.so.N) exporting
#      nothing but the public API, libshardps.a, self-contained headers,
#      shardps.pc, shardpsConfig.cmake + version file, the tools, and
#      installed binaries that need no library from the build;
#   2. build client/examples/linear_trainer.cc out of tree: a plain compiler
#      line through pkg-config (shared, and static with --static), a CMake
#      project through find_package(shardps) (shardps::client and
#      shardps::client_static), a Meson project through dependency('shardps')
#      (the installed shardps.pc) and the same Meson project with shardps as
#      its subproject;
#      The complete trainer of docs/embedding.md is built too (pkg-config);
#   3. run every trainer against a local cluster started by the INSTALLED
#      shardps-launch with the installed binaries (2 servers, 2 workers;
#      linear_trainer 150 steps with --check: the model must converge).
#   tests/embed/install_test.sh SOURCE_DIR BUILD_DIR   (meson test: embed_install)
# Every wait is bounded (timeout, the launcher's --timeout); the launcher
# leaves no process behind; the temporary folder is removed on exit.
set -euo pipefail
(($# == 2)) || { echo "usage: $0 SOURCE_DIR BUILD_DIR" >&2; exit 2; }
src=$(cd "$1" && pwd)
build=$(cd "$2" && pwd)
here=$src/tests/embed
trainer_src=$src/client/examples/linear_trainer.cc
start=$SECONDS
# As a new user's shell: meson test points LD_LIBRARY_PATH at the build's
# libshardps.so, which would hide a trainer that cannot find the installed one.
unset LD_LIBRARY_PATH

fail() { echo "FAIL: $*" >&2; exit 1; }
step() { echo; echo "== $* [$((SECONDS - start)) s]"; }
for tool in c++ pkg-config cmake meson ninja nm readelf ldd python3 timeout; do
  command -v "$tool" >/dev/null || fail "$tool not found (tools/dev.sh installs every package the tests need)"
done

work=$(mktemp -d "${TMPDIR:-/tmp}/shardps-embed.XXXXXX")
trap 'rm -rf "$work"' EXIT
trap 'exit 143' TERM INT  # meson test's timeout: still remove $work
dest=$work/destdir

# ----------------------------------------------------------------- install
step "meson install --destdir $dest"
timeout 300 meson install -C "$build" --destdir "$dest" --no-rebuild --quiet
read -r version prefix libdir bindir includedir datadir < <(
  meson introspect --projectinfo --buildoptions "$build" | python3 -c '
import json, sys
d = json.load(sys.stdin)
o = {x["name"]: x["value"] for x in d["buildoptions"]}
p = o["prefix"]
absolute = lambda v: v if v.startswith("/") else p.rstrip("/") + "/" + v
print(d["projectinfo"]["version"], p, *(absolute(o[k]) for k in ("libdir", "bindir", "includedir", "datadir")))')
root=$dest$prefix
lib=$dest$libdir
bin=$dest$bindir
inc=$dest$includedir
echo "version $version, prefix $prefix: libraries in $lib, programs in $bin, headers in $inc"

for f in "$lib/libshardps.so.$version" "$lib/libshardps.a" "$lib/pkgconfig/shardps.pc" \
         "$lib/cmake/shardps/shardpsConfig.cmake" "$lib/cmake/shardps/shardpsConfigVersion.cmake" \
         "$inc/shardps/client.h" "$inc/shardps/status.h" "$inc/shardps/types.h" "$inc/shardps/export.h"; do
  [[ -f $f ]] || fail "not installed: $f"
done
for p in shardps-launch shardps-coordinator shardps-server shardps-worker shardps-ctl shardps-snapshot \
         shardps-bench shardps-plot-runs shardps-keygen; do
  [[ -x $bin/$p ]] || fail "not installed (or not executable): $bin/$p"
done
# shardps-launch's own package (tools/shardps_launch), where the installed script looks for it.
[[ -f $dest$datadir/shardps/shardps_launch/cli.py ]] || fail "not installed: $dest$datadir/shardps/shardps_launch"

step "libshardps.so: SONAME, links, exported symbols"
soname=$(readelf -d "$lib/libshardps.so.$version" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
[[ $soname =~ ^libshardps\.so\.[0-9]+$ ]] || fail "SONAME is '$soname', not libshardps.so.N"
[[ -L $lib/$soname && $(readlink -f "$lib/$soname") == $(readlink -f "$lib/libshardps.so.$version") ]] ||
  fail "$lib/$soname is not a link to libshardps.so.$version"
[[ $(readlink -f "$lib/libshardps.so") == $(readlink -f "$lib/libshardps.so.$version") ]] ||
  fail "$lib/libshardps.so (the link-time name) does not lead to libshardps.so.$version"
echo "SONAME $soname; needs: $(readelf -d "$lib/libshardps.so.$version" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | paste -sd' ')"
if ldd "$lib/libshardps.so.$version" | grep -q 'not found'; then
  ldd "$lib/libshardps.so.$version"; fail "libshardps.so needs a library that is not found"
fi
# The public API is what the installed headers mark SHARDPS_EXPORT: classes
# (class/struct SHARDPS_EXPORT Name) and functions (SHARDPS_EXPORT type Name(...)).
api=$(cat "$inc"/shardps/*.h | sed -nE \
  -e 's/^ *(class|struct) (\[\[[a-z]+\]\] )*SHARDPS_EXPORT ([A-Za-z_][A-Za-z0-9_]*).*/\3/p' \
  -e 's/^ *SHARDPS_EXPORT [^(]* \**([A-Za-z_][A-Za-z0-9_]*)\(.*/\1/p' | sort -u | paste -sd'|')
[[ -n $api ]] || fail "found no SHARDPS_EXPORT in the installed headers"
echo "public API (SHARDPS_EXPORT in the headers): ${api//|/ }"
nm -DC --defined-only "$lib/libshardps.so.$version" | sed -E 's/^[0-9a-f]+ [A-Za-z] //' >"$work/exported.txt"
echo "$(wc -l <"$work/exported.txt") exported symbols (nm -DC --defined-only)"
# The name of each symbol, without its parameters: it must be shardps::NAME
# or shardps::NAME::member for NAME in the public API.
bad=$(sed -E 's/\(.*//' "$work/exported.txt" | grep -vE "^shardps::(${api})(::|\$)" || true)
if [[ -n $bad ]]; then
  echo "$bad" | head -40
  fail "libshardps.so exports symbols outside the public API of namespace shardps (above)"
fi
grep -q '^shardps::Client::Connect(' "$work/exported.txt" || fail "libshardps.so does not export shardps::Client::Connect"
echo "nm -D: every exported symbol is the public API of namespace shardps"

step "installed programs find their libraries"
for p in "$bin"/shardps-*; do
  [[ $(head -c4 "$p") == $'\x7fELF' ]] || continue
  out=$(ldd "$p")
  if grep -q 'not found' <<<"$out" || grep -qF -e "$build" -e "$src" <<<"$out"; then
    echo "$out"; fail "$(basename "$p") needs a library that is not found, or one in the build tree"
  fi
  echo "$(basename "$p"): ok"
done

step "the installed headers stand alone"
for h in "$inc"/shardps/*.h; do
  echo "#include <shardps/$(basename "$h")>" |
    c++ -std=c++20 -fsyntax-only -Wall -Wextra -Werror -x c++ - -I"$inc" ||
    fail "<shardps/$(basename "$h")> does not compile on its own with -I$inc"
done
echo "ok: $(cd "$inc" && echo shardps/*.h)"

# The Python package, where the build made one: importable by Debian's
# python3 from the installed site folder alone.
ext=$(find "$dest" -name '_shardps*.so' | head -1)
if [[ -n $ext ]]; then
  step "the installed Python package"
  site=$(dirname "$(dirname "$ext")")
  for f in __init__.py torch.py checkpoint.py optim.py __init__.pyi py.typed; do
    [[ -f $site/shardps/$f ]] || fail "the Python package lacks shardps/$f"
  done
  (cd "$work" && PYTHONPATH=$site timeout 60 /usr/bin/python3 -c \
      "import shardps, sys; assert shardps.__file__.startswith(sys.argv[1]), shardps.__file__; print('import shardps:', shardps.__file__)" "$site") ||
    fail "the installed Python package does not import"
fi

# ---------------------------------------------------------------- builds
export PKG_CONFIG_PATH=$lib/pkgconfig
pc_prefix=$(pkg-config --variable=prefix shardps)
if [[ $(realpath -m "$pc_prefix") != "$(realpath -m "$root")" ]]; then
  # A build folder configured before pkgconfig.relocatable=true became the
  # default (meson.build) keeps prefix=$prefix in shardps.pc.
  echo "shardps.pc says prefix=$pc_prefix: looking under $dest through PKG_CONFIG_SYSROOT_DIR"
  export PKG_CONFIG_SYSROOT_DIR=$dest
fi
[[ $(pkg-config --modversion shardps) == "$version" ]] || fail "pkg-config --modversion shardps is not $version"

trainers=()
# check_links TRAINER shared|static [LIBDIR]: libshardps resolves to the one in
# LIBDIR (default: the installed one), or is not needed at all.
check_links() {
  local out dir=${3:-$lib}; out=$(ldd "$1")
  if grep -q 'not found' <<<"$out"; then echo "$out"; fail "$1: a library is not found"; fi
  if [[ $2 == shared ]]; then
    local got; got=$(sed -nE 's/^\s*libshardps\.so\.[0-9]+ => (\S+) .*/\1/p' <<<"$out")
    [[ -n $got && $(realpath "$(dirname "$got")") == $(realpath "$dir") ]] ||
      { echo "$out"; fail "$1 does not load libshardps.so from $dir"; }
  else
    ! grep -q libshardps <<<"$out" || { echo "$out"; fail "$1 should not need libshardps.so"; }
  fi
  trainers+=("$1")
}

step "pkg-config, shared: c++ trainer.cc \$(pkg-config --cflags --libs shardps)"
mkdir -p "$work/pc"
echo "pkg-config --cflags --libs shardps: $(pkg-config --cflags --libs shardps)"
timeout 300 c++ -std=c++20 -O2 "$trainer_src" -o "$work/pc/trainer" \
  $(pkg-config --cflags --libs shardps) -Wl,-rpath,"$lib"
check_links "$work/pc/trainer" shared

step "pkg-config, static: libshardps.a and pkg-config --static --libs shardps"
libs=$(pkg-config --static --libs shardps)
echo "pkg-config --static --libs shardps: $libs"
timeout 300 c++ -std=c++20 -O2 "$trainer_src" -o "$work/pc/trainer_static" \
  $(pkg-config --cflags shardps) ${libs/-lshardps/-l:libshardps.a}
check_links "$work/pc/trainer_static" static

step "CMake: find_package(shardps), shardps::client and shardps::client_static"
mkdir -p "$work/cmake"
cp "$here/cmake/CMakeLists.txt" "$trainer_src" "$work/cmake/"
timeout 300 cmake -S "$work/cmake" -B "$work/cmake/build" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$root" >"$work/cmake.log" 2>&1 || { cat "$work/cmake.log"; fail "cmake configure"; }
found=$(sed -n 's/^shardps_DIR:PATH=//p' "$work/cmake/build/CMakeCache.txt")
[[ $(realpath -m "$found") == $(realpath -m "$lib/cmake/shardps") ]] || fail "CMake found shardps in '$found', not in $lib/cmake/shardps"
echo "shardps_DIR=$found"
timeout 300 cmake --build "$work/cmake/build" -j 2 >>"$work/cmake.log" 2>&1 || { cat "$work/cmake.log"; fail "cmake --build"; }
check_links "$work/cmake/build/trainer" shared
check_links "$work/cmake/build/trainer_static" static
# The version file: 0.x releases are compatible within their minor version.
cat >"$work/cmake-version.cmake" <<EOF
set(PACKAGE_FIND_VERSION "\${want}")
string(REPLACE "." ";" _v "\${want}")
list(GET _v 0 PACKAGE_FIND_VERSION_MAJOR)
list(GET _v 1 PACKAGE_FIND_VERSION_MINOR)
set(CMAKE_SIZEOF_VOID_P 8)
include("$lib/cmake/shardps/shardpsConfigVersion.cmake")
message("\${want}: \${PACKAGE_VERSION_COMPATIBLE}")
EOF
major=${version%%.*}; minor=${version#*.}; minor=${minor%%.*}
for want in "$major.$minor" "$version" "$major.$((minor + 1))" "$((major + 1)).0"; do
  expect=FALSE
  [[ $want == "$major.$minor" || $want == "$version" ]] && expect=TRUE
  got=$(cmake -Dwant="$want" -P "$work/cmake-version.cmake" 2>&1)
  [[ $got == "$want: $expect" ]] || fail "shardpsConfigVersion.cmake: asked for $want, said '$got' (wanted $expect)"
done
echo "shardpsConfigVersion.cmake: $version satisfies $major.$minor, not $major.$((minor + 1)) nor $((major + 1)).0"

step "Meson: dependency('shardps') from the installed shardps.pc"
mkdir -p "$work/meson"
cp "$here/meson/meson.build" "$trainer_src" "$work/meson/"
(cd "$work/meson" && timeout 300 meson setup build --wrap-mode=nofallback >"$work/meson.log" 2>&1 &&
  timeout 300 ninja -C build -j 2 >>"$work/meson.log" 2>&1) || { cat "$work/meson.log"; fail "the Meson project"; }
grep -E "Run-time dependency shardps" "$work/meson.log" || true
check_links "$work/meson/build/trainer" shared

step "Meson: dependency('shardps') falling back to subprojects/shardps"
sub=$work/meson-sub
mkdir -p "$sub/subprojects/shardps"
cp "$here/meson/meson.build" "$trainer_src" "$sub/"
# As a subproject shardps reads only these (meson.build: client_only).
cp -r "$src/meson.build" "$src/meson_options.txt" "$src/schema" "$src/common" "$src/client" "$sub/subprojects/shardps/"
cat >"$sub/subprojects/shardps.wrap" <<EOF
[wrap-git]
url = $src
revision = HEAD
[provide]
dependency_names = shardps
EOF
(cd "$sub" && env -u PKG_CONFIG_PATH -u PKG_CONFIG_SYSROOT_DIR timeout 300 meson setup build \
    --wrap-mode=nodownload --force-fallback-for=shardps >"$work/meson-sub.log" 2>&1 &&
  timeout 600 ninja -C build -j 2 >>"$work/meson-sub.log" 2>&1) || { cat "$work/meson-sub.log"; fail "the Meson project with the subproject"; }
grep -E "Dependency shardps .*found|Executing subproject" "$work/meson-sub.log" || true
grep -q "Executing subproject shardps" "$work/meson-sub.log" || fail "dependency('shardps') did not fall back to the subproject"
# The trainer loads the subproject's libshardps.so (build rpath), the static
# one none.
check_links "$sub/build/trainer" shared "$sub/build/subprojects/shardps/client"
check_links "$sub/build/trainer_static" static

step "docs/embedding.md: the complete trainer, with pkg-config"
mkdir -p "$work/doc"
# The fenced C++ block that starts with "// trainer.cc:".
awk '/^```cpp$/ { inb = 1; n = 0; next }
     inb && /^```$/ { inb = 0; if (keep) exit; next }
     inb { if (n++ == 0) keep = ($0 ~ /^\/\/ trainer\.cc:/); if (keep) print }' \
  "$src/docs/embedding.md" >"$work/doc/trainer.cc"
[[ -s $work/doc/trainer.cc ]] || fail "no \`// trainer.cc:\` C++ block in docs/embedding.md"
timeout 300 c++ -std=c++20 -O2 -Wall -Wextra -Werror "$work/doc/trainer.cc" -o "$work/doc/trainer" \
  $(pkg-config --cflags --libs shardps) -Wl,-rpath,"$(pkg-config --variable=libdir shardps)"
check_links "$work/doc/trainer" shared
echo "built $(wc -l <"$work/doc/trainer.cc") lines of docs/embedding.md"

# ------------------------------------------------------------------ runs
step "every trainer against a cluster started by the installed shardps-launch"
launch=$bin/shardps-launch
mkdir -p "$work/runs"  # the launcher's run folders (logs), removed with $work
# The installed launcher must pick the installed binaries, not a build tree.
plan=$(cd "$work" && timeout 60 "$launch" --servers 2 --workers 2 --run-dir "$work/runs/plan" --dry-run -- "${trainers[0]}" \
  --coordinator {coordinator} --rank {rank} 2>&1) || { echo "$plan"; fail "shardps-launch --dry-run"; }
for role in coordinator server; do
  grep -E "^ *$role [0-9]+ on " <<<"$plan" | grep -qv " $bin/shardps-$role " &&
    { echo "$plan"; fail "the installed shardps-launch does not start $bin/shardps-$role"; }
  grep -qE "^ *$role [0-9]+ on .* $bin/shardps-$role " <<<"$plan" || { echo "$plan"; fail "no $role in the plan"; }
done
echo "the installed shardps-launch starts $bin/shardps-coordinator and $bin/shardps-server"
# run NAME EXPECTED_LINE_REGEX LAUNCHER_ARGS... -- COMMAND...: the job must
# succeed and both workers print the expected line.
run() {
  local name=$1 want=$2; shift 2
  local log=$work/runs/$name.log t0=$SECONDS
  # The launcher's --timeout stops the job; timeout(1) guards the launcher.
  if ! (cd "$work" && timeout -k 10 200 "$launch" --servers 2 --workers 2 --timeout 120 \
        --run-dir "$work/runs/$name" "$@") >"$log" 2>&1; then
    tail -40 "$log"; fail "$name: the job failed"
  fi
  local n; n=$(grep -cE "$want" "$log" || true)
  ((n == 2)) || { tail -40 "$log"; fail "$name: $n of 2 workers printed /$want/"; }
  echo "$name: both workers done ($((SECONDS - t0)) s): $(grep -E "$want" "$log" | head -1)"
}
for t in "${trainers[@]}"; do
  [[ $t == "$work/doc/trainer" ]] && continue
  name=${t#"$work"/}
  run "${name//\//-}" 'worker [01] done: 150 steps' -- "$t" --coordinator {coordinator} --rank {rank} --steps 150 --check
done
# docs/embedding.md's trainer: its own check (exit 3 unless w = 3, b = 1), the
# coordinator and rank from the launcher's environment.
run doc-trainer 'worker [01]: w = [0-9.]+, b = [0-9.]+$' -- "$work/doc/trainer"

step "passed: ${#trainers[@]} trainers built out of tree, each run by the installed shardps-launch and binaries"
