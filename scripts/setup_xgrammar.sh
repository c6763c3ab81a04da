#!/usr/bin/env bash
# XGrammar's C++ core (constrained decoding: JSON Schema, EBNF/GBNF, Lark and regex grammars compiled against a
# vocabulary, token masks per step; docs/structured-output.md). Fetched once from PyPI as its sdist (pinned by
# version and sha256), built with clang into a static library and installed under cachet's cache, outside the
# repo; CMake finds it there (CACHET_XGRAMMAR_ROOT overrides). Nothing of it is committed. Idempotent.
set -euo pipefail
version=0.2.9
sha256=87b466bca2475e29bb0323abc62c6c33cbcbcff47e5fb800a3e2099ac9620b90
cache="${CACHET_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/cachet}"
recipe=2  # bump when the build below changes
prefix="$cache/xgrammar/$version-r$recipe"
if [ -f "$prefix/lib/libxgrammar.a" ] && [ -f "$prefix/include/xgrammar/xgrammar.h" ]; then
  echo "setup_xgrammar: $prefix"
  exit 0
fi
mkdir -p "$cache/xgrammar"
sdist="$cache/xgrammar/xgrammar-$version.tar.gz"
if [ ! -f "$sdist" ]; then
  # The sdist itself, through PyPI's simple index (pip download would first build its metadata, which pulls
  # the Python binding's whole toolchain).
  python3 - "$version" "$sdist.part" <<'EOF'
import re, sys, urllib.request
version, out = sys.argv[1], sys.argv[2]
index = urllib.request.urlopen("https://pypi.org/simple/xgrammar/", timeout=120).read().decode()
m = re.search(r'href="([^"]*/xgrammar-%s\.tar\.gz)(#[^"]*)?"' % re.escape(version), index)
if not m:
    sys.exit("setup_xgrammar: xgrammar %s sdist not on the index" % version)
urllib.request.urlretrieve(m.group(1), out)
EOF
  echo "$sha256  $sdist.part" | sha256sum -c --quiet
  mv "$sdist.part" "$sdist"
fi
src="$cache/xgrammar/src-$version"
rm -rf "$src" && mkdir -p "$src"
tar -xzf "$sdist" -C "$src" --strip-components=1
build="$cache/xgrammar/build-$version"
rm -rf "$build" && mkdir -p "$build"
# The project reads its options from config.cmake in the build folder first: the C++ library alone.
printf 'set(XGRAMMAR_BUILD_PYTHON_BINDINGS OFF)\nset(XGRAMMAR_BUILD_CXX_TESTS OFF)\nset(XGRAMMAR_ENABLE_CPPTRACE OFF)\n' \
  >"$build/config.cmake"
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
# -fno-lto: the archive is linked by clang into cachet and its Python module; -Wno-error: another compiler's
# warnings in its sources are not our build's failures; XGRAMMAR_LOG_CUSTOMIZE: its warnings ("keyword X is not
# supported") and fatal checks come to cachet (src/grammar/xgrammar_log.cc), which refuses what it would not enforce.
cmake -S "$src" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER=clang++ \
  -DCMAKE_CXX_FLAGS="-fno-lto -Wno-error -DXGRAMMAR_LOG_CUSTOMIZE=1" -DCMAKE_INSTALL_PREFIX="$prefix" "${launcher[@]}" >/dev/null
cmake --build "$build" >/dev/null
cmake --install "$build" >/dev/null
cp "$src/LICENSE" "$prefix/LICENSE"
echo "setup_xgrammar: $prefix"
