#!/usr/bin/env bash
# Structure checks of src/models (make test-fast):
#  1. no include circle among its headers and files, and no call circle among its files (a file
#     calls another when its object uses a symbol the other defines: nm; or when it calls
#     `->field(` of a table, family.h's tb_family_ops, tb_vit_hooks, tb_model_ops, tb_text_ops or
#     an --arch preset, some table of which puts a function of the other under that field: read
#     from the tables' initializers, the function found by nm; nm alone cannot see those calls);
#  2. a family file (one defining a tb_family_ops, tb_*_family) is reached only through the
#     registry: no object but families.o uses anything it defines;
#  3. no file of src/models but the family files and families.c names a family or tests which one
#     it runs (family.h's protocol: a family's table, its model runner included, is called, never
#     tested): in the code (comments stripped), no family id (TB_VIDEOMAE, ...; config.h's enum
#     declares them), model_type literal ("videomae", ...) or family table (tb_*_family), no
#     comparison of a family id, and no `whole` (the special case that tb_model_ops replaced);
#  4. a family's own config fields are private to it: the struct its table sizes
#     (`.config_size = sizeof(T)`, reached through tb_config.fam) is defined in its own file and
#     named in no other file of src/ (a shared file asks the family through its table).
#   tests/check_models.sh [BUILD_DIR (default build)]
set -u
cd "$(dirname "$0")/.."
build=${1:-build}
status=0
# 1. include edges "a.h b.h" (a includes b), then call edges, each through tsort
for f in src/models/*.[ch]; do
    for h in $(sed -n 's/^#include "\([a-z_]*\.h\)"/\1/p' "$f"); do
        echo "$(basename "$f" | sed 's/\.c$/.c/') $h"
    done
done >/tmp/check_models_inc.$$
if ! tsort /tmp/check_models_inc.$$ >/dev/null 2>/tmp/check_models_err.$$; then
    echo "src/models: an include circle:"; cat /tmp/check_models_err.$$; status=1
fi
objs=$(ls "$build"/src/models/*.o 2>/dev/null)
[ -n "$objs" ] || { echo "check_models: no objects in $build/src/models (build first)"; exit 1; }
for o in $objs; do
    n=$(basename "$o" .o)
    nm --defined-only -g "$o" | awk -v n="$n" 'NF == 3 {print $3, n}'
done | sort >/tmp/check_models_def.$$
for o in $objs; do
    n=$(basename "$o" .o)
    nm -u "$o" | awk -v n="$n" '{print $2, n}'
done | sort | join - /tmp/check_models_def.$$ | awk '$2 != $3 {print $2, $3}' \
    >/tmp/check_models_direct.$$
# calls through a table (family.h's tb_family_ops, tb_model_ops, tb_text_ops, an --arch preset's
# apply), which nm cannot see: a table's entry `.field = fn` (a preset `{"name", fn}`) names fn,
# defined in the object whose nm lists it (a static one: the table's own file); a file calling
# `->field(` calls every fn some table puts under that field.
for o in $objs; do
    n=$(basename "$o" .o)
    nm --defined-only "$o" | awk -v n="$n" '$2 ~ /^[Tt]$/ {print $3, n, $2}'
done | sort >/tmp/check_models_fns.$$
for f in src/models/*.c; do
    n=$(basename "$f" .c)
    perl -ne 'print "$1 $2\n" if /^\s*\.([a-z_]+)\s*=\s*&?([A-Za-z_][A-Za-z0-9_]*)\s*,/;
              print "apply $1\n" if /^\s*\{"[^"]*",\s*([A-Za-z_][A-Za-z0-9_]*)\}/' "$f" |
        awk -v n="$n" '{print $2, $1, n}'
done | sort | join - /tmp/check_models_fns.$$ |
    awk '$5 == "T" || $3 == $4 {print $2, $4}' | sort -u >/tmp/check_models_entries.$$
for f in src/models/*.c; do
    n=$(basename "$f" .c)
    perl -0pe 's{/\*.*?\*/}{}gs; s{//[^\n]*}{}g' "$f" | grep -oE -- '->[a-z_]+ *\(' |
        sed 's/^->\([a-z_]*\).*/\1/' | sort -u | awk -v n="$n" '{print $1, n}'
done | sort | join - /tmp/check_models_entries.$$ | awk '$2 != $3 {print $2, $3}' \
    >/tmp/check_models_table.$$
sort -u /tmp/check_models_direct.$$ /tmp/check_models_table.$$ >/tmp/check_models_calls.$$
if ! tsort /tmp/check_models_calls.$$ >/dev/null 2>/tmp/check_models_err.$$; then
    echo "src/models: a call circle (caller callee):"; cat /tmp/check_models_err.$$; status=1
fi
# 2. the family files, and who uses what they define
for fam in $(awk '$1 ~ /^tb_.*_family$/ {print $2}' /tmp/check_models_def.$$ | sort -u); do
    users=$(for o in "$build"/src/*.o "$build"/src/*/*.o; do
                [ "$(basename "$o" .o)" = "$fam" ] || [ "$(basename "$o")" = families.o ] && continue
                nm -u "$o" | awk '{print $2}' | sort |
                    join - <(awk -v f="$fam" '$2 == f {print $1}' /tmp/check_models_def.$$) |
                    sed "s|^|$(basename "$o" .o) uses |"
            done)
    [ -z "$users" ] || { echo "family file $fam.c is reached outside the registry (families.c):";
                         echo "$users"; status=1; }
done
# 3. the family files, their ids and model types, from their tables
fam_files=$(grep -l '^const tb_family_ops tb_[a-z0-9_]*_family = ' src/models/*.c | tr "\n" " ")
ids=$(sed -n 's/^ *\.id = \(TB_[A-Z0-9_]*\),.*/\1/p' $fam_files | paste -sd'|')
types=$(sed -n 's/^ *\.model_type = "\([^"]*\)",.*/\1/p' $fam_files | paste -sd'|')
[ -n "$ids" ] && [ -n "$types" ] || { echo "check_models: no family tables found"; status=1; }
compare='(->|\.)(id|family) *[!=]=|[!=]= *[A-Za-z_>.-]*(->|\.)(id|family)\b' # a family id compared
for f in src/models/*.[ch]; do
    case " $fam_files src/models/families.c " in *" $f "*) continue ;; esac
    # comments blanked, their newlines kept (line numbers stay the file's)
    perl -0pe 's{/\*.*?\*/}{$& =~ s/[^\n]//gr}gse; s{//[^\n]*}{}g' "$f" |
        grep -nE "\b($ids)\b|\"($types)\"|\btb_[a-z0-9_]+_family\b|\bwhole\b|$compare" |
        grep -vE '^[0-9]+:typedef enum \{.*\} tb_family;$' | sed "s|^|$f:|"
done >/tmp/check_models_fam.$$
if [ -s /tmp/check_models_fam.$$ ]; then
    echo "src/models: a file other than the family files and families.c names a family or tests"
    echo "which one it runs (call its table, family.h's tb_family_ops / tb_model_ops, instead):"
    cat /tmp/check_models_fam.$$; status=1
fi
# 4. each family's config struct: defined in its file, named nowhere else in src/ (comments
# stripped: a comment may say where the fields went)
for g in $(find src -name '*.[ch]' -o -name '*.cu' -o -name '*.cuh'); do
    perl -0pe 's{/\*.*?\*/}{}gs; s{//[^\n]*}{}g' "$g" | sed "s|^|$g: |"
done >/tmp/check_models_src.$$
for f in $fam_files; do
    t=$(sed -n 's/^ *\.config_size = sizeof(\([A-Za-z_][A-Za-z0-9_]*\)),.*/\1/p' "$f")
    [ -n "$t" ] || continue
    grep -qE "^\} $t;" "$f" ||
        { echo "$f: its config struct $t is not defined in it (keep it private there)"; status=1; }
    others=$(grep -w "$t" /tmp/check_models_src.$$ | grep -v "^$f: " | cut -d: -f1 | sort -u)
    [ -z "$others" ] || { echo "$f: its private config struct $t is named in:" $others; status=1; }
done
rm -f /tmp/check_models_*.$$
exit $status
