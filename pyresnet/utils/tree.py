"""Nested structures (lists, tuples, dicts of leaves), as Keras's ``tree``.

Dicts are traversed in sorted key order.  ``is_leaf`` lets a caller treat a
shape tuple such as ``(None, 32, 32, 3)`` as one leaf.
"""


def is_shape(x):
    """True for a shape: a tuple or list of ints and Nones (possibly empty)."""
    return isinstance(x, (tuple, list)) and all(d is None or isinstance(d, int) for d in x)


def flatten(structure, is_leaf=None):
    """The leaves of ``structure`` in order, as a list."""
    if is_leaf is not None and is_leaf(structure):
        return [structure]
    if isinstance(structure, dict):
        return [x for k in sorted(structure) for x in flatten(structure[k], is_leaf)]
    if isinstance(structure, (list, tuple)):
        return [x for s in structure for x in flatten(s, is_leaf)]
    return [structure]


def pack_sequence_as(structure, flat, is_leaf=None):
    """Rebuild ``structure`` with the leaves taken in order from ``flat``."""
    it = iter(flat)

    def pack(s):
        if is_leaf is not None and is_leaf(s):
            return next(it)
        if isinstance(s, dict):
            return {k: pack(s[k]) for k in sorted(s)}
        if isinstance(s, (list, tuple)):
            packed = [pack(x) for x in s]
            return packed if isinstance(s, list) else tuple(packed)
        return next(it)

    return pack(structure)


def map_structure(fn, structure, is_leaf=None):
    """``structure`` with every leaf replaced by ``fn(leaf)``."""
    return pack_sequence_as(structure, [fn(x) for x in flatten(structure, is_leaf)], is_leaf)
