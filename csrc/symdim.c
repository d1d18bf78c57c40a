/* Symbolic dimensions (see symdim.h): canonical polynomials over atoms,
 * interned per graph.
 *
 * An expression is c0 + sum_i coef_i * m_i, where each monomial m_i is a
 * sorted product of at most MAX_DEG atoms and the terms are sorted with no
 * two equal monomials and no zero coefficient.  An atom is a symbol, or
 * floor(R / c) for an expression R whose coefficients are all in [0, c)
 * (what is left after taking out the multiples of c, so that equal floor
 * divisions get one atom).  Equal canonical forms are interned once: equal
 * codes mean equal sizes for every binding.
 */
#include "symdim.h"

#include <string.h>

#define MAX_TERMS 8
#define MAX_DEG 8 /* PR_MAX_DIMS: the product of a whole shape */
#define NO_ATOM (-1)

typedef struct {
    int64_t coef;
    int32_t atom[MAX_DEG]; /* ascending, then NO_ATOM */
} term;

typedef struct {
    int64_t c0;
    int32_t nt;
    int32_t pad;
    term t[MAX_TERMS];
} poly;

enum { ATOM_SYMBOL, ATOM_FLOORDIV };

typedef struct {
    int kind;
    int sym;       /* ATOM_SYMBOL: symbol index */
    int64_t num;   /* ATOM_FLOORDIV: code of the numerator */
    int64_t div;   /* ATOM_FLOORDIV: the divisor (> 1) */
} atom;

struct pr_symtab {
    poly *e;
    int n_e, cap_e;
    atom *a;
    int n_a, cap_a;
    char **names;      /* per symbol (owned) */
    int *sym_atom;     /* per symbol: its atom */
    int n_sym, cap_sym;
};

static _Thread_local pr_symtab *current_table;

pr_symtab *pr_symtab_current(void) { return current_table; }

pr_symtab *pr_symtab_set_current(pr_symtab *t) {
    pr_symtab *prev = current_table;
    current_table = t;
    return prev;
}

pr_symtab *pr_symtab_new(void) {
    pr_symtab *t = PyMem_Calloc(1, sizeof *t);
    if (!t) PyErr_NoMemory();
    return t;
}

void pr_symtab_free(pr_symtab *t) {
    if (!t) return;
    PyMem_Free(t->e);
    PyMem_Free(t->a);
    for (int k = 0; k < t->n_sym; k++) PyMem_Free(t->names[k]);
    PyMem_Free(t->names);
    PyMem_Free(t->sym_atom);
    PyMem_Free(t);
}

static int64_t code_of(int id) { return PR_DIM_SYM_BASE - (int64_t)id * PR_DIM_SYM_STEP; }

/* The expression id of a code, or -1 if it is no code of t. */
static int id_of(const pr_symtab *t, int64_t d) {
    if (!t || !pr_dim_is_sym(d)) return -1;
    int64_t off = PR_DIM_SYM_BASE - d;
    if (off % PR_DIM_SYM_STEP) return -1;
    int64_t id = off / PR_DIM_SYM_STEP;
    return id < t->n_e ? (int)id : -1;
}

static int64_t fail(PyObject *exc, const char *msg) {
    PyErr_SetString(exc, msg);
    return PR_DIM_ERROR;
}

static int64_t too_complex(void) {
    return fail(PyExc_ValueError,
                "a symbolic dimension became too complex to track (more than 8 terms or a "
                "product of more than 8 unknown sizes); use static shapes for this function");
}

static int64_t overflow(void) {
    return fail(PyExc_ValueError, "a symbolic dimension's coefficients overflow int64");
}

static int64_t no_table(void) {
    return fail(PyExc_SystemError,
                "a symbolic dimension was used outside the function traced with it");
}

/* ---- canonical form ------------------------------------------------------- */

static int mono_cmp(const int32_t *x, const int32_t *y) {
    for (int k = 0; k < MAX_DEG; k++)
        if (x[k] != y[k]) return x[k] < y[k] ? -1 : 1;
    return 0;
}

/* Add coef * m to p (m sorted), keeping p canonical.  0, or -1 (too many terms). */
static int add_term(poly *p, int64_t coef, const int32_t *m) {
    if (coef == 0) return 0;
    int i = 0;
    while (i < p->nt && mono_cmp(p->t[i].atom, m) < 0) i++;
    if (i < p->nt && mono_cmp(p->t[i].atom, m) == 0) {
        if (__builtin_add_overflow(p->t[i].coef, coef, &p->t[i].coef)) return -2;
        if (p->t[i].coef == 0) {
            memmove(&p->t[i], &p->t[i + 1], sizeof(term) * (size_t)(p->nt - i - 1));
            p->nt--;
            memset(&p->t[p->nt], 0, sizeof(term));
        }
        return 0;
    }
    if (p->nt == MAX_TERMS) return -1;
    memmove(&p->t[i + 1], &p->t[i], sizeof(term) * (size_t)(p->nt - i));
    p->t[i].coef = coef;
    memcpy(p->t[i].atom, m, sizeof(int32_t) * MAX_DEG);
    p->nt++;
    return 0;
}

static int64_t term_error(int rc) { return rc == -1 ? too_complex() : overflow(); }

static void poly_const(poly *p, int64_t c) {
    memset(p, 0, sizeof *p);
    p->c0 = c;
}

/* d as a polynomial (known sizes are constants); -1 if d is not valid. */
static int poly_of(const pr_symtab *t, int64_t d, poly *p) {
    if (!pr_dim_is_sym(d)) {
        poly_const(p, d);
        return 0;
    }
    int id = id_of(t, d);
    if (id < 0) return no_table(), -1;
    *p = t->e[id];
    return 0;
}

static int grow(void **arr, int *cap, int n, size_t item) {
    if (n < *cap) return 0;
    int c = *cap ? 2 * *cap : 16;
    void *q = PyMem_Realloc(*arr, item * (size_t)c);
    if (!q) return PyErr_NoMemory(), -1;
    *arr = q;
    *cap = c;
    return 0;
}

/* The dimension of a canonical polynomial: its constant, or its interned code. */
static int64_t intern(pr_symtab *t, const poly *p) {
    if (p->nt == 0) return p->c0;
    for (int i = 0; i < t->n_e; i++)
        if (memcmp(&t->e[i], p, sizeof *p) == 0) return code_of(i);
    if (t->n_e == PR_DIM_MAX_EXPRS)
        return fail(PyExc_ValueError, "too many symbolic dimensions in one traced function");
    if (grow((void **)&t->e, &t->cap_e, t->n_e, sizeof(poly)) < 0) return PR_DIM_ERROR;
    t->e[t->n_e] = *p;
    return code_of(t->n_e++);
}

static int64_t atom_code(pr_symtab *t, const atom *x) {
    int k = 0;
    while (k < t->n_a && !(t->a[k].kind == x->kind && t->a[k].sym == x->sym &&
                           t->a[k].num == x->num && t->a[k].div == x->div))
        k++;
    if (k == t->n_a) {
        if (grow((void **)&t->a, &t->cap_a, t->n_a, sizeof(atom)) < 0) return PR_DIM_ERROR;
        t->a[t->n_a++] = *x;
    }
    poly p;
    poly_const(&p, 0);
    int32_t m[MAX_DEG];
    for (int i = 0; i < MAX_DEG; i++) m[i] = i ? NO_ATOM : k;
    add_term(&p, 1, m);
    return intern(t, &p);
}

int64_t pr_symtab_symbol(pr_symtab *t, const char *name) {
    for (int k = 0; k < t->n_sym; k++)
        if (strcmp(t->names[k], name) == 0) return atom_code(t, &t->a[t->sym_atom[k]]);
    int cap = t->cap_sym;
    if (grow((void **)&t->names, &cap, t->n_sym, sizeof *t->names) < 0 ||
        grow((void **)&t->sym_atom, &t->cap_sym, t->n_sym, sizeof(int)) < 0)
        return PR_DIM_ERROR;
    size_t len = strlen(name) + 1;
    char *copy = PyMem_Malloc(len);
    if (!copy) return PyErr_NoMemory(), PR_DIM_ERROR;
    memcpy(copy, name, len);
    atom x = {ATOM_SYMBOL, t->n_sym, 0, 0};
    int64_t code = atom_code(t, &x);
    if (code == PR_DIM_ERROR) {
        PyMem_Free(copy);
        return code;
    }
    t->names[t->n_sym] = copy;
    t->sym_atom[t->n_sym++] = t->n_a - 1;
    return code;
}

int pr_symtab_n_symbols(const pr_symtab *t) { return t ? t->n_sym : 0; }
const char *pr_symtab_symbol_name(const pr_symtab *t, int k) { return t->names[k]; }

int pr_dim_symbol_index(const pr_symtab *t, int64_t d) {
    int id = id_of(t, d);
    if (id < 0) return -1;
    const poly *p = &t->e[id];
    if (p->c0 != 0 || p->nt != 1 || p->t[0].coef != 1 || p->t[0].atom[1] != NO_ATOM) return -1;
    const atom *x = &t->a[p->t[0].atom[0]];
    return x->kind == ATOM_SYMBOL ? x->sym : -1;
}

/* ---- arithmetic ----------------------------------------------------------- */

/* The table and polynomials of two operands: 1 when either is symbolic
 * (*t, *p, *q filled), 0 when both are known sizes, -1 with an exception. */
static int operands(int64_t a, int64_t b, pr_symtab **t, poly *p, poly *q) {
    if (!pr_dim_is_sym(a) && !pr_dim_is_sym(b)) return 0;
    if (!(*t = pr_symtab_current())) return no_table(), -1;
    return poly_of(*t, a, p) < 0 || poly_of(*t, b, q) < 0 ? -1 : 1;
}

int64_t pr_dim_add(int64_t a, int64_t b) {
    pr_symtab *t;
    poly p, q;
    int64_t r;
    int sym = operands(a, b, &t, &p, &q);
    if (sym < 0) return PR_DIM_ERROR;
    if (!sym) return __builtin_add_overflow(a, b, &r) ? overflow() : r;
    if (__builtin_add_overflow(p.c0, q.c0, &p.c0)) return overflow();
    for (int i = 0; i < q.nt; i++) {
        int rc = add_term(&p, q.t[i].coef, q.t[i].atom);
        if (rc < 0) return term_error(rc);
    }
    return intern(t, &p);
}

/* The sorted product of two monomials; -1 if its degree is too high. */
static int mono_mul(const int32_t *x, const int32_t *y, int32_t *out) {
    int32_t all[2 * MAX_DEG];
    int n = 0;
    for (int k = 0; k < MAX_DEG; k++) {
        if (x[k] != NO_ATOM) all[n++] = x[k];
        if (y[k] != NO_ATOM) all[n++] = y[k];
    }
    if (n > MAX_DEG) return -1;
    for (int i = 1; i < n; i++) /* insertion sort: at most MAX_DEG entries */
        for (int j = i; j > 0 && all[j - 1] > all[j]; j--) {
            int32_t s = all[j];
            all[j] = all[j - 1], all[j - 1] = s;
        }
    for (int k = 0; k < MAX_DEG; k++) out[k] = k < n ? all[k] : NO_ATOM;
    return 0;
}

int64_t pr_dim_mul(int64_t a, int64_t b) {
    pr_symtab *t;
    poly p, q, r;
    int64_t known;
    int sym = operands(a, b, &t, &p, &q);
    if (sym < 0) return PR_DIM_ERROR;
    if (!sym) return __builtin_mul_overflow(a, b, &known) ? overflow() : known;
    poly_const(&r, 0);
    if (__builtin_mul_overflow(p.c0, q.c0, &r.c0)) return overflow();
    /* (p.c0 + P)(q.c0 + Q) = p.c0 q.c0 + p.c0 Q + q.c0 P + P Q */
    for (int side = 0; side < 2; side++) {
        const poly *x = side ? &q : &p, *y = side ? &p : &q;
        for (int i = 0; i < x->nt; i++) {
            int64_t c;
            if (__builtin_mul_overflow(x->t[i].coef, y->c0, &c)) return overflow();
            int rc = add_term(&r, c, x->t[i].atom);
            if (rc < 0) return term_error(rc);
        }
    }
    for (int i = 0; i < p.nt; i++)
        for (int j = 0; j < q.nt; j++) {
            int32_t m[MAX_DEG];
            int64_t c;
            if (mono_mul(p.t[i].atom, q.t[j].atom, m) < 0) return too_complex();
            if (__builtin_mul_overflow(p.t[i].coef, q.t[j].coef, &c)) return overflow();
            int rc = add_term(&r, c, m);
            if (rc < 0) return term_error(rc);
        }
    return intern(t, &r);
}

static int64_t floor_div(int64_t x, int64_t c) {
    int64_t q = x / c;
    return (x % c != 0 && x < 0) ? q - 1 : q;
}

int64_t pr_dim_floordiv(int64_t a, int64_t c) {
    if (pr_dim_is_sym(c) || c <= 0)
        return fail(PyExc_SystemError, "pr_dim_floordiv: the divisor must be a known size > 0");
    if (!pr_dim_is_sym(a)) return floor_div(a, c);
    if (c == 1) return a;
    pr_symtab *t = pr_symtab_current();
    poly p, quot, rem;
    if (poly_of(t, a, &p) < 0) return PR_DIM_ERROR;
    /* floor((floor(R / d) + k) / c) = floor((R + k*d) / (d*c)): nested floor
     * divisions have one canonical form (pool after pool, stride after stride). */
    if (p.nt == 1 && p.t[0].coef == 1 && p.t[0].atom[1] == NO_ATOM &&
        t->a[p.t[0].atom[0]].kind == ATOM_FLOORDIV) {
        const atom *f = &t->a[p.t[0].atom[0]];
        int64_t d = f->div, kd, dc, num = f->num;
        if (__builtin_mul_overflow(p.c0, d, &kd) || __builtin_mul_overflow(d, c, &dc))
            return overflow();
        int64_t inner = pr_dim_add(num, kd);
        return inner == PR_DIM_ERROR ? inner : pr_dim_floordiv(inner, dc);
    }
    /* p = c * quot + rem, every coefficient of rem in [0, c) */
    poly_const(&quot, floor_div(p.c0, c));
    poly_const(&rem, p.c0 - quot.c0 * c);
    for (int i = 0; i < p.nt; i++) {
        int64_t qc = floor_div(p.t[i].coef, c), rc = p.t[i].coef - qc * c;
        add_term(&quot, qc, p.t[i].atom);
        add_term(&rem, rc, p.t[i].atom);
    }
    int64_t q = intern(t, &quot);
    if (q == PR_DIM_ERROR || rem.nt == 0) return q; /* rem.c0 in [0, c): floor(rem / c) = 0 */
    int64_t num = intern(t, &rem);
    if (num == PR_DIM_ERROR) return num;
    atom x = {ATOM_FLOORDIV, -1, num, c};
    int64_t f = atom_code(t, &x);
    return f == PR_DIM_ERROR ? f : pr_dim_add(q, f);
}

int pr_dim_div_exact(int64_t a, int64_t b, int64_t *q) {
    if (!pr_dim_is_sym(b)) {
        if (b <= 0) return 0;
        if (!pr_dim_is_sym(a)) return a % b == 0 ? (*q = a / b, 1) : 0;
        pr_symtab *t = pr_symtab_current();
        poly p;
        if (poly_of(t, a, &p) < 0) return -1;
        if (p.c0 % b) return 0;
        p.c0 /= b;
        for (int i = 0; i < p.nt; i++) {
            if (p.t[i].coef % b) return 0;
            p.t[i].coef /= b;
        }
        return (*q = intern(t, &p)) == PR_DIM_ERROR ? -1 : 1;
    }
    /* b = c * m (one monomial): every term of a holds m and c divides it. */
    pr_symtab *t = pr_symtab_current();
    poly p, d, r;
    if (poly_of(t, a, &p) < 0 || poly_of(t, b, &d) < 0) return -1;
    if (d.c0 != 0 || d.nt != 1 || p.c0 != 0) return 0;
    poly_const(&r, 0);
    for (int i = 0; i < p.nt; i++) {
        if (p.t[i].coef % d.t[0].coef) return 0;
        int32_t rest[MAX_DEG];
        int n = 0, used[MAX_DEG] = {0};
        for (int k = 0; k < MAX_DEG; k++) {
            int32_t x = p.t[i].atom[k];
            if (x == NO_ATOM) continue;
            int hit = 0;
            for (int j = 0; j < MAX_DEG && !hit; j++)
                if (!used[j] && d.t[0].atom[j] == x) used[j] = hit = 1;
            if (!hit) rest[n++] = x;
        }
        for (int j = 0; j < MAX_DEG; j++)
            if (d.t[0].atom[j] != NO_ATOM && !used[j]) return 0;
        for (int k = n; k < MAX_DEG; k++) rest[k] = NO_ATOM;
        add_term(&r, p.t[i].coef / d.t[0].coef, rest);
    }
    /* Terms whose monomial became 1 are constants. */
    poly out;
    poly_const(&out, 0);
    for (int i = 0; i < r.nt; i++) {
        if (r.t[i].atom[0] == NO_ATOM) out.c0 += r.t[i].coef;
        else add_term(&out, r.t[i].coef, r.t[i].atom);
    }
    return (*q = intern(t, &out)) == PR_DIM_ERROR ? -1 : 1;
}

int pr_dim_maybe_equal(int64_t a, int64_t b) {
    if (a == b) return 1;
    /* Different codes are unequal for every size only when they differ by a
     * constant: canonical forms with the same terms (nothing interned). */
    pr_symtab *t;
    poly p, q;
    int sym = operands(a, b, &t, &p, &q);
    if (sym <= 0) {
        PyErr_Clear();
        return sym < 0; /* two different known sizes: never equal */
    }
    return p.nt != q.nt || memcmp(p.t, q.t, sizeof(term) * (size_t)p.nt) != 0;
}

int pr_dim_valid(int64_t d) {
    return d >= 0 || id_of(pr_symtab_current(), d) >= 0;
}

int pr_dims_symbolic(int n, const int64_t *dims) {
    for (int i = 0; i < n; i++)
        if (pr_dim_is_sym(dims[i])) return 1;
    return 0;
}

int64_t pr_dims_size(int ndim, const int64_t *shape, size_t itemsize) {
    int64_t known = (int64_t)itemsize, sym = 1;
    int empty = 0, symbolic = 0;
    for (int d = 0; d < ndim; d++) {
        if (pr_dim_is_sym(shape[d])) {
            if (!pr_dim_valid(shape[d])) return -1;
            symbolic = 1;
        } else if (shape[d] < 0) {
            return -1;
        } else if (shape[d] == 0) {
            empty = 1;
        } else if (__builtin_mul_overflow(known, shape[d], &known)) {
            return -1;
        }
    }
    if (empty) return 0;
    if (!symbolic) return known / (int64_t)itemsize;
    for (int d = 0; d < ndim; d++) {
        sym = pr_dim_mul(sym, shape[d]);
        if (sym == PR_DIM_ERROR) {
            PyErr_Clear(); /* the caller reports the shape */
            return -1;
        }
    }
    return sym;
}

/* ---- binding ---------------------------------------------------------------- */

static int eval_poly(const pr_symtab *t, const poly *p, const int64_t *binding, int64_t *out,
                     int depth);

static int eval_atom(const pr_symtab *t, int k, const int64_t *binding, int64_t *out, int depth) {
    const atom *x = &t->a[k];
    if (x->kind == ATOM_SYMBOL) return *out = binding[x->sym], 0;
    int64_t v;
    int id = id_of(t, x->num);
    if (id < 0 || depth > 64 || eval_poly(t, &t->e[id], binding, &v, depth + 1) < 0) return -1;
    *out = floor_div(v, x->div);
    return 0;
}

static int eval_poly(const pr_symtab *t, const poly *p, const int64_t *binding, int64_t *out,
                     int depth) {
    int64_t s = p->c0;
    for (int i = 0; i < p->nt; i++) {
        int64_t m = p->t[i].coef;
        for (int k = 0; k < MAX_DEG && p->t[i].atom[k] != NO_ATOM; k++) {
            int64_t v;
            if (eval_atom(t, p->t[i].atom[k], binding, &v, depth) < 0 ||
                __builtin_mul_overflow(m, v, &m))
                return -1;
        }
        if (__builtin_add_overflow(s, m, &s)) return -1;
    }
    *out = s;
    return 0;
}

int pr_dim_eval(const pr_symtab *t, int64_t d, const int64_t *binding, int64_t *out) {
    if (!pr_dim_is_sym(d)) return *out = d, 0;
    int id = id_of(t, d);
    if (id < 0) {
        PyErr_SetString(PyExc_SystemError, "pr_dim_eval: not a code of this graph");
        return -1;
    }
    if (eval_poly(t, &t->e[id], binding, out, 0) < 0 || *out < 0) {
        char s[128];
        PyErr_Format(PyExc_ValueError, "the dimension %s overflows or is negative for these sizes",
                     pr_dim_str(t, d, s, sizeof s));
        return -1;
    }
    return 0;
}

/* ---- text ------------------------------------------------------------------- */

static size_t put_s(char *buf, size_t n, size_t used, const char *s) {
    if (used >= n) return used;
    int k = snprintf(buf + used, n - used, "%s", s);
    return k < 0 ? used : used + (size_t)k;
}

static size_t put_i(char *buf, size_t n, size_t used, const char *fmt, long long v) {
    if (used >= n) return used;
    int k = snprintf(buf + used, n - used, fmt, v);
    return k < 0 ? used : used + (size_t)k;
}

static size_t poly_str(const pr_symtab *t, const poly *p, char *buf, size_t n, size_t used,
                       int depth);

static size_t atom_str(const pr_symtab *t, int k, char *buf, size_t n, size_t used, int depth) {
    const atom *x = &t->a[k];
    if (x->kind == ATOM_SYMBOL) return put_s(buf, n, used, t->names[x->sym]);
    int id = id_of(t, x->num);
    used = put_s(buf, n, used, "(");
    if (id >= 0 && depth < 8) used = poly_str(t, &t->e[id], buf, n, used, depth + 1);
    else used = put_s(buf, n, used, "...");
    return put_i(buf, n, used, ")//%lld", (long long)x->div);
}

static size_t poly_str(const pr_symtab *t, const poly *p, char *buf, size_t n, size_t used,
                       int depth) {
    for (int i = 0; i < p->nt; i++) {
        int64_t c = p->t[i].coef;
        if (i || c < 0) used = put_s(buf, n, used, c < 0 ? (i ? " - " : "-") : " + ");
        if (c < 0) c = -c;
        if (c != 1) used = put_i(buf, n, used, "%lld*", (long long)c);
        for (int k = 0; k < MAX_DEG && p->t[i].atom[k] != NO_ATOM; k++) {
            if (k) used = put_s(buf, n, used, "*");
            used = atom_str(t, p->t[i].atom[k], buf, n, used, depth);
        }
    }
    if (p->c0 > 0) used = put_i(buf, n, used, " + %lld", (long long)p->c0);
    if (p->c0 < 0) used = put_i(buf, n, used, " - %lld", -(long long)p->c0);
    return used;
}

const char *pr_dim_str(const pr_symtab *t, int64_t d, char *buf, size_t n) {
    if (n == 0) return buf;
    buf[0] = 0;
    if (!pr_dim_is_sym(d)) {
        snprintf(buf, n, "%lld", (long long)d);
        return buf;
    }
    int id = id_of(t, d);
    if (id < 0) {
        snprintf(buf, n, "None");
        return buf;
    }
    poly_str(t, &t->e[id], buf, n, 0, 0);
    return buf;
}
