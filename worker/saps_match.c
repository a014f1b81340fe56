/* Maximum-weight matching by Edmonds' blossom algorithm, primal-dual, on a
 * dense weight matrix (the formulation of Galil, "Efficient algorithms for
 * finding maximum matching in graphs", 1986), in integers throughout.
 *
 * Ids 0..n-1 are vertices, n..2n-1 non-trivial blossoms. Duals are kept
 * doubled for vertices (dual[v] = 2·u_v) and plain for blossoms
 * (dual[b] = z_b), so that with integer weights every quantity stays an
 * integer: the slack of an edge between two different top-level blossoms
 * is dual[u] + dual[v] - 2·w(u, v) (twice the true slack; no blossom holds
 * both ends, so no z term enters). All vertices of one alternating forest
 * have the parity of the free vertices, whose duals are all equal, so the
 * slack of an edge between two S-blossoms is even and half of it is exact.
 *
 * Instead of scanning vertices from a queue, every event is found by one
 * O(n) pass over the top-level blossoms: a tight edge shows up as a
 * candidate of delta 0. For that, best[x] names the S-blossom with the
 * least-slack edge to x (bslack[x] its slack, moved with the duals), and
 * g[a][b] the least-slack edge between two disjoint blossoms a and b.
 * Since the vertices of a blossom always change their duals together, the
 * order of the edges between a and b never changes while both exist, so
 * g[B][x] is set once, when B forms, as the best of its children's.
 *
 * The textbook algorithm starts a new stage, relabelling the whole forest,
 * after each augmentation; here only the two trees that met fall apart
 * (dissolve) and the search goes on with the others, whose edges stay
 * tight and whose free vertices keep the common, smallest dual. Between
 * two augmentations there are O(n) events of O(n) each, and a blossom's
 * formation costs O(n) per child: O(n^3) in all, a few milliseconds for
 * a complete graph of 256 vertices. */
#include "worker/saps_match.h"

#include <stdbool.h>
#include <stddef.h>
#include <string.h>

#include "common/alloc.h"

#define NONE (-1)

enum { LABEL_FREE = 0, LABEL_S = 1, LABEL_T = 2 };

struct saps_match {
    uint8_t *block;   /* owns every array below */
    uint32_t cap;     /* most vertices */
    int n;            /* vertices of the solve in progress */
    const int64_t *w; /* borrowed for the solve: n*n */
    int64_t *dual;    /* 2cap: doubled vertex duals, then blossom duals */
    int *mate;        /* cap: matched vertex or NONE */
    int *top;         /* cap: the top-level blossom holding each vertex */
    int *parent;      /* 2cap: the blossom one level up, NONE at the top */
    int *base;        /* 2cap: base vertex */
    int *label;       /* 2cap: LABEL_* of top-level blossoms */
    int *lfrom;       /* 2cap: the labelling edge lfrom -> lto, with lto */
    int *lto;         /* inside the blossom; NONE for a tree's root */
    int *tree;        /* 2cap: the free vertex at the root of the tree of a
                         labelled top-level blossom */
    int *best;        /* 2cap: S-blossom with the least-slack edge to it */
    int64_t *bslack;  /* 2cap: twice that edge's slack, kept up to date */
    int *nkids;       /* cap: children of blossom n + i */
    int16_t *kid;     /* cap*cap: children in cyclic order, the base's first */
    int16_t *ka;      /* cap*cap: edge ka[i] - kb[i] joins kid[i] (ka) and */
    int16_t *kb;      /* kid[i + 1 mod k] (kb) */
    int16_t *gu;      /* (2cap)^2: g[a][b] = edge gu - gv, gu in a, gv in b */
    int16_t *gv;
    uint8_t *used;  /* 2cap: blossom id in use */
    unsigned *mark; /* 2cap: visit stamps of the common-ancestor walk */
    unsigned stamp;
    int *stack; /* 2cap: depth-first walks over a blossom's leaves */
    int *path;  /* 2cap: one side of a new blossom */
    int *tops;  /* 2cap: the top-level ids, when !tops_stale */
    int ntops;
    bool tops_stale; /* set whenever a blossom forms or dissolves */
};

/* Between two augmentations there are at most about 5n events (see the
 * header comment), and at most n/2 augmentations; more means a broken
 * invariant, which must end in an error rather than a hang. */
#define MAX_EVENTS(n) ((16L * (n) + 64) * ((n) / 2 + 1))

void saps_match_destroy(saps_match *m)
{
    if (m == NULL)
        return;
    flps_free(m->block);
    flps_free(m);
}

/* The next `bytes` of the workspace's one block, kept 8-aligned; with
 * block NULL only the running size *used counts. */
static void *take(uint8_t *block, size_t *used, size_t bytes)
{
    void *p = block != NULL ? block + *used : NULL;

    *used += (bytes + 7) & ~(size_t)7;
    return p;
}

/* Points every array of m into block (NULL: none) and returns the block's
 * size. */
static size_t lay_out(saps_match *m, uint8_t *block)
{
    size_t c = m->cap, c2 = 2 * c, u = 0;
    int **ints[] = {&m->parent, &m->base, &m->label, &m->lfrom, &m->lto,
                    &m->tree,   &m->best, &m->stack, &m->path,  &m->tops};

    m->dual = take(block, &u, c2 * sizeof(*m->dual));
    m->bslack = take(block, &u, c2 * sizeof(*m->bslack));
    for (size_t i = 0; i < sizeof(ints) / sizeof(ints[0]); i++)
        *ints[i] = take(block, &u, c2 * sizeof(int));
    m->mate = take(block, &u, c * sizeof(*m->mate));
    m->top = take(block, &u, c * sizeof(*m->top));
    m->nkids = take(block, &u, c * sizeof(*m->nkids));
    m->mark = take(block, &u, c2 * sizeof(*m->mark));
    m->kid = take(block, &u, c * c * sizeof(*m->kid));
    m->ka = take(block, &u, c * c * sizeof(*m->ka));
    m->kb = take(block, &u, c * c * sizeof(*m->kb));
    m->gu = take(block, &u, c2 * c2 * sizeof(*m->gu));
    m->gv = take(block, &u, c2 * c2 * sizeof(*m->gv));
    m->used = take(block, &u, c2 * sizeof(*m->used));
    return u;
}

flps_err saps_match_create(uint32_t max_n, saps_match **out)
{
    saps_match *m;

    if (max_n == 0 || max_n > SAPS_MATCH_MAX_VERTICES || out == NULL)
        return FLPS_EINVAL;
    m = flps_calloc(1, sizeof(*m));
    if (m == NULL)
        return FLPS_ENOMEM;
    m->cap = max_n;
    /* One block for every array: one allocation, one failure path. */
    m->block = flps_calloc(1, lay_out(m, NULL));
    if (m->block == NULL) {
        flps_free(m);
        return FLPS_ENOMEM;
    }
    lay_out(m, m->block);
    *out = m;
    return FLPS_OK;
}

/* Index of g[a][b]. */
static size_t gi(const saps_match *m, int a, int b)
{
    return (size_t)a * (size_t)(2 * m->n) + (size_t)b;
}

/* Index of blossom b's child slot i. */
static size_t ki(const saps_match *m, int b, int i)
{
    return (size_t)(b - m->n) * m->cap + (size_t)i;
}

static int64_t weight(const saps_match *m, int u, int v)
{
    return m->w[(size_t)u * (size_t)m->n + (size_t)v];
}

/* Twice the slack of edge u-v, whose ends lie in different top-level
 * blossoms. */
static int64_t slack(const saps_match *m, int u, int v)
{
    return m->dual[u] + m->dual[v] - 2 * weight(m, u, v);
}

/* Twice the slack of g[a][b]; INT64_MAX when a and b share no edge. */
static int64_t gslack(const saps_match *m, int a, int b)
{
    size_t e = gi(m, a, b);

    if (m->gu[e] < 0)
        return INT64_MAX;
    return slack(m, m->gu[e], m->gv[e]);
}

static bool is_top(const saps_match *m, int b)
{
    if (b >= m->n && !m->used[b])
        return false;
    return m->parent[b] == NONE;
}

/* The top-level ids in increasing order, rebuilt after a change. The
 * loops over them are the algorithm's inner loops, and blossom ids are
 * mostly unused, so a list halves them. */
static int top_list(saps_match *m, const int **ids)
{
    if (m->tops_stale) {
        m->ntops = 0;
        for (int x = 0; x < 2 * m->n; x++)
            if (is_top(m, x))
                m->tops[m->ntops++] = x;
        m->tops_stale = false;
    }
    *ids = m->tops;
    return m->ntops;
}

/* top[v] = t for every vertex inside blossom b. */
static void set_top(saps_match *m, int b, int t)
{
    int sp = 0;

    m->stack[sp++] = b;
    while (sp > 0) {
        int x = m->stack[--sp];

        if (x < m->n) {
            m->top[x] = t;
            continue;
        }
        for (int i = 0; i < m->nkids[x - m->n]; i++)
            m->stack[sp++] = m->kid[ki(m, x, i)];
    }
}

/* best[b] afresh: the S-blossom with the least-slack edge to b. With
 * `give`, b is a new S-blossom and also offers its edges to every other
 * top-level blossom, taking over from its own children where they were
 * the provider. */
static void scan(saps_match *m, int b, bool give)
{
    const int *ids;
    int nt = top_list(m, &ids);

    m->best[b] = NONE;
    for (int t = 0; t < nt; t++) {
        int x = ids[t];
        int64_t s;

        if (x == b || m->gu[gi(m, b, x)] < 0)
            continue;
        s = gslack(m, b, x);
        if (give && (m->best[x] == NONE || s < m->bslack[x] ||
                     m->parent[m->best[x]] == b)) {
            m->best[x] = b;
            m->bslack[x] = s;
        }
        if (m->label[x] == LABEL_S &&
            (m->best[b] == NONE || s < m->bslack[b])) {
            m->best[b] = x;
            m->bslack[b] = s;
        }
    }
}

/* Label top-level blossom b S in the tree of free vertex `tree`, reached
 * over lfrom -> lto (NONE for a root). */
static void label_s(saps_match *m, int b, int lfrom, int lto, int tree)
{
    m->label[b] = LABEL_S;
    m->lfrom[b] = lfrom;
    m->lto[b] = lto;
    m->tree[b] = tree;
    scan(m, b, true);
}

/* A tight edge u-v from S-vertex u to the free top-level blossom of v: it
 * becomes T, and the blossom of its base's mate S. */
static void grow(saps_match *m, int u, int v)
{
    int x = m->top[v];
    int b = m->base[x];
    int mb = m->mate[b];

    m->label[x] = LABEL_T;
    m->lfrom[x] = u;
    m->lto[x] = v;
    m->tree[x] = m->tree[m->top[u]];
    label_s(m, m->top[mb], b, mb, m->tree[x]);
}

/* The S-blossom above S-blossom b in its alternating tree, NONE at the
 * root. */
static int tree_up(const saps_match *m, int b)
{
    if (m->lfrom[b] == NONE)
        return NONE;
    return m->top[m->lfrom[m->top[m->lfrom[b]]]];
}

/* The nearest common S-ancestor of S-blossoms a and b, or NONE when they
 * lie in different trees. The two walks take turns, so the cost is twice
 * the shorter distance to the answer. */
static int common_base(saps_match *m, int a, int b)
{
    if (++m->stamp == 0) {
        memset(m->mark, 0, 2 * m->cap * sizeof(*m->mark));
        m->stamp = 1;
    }
    while (a != NONE || b != NONE) {
        int t;

        if (a != NONE) {
            if (m->mark[a] == m->stamp)
                return a;
            m->mark[a] = m->stamp;
            a = tree_up(m, a);
        }
        t = a;
        a = b;
        b = t;
    }
    return NONE;
}

static int new_blossom_id(saps_match *m)
{
    for (int b = m->n; b < 2 * m->n; b++)
        if (!m->used[b])
            return b;
    return NONE; /* cannot happen: a laminar family of odd sets of >= 3
                    on n vertices has fewer than n/2 members */
}

/* g[B][x] and g[x][B] for every blossom x: the least-slack of B's
 * children's edges to x. (For x inside B the value is meaningless and
 * never read.) */
static void blossom_edges(saps_match *m, int b)
{
    int k = m->nkids[b - m->n];

    for (int x = 0; x < 2 * m->n; x++) {
        int bu = NONE, bv = NONE;
        int64_t bs = INT64_MAX;

        if (x == b || (x >= m->n && !m->used[x]))
            continue;
        for (int i = 0; i < k; i++) {
            size_t e = gi(m, m->kid[ki(m, b, i)], x);
            int64_t s;

            if (m->gu[e] < 0)
                continue;
            s = slack(m, m->gu[e], m->gv[e]);
            if (bu == NONE || s < bs) {
                bu = m->gu[e];
                bv = m->gv[e];
                bs = s;
            }
        }
        m->gu[gi(m, b, x)] = (int16_t)bu;
        m->gv[gi(m, b, x)] = (int16_t)bv;
        m->gu[gi(m, x, b)] = (int16_t)bv;
        m->gv[gi(m, x, b)] = (int16_t)bu;
    }
    m->gu[gi(m, b, b)] = NONE;
}

/* Shrink the odd cycle closed by tight edge u-v between two S-blossoms of
 * one tree, whose common ancestor is S-blossom bb, into a new S-blossom.
 * Children in cyclic order: bb, the u side from bb downwards, then the v
 * side from v upwards. */
static void add_blossom(saps_match *m, int bb, int u, int v)
{
    int b = new_blossom_id(m), r, k = 0, np = 0;

    r = b;
    m->used[b] = 1;
    m->parent[b] = NONE;
    m->base[b] = m->base[bb];
    m->dual[b] = 0;
    for (int x = m->top[u]; x != bb; x = m->top[m->lfrom[x]])
        m->path[np++] = x;
    m->kid[ki(m, r, k++)] = (int16_t)bb;
    for (int i = np - 1; i >= 0; i--) {
        int x = m->path[i];

        /* x hangs below the previous child by its labelling edge. */
        m->ka[ki(m, r, k - 1)] = (int16_t)m->lfrom[x];
        m->kb[ki(m, r, k - 1)] = (int16_t)m->lto[x];
        m->kid[ki(m, r, k++)] = (int16_t)x;
    }
    m->ka[ki(m, r, k - 1)] = (int16_t)u;
    m->kb[ki(m, r, k - 1)] = (int16_t)v;
    for (int y = m->top[v]; y != bb; y = m->top[m->lfrom[y]]) {
        m->kid[ki(m, r, k)] = (int16_t)y;
        m->ka[ki(m, r, k)] = (int16_t)m->lto[y];
        m->kb[ki(m, r, k)] = (int16_t)m->lfrom[y];
        k++;
    }
    m->nkids[b - m->n] = k;
    for (int i = 0; i < k; i++)
        m->parent[m->kid[ki(m, b, i)]] = b;
    set_top(m, b, b);
    m->tops_stale = true;
    blossom_edges(m, b);
    label_s(m, b, m->lfrom[bb], m->lto[bb], m->tree[bb]);
}

static void reverse_kids(saps_match *m, int b, int from, int to)
{
    for (int i = from, j = to - 1; i < j; i++, j--) {
        int16_t t;
        size_t p = ki(m, b, i), q = ki(m, b, j);

        t = m->kid[p], m->kid[p] = m->kid[q], m->kid[q] = t;
        t = m->ka[p], m->ka[p] = m->ka[q], m->ka[q] = t;
        t = m->kb[p], m->kb[p] = m->kb[q], m->kb[q] = t;
    }
}

/* Index of b's child that holds vertex or blossom x. */
static int child_index(const saps_match *m, int b, int x)
{
    int k = m->nkids[b - m->n];

    while (m->parent[x] != b)
        x = m->parent[x];
    for (int i = 0; i < k; i++)
        if (m->kid[ki(m, b, i)] == x)
            return i;
    return NONE;
}

static void rotate(saps_match *m, int b, int v);

/* Match a (in child ia of b) with c (in the next child round the cycle),
 * each child turned to have its end as its base. */
static void match_kids(saps_match *m, int b, int ia, int a, int c)
{
    int k = m->nkids[b - m->n];
    int ca = m->kid[ki(m, b, ia)], cc = m->kid[ki(m, b, (ia + 1) % k)];

    if (ca >= m->n)
        rotate(m, ca, a);
    if (cc >= m->n)
        rotate(m, cc, c);
    m->mate[a] = c;
    m->mate[c] = a;
}

/* Make vertex v the base of blossom b by flipping the even alternating
 * path inside b from v's child to the base child: children K0..K(k-1),
 * K0 the base's, matched kid edges are those of odd index. For v in Ki,
 * i even, the path runs Ki, Ki-1, ..., K0 and edges i-2, i-4, ..., 0
 * become matched; i odd, it runs Ki, ..., K(k-1), K0 and edges i+1, i+3,
 * ..., k-1 become matched. Then the cycle is turned to start at Ki. */
static void rotate(saps_match *m, int b, int v)
{
    int k = m->nkids[b - m->n];
    int i = child_index(m, b, v);
    int t = m->kid[ki(m, b, i)];

    if (t >= m->n)
        rotate(m, t, v);
    if (i % 2 == 0) {
        for (int j = i - 2; j >= 0; j -= 2)
            match_kids(m, b, j, m->ka[ki(m, b, j)], m->kb[ki(m, b, j)]);
    } else {
        for (int j = i + 1; j < k; j += 2)
            match_kids(m, b, j, m->ka[ki(m, b, j)], m->kb[ki(m, b, j)]);
    }
    reverse_kids(m, b, 0, i);
    reverse_kids(m, b, i, k);
    reverse_kids(m, b, 0, k);
    m->base[b] = v;
}

/* Augment along the path S-vertex u - S-vertex v between two trees: each
 * side is flipped up to its root. */
static void augment(saps_match *m, int u, int v)
{
    int side[2][2] = {{u, v}, {v, u}};

    for (int h = 0; h < 2; h++) {
        int s = side[h][0], j = side[h][1];

        for (;;) {
            int bs = m->top[s], bt, s2, j2;

            if (bs >= m->n)
                rotate(m, bs, s);
            m->mate[s] = j;
            if (m->lfrom[bs] == NONE)
                break;
            bt = m->top[m->lfrom[bs]];
            s2 = m->lfrom[bt];
            j2 = m->lto[bt];
            if (bt >= m->n)
                rotate(m, bt, j2);
            m->mate[j2] = s2;
            s = s2;
            j = j2;
        }
    }
}

/* Relabel the children of an expanded T-blossom b (already top-level,
 * entry child ie): along the even path from the entry child to the base
 * child they alternate T, S, ..., T, the base child keeping b's place in
 * the tree; the others become free. Every child gets its provider. */
static void relabel_expanded(saps_match *m, int b, int ie)
{
    int k = m->nkids[b - m->n];
    int step = ie % 2 == 0 ? -1 : 1;
    int cur = ie, from = m->lfrom[b], to = m->lto[b], lbl = LABEL_T;

    for (;;) {
        int c = m->kid[ki(m, b, cur)], next;

        if (lbl == LABEL_S) {
            label_s(m, c, from, to, m->tree[b]);
        } else {
            m->label[c] = LABEL_T;
            m->lfrom[c] = from;
            m->lto[c] = to;
            m->tree[c] = m->tree[b];
        }
        if (cur == 0)
            break;
        next = (cur + step + k) % k;
        if (step < 0) {
            from = m->kb[ki(m, b, next)];
            to = m->ka[ki(m, b, next)];
        } else {
            from = m->ka[ki(m, b, cur)];
            to = m->kb[ki(m, b, cur)];
        }
        lbl = lbl == LABEL_T ? LABEL_S : LABEL_T;
        cur = next;
    }
    /* The T-children need a provider too: their tree may be dissolved by
     * an augmentation elsewhere, and then they are free. */
    for (int i = 0; i < k; i++) {
        int c = m->kid[ki(m, b, i)];

        if (m->label[c] != LABEL_S)
            scan(m, c, false);
    }
}

/* Dissolve top-level blossom b into its children. At the end of a stage
 * (endstage) children of zero dual are dissolved too; in a stage b is a
 * T-blossom whose dual has reached zero, and its children are relabelled. */
static void expand(saps_match *m, int b, bool endstage)
{
    int k = m->nkids[b - m->n];
    int ie = endstage ? 0 : child_index(m, b, m->lto[b]);

    /* b leaves the top level first, so that relabelling its children
     * does not offer b's edges again; its child lists stay readable. */
    m->used[b] = 0;
    m->tops_stale = true;
    for (int i = 0; i < k; i++) {
        int c = m->kid[ki(m, b, i)];

        m->parent[c] = NONE;
        set_top(m, c, c);
        m->label[c] = LABEL_FREE;
        m->lfrom[c] = NONE;
        m->lto[c] = NONE;
        m->best[c] = NONE;
    }
    if (endstage) {
        for (int i = 0; i < k; i++) {
            int c = m->kid[ki(m, b, i)];

            if (c >= m->n && m->dual[c] == 0)
                expand(m, c, true);
        }
    } else {
        relabel_expanded(m, b, ie);
    }
}

enum { EV_DONE = 1, EV_GROW, EV_EDGE, EV_EXPAND };

/* The next event: the smallest step delta the duals can take, the kind of
 * event it ends in, and its edge (u, v) or blossom (u). Ties go to the
 * first kind checked; the free vertices' dual reaching zero ends the
 * algorithm. */
static int next_event(saps_match *m, int64_t *delta, int *eu, int *ev)
{
    int kind = EV_DONE;
    int64_t d = INT64_MAX;
    const int *ids;
    int nt = top_list(m, &ids);

    for (int v = 0; v < m->n; v++)
        if (m->dual[v] < d)
            d = m->dual[v];
    for (int t = 0; t < nt; t++) {
        int x = ids[t];
        int64_t s;
        size_t e;

        if (m->label[x] == LABEL_T) {
            if (x >= m->n && m->dual[x] < d) {
                d = m->dual[x];
                kind = EV_EXPAND;
                *eu = x;
            }
            continue;
        }
        if (m->best[x] == NONE)
            continue;
        e = gi(m, m->best[x], x);
        s = m->bslack[x];
        if (m->label[x] == LABEL_S)
            s /= 2; /* even: see the header comment */
        if (s < d) {
            d = s;
            kind = m->label[x] == LABEL_S ? EV_EDGE : EV_GROW;
            *eu = m->gu[e];
            *ev = m->gv[e];
        }
    }
    *delta = d;
    return kind;
}

static void move_duals(saps_match *m, int64_t d)
{
    const int *ids;
    int nt;

    if (d == 0)
        return;
    for (int v = 0; v < m->n; v++) {
        int l = m->label[m->top[v]];

        if (l == LABEL_S)
            m->dual[v] -= d;
        else if (l == LABEL_T)
            m->dual[v] += d;
    }
    nt = top_list(m, &ids);
    for (int t = 0; t < nt; t++) {
        int x = ids[t];

        if (x >= m->n && m->label[x] == LABEL_S)
            m->dual[x] += d;
        else if (x >= m->n && m->label[x] == LABEL_T)
            m->dual[x] -= d;
        /* The provider's side falls by d; x's side falls by d (S), rises
         * by d (T) or stays (free). */
        if (m->best[x] != NONE && m->label[x] != LABEL_T)
            m->bslack[x] -= m->label[x] == LABEL_S ? 2 * d : d;
    }
}

static void start_stage(saps_match *m)
{
    const int *ids;
    int nt = top_list(m, &ids);

    for (int t = 0; t < nt; t++) {
        int x = ids[t];

        m->label[x] = LABEL_FREE;
        m->lfrom[x] = NONE;
        m->lto[x] = NONE;
        m->best[x] = NONE;
    }
    for (int t = 0; t < nt; t++)
        if (m->mate[m->base[ids[t]]] == NONE)
            label_s(m, ids[t], NONE, NONE, m->base[ids[t]]);
}

/* After an augmentation between the trees of free vertices ta and tb,
 * both vertices are matched and their trees fall apart: every blossom of
 * them becomes free, and whoever had one of their S-blossoms as provider
 * looks for another. The other trees stay as they are, so the search goes
 * on without starting a new stage and relabelling the whole forest. */
static void dissolve(saps_match *m, int ta, int tb)
{
    const int *ids;
    int nt = top_list(m, &ids);

    for (int t = 0; t < nt; t++) {
        int x = ids[t];

        if (m->label[x] != LABEL_FREE &&
            (m->tree[x] == ta || m->tree[x] == tb)) {
            m->label[x] = LABEL_FREE;
            m->lfrom[x] = NONE;
            m->lto[x] = NONE;
        }
    }
    for (int t = 0; t < nt; t++) {
        int x = ids[t];

        if (m->best[x] != NONE && m->label[m->best[x]] != LABEL_S)
            scan(m, x, false);
    }
}

/* The search: grow the forest of alternating trees (one per free vertex)
 * event by event, augmenting whenever two trees meet, until the free
 * vertices' dual reaches zero (0) or an invariant broke (-1). */
static int run(saps_match *m)
{
    start_stage(m);
    for (long events = 0; events < MAX_EVENTS(m->n); events++) {
        int64_t d;
        int u = NONE, v = NONE, base, ta, tb;
        int kind = next_event(m, &d, &u, &v);

        move_duals(m, d);
        switch (kind) {
        case EV_DONE:
            return 0;
        case EV_GROW:
            grow(m, u, v);
            break;
        case EV_EXPAND:
            expand(m, u, false);
            break;
        default: /* EV_EDGE */
            base = common_base(m, m->top[u], m->top[v]);
            if (base != NONE) {
                add_blossom(m, base, u, v);
                break;
            }
            ta = m->tree[m->top[u]];
            tb = m->tree[m->top[v]];
            augment(m, u, v);
            dissolve(m, ta, tb);
            break;
        }
    }
    return -1;
}

static flps_err check_input(const saps_match *m, uint32_t n, const int64_t *w,
                            const int32_t *mate, int64_t *maxw)
{
    if (m == NULL || w == NULL || mate == NULL || n > m->cap)
        return FLPS_EINVAL;
    *maxw = 0;
    for (size_t i = 0; i < n; i++) {
        for (size_t j = i + 1; j < n; j++) {
            int64_t x = w[i * n + j];

            if (x != w[j * n + i] || x > SAPS_MATCH_MAX_WEIGHT)
                return FLPS_EINVAL;
            if (x > *maxw)
                *maxw = x;
        }
    }
    return FLPS_OK;
}

static void init_solve(saps_match *m, int64_t maxw)
{
    int n = m->n;

    for (int v = 0; v < n; v++) {
        m->dual[v] = maxw;
        m->mate[v] = NONE;
        m->top[v] = v;
        m->parent[v] = NONE;
        m->base[v] = v;
        for (int x = 0; x < n; x++) {
            bool edge = x != v && weight(m, v, x) > 0;

            m->gu[gi(m, v, x)] = (int16_t)(edge ? v : NONE);
            m->gv[gi(m, v, x)] = (int16_t)(edge ? x : NONE);
        }
    }
    for (int b = n; b < 2 * n; b++) {
        m->used[b] = 0;
        m->parent[b] = NONE;
    }
    m->tops_stale = true;
}

flps_err saps_match_solve(saps_match *m, uint32_t n, const int64_t *w,
                          int32_t *mate)
{
    int64_t maxw;
    flps_err rc = check_input(m, n, w, mate, &maxw);

    if (rc != FLPS_OK)
        return rc;
    m->n = (int)n;
    m->w = w;
    init_solve(m, maxw);
    if (maxw > 0) {
        if (run(m) < 0) {
            m->w = NULL;
            return FLPS_ESTATE;
        }
    }
    for (uint32_t v = 0; v < n; v++)
        mate[v] = m->mate[v];
    m->w = NULL;
    return FLPS_OK;
}
