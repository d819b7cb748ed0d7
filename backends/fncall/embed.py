# Embeds fork_server.py into the binary as fncall::fork_server_source.
import sys
src = open(sys.argv[1], encoding="utf-8").read()
assert ')PY"' not in src
with open(sys.argv[2], "w", encoding="utf-8") as f:
    f.write("// Generated from fork_server.py by embed.py; do not edit.\n")
    f.write('#include "backends/fncall/fncall_pool.hpp"\n')
    f.write("namespace dsec::backends::fncall {\n")
    f.write('const char* const fork_server_source = R"PY(' + src + ')PY";\n')
    f.write("}\n")
