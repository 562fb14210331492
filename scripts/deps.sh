#!/usr/bin/env bash
# Installs (as root, on Debian 12) whatever the build and the tests need and is missing.
# Safe to run again: it only calls apt-get when a package is absent.
set -euo pipefail
# libopenblas0: the BLAS that Debian's libtorch recommends, which --no-install-recommends would
# leave out. Without it libtorch's matrix products run on the reference libblas3 (netlib's
# single-threaded sgemm_, 98% of a CPU server's samples under perf), about 10x slower.
pkgs=(build-essential cmake ninja-build ccache pkg-config git
      libboost-dev libcli11-dev nlohmann-json3-dev libsqlite3-dev sqlite3 libtomlplusplus-dev
      libgtest-dev libgmock-dev libbenchmark-dev prometheus-cpp-dev libspdlog-dev libxxhash-dev
      libtorch-dev libopenblas0 libssl-dev openssl wrk chromium python3 prometheus prometheus-pushgateway
      clang-14 libfuzzer-14-dev libclang-rt-14-dev)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
if ! command -v node >/dev/null 2>&1; then
  echo "deps: installing nodejs and npm"
  apt-get install -y -qq --no-install-recommends nodejs npm >/dev/null
fi
# npm packages, pinned by each folder's package-lock.json: Chart.js, which the build embeds in
# HTML reports, and the official `openai` client that tests/openai_client drives our server with.
root=$(cd "$(dirname "$0")/.." && pwd)
npm_ci() {  # npm_ci DIR PACKAGE
  if [ ! -f "$root/$1/node_modules/$2/package.json" ]; then
    echo "deps: npm ci in $1"
    (cd "$root/$1" && npm ci --no-audit --no-fund --loglevel=error)
  fi
}
npm_ci gates/report chart.js
npm_ci tests/openai_client openai
