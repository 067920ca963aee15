/* opnames.h — record --opcodes: the names of a Python version's opcode bytes
 * (3.11-3.15, specialised forms included), for the views and exports that
 * show a sample's leaf instruction (BF_SAMPLE_OPCODE_OF in store.h). */
#ifndef BF_OPNAMES_H
#define BF_OPNAMES_H

/* Name of opcode byte op of Python python_version ("3.12.1") — what the
 * adaptive interpreter wrote into the code, e.g. "LOAD_ATTR_INSTANCE_VALUE" —
 * or NULL when that version has no such opcode or is not 3.11-3.15.
 * OUT (may be NULL): *base, the instruction it specialises ("LOAD_ATTR"), or
 * the name itself. Static strings. */
const char *bf_opname(const char *python_version, int op, const char **base);

#endif
