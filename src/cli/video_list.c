/* Each video of a list, sharded under mpirun, opened one ahead (cli.h: cli_each_opened,
 * cli_each_video), and the sharded output collected on rank 0 (cli_dist_collect): the loop of
 * classify, features and timeline. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "tubelet_train.h"

typedef struct {
    const cli_video_list *l;
    const cli_video_ops *ops;
    void *user;
    int i, rc;
    void *item;
    char err[1024];
} slot;

static void *open_slot(void *arg) {
    slot *s = arg;
    s->rc = s->ops->open(s->user, s->l, s->i, &s->item, s->err, sizeof s->err);
    return NULL;
}

/* Starts opening video i into s on a thread (1), or opens it here when no thread starts (0). */
static int open_ahead(pthread_t *t, slot *s, const cli_video_list *l, const cli_video_ops *ops,
                      void *user, int i) {
    *s = (slot){l, ops, user, i, 0, NULL, {0}};
    if (pthread_create(t, NULL, open_slot, s) == 0) return 1;
    open_slot(s);
    return 0;
}

int cli_each_opened(cli_video_list *l, struct tubelet_dist *dist, const cli_video_ops *ops,
                    void *user) {
    l->first = 0, l->count = l->n_videos;
    if (dist) tubelet_dist_share(dist, l->n_videos, &l->first, &l->count);
    const int end = l->first + l->count;
    slot slots[2] = {{0}, {0}};
    cli_bar bar;
    cli_progress_init(&bar);
    l->bar = &bar;
    pthread_t next;
    int failed = 0,
        have_next = l->count > 0 && open_ahead(&next, &slots[0], l, ops, user, l->first);
    for (int i = l->first; i < end; i++) {
        slot *cur = &slots[(i - l->first) % 2], *ahead = &slots[(i - l->first + 1) % 2];
        if (have_next) pthread_join(next, NULL);
        /* open video i+1 while run works on video i */
        have_next = i + 1 < end && open_ahead(&next, ahead, l, ops, user, i + 1);
        if (l->n_videos > 1 && bar.tty) {
            /* on a terminal, shown while the video runs and erased before its results */
            fprintf(stderr, "\r[%d/%d] %s\033[K", i + 1, l->n_videos, l->videos[i]);
            fflush(stderr);
            bar.drawn = 1;
        } else if (l->n_videos > 1) {
            fprintf(stderr, "[%d/%d] %s\n", i + 1, l->n_videos, l->videos[i]);
        }
        if (ops->run(user, l, i, cur->rc ? NULL : cur->item, cur->err)) failed++;
        cli_progress_clear(&bar);
        ops->close(cur->item);
        cur->item = NULL;
        if (failed && l->stop_on_error) {
            if (have_next) pthread_join(next, NULL);
            ops->close(ahead->item);
            break;
        }
    }
    l->bar = NULL;
    return failed;
}

void cli_list_clear(const cli_video_list *l) {
    if (l && l->bar) cli_progress_clear(l->bar);
}

/* cli_each_video on cli_each_opened: the item is the video's views */
typedef struct {
    cli_video_fn fn;
    void *user;
} views_user;

static int views_open(void *user, const cli_video_list *l, int i, void **item, char *err,
                      size_t errlen) {
    (void)user;
    tubelet_views *v = *item = calloc(1, sizeof *v);
    if (!v) return snprintf(err, errlen, "out of memory"), 1;
    return tubelet_views_load(v, l->videos[i], l->pc, l->opts, l->model_frames, err, errlen);
}

static int views_run(void *user, const cli_video_list *l, int i, void *item, const char *err) {
    const views_user *u = user;
    return u->fn(u->user, l, i, item, err);
}

static void views_close(void *item) {
    if (item) tubelet_views_free(item);
    free(item);
}

int cli_each_video(cli_video_list *l, struct tubelet_dist *dist, cli_video_fn fn, void *user) {
    static const cli_video_ops views = {views_open, views_run, views_close};
    views_user u = {fn, user};
    return cli_each_opened(l, dist, &views, &u);
}

int cli_dist_collect(struct tubelet_dist *d, FILE *out, char **buf, size_t *len, int *failed,
                     char *err, size_t errlen) {
    fflush(out); /* updates *buf and *len of the memory stream */
    void *all = NULL;
    size_t n = 0;
    double f = *failed;
    int rc = tubelet_dist_gather(d, *buf, *len, &all, &n, err, errlen);
    if (!rc) rc = tubelet_dist_sum(d, &f, 1, err, errlen);
    if (!rc) *failed = (int)f;
    if (!rc && all) fwrite(all, 1, n, stdout);
    free(all);
    return rc;
}

int cli_refuse_streams(const char *cmd, const char *const *videos, int n) {
    for (int i = 0; i < n; i++) {
        const char *v = videos[i], *colon = strstr(v, "://");
        /* a scheme: letters, digits, + - . before "://" (RFC 3986), as FFmpeg reads a URL */
        int url = colon && colon > v;
        for (const char *p = v; url && p < colon; p++)
            url = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
                  *p == '+' || *p == '-' || *p == '.';
        if (strcmp(v, "-") && !url) continue;
        fprintf(stderr, "error: %s: `tubelet %s` reads video files; %s is read as a stream by "
                "`tubelet watch %s --model DIR` (docs/watch.md), or save it to a file first\n",
                v, cmd, url ? "a URL" : "stdin", v);
        return 2;
    }
    return 0;
}
