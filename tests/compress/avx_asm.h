/* For the compress tests: a check of the generated code, the other half of
 * avx_state.h's check of the processor state. It disassembles the running
 * test binary (objdump -d), which links libflps_compress statically, and
 * follows every path through each function of a prefix that touches a
 * YMM or ZMM register: where a path leaves the function (ret, a call, a
 * jump out: a tail call) the upper halves must have been cleared by
 * vzeroupper or vzeroall since the last such instruction. GCC inserts
 * vzeroupper itself, but GCC 12 missed paths of topk_scan_avx2; this test
 * failed on them. */
#ifndef FLPS_TESTS_COMPRESS_AVX_ASM_H
#define FLPS_TESTS_COMPRESS_AVX_ASM_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct {
    uint64_t addr;
    char op[16];
    char args[96];
} avx_asm_insn;

typedef struct {
    int functions; /* functions checked: those that touch YMM/ZMM */
    int violations;
    char report[2048];
} avx_asm_result;

static int avx_asm_touches_upper(const avx_asm_insn *in)
{
    return strstr(in->args, "%ymm") != NULL || strstr(in->args, "%zmm") != NULL;
}

static int avx_asm_clears(const avx_asm_insn *in)
{
    return strcmp(in->op, "vzeroupper") == 0 || strcmp(in->op, "vzeroall") == 0;
}

/* The index of the instruction at addr, or -1. */
static long avx_asm_find(const avx_asm_insn *v, long n, uint64_t addr)
{
    for (long i = 0; i < n; i++)
        if (v[i].addr == addr)
            return i;
    return -1;
}

static void avx_asm_flag(avx_asm_result *res, const char *fn,
                         const avx_asm_insn *in)
{
    size_t len = strlen(res->report);

    res->violations++;
    snprintf(res->report + len, sizeof(res->report) - len,
             "%s: %s %s at %llx with the upper YMM state dirty\n", fn, in->op,
             in->args, (unsigned long long)in->addr);
}

/* Forward data flow over the function's instructions: dirty[i] is 1 when
 * some path reaches instruction i with the upper state in use. */
static void avx_asm_check_function(const char *fn, const avx_asm_insn *v,
                                   long n, avx_asm_result *res)
{
    signed char *state = malloc((size_t)n); /* -1 unseen, 0 clean, 1 dirty */
    long *work = malloc((size_t)n * 2 * sizeof(long) + sizeof(long));
    long nw = 0;
    int touches = 0;

    for (long i = 0; i < n; i++)
        touches |= avx_asm_touches_upper(&v[i]);
    if (!touches || state == NULL || work == NULL) {
        free(state);
        free(work);
        return;
    }
    res->functions++;
    memset(state, -1, (size_t)n);
    state[0] = 0;
    work[nw++] = 0;
    while (nw > 0) {
        long i = work[--nw], succ[2] = {-1, -1};
        const avx_asm_insn *in = &v[i];
        int out = state[i], exit_dirty = 0;

        if (avx_asm_clears(in))
            out = 0;
        else if (avx_asm_touches_upper(in))
            out = 1;
        if (strncmp(in->op, "ret", 3) == 0 ||
            (strcmp(in->op, "repz") == 0 && strncmp(in->args, "ret", 3) == 0)) {
            exit_dirty = out;
        } else if (strcmp(in->op, "ud2") == 0 || strcmp(in->op, "hlt") == 0) {
            /* no successor */
        } else if (strncmp(in->op, "call", 4) == 0 &&
                   (strstr(in->args, "<__asan_") != NULL ||
                    strstr(in->args, "<__ubsan_") != NULL)) {
            /* A sanitizer's report: it does not return to SSE code. */
            succ[0] = i + 1;
        } else if (strncmp(in->op, "call", 4) == 0) {
            /* Flagged, and the state stays as it was: a callee without
             * AVX code leaves the upper halves alone. */
            exit_dirty = out;
            succ[0] = i + 1;
        } else if (in->op[0] == 'j') {
            char *end;
            uint64_t t = strtoull(in->args, &end, 16);
            if (in->args[0] != '*' && end != in->args) {
                succ[0] = avx_asm_find(v, n, t);
                if (succ[0] < 0)
                    exit_dirty = out; /* a jump out: a tail call */
            }
            if (strncmp(in->op, "jmp", 3) != 0)
                succ[1] = i + 1;
        } else {
            succ[0] = i + 1;
        }
        if (exit_dirty == 1)
            avx_asm_flag(res, fn, in);
        for (int s = 0; s < 2; s++) {
            long j = succ[s];
            if (j < 0 || j >= n)
                continue;
            if (state[j] == -1 || (state[j] == 0 && out == 1)) {
                state[j] = (signed char)out;
                work[nw++] = j;
            }
        }
    }
    free(state);
    free(work);
}

/* Check every function of the running binary whose name starts with one
 * of the prefixes (a NULL-terminated list). Returns 0, or -1 when objdump
 * cannot be run. */
static int avx_asm_check(const char *const *prefixes, avx_asm_result *res)
{
    char exe[4096], cmd[4200], line[512], fn[256] = "";
    avx_asm_insn *v = NULL;
    long n = 0, cap = 0;
    int in_fn = 0, any = 0;
    ssize_t len = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    FILE *p;

    memset(res, 0, sizeof(*res));
    if (len <= 0)
        return -1;
    exe[len] = '\0';
    snprintf(cmd, sizeof(cmd), "objdump -d --no-show-raw-insn '%s' 2>/dev/null",
             exe);
    p = popen(cmd, "r");
    if (p == NULL)
        return -1;
    for (;;) {
        int eof = fgets(line, sizeof(line), p) == NULL;
        unsigned long long addr;
        char name[256];

        if (eof || sscanf(line, "%llx <%255[^>]>:", &addr, name) == 2) {
            if (in_fn)
                avx_asm_check_function(fn, v, n, res);
            if (eof)
                break;
            any = 1;
            n = 0;
            in_fn = 0;
            for (const char *const *q = prefixes; *q != NULL; q++)
                if (strncmp(name, *q, strlen(*q)) == 0)
                    in_fn = 1;
            snprintf(fn, sizeof(fn), "%s", name);
            continue;
        }
        if (!in_fn)
            continue;
        {
            char *colon = strchr(line, ':'), *tab;
            avx_asm_insn in;
            if (colon == NULL || sscanf(line, " %llx:", &addr) != 1)
                continue;
            tab = colon + 1;
            while (*tab == ' ' || *tab == '\t')
                tab++;
            memset(&in, 0, sizeof(in));
            in.addr = addr;
            if (sscanf(tab, "%15s %95[^\n]", in.op, in.args) < 1)
                continue;
            if (n == cap) {
                cap = cap ? 2 * cap : 256;
                v = realloc(v, (size_t)cap * sizeof(*v));
                if (v == NULL)
                    break;
            }
            v[n++] = in;
        }
    }
    free(v);
    return pclose(p) == 0 && any ? 0 : -1;
}

#endif
