"""Where saved class names are looked up (``keras.saving``'s
``register_keras_serializable``, ``custom_object_scope``,
``get_registered_object``).

Loading finds a class by name only among: the ``custom_objects`` given to
the loading call (and any enclosing :func:`custom_object_scope`), classes
registered with :func:`register_serializable`, and pyresnet's own layers
and models.  A module name stored in a file is never imported.
"""
import contextlib
import inspect
import threading

_REGISTERED = {}       # "package>Name" -> class
_REGISTERED_NAMES = {}  # class -> "package>Name"
_scopes = threading.local()  # .stack: custom_objects dicts of the enclosing scopes


def register_serializable(package="Custom", name=None):
    """Decorator making a custom layer (or model) class, or a function (an
    activation, an initializer...), loadable without ``custom_objects``, as
    ``keras.saving.register_keras_serializable``::

        @pyresnet.saving.register_serializable(package="my_project")
        class Scale(pyresnet.layers.Layer): ...

        @pyresnet.saving.register_keras_serializable(package="my_project")
        def mish(x): ...                # Dense(8, activation=mish) saves and loads

    The object is saved under ``"<package>><name>"`` (default name: the class
    or function name) and found under that key when loading; the key is also
    in :func:`get_custom_objects`.

    Args:
        package (str): a namespace, so two projects' ``Scale`` do not clash.
        name (str): default ``obj.__name__``.
    Raises:
        ValueError: when the decorated object is neither a class with
            ``get_config`` nor a named function, or ``package``/``name``
            contain ``">"``, or the key is already registered to another
            object.
    """
    if ">" in str(package) or (name is not None and ">" in str(name)):
        raise ValueError(f"register_serializable: package and name may not contain '>', got "
                         f"{package!r}, {name!r}")

    def decorator(cls):
        function = inspect.isfunction(cls) and cls.__name__ != "<lambda>"
        if not function and (not inspect.isclass(cls) or not hasattr(cls, "get_config")):
            raise ValueError(f"register_serializable: expected a class with get_config() or a "
                             f"named function, got {cls!r}")
        key = f"{package}>{name or cls.__name__}"
        old = _REGISTERED.get(key)
        if old is not None and old is not cls and \
                (old.__module__, old.__qualname__) != (cls.__module__, cls.__qualname__):
            raise ValueError(f"register_serializable: {key!r} is already registered to "
                             f"{old.__module__}.{old.__qualname__}")
        _REGISTERED[key] = cls
        _REGISTERED_NAMES[cls] = key
        return cls

    return decorator


def get_registered_name(cls):
    """``"package>Name"`` for a registered class or function, else its
    ``__name__`` (``keras.saving.get_registered_name``)."""
    return _REGISTERED_NAMES.get(cls, cls.__name__)


def get_custom_objects():
    """The global dict of custom objects (``keras.saving.get_custom_objects``):
    name -> class or function.  :func:`register_serializable` adds its
    ``"package>Name"`` keys here; adding an entry yourself
    (``get_custom_objects()["Scale"] = Scale``) makes every load find the
    object under that name, as a :func:`custom_object_scope` around all of
    them would.  Loading still never imports a module named in a file."""
    return _REGISTERED


@contextlib.contextmanager
def custom_object_scope(custom_objects):
    """Within the block, ``custom_objects`` (name -> class) are found by
    every load, as ``keras.saving.custom_object_scope``."""
    stack = getattr(_scopes, "stack", None)
    if stack is None:
        stack = _scopes.stack = []
    stack.append(dict(custom_objects or {}))
    try:
        yield
    finally:
        stack.pop()


def _builtins():
    from .. import layers, models  # noqa: PLC0415 (import cycle: layers use saving lazily)
    found = {name: value for name, value in vars(layers).items()
             if inspect.isclass(value) and issubclass(value, layers.Layer)}
    found.update(Model=models.Model, Functional=models.Model, Sequential=models.Sequential)
    return found


BUILTIN_MODULES = ("pyresnet.layers", "pyresnet.models")


def get_registered_object(class_name, registered_name=None, custom_objects=None, module=None):
    """The class saved as ``class_name`` (and ``registered_name``), or None.

    Looks in ``custom_objects``, then the enclosing scopes (innermost first),
    by registered name and by class name; then the registered classes; then,
    for a class saved from pyresnet's own modules (``module``), pyresnet's
    layers and models.
    """
    keys = [k for k in (registered_name, class_name) if k]
    for objects in [custom_objects or {}] + list(reversed(getattr(_scopes, "stack", None) or [])):
        for key in keys:
            if key in objects:
                return objects[key]
    for key in keys:  # registered, or put into get_custom_objects() by hand
        if key in _REGISTERED:
            return _REGISTERED[key]
    if module in (None,) + BUILTIN_MODULES and registered_name in (None, class_name):
        return _builtins().get(class_name)
    return None


def is_builtin(cls):
    """Whether ``cls`` is one of pyresnet's own layers/models (saved by bare name)."""
    return _builtins().get(cls.__name__) is cls and cls not in _REGISTERED_NAMES
