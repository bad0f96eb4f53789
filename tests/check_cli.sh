#!/usr/bin/env bash
# Structure checks of the CLI binary's three directories (make check-cli-structure, in test-fast):
# src/cli (main.c, the commands, their shared files), src/serve (the HTTP server) and src/app
# (what both share: JSON results, label sets, loading a model, the clock). Calls run one way,
# main.c -> cmd_*.c -> the shared files, and src/cli -> src/serve -> src/app, with no include or
# call circle. From the objects' symbols (nm), so that a call through a function pointer or a
# table counts too:
#  1. main.o defines main only, and a cmd_NAME.o its command(s) only (cmd_train.o: cmd_train and
#     cmd_pretrain): what commands share lives in the other files, declared in cli.h;
#  2. no object but main.o uses a command (cmd_*): a command is reached only from main.c;
#  3. no call circle among the files (a file calls another when its object uses a symbol the
#     other defines), through tsort;
#  4. cli.h, which every file includes, includes public headers only, and no public header
#     includes it (no include circle; `make check-cli-headers` checks the files' own includes);
#  5. the layers: no object of src/serve or src/app uses a symbol an object of src/cli defines,
#     and no object of src/app one of src/serve.
#   tests/check_cli.sh [BUILD_DIR (default build)]
set -u
export LC_ALL=C
cd "$(dirname "$0")/.."
build=${1:-build}
status=0
# the objects of today's sources (an object left by a source since removed or moved is not read)
objs=$(for c in src/cli/*.c src/serve/*.c src/app/*.c; do echo "$build/${c%.c}.o"; done
       ls "$build"/src/serve/page_html.o 2>/dev/null)
for o in $objs; do
    [ -f "$o" ] || { echo "check_cli: $o is missing (build first)"; exit 1; }
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# "symbol file" for every global symbol a file defines, and every one it uses; a file is named by
# its directory and name (cli/load, app/load)
name() { local o=${1#"$build"/src/}; echo "${o%.o}"; }
for o in $objs; do
    nm --defined-only -g "$o" | awk -v f="$(name "$o")" 'NF == 3 {print $3, f}'
done | sort >"$tmp/defs"
for o in $objs; do
    nm -u "$o" | awk -v f="$(name "$o")" '{print $2, f}'
done | sort >"$tmp/uses"
# 1.
bad=$(awk '($2 == "cli/main" && $1 != "main") ||
           ($2 ~ /^cli\/cmd_/ && "cli/" $1 != $2 && !($2 == "cli/cmd_train" && $1 == "cmd_pretrain")) {
               print "  " $2 ".c defines " $1 }' "$tmp/defs")
[ -z "$bad" ] || { echo "src/cli: main.c (main) or a cmd_*.c (its command) defines another global"
                   echo "symbol: make it static, or move what commands share to another file of"
                   echo "src/cli/, declared in cli.h:"; echo "$bad"; status=1; }
# 2.
bad=$(awk '$1 ~ /^cmd_[a-z]+$/ && $2 != "cli/main" { print "  " $2 ".c uses " $1 }' "$tmp/uses")
[ -z "$bad" ] || { echo "src/cli: only main.c reaches a command (cmd_NAME); move what is shared out of"
                   echo "the command's file:"; echo "$bad"; status=1; }
# 3.
join "$tmp/uses" "$tmp/defs" | awk '$2 != $3 {print $2, $3}' | sort -u >"$tmp/calls"
if ! tsort "$tmp/calls" >/dev/null 2>"$tmp/err"; then
    echo "src/cli: a call circle (caller callee):"; cat "$tmp/err"; status=1
fi
# 4.
bad=$(grep -nE '^#include "' src/cli/cli.h | grep -v '"tubelet[a-z_]*\.h"'; grep -ln '"cli\.h"' include/*.h)
[ -z "$bad" ] || { echo "$bad"; echo "src/cli: cli.h includes public headers only, and no public header includes cli.h"
                   status=1; }
# 5.
bad=$(join "$tmp/uses" "$tmp/defs" |
      awk '($2 ~ /^(serve|app)\// && $3 ~ /^cli\//) || ($2 ~ /^app\// && $3 ~ /^serve\//) {
               print "  " $2 ".c uses " $1 " (" $3 ".c)" }')
[ -z "$bad" ] || { echo "src/serve and src/app call no file above them (src/cli -> src/serve -> src/app):"
                   echo "move what they share into src/app (app.h):"; echo "$bad"; status=1; }
exit $status
