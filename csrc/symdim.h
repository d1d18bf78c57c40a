/* Symbolic dimensions: the sizes a traced graph does not know until it runs.
 *
 * A dimension is an int64 everywhere (pr_view.shape, INTS attributes).  A
 * known size is >= 0.  An unknown one (a None in an input_signature, the
 * batch under reduce_retracing) is a *code*: PR_DIM_SYM_BASE - id * STEP,
 * where id names an expression in the symbol table of the graph being
 * traced.  Expressions are polynomials with integer coefficients over atoms
 * (the graph's symbols, and floor divisions of an expression by a constant),
 * kept in one canonical form and interned, so two dimensions are equal for
 * every binding of the symbols exactly when their codes are equal: the shape
 * rules' `a == b` tests work unchanged.  Codes are spaced STEP apart so that
 * arithmetic done on a code by mistake lands on no valid code and pr_infer
 * reports it.
 *
 * Shape rules compute with symbols through pr_dim_add/mul/floordiv/...; when
 * every operand is a known size they return plain integers, so the same rule
 * serves eager calls, tracing and the executor's per-binding planning.  At run
 * time the graph binds each symbol to the size of the inputs it came from
 * and evaluates codes (output shapes are recomputed by the shape rules;
 * attributes are evaluated with pr_dim_eval).
 *
 * Learned from tinygrad's symbolic shapes (tinygrad/uop/symbolic.py: a
 * variable-sized dimension is an expression, simplified to a canonical form)
 * and TensorFlow's None dimensions; no code is shared.
 */
#ifndef PR_SYMDIM_H
#define PR_SYMDIM_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#define PR_DIM_SYM_BASE (-((int64_t)1 << 40))
#define PR_DIM_SYM_STEP ((int64_t)1 << 20)
#define PR_DIM_MAX_EXPRS 65536
#define PR_DIM_ERROR INT64_MIN

static inline int pr_dim_is_sym(int64_t d) { return d <= PR_DIM_SYM_BASE; }

typedef struct pr_symtab pr_symtab;

pr_symtab *pr_symtab_new(void); /* NULL with MemoryError */
void pr_symtab_free(pr_symtab *t);
/* The code of the symbol called `name`, created on first use; PR_DIM_ERROR
 * with an exception on failure. */
int64_t pr_symtab_symbol(pr_symtab *t, const char *name);
int pr_symtab_n_symbols(const pr_symtab *t);
const char *pr_symtab_symbol_name(const pr_symtab *t, int k);
/* The symbol index of a code that is a plain symbol, else -1. */
int pr_dim_symbol_index(const pr_symtab *t, int64_t d);
/* The table of the graph traced in this thread, NULL when none: the state
 * the arithmetic below works in.  The tracer (graph.c) sets it whenever the
 * graph it traces changes; set returns the table it replaces. */
pr_symtab *pr_symtab_current(void);
pr_symtab *pr_symtab_set_current(pr_symtab *t);

/* Arithmetic on dimensions (known sizes or codes of the current table).
 * Returns a dimension, or PR_DIM_ERROR with a Python exception set (an
 * expression too complex, an overflow, a code but no table). */
int64_t pr_dim_add(int64_t a, int64_t b);
int64_t pr_dim_mul(int64_t a, int64_t b);
/* floor(a / c) for a known c > 0. */
int64_t pr_dim_floordiv(int64_t a, int64_t c);
/* a / b when b divides a for every binding: 1 and *q, 0 if not, -1 on error. */
int pr_dim_div_exact(int64_t a, int64_t b, int64_t *q);
/* Whether a and b can be equal: they are the same dimension, or one is
 * unknown and they do not differ by a constant (then a shape rule accepts
 * them while tracing; the plan checks the sizes of every call).  Shape rules
 * compare with this where the eager rule requires equality. */
int pr_dim_maybe_equal(int64_t a, int64_t b);
/* Whether d is a size >= 0 or a code of the current table. */
int pr_dim_valid(int64_t d);
/* Element count of a shape: a size, a code, or -1 (negative or invalid
 * dimension, or a byte count of the known part past 2^63 - 1). */
int64_t pr_dims_size(int ndim, const int64_t *shape, size_t itemsize);
/* Whether any of the n dims is a code. */
int pr_dims_symbolic(int n, const int64_t *dims);

/* The value of d for symbol values `binding` (indexed like the table's
 * symbols): 0 and *out, or -1 with ValueError (overflow or a negative size). */
int pr_dim_eval(const pr_symtab *t, int64_t d, const int64_t *binding, int64_t *out);
/* d as text ("batch", "3072*batch", "(h + 1)//2"); `t` may be NULL. */
const char *pr_dim_str(const pr_symtab *t, int64_t d, char *buf, size_t n);

#endif
