"""Dynamo's backend registry as torch.compile sees it: names come from the
`torch_dynamo_backends` entry points and from register_backend, a name may be registered
only once, and a name first looked up loads its entry point and registers what it loads."""

from importlib.metadata import entry_points

entry_point_names = {}
registered = {}


def _discover():
    for ep in entry_points(group="torch_dynamo_backends"):
        entry_point_names.setdefault(ep.name, ep)


def register_backend(compiler_fn=None, name=None, tags=()):
    name = name or compiler_fn.__name__
    if name in registered:
        raise AssertionError(f"duplicate name: {name}")
    registered[name] = compiler_fn
    return compiler_fn


def list_backends(exclude_tags=("debug", "experimental")):
    _discover()
    return sorted(set(entry_point_names) | set(registered))


def lookup_backend(name):
    _discover()
    if name not in registered:
        if name not in entry_point_names:
            raise KeyError(f"unknown backend {name}")
        register_backend(entry_point_names[name].load(), name=name)
    return registered[name]
