/* vec.h — the one grow helper: make a realloc'd array hold at least `need`
 * elements, doubling its capacity. No project includes. */
#ifndef BF_VEC_H
#define BF_VEC_H

#include <stddef.h>

/* The part of bf_vec_grow that reallocates (out of line). */
int bf_vec_grow_slow(void **p, size_t *cap, size_t need, size_t elem, size_t first_cap);

/* Make *p (an array of *cap elements of elem bytes, or NULL with *cap 0) hold
 * at least need elements: the capacity starts at first_cap (when *cap is 0)
 * and doubles until it is enough. New elements are not initialised.
 * Returns 0 or -ENOMEM (then *p and *cap are untouched; *p is still valid).
 * Inline: callers check on every element they add, and mostly it fits. */
static inline int bf_vec_grow(void **p, size_t *cap, size_t need, size_t elem, size_t first_cap) {
  return need <= *cap ? 0 : bf_vec_grow_slow(p, cap, need, elem, first_cap);
}

/* As bf_vec_grow, and the new elements (from the old capacity on) are zeroed. */
int bf_vec_grow_zero(void **p, size_t *cap, size_t need, size_t elem, size_t first_cap);

#endif
