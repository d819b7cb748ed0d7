# The Python side's field lists against the one list in C++
# (src/core/spec_fields.hpp). dsec/types.py, the type stub and
# Client.create's signature cannot include C++, so they are written out by
# hand; the native module exposes what it derives from the list (the keys of
# a sandbox info dict, the keywords of a spec dict) and these tests fail when
# a hand-written copy drifts from it. No node needed.

import ast
import dataclasses
import inspect

from dsec_harness import REPO, import_sdk

dsec = import_sdk()
from dsec import _native  # noqa: E402  (after import_sdk put the build on sys.path)

STUB = REPO / "bindings" / "python" / "dsec" / "__init__.pyi"


def _stub_class(name):
    tree = ast.parse(STUB.read_text())
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            return node
    raise AssertionError(f"class {name} is not in {STUB}")


def _stub_fields(cls_name):
    return [n.target.id for n in _stub_class(cls_name).body if isinstance(n, ast.AnnAssign)]


def _stub_params(cls_name, method):
    for f in _stub_class(cls_name).body:
        if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)) and f.name == method:
            a = f.args
            return [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs if x.arg != "self"]
    raise AssertionError(f"{cls_name}.{method} is not in {STUB}")


def _no_repeats(names, what):
    assert len(names) == len(set(names)), f"{what} names a field twice: {names}"
    return set(names)


def test_native_lists_are_not_empty():
    assert "layers" in _native.SPEC_FIELDS and "network_allow" in _native.SPEC_FIELDS
    assert "id" in _native.SANDBOX_INFO_FIELDS and "state" in _native.SANDBOX_INFO_FIELDS


def test_sandbox_info_dataclass_has_the_native_fields():
    native = _no_repeats(list(_native.SANDBOX_INFO_FIELDS), "the native info dict")
    ours = _no_repeats([f.name for f in dataclasses.fields(dsec.SandboxInfo)], "types.py")
    assert ours == native, (f"dsec/types.py SandboxInfo lacks {sorted(native - ours)}, "
                            f"has extra {sorted(ours - native)}")


def test_sandbox_info_stub_has_the_native_fields():
    native = set(_native.SANDBOX_INFO_FIELDS)
    stub = _no_repeats(_stub_fields("SandboxInfo"), "__init__.pyi SandboxInfo")
    assert stub == native, (f"__init__.pyi SandboxInfo lacks {sorted(native - stub)}, "
                            f"has extra {sorted(stub - native)}")


def test_client_create_takes_every_spec_field():
    """create's keywords are the spec's fields plus the Python-only aliases
    of _spec.KEYWORD_ALIASES (network= -> network_allow, DSec's SDK name),
    each of which fills a real spec field."""
    from dsec import _spec
    native = set(_native.SPEC_FIELDS)
    assert set(_spec.KEYWORD_ALIASES.values()) <= native, _spec.KEYWORD_ALIASES
    assert not set(_spec.KEYWORD_ALIASES) & native, _spec.KEYWORD_ALIASES
    want = native | set(_spec.KEYWORD_ALIASES)
    impl = _no_repeats(list(inspect.signature(dsec.Client.create).parameters)[1:],
                       "Client.create")
    stub = _no_repeats(_stub_params("Client", "create"), "__init__.pyi Client.create")
    assert impl == want, (f"Client.create lacks {sorted(want - impl)}, "
                          f"has extra {sorted(impl - want)}")
    assert stub == want, (f"__init__.pyi Client.create lacks {sorted(want - stub)}, "
                          f"has extra {sorted(stub - want)}")


def test_spec_kinds_are_ones_the_sdk_checks():
    from dsec import _spec
    assert set(_native.SPEC_FIELDS.values()) <= set(_spec._CHECKS), _native.SPEC_FIELDS
