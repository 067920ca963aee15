/* bench_deep20.h — the spinning 20-deep stack the C sampler benches attach
 * to (<module> + 19 frames of f); it says "ready" once it runs Python. */
#ifndef BENCH_DEEP20_H
#define BENCH_DEEP20_H

#define BENCH_DEEP20_TARGET                                     \
  "import sys\n"                                                \
  "def f(n):\n"                                                 \
  "    if n == 0:\n"                                            \
  "        x = 0\n"                                             \
  "        while True:\n"                                       \
  "            x += 1\n"                                        \
  "    return f(n - 1)\n"                                       \
  "sys.stdout.write('ready\\n'); sys.stdout.flush()\n"         \
  "f(18)\n"

#endif
