/* Each video of a list, sharded under mpirun, decoded one ahead (cli.h: cli_each_video): the
 * loop of classify and features. */
#include <pthread.h>
#include <stdio.h>

#include "cli.h"
#include "tubelet_train.h"

typedef struct {
    const cli_video_list *l;
    int i;
    tubelet_views v;
    int rc;
    char err[1024];
} slot;

static void *load_slot(void *arg) {
    slot *s = arg;
    const cli_video_list *l = s->l;
    s->rc = tubelet_views_load(&s->v, l->videos[s->i], l->pc, l->opts, l->model_frames, s->err,
                               sizeof s->err);
    return NULL;
}

/* Starts decoding video i into s on a thread (1), or decodes it here when no thread starts (0). */
static int load_ahead(pthread_t *t, slot *s, const cli_video_list *l, int i) {
    *s = (slot){l, i, {0}, 0, {0}};
    if (pthread_create(t, NULL, load_slot, s) == 0) return 1;
    load_slot(s);
    return 0;
}

int cli_each_video(cli_video_list *l, struct tubelet_dist *dist, cli_video_fn fn, void *user) {
    l->first = 0, l->count = l->n_videos;
    if (dist) tubelet_dist_share(dist, l->n_videos, &l->first, &l->count);
    const int end = l->first + l->count;
    static const slot none;
    slot slots[2] = {none, none};
    pthread_t next;
    int failed = 0, have_next = l->count > 0 && load_ahead(&next, &slots[0], l, l->first);
    for (int i = l->first; i < end; i++) {
        slot *cur = &slots[(i - l->first) % 2], *ahead = &slots[(i - l->first + 1) % 2];
        if (have_next) pthread_join(next, NULL);
        /* decode video i+1 while fn runs on video i */
        have_next = i + 1 < end && load_ahead(&next, ahead, l, i + 1);
        if (l->n_videos > 1) fprintf(stderr, "[%d/%d] %s\n", i + 1, l->n_videos, l->videos[i]);
        if (fn(user, l, i, cur->rc ? NULL : &cur->v, cur->err)) failed++;
        tubelet_views_free(&cur->v);
        if (failed && l->stop_on_error) {
            if (have_next) pthread_join(next, NULL);
            tubelet_views_free(&ahead->v);
            break;
        }
    }
    return failed;
}
