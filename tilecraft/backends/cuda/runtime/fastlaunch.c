/* The launch path's two driver calls made from C: a ctypes call costs several microseconds of
 * argument conversion on a slow host, as long as a small kernel runs. The driver's entry points
 * come in as addresses (the ctypes library's), so this module links nothing but Python.
 *
 *   current_context(cuCtxGetCurrent address) -> the current CUcontext, 0 for none or an error
 *   launch(cuLaunchKernel address, function, gx, gy, gz, bx, by, bz, smem, stream, argv)
 *       -> the CUresult; every argument a Python int (argv: the address of the void* array)
 *   FastCall: a whole call of a kernel, for calls that look like an earlier one (fastcall.c)
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

typedef int (*get_context_fn)(void **);
typedef int (*launch_fn)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                         unsigned, void *, void **, void **);

/* A Python int as an address (fastcall.c uses it too). */
void *tc_address(PyObject *o) {
  return (void *)(uintptr_t)PyLong_AsUnsignedLongLong(o);
}

static unsigned dimension(PyObject *o) {
  unsigned long v = PyLong_AsUnsignedLong(o);
  if (v > 0xffffffffUL && !PyErr_Occurred())
    PyErr_SetString(PyExc_OverflowError, "launch dimension over 32 bits");
  return (unsigned)v;
}

static PyObject *current_context(PyObject *self, PyObject *const *args, Py_ssize_t n) {
  if (n != 1) {
    PyErr_SetString(PyExc_TypeError, "current_context takes the cuCtxGetCurrent address");
    return NULL;
  }
  get_context_fn get = (get_context_fn)tc_address(args[0]);
  if (PyErr_Occurred()) return NULL;
  void *context = NULL;
  if (get(&context) != 0) context = NULL;
  return PyLong_FromUnsignedLongLong((unsigned long long)(uintptr_t)context);
}

static PyObject *launch(PyObject *self, PyObject *const *args, Py_ssize_t n) {
  if (n != 11) {
    PyErr_SetString(PyExc_TypeError, "launch takes 11 arguments");
    return NULL;
  }
  launch_fn call = (launch_fn)tc_address(args[0]);
  void *function = tc_address(args[1]);
  unsigned dims[7];
  for (int i = 0; i < 7; ++i) dims[i] = dimension(args[2 + i]);
  void *stream = tc_address(args[9]);
  void **argv = (void **)tc_address(args[10]);
  if (PyErr_Occurred()) return NULL;
  int code = call(function, dims[0], dims[1], dims[2], dims[3], dims[4], dims[5], dims[6],
                  stream, argv, NULL);
  return PyLong_FromLong(code);
}

static PyMethodDef methods[] = {
    {"current_context", (PyCFunction)(void (*)(void))current_context, METH_FASTCALL, NULL},
    {"launch", (PyCFunction)(void (*)(void))launch, METH_FASTCALL, NULL},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_tc_fastlaunch", NULL, -1, methods};

int tc_add_fastcall(PyObject *module);  /* fastcall.c: the whole call of a seen look */

PyMODINIT_FUNC PyInit__tc_fastlaunch(void) {
  PyObject *m = PyModule_Create(&module);
  if (m && tc_add_fastcall(m) < 0) Py_CLEAR(m);
  return m;
}
