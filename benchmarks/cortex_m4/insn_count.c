/* A QEMU TCG plugin counting the guest instructions a run executes (plugin API version 1,
 * QEMU 7.x; Debian's QEMU ships no plugin header, so the few API functions used are declared
 * here by hand, as in QEMU's include/qemu/qemu-plugin.h of that version).
 *
 *   gcc -O2 -fPIC -shared -fvisibility=hidden -o insn_count.so insn_count.c
 *   qemu-system-arm ... -plugin file=insn_count.so[,out=FILE][,syms=SYMFILE]
 *
 * (benchmarks/tinyml_m4.py builds and runs it so.) Written against QEMU 7.2's API (Debian 12's
 * QEMU); later releases changed it (API versions, per-vCPU inline operations).
 *
 * Without syms: prints "insns N" at exit (to FILE, or to stderr).
 * With syms=SYMFILE (lines "start_hex size_hex name", e.g. from nm --size-sort, any order):
 * also attributes every executed instruction to the symbol whose [start, start+size) holds its
 * address ("?" when none does) and prints "count name" for each symbol executed.
 * A symbol line may end in " h" (a helper: memcpy, memset, libgcc, libm): with syms, an
 * inclusive count is also kept, where a helper's instructions go to the last non-helper symbol
 * that ran before it (its caller, for leaf helpers), printed as "incl count name".
 * With mark=HEXADDR (repeatable) or marks=FILE (one hex address a line): every execution of
 * an instruction at one of those addresses records the running total, printed at exit as
 * "mark ADDR N" lines in execution order (the harness calls a marker function around each
 * TFLM operator; for relay_aot the marks are the kernels' entry points), so that differences
 * give per-operator counts.
 * Every instruction carries its own inline counter increment (not one per translation block),
 * so an exception in the middle of a block does not overcount. Single vCPU assumed (mps2). */
#include <inttypes.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))

typedef uint64_t qemu_plugin_id_t;
typedef struct qemu_info_t {
  const char *target_name;
  struct { int min; int cur; } version;
  bool system_emulation;
  union { struct { int smp_vcpus; int max_vcpus; } system; };
} qemu_info_t;
struct qemu_plugin_tb;
struct qemu_plugin_insn;
enum qemu_plugin_op { QEMU_PLUGIN_INLINE_ADD_U64 };
enum qemu_plugin_cb_flags { QEMU_PLUGIN_CB_NO_REGS, QEMU_PLUGIN_CB_R_REGS, QEMU_PLUGIN_CB_RW_REGS };
typedef void (*qemu_plugin_vcpu_udata_cb_t)(unsigned int vcpu_index, void *userdata);
typedef void (*qemu_plugin_udata_cb_t)(qemu_plugin_id_t id, void *userdata);
typedef void (*qemu_plugin_vcpu_tb_trans_cb_t)(qemu_plugin_id_t id, struct qemu_plugin_tb *tb);

void qemu_plugin_register_vcpu_tb_trans_cb(qemu_plugin_id_t id, qemu_plugin_vcpu_tb_trans_cb_t cb);
void qemu_plugin_register_vcpu_insn_exec_inline(struct qemu_plugin_insn *insn, enum qemu_plugin_op op,
                                                void *ptr, uint64_t imm);
void qemu_plugin_register_vcpu_insn_exec_cb(struct qemu_plugin_insn *insn, qemu_plugin_vcpu_udata_cb_t cb,
                                            enum qemu_plugin_cb_flags flags, void *userdata);
void qemu_plugin_register_vcpu_tb_exec_cb(struct qemu_plugin_tb *tb, qemu_plugin_vcpu_udata_cb_t cb,
                                          enum qemu_plugin_cb_flags flags, void *userdata);
uint64_t qemu_plugin_tb_vaddr(const struct qemu_plugin_tb *tb);
size_t qemu_plugin_tb_n_insns(const struct qemu_plugin_tb *tb);
struct qemu_plugin_insn *qemu_plugin_tb_get_insn(const struct qemu_plugin_tb *tb, size_t idx);
uint64_t qemu_plugin_insn_vaddr(const struct qemu_plugin_insn *insn);
void qemu_plugin_register_atexit_cb(qemu_plugin_id_t id, qemu_plugin_udata_cb_t cb, void *userdata);

EXPORT int qemu_plugin_version = 1;

typedef struct { uint64_t start, end; char *name; uint64_t count, incl; int helper; } sym_t;

static uint64_t total;
static sym_t *syms;   /* sorted by start; syms[nsyms] is the catch-all "?" */
static size_t nsyms;
static const char *out_path;
static sym_t *owner;            /* the last non-helper symbol executed (inclusive counts) */
static uint64_t mark_addrs[4096];
static size_t nmark_addrs;
typedef struct { uint64_t addr, total; } mark_t;
static mark_t *marks;
static size_t nmarks, capmarks;

static int by_start(const void *a, const void *b) {
  const sym_t *x = a, *y = b;
  return x->start < y->start ? -1 : x->start > y->start ? 1 : (x->end > y->end) - (x->end < y->end);
}

static int load_syms(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  size_t cap = 1024;
  syms = malloc(cap * sizeof *syms);
  char line[4096];
  while (fgets(line, sizeof line, f)) {
    uint64_t start, size;
    char name[4000], flag[8] = "";
    int n = sscanf(line, "%" SCNx64 " %" SCNx64 " %3999s %7s", &start, &size, name, flag);
    if (n < 3 || size == 0) continue;
    if (nsyms + 2 > cap) syms = realloc(syms, (cap *= 2) * sizeof *syms);
    syms[nsyms++] = (sym_t){start & ~(uint64_t)1, (start & ~(uint64_t)1) + size, strdup(name), 0, 0, flag[0] == 'h'};
  }
  fclose(f);
  qsort(syms, nsyms, sizeof *syms, by_start);
  syms[nsyms] = (sym_t){0, 0, strdup("?"), 0, 0, 0};
  owner = &syms[nsyms];
  return 0;
}

/* the last symbol starting at or before addr, if addr lies inside it */
static sym_t *lookup(uint64_t addr) {
  size_t lo = 0, hi = nsyms;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (syms[mid].start <= addr) lo = mid + 1; else hi = mid;
  }
  if (lo > 0 && addr < syms[lo - 1].end) return &syms[lo - 1];
  return &syms[nsyms];
}

/* a translation block's execution, for inclusive counts: udata packs its symbol and length */
typedef struct { sym_t *sym; uint64_t n; } tbinfo_t;
static void on_tb_exec(unsigned int vcpu, void *udata) {
  (void)vcpu;
  tbinfo_t *t = udata;
  if (!t->sym->helper) owner = t->sym;
  owner->incl += t->n;
}

static void on_mark(unsigned int vcpu, void *udata) {
  (void)vcpu;
  if (nmarks == capmarks) marks = realloc(marks, (capmarks = capmarks ? 2 * capmarks : 1024) * sizeof *marks);
  marks[nmarks++] = (mark_t){(uint64_t)(uintptr_t)udata, total};
}

static int is_mark(uint64_t addr) {
  for (size_t i = 0; i < nmark_addrs; i++)
    if (mark_addrs[i] == addr) return 1;
  return 0;
}

static void add_mark(uint64_t addr) {
  if (nmark_addrs < sizeof mark_addrs / sizeof *mark_addrs) mark_addrs[nmark_addrs++] = addr & ~(uint64_t)1;
}

static void on_translate(qemu_plugin_id_t id, struct qemu_plugin_tb *tb) {
  (void)id;
  size_t n = qemu_plugin_tb_n_insns(tb);
  if (syms) {
    tbinfo_t *t = malloc(sizeof *t); /* kept: QEMU may run the block until the end */
    t->sym = lookup(qemu_plugin_tb_vaddr(tb));
    t->n = n;
    qemu_plugin_register_vcpu_tb_exec_cb(tb, on_tb_exec, QEMU_PLUGIN_CB_NO_REGS, t);
  }
  for (size_t i = 0; i < n; i++) {
    struct qemu_plugin_insn *insn = qemu_plugin_tb_get_insn(tb, i);
    uint64_t va = qemu_plugin_insn_vaddr(insn) & ~(uint64_t)1;
    if (nmark_addrs && is_mark(va))
      qemu_plugin_register_vcpu_insn_exec_cb(insn, on_mark, QEMU_PLUGIN_CB_NO_REGS, (void *)(uintptr_t)va);
    qemu_plugin_register_vcpu_insn_exec_inline(insn, QEMU_PLUGIN_INLINE_ADD_U64, &total, 1);
    if (syms)
      qemu_plugin_register_vcpu_insn_exec_inline(insn, QEMU_PLUGIN_INLINE_ADD_U64,
                                                 &lookup(qemu_plugin_insn_vaddr(insn))->count, 1);
  }
}

static void on_exit_(qemu_plugin_id_t id, void *userdata) {
  (void)id; (void)userdata;
  FILE *f = out_path ? fopen(out_path, "w") : stderr;
  if (!f) f = stderr;
  fprintf(f, "insns %" PRIu64 "\n", total);
  if (syms)
    for (size_t i = 0; i <= nsyms; i++)
      if (syms[i].count) fprintf(f, "%" PRIu64 " %s\n", syms[i].count, syms[i].name);
  if (syms)
    for (size_t i = 0; i <= nsyms; i++)
      if (syms[i].incl) fprintf(f, "incl %" PRIu64 " %s\n", syms[i].incl, syms[i].name);
  for (size_t i = 0; i < nmarks; i++) fprintf(f, "mark %" PRIx64 " %" PRIu64 "\n", marks[i].addr, marks[i].total);
  if (f != stderr) fclose(f);
}

EXPORT int qemu_plugin_install(qemu_plugin_id_t id, const qemu_info_t *info, int argc, char **argv) {
  (void)info;
  for (int i = 0; i < argc; i++) {
    if (!strncmp(argv[i], "out=", 4)) out_path = argv[i] + 4;
    else if (!strncmp(argv[i], "mark=", 5)) add_mark(strtoull(argv[i] + 5, NULL, 16));
    else if (!strncmp(argv[i], "marks=", 6)) {
      FILE *m = fopen(argv[i] + 6, "r");
      char line[64];
      if (!m) { fprintf(stderr, "insn_count: cannot read %s\n", argv[i] + 6); return -1; }
      while (fgets(line, sizeof line, m)) add_mark(strtoull(line, NULL, 16));
      fclose(m);
    }
    else if (!strncmp(argv[i], "syms=", 5)) {
      if (load_syms(argv[i] + 5)) { fprintf(stderr, "insn_count: cannot read %s\n", argv[i] + 5); return -1; }
    } else { fprintf(stderr, "insn_count: unknown argument %s\n", argv[i]); return -1; }
  }
  qemu_plugin_register_vcpu_tb_trans_cb(id, on_translate);
  qemu_plugin_register_atexit_cb(id, on_exit_, NULL);
  return 0;
}
