# Puts the fork server (fork_server/*.py) together into ONE Python program and
# embeds it into the binary as fncall::fork_server_source, which the node runs
# in each pool sandbox as `python3 -c <program> <socket path>`.
#
#   embed.py OUTPUT.cpp MODULE.py...
#
# The modules come in load order (meson.build declares it): each may import
# only modules before it, relatively (`from . import x`, `from .x import y`),
# and the last one is the entry point, with main(). The program holds every
# module's source as a string and a small loader that runs them, in that
# order, as the package `fork_server` (what the unit test imports from the
# source tree too), then calls main() of the last.
import os, re, sys

PACKAGE = "fork_server"
# The program's first line: how a process listing (and test_fncall) tells
# the fork server apart.
HEAD = "# The FnCall fork server"

LOADER = '''\
import sys, types


def load(package, modules):
    pkg = types.ModuleType(package)
    pkg.__path__ = []
    sys.modules[package] = pkg
    for name, source in modules:
        mod = types.ModuleType(package + "." + name)
        mod.__package__ = package
        mod.__file__ = "<%s/%s.py>" % (package, name)
        sys.modules[mod.__name__] = mod
        setattr(pkg, name, mod)
        exec(compile(source, mod.__file__, "exec"), mod.__dict__)
    # The modules hold each other by reference from here on: out of
    # sys.modules, a call's own `import server` (say) finds its own file.
    for name, _ in modules:
        del sys.modules[package + "." + name]
    del sys.modules[package]
    return getattr(pkg, modules[-1][0])


entry = load(PACKAGE, MODULES)
del MODULES
entry.main()
'''

RELATIVE_IMPORT = re.compile(r"^from \.(\w*) import (.+)$", re.M)


def module_name(path):
    return os.path.splitext(os.path.basename(path))[0]


def check_order(modules):
    """Each module imports only the ones before it; the last has main()."""
    seen = set()
    for name, source in modules:
        for sub, names in RELATIVE_IMPORT.findall(source):
            needed = [sub] if sub else [n.strip() for n in names.split(",")]
            for n in needed:
                if n not in seen:
                    sys.exit("embed.py: %s imports %s, which is not declared before it"
                             % (name, n))
        seen.add(name)
    if not re.search(r"^def main\(\):", modules[-1][1], re.M):
        sys.exit("embed.py: the last module (%s) has no main()" % modules[-1][0])


def program(paths):
    """The one Python program of the modules at `paths`, in that order."""
    modules = [(module_name(p), open(p, encoding="utf-8").read()) for p in paths]
    check_order(modules)
    listing = ", ".join(name for name, _ in modules)
    out = [HEAD + " (backends/fncall/fork_server/, put together by embed.py):\n",
           "# its modules %s, loaded in this order; %s.main() runs it.\n"
           % (listing, modules[-1][0]),
           "MODULES = (\n"]
    out += ["    (%r, %r),\n" % m for m in modules]
    out += [")\nPACKAGE = %r\n" % PACKAGE, LOADER]
    return "".join(out)


def main():
    output, paths = sys.argv[1], sys.argv[2:]
    src = program(paths)
    assert ')PY"' not in src
    with open(output, "w", encoding="utf-8") as f:
        f.write("// Generated from fork_server/*.py by embed.py; do not edit.\n")
        f.write('#include "backends/fncall/fncall_pool.hpp"\n')
        f.write("namespace dsec::backends::fncall {\n")
        f.write('const char* const fork_server_source = R"PY(' + src + ')PY";\n')
        f.write("}\n")


if __name__ == "__main__":
    main()
