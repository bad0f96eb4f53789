/* One option parser for every command: a command is a table of its options (name, type, range,
 * where the value goes, its line in --help), and the same table prints --help. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

void cli_print_help(const cli_command *c, FILE *f) {
    fprintf(f, "usage: tubelet %s\n\n%s", c->usage, c->about);
    if (c->opts && c->opts[0].name) fputc('\n', f);
    for (const cli_option *o = c->opts; o && o->name; o++) {
        char left[64];
        snprintf(left, sizeof left, "%s%s%s", o->name, o->arg ? " " : "", o->arg ? o->arg : "");
        fprintf(f, "  %-18s ", left);
        for (const char *h = o->help; *h; h++) { /* continuation lines under the text column */
            fputc(*h, f);
            if (*h == '\n' && h[1]) fprintf(f, "  %-18s ", "");
        }
        fputc('\n', f);
    }
    if (c->footer) fprintf(f, "\n%s", c->footer);
}

static int set_value(const cli_option *o, const char *v) {
    char *end;
    errno = 0;
    if (o->kind == CLI_STR) {
        *(const char **)o->out = v;
        return 1;
    }
    if (o->kind == CLI_LIST) { /* the caller's items hold argc entries: every value fits */
        cli_list *l = o->out;
        l->items[l->n++] = v;
        return 1;
    }
    if (o->kind == CLI_INT) {
        long x = strtol(v, &end, 10);
        if (errno || *end || end == v || x < o->lo || x > o->hi) {
            fprintf(stderr, "error: %s must be an integer in [%.0f, %.0f], got '%s'\n", o->name,
                    o->lo, o->hi, v);
            return 0;
        }
        *(int *)o->out = (int)x;
        return 1;
    }
    double x = strtod(v, &end);
    if (o->kind == CLI_SECONDS && end != v && *end == 's') end++;
    if (errno || *end || end == v || !(x >= o->lo && x <= o->hi)) {
        fprintf(stderr, "error: %s must be a number%s in [%g, %g], got '%s'\n", o->name,
                o->kind == CLI_SECONDS ? " of seconds" : "", o->lo, o->hi, v);
        return 0;
    }
    *(double *)o->out = x;
    return 1;
}

int cli_parse(const cli_command *c, int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (cli_is_help(a)) {
            cli_print_help(c, stdout);
            return 0;
        }
        if (a[0] != '-' || !a[1]) { /* a positional argument */
            if (!c->positional || *c->n_positional >= c->max_positional) {
                fprintf(stderr, "error: unexpected argument '%s' (see tubelet %s --help)\n", a,
                        c->name);
                return 2;
            }
            c->positional[(*c->n_positional)++] = a;
            continue;
        }
        const cli_option *o = c->opts;
        size_t n = 0;
        for (; o && o->name; o++) {
            n = strlen(o->name);
            if (!strncmp(a, o->name, n) && (a[n] == 0 || (a[n] == '=' && o->kind != CLI_FLAG))) break;
        }
        if (!o || !o->name) {
            fprintf(stderr, "error: unknown option '%s' (see tubelet %s --help)\n", a, c->name);
            return 2;
        }
        if (o->kind == CLI_FLAG) {
            *(int *)o->out = 1;
            continue;
        }
        const char *v = a[n] == '=' ? a + n + 1 : NULL;
        if (!v && i + 1 >= argc) {
            fprintf(stderr, "error: %s needs a value\n", o->name);
            return 2;
        }
        if (!set_value(o, v ? v : argv[++i])) return 2;
    }
    return -1;
}
