/* A CPython type whose buffer export raises TypeError, as CuPy's does ("Accessing a CuPy ndarray on
 * CPU is not allowed"): PyObject_CheckBuffer() is true and PyObject_GetBuffer() fails. The GPU tests
 * (tests/python/test_gpu.py) subclass it in Python and add only __cuda_array_interface__ or only
 * DLPack, to prove that accio recognises a device object before it tries the buffer protocol.
 * Python 3.12 could do this with __buffer__; 3.11 needs C. Built at test time by conftest's
 * compile_shared() with the interpreter's include directory; imported as `no_host_buffer`. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

static int refuse_buffer(PyObject* self, Py_buffer* view, int flags) {
  (void)view;
  (void)flags;
  PyErr_Format(PyExc_TypeError, "Accessing a %s on CPU is not allowed (no_host_buffer: device memory)",
               Py_TYPE(self)->tp_name);
  return -1;
}

static PyBufferProcs buffer_procs = {refuse_buffer, NULL};

static PyTypeObject NoHostBuffer = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "no_host_buffer.NoHostBuffer",
    .tp_basicsize = sizeof(PyObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "An object whose buffer export raises TypeError (as a CuPy array's does).",
    .tp_as_buffer = &buffer_procs,
    .tp_new = PyType_GenericNew,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "no_host_buffer",
    .m_doc = "A type whose buffer export raises, for accio's GPU tests.",
    .m_size = -1,
};

PyMODINIT_FUNC PyInit_no_host_buffer(void) {
  if (PyType_Ready(&NoHostBuffer) < 0) return NULL;
  PyObject* m = PyModule_Create(&module);
  if (!m) return NULL;
  Py_INCREF(&NoHostBuffer);
  if (PyModule_AddObject(m, "NoHostBuffer", (PyObject*)&NoHostBuffer) < 0) {
    Py_DECREF(&NoHostBuffer);
    Py_DECREF(m);
    return NULL;
  }
  return m;
}
