"""Turns keyword arguments of create/exec into what the native layer takes,
with a clear InvalidArgument naming the field for wrong types. Value ranges
are the node's business (it answers InvalidArgument naming the field)."""

import os
from collections.abc import Mapping, Sequence

from . import _native
from .errors import InvalidArgument

DEFAULT_ADDR = "127.0.0.1:7700"

# create() keyword -> its kind ("str", "int", "float", "bool", "str_list"
# or "str_map"), from the one field list in C++ (src/core/spec_fields.hpp).
_SPEC_FIELDS = _native.SPEC_FIELDS

# create() keywords that are not spec fields, and the field each fills:
# ``network=`` takes DSec's SDK forms and fills ``network_allow``.
KEYWORD_ALIASES = {"network": "network_allow"}


def resolve_addr(addr):
    """addr, else $DSEC_ADDR, else the node's default native port."""
    addr = addr or os.environ.get("DSEC_ADDR") or DEFAULT_ADDR
    if not isinstance(addr, str):
        raise InvalidArgument(f"addr must be a 'host:port' string, got {type(addr).__name__}")
    return addr


def _str_list(name, v):
    if isinstance(v, (str, bytes)) or not isinstance(v, Sequence) \
            or not all(isinstance(x, str) for x in v):
        raise InvalidArgument(f"{name}: must be a list of str")
    return list(v)


def _str_map(name, v):
    if not isinstance(v, Mapping) or not all(
            isinstance(k, str) and isinstance(x, str) for k, x in v.items()):
        raise InvalidArgument(f"{name}: must be a dict of str to str")
    return dict(v)


def _number(name, v, integer):
    if isinstance(v, bool) or not isinstance(v, (int, float)) or (integer and not isinstance(v, int)):
        raise InvalidArgument(f"{name}: must be {'an int' if integer else 'a number'}, "
                              f"got {type(v).__name__}")
    return v


def _bool(name, v):
    if not isinstance(v, bool):
        raise InvalidArgument(f"{name}: must be a bool, got {type(v).__name__}")
    return v


def _string(name, v):
    if not isinstance(v, str):
        raise InvalidArgument(f"{name}: must be a str, got {type(v).__name__}")
    return v


# A spec field's kind -> its check (the value the native layer takes).
_CHECKS = {
    "str": _string,
    "int": lambda key, v: _number(key, v, True),
    "float": lambda key, v: float(_number(key, v, False)),
    "str_list": _str_list,
    "str_map": _str_map,
    "bool": _bool,
}


def make_spec(kwargs):
    """create() keywords -> the native spec dict."""
    unknown = set(kwargs) - set(_SPEC_FIELDS) - set(KEYWORD_ALIASES)
    if unknown:
        raise InvalidArgument("create: unknown argument(s) " + ", ".join(sorted(unknown)))
    kwargs = dict(kwargs)
    net = kwargs.get("network")
    if isinstance(net, Mapping) and "deny" in net:  # the REST body form
        if kwargs.get("network_deny") is not None:
            raise InvalidArgument('create: network={"deny": ...} and network_deny= set the '
                                  "same thing; pass one")
        kwargs["network_deny"] = deny_arg("network.deny", net["deny"])
        kwargs["network"] = {k: v for k, v in net.items() if k != "deny"}
    if kwargs.get("network") is not None:
        if kwargs.get("network_allow") is not None:
            raise InvalidArgument("create: network= and network_allow= set the same thing; "
                                  "pass one")
        kwargs["network_allow"] = network_arg(kwargs["network"])
    kwargs.pop("network", None)
    spec = {}
    for key, v in kwargs.items():
        if v is None:
            continue
        if key == "network_allow" and is_named_network(v):
            v = named_network(v)  # DSec's SDK form: {"pypi": True, "npm": False}
        spec[key] = _CHECKS[_SPEC_FIELDS[key]](key, v)
    if not spec.get("layers") and not spec.get("image"):
        raise InvalidArgument("layers: at least one layer ref (name@version) is required, "
                              "or an image")
    return spec


def make_exec(cmd, cwd, env, stdin, timeout_s, step=None):
    """exec() arguments -> the native (argv, cwd, env, stdin, timeout_s[, step])
    tuple. A str cmd runs under /bin/sh -c; a list is the argv itself."""
    if isinstance(cmd, str):
        if not cmd:
            raise InvalidArgument("cmd: must not be empty")
        argv = ["/bin/sh", "-c", cmd]
    elif isinstance(cmd, Sequence) and not isinstance(cmd, bytes) and cmd \
            and all(isinstance(a, str) for a in cmd):
        argv = list(cmd)
    else:
        raise InvalidArgument("cmd: must be a non-empty str or a non-empty list of str")
    if stdin is None:
        stdin = b""
    elif isinstance(stdin, str):
        stdin = stdin.encode()
    elif not isinstance(stdin, (bytes, bytearray, memoryview)):
        raise InvalidArgument(f"stdin: must be bytes or str, got {type(stdin).__name__}")
    timeout = 0.0 if timeout_s is None else float(_number("timeout_s", timeout_s, False))
    args = (argv, _string("cwd", cwd) if cwd is not None else "",
            _str_map("env", env) if env is not None else {}, bytes(stdin), timeout)
    if step is not None:  # the node checks length and charset
        if not _string("step", step):
            raise InvalidArgument("step: must not be empty")
        args += (step,)
    return args


def seq_arg(name, v):
    """since= / upto_seq= -> the native int (-1 = none)."""
    if v is None:
        return -1
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise InvalidArgument(f"{name}: must be an int >= 0, got {v!r}")
    return v


def parse_trajectory(text):
    """The node's NDJSON log -> a list of dicts, one per record, in seq order."""
    import json
    return [json.loads(line) for line in text.decode("utf-8", "replace").splitlines() if line]


def file_data(data):
    """write_file payload as bytes (str is UTF-8)."""
    if isinstance(data, str):
        return data.encode()
    if isinstance(data, (bytes, bytearray, memoryview)):
        return bytes(data)
    raise InvalidArgument(f"data: must be bytes or str, got {type(data).__name__}")


def path_arg(path):
    if not isinstance(path, str) or not path.startswith("/"):
        raise InvalidArgument(f"path: must be an absolute path inside the sandbox, got {path!r}")
    return path


def labels_arg(labels):
    return {} if labels is None else _str_map("labels", labels)


def make_network(allow):
    """set_network(allow) -> the allow-list (None or [] = loopback only).

    Also takes DSec's SDK form, egress source names to booleans
    (``{"pypi": True, "npm": False}``): the names set to True."""
    if is_named_network(allow):
        return named_network(allow)
    return [] if allow is None else _str_list("allow", allow)


def is_named_network(network):
    return (isinstance(network, Mapping) and len(network) > 0
            and all(isinstance(v, bool) for v in network.values())
            and not set(network) & {"mode", "allow"})


def named_network(network):
    """{"pypi": True, "npm": False} -> ["pypi"] (the node checks the names)."""
    for k in network:
        if not isinstance(k, str) or not k:
            raise InvalidArgument(f"network: source names must be non-empty strings, got {k!r}")
    return [k for k, v in network.items() if v]


CPU_CLASSES = ("latency", "batch")


def make_set_network(allow, deny):
    """set_network(allow, deny) -> the native (allow-list, deny-list)."""
    return (make_network(allow), deny_arg("deny", deny))


def deny_arg(name, deny):
    """A deny-list (``["8.8.8.8:*", "10.0.0.0/8:443"]``; None = none). The
    node checks the entries: addresses and CIDRs only, no domains."""
    return [] if deny is None else _str_list(name, deny)


def make_update(cpu_class, network, network_deny=None):
    """update(cpu_class=, network=, network_deny=) -> (cpu class or "",
    allow-list or None, deny-list).

    ``network`` is an allow-list (``[]`` = loopback only) or the REST body
    form ``{"mode": "none"}`` / ``{"allow": [...], "deny": [...]}``;
    ``network_deny`` is the deny-list beside a list form. The network policy
    is replaced whole, so a deny-list comes with the allow-list it narrows."""
    if cpu_class is None and network is None and network_deny is None:
        raise InvalidArgument("update: nothing to change; pass cpu_class= and/or network=")
    cls = ""
    if cpu_class is not None:
        _string("cpu_class", cpu_class)
        if cpu_class not in CPU_CLASSES:
            raise InvalidArgument(f'cpu_class: must be "latency" or "batch", got "{cpu_class}"')
        cls = cpu_class
    deny = deny_arg("network_deny", network_deny)
    if isinstance(network, Mapping) and "deny" in network:
        if network_deny is not None:
            raise InvalidArgument("update: network={\"deny\": ...} and network_deny= set the "
                                  "same thing; pass one")
        deny = deny_arg("network.deny", network["deny"])
        network = {k: v for k, v in network.items() if k != "deny"}
    if network_deny is not None and network is None:
        raise InvalidArgument("network_deny: goes with network= (the policy is replaced "
                              "whole; pass the allow-list it narrows, e.g. "
                              'network=["0.0.0.0/0:*"])')
    allow = None if network is None else network_arg(network)
    return (cls, allow, deny)


def network_arg(network):
    """create(network=) / update(network=) -> the allow-list ([] = none).

    Takes DSec's SDK form ``{"pypi": True, "npm": False}`` (the names set
    True), a list of entries and names (``["pypi", "10.0.0.5:443"]``),
    ``"none"``, or the REST body form ``{"mode": "none"}`` /
    ``{"allow": [...]}``."""
    if network == "none":
        return []
    if is_named_network(network):
        return named_network(network)
    if isinstance(network, Mapping):
        unknown = set(network) - {"mode", "allow"}
        if unknown:
            raise InvalidArgument("network: unknown field(s) " + ", ".join(sorted(unknown))
                                  + ' (a dict is {"name": bool, ...}, {"mode": "none"} or '
                                  '{"allow": [...], "deny": [...]})')
        mode = network.get("mode")
        if mode not in (None, "none", "allow"):
            raise InvalidArgument(f'network.mode: must be "none" or "allow", got "{mode}"')
        return [] if mode == "none" else make_network(network.get("allow"))
    if isinstance(network, str):
        raise InvalidArgument(f'network: a str must be "none", got "{network[:100]}" '
                              '(entries go in a list: ["pypi", "10.0.0.5:443"])')
    return _str_list("network", network)


def make_fncall(language, code, stdin, timeout_s, files):
    """fncall() arguments -> the native tuple, with types checked."""
    _string("language", language)
    if isinstance(code, bytes):
        code = code.decode()
    _string("code", code)
    if stdin is None:
        stdin = ""
    elif isinstance(stdin, bytes):
        stdin = stdin.decode("utf-8", "surrogateescape")
    _string("stdin", stdin)
    timeout_s = float(_number("timeout_s", timeout_s, False))
    out = {}
    for k, v in (files or {}).items():
        if not isinstance(k, str):
            raise InvalidArgument("files: names must be str")
        if isinstance(v, str):
            v = v.encode()
        if not isinstance(v, (bytes, bytearray)):
            raise InvalidArgument(f"files[{k!r}]: must be bytes or str")
        out[k] = bytes(v)
    return (language, code, stdin, timeout_s, out)


def snapshot_args(name, version):
    return ("" if name is None else _string("name", name),
            "" if version is None else _string("version", version))
