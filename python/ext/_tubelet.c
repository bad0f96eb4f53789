/* tubelet._tubelet: the CPython binding of the C library (include/tubelet.h and
 * include/tubelet_video.h). Written against the stable ABI (Py_LIMITED_API 3.11:
 * the buffer protocol joined it there), so one wheel serves every CPython >= 3.11.
 *
 * This layer is thin on purpose: python/tubelet/__init__.py checks dtypes and shapes, allocates
 * the outputs with numpy, and passes everything here as buffers. Here we check the byte sizes
 * again (never trust the caller with a raw pointer), release the GIL around every call that
 * computes or decodes, and turn status codes into tubelet.Error. */
#define Py_LIMITED_API 0x030B0000
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "tubelet.h"
#include "tubelet_text.h"
#include "tubelet_video.h"
#define TB_PY_VIDEO 1

static PyObject *Error; /* tubelet.Error, a RuntimeError */

static const char *status_name(int rc) {
    static const char *names[] = {"ok",      "arg",     "io",     "format", "config",
                                  "shape",   "missing", "memory", "value",  "unsupported"};
    return rc >= 0 && rc < (int)(sizeof names / sizeof *names) ? names[rc] : "unknown";
}

/* Raises tubelet.Error(msg) with .status set to the status' name; returns NULL. */
static PyObject *raise_status(int rc, const char *msg) {
    PyObject *exc = PyObject_CallFunction(Error, "s", msg && *msg ? msg : status_name(rc));
    if (!exc) return NULL;
    PyObject *st = PyUnicode_FromString(status_name(rc));
    if (st) PyObject_SetAttrString(exc, "status", st);
    Py_XDECREF(st);
    PyErr_SetObject(Error, exc);
    Py_DECREF(exc);
    return NULL;
}

/* ------------------------------------------------------------------ warnings */

/* The library reports warnings through a callback, possibly without the GIL: they are collected
 * here and turned into Python warnings once the GIL is back. */
typedef struct {
    pthread_mutex_t mu;
    char *text; /* messages separated by '\n' */
    size_t len;
} logsink;

static void log_cb(void *user, int level, const char *msg) {
    logsink *l = user;
    if (level != 1 || !l) return; /* info messages are not warnings */
    pthread_mutex_lock(&l->mu);
    size_t n = strlen(msg);
    char *t = realloc(l->text, l->len + n + 2);
    if (t) {
        memcpy(t + l->len, msg, n);
        t[l->len + n] = '\n', t[l->len + n + 1] = 0;
        l->text = t, l->len += n + 1;
    }
    pthread_mutex_unlock(&l->mu);
}

static logsink *logsink_new(void) {
    logsink *l = calloc(1, sizeof *l);
    if (l) pthread_mutex_init(&l->mu, NULL);
    return l;
}

static void logsink_free(logsink *l) {
    if (!l) return;
    pthread_mutex_destroy(&l->mu);
    free(l->text);
    free(l);
}

/* Emits the collected warnings as UserWarning; -1 if a warning filter turned one into an error. */
static int logsink_flush(logsink *l) {
    if (!l) return 0;
    pthread_mutex_lock(&l->mu);
    char *t = l->text;
    l->text = NULL, l->len = 0;
    pthread_mutex_unlock(&l->mu);
    int rc = 0;
    for (char *p = t, *nl; p && *p && !rc; p = nl + 1) {
        nl = strchr(p, '\n');
        *nl = 0;
        rc = PyErr_WarnEx(PyExc_UserWarning, p, 2);
    }
    free(t);
    return rc;
}

/* ------------------------------------------------------------------ buffers */

/* A malloc'd block the library filled, handed to numpy without a copy (np.frombuffer). */
typedef struct {
    PyObject_HEAD
    void *data;
    Py_ssize_t len;
} BlobObject;

static PyTypeObject *BlobType;

static int blob_getbuffer(PyObject *self, Py_buffer *view, int flags) {
    BlobObject *b = (BlobObject *)self;
    return PyBuffer_FillInfo(view, self, b->data, b->len, 0, flags);
}

static void blob_dealloc(PyObject *self) {
    PyTypeObject *tp = Py_TYPE(self);
    free(((BlobObject *)self)->data);
    freefunc f = PyType_GetSlot(tp, Py_tp_free);
    f(self);
    Py_DECREF(tp);
}

/* A new zeroed instance of one of our types; Python code cannot make them itself
 * (Py_TPFLAGS_DISALLOW_INSTANTIATION): a Model without weights must never exist. */
static PyObject *new_obj(PyTypeObject *t) {
    allocfunc a = PyType_GetSlot(t, Py_tp_alloc);
    return a(t, 0);
}

/* Takes ownership of data (malloc'd); frees it on failure. */
static __attribute__((unused)) PyObject *blob_new(void *data, size_t len) {
    BlobObject *b = (BlobObject *)new_obj(BlobType);
    if (!b) {
        free(data);
        return NULL;
    }
    b->data = data, b->len = (Py_ssize_t)len;
    return (PyObject *)b;
}

static PyType_Slot blob_slots[] = {
    {Py_tp_dealloc, blob_dealloc},
    {Py_bf_getbuffer, blob_getbuffer},
    {Py_tp_doc, "Memory the C library allocated; use numpy.frombuffer."},
    {0, NULL},
};
static PyType_Spec blob_spec = {"tubelet._tubelet.Blob", sizeof(BlobObject), 0, Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION,
                                blob_slots};

/* format codes numpy and array.array use for float32 and int64 */
static int is_format(const Py_buffer *b, char kind) {
    const char *f = b->format ? b->format : "B";
    if (*f == '<' || *f == '=' || *f == '@') f++;
    if (f[1]) return 0;
    if (kind == 'f') return *f == 'f' && b->itemsize == 4;
    if (kind == 'q') return (*f == 'q' || *f == 'l') && b->itemsize == 8;
    if (kind == 'B') return (*f == 'B' || *f == 'b' || *f == 'c') && b->itemsize == 1;
    return 0;
}

/* A C-contiguous buffer of exactly n items of the kind; writable when asked. */
static int get_buffer(PyObject *o, Py_buffer *b, char kind, int64_t n, int writable,
                      const char *what) {
    int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(o, b, flags) < 0) return -1;
    int64_t item = kind == 'B' ? 1 : kind == 'f' ? 4 : 8;
    if (!is_format(b, kind) || b->len != n * item) {
        PyErr_Format(PyExc_ValueError, "%s: expected %lld items of %s, got %zd bytes (format %s)",
                     what, (long long)n, kind == 'f' ? "float32" : kind == 'q' ? "int64" : "uint8",
                     b->len, b->format ? b->format : "B");
        PyBuffer_Release(b);
        return -1;
    }
    return 0;
}

static PyObject *shape_tuple(const tubelet_shape *s) {
    PyObject *t = PyTuple_New(s->ndim);
    for (int i = 0; t && i < s->ndim; i++) PyTuple_SetItem(t, i, PyLong_FromLongLong(s->dim[i]));
    return t;
}

/* ------------------------------------------------------------------ Model */

/* Nothing here writes the model after _load, its thread count included (tubelet_load_params'
 * n_threads): other Python threads run forward on it without the GIL, so a setter would race
 * with them. Another count is another load. */
typedef struct {
    PyObject_HEAD
    tubelet_model *m;
    tubelet_grads *grads; /* Model.grad's gradients (enable_grads); the model stays read-only */
    logsink *log;
} ModelObject;

static PyTypeObject *ModelType, *StateType;

static void model_dealloc(PyObject *self) {
    ModelObject *mo = (ModelObject *)self;
    PyTypeObject *tp = Py_TYPE(self);
    tubelet_grads_free(mo->grads);
    tubelet_model_free(mo->m);
    logsink_free(mo->log);
    freefunc f = PyType_GetSlot(tp, Py_tp_free);
    f(self);
    Py_DECREF(tp);
}

/* _load(source, kind, precision, reference, threads, inference, seed, max_memory[,
 * train_precision[, device]]) (device: tubelet_load_params.device, None: the CPU); kind 0: a model directory or checkpoint file, 1: an architecture name, 2: a
 * directory holding only config.json, initialised with random weights from seed */
static PyObject *py_load(PyObject *mod, PyObject *args) {
    (void)mod;
    const char *src;
    int kind, precision, reference, threads, inference, train_precision = 0;
    unsigned long long seed;
    long long max_memory;
    const char *device = NULL;
    if (!PyArg_ParseTuple(args, "siiiiiKL|iz", &src, &kind, &precision, &reference, &threads,
                          &inference, &seed, &max_memory, &train_precision, &device))
        return NULL;
    ModelObject *mo = (ModelObject *)new_obj(ModelType);
    if (!mo) return NULL;
    if (!(mo->log = logsink_new())) {
        Py_DECREF(mo);
        return PyErr_NoMemory();
    }
    tubelet_load_params lp = tubelet_load_default_params();
    lp.n_threads = threads, lp.precision = precision, lp.precision_reference = reference;
    lp.inference = inference, lp.max_memory = max_memory, lp.train_precision = train_precision;
    lp.random_init = kind == 2, lp.seed = seed, lp.device = device;
    lp.log = log_cb, lp.log_user = mo->log;
    char err[1024] = "";
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = kind == 1 ? tubelet_model_random(&mo->m, src, seed, &lp, err, sizeof err)
                 : tubelet_model_load(&mo->m, src, &lp, err, sizeof err);
    Py_END_ALLOW_THREADS
    if (rc) {
        mo->m = NULL;
        Py_DECREF(mo);
        return raise_status(rc, err);
    }
    if (logsink_flush(mo->log)) {
        Py_DECREF(mo);
        return NULL;
    }
    return (PyObject *)mo;
}

#define SET(d, k, v)                                                                           \
    do {                                                                                       \
        PyObject *_v = (v);                                                                    \
        if (!_v || PyDict_SetItemString(d, k, _v)) {                                           \
            Py_XDECREF(_v);                                                                    \
            Py_DECREF(d);                                                                      \
            return NULL;                                                                       \
        }                                                                                      \
        Py_DECREF(_v);                                                                         \
    } while (0)

static PyObject *str_or_none(const char *s) {
    if (s) return PyUnicode_FromString(s);
    Py_INCREF(Py_None);
    return Py_None;
}

static PyObject *model_info(PyObject *self, PyObject *noargs) {
    (void)noargs;
    tubelet_model_info i;
    tubelet_model_get_info(((ModelObject *)self)->m, &i);
    PyObject *d = PyDict_New();
    if (!d) return NULL;
    SET(d, "family", str_or_none(i.family));
    SET(d, "variant", str_or_none(i.variant));
    SET(d, "model_type", str_or_none(i.model_type));
    SET(d, "num_params", PyLong_FromLongLong(i.n_params));
    SET(d, "num_frames", PyLong_FromLong(i.num_frames));
    SET(d, "image_height", PyLong_FromLong(i.image_height));
    SET(d, "image_width", PyLong_FromLong(i.image_width));
    SET(d, "num_channels", PyLong_FromLong(i.num_channels));
    SET(d, "hidden_size", PyLong_FromLong(i.hidden_size));
    SET(d, "num_hidden_layers", PyLong_FromLong(i.num_layers));
    SET(d, "num_attention_heads", PyLong_FromLong(i.num_heads));
    SET(d, "intermediate_size", PyLong_FromLong(i.intermediate_size));
    SET(d, "num_labels", PyLong_FromLong(i.num_labels));
    SET(d, "tubelet_size", Py_BuildValue("(iii)", i.tubelet_t, i.patch_h, i.patch_w));
    SET(d, "num_tokens", PyLong_FromLongLong(i.n_tokens));
    SET(d, "flop_per_clip", PyFloat_FromDouble(i.flop_per_clip));
    SET(d, "hidden_dropout_prob", PyFloat_FromDouble(i.hidden_dropout_prob));
    SET(d, "attention_probs_dropout_prob", PyFloat_FromDouble(i.attention_probs_dropout_prob));
    SET(d, "num_temporal_layers", PyLong_FromLong(i.num_temporal_layers));
    SET(d, "layer_scale_init_value", PyFloat_FromDouble(i.layer_scale_init_value));
    SET(d, "precision", str_or_none(tubelet_precision_name(i.precision)));
    SET(d, "precision_native", PyBool_FromLong(i.precision_native));
    SET(d, "packed", PyBool_FromLong(i.packed));
    SET(d, "linear_weight_bytes", PyLong_FromSize_t(i.linear_weight_bytes));
    SET(d, "threads", PyLong_FromLong(tubelet_model_threads(((ModelObject *)self)->m)));
    return d;
}

static PyObject *model_labels(PyObject *self, PyObject *noargs) {
    (void)noargs;
    tubelet_model *m = ((ModelObject *)self)->m;
    tubelet_model_info i;
    tubelet_model_get_info(m, &i);
    PyObject *l = PyList_New(i.num_labels > 0 ? i.num_labels : 0);
    for (int k = 0; l && k < i.num_labels; k++) {
        const char *s = tubelet_model_label(m, k);
        PyObject *v = s ? PyUnicode_FromString(s) : PyUnicode_FromFormat("LABEL_%d", k);
        if (!v) {
            Py_DECREF(l);
            return NULL;
        }
        PyList_SetItem(l, k, v);
    }
    return l;
}

static PyObject *model_flop(PyObject *self, PyObject *args) {
    int f, h, w;
    if (!PyArg_ParseTuple(args, "iii", &f, &h, &w)) return NULL;
    return PyFloat_FromDouble(tubelet_model_flop_per_clip(((ModelObject *)self)->m, f, h, w));
}

static PyObject *model_enable_grads(PyObject *self, PyObject *noargs) {
    (void)noargs;
    ModelObject *mo = (ModelObject *)self;
    char err[1024] = "";
    int rc = TUBELET_OK;
    if (mo->grads) Py_RETURN_NONE;
    Py_BEGIN_ALLOW_THREADS
    rc = tubelet_grads_new(&mo->grads, mo->m, err, sizeof err);
    Py_END_ALLOW_THREADS
    if (rc) return raise_status(rc, err);
    Py_RETURN_NONE;
}

static PyObject *model_zero_grads(PyObject *self, PyObject *noargs) {
    (void)noargs;
    ModelObject *mo = (ModelObject *)self;
    if (mo->grads) tubelet_grads_zero(mo->grads);
    Py_RETURN_NONE;
}

/* [(name, shape)] of every parameter, in the model's order. */
static PyObject *model_tensors(PyObject *self, PyObject *noargs) {
    (void)noargs;
    tubelet_model *m = ((ModelObject *)self)->m;
    const int n = tubelet_model_n_tensors(m);
    PyObject *l = PyList_New(n);
    for (int i = 0; l && i < n; i++) {
        tubelet_shape sh;
        const char *name = tubelet_model_tensor(m, i, &sh, NULL);
        PyObject *t = shape_tuple(&sh);
        PyObject *item = t ? Py_BuildValue("(sN)", name, t) : NULL;
        if (!item) {
            Py_DECREF(l);
            return NULL;
        }
        PyList_SetItem(l, i, item);
    }
    return l;
}

/* copy_tensors(outs, grads): copies parameter i's values (grads false) or gradient into outs[i]. */
static PyObject *model_copy_tensors(PyObject *self, PyObject *args) {
    PyObject *outs;
    int grads;
    if (!PyArg_ParseTuple(args, "Op", &outs, &grads)) return NULL;
    const ModelObject *mo = (const ModelObject *)self;
    const tubelet_model *m = mo->m;
    const int n = tubelet_model_n_tensors(m);
    if (!PyList_Check(outs) || PyList_Size(outs) != n) {
        PyErr_Format(PyExc_ValueError, "expected a list of %d arrays", n);
        return NULL;
    }
    for (int i = 0; i < n; i++) {
        tubelet_shape sh;
        const float *data;
        const char *name = tubelet_model_tensor(m, i, &sh, &data);
        const float *src = !grads ? data : mo->grads ? tubelet_grads_at(mo->grads, i) : NULL;
        if (!src) return raise_status(TUBELET_ERR_ARG, grads ? "gradients are not enabled"
                                                            : "the weights are not in float32");
        Py_buffer b;
        if (get_buffer(PyList_GetItem(outs, i), &b, 'f', tubelet_shape_numel(&sh), 1, name))
            return NULL;
        memcpy(b.buf, src, (size_t)b.len);
        PyBuffer_Release(&b);
    }
    Py_RETURN_NONE;
}

/* text_dims() -> (embed_dim, context), or None for a model without a text tower */
static PyObject *model_text_dims(PyObject *self, PyObject *noargs) {
    (void)noargs;
    int P = 0, ctx = 0;
    if (tubelet_text_dims(((ModelObject *)self)->m, &P, &ctx)) Py_RETURN_NONE;
    return Py_BuildValue("(ii)", P, ctx);
}

/* encode_text(dir, texts) -> (blob, (n, embed_dim)): the texts tokenized with dir's tokenizer
 * (vocab.json, merges.txt) and encoded (X-CLIP) */
static PyObject *model_encode_text(PyObject *self, PyObject *args) {
    tubelet_model *m = ((ModelObject *)self)->m;
    const char *dir;
    PyObject *list;
    if (!PyArg_ParseTuple(args, "sO!", &dir, &PyList_Type, &list)) return NULL;
    int P = 0, ctx = 0;
    const Py_ssize_t n = PyList_Size(list);
    if (tubelet_text_dims(m, &P, &ctx))
        return raise_status(TUBELET_ERR_UNSUPPORTED, "this model has no text tower (texts need "
                            "an X-CLIP model)");
    if (n < 1 || n > (1 << 24)) return raise_status(TUBELET_ERR_ARG, "give 1 or more texts");
    char err[1024] = "";
    tubelet_tokenizer *tok = NULL;
    int rc = tubelet_tokenizer_load(&tok, dir, err, sizeof err);
    if (rc) return raise_status(rc, err);
    const int tc = tubelet_tokenizer_context(tok);
    if (tc < ctx) ctx = tc;
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)n * (size_t)ctx);
    float *out = malloc(sizeof(float) * (size_t)n * (size_t)P);
    if (!ids || !out) {
        free(ids), free(out), tubelet_tokenizer_free(tok);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < n && !rc; i++) {
        Py_ssize_t len;
        PyObject *item = PyList_GetItem(list, i); /* borrowed */
        const char *t = item && PyUnicode_Check(item) ? PyUnicode_AsUTF8AndSize(item, &len) : NULL;
        if (!t) {
            free(ids), free(out), tubelet_tokenizer_free(tok);
            if (!PyErr_Occurred()) PyErr_Format(PyExc_TypeError, "texts[%zd] is not a str", i);
            return NULL;
        }
        rc = tubelet_tokenizer_encode(tok, t, (size_t)len, ctx, ids + (size_t)i * ctx, NULL, err,
                                      sizeof err);
    }
    tubelet_tokenizer_free(tok);
    if (!rc) {
        Py_BEGIN_ALLOW_THREADS
        rc = tubelet_encode_text(m, ids, (int)n, ctx, out, err, sizeof err);
        Py_END_ALLOW_THREADS
    }
    free(ids);
    if (rc) {
        free(out);
        return raise_status(rc, err);
    }
    PyObject *b = blob_new(out, sizeof(float) * (size_t)n * (size_t)P);
    return b ? Py_BuildValue("(N(ni))", b, n, P) : NULL;
}

static PyMethodDef model_methods[] = {
    {"text_dims", model_text_dims, METH_NOARGS, "(embed_dim, context) or None (no text)."},
    {"encode_text", model_encode_text, METH_VARARGS, "encode_text(dir, texts)."},
    {"info", model_info, METH_NOARGS, "tubelet_model_info as a dict."},
    {"labels", model_labels, METH_NOARGS, "Class labels (config.json id2label)."},
    {"flop_per_clip", model_flop, METH_VARARGS, "flop_per_clip(frames, height, width)."},
    {"enable_grads", model_enable_grads, METH_NOARGS, "Allocate the gradients (zeroed)."},
    {"zero_grads", model_zero_grads, METH_NOARGS, "Zero the gradients."},
    {"tensors", model_tensors, METH_NOARGS, "[(name, shape)] of the parameters."},
    {"copy_tensors", model_copy_tensors, METH_VARARGS, "copy_tensors(outs, grads)."},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot model_slots[] = {
    {Py_tp_dealloc, model_dealloc},
    {Py_tp_methods, model_methods},
    {Py_tp_doc, "A loaded tubelet_model (use tubelet.load)."},
    {0, NULL},
};
static PyType_Spec model_spec = {"tubelet._tubelet.Model", sizeof(ModelObject), 0,
                                 Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION, model_slots};

/* ------------------------------------------------------------------ State */

/* One activation arena for one input shape. The Python layer keeps one per thread; busy guards
 * against two threads sharing one anyway (the arena would be overwritten under the other). */
typedef struct {
    PyObject_HEAD
    ModelObject *model; /* strong reference: the weights outlive every state */
    tubelet_state *s;
    int B, T, H, W;
    int busy;
} StateObject;

static void state_dealloc(PyObject *self) {
    StateObject *so = (StateObject *)self;
    PyTypeObject *tp = Py_TYPE(self);
    tubelet_state_free(so->s);
    Py_XDECREF((PyObject *)so->model);
    freefunc f = PyType_GetSlot(tp, Py_tp_free);
    f(self);
    Py_DECREF(tp);
}

/* _state(model, B, T, H, W, training) */
static PyObject *py_state(PyObject *mod, PyObject *args) {
    (void)mod;
    PyObject *model;
    int B, T, H, W, training;
    if (!PyArg_ParseTuple(args, "O!iiiip", ModelType, &model, &B, &T, &H, &W, &training))
        return NULL;
    StateObject *so = (StateObject *)new_obj(StateType);
    if (!so) return NULL;
    Py_INCREF(model);
    so->model = (ModelObject *)model;
    so->B = B, so->T = T, so->H = H, so->W = W;
    char err[1024] = "";
    int rc;
    tubelet_model *m = so->model->m;
    tubelet_grads *g = so->model->grads; /* training: the model object's (enable_grads first) */
    Py_BEGIN_ALLOW_THREADS
    rc = tubelet_state_new(&so->s, m, B, T, H, W, err, sizeof err);
    if (!rc && training) rc = tubelet_state_enable_training(so->s, 0, g, err, sizeof err);
    Py_END_ALLOW_THREADS
    if (rc) {
        Py_DECREF(so);
        return raise_status(rc, err);
    }
    return (PyObject *)so;
}

static int state_acquire(StateObject *so) {
    if (so->busy) {
        raise_status(TUBELET_ERR_ARG, "this state is in use by another thread");
        return -1;
    }
    so->busy = 1;
    return 0;
}

static PyObject *state_info(PyObject *self, PyObject *noargs) {
    (void)noargs;
    const tubelet_state *s = ((StateObject *)self)->s;
    tubelet_shape ls, hs, fs;
    int t, h, w;
    tubelet_state_logits_shape(s, &ls);
    tubelet_state_hidden_shape(s, &hs);
    tubelet_state_feature_shape(s, &fs);
    tubelet_state_grid(s, &t, &h, &w);
    PyObject *d = PyDict_New();
    if (!d) return NULL;
    SET(d, "logits_shape", shape_tuple(&ls));
    SET(d, "hidden_shape", shape_tuple(&hs));
    SET(d, "feature_shape", shape_tuple(&fs));
    SET(d, "grid", Py_BuildValue("(iii)", t, h, w));
    SET(d, "has_cls", PyBool_FromLong(tubelet_state_has_cls(s)));
    SET(d, "bytes", PyLong_FromSize_t(tubelet_state_bytes(s)));
    return d;
}

static int64_t input_numel(const StateObject *so) {
    tubelet_model_info i;
    tubelet_model_get_info(so->model->m, &i);
    return (int64_t)so->B * so->T * i.num_channels * so->H * so->W;
}

/* Output buffer for o (None: NULL) of shape sh. */
static int get_out(PyObject *o, Py_buffer *b, const tubelet_shape *sh, const char *what) {
    if (o == Py_None) {
        b->obj = NULL, b->buf = NULL;
        return 0;
    }
    return get_buffer(o, b, 'f', tubelet_shape_numel(sh), 1, what);
}

static void release(Py_buffer *b) {
    if (b->obj) PyBuffer_Release(b);
}

/* forward(x, logits|None, hidden|None) */
static PyObject *state_forward(PyObject *self, PyObject *args) {
    StateObject *so = (StateObject *)self;
    PyObject *xo, *lo, *ho;
    if (!PyArg_ParseTuple(args, "OOO", &xo, &lo, &ho)) return NULL;
    tubelet_shape ls, hs;
    tubelet_state_logits_shape(so->s, &ls);
    tubelet_state_hidden_shape(so->s, &hs);
    Py_buffer x, l = {0}, h = {0};
    if (get_buffer(xo, &x, 'f', input_numel(so), 0, "pixel_values")) return NULL;
    if (get_out(lo, &l, &ls, "logits") || get_out(ho, &h, &hs, "hidden")) {
        PyBuffer_Release(&x), release(&l);
        return NULL;
    }
    char err[1024] = "";
    int rc = -1;
    if (!state_acquire(so)) {
        Py_BEGIN_ALLOW_THREADS
        rc = tubelet_forward(so->s, x.buf, l.buf, h.buf, err, sizeof err);
        Py_END_ALLOW_THREADS
        so->busy = 0;
    }
    PyBuffer_Release(&x), release(&l), release(&h);
    if (rc < 0) return NULL;
    if (rc) return raise_status(rc, err);
    Py_RETURN_NONE;
}

/* forward_text(x, text_embeds, n, logits): X-CLIP's logits_per_video (B, n) */
static PyObject *state_forward_text(PyObject *self, PyObject *args) {
    StateObject *so = (StateObject *)self;
    PyObject *xo, *to, *lo;
    int n, P = 0;
    if (!PyArg_ParseTuple(args, "OOiO", &xo, &to, &n, &lo)) return NULL;
    if (tubelet_text_dims(so->model->m, &P, NULL))
        return raise_status(TUBELET_ERR_UNSUPPORTED, "this model has no text tower");
    if (n < 1) return raise_status(TUBELET_ERR_ARG, "give 1 or more text embeddings");
    Py_buffer x, t, l;
    if (get_buffer(xo, &x, 'f', input_numel(so), 0, "pixel_values")) return NULL;
    if (get_buffer(to, &t, 'f', (int64_t)n * P, 0, "text_embeds")) {
        PyBuffer_Release(&x);
        return NULL;
    }
    if (get_buffer(lo, &l, 'f', (int64_t)so->B * n, 1, "logits")) {
        PyBuffer_Release(&x), PyBuffer_Release(&t);
        return NULL;
    }
    char err[1024] = "";
    int rc = -1;
    if (!state_acquire(so)) {
        Py_BEGIN_ALLOW_THREADS
        rc = tubelet_forward_text(so->s, x.buf, t.buf, n, l.buf, NULL, NULL, err, sizeof err);
        Py_END_ALLOW_THREADS
        so->busy = 0;
    }
    PyBuffer_Release(&x), PyBuffer_Release(&t), PyBuffer_Release(&l);
    if (rc < 0) return NULL;
    if (rc) return raise_status(rc, err);
    Py_RETURN_NONE;
}

/* encode_video(x, out): X-CLIP's video embeddings (B, embed_dim), before normalising */
static PyObject *state_encode_video(PyObject *self, PyObject *args) {
    StateObject *so = (StateObject *)self;
    PyObject *xo, *oo;
    int P = 0;
    if (!PyArg_ParseTuple(args, "OO", &xo, &oo)) return NULL;
    if (tubelet_text_dims(so->model->m, &P, NULL))
        return raise_status(TUBELET_ERR_UNSUPPORTED, "this model has no text tower");
    Py_buffer x, o;
    if (get_buffer(xo, &x, 'f', input_numel(so), 0, "pixel_values")) return NULL;
    if (get_buffer(oo, &o, 'f', (int64_t)so->B * P, 1, "video_embeds")) {
        PyBuffer_Release(&x);
        return NULL;
    }
    char err[1024] = "";
    int rc = -1;
    if (!state_acquire(so)) {
        Py_BEGIN_ALLOW_THREADS
        rc = tubelet_encode_video(so->s, x.buf, o.buf, err, sizeof err);
        Py_END_ALLOW_THREADS
        so->busy = 0;
    }
    PyBuffer_Release(&x), PyBuffer_Release(&o);
    if (rc < 0) return NULL;
    if (rc) return raise_status(rc, err);
    Py_RETURN_NONE;
}

/* forward_hidden(x, layer, hidden) */
static PyObject *state_forward_hidden(PyObject *self, PyObject *args) {
    StateObject *so = (StateObject *)self;
    PyObject *xo, *ho;
    int layer;
    if (!PyArg_ParseTuple(args, "OiO", &xo, &layer, &ho)) return NULL;
    tubelet_shape hs;
    tubelet_state_hidden_shape(so->s, &hs);
    Py_buffer x, h;
    if (get_buffer(xo, &x, 'f', input_numel(so), 0, "pixel_values")) return NULL;
    if (get_buffer(ho, &h, 'f', tubelet_shape_numel(&hs), 1, "hidden")) {
        PyBuffer_Release(&x);
        return NULL;
    }
    char err[1024] = "";
    int rc = -1;
    if (!state_acquire(so)) {
        Py_BEGIN_ALLOW_THREADS
        rc = tubelet_forward_hidden(so->s, x.buf, layer, h.buf, err, sizeof err);
        Py_END_ALLOW_THREADS
        so->busy = 0;
    }
    PyBuffer_Release(&x), PyBuffer_Release(&h);
    if (rc < 0) return NULL;
    if (rc) return raise_status(rc, err);
    Py_RETURN_NONE;
}

/* forward_features(x, layers|None, outs): one level per entry of outs */
static PyObject *state_forward_features(PyObject *self, PyObject *args) {
    StateObject *so = (StateObject *)self;
    PyObject *xo, *layers_o, *outs;
    if (!PyArg_ParseTuple(args, "OOO", &xo, &layers_o, &outs)) return NULL;
    if (!PyList_Check(outs) || PyList_Size(outs) < 1 || PyList_Size(outs) > 64) {
        PyErr_SetString(PyExc_ValueError, "outs must be a list of 1 to 64 arrays");
        return NULL;
    }
    const int n = (int)PyList_Size(outs);
    int layers[64];
    if (layers_o != Py_None) {
        if (!PyList_Check(layers_o) || PyList_Size(layers_o) != n) {
            PyErr_SetString(PyExc_ValueError, "layers must be a list as long as outs");
            return NULL;
        }
        for (int i = 0; i < n; i++) {
            layers[i] = (int)PyLong_AsLong(PyList_GetItem(layers_o, i));
            if (PyErr_Occurred()) return NULL;
        }
    }
    tubelet_shape fs;
    tubelet_state_feature_shape(so->s, &fs);
    Py_buffer x, b[64];
    float *ptr[64];
    int got = 0;
    if (get_buffer(xo, &x, 'f', input_numel(so), 0, "pixel_values")) return NULL;
    for (; got < n; got++) {
        if (get_buffer(PyList_GetItem(outs, got), &b[got], 'f', tubelet_shape_numel(&fs), 1,
                       "features"))
            break;
        ptr[got] = b[got].buf;
    }
    char err[1024] = "";
    int rc = -1;
    if (got == n && !state_acquire(so)) {
        const int *lp = layers_o == Py_None ? NULL : layers;
        Py_BEGIN_ALLOW_THREADS
        rc = tubelet_forward_features(so->s, x.buf, n, lp, ptr, err, sizeof err);
        Py_END_ALLOW_THREADS
        so->busy = 0;
    }
    PyBuffer_Release(&x);
    for (int i = 0; i < got; i++) PyBuffer_Release(&b[i]);
    if (rc < 0) return NULL;
    if (rc) return raise_status(rc, err);
    Py_RETURN_NONE;
}

/* feature_map(hidden, out) or pool(hidden, out, mode) */
static PyObject *hidden_to(StateObject *so, PyObject *ho, PyObject *oo, int mode) {
    tubelet_shape hs, fs;
    tubelet_state_hidden_shape(so->s, &hs);
    tubelet_state_feature_shape(so->s, &fs);
    tubelet_model_info i;
    tubelet_model_get_info(so->model->m, &i);
    const int64_t n = mode < 0 ? tubelet_shape_numel(&fs) : (int64_t)hs.dim[0] * i.hidden_size;
    Py_buffer h, o;
    if (get_buffer(ho, &h, 'f', tubelet_shape_numel(&hs), 0, "hidden")) return NULL;
    if (get_buffer(oo, &o, 'f', n, 1, "out")) {
        PyBuffer_Release(&h);
        return NULL;
    }
    int rc = 0;
    if (mode < 0) tubelet_feature_map(so->s, h.buf, o.buf);
    else rc = tubelet_pool(so->s, h.buf, mode, o.buf);
    PyBuffer_Release(&h), PyBuffer_Release(&o);
    if (rc)
        return raise_status(rc, mode == TUBELET_POOL_CLS
                                    ? "pool='cls' on a model without a cls token: use pool='mean'"
                                    : "pooling failed");
    Py_RETURN_NONE;
}

static PyObject *state_feature_map(PyObject *self, PyObject *args) {
    PyObject *h, *o;
    if (!PyArg_ParseTuple(args, "OO", &h, &o)) return NULL;
    return hidden_to((StateObject *)self, h, o, -1);
}

static PyObject *state_pool(PyObject *self, PyObject *args) {
    PyObject *h, *o;
    int mode;
    if (!PyArg_ParseTuple(args, "OOi", &h, &o, &mode)) return NULL;
    if (mode != TUBELET_POOL_CLS && mode != TUBELET_POOL_MEAN) {
        PyErr_SetString(PyExc_ValueError, "pool mode must be 0 (cls) or 1 (mean)");
        return NULL;
    }
    return hidden_to((StateObject *)self, h, o, mode);
}

/* forward_backward(x, labels) -> loss; the gradients add into the model's */
static PyObject *state_forward_backward(PyObject *self, PyObject *args) {
    StateObject *so = (StateObject *)self;
    PyObject *xo, *yo;
    if (!PyArg_ParseTuple(args, "OO", &xo, &yo)) return NULL;
    tubelet_shape ls;
    tubelet_state_logits_shape(so->s, &ls);
    Py_buffer x, y;
    if (get_buffer(xo, &x, 'f', input_numel(so), 0, "pixel_values")) return NULL;
    if (get_buffer(yo, &y, 'q', ls.dim[0], 0, "labels")) {
        PyBuffer_Release(&x);
        return NULL;
    }
    char err[1024] = "";
    float loss = 0;
    int rc = -1;
    if (!state_acquire(so)) {
        Py_BEGIN_ALLOW_THREADS
        rc = tubelet_forward_backward(so->s, x.buf, y.buf, &loss, NULL, err, sizeof err);
        Py_END_ALLOW_THREADS
        so->busy = 0;
    }
    PyBuffer_Release(&x), PyBuffer_Release(&y);
    if (rc < 0) return NULL;
    if (rc) return raise_status(rc, err);
    return PyFloat_FromDouble(loss);
}

static PyObject *state_matches(PyObject *self, PyObject *args) {
    StateObject *so = (StateObject *)self;
    int B, T, H, W;
    if (!PyArg_ParseTuple(args, "iiii", &B, &T, &H, &W)) return NULL;
    return PyBool_FromLong(so->B == B && so->T == T && so->H == H && so->W == W);
}

static PyMethodDef state_methods[] = {
    {"info", state_info, METH_NOARGS, "Shapes of the outputs for this input shape."},
    {"matches", state_matches, METH_VARARGS, "matches(B, T, H, W)."},
    {"forward", state_forward, METH_VARARGS, "forward(x, logits|None, hidden|None)."},
    {"forward_text", state_forward_text, METH_VARARGS, "forward_text(x, text, n, logits)."},
    {"encode_video", state_encode_video, METH_VARARGS, "encode_video(x, out)."},
    {"forward_hidden", state_forward_hidden, METH_VARARGS, "forward_hidden(x, layer, hidden)."},
    {"forward_features", state_forward_features, METH_VARARGS,
     "forward_features(x, layers|None, outs)."},
    {"feature_map", state_feature_map, METH_VARARGS, "feature_map(hidden, out)."},
    {"pool", state_pool, METH_VARARGS, "pool(hidden, out, mode)."},
    {"forward_backward", state_forward_backward, METH_VARARGS, "forward_backward(x, labels)."},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot state_slots[] = {
    {Py_tp_dealloc, state_dealloc},
    {Py_tp_methods, state_methods},
    {Py_tp_doc, "A tubelet_state: activations for one input shape."},
    {0, NULL},
};
static PyType_Spec state_spec = {"tubelet._tubelet.State", sizeof(StateObject), 0,
                                 Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION, state_slots};

/* ------------------------------------------------------------------ video */

#ifdef TB_PY_VIDEO
typedef struct {
    PyObject_HEAD
    tubelet_preprocessor *pp;
} PreprocObject;

static PyTypeObject *PreprocType;

static void preproc_dealloc(PyObject *self) {
    PyTypeObject *tp = Py_TYPE(self);
    tubelet_preprocessor_free(((PreprocObject *)self)->pp);
    freefunc f = PyType_GetSlot(tp, Py_tp_free);
    f(self);
    Py_DECREF(tp);
}

static PyObject *preproc_json(PyObject *self, PyObject *noargs) {
    (void)noargs;
    char *s = tubelet_preprocessor_to_json(((PreprocObject *)self)->pp);
    if (!s) return PyErr_NoMemory();
    PyObject *r = PyUnicode_FromString(s);
    free(s);
    return r;
}

static PyMethodDef preproc_methods[] = {
    {"to_json", preproc_json, METH_NOARGS, "preprocessor_config.json text."},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot preproc_slots[] = {
    {Py_tp_dealloc, preproc_dealloc},
    {Py_tp_methods, preproc_methods},
    {Py_tp_doc, "A model directory's preprocessing (tubelet_preprocessor)."},
    {0, NULL},
};
static PyType_Spec preproc_spec = {"tubelet._tubelet.Preprocessor", sizeof(PreprocObject), 0,
                                   Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION, preproc_slots};

/* _preprocessor(model_dir) or _preprocessor(None, height, width) */
static PyObject *py_preprocessor(PyObject *mod, PyObject *args) {
    (void)mod;
    const char *dir;
    int h = 224, w = 224;
    if (!PyArg_ParseTuple(args, "z|ii", &dir, &h, &w)) return NULL;
    PreprocObject *po = (PreprocObject *)new_obj(PreprocType);
    if (!po) return NULL;
    logsink *log = logsink_new();
    char err[1024] = "";
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = dir ? tubelet_preprocessor_load(&po->pp, dir, log_cb, log, err, sizeof err)
             : tubelet_preprocessor_default(&po->pp, h, w);
    Py_END_ALLOW_THREADS
    int wrc = logsink_flush(log);
    logsink_free(log);
    if (rc) {
        po->pp = NULL;
        Py_DECREF(po);
        return raise_status(rc, err);
    }
    if (wrc) {
        Py_DECREF(po);
        return NULL;
    }
    return (PyObject *)po;
}

static PyObject *indices_list(const int64_t *idx, int n) {
    PyObject *l = PyList_New(n);
    for (int i = 0; l && i < n; i++) PyList_SetItem(l, i, PyLong_FromLongLong(idx[i]));
    return l;
}

/* A video argument: a path (str, bytes or os.PathLike, as the file system encodes it) or, with
 * data set, a file's bytes in memory (anything with the buffer protocol), decoded through the
 * library's *_memory functions; name is for messages. */
typedef struct {
    PyObject *path;
    Py_buffer buf;
    int data;
    const char *name;
} video_arg;

static int video_arg_get(PyObject *o, int data, const char *name, video_arg *va) {
    memset(va, 0, sizeof *va);
    va->data = data, va->name = name;
    if (data) return PyObject_GetBuffer(o, &va->buf, PyBUF_SIMPLE) < 0 ? -1 : 0;
    return PyUnicode_FSConverter(o, &va->path) ? 0 : -1;
}

static void video_arg_release(video_arg *va) {
    if (va->data) PyBuffer_Release(&va->buf);
    else Py_XDECREF(va->path);
}

/* _read_frames(video, sampling, stride, clips, crops, num_frames, threads, _[, data, name]) ->
 * (rgb Blob, (n, h, w, 3), indices, n_frames, fps, n_padded) */
static PyObject *py_read_frames(PyObject *mod, PyObject *args) {
    (void)mod;
    PyObject *video;
    tubelet_views_params p = tubelet_views_default_params();
    int unused, data = 0;
    const char *name = NULL;
    if (!PyArg_ParseTuple(args, "Osiiiiii|pz", &video, &p.sampling, &p.stride, &p.clips, &p.crops,
                          &p.num_frames, &p.threads, &unused, &data, &name))
        return NULL;
    video_arg va;
    if (video_arg_get(video, data, name, &va)) return NULL;
    logsink *log = logsink_new();
    p.log = log_cb, p.log_user = log;
    tubelet_frames f;
    char err[1024] = "";
    int rc;
    const char *cpath = va.data ? NULL : PyBytes_AsString(va.path);
    Py_BEGIN_ALLOW_THREADS
    rc = va.data ? tubelet_frames_read_memory(&f, va.buf.buf, (size_t)va.buf.len, va.name, &p,
                                              p.num_frames, err, sizeof err)
                 : tubelet_frames_read(&f, cpath, &p, p.num_frames, err, sizeof err);
    Py_END_ALLOW_THREADS
    video_arg_release(&va);
    int wrc = logsink_flush(log);
    logsink_free(log);
    if (rc) return raise_status(rc, err);
    if (wrc) {
        tubelet_frames_free(&f);
        return NULL;
    }
    PyObject *idx = indices_list(f.indices, f.n);
    PyObject *blob = blob_new(f.rgb, (size_t)f.n * f.height * f.width * 3);
    f.rgb = NULL;
    PyObject *r = NULL; /* "N" hands both references to the tuple (or drops them on failure) */
    if (idx && blob)
        r = Py_BuildValue("(N(iiii)NLdi)", blob, f.n, f.height, f.width, 3, idx,
                          (long long)f.n_frames, f.fps, f.n_padded);
    else
        Py_XDECREF(idx), Py_XDECREF(blob);
    tubelet_frames_free(&f);
    return r;
}

/* _views(video, sampling, stride, clips, crops, num_frames, threads, model_frames, preproc[,
 * data, name]) -> (pixels Blob, (views, T, C, H, W), indices, n_frames, fps, (width, height),
 * n_padded) */
static PyObject *py_views(PyObject *mod, PyObject *args) {
    (void)mod;
    PyObject *video, *ppo;
    tubelet_views_params p = tubelet_views_default_params();
    int model_frames, data = 0;
    const char *name = NULL;
    if (!PyArg_ParseTuple(args, "OsiiiiiiO!|pz", &video, &p.sampling, &p.stride, &p.clips,
                          &p.crops, &p.num_frames, &p.threads, &model_frames, PreprocType, &ppo,
                          &data, &name))
        return NULL;
    video_arg va;
    if (video_arg_get(video, data, name, &va)) return NULL;
    logsink *log = logsink_new();
    p.log = log_cb, p.log_user = log;
    tubelet_views v;
    char err[1024] = "";
    int rc;
    const char *cpath = va.data ? NULL : PyBytes_AsString(va.path);
    const tubelet_preprocessor *pp = ((PreprocObject *)ppo)->pp;
    Py_BEGIN_ALLOW_THREADS
    rc = va.data ? tubelet_views_load_memory(&v, va.buf.buf, (size_t)va.buf.len, va.name, pp, &p,
                                             model_frames, err, sizeof err)
                 : tubelet_views_load(&v, cpath, pp, &p, model_frames, err, sizeof err);
    Py_END_ALLOW_THREADS
    video_arg_release(&va);
    int wrc = logsink_flush(log);
    logsink_free(log);
    if (rc) return raise_status(rc, err);
    if (wrc) {
        tubelet_views_free(&v);
        return NULL;
    }
    const int clips = p.clips > 0 ? p.clips : 1;
    PyObject *idx = indices_list(v.indices, clips * v.T);
    PyObject *blob =
        blob_new(v.pixels, sizeof(float) * (size_t)v.n_views * v.T * v.C * v.H * v.W);
    v.pixels = NULL;
    PyObject *r = NULL;
    if (idx && blob)
        r = Py_BuildValue("(N(iiiii)NLd(ii)i)", blob, v.n_views, v.T, v.C, v.H, v.W, idx,
                          (long long)v.n_frames, v.fps, v.width, v.height, v.n_padded);
    else
        Py_XDECREF(idx), Py_XDECREF(blob);
    tubelet_views_free(&v);
    return r;
}

/* _preprocess_frames(preproc, rgb, n, h, w, crop) -> (pixels Blob, (n, 3, H, W)) */
static PyObject *py_preprocess_frames(PyObject *mod, PyObject *args) {
    (void)mod;
    PyObject *ppo, *rgbo;
    int n, h, w, crop;
    if (!PyArg_ParseTuple(args, "O!Oiiii", PreprocType, &ppo, &rgbo, &n, &h, &w, &crop))
        return NULL;
    if (n < 1 || h < 1 || w < 1) {
        PyErr_SetString(PyExc_ValueError, "frames must be (n, height, width, 3) with n, height, "
                                          "width >= 1");
        return NULL;
    }
    const tubelet_preprocessor *pp = ((PreprocObject *)ppo)->pp;
    char err[1024] = "";
    int oh = 0, ow = 0;
    int rc = tubelet_preprocess_frames(pp, NULL, n, h, w, crop, NULL, &oh, &ow, err, sizeof err);
    if (rc) return raise_status(rc, err);
    Py_buffer b;
    if (get_buffer(rgbo, &b, 'B', (int64_t)n * h * w * 3, 0, "frames")) return NULL;
    const size_t bytes = sizeof(float) * (size_t)n * 3 * oh * ow;
    float *out = malloc(bytes);
    if (!out) {
        PyBuffer_Release(&b);
        return PyErr_NoMemory();
    }
    Py_BEGIN_ALLOW_THREADS
    rc = tubelet_preprocess_frames(pp, b.buf, n, h, w, crop, out, &oh, &ow, err, sizeof err);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&b);
    if (rc) {
        free(out);
        return raise_status(rc, err);
    }
    PyObject *blob = blob_new(out, bytes);
    return blob ? Py_BuildValue("(N(iiii))", blob, n, 3, oh, ow) : NULL;
}

/* ---- live sources (tubelet.watch): tubelet_live_* ---- */

typedef struct {
    PyObject_HEAD
    tubelet_live *l;
    logsink *log;
    int T, C, h, w; /* a window: (T, C, h, w) float32, once started */
    int busy;       /* start or next runs without the GIL: close only stops it then */
} LiveObject;

static PyTypeObject *LiveType;

static void live_close_now(LiveObject *lo) {
    if (lo->busy) { /* another thread is in start or next: stop it; a later close frees */
        if (lo->l) tubelet_live_stop(lo->l);
        return;
    }
    tubelet_live *l = lo->l;
    lo->l = NULL;
    if (!l) return;
    Py_BEGIN_ALLOW_THREADS
    tubelet_live_close(l); /* stops and joins the decoder thread */
    Py_END_ALLOW_THREADS
}

static void live_dealloc(PyObject *self) {
    PyTypeObject *tp = Py_TYPE(self);
    LiveObject *lo = (LiveObject *)self;
    live_close_now(lo);
    logsink_free(lo->log);
    freefunc f = PyType_GetSlot(tp, Py_tp_free);
    f(self);
    Py_DECREF(tp);
}

static int live_open(LiveObject *lo) {
    if (lo->l) return 0;
    PyErr_SetString(PyExc_ValueError, "the live source is closed");
    return -1;
}

static int live_busy(LiveObject *lo) {
    if (!lo->busy) return 0;
    PyErr_SetString(PyExc_RuntimeError, "the live source is in use by another thread");
    return -1;
}

/* start(preproc, num_frames, channels, window, stride) -> (fstride, hop, fps, fps_known, h, w):
 * the windows of tubelet_window_plan over the stream's frame rate (25 when it says none). */
static PyObject *live_start(PyObject *self, PyObject *args) {
    LiveObject *lo = (LiveObject *)self;
    PyObject *ppo;
    int T, C;
    double window, stride;
    if (!PyArg_ParseTuple(args, "O!iidd", PreprocType, &ppo, &T, &C, &window, &stride)) return NULL;
    if (live_open(lo) || live_busy(lo)) return NULL;
    double fps = tubelet_live_fps(lo->l);
    const int known = fps > 0;
    if (!known) fps = 25;
    int fstride, hop, h, w, rc;
    tubelet_window_plan(window, stride, fps, T, 0, &fstride, &hop);
    char err[1024] = "";
    const tubelet_preprocessor *pp = ((PreprocObject *)ppo)->pp;
    lo->busy = 1;
    Py_BEGIN_ALLOW_THREADS
    rc = tubelet_live_start(lo->l, pp, T, fstride, hop, &h, &w, err, sizeof err);
    Py_END_ALLOW_THREADS
    lo->busy = 0;
    if (rc) return raise_status(rc, err);
    lo->T = T, lo->C = C, lo->h = h, lo->w = w;
    return Py_BuildValue("(iidiii)", fstride, hop, fps, known, h, w);
}

/* next(pixels) -> None at the end, ("window", t0, t1, arrival, skipped) with the window in
 * pixels (float32, T*C*h*w), or (event, message, attempts, down) for a reconnecting source.
 * fstride and fps are start's. arrival: time.monotonic() seconds. */
static PyObject *live_next(PyObject *self, PyObject *args) {
    LiveObject *lo = (LiveObject *)self;
    PyObject *po;
    int fstride;
    double fps;
    if (!PyArg_ParseTuple(args, "Oid", &po, &fstride, &fps)) return NULL;
    if (live_open(lo) || live_busy(lo)) return NULL;
    if (!lo->T) {
        PyErr_SetString(PyExc_ValueError, "start the live source first");
        return NULL;
    }
    Py_buffer b;
    if (get_buffer(po, &b, 'f', (int64_t)lo->T * lo->C * lo->h * lo->w, 1, "pixels")) return NULL;
    tubelet_live_item it;
    char err[1024] = "";
    int got;
    lo->busy = 1;
    Py_BEGIN_ALLOW_THREADS
    got = tubelet_live_next(lo->l, b.buf, &it, err, sizeof err);
    Py_END_ALLOW_THREADS
    lo->busy = 0;
    PyBuffer_Release(&b);
    if (logsink_flush(lo->log)) return NULL;
    if (got < 0) return raise_status(-got, err);
    if (got == 0) Py_RETURN_NONE;
    if (it.kind == TUBELET_LIVE_WINDOW) {
        double t0, t1;
        tubelet_window_span(it.first, it.n_real, fstride, fps, &t0, &t1);
        return Py_BuildValue("(sdddL)", "window", t0, t1, it.arrival, (long long)it.skipped);
    }
    return Py_BuildValue("(ssid)", it.kind == TUBELET_LIVE_RECONNECTED ? "reconnected"
                         : "disconnected", it.message, it.attempts, it.down);
}

static PyObject *live_close(PyObject *self, PyObject *noargs) {
    (void)noargs;
    live_close_now((LiveObject *)self);
    Py_RETURN_NONE;
}

static PyMethodDef live_methods[] = {
    {"start", live_start, METH_VARARGS, "start(preproc, T, C, window, stride)."},
    {"next", live_next, METH_VARARGS, "next(pixels, fstride, fps): the next window or event."},
    {"close", live_close, METH_NOARGS, "Stops the decoder thread and closes the source."},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot live_slots[] = {
    {Py_tp_dealloc, live_dealloc},
    {Py_tp_methods, live_methods},
    {Py_tp_doc, "A live source (tubelet_live): windows as a stream arrives."},
    {0, NULL},
};
static PyType_Spec live_spec = {"tubelet._tubelet.Live", sizeof(LiveObject), 0,
                                Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION, live_slots};

/* _live(source, threads, realtime, reconnect, reconnect_tries, timeout) -> Live, connected
 * (a network source waits for its stream up to timeout, without the GIL) */
static PyObject *py_live(PyObject *mod, PyObject *args) {
    (void)mod;
    const char *source;
    tubelet_live_params p = tubelet_live_default_params();
    if (!PyArg_ParseTuple(args, "siiiid", &source, &p.threads, &p.realtime, &p.reconnect,
                          &p.reconnect_tries, &p.timeout))
        return NULL;
    LiveObject *lo = (LiveObject *)new_obj(LiveType);
    if (!lo) return NULL;
    lo->l = NULL, lo->T = 0;
    if (!(lo->log = logsink_new())) {
        Py_DECREF(lo);
        return PyErr_NoMemory();
    }
    p.log = log_cb, p.log_user = lo->log;
    char err[1024] = "";
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = tubelet_live_new(&lo->l, source, &p, err, sizeof err);
    if (!rc) rc = tubelet_live_connect(lo->l, err, sizeof err);
    Py_END_ALLOW_THREADS
    if (logsink_flush(lo->log) || (rc && !raise_status(rc, err))) {
        Py_DECREF(lo);
        return NULL;
    }
    return (PyObject *)lo;
}
#endif

/* ------------------------------------------------------------------ module */

static PyObject *py_arch_names(PyObject *mod, PyObject *noargs) {
    (void)mod, (void)noargs;
    PyObject *l = PyList_New(0);
    for (int i = 0; l && tubelet_arch_name(i); i++) {
        PyObject *s = PyUnicode_FromString(tubelet_arch_name(i));
        if (!s || PyList_Append(l, s)) {
            Py_XDECREF(s);
            Py_DECREF(l);
            return NULL;
        }
        Py_DECREF(s);
    }
    return l;
}

static PyObject *py_precision_parse(PyObject *mod, PyObject *args) {
    (void)mod;
    const char *s;
    if (!PyArg_ParseTuple(args, "s", &s)) return NULL;
    return PyLong_FromLong(tubelet_precision_parse(s));
}

static PyObject *py_gemm_backend(PyObject *mod, PyObject *noargs) {
    (void)mod, (void)noargs;
    return str_or_none(tubelet_gemm_backend());
}

static PyObject *py_max_threads(PyObject *mod, PyObject *noargs) {
    (void)mod, (void)noargs;
    return PyLong_FromLong(tubelet_max_threads());
}

static PyMethodDef module_methods[] = {
    {"_load", py_load, METH_VARARGS, "Loads or builds a model (see tubelet.load)."},
    {"_state", py_state, METH_VARARGS, "A state for one input shape."},
    {"arch_names", py_arch_names, METH_NOARGS, "Names of the built-in architectures."},
    {"precision_parse", py_precision_parse, METH_VARARGS, "'fp32' | 'bf16' | 'int8' -> code."},
    {"gemm_backend", py_gemm_backend, METH_NOARGS, "The GEMM library in use."},
    {"max_threads", py_max_threads, METH_NOARGS, "The most threads a model takes."},
#ifdef TB_PY_VIDEO
    {"_preprocessor", py_preprocessor, METH_VARARGS, "A model directory's preprocessing."},
    {"_read_frames", py_read_frames, METH_VARARGS, "Decodes sampled frames."},
    {"_views", py_views, METH_VARARGS, "Decodes and preprocesses a video."},
    {"_preprocess_frames", py_preprocess_frames, METH_VARARGS, "Preprocesses RGB frames."},
    {"_live", py_live, METH_VARARGS, "Opens a live source (see tubelet.watch)."},
#endif
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_tubelet", "The C binding of tubelet (use the tubelet package).", -1,
    module_methods,        NULL,       NULL,
    NULL,                  NULL,
};

static PyTypeObject *add_type(PyObject *m, PyType_Spec *spec, const char *name) {
    PyTypeObject *t = (PyTypeObject *)PyType_FromSpec(spec);
    if (!t) return NULL;
    Py_INCREF((PyObject *)t);
    if (PyModule_AddObject(m, name, (PyObject *)t)) {
        Py_DECREF((PyObject *)t), Py_DECREF((PyObject *)t);
        return NULL;
    }
    return t;
}

PyMODINIT_FUNC PyInit__tubelet(void) {
    PyObject *m = PyModule_Create(&module_def);
    if (!m) return NULL;
    Error = PyErr_NewExceptionWithDoc(
        "tubelet.Error",
        "An error the tubelet library reported: its message names the file and the problem;\n"
        "``status`` is the kind ('io', 'format', 'config', 'shape', 'value', ...).",
        PyExc_RuntimeError, NULL);
    if (!Error) goto fail;
    Py_INCREF(Error);
    if (PyModule_AddObject(m, "Error", Error)) goto fail;
    if (!(BlobType = add_type(m, &blob_spec, "Blob")) ||
        !(ModelType = add_type(m, &model_spec, "Model")) ||
        !(StateType = add_type(m, &state_spec, "State")))
        goto fail;
#ifdef TB_PY_VIDEO
    if (!(PreprocType = add_type(m, &preproc_spec, "Preprocessor")) ||
        !(LiveType = add_type(m, &live_spec, "Live")))
        goto fail;
    if (PyModule_AddIntConstant(m, "HAVE_VIDEO", 1)) goto fail;
#else
    if (PyModule_AddIntConstant(m, "HAVE_VIDEO", 0)) goto fail;
#endif
    if (PyModule_AddStringConstant(m, "VERSION", TUBELET_VERSION)) goto fail;
    return m;
fail:
    Py_DECREF(m);
    return NULL;
}
