"""Print the per-version opcode table (sampling/gen/opcodes.h) the walker's
torn-stack check uses. Run once per CPython 3.8-3.15 (gen_opcodes.sh):

    smp_op_3_<minor>[opcode] = caches | class << 4

caches: inline cache code units after the instruction (3.11+), of its base
(unspecialized, uninstrumented) form. class: SMP_OP_PLAIN (a frame stopped
here cannot have a live child frame, short of __del__, a trace function or a
signal handler), SMP_OP_CALL (it can: on 3.11+ a child pushed by the eval
loop itself, on 3.8-3.10 any child), SMP_OP_UNKNOWN (cannot tell: accept),
SMP_OP_EXTARG (EXTENDED_ARG: the class of the next instruction).
"""
import dis
import opcode
import sys

minor = sys.version_info[1]
names = list(getattr(dis, "_all_opname", opcode.opname))
opmap = {n: i for i, n in enumerate(names) if not n.startswith("<")}

if minor >= 11:
    # only what the eval loop runs inline (no C frame in between)
    CALLS = {"CALL", "CALL_FUNCTION_EX", "CALL_KW", "PRECALL", "SEND", "FOR_ITER",
             "BINARY_SUBSCR", "LOAD_ATTR", "EXIT_INIT_CHECK"}
    if minor >= 14:
        # 3.14 folded BINARY_SUBSCR into BINARY_OP (BINARY_OP_SUBSCR_GETITEM
        # pushes __getitem__'s frame inline)
        CALLS.add("BINARY_OP")
    UNKNOWN = {"INSTRUMENTED_LINE", "INSTRUMENTED_INSTRUCTION", "ENTER_EXECUTOR"}
    PLAIN = None  # everything else
else:
    # every Python call goes through C here: a frame can have a child at any
    # instruction that may run arbitrary code; these never do (but by a
    # DECREF's __del__, a trace function or a signal handler)
    PLAIN = {"NOP", "LOAD_FAST", "LOAD_CONST", "LOAD_CLOSURE", "LOAD_DEREF",
             "RETURN_VALUE", "YIELD_VALUE", "JUMP_ABSOLUTE", "JUMP_FORWARD",
             "ROT_TWO", "ROT_THREE", "ROT_FOUR", "ROT_N", "DUP_TOP", "DUP_TOP_TWO",
             "POP_BLOCK", "SETUP_FINALLY", "BUILD_TUPLE", "BUILD_LIST", "GEN_START",
             "BEGIN_FINALLY", "POP_FINALLY", "CALL_FINALLY", "LOAD_ASSERTION_ERROR"}
    CALLS = UNKNOWN = set()


def base(name):
    if name.startswith("INSTRUMENTED_") and name not in UNKNOWN:
        name = name[len("INSTRUMENTED_"):]
    if minor >= 11 and name in opmap:
        name = names[dis._deoptop(opmap[name])] if hasattr(dis, "_deoptop") else name
    return name


def caches(name):
    ice = opcode._inline_cache_entries
    if hasattr(ice, "get"):  # a dict (3.13), a frozendict (3.15)
        return ice.get(name, 0)
    return ice[opmap[name]] if name in opmap and opmap[name] < len(ice) else 0


row = []
for op in range(256):
    n = names[op] if op < len(names) else "<%d>" % op
    if n.startswith("<"):
        row.append(2 << 4)  # not an opcode of this version: unknown
        continue
    b = base(n)
    c = caches(b) if minor >= 11 else 0
    if n == "EXTENDED_ARG":
        k = 3
    elif n in UNKNOWN or b not in opmap:
        k = 2
    elif PLAIN is not None:
        k = 0 if b in PLAIN else 1
    else:
        k = 1 if b in CALLS else 0
    assert c < 16
    row.append(c | k << 4)
print("static const uint8_t smp_op_3_%d[256] = { /* %s */" % (minor, sys.version.split()[0]))
for i in range(0, 256, 16):
    print("  " + ", ".join("0x%02x" % v for v in row[i:i + 16]) + ",")
print("};")
