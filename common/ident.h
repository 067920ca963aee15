/* ident.h — the one definition of a function's identity, (file, qualname,
 * firstlineno), and of what a producer writes when it knows less: the names
 * the tracer, the native unwinder, import and the store write, and the
 * predicates every export and view reads them with. No project includes. */
#ifndef BF_IDENT_H
#define BF_IDENT_H

#include <stddef.h>
#include <stdint.h>

/* A C function: (BF_IDENT_BUILTIN, bf_ident_builtin(...), 0). The only file
 * read as "C function" (pstats "~", pprof's bare qualname, flame colour). */
#define BF_IDENT_BUILTIN "<builtin>"
/* A file or qualname its producer did not have; (BF_IDENT_UNKNOWN, frame
 * text, 0) is a frame known by its text alone (imported collapsed stacks). */
#define BF_IDENT_UNKNOWN "<unknown>"
/* Native frames are (mapping's path, name, 0); code outside any file has
 * this path, and a name neither a symbol nor an unwind table gives is "??". */
#define BF_IDENT_ANONYMOUS "[anonymous]"
#define BF_IDENT_NO_SYMBOL "??"

/* Qualname of a C function: "module.name", or "module.type.name" when type
 * is not NULL (type: the defining type's qualname); module NULL (none known)
 * is "builtins". Caller frees; NULL when out of memory. */
char *bf_ident_builtin(const char *module, const char *type, const char *name);

/* s, or BF_IDENT_UNKNOWN when s is NULL (for a file or a qualname). */
static inline const char *bf_ident_or_unknown(const char *s) {
  return s ? s : BF_IDENT_UNKNOWN;
}

/* Name of a native function: symbol when it is not NULL or empty; else
 * "0x<start>" when has_start (start: the function's offset in its file, or
 * its address outside any file), else BF_IDENT_NO_SYMBOL. Written to buf (len
 * bytes, cut to fit) unless symbol is buf itself. Returns buf. */
char *bf_ident_native_name(char *buf, size_t len, const char *symbol, int has_start, uint64_t start);

/* 1 when file names a C function (file may be NULL). */
int bf_ident_is_builtin(const char *file);
/* 1 when (file, firstlineno) is a frame known by its text alone: the
 * qualname is all there is to show. */
int bf_ident_is_unknown(const char *file, int64_t firstlineno);
/* 1 when (file, firstlineno) is a native frame as the unwinder writes it:
 * line 0 and an absolute path that is not Python source (".py"), or
 * BF_IDENT_ANONYMOUS. */
int bf_ident_is_native(const char *file, int64_t firstlineno);

#endif
