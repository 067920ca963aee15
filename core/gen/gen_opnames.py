"""Print one version's opcode names for core/gen/opnames_gen.h (run by
gen_opnames.sh under each CPython 3.11-3.15): every opcode byte's name,
specialised forms included (what the adaptive interpreter writes into
co_code_adaptive), and the base instruction a specialised one stands for."""
import dis
import opcode
import sys

minor = sys.version_info[1]
names = list(getattr(dis, "_all_opname", opcode.opname))
for name, op in getattr(opcode, "_specialized_opmap", {}).items():
    names[op] = name
base = {}
for b, variants in getattr(opcode, "_specializations", {}).items():
    for v in variants:
        base[v] = b
print("static const char *const opnames_3_%d[256][2] = { /* %s: name, base */" % (minor, sys.version.split()[0]))
for op in range(256):
    n = names[op] if op < len(names) else "<%d>" % op
    if n.startswith("<"):
        print("  {NULL, NULL},")
    else:
        print('  {"%s", "%s"},' % (n, base.get(n, n)))
print("};")
