#!/usr/bin/env bash
# strata's C++ client as another project gets it: `cmake --install` of the client component
# into a scratch prefix, clients/cpp/example configured and built against that prefix alone
# (find_package(strata), strata::client), then run against a real `strata serve` on
# loopback: two turns, the second reusing the first's KV.
# Usage: cmake_consumer_test.sh BUILD_DIR SOURCE_DIR STRATA_BINARY WORK_DIR
set -euo pipefail
build=$1 src=$2 strata=$3 work=$4
rm -rf "$work"
mkdir -p "$work"

cmake --install "$build" --prefix "$work/prefix" --component client >"$work/install.log"
for f in include/strata/client/session.h include/strata/v1/chat.grpc.pb.h include/strata/v1/chat.proto \
         lib/cmake/strata/strataConfig.cmake; do
  [ -f "$work/prefix/$f" ] || { echo "FAIL: cmake --install did not install $f"; exit 1; }
done
cmake -S "$src/clients/cpp/example" -B "$work/example" -G Ninja -DCMAKE_PREFIX_PATH="$work/prefix" \
  >"$work/configure.log" 2>&1 || { cat "$work/configure.log"; echo "FAIL: the example does not configure"; exit 1; }
cmake --build "$work/example" >"$work/build.log" 2>&1 || { cat "$work/build.log"; echo "FAIL: the example does not build"; exit 1; }
# The example must have compiled against the installed headers, not the source tree's.
if grep -E "^ *(INCLUDES|LINK_LIBRARIES) =" "$work/example/build.ninja" | grep -q -F -e "$build/gen" -e "$build/proto" \
     -e "$build/clients" -e "$src/clients/cpp/strata" -e "$src/proto" -e "-I$src "; then
  echo "FAIL: the example's build reaches into strata's source or build tree"; exit 1
fi

"$strata" serve --device=cpu --port=0 --metrics_port=-1 --port_file="$work/ports" >"$work/serve.log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null || true' EXIT
for _ in $(seq 600); do [ -s "$work/ports" ] && break; kill -0 $pid 2>/dev/null || break; sleep 0.1; done
[ -s "$work/ports" ] || { cat "$work/serve.log"; echo "FAIL: strata serve did not start"; exit 1; }
read -r port _ <"$work/ports"

"$work/example/strata_client_example" "127.0.0.1:$port" consumer-1 | tee "$work/out.txt"
# turn 1: nothing to reuse; turn 2: at least turn 1's prompt reused, from a cache tier.
grep -q "^turn 1: prompt [0-9]*, reused 0, " "$work/out.txt" || { echo "FAIL: turn 1 line missing or reused tokens"; exit 1; }
line2=$(grep "^turn 2: " "$work/out.txt") || { echo "FAIL: no turn 2"; exit 1; }
prompt1=$(sed -n 's/^turn 1: prompt \([0-9]*\),.*/\1/p' "$work/out.txt")
reused2=$(echo "$line2" | sed -n 's/.*reused \([0-9]*\),.*/\1/p')
if [ "$reused2" -lt "$prompt1" ] || echo "$line2" | grep -q "TIER_NONE"; then
  echo "FAIL: turn 2 reused $reused2 tokens (turn 1's prompt: $prompt1): $line2"; exit 1
fi
echo "PASS"
