#!/bin/sh
# outputs_diff.sh — are two bifocal binaries' outputs byte-identical? Writes
# every view (text, --json, HTML) and every export of every session of a
# database, plus diff/correlate of session pairs and the help texts, with
# each binary, and compares them file by file. For refactors that must not
# change what users get.
#
#   tests/tools/outputs_diff.sh --make-db BIN DB [PYTHON]
#       record one session of every kind into DB (wall, cpu, --native,
#       --async, a subprocess tree, --kernel, --opcodes when PYTHON is 3.11+,
#       traced, traced --focus, imported, and an import whose names and label
#       hold quotes, <>&, U+2028, controls and invalid UTF-8) with BIN
#   tests/tools/outputs_diff.sh OLD_BIN NEW_BIN DB [WORKDIR]
#       write and compare; prints "identical N files" or the differing
#       files; exit 0 when all are identical, 1 otherwise
set -u

if [ "${1:-}" = "--make-db" ]; then
  bin=$2 db=$3 py=${4:-python3}
  w=$(mktemp -d)
  cat >"$w/work.py" <<'EOF'
import sys, time, threading
def leaf(n):
    return sum(i * i for i in range(n))
def mid():
    for _ in range(20): leaf(20000)
def sleeper(end):
    while time.time() < end: time.sleep(0.01)
end = time.time() + float(sys.argv[1]) if len(sys.argv) > 1 else time.time() + 1.5
t = threading.Thread(target=sleeper, args=(end,), name="sleeper"); t.start()
while time.time() < end: mid()
t.join()
EOF
  cat >"$w/aio.py" <<'EOF'
import asyncio, time
async def worker(i):
    for _ in range(40):
        sum(j for j in range(3000)); await asyncio.sleep(0.01)
async def main():
    await asyncio.gather(*(asyncio.create_task(worker(i), name=f"w{i}") for i in range(3)))
asyncio.run(main())
EOF
  cat >"$w/tree.py" <<'EOF'
import subprocess, sys
p = subprocess.Popen([sys.executable, sys.argv[1], "1.0"]); p.wait()
EOF
  printf 'main;mid;leaf 30\nmain;mid 5\nmain;other;leaf 12\n' >"$w/imp.txt"
  printf 'main;mi"d\\x;le<a>f&\342\200\250 30\nmain;\377\376bad 5\nmain;ctl\001\033[31m;leaf 12\n' >"$w/odd.txt"
  set -e
  "$bin" -D "$db" record -r 500 --label wall -- "$py" "$w/work.py" >/dev/null
  "$bin" -D "$db" record -r 500 --clock cpu --label cpu -- "$py" "$w/work.py" >/dev/null
  "$bin" -D "$db" record -r 100 --native --label native -- "$py" "$w/work.py" 1.0 >/dev/null
  "$bin" -D "$db" record -r 500 --async --label async -- "$py" "$w/aio.py" >/dev/null
  "$bin" -D "$db" record -r 500 -s --label tree -- "$py" "$w/tree.py" "$w/work.py" >/dev/null
  "$bin" -D "$db" record -r 300 --kernel --label kernel -- "$py" "$w/work.py" 1.0 >/dev/null
  "$bin" -D "$db" record -r 300 --opcodes --label opcodes -- "$py" "$w/work.py" 1.0 >/dev/null ||
    echo "outputs_diff: no --opcodes session ($py is older than 3.11)" >&2
  "$bin" -D "$db" trace --label traced -- "$py" "$w/work.py" 0.5 >/dev/null
  "$bin" -D "$db" trace --focus '*:leaf' --records 200 --label focus -- "$py" "$w/work.py" 0.5 >/dev/null
  "$bin" -D "$db" import "$w/imp.txt" --label imported >/dev/null
  "$bin" -D "$db" import "$w/odd.txt" --label 'odd "names" </script>' >/dev/null
  rm -rf "$w"
  exit 0
fi

old=$1 new=$2 db=$3 work=${4:-$(mktemp -d)}
# the views and exports the old binary lists (its help is built from core/formats.c)
one_of() { "$old" help "$1" | awk -v o="$2" 'index($0, o) { getline; sub(/.*one of: /, ""); print; exit }'; }
views=$(one_of replay "-v, --view")
exports=$(one_of export "-f, --format" | sed 's/ bifocal//')

# write DIR BIN: every output of BIN on a private copy of the database
write() {
  dir=$1 bin=$2
  mkdir -p "$dir"
  cp "$db" "$dir/db"
  b() { "$bin" -D "$dir/db" "$@"; }
  b gc >/dev/null 2>&1 # opened writable once: an older schema migrates (nothing has a --ttl)
  ids=$(b sessions --json | tr ',{' '\n\n' | sed -n 's/^"id": *\([0-9]*\).*/\1/p')
  for id in $ids; do
    for v in $views; do
      b replay "$id" --view "$v" --limit 100000 >"$dir/$id.$v.txt" 2>"$dir/$id.$v.err"
      b replay "$id" --view "$v" --json --limit 100000 >"$dir/$id.$v.json" 2>"$dir/$id.$v.json.err"
      b replay "$id" --view "$v" -o "$dir/$id.$v.html" 2>"$dir/$id.$v.html.err"
    done
    b replay "$id" -o "$dir/$id.flame.svg" 2>"$dir/$id.flame.svg.err"
    b replay "$id" --tree --json >"$dir/$id.tree.json" 2>"$dir/$id.tree.err"
    for e in $exports; do
      b export "$id" -f "$e" -o "$dir/$id.export.$e" 2>"$dir/$id.export.$e.err"
      b export "$id" --tree -f "$e" -o "$dir/$id.export-tree.$e" 2>"$dir/$id.export-tree.$e.err"
    done
  done
  first=$(echo "$ids" | head -1)
  for id in $ids; do
    b diff "$first" "$id" --force >"$dir/diff.$first.$id.txt" 2>&1
    b diff "$first" "$id" --force --json >"$dir/diff.$first.$id.json" 2>&1
    b diff "$first" "$id" --force --view flame -o "$dir/diff.$first.$id.html" 2>"$dir/diff.$first.$id.html.err"
    for t in $ids; do
      b correlate "$id" "$t" --json >"$dir/corr.$id.$t.json" 2>&1
    done
  done
  b sessions --json >"$dir/sessions.json" 2>&1
  b help --man >"$dir/help.man" 2>&1
  b help --completion bash >"$dir/help.bash" 2>&1
  b help --completion zsh >"$dir/help.zsh" 2>&1
  for c in replay export record; do b help "$c" >"$dir/help.$c" 2>&1; done
  rm -f "$dir/db" "$dir/db-wal" "$dir/db-shm"
}

write "$work/old" "$old"
write "$work/new" "$new"
n=$(ls "$work/old" | wc -l)
bad=0
for f in $(ls "$work/old"); do
  if ! cmp -s "$work/old/$f" "$work/new/$f"; then
    echo "differs: $f ($work/old/$f $work/new/$f)"
    bad=$((bad + 1))
  fi
done
for f in $(ls "$work/new"); do
  [ -e "$work/old/$f" ] || { echo "only new: $f"; bad=$((bad + 1)); }
done
if [ "$bad" = 0 ]; then
  echo "identical $n files ($work)"
  exit 0
fi
echo "$bad of $n files differ ($work)"
exit 1
