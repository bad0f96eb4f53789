#include "checkpoint.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

static int exists(const char *path) {
    struct stat st;
    return lstat(path, &st) == 0;
}

int tb_remove_flat_dir(const char *dir, tb_err *e) {
    DIR *d = opendir(dir);
    if (!d) {
        if (errno == ENOENT) return TUBELET_OK;
        return tb_fail(e, TUBELET_ERR_IO, "%s: cannot open: %s", dir, strerror(errno));
    }
    int rc = TUBELET_OK;
    char p[4200];
    for (struct dirent *de; !rc && (de = readdir(d));) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
        snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
        struct stat st;
        if (lstat(p, &st) != 0 || !(S_ISREG(st.st_mode) || S_ISLNK(st.st_mode)))
            rc = tb_fail(e, TUBELET_ERR_IO,
                         "%s: not a file tubelet wrote; remove it by hand (it is in the way of "
                         "the checkpoint)", p);
        else if (unlink(p) != 0)
            rc = tb_fail(e, TUBELET_ERR_IO, "%s: cannot remove: %s", p, strerror(errno));
    }
    closedir(d);
    if (!rc && rmdir(dir) != 0)
        rc = tb_fail(e, TUBELET_ERR_IO, "%s: cannot remove: %s", dir, strerror(errno));
    return rc;
}

static void names(const char *outdir, const char *name, char *dir, char *tmp, char *old,
                  size_t len) {
    snprintf(dir, len, "%s/%s", outdir, name);
    snprintf(tmp, len, "%s/%s.tmp", outdir, name);
    snprintf(old, len, "%s/%s.old", outdir, name);
}

int tb_checkpoint_recover(const char *outdir, const char *name, tb_err *e) {
    char dir[2100], tmp[2100], old[2100];
    names(outdir, name, dir, tmp, old, sizeof dir);
    int rc = tb_remove_flat_dir(tmp, e);
    if (rc) return rc;
    if (!exists(old)) return TUBELET_OK;
    if (exists(dir)) return tb_remove_flat_dir(old, e); /* stopped after the swap */
    /* stopped between the two renames: the previous checkpoint is the complete one */
    return tb_rename(old, dir, e);
}

int tb_checkpoint_begin(const char *outdir, const char *name, char *tmp_dir, size_t len,
                        tb_err *e) {
    char dir[2100], old[2100];
    names(outdir, name, dir, tmp_dir, old, len);
    int rc = tb_checkpoint_recover(outdir, name, e);
    if (rc) return rc;
    if (mkdir(tmp_dir, 0755) != 0)
        return tb_fail(e, TUBELET_ERR_IO, "%s: %s", tmp_dir, strerror(errno));
    return TUBELET_OK;
}

int tb_checkpoint_commit(const char *outdir, const char *name, tb_save_hook hook, void *user,
                         tb_err *e) {
    char dir[2100], tmp[2100], old[2100];
    names(outdir, name, dir, tmp, old, sizeof dir);
    tb_fsync_dir(tmp); /* its files' names are durable before the swap */
    int rc;
    if (exists(dir) && (rc = tb_rename(dir, old, e))) return rc;
    if (hook) hook(user, 1);
    if ((rc = tb_rename(tmp, dir, e))) {
        tb_err ignored;
        (void)tb_rename(old, dir, &ignored);
        return rc;
    }
    /* tb_rename has synced outdir, the old step 3: steps 2 and 3 now meet */
    if (hook) hook(user, 2), hook(user, 3);
    rc = tb_remove_flat_dir(old, e);
    if (hook) hook(user, 4);
    return rc;
}

int tb_outdir_lock(const char *outdir, int *fd, tb_err *e) {
    char p[2100];
    snprintf(p, sizeof p, "%s/train.lock", outdir);
    *fd = open(p, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (*fd < 0) return tb_fail(e, TUBELET_ERR_IO, "%s: cannot create: %s", p, strerror(errno));
    if (flock(*fd, LOCK_EX | LOCK_NB) != 0) {
        char pid[32] = "";
        ssize_t n = pread(*fd, pid, sizeof pid - 1, 0);
        pid[n > 0 ? n : 0] = 0;
        pid[strcspn(pid, "\n")] = 0;
        close(*fd), *fd = -1;
        return tb_fail(e, TUBELET_ERR_IO,
                       "%s is in use by another tubelet train (pid %s); wait for it to finish or "
                       "choose another -o", outdir, *pid ? pid : "unknown");
    }
    char line[32];
    int n = snprintf(line, sizeof line, "%ld\n", (long)getpid());
    if (ftruncate(*fd, 0) != 0 || pwrite(*fd, line, (size_t)n, 0) != n) {
        close(*fd), *fd = -1;
        return tb_fail(e, TUBELET_ERR_IO, "%s: cannot write: %s", p, strerror(errno));
    }
    return TUBELET_OK;
}
