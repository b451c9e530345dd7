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
 * current context, a tensor whose address no map was taught for, an argument whose reading
 * raised) returns NotImplemented and the Python path runs the call and says what is wrong.
 * An error of the call itself (allocating an output, reading the stream, the launch) raises.
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

void *tc_address(PyObject *o);   /* fastlaunch.c: a Python int as an address */

static void fastcall_dealloc(FastCall *self) {
  Py_XDECREF(self->tensor_type); Py_XDECREF(self->stream_fn); Py_XDECREF(self->device);
  Py_XDECREF(self->specs); Py_XDECREF(self->makers); Py_XDECREF(self->fail);
  PyMem_Free(self->launches); PyMem_Free(self->patches); PyMem_Free(self->maps);
  PyMem_Free(self->argv); free(self->buffer);
  Py_TYPE(self)->tp_free((PyObject *)self);
}

static int no_memory(void) {
  PyErr_NoMemory();
  return -1;
}

static int read_launches(FastCall *self, PyObject *seq) {
  self->nlaunches = PyTuple_GET_SIZE(seq);
  self->launches = PyMem_Calloc(self->nlaunches ? self->nlaunches : 1, sizeof(launch_t));
  if (!self->launches) return no_memory();
  for (Py_ssize_t i = 0; i < self->nlaunches; ++i) {
    PyObject *function;
    launch_t *l = &self->launches[i];
    if (!PyArg_ParseTuple(PyTuple_GET_ITEM(seq, i), "OIIIIIII", &function, &l->dims[0],
                          &l->dims[1], &l->dims[2], &l->dims[3], &l->dims[4], &l->dims[5],
                          &l->dims[6]))
      return -1;
    l->function = tc_address(function);
    if (PyErr_Occurred()) return -1;
  }
  return 0;
}

/* A source is argument s (a tensor's spec) or output -1 - s. */
static int valid_source(FastCall *self, Py_ssize_t s) {
  if (s >= 0)
    return s < self->nargs && !PyType_Check(PyTuple_GET_ITEM(PyTuple_GET_ITEM(self->specs, s), 0));
  return -1 - s < self->nouts;
}

/* (offset, source) pairs whose `size` bytes at offset lie inside an image of `len` bytes. */
static int read_pairs(FastCall *self, PyObject *seq, Py_ssize_t stride, Py_ssize_t *count,
                      char **out, Py_ssize_t size, Py_ssize_t len) {
  *count = PyTuple_GET_SIZE(seq);
  *out = PyMem_Calloc(*count ? *count : 1, stride);
  if (!*out) return no_memory();
  for (Py_ssize_t i = 0; i < *count; ++i) {
    patch_t *p = (patch_t *)(*out + i * stride);  /* map_t starts with the same two fields */
    if (!PyArg_ParseTuple(PyTuple_GET_ITEM(seq, i), "nn", &p->offset, &p->source)) return -1;
    if (p->offset < 0 || len < size || p->offset > len - size || !valid_source(self, p->source)) {
      PyErr_SetString(PyExc_ValueError, "FastCall: a slot outside the argument image, or a "
                                        "source that is neither a tensor argument nor an output");
      return -1;
    }
  }
  return 0;
}

/* specs: (dtype, shape) or (type, value) 2-tuples; makers: (callable, index of a tensor). */
static int valid_specs(FastCall *self) {
  for (Py_ssize_t i = 0; i < self->nargs; ++i) {
    PyObject *spec = PyTuple_GET_ITEM(self->specs, i);
    if (!PyTuple_Check(spec) || PyTuple_GET_SIZE(spec) != 2) goto bad;
  }
  for (Py_ssize_t k = 0; k < self->nouts; ++k) {
    PyObject *maker = PyTuple_GET_ITEM(self->makers, k);
    if (!PyTuple_Check(maker) || PyTuple_GET_SIZE(maker) != 2) goto bad;
    Py_ssize_t like = PyLong_AsSsize_t(PyTuple_GET_ITEM(maker, 1));
    if (PyErr_Occurred()) return -1;
    if (like < 0 || !valid_source(self, like)) goto bad;
  }
  return 0;
bad:
  PyErr_SetString(PyExc_ValueError, "FastCall: specs are 2-tuples, makers (callable, the index "
                                    "of a tensor argument)");
  return -1;
}

static int fastcall_init(FastCall *self, PyObject *args, PyObject *kwargs) {
  PyObject *tensor_type, *stream_fn, *get_context, *launch, *context, *specs, *makers,
      *launches, *slots, *patches, *maps, *fail;
  long device_index;
  Py_buffer image;
  (void)kwargs;
  if (self->buffer) {
    PyErr_SetString(PyExc_RuntimeError, "FastCall: already initialised");
    return -1;
  }
  if (!PyArg_ParseTuple(args, "OOlOOOO!O!O!y*O!O!O!O", &tensor_type, &stream_fn,
                        &device_index, &get_context, &launch, &context, &PyTuple_Type, &specs,
                        &PyTuple_Type, &makers, &PyTuple_Type, &launches, &image, &PyTuple_Type,
                        &slots, &PyTuple_Type, &patches, &PyTuple_Type, &maps, &fail))
    return -1;
  /* owned from here on: dealloc releases whatever init got to */
  self->tensor_type = Py_NewRef(tensor_type);
  self->stream_fn = Py_NewRef(stream_fn);
  self->specs = Py_NewRef(specs);
  self->makers = Py_NewRef(makers);
  self->fail = Py_NewRef(fail);
  self->device_index = device_index;
  self->nargs = PyTuple_GET_SIZE(specs);
  self->nouts = PyTuple_GET_SIZE(makers);
  int failed = !(self->device = PyLong_FromLong(device_index));
  if (!failed) {
    self->get_context = (get_context_fn)tc_address(get_context);
    failed = PyErr_Occurred() != NULL;
  }
  if (!failed) {
    self->launch = (launch_fn)tc_address(launch);
    failed = PyErr_Occurred() != NULL;
  }
  if (!failed) {
    self->context = tc_address(context);
    failed = PyErr_Occurred() != NULL;
  }
  if (!failed && PyTuple_GET_SIZE(maps) > MAX_MAPS) {
    PyErr_Format(PyExc_ValueError, "FastCall: more than %d tensor maps", MAX_MAPS);
    failed = 1;
  }
  failed = failed || valid_specs(self) || read_launches(self, launches) ||
           read_pairs(self, patches, sizeof(patch_t), &self->npatches, (char **)&self->patches,
                      8, image.len) ||
           read_pairs(self, maps, sizeof(map_t), &self->nmaps, (char **)&self->maps, MAP_BYTES,
                      image.len);
  Py_ssize_t nslots = PyTuple_GET_SIZE(slots);
  void **argv = NULL;
  unsigned char *buffer = NULL;
  /* 64-byte aligned: a TMA tensor map parameter is passed by value at such a boundary */
  if (!failed && (posix_memalign((void **)&buffer, 64, image.len ? image.len : 8) ||
                  !(argv = PyMem_Calloc(nslots ? nslots : 1, sizeof(void *))))) {
    PyErr_NoMemory();
    failed = 1;
  }
  for (Py_ssize_t i = 0; !failed && i < nslots; ++i) {
    Py_ssize_t offset = PyLong_AsSsize_t(PyTuple_GET_ITEM(slots, i));
    failed = PyErr_Occurred() != NULL;
    if (!failed && (offset < 0 || image.len < 8 || offset > image.len - 8)) {
      PyErr_SetString(PyExc_ValueError, "FastCall: a slot outside the argument image");
      failed = 1;
    }
    if (!failed) argv[i] = buffer + offset;
  }
  if (!failed) {
    memcpy(buffer, image.buf, image.len);
    self->buffer = buffer;   /* set last: a FastCall with a buffer is a complete one */
    self->argv = argv;
  } else {
    free(buffer);
    PyMem_Free(argv);
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
    if (ok) *address = (uintptr_t)tc_address(v);
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
  if (!self->buffer || !PyTuple_Check(args) || PyTuple_GET_SIZE(args) != self->nargs)
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
      if (PyFloat_CheckExact(a)) {   /* by its bits: -0.0 is not 0.0 to a kernel */
        double x = PyFloat_AS_DOUBLE(a), y = PyFloat_AsDouble(PyTuple_GET_ITEM(spec, 1));
        if (PyErr_Occurred() || memcmp(&x, &y, sizeof x)) { PyErr_Clear(); MISS(); }
        continue;
      }
      int same = PyObject_RichCompareBool(a, PyTuple_GET_ITEM(spec, 1), Py_EQ);
      if (same != 1) { PyErr_Clear(); MISS(); }
    } else if (!tensor_fits(self, a, spec, &addresses[i])) {
      MISS();
    }
  }
  int chosen[MAX_MAPS];
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
      addresses[self->nargs + k] = (uintptr_t)tc_address(v);
      Py_DECREF(v);
      if (PyErr_Occurred()) goto done;
    }
  }
  PyObject *s = PyObject_CallOneArg(self->stream_fn, self->device);
  if (!s) goto done;
  void *stream = tc_address(s);
  Py_DECREF(s);
  if (PyErr_Occurred()) goto done;
  /* from here to the launches' end nothing calls into Python: no other thread runs (nor
   * teaches a map: the ways are chosen here, after the last call that may let one run) */
  void *current = NULL;
  if (self->get_context(&current) != 0 || current != self->context ||
      !maps_known(self, addresses, 0, chosen) || !maps_known(self, addresses, 1, chosen))
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
