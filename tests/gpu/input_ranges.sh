#!/usr/bin/env bash
# Writes DIR/input_ranges.json: for every corpus graph, the [low, high) of each tensor
# input (kilnc --input-ranges), which tests/gpu/run_corpus.py needs to make valid inputs on
# a machine without kilnc, and DIR/name_maps.json: each graph's node names by canonical name
# (kilnc --name-map), for run_corpus.py --debug. Run here before carrying DIR to the GPU
# machine. GRAPHS is the corpus folder (tests/data/graphs; tests/data/graphs/min_cut for the
# graphs split by min-cut, which run_corpus.py then takes as --graphs).
#
#   tests/gpu/input_ranges.sh DIR [BUILD_DIR [GRAPHS]]
set -euo pipefail
shopt -s nullglob
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
out=$1
kilnc=${2:-$root/build/release}/compiler/kilnc
graphs=${3:-$root/tests/data/graphs}
[ -x "$kilnc" ] || { echo "no $kilnc: build the kilnc target" >&2; exit 1; }
mkdir -p "$out"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "{" > "$out/name_maps.json"
{
  echo "{"
  first=1
  for g in "$graphs"/*.json "$graphs"/*.json.gz; do
    name=$(basename "$g")
    case $g in
      *.gz) gunzip -c "$g" > "$tmp/graph.json" ;;
      *) cp "$g" "$tmp/graph.json" ;;
    esac
    # kilnc writes the ranges before it compiles, so a graph that does not compile has them.
    rm -f "$tmp/ranges.json" "$tmp/names.json"
    "$kilnc" "$tmp/graph.json" --input-ranges "$tmp/ranges.json" --name-map "$tmp/names.json" \
      > /dev/null 2>&1 || true
    if [ -s "$tmp/ranges.json" ]; then
      [ $first = 1 ] || { echo ","; echo "," >> "$out/name_maps.json"; }
      first=0
      printf '"%s": %s' "$name" "$(cat "$tmp/ranges.json")"
      printf '"%s": %s' "$name" "$(cat "$tmp/names.json" 2>/dev/null || echo '{}')" \
        >> "$out/name_maps.json"
    fi
  done
  echo "}"
} > "$out/input_ranges.json"
echo "}" >> "$out/name_maps.json"
echo "$out/input_ranges.json"
