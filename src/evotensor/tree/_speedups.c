/* evotensor.tree._speedups: the optional compiled core of evotensor.tree.Tree.
 *
 * Plain CPython C API. Everything here is a fast path for a case that _core.py's pure-Python code
 * also handles; whenever a case is not the plain one, the C code calls the Python function that
 * _core.py registered with configure(), so semantics (errors, constraint checks, dict conversion,
 * sorted insertion) live in one place. _core.py stays the reference: EVOTENSOR_NO_SPEEDUPS=1 runs it.
 *
 * Contents:
 *   TreeBase       base type of Tree: owns the node's __dict__, the `_cons` slot and the weakref
 *                  list; its tp_setattro / mp_ass_subscript / mp_subscript do the hot paths.
 *   flatten(t)     pytree flatten: (children tuple, keys tuple), children in the dict's order.
 *   Unflattener    per-class pytree unflatten callable: (keys, children) -> a new node.
 *   flatten_paths(tree_type, d)  evotensor.tree.flatten's walk: {path tuple: leaf}.
 *   join_columns / plain_leaves / build / build_pieces  the walks of stack, concatenate and split
 *                  (plain case only; None sends joining.py to its Python walk).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stddef.h>

typedef struct {
    PyObject_HEAD
    PyObject *dict;        /* the children, in sorted key order (_core.py keeps them sorted) */
    PyObject *cons;        /* attached constraints (a tuple); NULL reads as () via Tree.__getattr__ */
    PyObject *weakreflist;
} TreeBaseObject;

/* Python slow paths and types registered by _core.py (configure()). */
static PyObject *setattr_slow;  /* (node, name, value) */
static PyObject *delattr_slow;  /* (node, name) */
static PyObject *getitem_slow;  /* (node, key) */
static PyObject *setitem_slow;  /* (node, key, value) */
static PyObject *delitem_slow;  /* (node, key) */
static PyTypeObject *raw_type;  /* evotensor.tree.raw */

static PyTypeObject TreeBase_Type;

static int
not_configured(void)
{
    PyErr_SetString(PyExc_RuntimeError,
                    "evotensor.tree._speedups is not configured (evotensor.tree._core does that at import)");
    return -1;
}

static PyObject *
call2(PyObject *fn, PyObject *a, PyObject *b)
{
    if (fn == NULL) {
        not_configured();
        return NULL;
    }
    PyObject *args[2] = {a, b};
    return PyObject_Vectorcall(fn, args, 2, NULL);
}

static int
call_void2(PyObject *fn, PyObject *a, PyObject *b)
{
    PyObject *r = call2(fn, a, b);
    if (r == NULL)
        return -1;
    Py_DECREF(r);
    return 0;
}

static int
call_void3(PyObject *fn, PyObject *a, PyObject *b, PyObject *c)
{
    if (fn == NULL)
        return not_configured();
    PyObject *args[3] = {a, b, c};
    PyObject *r = PyObject_Vectorcall(fn, args, 3, NULL);
    if (r == NULL)
        return -1;
    Py_DECREF(r);
    return 0;
}

/* `not node._cons` for the values the fast paths accept: an empty slot or the empty tuple.
 * Anything else (constraints attached, or an odd value) goes to the Python path. */
static inline int
cons_empty(PyObject *cons)
{
    return cons == NULL || (PyTuple_CheckExact(cons) && PyTuple_GET_SIZE(cons) == 0);
}

/* `issubclass(type(value), (dict, raw))`: values a set must convert (_core.py's _DICT_OR_RAW). */
static inline int
dict_or_raw(PyObject *value)
{
    return PyDict_Check(value) || (raw_type != NULL && PyType_IsSubtype(Py_TYPE(value), raw_type));
}

/* d[key] = value if key is already in d (returns 0); if it is not, d is left as it was and 1 is
 * returned (the caller takes the Python path: sorted insertion, conversions); -1 on error.
 * One hash probe instead of two (`key in d` then the store): store, and if the dict grew the key
 * was new, so take it out again. Values are never dicts here, so storing runs no Python code
 * except the old value's finalizer; should that change the dict, the Python path still sets
 * key = value, as `d[key] = value` would. */
static int
replace_existing(PyObject *d, PyObject *key, PyObject *value)
{
    Py_ssize_t n = PyDict_GET_SIZE(d);
    if (PyDict_SetItem(d, key, value) < 0)
        return -1;
    if (PyDict_GET_SIZE(d) == n)
        return 0;
    if (PyDict_DelItem(d, key) < 0)
        return -1;
    return 1;
}

/* ---- TreeBase -------------------------------------------------------------------------------- */

static int
tb_traverse(TreeBaseObject *self, visitproc visit, void *arg)
{
    Py_VISIT(self->dict);
    Py_VISIT(self->cons);
    return 0;
}

static int
tb_clear(TreeBaseObject *self)
{
    Py_CLEAR(self->dict);
    Py_CLEAR(self->cons);
    return 0;
}

static void
tb_dealloc(TreeBaseObject *self)
{
    PyObject_GC_UnTrack(self);
    if (self->weakreflist != NULL)
        PyObject_ClearWeakRefs((PyObject *)self);
    tb_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* t.name = value. Hot path (what Tree.__setattr__ inlines in pure Python): replace an existing
 * child of an unconstrained node with a value that needs no conversion and is not a Tree (a Tree
 * value goes to the Python path, which refuses one that would make a cycle), the name not being a
 * Tree attribute. Everything else -- new keys (sorted insertion), constraints, dict/raw values,
 * reserved names and their error -- is _core.py's _setattr. Deletion is _core.py's _delattr. */
static int
tb_setattro(PyObject *self, PyObject *name, PyObject *value)
{
    if (value == NULL)
        return call_void2(delattr_slow, self, name);
    PyObject *d = ((TreeBaseObject *)self)->dict;
    if (d != NULL && PyUnicode_CheckExact(name) && cons_empty(((TreeBaseObject *)self)->cons)
        && !dict_or_raw(value) && !PyObject_TypeCheck(value, &TreeBase_Type)) {
        /* Reserved names are the class's attributes (type(self)._reserved_names is dir(cls) taken
         * when the class was made). A name the class does not have -- answered from the type's
         * method cache, faster than hashing into the frozenset -- is not reserved; a name it has
         * goes to the Python path, which checks _reserved_names exactly. */
        if (_PyType_Lookup(Py_TYPE(self), name) == NULL) {
            int r = replace_existing(d, name, value);
            if (r <= 0)
                return r;
        }
    }
    return call_void3(setattr_slow, self, name, value);
}

/* t[key]: a str key present in the node; everything else (misses and their error, str
 * subclasses, leaf indexing) is _core.py's _getitem. */
static PyObject *
tb_subscript(PyObject *self, PyObject *key)
{
    PyObject *d = ((TreeBaseObject *)self)->dict;
    if (d != NULL && PyUnicode_CheckExact(key)) {
        PyObject *v = PyDict_GetItemWithError(d, key);
        if (v != NULL)
            return Py_NewRef(v);
        if (PyErr_Occurred())
            return NULL;
    }
    return call2(getitem_slow, self, key);
}

/* t[key] = value / del t[key]: the same hot path as tb_setattro (item sets may use reserved
 * names, so no reserved check); everything else is _core.py's _setitem / _delitem. */
static int
tb_ass_subscript(PyObject *self, PyObject *key, PyObject *value)
{
    if (value == NULL)
        return call_void2(delitem_slow, self, key);
    PyObject *d = ((TreeBaseObject *)self)->dict;
    if (d != NULL && PyUnicode_CheckExact(key) && cons_empty(((TreeBaseObject *)self)->cons)
        && !dict_or_raw(value) && !PyObject_TypeCheck(value, &TreeBase_Type)) {
        int r = replace_existing(d, key, value);
        if (r <= 0)
            return r;
    }
    return call_void3(setitem_slow, self, key, value);
}

/* A class defining __getitem__/__setitem__ in Python also fills the sequence slots (so that
 * PySequence_Check(t) is true); mirror that, routing integers through the same code as t[i]. */
static PyObject *
tb_sq_item(PyObject *self, Py_ssize_t i)
{
    PyObject *key = PyLong_FromSsize_t(i);
    if (key == NULL)
        return NULL;
    PyObject *r = Py_TYPE(self)->tp_as_mapping->mp_subscript(self, key);
    Py_DECREF(key);
    return r;
}

static int
tb_sq_ass_item(PyObject *self, Py_ssize_t i, PyObject *value)
{
    PyObject *key = PyLong_FromSsize_t(i);
    if (key == NULL)
        return -1;
    int r = Py_TYPE(self)->tp_as_mapping->mp_ass_subscript(self, key, value);
    Py_DECREF(key);
    return r;
}

static PyMappingMethods tb_as_mapping = {
    .mp_subscript = tb_subscript,
    .mp_ass_subscript = tb_ass_subscript,
};

static PySequenceMethods tb_as_sequence = {
    .sq_item = tb_sq_item,
    .sq_ass_item = tb_sq_ass_item,
};

static PyMemberDef tb_members[] = {
    {"_cons", T_OBJECT_EX, offsetof(TreeBaseObject, cons), 0,
     "constraints attached to this node (tuple of Attached)"},
    {"__weakref__", T_OBJECT, offsetof(TreeBaseObject, weakreflist), READONLY, NULL},
    {NULL},
};

static PyGetSetDef tb_getset[] = {
    {"__dict__", PyObject_GenericGetDict, PyObject_GenericSetDict, NULL, NULL},
    {NULL},
};

static PyTypeObject TreeBase_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "evotensor.tree._speedups.TreeBase",
    .tp_doc = "Compiled base of evotensor.tree.Tree (storage and the hot set/get paths).",
    .tp_basicsize = sizeof(TreeBaseObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_dealloc = (destructor)tb_dealloc,
    .tp_traverse = (traverseproc)tb_traverse,
    .tp_clear = (inquiry)tb_clear,
    .tp_setattro = tb_setattro,
    .tp_as_mapping = &tb_as_mapping,
    .tp_as_sequence = &tb_as_sequence,
    .tp_members = tb_members,
    .tp_getset = tb_getset,
    .tp_dictoffset = offsetof(TreeBaseObject, dict),
    .tp_weaklistoffset = offsetof(TreeBaseObject, weakreflist),
    /* tp_new: object's, set in PyInit__speedups */
};

/* ---- pytree flatten / unflatten -------------------------------------------------------------- */

/* flatten(t) -> (children, keys): both tuples in the node dict's (sorted) order. */
static PyObject *
sp_flatten(PyObject *module, PyObject *t)
{
    if (!PyObject_TypeCheck(t, &TreeBase_Type)) {
        PyErr_Format(PyExc_TypeError, "flatten: expected a Tree, got %.200s", Py_TYPE(t)->tp_name);
        return NULL;
    }
    PyObject *d = ((TreeBaseObject *)t)->dict;
    Py_ssize_t n = d == NULL ? 0 : PyDict_GET_SIZE(d);
    PyObject *values = PyTuple_New(n);
    PyObject *keys = PyTuple_New(n);
    if (values == NULL || keys == NULL)
        goto fail;
    Py_ssize_t pos = 0, i = 0;
    PyObject *k, *v;
    /* no Python code runs in this loop, so the dict cannot change under it */
    while (i < n && PyDict_Next(d, &pos, &k, &v)) {
        PyTuple_SET_ITEM(keys, i, Py_NewRef(k));
        PyTuple_SET_ITEM(values, i, Py_NewRef(v));
        i++;
    }
    PyObject *out = PyTuple_New(2);
    if (out == NULL)
        goto fail;
    PyTuple_SET_ITEM(out, 0, values);
    PyTuple_SET_ITEM(out, 1, keys);
    return out;
fail:
    Py_XDECREF(values);
    Py_XDECREF(keys);
    return NULL;
}

typedef struct {
    PyObject_HEAD
    PyTypeObject *cls;
    vectorcallfunc vectorcall;
} UnflattenerObject;

/* A node of class cls from keys already in sorted order (no checks, as JAX may pass placeholder
 * leaves): dict(zip(keys, children)), constraints (). */
static PyObject *
make_node(PyTypeObject *cls, PyObject *keys, PyObject *children)
{
    PyObject *kseq = PySequence_Fast(keys, "unflatten: keys must be a sequence");
    if (kseq == NULL)
        return NULL;
    PyObject *cseq = PySequence_Fast(children, "unflatten: children must be iterable");
    if (cseq == NULL) {
        Py_DECREF(kseq);
        return NULL;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(kseq);
    Py_ssize_t nc = PySequence_Fast_GET_SIZE(cseq);
    if (nc < n)
        n = nc; /* zip() stops at the shorter one */
    PyObject *node = NULL;
#if PY_VERSION_HEX < 0x030D0000
    PyObject *d = _PyDict_NewPresized(n); /* one allocation for the node's keys */
#else
    PyObject *d = PyDict_New();
#endif
    if (d == NULL)
        goto done;
    PyObject **ks = PySequence_Fast_ITEMS(kseq);
    PyObject **cs = PySequence_Fast_ITEMS(cseq);
    for (Py_ssize_t i = 0; i < n; i++) {
        if (PyDict_SetItem(d, ks[i], cs[i]) < 0)
            goto done;
    }
    node = cls->tp_alloc(cls, 0);
    if (node == NULL)
        goto done;
    ((TreeBaseObject *)node)->dict = d;
    d = NULL;
    ((TreeBaseObject *)node)->cons = PyTuple_New(0); /* the shared empty tuple */
    if (((TreeBaseObject *)node)->cons == NULL)
        Py_CLEAR(node);
done:
    Py_XDECREF(d);
    Py_DECREF(kseq);
    Py_DECREF(cseq);
    return node;
}

static PyObject *
unflattener_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (nargs != 2 || (kwnames != NULL && PyTuple_GET_SIZE(kwnames) != 0)) {
        PyErr_SetString(PyExc_TypeError, "unflatten(keys, children) takes exactly 2 positional arguments");
        return NULL;
    }
    return make_node(((UnflattenerObject *)self)->cls, args[0], args[1]);
}

static int
unflattener_traverse(UnflattenerObject *self, visitproc visit, void *arg)
{
    Py_VISIT(self->cls);
    return 0;
}

static int
unflattener_clear(UnflattenerObject *self)
{
    Py_CLEAR(self->cls);
    return 0;
}

static void
unflattener_dealloc(UnflattenerObject *self)
{
    PyObject_GC_UnTrack(self);
    unflattener_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *
unflattener_repr(UnflattenerObject *self)
{
    return PyUnicode_FromFormat("<evotensor.tree unflatten for %s>", self->cls->tp_name);
}

static PyMemberDef unflattener_members[] = {
    {"cls", T_OBJECT, offsetof(UnflattenerObject, cls), READONLY, "the node class it builds"},
    {NULL},
};

static PyTypeObject Unflattener_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "evotensor.tree._speedups.Unflattener",
    .tp_doc = "unflatten(keys, children) -> a node of one Tree class (the pytree unflatten).",
    .tp_basicsize = sizeof(UnflattenerObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_vectorcall_offset = offsetof(UnflattenerObject, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_dealloc = (destructor)unflattener_dealloc,
    .tp_traverse = (traverseproc)unflattener_traverse,
    .tp_clear = (inquiry)unflattener_clear,
    .tp_repr = (reprfunc)unflattener_repr,
    .tp_members = unflattener_members,
};

static PyObject *
sp_make_unflatten(PyObject *module, PyObject *cls)
{
    if (!PyType_Check(cls) || !PyType_IsSubtype((PyTypeObject *)cls, &TreeBase_Type)) {
        PyErr_SetString(PyExc_TypeError, "make_unflatten(cls): cls must be a subclass of TreeBase");
        return NULL;
    }
    UnflattenerObject *u = PyObject_GC_New(UnflattenerObject, &Unflattener_Type);
    if (u == NULL)
        return NULL;
    u->cls = (PyTypeObject *)Py_NewRef(cls);
    u->vectorcall = unflattener_vectorcall;
    PyObject_GC_Track(u);
    return (PyObject *)u;
}

/* ---- evotensor.tree.flatten ------------------------------------------------------------------ */

static PyObject *
path_plus(PyObject *path, PyObject *k)
{
    Py_ssize_t n = PyTuple_GET_SIZE(path);
    PyObject *out = PyTuple_New(n + 1);
    if (out == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++)
        PyTuple_SET_ITEM(out, i, Py_NewRef(PyTuple_GET_ITEM(path, i)));
    PyTuple_SET_ITEM(out, n, Py_NewRef(k));
    return out;
}

/* functional.py's _flatten: every leaf under d goes to out[path + (k,)]; a non-empty subtree is
 * walked, an empty one is a value. isinstance() is the real one (it may run Python code through
 * a leaf's __class__), so the dict may change under us: keep k and v alive and stop as Python's
 * dict iteration would. */
static int
walk(PyObject *d, PyObject *path, PyObject *out, PyObject *tree_type, int depth)
{
    if (depth > 0 && Py_EnterRecursiveCall(" in evotensor.tree.flatten"))
        return -1;
    int rc = -1;
    Py_ssize_t pos = 0, size = PyDict_GET_SIZE(d);
    PyObject *k, *v;
    Py_INCREF(d);
    while (PyDict_Next(d, &pos, &k, &v)) {
        Py_INCREF(k);
        Py_INCREF(v);
        int step = -1;
        int is = PyObject_IsInstance(v, tree_type);
        if (PyDict_GET_SIZE(d) != size) {
            PyErr_SetString(PyExc_RuntimeError, "dictionary changed size during iteration");
            is = -1;
        }
        if (is >= 0) {
            PyObject *sub = path_plus(path, k);
            if (sub != NULL) {
                PyObject *vd = NULL; /* a new reference */
                if (is && PyObject_TypeCheck(v, &TreeBase_Type))
                    vd = Py_XNewRef(((TreeBaseObject *)v)->dict);
                else if (is) /* an object claiming to be a Tree through __class__: as Python does */
                    vd = PyObject_GetAttrString(v, "__dict__");
                if (is && vd == NULL && PyErr_Occurred())
                    step = -1;
                else if (vd != NULL && !PyDict_Check(vd)) {
                    PyErr_SetString(PyExc_TypeError, "flatten: a node's __dict__ is not a dict");
                    step = -1;
                }
                else if (vd != NULL && PyDict_GET_SIZE(vd) > 0)
                    step = walk(vd, sub, out, tree_type, depth + 1);
                else
                    step = PyDict_SetItem(out, sub, v);
                Py_XDECREF(vd);
                Py_DECREF(sub);
            }
        }
        Py_DECREF(k);
        Py_DECREF(v);
        if (step < 0)
            goto done;
    }
    rc = 0;
done:
    Py_DECREF(d);
    if (depth > 0)
        Py_LeaveRecursiveCall();
    return rc;
}

static PyObject *
sp_flatten_paths(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyDict_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "flatten_paths(tree_type, node_dict)");
        return NULL;
    }
    PyObject *out = PyDict_New();
    if (out == NULL)
        return NULL;
    PyObject *root = PyTuple_New(0);
    if (root == NULL || walk(args[1], root, out, args[0], 0) < 0) {
        Py_XDECREF(root);
        Py_DECREF(out);
        return NULL;
    }
    Py_DECREF(root);
    return out;
}

/* ---- stack / concatenate / split: column walks and rebuilds ---------------------------------- */

/* The fast paths of joining.py's stack/concatenate/split, for the plain case only: every node a
 * TreeBase instance of tree_type without constraints, key sequences equal across the joined trees.
 * Anything else returns None and joining.py runs its Python walk, which derives constraints and
 * raises the errors naming paths. No Python code runs during these walks (exact-str key
 * comparisons, set lookups of type objects), but allocations may trigger a GC whose finalizers
 * could; so every object is held by a new reference and dict sizes are re-checked. */

static PyObject *empty_dict; /* stands for a node whose __dict__ was never created (Tree()) */
static PyObject *str_shape, *str_dtype, *str_itemsize; /* interned attribute names */

/* The node's dict if node is a plain (unconstrained) instance of tree_type; NULL (no error) if not. */
static inline PyObject *
plain_dict(PyObject *node, PyTypeObject *tree_type)
{
    if (!PyObject_TypeCheck(node, &TreeBase_Type) || !PyType_IsSubtype(Py_TYPE(node), tree_type))
        return NULL;
    TreeBaseObject *t = (TreeBaseObject *)node;
    if (!cons_empty(t->cons))
        return NULL;
    return t->dict != NULL ? t->dict : empty_dict;
}

static inline int
same_key(PyObject *a, PyObject *b)
{
    if (a == b)
        return 1;
    if (!PyUnicode_CheckExact(a) || !PyUnicode_CheckExact(b))
        return 0;
    return PyUnicode_Compare(a, b) == 0; /* exact str: no Python code, no error */
}

/* Collect the leaf columns of the n nodes (equal structure) in depth-first sorted-key order into
 * out: with n == 1 and flat set, the leaves themselves; otherwise a list of the n leaves per
 * position. *all_jax is cleared when some leaf's exact type is not in jax_types.
 * Returns 1 done, 0 not the plain case (caller returns None), -1 error. */
static int
columns_walk(PyObject *const *nodes, Py_ssize_t n, PyTypeObject *tree_type, PyObject *jax_types,
             PyObject *out, int flat, int *all_jax, int depth)
{
    if (Py_EnterRecursiveCall(" in evotensor.tree stack/concatenate/split"))
        return -1;
    int rc = -1;
    PyObject **dicts = PyMem_Malloc(sizeof(PyObject *) * 2 * n);
    Py_ssize_t *pos = PyMem_Malloc(sizeof(Py_ssize_t) * n);
    PyObject **vals = dicts == NULL ? NULL : dicts + n;
    Py_ssize_t got = 0, held = 0; /* vals[0..held) hold new references */
    if (dicts == NULL || pos == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (; got < n; got++) {
        PyObject *d = plain_dict(nodes[got], tree_type);
        if (d == NULL || (got > 0 && PyDict_GET_SIZE(d) != PyDict_GET_SIZE(dicts[0]))) {
            rc = 0;
            goto done;
        }
        dicts[got] = Py_NewRef(d);
        pos[got] = 0;
    }
    Py_ssize_t size = PyDict_GET_SIZE(dicts[0]);
    PyObject *k0, *v;
    while (PyDict_Next(dicts[0], &pos[0], &k0, &v)) {
        vals[0] = Py_NewRef(v);
        held = 1;
        Py_ssize_t subtrees = PyType_IsSubtype(Py_TYPE(v), tree_type);
        for (Py_ssize_t i = 1; i < n; i++) {
            PyObject *k;
            if (!PyDict_Next(dicts[i], &pos[i], &k, &vals[i]) || !same_key(k0, k)) {
                rc = 0; /* keys differ: the Python walk names the first difference */
                goto done;
            }
            Py_INCREF(vals[i]);
            held++;
            subtrees += PyType_IsSubtype(Py_TYPE(vals[i]), tree_type);
        }
        if (subtrees == n) {
            PyObject *sub = PyTuple_New(n); /* holds the subtrees while walking them */
            if (sub == NULL)
                goto done;
            for (Py_ssize_t i = 0; i < n; i++)
                PyTuple_SET_ITEM(sub, i, Py_NewRef(vals[i]));
            int r = columns_walk(&PyTuple_GET_ITEM(sub, 0), n, tree_type, jax_types, out, flat, all_jax,
                                 depth + 1);
            Py_DECREF(sub);
            if (r <= 0) {
                rc = r;
                goto done;
            }
        }
        else if (subtrees != 0) {
            rc = 0; /* a subtree facing a leaf: the Python walk raises naming the tree and path */
            goto done;
        }
        else {
            for (Py_ssize_t i = 0; i < n && *all_jax; i++) {
                int c = PySet_Contains(jax_types, (PyObject *)Py_TYPE(vals[i]));
                if (c < 0)
                    goto done;
                if (!c)
                    *all_jax = 0;
            }
            PyObject *item;
            if (flat)
                item = Py_NewRef(vals[0]);
            else {
                item = PyList_New(n);
                if (item == NULL)
                    goto done;
                for (Py_ssize_t i = 0; i < n; i++)
                    PyList_SET_ITEM(item, i, Py_NewRef(vals[i]));
            }
            int r = PyList_Append(out, item);
            Py_DECREF(item);
            if (r < 0)
                goto done;
        }
        for (; held > 0; held--)
            Py_DECREF(vals[held - 1]);
        for (Py_ssize_t i = 0; i < n; i++) {
            if (PyDict_GET_SIZE(dicts[i]) != size) {
                PyErr_SetString(PyExc_RuntimeError, "dictionary changed size during iteration");
                goto done;
            }
        }
    }
    rc = 1;
done:
    for (; held > 0; held--)
        Py_DECREF(vals[held - 1]);
    if (dicts != NULL)
        for (Py_ssize_t i = 0; i < got; i++)
            Py_DECREF(dicts[i]);
    PyMem_Free(dicts);
    PyMem_Free(pos);
    Py_LeaveRecursiveCall();
    return rc;
}

/* Bytes of an array-like x: prod(x.shape) * x.dtype.itemsize (joining.py's _nbytes). */
static int
array_nbytes(PyObject *x, Py_ssize_t *nbytes)
{
    PyObject *shape = PyObject_GetAttr(x, str_shape);
    if (shape == NULL)
        return -1;
    PyObject *seq = PySequence_Fast(shape, "shape must be a sequence");
    Py_DECREF(shape);
    if (seq == NULL)
        return -1;
    Py_ssize_t total = 1;
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(seq); i++) {
        Py_ssize_t d = PyNumber_AsSsize_t(PySequence_Fast_GET_ITEM(seq, i), PyExc_OverflowError);
        if (d == -1 && PyErr_Occurred()) {
            Py_DECREF(seq);
            return -1;
        }
        total *= d;
    }
    Py_DECREF(seq);
    PyObject *dtype = PyObject_GetAttr(x, str_dtype);
    PyObject *item = dtype == NULL ? NULL : PyObject_GetAttr(dtype, str_itemsize);
    Py_XDECREF(dtype);
    if (item == NULL)
        return -1;
    Py_ssize_t size = PyNumber_AsSsize_t(item, PyExc_OverflowError);
    Py_DECREF(item);
    if (size == -1 && PyErr_Occurred())
        return -1;
    *nbytes = total * size;
    return 0;
}

/* (columns, nbytes) when every leaf is of a type in jax_types -- nbytes[i] being the bytes of
 * column i's leaves (a column is a list of n leaves; with n == 1 and flat, a leaf), as the number
 * of leaves times the first one's -- else (columns, None); None when the walk gave 0. */
static PyObject *
columns_result(PyObject *out, int r, int all_jax, Py_ssize_t n, int flat)
{
    if (r < 0) {
        Py_DECREF(out);
        return NULL;
    }
    if (r == 0) {
        Py_DECREF(out);
        Py_RETURN_NONE;
    }
    if (!all_jax)
        return Py_BuildValue("(NO)", out, Py_None);
    Py_ssize_t m = PyList_GET_SIZE(out);
    PyObject *sizes = PyList_New(m);
    if (sizes == NULL) {
        Py_DECREF(out);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < m; i++) {
        PyObject *col = PyList_GET_ITEM(out, i);
        PyObject *first = flat ? col : PyList_GET_ITEM(col, 0);
        Py_ssize_t b;
        PyObject *size = array_nbytes(first, &b) < 0 ? NULL : PyLong_FromSsize_t(b * n);
        if (size == NULL) {
            Py_DECREF(sizes);
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(sizes, i, size);
    }
    return Py_BuildValue("(NN)", out, sizes);
}

/* join_columns(tree_type, trees, jax_types) -> (columns, nbytes or None) or None. */
static PyObject *
sp_join_columns(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3 || !PyType_Check(args[0]) || !PyList_Check(args[1]) || PyList_GET_SIZE(args[1]) == 0
        || !PyAnySet_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError, "join_columns(tree_type, trees: non-empty list, jax_types: set)");
        return NULL;
    }
    PyObject *trees = PySequence_Tuple(args[1]); /* holds the roots */
    PyObject *out = trees == NULL ? NULL : PyList_New(0);
    if (out == NULL) {
        Py_XDECREF(trees);
        return NULL;
    }
    int all_jax = 1;
    int r = columns_walk(&PyTuple_GET_ITEM(trees, 0), PyTuple_GET_SIZE(trees), (PyTypeObject *)args[0],
                         args[2], out, 0, &all_jax, 0);
    Py_ssize_t n = PyTuple_GET_SIZE(trees);
    Py_DECREF(trees);
    return columns_result(out, r, all_jax, n, 0);
}

/* plain_leaves(tree_type, t, jax_types) -> (leaves, nbytes or None) or None. */
static PyObject *
sp_plain_leaves(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3 || !PyType_Check(args[0]) || !PyAnySet_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError, "plain_leaves(tree_type, t, jax_types: set)");
        return NULL;
    }
    PyObject *out = PyList_New(0);
    if (out == NULL)
        return NULL;
    int all_jax = 1;
    int r = columns_walk(&args[1], 1, (PyTypeObject *)args[0], args[2], out, 1, &all_jax, 0);
    return columns_result(out, r, all_jax, 1, 1);
}

/* A copy of the structure of tmpl (node classes kept, no constraints) whose j-th leaf in
 * depth-first order is leaves[j] (piece < 0) or leaves[j][piece]. */
static PyObject *
build_node(PyObject *tmpl, PyTypeObject *tree_type, PyObject *leaves, Py_ssize_t *j, Py_ssize_t piece)
{
    PyObject *d = plain_dict(tmpl, tree_type);
    if (d == NULL) {
        PyErr_SetString(PyExc_ValueError, "build: the template must be an unconstrained Tree");
        return NULL;
    }
    if (Py_EnterRecursiveCall(" in evotensor.tree build"))
        return NULL;
    PyObject *node = NULL;
    Py_INCREF(d);
    Py_ssize_t size = PyDict_GET_SIZE(d);
#if PY_VERSION_HEX < 0x030D0000
    PyObject *nd = _PyDict_NewPresized(size);
#else
    PyObject *nd = PyDict_New();
#endif
    if (nd == NULL)
        goto done;
    Py_ssize_t pos = 0;
    PyObject *k, *v;
    while (PyDict_Next(d, &pos, &k, &v)) {
        PyObject *child;
        Py_INCREF(k);
        if (PyType_IsSubtype(Py_TYPE(v), tree_type)) {
            Py_INCREF(v);
            child = build_node(v, tree_type, leaves, j, piece);
            Py_DECREF(v);
        }
        else if (*j >= PyList_GET_SIZE(leaves)) {
            PyErr_SetString(PyExc_ValueError, "build: fewer leaves than the template has");
            child = NULL;
        }
        else {
            PyObject *leaf = PyList_GET_ITEM(leaves, *j);
            (*j)++;
            if (piece < 0)
                child = Py_NewRef(leaf);
            else if (PyList_CheckExact(leaf) || PyTuple_CheckExact(leaf)) {
                PyObject *fast = leaf;
                if (piece >= PySequence_Fast_GET_SIZE(fast)) {
                    PyErr_SetString(PyExc_ValueError, "build_pieces: a leaf has fewer pieces than count");
                    child = NULL;
                }
                else
                    child = Py_NewRef(PySequence_Fast_GET_ITEM(fast, piece));
            }
            else {
                PyErr_SetString(PyExc_TypeError, "build_pieces: parts must be lists or tuples");
                child = NULL;
            }
        }
        int r = child == NULL ? -1 : PyDict_SetItem(nd, k, child);
        Py_DECREF(k);
        Py_XDECREF(child);
        if (r < 0)
            goto done;
        if (PyDict_GET_SIZE(d) != size) {
            PyErr_SetString(PyExc_RuntimeError, "dictionary changed size during iteration");
            goto done;
        }
    }
    PyTypeObject *cls = Py_TYPE(tmpl);
    node = cls->tp_alloc(cls, 0);
    if (node == NULL)
        goto done;
    ((TreeBaseObject *)node)->dict = nd;
    nd = NULL;
    ((TreeBaseObject *)node)->cons = PyTuple_New(0); /* the shared empty tuple */
    if (((TreeBaseObject *)node)->cons == NULL)
        Py_CLEAR(node);
done:
    Py_XDECREF(nd);
    Py_DECREF(d);
    Py_LeaveRecursiveCall();
    return node;
}

static int
build_args(PyObject *const *args, Py_ssize_t nargs, Py_ssize_t want, const char *usage)
{
    if (nargs != want || !PyType_Check(args[0]) || !PyList_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError, usage);
        return -1;
    }
    return 0;
}

/* build(tree_type, template, leaves) -> a new tree shaped like template with these leaves. */
static PyObject *
sp_build(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (build_args(args, nargs, 3, "build(tree_type, template, leaves: list)") < 0)
        return NULL;
    Py_ssize_t j = 0;
    PyObject *out = build_node(args[1], (PyTypeObject *)args[0], args[2], &j, -1);
    if (out != NULL && j != PyList_GET_SIZE(args[2])) {
        Py_DECREF(out);
        PyErr_SetString(PyExc_ValueError, "build: more leaves than the template has");
        return NULL;
    }
    return out;
}

/* build_pieces(tree_type, template, parts, count) -> [piece 0, ..., piece count-1]: piece i is
 * shaped like template, its j-th leaf is parts[j][i]. */
static PyObject *
sp_build_pieces(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (build_args(args, nargs, 4, "build_pieces(tree_type, template, parts: list, count: int)") < 0)
        return NULL;
    Py_ssize_t count = PyLong_AsSsize_t(args[3]);
    if (count == -1 && PyErr_Occurred())
        return NULL;
    if (count < 0) {
        PyErr_SetString(PyExc_ValueError, "build_pieces: count must be >= 0");
        return NULL;
    }
    PyObject *out = PyList_New(count);
    if (out == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < count; i++) {
        Py_ssize_t j = 0;
        PyObject *piece = build_node(args[1], (PyTypeObject *)args[0], args[2], &j, i);
        if (piece != NULL && j != PyList_GET_SIZE(args[2])) {
            Py_CLEAR(piece);
            PyErr_SetString(PyExc_ValueError, "build_pieces: more parts than the template has leaves");
        }
        if (piece == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, i, piece);
    }
    return out;
}

/* ---- module ---------------------------------------------------------------------------------- */

static PyObject *
sp_configure(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError,
                        "configure(setattr, delattr, getitem, setitem, delitem, raw_type) takes 6 arguments");
        return NULL;
    }
    for (int i = 0; i < 5; i++) {
        if (!PyCallable_Check(args[i])) {
            PyErr_Format(PyExc_TypeError, "configure: argument %d must be callable", i);
            return NULL;
        }
    }
    if (!PyType_Check(args[5])) {
        PyErr_SetString(PyExc_TypeError, "configure: raw_type must be a type");
        return NULL;
    }
    Py_XSETREF(setattr_slow, Py_NewRef(args[0]));
    Py_XSETREF(delattr_slow, Py_NewRef(args[1]));
    Py_XSETREF(getitem_slow, Py_NewRef(args[2]));
    Py_XSETREF(setitem_slow, Py_NewRef(args[3]));
    Py_XSETREF(delitem_slow, Py_NewRef(args[4]));
    Py_XSETREF(raw_type, (PyTypeObject *)Py_NewRef(args[5]));
    Py_RETURN_NONE;
}

static PyMethodDef sp_methods[] = {
    {"configure", (PyCFunction)(void (*)(void))sp_configure, METH_FASTCALL,
     "configure(setattr, delattr, getitem, setitem, delitem, raw_type): the Python slow paths."},
    {"flatten", sp_flatten, METH_O, "flatten(t) -> (children tuple, keys tuple): the pytree flatten."},
    {"make_unflatten", sp_make_unflatten, METH_O,
     "make_unflatten(cls) -> unflatten(keys, children) building nodes of class cls."},
    {"flatten_paths", (PyCFunction)(void (*)(void))sp_flatten_paths, METH_FASTCALL,
     "flatten_paths(tree_type, node_dict) -> {path tuple: leaf} (evotensor.tree.flatten's walk)."},
    {"join_columns", (PyCFunction)(void (*)(void))sp_join_columns, METH_FASTCALL,
     "join_columns(tree_type, trees, jax_types) -> (leaf columns, column bytes or None) or None."},
    {"plain_leaves", (PyCFunction)(void (*)(void))sp_plain_leaves, METH_FASTCALL,
     "plain_leaves(tree_type, t, jax_types) -> (leaves, leaf bytes or None) or None."},
    {"build", (PyCFunction)(void (*)(void))sp_build, METH_FASTCALL,
     "build(tree_type, template, leaves) -> a new tree shaped like template with these leaves."},
    {"build_pieces", (PyCFunction)(void (*)(void))sp_build_pieces, METH_FASTCALL,
     "build_pieces(tree_type, template, parts, count) -> count trees; piece i's leaf j is parts[j][i]."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef sp_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "evotensor.tree._speedups",
    .m_doc = "Optional compiled core of evotensor.tree.Tree (see _core.py; EVOTENSOR_NO_SPEEDUPS=1 disables it).",
    .m_size = -1,
    .m_methods = sp_methods,
};

PyMODINIT_FUNC
PyInit__speedups(void)
{
    /* object's own tp_new (not NULL, which would make a static type non-instantiable), so that
     * object.__new__(Tree), which _core.py uses to make nodes, passes its safety check */
    TreeBase_Type.tp_new = PyBaseObject_Type.tp_new;
    if (PyType_Ready(&TreeBase_Type) < 0 || PyType_Ready(&Unflattener_Type) < 0)
        return NULL;
    empty_dict = PyDict_New();
    str_shape = PyUnicode_InternFromString("shape");
    str_dtype = PyUnicode_InternFromString("dtype");
    str_itemsize = PyUnicode_InternFromString("itemsize");
    if (empty_dict == NULL || str_shape == NULL || str_dtype == NULL || str_itemsize == NULL)
        return NULL;
    PyObject *m = PyModule_Create(&sp_module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddObjectRef(m, "TreeBase", (PyObject *)&TreeBase_Type) < 0
        || PyModule_AddObjectRef(m, "Unflattener", (PyObject *)&Unflattener_Type) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
