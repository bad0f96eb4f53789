/* A run directory (OUTDIR) that survives any interruption: checkpoints swapped in by rename so
 * that the previous one is never removed before the new one is in place, stale temporaries of
 * an interrupted save cleaned on the next start, and one trainer at a time (an flock). */
#ifndef TB_CHECKPOINT_H
#define TB_CHECKPOINT_H

#include "../common.h"

/* Removes a flat directory and the regular files in it; a directory that does not exist is fine.
 * Anything else inside (a subdirectory, a FIFO, a device) is refused, not followed. */
int tb_remove_flat_dir(const char *dir, tb_err *e);

/* Brings OUTDIR/<name> back to a complete state after any interruption of a save: an
 * unfinished <name>.tmp is removed, a <name>.old left between the two renames is put back (or
 * removed when the new <name> is in place). */
int tb_checkpoint_recover(const char *outdir, const char *name, tb_err *e);

/* A save: begin creates an empty OUTDIR/<name>.tmp to write the files into (path in tmp_dir);
 * commit swaps it in for OUTDIR/<name>. hook(user, k), when set, runs after each of the steps
 * k = 1..TB_SAVE_STEPS of commit (tests use it to stop the process there). */
enum { TB_SAVE_STEPS = 4 };
typedef void (*tb_save_hook)(void *user, int step);
int tb_checkpoint_begin(const char *outdir, const char *name, char *tmp_dir, size_t len, tb_err *e);
int tb_checkpoint_commit(const char *outdir, const char *name, tb_save_hook hook, void *user,
                         tb_err *e);

/* Takes an exclusive lock on OUTDIR/train.lock (created, with our pid in it). Another trainer
 * holding it is an error naming its pid. Returns the descriptor to keep open in *fd. */
int tb_outdir_lock(const char *outdir, int *fd, tb_err *e);

#endif
