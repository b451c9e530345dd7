/* A whole kernel call in C, for calls whose arguments look like an earlier call's.
 *
 * The Python call path (call_cache.py, program.PreparedCall) reads each tensor's look, finds
 * the call's plan, allocates the outputs, packs the addresses and launches: several
 * microseconds of interpreted code, as long as a small kernel runs. A FastCall is that plan
 * made concrete once the Python path has run it: what every argument must look like, how each
 * output is made, the packed argument buffer of the launches and which of its slots take which
 * tensor's address. A call checks the look (exact torch.Tensor type, no autograd, dtype, shape,
 * contiguity, device), allocates the outputs, writes the addresses into the slots, reads
 * torch's current stream of the device and launches; anything else (another look, another
 * current context, a tensor whose address a TMA tensor map holds has moved, an error) returns
 * NotImplemented and the Python path runs the call and says what is wrong.
 *
 * The argument buffer is this object's own and written only while the GIL is held: the
 * writes and the launches come after the last call into Python, so no other thread runs
 * between them (the driver copies the arguments at the launch).
 *
 *   FastCall(tensor_type, stream_fn, device, get_context, launch, context, specs, makers,
 *            launches, image, slots, patches, maps, fail)
 *     specs:    per argument (dtype, shape tuple) for a tensor, (type, value) for a scalar
 *     makers:   per output (callable, argument index): callable(args[index]) makes it
 *     launches: per launch (function, gx, gy, gz, bx, by, bz, dynamic shared bytes)
 *     image:    the packed argument buffer (bytes); slots: each parameter's offset in it
 *     patches:  (offset, source): the slot takes the source's address every call
 *     maps:     (offset, source): the slot holds a TMA tensor map of the source, taken from
 *               the maps `learn` was given for the source's address at this call
 *     sources:  an argument index >= 0, or -1 - k for output k
 *     fail:     fail(code, launch index) raises the launch's error
 *   .run(args) -> the outputs (None, one tensor, or a list), or NotImplemented
 *   .learn(map index, address, 128 bytes): the map for the source at that address; the last
 *               MAP_WAYS addresses of each map are kept (a loop's outputs take turns between
 *               a few blocks of torch's allocator)
 *   .hits      -> calls served
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef int (*get_context_fn)(void **);
typedef int (*launch_fn)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                         unsigned, void *, void **, void **);

typedef struct { void *function; unsigned dims[7]; } launch_t;
typedef struct { Py_ssize_t offset, source; } patch_t;
#define MAP_BYTES 128
#define MAP_WAYS 8
#define MAX_MAPS 32
typedef struct {
  Py_ssize_t offset, source;
  int known, next;
  uintptr_t address[MAP_WAYS];
  unsigned char bytes[MAP_WAYS][MAP_BYTES];
} map_t;

typedef struct {
  PyObject_HEAD
  PyObject *tensor_type, *stream_fn, *device, *specs, *makers, *fail;
  long device_index;
  get_context_fn get_context;
  launch_fn launch;
  void *context;
  Py_ssize_t nargs, nouts, nlaunches, npatches, nmaps;
  launch_t *launches;
  patch_t *patches;
  map_t *maps;
  unsigned char *buffer;
  void **argv;
  unsigned long long hits;
} FastCall;

static PyObject *s_requires_grad, *s_dtype, *s_shape, *s_is_contiguous, *s_get_device,
    *s_data_ptr;

static void *as_address(PyObject *o) { return (void *)(uintptr_t)PyLong_AsUnsignedLongLong(o); }

static void fastcall_dealloc(FastCall *self) {
  Py_XDECREF(self->tensor_type); Py_XDECREF(self->stream_fn); Py_XDECREF(self->device);
  Py_XDECREF(self->specs); Py_XDECREF(self->makers); Py_XDECREF(self->fail);
  PyMem_Free(self->launches); PyMem_Free(self->patches); PyMem_Free(self->maps);
  PyMem_Free(self->argv); free(self->buffer);
  Py_TYPE(self)->tp_free((PyObject *)self);
}

/* Each tuple of `seq` unpacked by `format` into the fields `fill` writes. */
static int read_launches(FastCall *self, PyObject *seq) {
  self->nlaunches = PyTuple_GET_SIZE(seq);
  self->launches = PyMem_Calloc(self->nlaunches ? self->nlaunches : 1, sizeof(launch_t));
  if (!self->launches) return -1;
  for (Py_ssize_t i = 0; i < self->nlaunches; ++i) {
    PyObject *function;
    launch_t *l = &self->launches[i];
    if (!PyArg_ParseTuple(PyTuple_GET_ITEM(seq, i), "OIIIIIII", &function, &l->dims[0],
                          &l->dims[1], &l->dims[2], &l->dims[3], &l->dims[4], &l->dims[5],
                          &l->dims[6]))
      return -1;
    l->function = as_address(function);
    if (PyErr_Occurred()) return -1;
  }
  return 0;
}

static int read_patches(PyObject *seq, Py_ssize_t *count, patch_t **out) {
  *count = PyTuple_GET_SIZE(seq);
  *out = PyMem_Calloc(*count ? *count : 1, sizeof(patch_t));
  if (!*out) return -1;
  for (Py_ssize_t i = 0; i < *count; ++i)
    if (!PyArg_ParseTuple(PyTuple_GET_ITEM(seq, i), "nn", &(*out)[i].offset, &(*out)[i].source))
      return -1;
  return 0;
}

static int read_maps(FastCall *self, PyObject *seq) {
  self->nmaps = PyTuple_GET_SIZE(seq);
  if (self->nmaps > MAX_MAPS) {
    PyErr_Format(PyExc_ValueError, "FastCall: more than %d tensor maps", MAX_MAPS);
    return -1;
  }
  self->maps = PyMem_Calloc(self->nmaps ? self->nmaps : 1, sizeof(map_t));
  if (!self->maps) return -1;
  for (Py_ssize_t i = 0; i < self->nmaps; ++i)
    if (!PyArg_ParseTuple(PyTuple_GET_ITEM(seq, i), "nn", &self->maps[i].offset,
                          &self->maps[i].source))
      return -1;
  return 0;
}

static int fastcall_init(FastCall *self, PyObject *args, PyObject *kwargs) {
  PyObject *get_context, *launch, *context, *launches, *slots, *patches, *maps;
  Py_buffer image;
  if (!PyArg_ParseTuple(args, "OOlOOOO!O!O!y*O!O!O!O", &self->tensor_type, &self->stream_fn,
                        &self->device_index, &get_context, &launch, &context, &PyTuple_Type,
                        &self->specs, &PyTuple_Type, &self->makers, &PyTuple_Type, &launches,
                        &image, &PyTuple_Type, &slots, &PyTuple_Type, &patches, &PyTuple_Type,
                        &maps, &self->fail))
    return -1;
  Py_INCREF(self->tensor_type); Py_INCREF(self->stream_fn); Py_INCREF(self->specs);
  Py_INCREF(self->makers); Py_INCREF(self->fail);
  self->device = PyLong_FromLong(self->device_index);
  self->get_context = (get_context_fn)as_address(get_context);
  self->launch = (launch_fn)as_address(launch);
  self->context = as_address(context);
  self->nargs = PyTuple_GET_SIZE(self->specs);
  self->nouts = PyTuple_GET_SIZE(self->makers);
  int failed = PyErr_Occurred() || !self->device || read_launches(self, launches) ||
               read_patches(patches, &self->npatches, &self->patches) || read_maps(self, maps);
  Py_ssize_t nslots = PyTuple_GET_SIZE(slots);
  /* 64-byte aligned: a TMA tensor map parameter is passed by value at such a boundary */
  if (!failed && posix_memalign((void **)&self->buffer, 64, image.len ? image.len : 8)) {
    PyErr_NoMemory();
    failed = 1;
  }
  if (!failed) {
    memcpy(self->buffer, image.buf, image.len);
    self->argv = PyMem_Calloc(nslots ? nslots : 1, sizeof(void *));
    failed = !self->argv;
    for (Py_ssize_t i = 0; !failed && i < nslots; ++i) {
      Py_ssize_t offset = PyLong_AsSsize_t(PyTuple_GET_ITEM(slots, i));
      failed = offset < 0 || offset >= image.len;
      if (!failed) self->argv[i] = self->buffer + offset;
    }
    for (Py_ssize_t i = 0; !failed && i < self->npatches; ++i)
      failed = self->patches[i].offset < 0 || self->patches[i].offset + 8 > image.len;
    for (Py_ssize_t i = 0; !failed && i < self->nmaps; ++i)
      failed = self->maps[i].offset < 0 || self->maps[i].offset + MAP_BYTES > image.len;
    if (failed && !PyErr_Occurred())
      PyErr_SetString(PyExc_ValueError, "FastCall: a slot outside the argument image");
  }
  PyBuffer_Release(&image);
  return failed ? -1 : 0;
}

/* 1: `a` is a tensor of the spec's look on this device, its address in *address; 0: it is
 * not (or reading it raised: the Python path will raise again and say why). */
static int tensor_fits(FastCall *self, PyObject *a, PyObject *spec, uintptr_t *address) {
  if (Py_TYPE(a) != (PyTypeObject *)self->tensor_type) return 0;
  PyObject *v = PyObject_GetAttr(a, s_requires_grad);
  int ok = v == Py_False;
  Py_XDECREF(v);
  if (ok) {
    v = PyObject_GetAttr(a, s_dtype);
    ok = v == PyTuple_GET_ITEM(spec, 0);
    Py_XDECREF(v);
  }
  if (ok) {
    v = PyObject_GetAttr(a, s_shape);
    ok = v && PyObject_RichCompareBool(v, PyTuple_GET_ITEM(spec, 1), Py_EQ) == 1;
    Py_XDECREF(v);
  }
  if (ok) {
    v = PyObject_CallMethodNoArgs(a, s_is_contiguous);
    ok = v == Py_True;
    Py_XDECREF(v);
  }
  if (ok) {
    v = PyObject_CallMethodNoArgs(a, s_get_device);
    ok = v && PyLong_AsLong(v) == self->device_index;
    Py_XDECREF(v);
  }
  if (ok) {
    v = PyObject_CallMethodNoArgs(a, s_data_ptr);
    ok = v != NULL;
    if (ok) *address = (uintptr_t)as_address(v);
    Py_XDECREF(v);
  }
  if (PyErr_Occurred()) {
    PyErr_Clear();
    ok = 0;
  }
  return ok;
}

/* Each map of the outputs (or of the arguments) given the way its table holds for the
 * source's address now, in chosen[]; 0 when one has none (the Python path encodes it). */
static int maps_known(FastCall *self, const uintptr_t *addresses, int outputs, int *chosen) {
  for (Py_ssize_t i = 0; i < self->nmaps; ++i) {
    map_t *m = &self->maps[i];
    if ((m->source < 0) != outputs) continue;
    uintptr_t address = addresses[m->source < 0 ? self->nargs - 1 - m->source : m->source];
    chosen[i] = -1;
    for (int w = 0; w < m->known; ++w)
      if (m->address[w] == address) chosen[i] = w;
    if (chosen[i] < 0) return 0;
  }
  return 1;
}

#define MISS() do { result = Py_NewRef(Py_NotImplemented); goto done; } while (0)

static PyObject *fastcall_run(FastCall *self, PyObject *args) {
  if (!PyTuple_Check(args) || PyTuple_GET_SIZE(args) != self->nargs)
    Py_RETURN_NOTIMPLEMENTED;
  /* addresses of the arguments, then of the outputs (source -1 - k at nargs + k) */
  uintptr_t stack[32], *addresses = stack;
  PyObject *outputs = NULL, *result = NULL;
  Py_ssize_t total = self->nargs + self->nouts;
  if (total > 32 && !(addresses = PyMem_Malloc(total * sizeof(uintptr_t))))
    return PyErr_NoMemory();
  for (Py_ssize_t i = 0; i < self->nargs; ++i) {
    PyObject *a = PyTuple_GET_ITEM(args, i), *spec = PyTuple_GET_ITEM(self->specs, i);
    PyObject *kind = PyTuple_GET_ITEM(spec, 0);
    addresses[i] = 0;
    if (PyType_Check(kind)) {  /* a scalar: its exact type and value */
      if ((PyObject *)Py_TYPE(a) != kind) MISS();
      int same = PyObject_RichCompareBool(a, PyTuple_GET_ITEM(spec, 1), Py_EQ);
      if (same != 1) { PyErr_Clear(); MISS(); }
    } else if (!tensor_fits(self, a, spec, &addresses[i])) {
      MISS();
    }
  }
  int chosen[MAX_MAPS];
  void *current = NULL;
  if (self->get_context(&current) != 0 || current != self->context) MISS();
  if (self->nouts) {
    outputs = PyList_New(self->nouts);
    if (!outputs) goto done;
    for (Py_ssize_t k = 0; k < self->nouts; ++k) {
      PyObject *maker = PyTuple_GET_ITEM(self->makers, k);
      Py_ssize_t like = PyLong_AsSsize_t(PyTuple_GET_ITEM(maker, 1));
      PyObject *made = PyObject_CallOneArg(PyTuple_GET_ITEM(maker, 0),
                                           PyTuple_GET_ITEM(args, like));
      if (!made) goto done;
      PyList_SET_ITEM(outputs, k, made);
      PyObject *v = PyObject_CallMethodNoArgs(made, s_data_ptr);
      if (!v) goto done;
      addresses[self->nargs + k] = (uintptr_t)as_address(v);
      Py_DECREF(v);
      if (PyErr_Occurred()) goto done;
    }
  }
  PyObject *s = PyObject_CallOneArg(self->stream_fn, self->device);
  if (!s) goto done;
  void *stream = as_address(s);
  Py_DECREF(s);
  if (PyErr_Occurred()) goto done;
  /* from here to the launches' end nothing calls into Python: no other thread runs (nor
   * teaches a map: the ways are chosen here, after the last call that may let one run) */
  if (!maps_known(self, addresses, 0, chosen) || !maps_known(self, addresses, 1, chosen))
    MISS();
  for (Py_ssize_t i = 0; i < self->npatches; ++i) {
    Py_ssize_t src = self->patches[i].source;
    uint64_t address = addresses[src < 0 ? self->nargs - 1 - src : src];
    memcpy(self->buffer + self->patches[i].offset, &address, sizeof address);
  }
  for (Py_ssize_t i = 0; i < self->nmaps; ++i)
    memcpy(self->buffer + self->maps[i].offset, self->maps[i].bytes[chosen[i]], MAP_BYTES);
  for (Py_ssize_t i = 0; i < self->nlaunches; ++i) {
    launch_t *l = &self->launches[i];
    int code = self->launch(l->function, l->dims[0], l->dims[1], l->dims[2], l->dims[3],
                            l->dims[4], l->dims[5], l->dims[6], stream, self->argv, NULL);
    if (code != 0) {
      PyObject *raised = PyObject_CallFunction(self->fail, "in", code, i);
      Py_XDECREF(raised);
      if (!PyErr_Occurred())
        PyErr_Format(PyExc_RuntimeError, "kernel launch %zd failed with CUresult %d", i, code);
      goto done;
    }
  }
  self->hits++;
  if (self->nouts == 0) result = Py_NewRef(Py_None);
  else if (self->nouts == 1) result = Py_NewRef(PyList_GET_ITEM(outputs, 0));
  else result = Py_NewRef(outputs);
done:
  Py_XDECREF(outputs);
  if (addresses != stack) PyMem_Free(addresses);
  return result;
}

static PyObject *fastcall_learn(FastCall *self, PyObject *args) {
  Py_ssize_t index;
  unsigned long long address;
  Py_buffer bytes;
  if (!PyArg_ParseTuple(args, "nKy*", &index, &address, &bytes)) return NULL;
  if (index < 0 || index >= self->nmaps || bytes.len != MAP_BYTES) {
    PyBuffer_Release(&bytes);
    PyErr_SetString(PyExc_ValueError, "learn(map index, address, the map's 128 bytes)");
    return NULL;
  }
  map_t *m = &self->maps[index];
  int way = -1;
  for (int w = 0; w < m->known; ++w)
    if (m->address[w] == (uintptr_t)address) way = w;
  if (way < 0) {
    way = m->next;
    m->next = (m->next + 1) % MAP_WAYS;
    if (m->known < MAP_WAYS) m->known++;
  }
  m->address[way] = (uintptr_t)address;
  memcpy(m->bytes[way], bytes.buf, MAP_BYTES);
  PyBuffer_Release(&bytes);
  Py_RETURN_NONE;
}

static PyObject *fastcall_hits(FastCall *self, void *closure) {
  return PyLong_FromUnsignedLongLong(self->hits);
}

static PyMethodDef fastcall_methods[] = {
    {"run", (PyCFunction)fastcall_run, METH_O, "the call, or NotImplemented for the Python path"},
    {"learn", (PyCFunction)fastcall_learn, METH_VARARGS, "a tensor map for an address"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef fastcall_getset[] = {
    {"hits", (getter)fastcall_hits, NULL, "calls served", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject FastCallType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "_tc_fastlaunch.FastCall",
    .tp_basicsize = sizeof(FastCall),
    .tp_dealloc = (destructor)fastcall_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_methods = fastcall_methods,
    .tp_getset = fastcall_getset,
    .tp_init = (initproc)fastcall_init,
    .tp_new = PyType_GenericNew,
};

int tc_add_fastcall(PyObject *module) {
  if (!(s_requires_grad = PyUnicode_InternFromString("requires_grad")) ||
      !(s_dtype = PyUnicode_InternFromString("dtype")) ||
      !(s_shape = PyUnicode_InternFromString("shape")) ||
      !(s_is_contiguous = PyUnicode_InternFromString("is_contiguous")) ||
      !(s_get_device = PyUnicode_InternFromString("get_device")) ||
      !(s_data_ptr = PyUnicode_InternFromString("data_ptr")) ||
      PyType_Ready(&FastCallType) < 0)
    return -1;
  Py_INCREF(&FastCallType);
  return PyModule_AddObject(module, "FastCall", (PyObject *)&FastCallType);
}
