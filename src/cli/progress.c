/* Progress on stderr, one rule for every command (README, "Commands"):
 *   - stderr a terminal: one line redrawn in place ("\r", erased to its end), ended at the last
 *     step;
 *   - otherwise (a pipe, a file, a log): plain lines, no carriage returns, one when the work
 *     crosses a tenth and one at the last step, so a log holds at most about 11 of them. */
#include <stdarg.h>
#include <stdio.h>
#include <unistd.h>

#include "cli.h"

void cli_progress_init(cli_bar *p) { p->tty = isatty(2), p->drawn = 0; }

void cli_progress(cli_bar *p, int done, int total, const char *fmt, ...) {
    if (!p->tty && total > 0 && done > 0 && done < total &&
        10LL * done / total == 10LL * (done - 1) / total) /* not a new tenth */
        return;
    va_list ap;
    va_start(ap, fmt);
    if (p->tty) fputs("\r", stderr);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    const int last = done >= total;
    if (p->tty) fputs(last ? "\033[K\n" : "\033[K", stderr);
    else fputc('\n', stderr);
    p->drawn = p->tty && !last;
    fflush(stderr);
}

void cli_progress_clear(cli_bar *p) {
    if (p->drawn) fputs("\r\033[K", stderr), fflush(stderr);
    p->drawn = 0;
}

void cli_progress_end(cli_bar *p) {
    if (p->drawn) fputc('\n', stderr), fflush(stderr);
    p->drawn = 0;
}
