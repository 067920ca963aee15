/* record_keep.c — how a tick's stacks become rows of the session: threads
 * and stacks interned (a thread's last stack reused), cpu-clock batches that
 * share a thread's CPU time, an asyncio task's run of one stack kept as one
 * record, and samples held in order while another process holds the
 * database's write lock. The loop that reads the stacks is record.c's.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "record_int.h"
#include "vec.h"

#define TASK_RUN_NS 100000000LL /* --async: ticks of one task with one stack kept as one record for up to this long */

typedef struct pend_sample {
  int interned;        /* cpu clock: stack and thread already interned (smp) */
  bf_sample smp;
  int64_t tid, ts, weight;
  uint32_t flags;
  rec_kern k;
  char *name;
  size_t nframes;
  bf_smp_frame *frames; /* code pointers stay valid until bf_smp_free */
} pend_sample;

#define PEND_MAX_BYTES (64u << 20) /* at most this much held while the database is locked */

static int hold_interned(bf_store *st, target *t, rec_thread *r, const bf_sample *smp);

/* weights: total shared equally among b[0..n) */
static void share(bf_sample *b, size_t n, int64_t total) {
  for (size_t k = 0; k < n; k++)
    b[k].weight = total > 0 ? total / (int64_t)n + ((int64_t)k < total % (int64_t)n) : 0;
}

/* cpu clock: write a thread's batch of on-CPU samples, sharing the CPU it
 * used since the last batch (up to cpu_ns) equally among them; the part that
 * was the scheduler's work around its switches (switch_ns since the last
 * batch) goes to the stacks where it was found waiting meanwhile, if any:
 * a thread's CPU time counts that work inside the call that waits. */
int rec_cpu_charge(bf_store *st, target *t, rec_thread *r, int64_t cpu_ns) {
  size_t n = r->nbatch, nw = r->nwbatch;
  if (!n) return 0; /* waits alone: kept until on-CPU samples come */
  r->nbatch = r->nwbatch = 0;
  int64_t total = cpu_ns - r->last_cpu_ns;
  int64_t sw = r->switch_seen_ns - r->last_switch_ns;
  r->last_cpu_ns = cpu_ns;
  r->last_switch_ns = r->switch_seen_ns;
  if (total <= 0) return 0;
  if (!nw || sw < 0) sw = 0;
  if (sw > total) sw = total;
  share(r->batch, n, total - sw);
  share(r->wbatch, sw ? nw : 0, sw);
  if (!sw) nw = 0;
  /* written in time order within the thread, as the store requires */
  for (size_t i = 0, j = 0; i < n || j < nw;) {
    int on = j >= nw || (i < n && r->batch[i].ts_ns <= r->wbatch[j].ts_ns);
    bf_sample *x = on ? &r->batch[i++] : &r->wbatch[j++];
    if (!x->weight) continue;
    int rc = hold_interned(st, t, r, x); /* held while the database is locked */
    if (rc < 0) return rc;
    t->cpu_charged_ns += x->weight;
  }
  return 0;
}

int rec_cpu_flush(bf_store *st, target *t) {
  int rc = 0;
  for (size_t i = 0; i < t->nthreads; i++) {
    int rc2 = rec_cpu_charge(st, t, &t->threads[i], t->threads[i].cpu_seen_ns);
    if (rc2 < 0 && !rc) rc = rc2;
  }
  return rc;
}

rec_thread *rec_thread_get(target *t, int64_t tid) {
  /* threads (and --async tasks) come in the same order tick after tick */
  if (t->next_hint < t->nthreads && t->threads[t->next_hint].tid == tid) return &t->threads[t->next_hint++];
  for (size_t i = 0; i < t->nthreads; i++)
    if (t->threads[i].tid == tid) {
      t->next_hint = i + 1;
      return &t->threads[i];
    }
  t->next_hint = t->nthreads + 1;
  if (bf_vec_grow((void **)&t->threads, &t->cap_threads, t->nthreads + 1, sizeof *t->threads, 8)) return NULL;
  rec_thread *r = &t->threads[t->nthreads++];
  memset(r, 0, sizeof *r);
  r->tid = tid;
  r->last_cpu_ns = -1;
  r->last_stack_id = -1;
  return r;
}

/* Forget threads that are gone, so thread churn keeps memory bounded: a
 * thread no tick has returned for a second is dropped (with --gil only the
 * GIL holder is returned, so there it must also be missing from /proc). A
 * thread dropped too early is only looked up again (same store id). */
void rec_forget_threads(bf_store *st, target *t, int64_t now, int gil_only) {
  for (size_t i = 0; i < t->nthreads;) {
    rec_thread *r = &t->threads[i];
    int gone = r->seen_ns && now - r->seen_ns > 1000000000LL;
    if (gone && gil_only) {
      char p[64];
      snprintf(p, sizeof p, "/proc/%d/task/%lld", t->pid, (long long)r->tid);
      gone = access(p, F_OK) != 0;
    }
    if (gone && r->nbatch && rec_cpu_charge(st, t, r, r->cpu_seen_ns) < 0) gone = 0; /* its CPU first */
    if (gone && r->held.count && bf_store_sample_add(st, t->session_id, &r->held) < 0) gone = 0;
    if (!gone) {
      i++;
      continue;
    }
    rec_kern_summary(t, r);
    free(r->last_frames);
    free(r->batch);
    free(r->wbatch);
    free(r->k_runq_v);
    t->threads[i] = t->threads[--t->nthreads];
  }
  if (t->cap_threads > 64 && t->nthreads < t->cap_threads / 4) {
    rec_thread *n = realloc(t->threads, t->cap_threads / 2 * sizeof *n);
    if (n) {
      t->threads = n;
      t->cap_threads /= 2;
    }
  }
}

/* Intern a thread's stack (outermost first), reusing the last one when the
 * frames did not change. OUT: *stack_id. */
int rec_intern_stack(bf_store *st, rec_thread *r, const bf_smp_thread *th, int64_t *stack_id) {
  if (r->last_stack_id >= 0 && r->last_n == th->nframes &&
      (!th->nframes || memcmp(r->last_frames, th->frames, th->nframes * sizeof *th->frames) == 0)) {
    *stack_id = r->last_stack_id;
    return 0;
  }
  int64_t parent = 0;
  int rc;
  for (size_t k = th->nframes; k-- > 0;) {
    bf_smp_code *c = (bf_smp_code *)th->frames[k].code;
    if (!c) continue; /* never dereference a frame without code (seen once from a task chain; cause unknown) */
    if (!c->user_id) {
      rc = bf_store_intern_function(st, c->filename, c->qualname, c->firstlineno, &c->user_id);
      if (rc < 0) return rc;
    }
    int64_t fid, sid;
    if ((rc = bf_store_intern_frame(st, c->user_id, th->frames[k].line, &fid)) < 0) return rc;
    if ((rc = bf_store_intern_stack(st, parent, fid, &sid)) < 0) return rc;
    parent = sid;
  }
  if (th->nframes > r->last_cap) {
    bf_smp_frame *nf = realloc(r->last_frames, th->nframes * sizeof *nf);
    if (!nf) {
      r->last_stack_id = -1;
      *stack_id = parent;
      return 0;
    }
    r->last_frames = nf;
    r->last_cap = th->nframes;
  }
  if (th->nframes) memcpy(r->last_frames, th->frames, th->nframes * sizeof *th->frames);
  r->last_n = th->nframes;
  r->last_stack_id = parent;
  *stack_id = parent;
  return 0;
}

#define K_RESERVOIR 8192
#define K_AMEND_BACK 256 /* samples back a recorded wait may be moved to */

/* Kernel lens: th's state as this sample's part, and the sample's weight
 * split over the interval it stands for: on a CPU (the thread's schedstat
 * CPU time since its previous sample), waiting for one (schedstat's
 * run-queue delay), the rest blocked in its class. The kernel adds a wait
 * when the thread gets a CPU and a running thread's CPU time at ticks and
 * switches: what does not fit in this sample's weight is carried to the
 * thread's next samples (ledgers of charged minus recorded), so the
 * thread's totals are the kernel's. A runnable sample's rest is the wait
 * it last blocked in (it woke since), or, for a thread never seen
 * blocked, a wait for a CPU not recorded yet (charged ahead). The first
 * sample of a thread has no deltas. Also feeds its summary. */
static rec_kern kern_part(target *t, rec_thread *r, const bf_smp_thread *th, int64_t weight) {
  rec_kern k = {0, 0, 0, 0, NULL};
  if (!th->kclass) return k;
  if (!t->k_rng) t->k_rng = 0x9E3779B97F4A7C15ULL;
  k.wait = th->kclass;
  k.target = th->ktarget;
  int64_t dw = 0;
  if (r->k_seen) {
    dw = th->run_delay_ns >= r->k_run_delay ? th->run_delay_ns - r->k_run_delay : 0;
    int64_t dr = th->krun_ns >= r->k_run ? th->krun_ns - r->k_run : 0;
    int64_t cdue = dr - r->k_cpu_ledger;
    k.cpu_ns = cdue < 0 ? 0 : cdue > weight ? weight : cdue;
    r->k_cpu_ledger += k.cpu_ns - dr;
    int64_t room = weight - k.cpu_ns, due = dw - r->k_ledger;
    k.runq_ns = due < 0 ? 0 : due > room ? room : due;
    if (th->kclass == BF_SMP_K_CPU && k.runq_ns < room) {
      if (r->k_block_class) {
        k.wait = r->k_block_class;
        k.target = r->k_block_target;
      } else {
        k.runq_ns = room;
      }
    }
    r->k_ledger += k.runq_ns - dw;
    if (th->majflt >= r->k_majflt) k.majflt = (uint32_t)(th->majflt - r->k_majflt);
  }
  r->k_run_delay = th->run_delay_ns;
  r->k_run = th->krun_ns;
  r->k_majflt = th->majflt;
  r->k_seen = 1;
  if (th->kclass != BF_SMP_K_CPU) {
    r->k_block_class = th->kclass;
    r->k_block_target = th->ktarget;
  }
  r->k_runq_total_ns += dw; /* as the kernel recorded it */
  t->k_runq_total_ns += dw; /* as the kernel recorded it */
  t->k_weight_ns += weight;
  /* reservoir of the delays the kernel recorded per sample interval (zeros too) */
  uint64_t i = r->k_runq_seen++;
  if (r->k_runq_n < K_RESERVOIR) {
    if (bf_vec_grow((void **)&r->k_runq_v, &r->k_runq_cap, r->k_runq_n + 1, sizeof *r->k_runq_v, 64) == 0)
      r->k_runq_v[r->k_runq_n++] = dw;
  } else {
    t->k_rng ^= t->k_rng << 13;
    t->k_rng ^= t->k_rng >> 7;
    t->k_rng ^= t->k_rng << 17;
    uint64_t j = t->k_rng % (i + 1);
    if (j < K_RESERVOIR) r->k_runq_v[j] = dw;
  }
  return k;
}

int rec_name_thread(bf_store *st, target *t, rec_thread *r, int64_t tid, const bf_smp_thread *th,
                    const char *tname) {
  int py = tname && th->py_name; /* threading's name, not the OS's (comm) */
  if (r->store_thread_id && (!tname || r->named >= (py ? 2 : 1))) return 0;
  int rc;
  if (r->store_thread_id && r->named == 1) /* the OS name came first: the Python one replaces it */
    rc = bf_store_thread_rename(st, r->store_thread_id, tname);
  else
    rc = bf_store_intern_thread(st, t->session_id, tid, tname, &r->store_thread_id);
  if (rc < 0) return rc;
  r->named = !tname ? 0 : py ? 2 : 1;
  return 0;
}

/* Write one thread's sample to the store. -EBUSY: another process holds the
 * write lock; nothing of this sample was added (interning is idempotent). */
static int store_sample(bf_store *st, target *t, rec_thread *r, const bf_smp_thread *th,
                        const char *tname, int64_t ts, uint32_t flags, int64_t weight, const rec_kern *k) {
  int rc;
  if ((rc = rec_name_thread(st, t, r, r->tid, th, tname)) < 0) return rc;
  int64_t stack_id;
  if ((rc = rec_intern_stack(st, r, th, &stack_id)) < 0) return rc;
  bf_sample s = {.thread_id = r->store_thread_id, .stack_id = stack_id, .ts_ns = ts, .flags = flags, .count = 1, .weight = weight};
  if (k && k->wait) {
    if (k->target && !k->target->user_id &&
        (rc = bf_store_intern_string(st, k->target->text, &k->target->user_id)) < 0)
      return rc;
    s.wait = k->wait;
    s.majflt = k->majflt;
    s.runq_ns = k->runq_ns;
    s.cpu_ns = k->cpu_ns;
    s.wait_target = k->target ? k->target->user_id : 0;
  }
  if (r->tid < 0) { /* an asyncio task (tasks.h): a run of one stack is one record */
    if (r->held.count && r->held.stack_id == stack_id && r->held.flags == flags &&
        ts - r->held.ts_ns < TASK_RUN_NS) {
      r->held.count++;
      r->held.weight += weight;
      t->samples++;
      return 0;
    }
    if (r->held.count && (rc = bf_store_sample_add(st, t->session_id, &r->held)) < 0) return rc;
    r->held = s;
    t->samples++;
    return 0;
  }
  if ((rc = bf_store_sample_add(st, t->session_id, &s)) < 0) return rc;
  t->samples++;
  /* a wait the kernel recorded only now, longer than this sample could
   * hold, spans the samples before it (still buffered in the store) */
  if (k && k->wait && r->k_ledger < 0)
    r->k_ledger += bf_store_sample_amend_runq(st, t->session_id, r->store_thread_id, -r->k_ledger, K_AMEND_BACK);
  return 0;
}

/* Store a sample, or hold it while the database is locked (in order: once
 * anything is held, later samples queue behind it). */
int rec_keep_sample(bf_store *st, target *t, rec_thread *r, const bf_smp_thread *th,
                       const char *tname, int64_t ts, uint32_t flags, int64_t weight) {
  rec_kern k = kern_part(t, r, th, weight);
  if (t->npend == t->pend_head) {
    int rc = store_sample(st, t, r, th, tname, ts, flags, weight, &k);
    if (rc != -EBUSY) return rc;
  }
  size_t bytes = sizeof(pend_sample) + th->nframes * sizeof *th->frames + (tname ? strlen(tname) + 1 : 0);
  if (t->pend_bytes + bytes > PEND_MAX_BYTES) {
    t->lock_dropped++;
    return 0;
  }
  if (bf_vec_grow((void **)&t->pend, &t->cap_pend, t->npend + 1, sizeof *t->pend, 1024)) return -ENOMEM;
  pend_sample *p = &t->pend[t->npend];
  p->interned = 0;
  p->frames = th->nframes ? malloc(th->nframes * sizeof *th->frames) : NULL;
  p->name = tname ? strdup(tname) : NULL;
  if ((th->nframes && !p->frames) || (tname && !p->name)) {
    free(p->frames);
    free(p->name);
    return -ENOMEM;
  }
  if (th->nframes) memcpy(p->frames, th->frames, th->nframes * sizeof *th->frames);
  p->nframes = th->nframes;
  p->tid = r->tid;
  p->ts = ts;
  p->flags = flags;
  p->weight = weight;
  p->k = k;
  t->npend++;
  t->pend_bytes += bytes;
  t->lock_held++;
  return 0;
}

/* cpu clock: add a sample whose stack is interned, or hold it (in order)
 * while the database is locked. */
static int hold_interned(bf_store *st, target *t, rec_thread *r, const bf_sample *smp) {
  if (t->npend == t->pend_head) {
    int rc = bf_store_sample_add(st, t->session_id, smp);
    if (rc == 0) t->samples++;
    if (rc != -EBUSY) return rc;
  }
  if (t->pend_bytes + sizeof(pend_sample) > PEND_MAX_BYTES) {
    t->lock_dropped++;
    return 0;
  }
  if (bf_vec_grow((void **)&t->pend, &t->cap_pend, t->npend + 1, sizeof *t->pend, 1024)) return -ENOMEM;
  pend_sample *p = &t->pend[t->npend++];
  memset(p, 0, sizeof *p);
  p->interned = 1;
  p->smp = *smp;
  p->tid = r->tid;
  t->pend_bytes += sizeof(pend_sample);
  t->lock_held++;
  return 0;
}

/* Write held samples while the lock is free. Returns 0 (some may remain), or
 * a fatal store error. */
int rec_drain_pending(bf_store *st, target *t, int64_t now) {
  while (t->pend_head < t->npend) {
    pend_sample *p = &t->pend[t->pend_head];
    if (p->interned) {
      int rc = bf_store_sample_add(st, t->session_id, &p->smp);
      if (rc == -EBUSY) {
        t->next_drain_ns = now + 50000000;
        return 0;
      }
      if (rc < 0) return rc;
      t->samples++;
      t->pend_bytes -= sizeof(pend_sample);
      t->pend_head++;
      continue;
    }
    rec_thread *r = rec_thread_get(t, p->tid);
    if (!r) return -ENOMEM;
    if (!r->seen_ns) r->seen_ns = now;
    bf_smp_thread th = {.native_tid = p->tid, .nframes = p->nframes, .frames = p->frames};
    int rc = store_sample(st, t, r, &th, p->name, p->ts, p->flags, p->weight, &p->k);
    if (rc == -EBUSY) {
      t->next_drain_ns = now + 50000000; /* look again in 50 ms */
      return 0;
    }
    if (rc < 0) return rc;
    t->pend_bytes -= sizeof(pend_sample) + p->nframes * sizeof *p->frames + (p->name ? strlen(p->name) + 1 : 0);
    free(p->frames);
    free(p->name);
    t->pend_head++;
  }
  t->npend = t->pend_head = 0;
  t->pend_bytes = 0;
  return 0;
}

void rec_pending_free(target *t) {
  for (size_t i = t->pend_head; i < t->npend; i++) {
    free(t->pend[i].frames);
    free(t->pend[i].name);
  }
  free(t->pend);
  t->pend = NULL;
  t->npend = t->pend_head = t->cap_pend = 0;
}

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return x < y ? -1 : x > y;
}

/* A thread's context switches from /proc/PID/task/TID/status. */
static void switches(int pid, int64_t tid, long long *vol, long long *invol) {
  char p[96], line[256];
  *vol = *invol = -1;
  snprintf(p, sizeof p, "/proc/%d/task/%lld/status", pid, (long long)tid);
  FILE *f = fopen(p, "re");
  if (!f) return;
  while (fgets(line, sizeof line, f)) {
    sscanf(line, "voluntary_ctxt_switches: %lld", vol);
    sscanf(line, "nonvoluntary_ctxt_switches: %lld", invol);
  }
  fclose(f);
}

void rec_kern_summary(target *t, rec_thread *r) {
  if (!r->k_seen || r->tid <= 0) return;
  if (t->k_nrows == REC_KERN_ROWS_MAX) return;
  if (t->k_nrows == t->k_cap_rows) {
    size_t cap = t->k_cap_rows ? 2 * t->k_cap_rows : 16;
    rec_kern_row *nr = realloc(t->k_rows, cap * sizeof *nr);
    if (!nr) return;
    t->k_rows = nr;
    t->k_cap_rows = cap;
  }
  rec_kern_row *k = &t->k_rows[t->k_nrows++];
  *k = (rec_kern_row){.tid = r->tid, .runq_ns = r->k_runq_total_ns, .samples = r->k_runq_seen};
  if (r->k_runq_n) {
    qsort(r->k_runq_v, r->k_runq_n, sizeof *r->k_runq_v, cmp_i64);
    k->runq_p50_ns = r->k_runq_v[(r->k_runq_n - 1) / 2];
    k->runq_p99_ns = r->k_runq_v[(size_t)((double)(r->k_runq_n - 1) * 0.99)];
  }
  switches(t->pid, r->tid, &k->voluntary, &k->involuntary);
  r->k_seen = 0; /* once */
}
